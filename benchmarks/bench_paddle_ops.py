"""What `--ops` costs a Paddle 3 dynamic-graph job, the way paddletune does it (paddle.profiler
in windows of training steps: sources/eager/op_windows.py, its reading left out of the steps
but counted here), against paddle.profiler left on for the whole block (CPU target, host
events, one `step()` a training step). Both record every kernel of the forward and backward
passes and the update.

Two measures, both in the process's CPU time (every thread's), which a shared machine's load
moves less than wall time:

* per call: a ReLU on a 4x4 tensor called 20,000 times bare, under a profiling session with
  --ops (the OpsProbe listening: no step ends in this loop, so no window opens; before the
  windows, --ops timed each layer call here), and under paddle.profiler: its recording, its
  `stop()` (which builds the event tree) and reading the tree's nodes in Python, per call:
  what a window's steps pay per layer call;
* per step: examples/paddle/cnn.py's model and loop (batch 32, Adam, a DataLoader),
  interleaved blocks bare, under the default probes, with --ops (windows over steps 10-20 and
  42-52 of each block of 100, their reading included), and under paddle.profiler (its stop
  and the tree's reading included).

Prints a table and, last, one JSON line. Run: python benchmarks/bench_paddle_ops.py
[--rounds 7 --steps 100]
"""

import argparse
import contextlib
import io
import json
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

os.environ.setdefault("GLOG_minloglevel", "2")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO / "examples" / "paddle"))

with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)
    import paddle  # noqa: E402
import paddle.profiler as pp  # noqa: E402

import cnn  # noqa: E402
from overhead_common import profiled  # noqa: E402
from paddletune.sources.paddle.source import PaddleSource  # noqa: E402

KINDS = ("bare", "default", "ops", "paddle.profiler")


def tree_nodes(result) -> int:
    """Read every node of paddle.profiler's result (name, times, type), as op records
    would; the nodes read."""
    count, stack = 0, list(result.get_data().values())
    while stack:
        node = stack.pop()
        _ = (node.name, node.start_ns, node.end_ns, node.type)
        count += 1
        stack.extend(node.children_node)
    return count


def under_paddle_profiler(run):
    """CPU seconds of `run(step_fn)` under paddle.profiler, its stop and the tree's
    reading included; (those seconds, the nodes read)."""
    prof = pp.Profiler(targets=[pp.ProfilerTarget.CPU], on_trace_ready=lambda p: None)
    c0 = time.process_time()
    prof.start()
    run(prof.step)
    with contextlib.redirect_stdout(io.StringIO()):  # its step-time summary, not ours
        prof.stop()
    nodes = tree_nodes(prof.profiler_result)
    seconds = time.process_time() - c0
    del prof  # paddle keeps one profiler at a time: the next is made once this one is gone
    return seconds, nodes


def timed(kind, run, directory, r):
    """CPU seconds of `run(each_step)` under `kind`."""
    if kind == "paddle.profiler":
        return under_paddle_profiler(run)[0]
    c0 = time.process_time()
    if kind == "bare":
        run(None)
    else:
        with profiled(PaddleSource, Path(directory) / f"{kind}-{r}.jsonl",
                      "bench_paddle_ops", ops=kind == "ops"):
            run(None)
    return time.process_time() - c0


class Cnn:
    def __init__(self):
        paddle.seed(0)
        self.model = cnn.Net()
        self.optimizer = paddle.optimizer.Adam(learning_rate=3e-3,
                                               parameters=self.model.parameters())
        self.loader = paddle.io.DataLoader(cnn.Squares(), batch_size=32, shuffle=True,
                                           drop_last=True)

    def steps(self, n, each=None):
        done = 0
        while done < n:
            for image, label in self.loader:
                loss = paddle.nn.functional.cross_entropy(self.model(image), label)
                loss.backward()
                self.optimizer.step()
                self.optimizer.clear_grad()
                if each is not None:
                    each()
                done += 1
                if done >= n:
                    break


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=100, help="cnn steps per block")
    parser.add_argument("--calls", type=int, default=20000, help="layer calls per block")
    args = parser.parse_args(argv)
    paddle.set_device("cpu")
    paddle.base.core.set_num_threads(1)
    relu, x = paddle.nn.ReLU(), paddle.randn([4, 4])

    def calls(each=None):
        for _ in range(args.calls):
            relu(x)

    job = Cnn()
    job.steps(20)
    calls()
    per_call = {k: [] for k in KINDS}
    per_step = {k: [] for k in KINDS}
    with tempfile.TemporaryDirectory() as directory:
        for r in range(args.rounds):
            order = KINDS if r % 2 == 0 else KINDS[::-1]
            for kind in order:
                per_call[kind].append(timed(kind, calls, directory, r) / args.calls)
                per_step[kind].append(timed(kind, lambda each: job.steps(args.steps, each),
                                            directory, r) / args.steps)
        _, nodes = under_paddle_profiler(lambda each: job.steps(1, each))
    call0 = statistics.median(per_call["bare"])
    step0 = statistics.median(per_step["bare"])
    print(f"PaddlePaddle {paddle.__version__}, CPU, 1 thread: {args.rounds} rounds; "
          f"{args.calls} ReLU calls and {args.steps} examples/paddle/cnn.py steps per block "
          f"(CPU time, every thread's)")
    print(f"{'configuration':<17}{'per call (us)':>14}{'added':>9}{'per step (ms)':>15}"
          f"{'added':>9}   (added: to bare)")
    for kind in KINDS:
        c, s = statistics.median(per_call[kind]), statistics.median(per_step[kind])
        print(f"{kind:<17}{c * 1e6:>14.2f}{(c - call0) * 1e6:>+9.2f}{s * 1e3:>15.3f}"
              f"{s / step0 - 1:>+9.1%}")
    print(f"paddle.profiler's tree for one cnn step: {nodes} nodes")
    print(json.dumps({"bench": "paddle_ops", "paddle": paddle.__version__,
                      "rounds": args.rounds, "steps": args.steps, "calls": args.calls,
                      "per_call_us": {k: round(statistics.median(v) * 1e6, 3)
                                      for k, v in per_call.items()},
                      "per_step_ms": {k: round(statistics.median(v) * 1e3, 4)
                                      for k, v in per_step.items()},
                      "profiler_nodes_per_step": nodes}))


if __name__ == "__main__":
    main()
