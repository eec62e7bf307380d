"""What profiling costs a PaddlePaddle 3 job: a dynamic-graph MLP (784-512-512-10, Momentum,
batch 128, batches from a paddle.io.DataLoader over an in-memory TensorDataset,
num_workers=0, so paddle's reading thread makes them) trained bare and under the probes a
`paddletune profile` session runs (session.session_probes: step, reader, memory, scheduler,
workers, system, nvml, writing a real profile file, with the Paddle source's hooks
installed), interleaved in one process: each round runs a block of N steps bare, then a
block of N steps profiled (the order alternating between rounds), so machine noise hits
both alike (benchmarks/overhead_common.py, shared with bench_torch_overhead.py).

The MLP's blocks give the overhead as a share of its step, which on a busy machine is within
the noise; the same loop on a near-empty step (a 1-unit model, 1-sample batches) gives the
probes' absolute cost per step, divided by the MLP's step for the share (`within_target`).
`--ops` profiles both with `--ops` as well (each leaf Layer's forward timed).
`--attribute` splits the near-empty step's cost instead: the training thread's CPU time per
step bare, with only the Paddle source's hooks installed (nobody listening), and under the
full session, in interleaved blocks.

Target: the default probes cost under 1% of the MLP's step time. Prints a table and, last,
one JSON line. Run: python benchmarks/bench_paddle_overhead.py [--rounds 7 --steps 400
--threads 1]
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

os.environ.setdefault("GLOG_minloglevel", "2")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)
    import paddle  # noqa: E402
from paddle import nn  # noqa: E402

from overhead_common import LoopJob, interleave, json_figures, print_table, profiled  # noqa: E402
from paddletune.sources.paddle.source import PaddleSource  # noqa: E402


class Job(LoopJob):
    def __init__(self, batch_size: int):
        paddle.seed(0)
        n = batch_size * 16
        centers = paddle.randn([10, 784])
        labels = paddle.randint(0, 10, [n])
        inputs = centers[labels] + paddle.randn([n, 784])
        self.loader = paddle.io.DataLoader(
            paddle.io.TensorDataset([inputs, labels]), batch_size=batch_size,
            shuffle=True, drop_last=True)
        self.model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512),
                                   nn.ReLU(), nn.Linear(512, 10))
        self.optimizer = paddle.optimizer.Momentum(learning_rate=0.01, momentum=0.9,
                                                   parameters=self.model.parameters())
        self.loss_fn = nn.CrossEntropyLoss()

    def train_step(self, x, y):
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        self.optimizer.step()
        self.optimizer.clear_grad()


class TinyJob(Job):
    """The same loop on a 1-unit model and 1-sample batches: a step that costs almost nothing
    but the loop's own calls, so the probes' absolute cost per step (microseconds) shows
    above the noise."""

    def __init__(self):
        paddle.seed(0)
        data = paddle.io.TensorDataset([paddle.randn([256, 1]), paddle.zeros([256])])
        self.loader = paddle.io.DataLoader(data, batch_size=1)
        self.model = nn.Linear(1, 1)
        self.optimizer = paddle.optimizer.SGD(learning_rate=0.01,
                                              parameters=self.model.parameters())
        self.loss_fn = lambda out, y: out.sum()


def attribute(tiny, rounds: int, steps: int, directory):
    """The training thread's CPU seconds per near-empty step: bare, with the Paddle source's
    hooks alone, and with the session's probes too; {kind: [one per round]}."""
    def block():
        t0 = time.thread_time()
        tiny.steps(steps)
        return (time.thread_time() - t0) / steps

    out = {"bare": [], "hooks": [], "session": []}
    for r in range(rounds):
        out["bare"].append(block())
        source = PaddleSource()
        source.begin()
        with source.running():
            out["hooks"].append(block())
        with profiled(PaddleSource, Path(directory) / f"attribute-{r}.jsonl",
                      "bench_paddle_overhead"):
            out["session"].append(block())
    print(f"the training thread's CPU time per near-empty step ({rounds} rounds x {steps} "
          f"steps):")
    bare = statistics.median(out["bare"]), min(out["bare"])
    for kind, values in out.items():
        median, least = statistics.median(values), min(values)
        print(f"{kind:<10}median {median * 1e6:7.1f} us ({(median - bare[0]) * 1e6:+6.1f}), "
              f"min {least * 1e6:7.1f} us ({(least - bare[1]) * 1e6:+6.1f})")
    print(json.dumps({"bench": "paddle_overhead_attribute", "paddle": paddle.__version__,
                      "rounds": rounds, "steps": steps,
                      **{f"{k}_us": round(statistics.median(v) * 1e6, 2)
                         for k, v in out.items()}}))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--steps", type=int, default=80, help="steps per block")
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--tiny-steps", type=int, default=2000,
                        help="steps per block of the near-empty step")
    parser.add_argument("--threads", type=int, default=1, help="paddle's CPU math threads")
    parser.add_argument("--ops", action="store_true", help="profile with --ops as well")
    parser.add_argument("--attribute", action="store_true",
                        help="split the near-empty step's cost: hooks alone, then the probes")
    args = parser.parse_args(argv)
    paddle.set_device("cpu")
    paddle.base.core.set_num_threads(args.threads)
    job = Job(args.batch_size)
    job.steps(args.warmup)
    tiny = TinyJob()
    tiny.steps(args.warmup)
    if args.attribute:
        with tempfile.TemporaryDirectory() as directory:
            attribute(tiny, args.rounds, args.tiny_steps, directory)
        return
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as directory:
        def under_probes(r):
            return profiled(PaddleSource, Path(directory) / f"profiled-{r}.jsonl",
                            "bench_paddle_overhead", ops=args.ops)
        mlp = interleave(job, args.rounds, args.steps, under_probes)
        tiny_run = interleave(tiny, args.rounds, args.tiny_steps, under_probes)
    wall = time.perf_counter() - started
    print_table(f"PaddlePaddle {paddle.__version__} dynamic-graph MLP 784-512-512-10, batch "
                f"{args.batch_size}, {args.threads} thread(s){', --ops' if args.ops else ''}: "
                f"{args.rounds} rounds x {args.steps} steps per block ({wall:.1f} s)",
                mlp, tiny_run, args.tiny_steps)
    print(json.dumps({"bench": "paddle_overhead", "paddle": paddle.__version__,
                      "batch_size": args.batch_size, "threads": args.threads,
                      "ops": args.ops, "rounds": args.rounds, "steps": args.steps,
                      **json_figures(mlp, tiny_run)}))


if __name__ == "__main__":
    main()
