"""Runtime Executor vs a hand-written NumPy step vs PyTorch eager on the reference MLP.

Reference model: MLP 784-512-512-10, relu, softmax cross entropy, Momentum(0.01, 0.9),
float32, batch 128. The runtime runs twice: its plain Executor (`runtime`), and the
CompiledProgram with the playbook's fusions on one place and one executor thread
(`runtime_compiled`: fused bias + relu forward and backward, fused optimizer). The
contenders run interleaved in one process (round after round, each contender K steps per
round) under the same BLAS/intra-op thread count, so machine drift hits
them alike; the median over rounds is reported. Also measured: per-step framework overhead on
a tiny model (where kernels cost nothing), the executor's own part of it (the kernels
replaying recorded outputs), and the cost of the event hooks.

    python benchmarks/bench_runtime.py                 # threads 1 and all cores
    python benchmarks/bench_runtime.py --threads 2 --rounds 7 --steps 40
    python benchmarks/bench_runtime.py --place gpu     # CUDAPlace(0) vs PyTorch CUDA eager

Prints a table, the ratios, and one JSON line (the last line of output).

`--place gpu`: the runtime on CUDAPlace(0) (CuPy) against PyTorch CUDA on the same MLP, the
batches already on the device for all (compute, not host->device copies, is compared), each step
fetching its loss (a device->host copy that waits for the step, in all), the device synchronised
around each timed run. Six contenders interleaved round by round: the runtime as it runs by
default (its steps captured into a CUDA graph and replayed: runtime/cuda_graph.py), the runtime
eager (FLAGS_new_executor_use_cuda_graph=0), the runtime eager with the generic kernels
(runtime/ops/fused.py off), the runtime eager with the per-op CUDA events the ops probe turns on
(runtime/gpu_timing.py), PyTorch eager, and PyTorch with the whole step captured by
torch.cuda.graphs (static input tensors, warm-up on a side stream, as PyTorch's docs do it).
Reports the GPU's name (CuPy's device properties) and the ratios against their targets: eager
runtime/torch eager >= 1.0, captured runtime/torch eager >= 1.5, captured runtime/torch graph
>= 0.9. Exits with status 2, saying why, without CuPy and a GPU or without PyTorch built with
CUDA.
"""

import argparse
import contextlib
import json
import os
import platform
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))

import runtime as fluid  # noqa: E402
from runtime import blas, events  # noqa: E402

try:
    import torch
except ImportError:  # PyTorch is optional: the comparison is skipped without it
    torch = None

SIZES = (784, 512, 512, 10)
LR, MU = 0.01, 0.9
TARGETS = {"eager_vs_torch": 1.0, "runtime_vs_torch": 1.5,  # issue: GPU, CUDA graphs
           "runtime_vs_torch_graph": 0.9}


# --- contenders ---------------------------------------------------------------------------------
def make_data(batch, n_batches, seed=0):
    rng = np.random.default_rng(seed)
    xs = rng.standard_normal((n_batches, batch, SIZES[0]), dtype=np.float32)
    ys = rng.integers(0, SIZES[-1], (n_batches, batch, 1)).astype(np.int64)
    return xs, ys


class RuntimeMLP:
    name = "runtime"

    def __init__(self, sizes=SIZES, seed=1, place=None):
        self.main, startup = fluid.Program(), fluid.Program()
        self.main.random_seed = startup.random_seed = seed
        with fluid.program_guard(self.main, startup), fluid.unique_name.guard():
            x = fluid.data("x", [None, sizes[0]])
            y = fluid.data("y", [None, 1], dtype="int64")
            h = x
            for width in sizes[1:-1]:
                h = fluid.layers.fc(h, width, act="relu")
            logits = fluid.layers.fc(h, sizes[-1])
            self.loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(logits, y))
            fluid.optimizer.Momentum(LR, MU).minimize(self.loss)
        self.scope = fluid.Scope()
        self.exe = fluid.Executor(place if place is not None else fluid.CPUPlace())
        self.exe.run(startup, scope=self.scope)
        self.n_ops = len(self.main.global_block().ops)

    def step(self, x, y):
        return self.exe.run(self.main, feed={"x": x, "y": y}, fetch_list=[self.loss],
                            scope=self.scope)[0][0]


