"""Memory pools: peak memory and step time with GC off / GC on / GC + inplace, and the cost of
underlying allocations with FLAGS_fraction_of_cpu_memory_to_use=0 vs the default pool.

For the reference MLP (784-512-512-10, batch 128, Momentum) and a CNN (conv 5x5 x16 -> pool ->
conv 5x5 x32 -> pool -> fc 10 on 1x28x28, batch 64, batch_norm, Momentum), each setting is
trained in the same process, rounds interleaved so machine drift hits every setting alike.
Peaks come from the pool's own counters (runtime.events.memory_step), step time from the median
of the timed steps of each round. Targets (issue 5): GC + inplace cut the CNN's peak activation
memory (step peak minus parameters and optimizer state) by >= 30% at unchanged speed (+-3%);
under auto_growth the pool's reserved/allocated peak ratio is <= 1.15.

It also times each model with the pool serving the run against NumPy's own allocator.

Run: python benchmarks/bench_memory.py [--rounds 5] [--steps 20] [--threads 1]
Prints a table per model and one JSON line.
"""

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402

import runtime as fluid  # noqa: E402
from runtime import blas, events, memory  # noqa: E402

MiB = 1 << 20
SETTINGS = (("gc off", -1.0, False), ("gc on", 0.0, False), ("gc + inplace", 0.0, True))


def mlp():
    x = fluid.data("x", [None, 784])
    y = fluid.data("y", [None, 1], dtype="int64")
    h = fluid.layers.fc(fluid.layers.fc(x, 512, act="relu"), 512, act="relu")
    return fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(fluid.layers.fc(h, 10), y))


def cnn():
    x = fluid.data("x", [None, 1, 28, 28])
    y = fluid.data("y", [None, 1], dtype="int64")
    h = x
    for filters in (16, 32):
        h = fluid.layers.conv2d(h, filters, 5, padding=2)
        h = fluid.layers.batch_norm(h, act="relu")
        h = fluid.layers.pool2d(h, 2, pool_stride=2)
    return fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(fluid.layers.fc(h, 10), y))


MODELS = {"mlp": (mlp, (128, 784)), "cnn": (cnn, (64, 1, 28, 28))}


class Job:
    """One model under one (GC, inplace) setting, with its own scope."""

    def __init__(self, build, shape, gc_gb, inplace):
        self.gc_gb, self.main, self.startup = gc_gb, fluid.Program(), fluid.Program()
        self.main.random_seed = self.startup.random_seed = 1
        with fluid.program_guard(self.main, self.startup), fluid.unique_name.guard():
            self.loss = build()
            fluid.optimizer.Momentum(0.01, 0.9).minimize(self.loss)
        self.scope, self.exe = fluid.Scope(), fluid.Executor(fluid.CPUPlace())
        self.exe.run(self.startup, scope=self.scope)
        bs = fluid.BuildStrategy()
        bs.enable_inplace, bs.memory_optimize = inplace, False
        self.runnable = fluid.CompiledProgram(self.main, build_strategy=bs)
        rng = np.random.default_rng(0)
        self.feed = {"x": rng.random(shape, dtype=np.float32),
                     "y": rng.integers(0, 10, (shape[0], 1))}
        self.fixed = sum(v.value.nbytes for v in self.scope._vars.values()
                         if v.value is not None and hasattr(v.value, "nbytes"))

    def run(self, steps, records):
        fluid.set_flags({"FLAGS_eager_delete_tensor_gb": self.gc_gb})
        times = []
        for _ in range(steps):
            t0 = time.perf_counter()
            self.exe.run(self.runnable, feed=self.feed, fetch_list=[self.loss], scope=self.scope)
            times.append(time.perf_counter() - t0)
        return statistics.median(times), records[-1]


def compare_gc(name, rounds, steps):
    build, shape = MODELS[name]
    jobs = {label: Job(build, shape, gb, inplace) for label, gb, inplace in SETTINGS}
    records, result = [], {label: {"step_s": [], "peak": 0, "reserved": 0} for label in jobs}
    with events.subscribe("memory_step", records.append):
        for job in jobs.values():
            job.run(3, records)  # warm-up: plans compiled, the pool's blocks cached
        for r in range(rounds):
            order = list(jobs.items())
            order = order[r % len(order):] + order[:r % len(order)]
            for label, job in order:
                step_s, rec = job.run(steps, records)
                res = result[label]
                res["step_s"].append(step_s)
                res["peak"] = max(res["peak"], rec.step_peak)
                res["activation_peak"] = max(res.get("activation_peak", 0),
                                             rec.step_peak - job.fixed)
    fluid.set_flags({"FLAGS_eager_delete_tensor_gb": 0.0})
    for res in result.values():
        res["step_s"] = statistics.median(res["step_s"])
    return result


