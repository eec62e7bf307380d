"""What profiling costs the near-empty PyTorch step (bench_torch_overhead.py's TinyJob), counted
in Python bytecodes instead of timed: no timing noise, so a change of a few dozen bytecodes a
step shows. Every thread's opcodes are traced (Python's opcode trace event), since the
probes' threads share the GIL with the training loop; each run trains 300 untraced steps,
then `steps` traced ones, bare or under the probes of `overhead_common.profiled` (with the
profile writer's flush). A step's cost is the difference of two runs' counts (the fixed costs
cancel): (profiled 1,300 - profiled 300) - (bare 1,300 - bare 300), over 1,000 steps.

The split between threads moves a little from run to run (the reader probe's queued events
are counted by its sampler or by the thread that starts or ends a pass, whichever comes
first; the samplers' and the writer's timed work depends on how long the traced steps take).

Run: python benchmarks/torch_step_opcodes.py [--top 30]   (about a minute: four runs)
"""

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
STEPS = (300, 1300)
WARMUP = 300


def count(kind: str, steps: int) -> collections.Counter:
    """Opcodes by (thread, file, function) over `steps` steps after WARMUP, in this process."""
    sys.path[:0] = [str(ROOT), str(HERE)]
    import torch
    torch.set_num_threads(1)
    from bench_torch_overhead import TinyJob
    from overhead_common import profiled
    from paddletune.sources.torch.source import TorchSource

    counts = collections.Counter()

    def tracer(frame, event, arg):
        frame.f_trace_opcodes = True
        if event == "opcode":
            name = frame.f_code.co_filename.replace(str(ROOT) + "/", "")
            counts[(threading.current_thread().name[:18], name, frame.f_code.co_name)] += 1
        return tracer

    job = TinyJob()
    job.steps(WARMUP)
    with tempfile.TemporaryDirectory() as tmp:
        threading.settrace(tracer)
        sys.settrace(tracer)
        try:
            if kind == "bare":
                job.steps(steps)
            else:
                with profiled(TorchSource, Path(tmp) / "p.jsonl", "x") as block:
                    job.steps(steps)
                    block.settle()
                    sys.settrace(None)  # (not the probes' stop and the writer's end)
                    threading.settrace(None)
        finally:
            sys.settrace(None)
            threading.settrace(None)
    return counts


def per_step(runs: dict) -> collections.Counter:
    """Bytecodes a step by (thread, file, function): the runs' difference over the steps."""
    n = STEPS[1] - STEPS[0]
    out = collections.Counter()
    for (kind, steps), counts in runs.items():
        sign = (1 if steps == STEPS[1] else -1) * (1 if kind == "full" else -1)
        for key, value in counts.items():
            out[key] += sign * value / n
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--top", type=int, default=30, help="functions listed")
    parser.add_argument("--run", nargs=2, metavar=("KIND", "STEPS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.run:  # one run, in a fresh process (the parent reads its counts)
        counts = count(args.run[0], int(args.run[1]))
        print(json.dumps([[list(k), v] for k, v in counts.items()]))
        return
    runs = {}
    for kind in ("bare", "full"):
        for steps in STEPS:
            out = subprocess.run([sys.executable, __file__, "--run", kind, str(steps)],
                                 check=True, capture_output=True, text=True,
                                 env={**os.environ, "OMP_NUM_THREADS": "1"})
            runs[kind, steps] = collections.Counter(
                {tuple(k): v for k, v in json.loads(out.stdout.splitlines()[-1])})
    rows = per_step(runs)
    threads = collections.Counter()
    for (thread, _, _), value in rows.items():
        threads[thread] += value
    print("bytecodes a step, by thread: " + ", ".join(
        f"{t} {v:.0f}" for t, v in threads.most_common() if abs(v) >= 0.5)
        + f"; in all {sum(threads.values()):.0f}")
    for (thread, path, function), value in sorted(rows.items(), key=lambda kv: -abs(kv[1])
                                                  )[:args.top]:
        print(f"{value:8.1f}  {thread:18} {path}:{function}")


if __name__ == "__main__":
    main()