class CompiledMLP(RuntimeMLP):
    """The same program the way the playbook runs it: a CompiledProgram with the fusions on
    (fuse_elewise_add_act_ops, fuse_all_optimizer_ops) on one CPU place, one executor thread."""

    name = "runtime_compiled"

    def __init__(self, sizes=SIZES, seed=1):
        super().__init__(sizes, seed)
        bs = fluid.BuildStrategy()
        bs.fuse_elewise_add_act_ops = bs.fuse_all_optimizer_ops = True
        es = fluid.ExecutionStrategy()
        es.num_threads = 1
        self.compiled = fluid.CompiledProgram(self.main).with_data_parallel(
            self.loss.name, build_strategy=bs, exec_strategy=es, places=fluid.cpu_places(1))

    def step(self, x, y):
        return self.exe.run(self.compiled, feed={"x": x, "y": y}, fetch_list=[self.loss],
                            scope=self.scope)[0][0]


class NumpyMLP:
    """A competent hand-written NumPy training step: same math, in-place where natural."""

    name = "numpy"

    def __init__(self, sizes=SIZES, seed=1):
        rng = np.random.default_rng(seed)
        self.params = []
        for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
            limit = np.sqrt(6.0 / (fan_in + fan_out))
            w = rng.uniform(-limit, limit, (fan_in, fan_out)).astype(np.float32)
            self.params += [w, np.zeros(fan_out, np.float32)]
        self.velocity = [np.zeros_like(p) for p in self.params]

    def step(self, x, y):
        ws, bs = self.params[0::2], self.params[1::2]
        acts = [x]
        for w, b in zip(ws[:-1], bs[:-1]):
            h = acts[-1] @ w
            h += b
            np.maximum(h, 0, out=h)
            acts.append(h)
        logits = acts[-1] @ ws[-1]
        logits += bs[-1]
        n, rows, labels = len(x), np.arange(len(x)), y[:, 0]
        shifted = logits - logits.max(axis=1, keepdims=True)
        exp = np.exp(shifted)
        total = exp.sum(axis=1, keepdims=True)
        loss = float(np.mean(np.log(total[:, 0]) - shifted[rows, labels]))
        d = exp / total
        d[rows, labels] -= 1
        d /= n
        grads = []
        for i in range(len(ws) - 1, -1, -1):
            grads = [acts[i].T @ d, d.sum(axis=0)] + grads
            if i:
                d = d @ ws[i].T
                d *= acts[i] > 0
        for p, g, v in zip(self.params, grads, self.velocity):
            v *= MU
            v += g
            p -= LR * v
        return loss


class TorchMLP:
    name = "torch"

    def __init__(self, sizes=SIZES, seed=1):
        torch.manual_seed(seed)
        layers = []
        for fan_in, fan_out in zip(sizes[:-2], sizes[1:-1]):
            layers += [torch.nn.Linear(fan_in, fan_out), torch.nn.ReLU()]
        layers.append(torch.nn.Linear(sizes[-2], sizes[-1]))
        self.model = torch.nn.Sequential(*layers)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=LR, momentum=MU)
        self.loss_fn = torch.nn.CrossEntropyLoss()
        self._cache = {}

    def tensors(self, x, y):
        key = id(x)
        if key not in self._cache:  # conversion is free in torch (shares memory); keep it out
            self._cache[key] = (torch.from_numpy(x), torch.from_numpy(y[:, 0]))
        return self._cache[key]

    def step(self, x, y):
        tx, ty = self.tensors(x, y)
        self.opt.zero_grad(set_to_none=True)
        loss = self.loss_fn(self.model(tx), ty)
        loss.backward()
        self.opt.step()
        return loss.item()


# --- measurement ----------------------------------------------------------------------------
def set_threads(n):
    blas.set_blas_threads(n)
    if torch is not None:
        torch.set_num_threads(n)


def time_steps(model, xs, ys, steps):
    sync = getattr(model, "sync", None)  # GPU contenders: nothing queued before or after
    if sync is not None:
        sync()
    t0 = time.perf_counter()
    for i in range(steps):
        model.step(xs[i % len(xs)], ys[i % len(ys)])
    if sync is not None:
        sync()
    return time.perf_counter() - t0