def compare_fraction(name, steps):
    """Underlying allocations per step: fraction 0 (one per request) vs the default pool."""
    build, shape = MODELS[name]
    out = {}
    # naive first: switching back to auto_growth then makes a fresh pool, whose peaks are this
    # job's alone (a pool's peaks count everything it ever served)
    for label, flags in (("naive fraction 0", {"FLAGS_allocator_strategy": "naive_best_fit",
                                               "FLAGS_fraction_of_cpu_memory_to_use": 0.0}),
                         ("auto_growth", {"FLAGS_allocator_strategy": "auto_growth"})):
        fluid.set_flags(flags)
        try:
            job, records = Job(build, shape, 0.0, True), []
            with events.subscribe("memory_step", records.append):
                job.run(3, records)
                t0 = time.perf_counter()
                job.run(steps, records)
                wall = (time.perf_counter() - t0) / steps
            recent = records[-steps:]
            out[label] = {"system_allocs_per_step": sum(r.system_allocs for r in recent) / steps,
                          "system_alloc_ms_per_step":
                              1e3 * sum(r.system_alloc_s for r in recent) / steps,
                          "requests_per_step": sum(r.requests for r in recent) / steps,
                          "step_ms": 1e3 * wall,
                          "reserved_over_allocated_peak":
                              max(r.peak_reserved for r in recent)
                              / max(1, max(r.peak_allocated for r in recent))}
        finally:
            fluid.set_flags({"FLAGS_allocator_strategy": "auto_growth",
                             "FLAGS_fraction_of_cpu_memory_to_use": 1.0})
    return out


def pool_vs_numpy(name, rounds, steps):
    """Step time with the pool serving the run vs NumPy's own allocator (the executor with
    `memory.pool_for` answering None), rounds interleaved."""
    build, shape = MODELS[name]
    job, real = Job(build, shape, 0.0, False), memory.pool_for
    times = {"pool": [], "numpy": []}
    job.run(3, [None])  # nobody subscribes to memory events here: the bare cost
    for _ in range(rounds):
        for label in times:
            memory.pool_for = real if label == "pool" else (lambda place: None)
            try:
                times[label].append(job.run(steps, [None])[0])
            finally:
                memory.pool_for = real
    return {label: statistics.median(t) for label, t in times.items()}


def print_gc(name, result):
    base = result["gc off"]
    print(f"\n{name}: peak pool memory and step time (median of rounds)")
    print(f"  {'setting':<14} {'peak MiB':>9} {'activations MiB':>16} {'vs gc off':>10} "
          f"{'step ms':>8} {'vs gc off':>10}")
    for label, res in result.items():
        print(f"  {label:<14} {res['peak'] / MiB:9.2f} {res['activation_peak'] / MiB:16.2f} "
              f"{res['activation_peak'] / base['activation_peak'] - 1:+10.1%} "
              f"{res['step_s'] * 1e3:8.2f} {res['step_s'] / base['step_s'] - 1:+10.1%}")


def print_fraction(name, result):
    print(f"\n{name}: underlying allocations")
    for label, res in result.items():
        print(f"  {label:<18} {res['system_allocs_per_step']:7.1f} allocs/step of "
              f"{res['requests_per_step']:.0f} requests, {res['system_alloc_ms_per_step']:.3f} "
              f"ms/step, step {res['step_ms']:.2f} ms, reserved/allocated peak "
              f"{res['reserved_over_allocated_peak']:.3f}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1, help="BLAS threads")
    parser.add_argument("--models", default="mlp,cnn")
    args = parser.parse_args(argv)
    blas.set_blas_threads(args.threads)
    if memory.pool_for(fluid.CPUPlace()) is None:
        sys.exit(f"bench_memory: no CPU pool here: {memory.numpy_hook.REASON}")
    summary = {}
    for name in args.models.split(","):
        gc_result = compare_gc(name, args.rounds, args.steps)
        fraction = compare_fraction(name, args.steps)
        allocators = pool_vs_numpy(name, args.rounds, args.steps)
        print_gc(name, gc_result)
        print_fraction(name, fraction)
        print(f"  pool vs NumPy's allocator: {allocators['pool'] * 1e3:.2f} vs "
              f"{allocators['numpy'] * 1e3:.2f} ms/step "
              f"({allocators['pool'] / allocators['numpy'] - 1:+.1%})")
        off, best = gc_result["gc off"], gc_result["gc + inplace"]
        summary[name] = {
            "activation_peak_cut": 1 - best["activation_peak"] / off["activation_peak"],
            "step_time_change": best["step_s"] / off["step_s"] - 1,
            "settings": gc_result, "allocations": fraction, "pool_vs_numpy_s": allocators}
    print(json.dumps({"bench": "memory", "threads": args.threads, **summary}, default=float))


if __name__ == "__main__":
    main()
