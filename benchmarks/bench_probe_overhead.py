"""What profiling costs: the reference MLP of bench_runtime.py (784-512-512-10, Momentum,
batch 128) trained with no probes, with the probes a `paddletune profile` session runs
(session.session_probes: step, reader, memory, scheduler, workers, system, nvml, writing a
real profile file; and the session's own step counter), with --ops added, and with
FLAGS_check_nan_inf on, interleaved in one process so that machine noise hits every
configuration alike.

Targets (issue 3): default probes < 1% of step time, --ops < 5%. Also the cost of one
system sample (the system probe's, on its own thread).
Prints a table and, last, one JSON line. Run: python benchmarks/bench_probe_overhead.py
[--rounds 7 --steps 40 --threads 1]
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_runtime as ref  # noqa: E402  (the reference model and data)
from overhead_common import count_steps  # noqa: E402
import runtime as fluid  # noqa: E402
from paddletune.profile import ProfileWriter, header_record  # noqa: E402
from paddletune.probes.base import Clock  # noqa: E402
from paddletune.session import session_probes  # noqa: E402
from paddletune.sources.fluid import FluidSource  # noqa: E402
from runtime import blas  # noqa: E402


SETTLE_STEPS = 5  # steps a profiled block runs, and writes, before its timed steps


@contextmanager
def probes(kind, directory):
    """Run the block with the probes of configuration `kind` writing a profile; yields the
    writer's flush (None for "none"), which the block times with its steps: a session's
    writer encodes the records every 0.5 s on its own thread, holding the GIL the loop
    needs, and a 40-step block would otherwise leave it all to writer.finish(), untimed."""
    if kind == "none":
        yield None
        return
    clock = Clock()
    writer = ProfileWriter(Path(directory) / f"{kind}.jsonl", clock=clock.now)
    source = FluidSource()
    writer.submit(header_record({"argv": ["bench_probe_overhead"]}, {"ops": kind == "ops"}, {},
                                time.time(), source.info()))
    active = session_probes(writer.submit, clock, source, 0.5, ops=kind == "ops")
    if kind == "check_nan":
        active, previous = [], fluid.get_flags(["FLAGS_check_nan_inf"])
        fluid.set_flags({"FLAGS_check_nan_inf": True})
    for p in active:
        p.start()
    counter = count_steps(source, writer)
    try:
        yield writer.flush
    finally:
        counter.close()
        for p in active:
            p.stop()
        if kind == "check_nan":
            fluid.set_flags(previous)
        writer.finish()


def run_rounds(model, xs, ys, args, kinds, directory):
    times = {k: [] for k in kinds}
    for _ in range(args.rounds):
        for kind in kinds:
            with probes(kind, directory) as settle:
                if settle is not None:  # the session's own first records (its header, the
                    ref.time_steps(model, xs, ys, SETTLE_STEPS)  # program): written
                    settle()  # untimed, as they are once a job, not per step
                seconds = ref.time_steps(model, xs, ys, args.steps)
                if settle is not None:
                    t0 = time.perf_counter()
                    settle()
                    seconds += time.perf_counter() - t0
                times[kind].append(seconds / args.steps)
    return {k: statistics.median(v) for k, v in times.items()}


def system_sample_s(n=50) -> float:
    """The median wall time of one system sample (psutil: process, threads, cores), which
    the system probe's thread takes every --interval."""
    from paddletune.probes.system import SystemProbe
    probe = SystemProbe(lambda record: None, Clock(), interval_s=0.5, source=FluidSource())
    probe.sample(0.0)  # the first primes psutil's CPU counters
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        probe.sample(0.0)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--steps", type=int, default=40, help="steps per configuration per round")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1, help="BLAS threads")
    args = parser.parse_args(argv)
    blas.set_blas_threads(args.threads)
    xs, ys = ref.make_data(args.batch_size, 8)
    model = ref.RuntimeMLP()
    ref.time_steps(model, xs, ys, args.warmup)
    kinds = ["none", "default", "ops", "check_nan"]
    with tempfile.TemporaryDirectory() as directory:
        step_s = run_rounds(model, xs, ys, args, kinds, directory)
    sample_s = system_sample_s()
    base = step_s["none"]
    cost = {k: (v - base) / base for k, v in step_s.items() if k != "none"}
    print(f"reference MLP, batch {args.batch_size}, {args.threads} BLAS thread(s), "
          f"{args.rounds} rounds x {args.steps} steps; median step time per configuration")
    for kind in kinds:
        extra = "" if kind == "none" else f"   overhead {cost[kind]:+.2%}"
        print(f"  {kind:<10} {step_s[kind] * 1e3:8.3f} ms/step{extra}")
    print(f"one system sample (off the training thread, every --interval): "
          f"{sample_s * 1e3:.3f} ms")
    print(f"targets: default < 1% -> {'met' if cost['default'] < 0.01 else 'NOT met'}; "
          f"--ops < 5% -> {'met' if cost['ops'] < 0.05 else 'NOT met'}")
    print(json.dumps({"bench": "probe_overhead", "batch_size": args.batch_size,
                      "threads": args.threads, "cores": os.cpu_count(),
                      "step_ms": {k: round(v * 1e3, 4) for k, v in step_s.items()},
                      "overhead": {k: round(v, 4) for k, v in cost.items()},
                      "system_sample_ms": round(sample_s * 1e3, 4),
                      "time": time.strftime("%Y-%m-%dT%H:%M:%S")}))


if __name__ == "__main__":
    main()