# An untimed pause before each contender's run, so that the previous one's worker threads
# (OpenMP/BLAS pools spin-wait for a while after their last task) are idle again.
SETTLE_S = 0.2


def interleaved(models, xs, ys, steps, rounds, warmup):
    for m in models:
        time_steps(m, xs, ys, warmup)
    times = {m.name: [] for m in models}
    for r in range(rounds):
        # rotate the order: each contender follows each other equally often (a contender's
        # thread pool, e.g. torch's OpenMP workers, can still spin when the next one starts)
        for m in models[r % len(models):] + models[:r % len(models)]:
            time.sleep(SETTLE_S)
            times[m.name].append(time_steps(m, xs, ys, steps) / steps)
    return {k: statistics.median(v) for k, v in times.items()}


def throughput(args, threads):
    set_threads(threads)
    xs, ys = make_data(args.batch_size, 8)
    models = [RuntimeMLP(), CompiledMLP(), NumpyMLP()] + (
        [TorchMLP()] if torch is not None else [])
    step_s = interleaved(models, xs, ys, args.steps, args.rounds, args.warmup)
    rate = {k: args.batch_size / v for k, v in step_s.items()}
    result = {"threads": threads, "samples_per_s": {k: round(v, 1) for k, v in rate.items()},
              "runtime_vs_numpy": round(rate["runtime"] / rate["numpy"], 3),
              "compiled_vs_numpy": round(rate["runtime_compiled"] / rate["numpy"], 3)}
    if "torch" in rate:
        result["runtime_vs_torch"] = round(rate["runtime"] / rate["torch"], 3)
        result["compiled_vs_torch"] = round(rate["runtime_compiled"] / rate["torch"], 3)
    return result


def overhead(args):
    """Framework cost per step and per op on a tiny model, and the event hooks' cost."""
    set_threads(1)
    sizes = (8, 8, 2)
    xs, ys = make_data(4, 8)
    xs = np.ascontiguousarray(xs[:, :, :8])
    ys = ys % 2
    rt, hand = RuntimeMLP(sizes), NumpyMLP(sizes)
    steps = args.steps * 20
    base = interleaved([rt, hand], xs, ys, steps, args.rounds, args.warmup)
    per_step_us = (base["runtime"] - base["numpy"]) * 1e6
    replayed = ReplayedKernelsMLP(sizes, xs, ys)
    executor_s = interleaved([replayed], xs, ys, steps, args.rounds, args.warmup)["replayed"]
    with_step = _with_subscriber(rt, "step_end", xs, ys, steps, args)
    with_ops = _with_subscriber(rt, "op_end", xs, ys, steps, args)
    checks_ns = _hook_check_ns()
    return {"tiny_model_ops": rt.n_ops,
            "runtime_step_us": round(base["runtime"] * 1e6, 1),
            "numpy_step_us": round(base["numpy"] * 1e6, 1),
            "framework_overhead_us_per_step": round(per_step_us, 1),
            "framework_overhead_us_per_op": round(per_step_us / rt.n_ops, 2),
            "executor_only_us_per_step": round(executor_s * 1e6, 1),
            "executor_only_us_per_op": round(executor_s * 1e6 / rt.n_ops, 2),
            "idle_hook_checks_ns_per_step": round(checks_ns, 1),
            "step_end_subscriber_us_per_step": round((with_step - base["runtime"]) * 1e6, 1),
            "op_end_subscriber_us_per_step": round((with_ops - base["runtime"]) * 1e6, 1)}


class ReplayedKernelsMLP(RuntimeMLP):
    """The tiny model with every kernel replaced, after one real step, by a function giving
    back the outputs it recorded there: what is left of a step is the executor's own work
    (dispatch and the per-step work), which the overhead line mixes with the kernels' excess
    over the hand-written step (their checks and generality)."""

    name = "replayed"

    def __init__(self, sizes, xs, ys):
        super().__init__(sizes)
        self.step(xs[0], ys[0])
        plan = [p for p in self.exe._plans.values() if not p.is_startup][-1]  # (internals)
        outputs = {}
        for step in plan.steps:
            step.fn = _recording(step.fn, outputs, step)
        self.step(xs[0], ys[0])
        for step in plan.steps:
            step.fn = _replaying(outputs[id(step)])


