"""A fast training job for bench_long_run.py: a tiny fc model (8 -> 4, mean loss, SGD) on one
fixed batch of 4, so each step costs about a hundred microseconds and the profiler's per-step
work shows. It runs --steps steps and prints its own loop's steps/s (imports and the startup
program left out) as `steps_per_s=<x>`."""

import argparse
import time

import numpy as np

import runtime as fluid


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=10_000)
    args = parser.parse_args()
    program, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(program, startup):
        x = fluid.data("x", [None, 8], "float32")
        loss = fluid.layers.mean(fluid.layers.fc(x, 4))
        fluid.optimizer.SGD(0.01).minimize(loss)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    feed = {"x": np.ones((4, 8), "float32")}
    t0 = time.perf_counter()
    for _ in range(args.steps):
        exe.run(program, feed=feed, fetch_list=[loss])
    elapsed = time.perf_counter() - t0
    print(f"steps_per_s={args.steps / elapsed:.1f}", flush=True)


if __name__ == "__main__":
    main()
