"""The CPU each of a profiling session's own threads uses while an MLP trains under it (the
profile writer, the reader probe's queue sampler, the system, worker and NVML samplers): work
off the training thread, which the near-empty-step benchmarks (bench_torch_overhead.py,
bench_paddle_overhead.py) mostly miss, since most of it runs on a clock, not per step, and
which in Python competes with the training loop for the GIL and, on a 2-core machine, for the
cores.

The job is the benchmark's MLP (784-512-512-10, batch 128, 1 math thread) of the framework
chosen, trained in blocks of 20 steps (a DataLoader pass of 16 batches: each block starts a
new iterator, as an epoch loop does) for `--seconds` under the probes of a `paddletune profile`
session (overhead_common.profiled). Each thread's CPU time is read from its own clock
(pthread_getcpuclockid). Prints each thread's share of a core and CPU per training step, then
one JSON line.

    python benchmarks/probe_threads.py [--framework paddle|torch --seconds 8]
"""

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("GLOG_minloglevel", "2")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from overhead_common import profiled  # noqa: E402


def job_and_source(framework: str):
    if framework == "paddle":
        import bench_paddle_overhead as bench
        from paddletune.sources.paddle.source import PaddleSource as Source
    else:
        import bench_torch_overhead as bench
        from paddletune.sources.torch.source import TorchSource as Source
    return bench.Job(128), Source


def session_threads() -> dict:
    """{thread name: its CPU clock id} of the session's threads (named paddletune-*)."""
    return {t.name: time.pthread_getcpuclockid(t.ident) for t in threading.enumerate()
            if t.name.startswith("paddletune")}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--framework", choices=("paddle", "torch"), default="paddle")
    parser.add_argument("--seconds", type=float, default=8.0)
    args = parser.parse_args(argv)
    if args.framework == "torch":
        import torch
        torch.set_num_threads(1)
    job, source = job_and_source(args.framework)
    job.steps(20)
    with tempfile.TemporaryDirectory() as directory:
        with profiled(source, Path(directory) / "p.jsonl", "probe_threads"):
            job.steps(20)  # (every sampler started)
            clocks = session_threads()
            before = {name: time.clock_gettime(c) for name, c in clocks.items()}
            t0, steps = time.perf_counter(), 0
            while time.perf_counter() - t0 < args.seconds:
                steps += 20
                job.steps(20)
            wall = time.perf_counter() - t0
            used = {name: time.clock_gettime(c) - before[name] for name, c in clocks.items()}
    print(f"{args.framework} MLP under a profiling session: {steps} steps in {wall:.1f} s "
          f"({wall / steps * 1e3:.2f} ms a step)")
    for name, cpu_s in sorted(used.items(), key=lambda kv: -kv[1]):
        print(f"{name:<24}{cpu_s / wall:>8.2%} of a core{cpu_s / steps * 1e6:>10.1f} us a step")
    total = sum(used.values())
    print(f"{'all of them':<24}{total / wall:>8.2%} of a core{total / steps * 1e6:>10.1f} us a step")
    print(json.dumps({"bench": "probe_threads", "framework": args.framework, "steps": steps,
                      "step_ms": round(wall / steps * 1e3, 4),
                      "share_of_a_core": {n: round(c / wall, 5) for n, c in used.items()},
                      "us_per_step": {n: round(c / steps * 1e6, 2) for n, c in used.items()}}))


if __name__ == "__main__":
    main()