def _recording(kernel, outputs, step):
    def record(ctx, ins, attrs):
        out = kernel(ctx, ins, attrs)
        outputs[id(step)] = {k: v.copy() if hasattr(v, "copy") else v for k, v in out.items()}
        return out
    return record


def _replaying(out):
    return lambda ctx, ins, attrs: out


def _with_subscriber(model, channel, xs, ys, steps, args):
    with events.subscribe(channel, lambda record: None):
        return interleaved([model], xs, ys, steps, args.rounds, args.warmup)["runtime"]


def _hook_check_ns(n=200_000):
    """What Executor.run pays per step for its hook sites when nobody listens: three channel
    tests and one flag lookup, timed in a loop against an empty loop."""
    from runtime.flags import FLAGS
    get = FLAGS.get
    t0 = time.perf_counter()
    for _ in range(n):
        if events.step_begin.subs or events.op_end.subs or get("check_nan_inf"):
            pass
        if events.step_end.subs:
            pass
    t1 = time.perf_counter()
    for _ in range(n):
        pass
    t2 = time.perf_counter()
    return ((t1 - t0) - (t2 - t1)) / n * 1e9


# --- GPU --------------------------------------------------------------------------------------
class RuntimeCudaMLP(RuntimeMLP):
    """The runtime on CUDAPlace(0), fed CuPy arrays already on the device."""

    def __init__(self, cupy):
        super().__init__(place=fluid.CUDAPlace(0))
        self.cupy = cupy

    def sync(self):
        self.cupy.cuda.runtime.deviceSynchronize()


class TorchCudaMLP(TorchMLP):
    """PyTorch CUDA eager, fed tensors already on the device."""

    def __init__(self):
        super().__init__()
        self.model.to("cuda")  # moves the parameters in place: the optimizer keeps them

    def tensors(self, x, y):
        return x, y[:, 0]

    def sync(self):
        torch.cuda.synchronize()


class TorchCudaGraphMLP(TorchCudaMLP):
    """PyTorch with the whole training step captured once into a CUDA graph (torch.cuda.graphs:
    static inputs, three warm-up steps on a side stream, gradients set to None before the
    capture so the graph's pool holds them) and replayed; the loss read with .item()."""

    name = "torch_graph"

    def __init__(self):
        super().__init__()
        self.graph = None

    def _capture(self, x, y):
        self.static_x, self.static_y = x.clone(), y.clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                self._train_step(self.static_x, self.static_y)
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        self.opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(self.graph):
            self.static_loss = self.loss_fn(self.model(self.static_x), self.static_y)
            self.static_loss.backward()
            self.opt.step()

    def _train_step(self, x, y):
        self.opt.zero_grad(set_to_none=True)
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        self.opt.step()

    def step(self, x, y):
        tx, ty = self.tensors(x, y)
        if self.graph is None:
            self._capture(tx, ty)
        self.static_x.copy_(tx)
        self.static_y.copy_(ty)
        self.graph.replay()
        return self.static_loss.item()


def gpu_missing():
    """Why `--place gpu` cannot run here, or None."""
    from runtime.backend import cupy_status
    cupy, count, reason = cupy_status()
    if cupy is None:
        return f"the runtime's GPU path needs CuPy and an NVIDIA GPU: {reason}"
    if torch is None:
        return "the comparison needs PyTorch (pip install torch, a CUDA build)"
    if not torch.cuda.is_available():
        return f"PyTorch {torch.__version__} sees no CUDA device (a CPU-only build?)"
    return None


def gpu_name(cupy, device_id=0):
    name = cupy.cuda.runtime.getDeviceProperties(device_id)["name"]
    return name.decode() if isinstance(name, bytes) else str(name)


class Switched:
    """A contender's model run under a switch (a context manager factory) held for each timed
    run: the fused kernels off, or the ops probe's CUDA events on."""

    def __init__(self, model, name, switch):
        self.model, self.name, self.switch = model, name, switch
        self.sync = model.sync

    def step(self, x, y):
        return self.model.step(x, y)


