"""What a PyTorch DataLoader's hand-over of a worker's batch costs the training loop, under
each of torch.multiprocessing's sharing strategies (file_descriptor, Linux's default, and
file_system), side by side in one process: each round makes a DataLoader with persistent
workers under one strategy, then the other (the order alternating), and times every
`next()` of a loop that spins --step-ms between them (a busy trainer, as a training step
keeps a core busy) while the workers, far faster than the loop, keep the queue filled: so
each `next()` is the hand-over of a batch already made. Also read: the part of it the profile
reports as the hand-over (paddletune's HandOverClock: the storages' rebuilds).

The advice worker-hand-over (advisors/handover.py) predicts file_system's hand-over as
FILE_SYSTEM_SHARE of the measured file_descriptor one, from these figures.

Prints a table and, last, one JSON line. Run:
    python benchmarks/torch_sharing_strategy.py [--rounds 4 --batches 400 --tensors 2]
"""

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path

import torch
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from paddletune.sources.torch.handover import HandOverClock  # noqa: E402

STRATEGIES = ("file_descriptor", "file_system")
WARMUP = 20


class Samples(torch.utils.data.Dataset):
    """Samples of `tensors` tensors: (32,) floats and, after the first, int labels."""

    def __init__(self, tensors: int):
        self.tensors = tensors

    def __len__(self):
        return 10 ** 6

    def __getitem__(self, i):
        return (torch.randn(32),) + tuple(torch.tensor(i % 10) for _ in range(self.tensors - 1))


def _spin(seconds: float):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def one_block(strategy: str, args, clock: HandOverClock) -> dict:
    """The medians of next() and of its rebuilds, over --batches batches."""
    mp.set_sharing_strategy(strategy)
    loader = torch.utils.data.DataLoader(Samples(args.tensors), batch_size=64,
                                         num_workers=args.workers, persistent_workers=True,
                                         prefetch_factor=4)
    it = iter(loader)
    for _ in range(WARMUP):
        next(it)
    nexts, rebuilds = [], []
    for _ in range(args.batches):
        _spin(args.step_ms / 1e3)
        clock.asking = threading.get_ident()
        before = clock.total_s
        t0 = time.perf_counter()
        next(it)
        nexts.append(time.perf_counter() - t0)
        rebuilds.append(clock.total_s - before)
    del it, loader  # (its workers stop)
    return {"next_ms": statistics.median(nexts) * 1e3,
            "rebuild_ms": statistics.median(rebuilds) * 1e3}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--batches", type=int, default=400)
    parser.add_argument("--tensors", type=int, default=2, help="tensors per batch")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--step-ms", type=float, default=3.0)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    clock, undo = HandOverClock(), []

    def patch(module, name, make):
        original = getattr(module, name)
        setattr(module, name, make(original))
        undo.append(lambda: setattr(module, name, original))

    clock.install(patch)
    rows = []
    try:
        for r in range(args.rounds):
            order = STRATEGIES if r % 2 == 0 else STRATEGIES[::-1]
            got = {s: one_block(s, args, clock) for s in order}
            rows.append(got)
            fd, fs = got["file_descriptor"], got["file_system"]
            ratio = fs["next_ms"] / fd["next_ms"]
            print(f"round {r + 1}: next() {fd['next_ms']:.3f} ms (file_descriptor) against "
                  f"{fs['next_ms']:.3f} ms (file_system), ratio {ratio:.2f}; rebuilds "
                  f"{fd['rebuild_ms']:.3f} against {fs['rebuild_ms']:.3f} ms", flush=True)
    finally:
        while undo:
            undo.pop()()
    ratios = [g["file_system"]["next_ms"] / g["file_descriptor"]["next_ms"] for g in rows]
    print(f"\nfile_system / file_descriptor, next(): median {statistics.median(ratios):.2f} "
          f"(range {min(ratios):.2f}-{max(ratios):.2f}); {args.tensors} tensors a batch, "
          f"{args.workers} workers, a {args.step_ms:g} ms busy step")
    print(json.dumps({"bench": "torch_sharing_strategy", "tensors": args.tensors,
                      "workers": args.workers, "step_ms": args.step_ms, "rounds": rows,
                      "ratio_median": statistics.median(ratios)}))


if __name__ == "__main__":
    main()
