"""What the profile writer spends on one training step's record, off the training thread but in
the same process (it takes the GIL): a step of the first HEAD_STEPS, written in full
(codec.StepCompressor.text: the JSON line), and a step of a long job's tail, folded into its
window (accumulate.Accumulator.add: the window's batched fold, the slowest-step heap, the
reservoir). Steps like a fast loop's (about 0.1 ms each, plain Python values), timed in
blocks; prints the best block's microseconds per step of each and one JSON line.

    python benchmarks/bench_writer.py [--steps 50000 --rounds 5]
"""

import argparse
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from paddletune.profile import records as r  # noqa: E402
from paddletune.profile.accumulate import Accumulator  # noqa: E402
from paddletune.profile.codec import StepCompressor  # noqa: E402
from paddletune.profile.writer import _dumps  # noqa: E402  (the writer's JSON encoder)


def fast_loop_steps(n: int, seed: int = 0) -> list:
    rng = random.Random(seed)
    out, t = [], 0.0
    for i in range(n):
        wall = 9e-5 * rng.lognormvariate(0, 0.2)
        gap = None if i == 0 else 1e-5 * rng.random()
        out.append(r.Step(t, 0, 0, i, wall, 0.0, wall * 0.8, 0.0, gap, 1, 0, 0, wall * 0.2,
                          0, None, None, None, None, "CPUPlace"))
        t += wall + (gap or 0.0)
    return out


def per_step(fn, steps: list, rounds: int) -> float:
    """The best of `rounds` passes of fn over `steps`: seconds per step."""
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn(steps)
        best = min(best, (time.perf_counter() - t0) / len(steps))
    return best


def head(steps):
    """The writer's line for each step (StepCompressor.text; a tree from before it, the
    compressed object's JSON)."""
    compressor = StepCompressor()
    line = getattr(compressor, "text", None) or (lambda s: _dumps(compressor.compress(s)))
    for s in steps:
        line(s)


def tail(steps):
    accumulator = Accumulator(head_steps=1)  # (every step but the first in the tail)
    for s in steps:
        accumulator.add(s)
    accumulator.close()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    steps = fast_loop_steps(args.steps)
    head_s, tail_s = per_step(head, steps, args.rounds), per_step(tail, steps, args.rounds)
    print(f"the writer's work on one step's record ({args.steps} steps, best of "
          f"{args.rounds}): written in full {head_s * 1e6:.2f} us; folded into the tail's "
          f"window {tail_s * 1e6:.2f} us")
    print(json.dumps({"bench": "writer", "steps": args.steps,
                      "head_us_per_step": round(head_s * 1e6, 3),
                      "tail_us_per_step": round(tail_s * 1e6, 3)}))


if __name__ == "__main__":
    main()