def _time_switched(model, xs, ys, steps):
    if isinstance(model, Switched):
        with model.switch():
            return time_steps(model, xs, ys, steps)
    return time_steps(model, xs, ys, steps)


def race(models, data_for, args):
    """{contender: median seconds a step}: each model's `args.warmup` steps, then
    `args.rounds` rounds of `args.steps` steps each, the order rotating from round to round;
    `data_for(model)` gives its (xs, ys)."""
    times = {m.name: [] for m in models}
    for m in models:
        _time_switched(m, *data_for(m), args.warmup)
    for r in range(args.rounds):
        for m in models[r % len(models):] + models[:r % len(models)]:
            times[m.name].append(_time_switched(m, *data_for(m), args.steps) / args.steps)
    return {k: statistics.median(v) for k, v in times.items()}


@contextlib.contextmanager
def _eager():
    saved = fluid.get_flags(["FLAGS_new_executor_use_cuda_graph"])
    fluid.set_flags({"FLAGS_new_executor_use_cuda_graph": False})
    try:
        yield
    finally:
        fluid.set_flags(saved)


@contextlib.contextmanager
def _generic_kernels():
    from runtime.ops import fused
    fused.ENABLED[0] = False
    try:
        with _eager():  # (a captured graph would replay the fused kernels)
            yield
    finally:
        fused.ENABLED[0] = True


@contextlib.contextmanager
def _op_events():
    """What `--ops` turns on, on eager steps (with capture on, --ops times one step in 10
    eagerly and replays the others: the events' own cost is this contender's against the
    eager one)."""
    with _eager(), events.subscribe("op_end", lambda record: None):
        yield


def gpu_throughput(args, cupy):
    """samples/s of the runtime (captured; eager; eager with the generic kernels; eager with
    the ops probe's per-op CUDA events) and torch (eager; captured) on GPU 0, interleaved round
    by round."""
    xs, ys = make_data(args.batch_size, 8)
    runtime_model, torch_model, torch_graph = RuntimeCudaMLP(cupy), TorchCudaMLP(), \
        TorchCudaGraphMLP()
    models = [runtime_model, Switched(runtime_model, "runtime_eager", _eager),
              Switched(runtime_model, "runtime_generic", _generic_kernels),
              torch_model, torch_graph, Switched(runtime_model, "runtime_op_events", _op_events)]
    step_s, report = gpu_race(models, runtime_model, xs, ys, cupy, args)
    rate = report["samples_per_s"]
    return {**report,
            "runtime_vs_torch": round(rate["runtime"] / rate["torch"], 3),
            "eager_vs_torch": round(rate["runtime_eager"] / rate["torch"], 3),
            "runtime_vs_torch_graph": round(rate["runtime"] / rate["torch_graph"], 3),
            "generic_vs_torch": round(rate["runtime_generic"] / rate["torch"], 3),
            "targets": dict(TARGETS),
            "op_events_us_per_step": round(
                (step_s["runtime_op_events"] - step_s["runtime_eager"]) * 1e6, 1)}


def gpu_race(models, runtime_model, xs, ys, cupy, args):
    """`race` on GPU 0 with the batches on the device already (PyTorch's contenders, those
    named torch*, get tensors): ({contender: median seconds a step}, the report's shared
    fields: samples/s and ms a step per contender, the runtime's op count, whether its steps
    were captured and why not)."""
    on_device = (cupy.asarray(xs), cupy.asarray(ys))
    on_torch = (torch.from_numpy(xs).cuda(), torch.from_numpy(ys).cuda())
    step_s = race(models, lambda m: on_torch if m.name.startswith("torch") else on_device,
                  args)
    graphs = runtime_model.exe._graphs
    return step_s, {
        "samples_per_s": {k: round(args.batch_size / v, 1) for k, v in step_s.items()},
        "step_ms": {k: round(v * 1e3, 4) for k, v in step_s.items()},
        "runtime_ops": runtime_model.n_ops, "captured": len(graphs.captured()),
        "eager_reasons": list(graphs.reasons().values())}


