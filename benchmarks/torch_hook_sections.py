"""Where profiling's cost lands on the training thread of bench_torch_overhead.py's MLP,
timed in place: the PyTorch source's two per-step hooks (the DataLoader's `__next__`
wrapper, less the DataLoader's own `__next__` inside it; torch.optim's step hook with the
probes' callbacks behind it) and the profile writer's flush, each summed over a round of
steps of the real MLP under the probes a `paddletune profile` session runs.

Why besides bench_torch_overhead.py: there the cost comes from a near-empty step, where
the hooks' Python runs with warm caches; between the MLP's ops it runs cold, and its
interleaved wall times are too noisy (a few percent between rounds) to show a cost under
1%. Timed in place, each section's time is the MLP's own, at microsecond resolution. It
counts an upper bound: the first Python after an op also warms the interpreter for what
follows, and the timers add their own calls (a few perf_counter reads a batch). The MLP's
DataLoader makes 16 batches a pass, so a pass starts and ends every 16 steps (both are in
the `__next__` section).

Prints each section's median over the rounds, per step, and its share of the profiled step,
then one JSON line. Run: python benchmarks/torch_hook_sections.py [--rounds 7 --steps 320]
"""

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from torch.utils.data import dataloader as dl  # noqa: E402

from bench_torch_overhead import Job  # noqa: E402
from overhead_common import profiled  # noqa: E402
from paddletune.sources.torch import hooks  # noqa: E402
from paddletune.sources.torch.source import TorchSource  # noqa: E402

_perf = time.perf_counter
SECTIONS = ("next_hook", "step_hook", "writer")


class Timers:
    """Seconds spent in each section since the last `take`."""

    def __init__(self):
        self.outer = self.inner = self.step = 0.0

    def take(self) -> dict:
        out = {"next_hook": self.outer - self.inner, "step_hook": self.step}
        self.outer = self.inner = self.step = 0.0
        return out


def timed_next(original, timers: Timers, attribute: str):
    def __next__(it):
        t0 = _perf()
        try:
            return original(it)
        finally:
            setattr(timers, attribute, getattr(timers, attribute) + _perf() - t0)
    return __next__


def timed_step_hook(original, timers: Timers):
    def _after_step(self, optimizer, args, kwargs):
        t0 = _perf()
        try:
            return original(self, optimizer, args, kwargs)
        finally:
            timers.step += _perf() - t0
    return _after_step


def measure(job, rounds: int, steps: int, directory) -> dict:
    """Per round: each section's seconds per step, and the profiled step's."""
    timers = Timers()
    true_next, true_step = dl._BaseDataLoaderIter.__next__, hooks.TorchHooks._after_step
    dl._BaseDataLoaderIter.__next__ = timed_next(true_next, timers, "inner")
    hooks.TorchHooks._after_step = timed_step_hook(true_step, timers)
    out = {name: [] for name in SECTIONS + ("step",)}
    try:
        with profiled(TorchSource, Path(directory) / "sections.jsonl",
                      "torch_hook_sections") as block:
            hooked_next = dl._BaseDataLoaderIter.__next__  # (the source's wrapper)
            dl._BaseDataLoaderIter.__next__ = timed_next(hooked_next, timers, "outer")
            try:
                job.steps(50)
                block.settle()
                timers.take()
                for _ in range(rounds):
                    step_s = job.steps(steps)
                    t0 = _perf()
                    block.settle()
                    writer_s = _perf() - t0
                    taken = timers.take()
                    for name in ("next_hook", "step_hook"):
                        out[name].append(taken[name] / steps)
                    out["writer"].append(writer_s / steps)
                    out["step"].append(step_s)
            finally:
                dl._BaseDataLoaderIter.__next__ = hooked_next
    finally:
        dl._BaseDataLoaderIter.__next__ = true_next
        hooks.TorchHooks._after_step = true_step
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=320, help="steps per round")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    job = Job(args.batch_size)
    job.steps(100)
    with tempfile.TemporaryDirectory() as directory:
        rounds = measure(job, args.rounds, args.steps, directory)
    median = {name: statistics.median(values) for name, values in rounds.items()}
    total = sum(median[name] for name in SECTIONS)
    print(f"PyTorch {torch.__version__} MLP 784-512-512-10, batch {args.batch_size}: "
          f"{args.rounds} rounds x {args.steps} steps, the profiled step "
          f"{median['step'] * 1e3:.3f} ms (median)")
    for name in SECTIONS:
        print(f"{name:<10}{median[name] * 1e6:>8.1f} us a step = "
              f"{median[name] / median['step']:.2%} (rounds {min(rounds[name]) * 1e6:.1f}-"
              f"{max(rounds[name]) * 1e6:.1f} us)")
    print(f"{'all':<10}{total * 1e6:>8.1f} us a step = {total / median['step']:.2%} of the "
          f"profiled step")
    print(json.dumps({"bench": "torch_hook_sections", "torch": torch.__version__,
                      "rounds": args.rounds, "steps": args.steps,
                      "step_ms": round(median["step"] * 1e3, 4),
                      **{f"{name}_us": round(median[name] * 1e6, 2) for name in SECTIONS},
                      "total_us": round(total * 1e6, 2),
                      "share_of_step": round(total / median["step"], 5)}))


if __name__ == "__main__":
    main()
