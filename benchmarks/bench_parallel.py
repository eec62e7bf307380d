"""ParallelExecutor vs Executor: samples/s of the plain single-place Executor and of the
data-parallel engine (runtime/parallel) over num_threads 1/2/4, CPU_NUM 1/2, AllReduce vs
Reduce, and num_iteration_per_drop_scope 1 vs 100.

For the reference MLP (784-512-512-10, batch 128, Momentum) and a small MLP (16-32-32-4, batch
32: scheduling overhead dominates), every setting trains in the same process with its own
scope, rounds interleaved (each round starts at a different setting) so machine drift hits all
alike; a setting's figure is the median over rounds of its median step time. One place runs
the engine too (as Paddle's ParallelExecutor does), so its cost over the Executor shows.
BLAS threads are set once for the whole run (--blas, default 1: executor threads x BLAS
threads should not exceed the cores).

Run: python benchmarks/bench_parallel.py [--rounds 3] [--steps 20] [--blas 1]
Prints a table per model (samples/s, ratio to the Executor) and one JSON line.
"""

import argparse
import json
import os
import statistics
import sys
import time
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402

import runtime as fluid  # noqa: E402
from runtime import blas  # noqa: E402

# label -> (places, num_threads, reduce strategy, num_iteration_per_drop_scope); None: Executor
SETTINGS = {
    "executor": None,
    "pe 1p 1t": (1, 1, 0, 100), "pe 1p 2t": (1, 2, 0, 100), "pe 1p 4t": (1, 4, 0, 100),
    "pe 2p 1t": (2, 1, 0, 100), "pe 2p 2t": (2, 2, 0, 100), "pe 2p 4t": (2, 4, 0, 100),
    "pe 2p 2t reduce": (2, 2, 1, 100), "pe 2p 2t drop=1": (2, 2, 0, 1),
}


def mlp(sizes):
    def build():
        x = fluid.data("x", [None, sizes[0]])
        y = fluid.data("y", [None, 1], dtype="int64")
        h = x
        for size in sizes[1:-1]:
            h = fluid.layers.fc(h, size, act="relu")
        logits = fluid.layers.fc(h, sizes[-1])
        return fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(logits, y))
    return build


MODELS = {"mlp": (mlp((784, 512, 512, 10)), 128), "small": (mlp((16, 32, 32, 4)), 32)}


class Job:
    def __init__(self, build, batch, n_in, n_out, setting):
        self.main, self.startup = fluid.Program(), fluid.Program()
        self.main.random_seed = self.startup.random_seed = 1
        with fluid.program_guard(self.main, self.startup), fluid.unique_name.guard():
            self.loss = build()
            fluid.optimizer.Momentum(0.01, 0.9).minimize(self.loss)
        self.scope, self.exe = fluid.Scope(), fluid.Executor(fluid.CPUPlace())
        self.exe.run(self.startup, scope=self.scope)
        if setting is None:
            self.runnable = self.main
        else:
            places, threads, reduce_, drop = setting
            bs, es = fluid.BuildStrategy(), fluid.ExecutionStrategy()
            bs.reduce_strategy = reduce_
            es.num_threads, es.num_iteration_per_drop_scope = threads, drop
            self.runnable = fluid.CompiledProgram(self.main).with_data_parallel(
                self.loss.name, build_strategy=bs, exec_strategy=es,
                places=fluid.cpu_places(places))
        rng = np.random.default_rng(0)
        self.feed = {"x": rng.random((batch, n_in), dtype=np.float32),
                     "y": rng.integers(0, n_out, (batch, 1))}
        self.batch = batch

    def run(self, steps):
        times = []
        for _ in range(steps):
            t0 = time.perf_counter()
            self.exe.run(self.runnable, feed=self.feed, fetch_list=[self.loss], scope=self.scope)
            times.append(time.perf_counter() - t0)
        return statistics.median(times)


def bench(name, rounds, steps):
    build, batch = MODELS[name]
    sizes = {"mlp": (784, 10), "small": (16, 4)}[name]
    jobs = {label: Job(build, batch, *sizes, s) for label, s in SETTINGS.items()}
    for job in jobs.values():
        job.run(3)  # warm-up: plans and graphs compiled, threads started, pool blocks cached
    times = {label: [] for label in jobs}
    for r in range(rounds):
        order = list(jobs.items())
        order = order[r % len(order):] + order[:r % len(order)]
        for label, job in order:
            times[label].append(job.run(steps))
    out = {}
    base = statistics.median(times["executor"])
    for label, t in times.items():
        step_s = statistics.median(t)
        out[label] = {"step_ms": step_s * 1e3, "samples_per_s": batch / step_s,
                      "vs_executor": base / step_s}
    return out


def print_table(name, result):
    print(f"\n{name}: samples/s (median of rounds), ratio to the Executor (>1: faster)")
    print(f"  {'setting':<18} {'step ms':>8} {'samples/s':>10} {'vs executor':>12}")
    for label, res in result.items():
        print(f"  {label:<18} {res['step_ms']:8.2f} {res['samples_per_s']:10.0f} "
              f"{res['vs_executor']:12.2f}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--blas", type=int, default=1, help="BLAS threads")
    parser.add_argument("--models", default="mlp,small")
    args = parser.parse_args(argv)
    blas.set_blas_threads(args.blas)
    warnings.simplefilter("ignore", RuntimeWarning)  # the oversubscription note, once per job
    summary = {}
    for name in args.models.split(","):
        result = bench(name, args.rounds, args.steps)
        print_table(name, result)
        summary[name] = result
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(json.dumps({"bench": "parallel", "blas_threads": args.blas, "cores": cores,
                      **summary}, default=float))


if __name__ == "__main__":
    main()
