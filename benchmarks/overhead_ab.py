"""The profiling session's cost per step on the near-empty step of bench_paddle_overhead.py
(or bench_torch_overhead.py), for the code of one checkout, split by thread: run it for two
checkouts in turn (the change and the commit before it) to compare them on a machine whose
speed moves more than the change does.

The rounds are the benchmark's own (benchmarks/overhead_common.py: a bare block and a block
under a `paddletune profile` session's probes, their order alternating), imported from the
checkout measured; each block's CPU time is split into the training thread's (its
thread_time) and all the others' (the process's CPU time less it: the framework's reading
threads, the probes' samplers, the profile's writer). Prints the medians over the rounds.

    git worktree add /tmp/before HEAD~1
    for repo in /tmp/before . /tmp/before .; do
        python benchmarks/overhead_ab.py --repo $repo --framework paddle; done
"""

import argparse
import importlib.util
import json
import os
import sys
import tempfile
from pathlib import Path


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", default=".", help="the checkout whose code is measured")
    parser.add_argument("--framework", choices=("paddle", "torch"), default="paddle")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--steps", type=int, default=2000, help="steps per block")
    args = parser.parse_args(argv)
    repo = str(Path(args.repo).resolve())
    sys.path[:0] = [repo, os.path.join(repo, "benchmarks")]  # the checkout's code first
    if args.framework == "paddle":
        import bench_paddle_overhead as bench
        from paddletune.sources.paddle.source import PaddleSource as Source
        bench.paddle.set_device("cpu")
        bench.paddle.base.core.set_num_threads(1)
    else:
        import bench_torch_overhead as bench
        from paddletune.sources.torch.source import TorchSource as Source
        bench.torch.set_num_threads(1)
    import paddletune
    code = str(Path(paddletune.__file__).resolve().parents[1])
    if code != repo:
        sys.exit(f"overhead_ab: paddletune came from {code}, not from {repo}")
    common = _this_overhead_common()
    job = bench.TinyJob()
    job.steps(100)
    with tempfile.TemporaryDirectory() as directory:
        run = common.interleave(job, args.rounds, args.steps, lambda r: common.profiled(
            Source, Path(directory) / f"p{r}.jsonl", "overhead_ab"))
    cost = [run.cost_per_step_s * 1e6, run.main_cpu_cost_per_step_s * 1e6,
            run.other_cpu_cost_per_step_s * 1e6]
    print(f"{repo} ({args.framework}, {args.rounds} rounds x {args.steps} steps): cost per "
          f"step {cost[0]:+.1f} us wall, the training thread {cost[1]:+.1f} us CPU, the "
          f"other threads {cost[2]:+.1f} us CPU (bare step {run.median_bare * 1e6:.1f} us)")
    print(json.dumps({"bench": "overhead_ab", "repo": repo, "framework": args.framework,
                      "wall_us": round(cost[0], 2), "main_thread_cpu_us": round(cost[1], 2),
                      "other_threads_cpu_us": round(cost[2], 2),
                      "bare_step_us": round(run.median_bare * 1e6, 2)}))


def _this_overhead_common():
    """This checkout's overhead_common.py (the split of the CPU time by thread), whichever
    checkout is measured: its probes and session are the measured checkout's paddletune,
    imported before it."""
    path = Path(__file__).resolve().parent / "overhead_common.py"
    spec = importlib.util.spec_from_file_location("overhead_common_ab", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


if __name__ == "__main__":
    main()
