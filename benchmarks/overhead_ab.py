"""The profiling session's cost per step on the near-empty step of bench_paddle_overhead.py
(or bench_torch_overhead.py), for the code of one checkout, split by thread: run it for two
checkouts in turn (the change and the commit before it) to compare them on a machine whose
speed moves more than the change does.

Each round runs a block of the near-empty step bare, then one under a `paddletune profile`
session's probes (benchmarks/overhead_common.py, as the benchmark runs them); the CPU time of
every thread of the process is read from /proc/self/task/*/schedstat (Linux) before and after
each block: the training thread's, and all the others' (the framework's reading threads, the
probes' samplers, the profile's writer). Prints the medians over the rounds.

    git worktree add /tmp/before HEAD~1
    for repo in /tmp/before . /tmp/before .; do
        python benchmarks/overhead_ab.py --repo $repo --framework paddle; done
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path


def thread_cpu_s() -> dict:
    """{thread id: seconds on a CPU} for every thread of this process."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                out[int(tid)] = int(f.read().split()[0]) / 1e9
        except (OSError, ValueError, IndexError):
            continue  # a thread that ended meanwhile
    return out


def block(job, steps: int) -> tuple:
    """(wall, the training thread's CPU, the other threads' CPU) seconds per step."""
    main = threading.main_thread().native_id
    before, t0 = thread_cpu_s(), time.perf_counter()
    job.steps(steps)
    wall, after = time.perf_counter() - t0, thread_cpu_s()
    mine = after.get(main, 0.0) - before.get(main, 0.0)
    others = sum(v - before.get(k, 0.0) for k, v in after.items() if k != main)
    return wall / steps, mine / steps, others / steps


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", default=".", help="the checkout whose code is measured")
    parser.add_argument("--framework", choices=("paddle", "torch"), default="paddle")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--steps", type=int, default=2000, help="steps per block")
    args = parser.parse_args(argv)
    repo = str(Path(args.repo).resolve())
    sys.path[:0] = [repo, os.path.join(repo, "benchmarks")]
    if args.framework == "paddle":
        import bench_paddle_overhead as bench
        from paddletune.sources.paddle.source import PaddleSource as Source
        bench.paddle.set_device("cpu")
        bench.paddle.base.core.set_num_threads(1)
    else:
        import bench_torch_overhead as bench
        from paddletune.sources.torch.source import TorchSource as Source
        bench.torch.set_num_threads(1)
    job = bench.TinyJob()
    job.steps(100)
    rows = {"bare": [], "profiled": []}
    with tempfile.TemporaryDirectory() as directory:
        for r in range(args.rounds):
            rows["bare"].append(block(job, args.steps))
            with bench.profiled(Source, Path(directory) / f"p{r}.jsonl", "overhead_ab"):
                rows["profiled"].append(block(job, args.steps))
    medians = {k: [statistics.median(x[i] for x in v) for i in range(3)]
               for k, v in rows.items()}
    cost = [(p - b) * 1e6 for p, b in zip(medians["profiled"], medians["bare"])]
    print(f"{repo} ({args.framework}, {args.rounds} rounds x {args.steps} steps): cost per "
          f"step {cost[0]:+.1f} us wall, the training thread {cost[1]:+.1f} us CPU, the "
          f"other threads {cost[2]:+.1f} us CPU (bare step {medians['bare'][0] * 1e6:.1f} us)")
    print(json.dumps({"bench": "overhead_ab", "repo": repo, "framework": args.framework,
                      "wall_us": round(cost[0], 2), "main_thread_cpu_us": round(cost[1], 2),
                      "other_threads_cpu_us": round(cost[2], 2),
                      "bare_step_us": round(medians["bare"][0] * 1e6, 2)}))


if __name__ == "__main__":
    main()