def gpu_report(label, bench, model, batch_size):
    """(CuPy, the JSON report's first fields) for a race on GPU 0, its header printed; None,
    with why on stderr, where CuPy, a GPU or PyTorch with CUDA is missing."""
    why = gpu_missing()
    if why is not None:
        print(f"{label}: cannot run: {why}", file=sys.stderr)
        return None
    from runtime.backend import cupy_status
    cupy = cupy_status()[0]
    name = gpu_name(cupy)
    print(f"{model}, batch {batch_size}; GPU: {name}; CuPy {cupy.__version__}; "
          f"torch {torch.__version__}")
    return cupy, {"bench": bench, "place": "gpu", "model": model, "batch_size": batch_size,
                  "gpu": name, "cupy": cupy.__version__, "torch": torch.__version__}


def gpu_main(args):
    found = gpu_report("bench_runtime --place gpu", "runtime_mlp_gpu",
                       "MLP 784-512-512-10 Momentum float32", args.batch_size)
    if found is None:
        return 2
    cupy, report = found
    name = report["gpu"]
    r = gpu_throughput(args, cupy)
    report.update(r)
    rates = r["samples_per_s"]
    print(f"samples/s on {name}: runtime captured {rates['runtime']:.0f}, eager "
          f"{rates['runtime_eager']:.0f} (generic kernels {rates['runtime_generic']:.0f})  | "
          f"torch eager {rates['torch']:.0f}, CUDA graph {rates['torch_graph']:.0f}")
    for key, target in TARGETS.items():
        verdict = "meets" if r[key] >= target else "BELOW"
        print(f"  {key:24s} {r[key]:.3f}  ({verdict} the {target}x target)")
    if not r["captured"]:
        print(f"  the runtime's steps were not captured: {r['eager_reasons']}")
    print(f"per-op CUDA events (ops probe): +{r['op_events_us_per_step']} us/step over "
          f"{r['runtime_ops']} ops (against the eager step)")
    print(json.dumps(report))
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", default=f"1,{os.cpu_count()}",
                        help="comma-separated thread counts (BLAS and torch intra-op)")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--steps", type=int, default=30, help="steps per contender per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--place", choices=("cpu", "gpu"), default="cpu",
                        help="gpu: CUDAPlace(0) vs PyTorch CUDA eager (needs CuPy, torch+CUDA)")
    args = parser.parse_args(argv)
    if args.place == "gpu":
        return gpu_main(args)
    threads = sorted({int(t) for t in args.threads.split(",")})
    report = {"bench": "runtime_mlp", "model": "MLP 784-512-512-10 Momentum float32",
              "batch_size": args.batch_size, "cpu": platform.processor() or platform.machine(),
              "cores": os.cpu_count(), "blas": blas.blas_info()["version"],
              "torch": getattr(torch, "__version__", None), "results": []}
    print(f"{report['model']}, batch {args.batch_size}; BLAS: {report['blas']}; "
          f"torch: {report['torch'] or 'not installed'}")
    for t in threads:
        r = throughput(args, t)
        report["results"].append(r)
        rates = "  ".join(f"{k} {v:>9.0f}" for k, v in r["samples_per_s"].items())
        ratios = (f"runtime/numpy {r['runtime_vs_numpy']:.3f}  "
                  f"compiled/numpy {r['compiled_vs_numpy']:.3f}")
        if "runtime_vs_torch" in r:
            ratios += (f"  runtime/torch {r['runtime_vs_torch']:.3f}  "
                       f"compiled/torch {r['compiled_vs_torch']:.3f}")
        print(f"threads {t}: samples/s  {rates}   | {ratios}")
    report["overhead"] = overhead(args)
    o = report["overhead"]
    print(f"tiny model ({o['tiny_model_ops']} ops): runtime {o['runtime_step_us']} us/step, "
          f"numpy {o['numpy_step_us']} us/step -> framework overhead "
          f"{o['framework_overhead_us_per_step']} us/step "
          f"({o['framework_overhead_us_per_op']} us/op); the executor alone (kernels "
          f"replaying recorded outputs) {o['executor_only_us_per_step']} us/step "
          f"({o['executor_only_us_per_op']} us/op)")
    print(f"event hooks: idle checks {o['idle_hook_checks_ns_per_step']} ns/step; "
          f"a step_end subscriber adds {o['step_end_subscriber_us_per_step']} us/step; "
          f"an op_end subscriber adds {o['op_end_subscriber_us_per_step']} us/step")
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
