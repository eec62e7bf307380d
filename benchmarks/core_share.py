"""How much of a core each of two busy processes gets on this machine: a CPU-bound batch
maker (per-sample Python arithmetic over NumPy values, like examples/torch/input_heavy.py's
Dataset, without torch) timed alone, then two copies of it at once in forked processes, in
turn, `--rounds` times. Each round's share is the time a batch took alone over its mean time
when two ran at once: 1.0 when the two processes each get a whole core, 0.5 when they share
one.

The worker-count model of the reader advice (paddletune/advisors/producers.py,
SHARED_CORE_USE) assumes a trainer and its workers keep 85% of the cores busy; this measures
what the machine gives two processes, and how much the speed of one alone moves between
rounds (a VM whose host is shared moves both).

    python benchmarks/core_share.py --rounds 6

Prints a line per round and one JSON line (the last line of output).
"""

import argparse
import json
import multiprocessing
import statistics
import time

import numpy as np

SAMPLES = 32  # per batch
DIM = 64  # values per sample
WORK = 100  # rounds of per-value Python arithmetic per sample


def batch_ms(batches: int, seed: int) -> float:
    """Milliseconds per batch made in this process."""
    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()
    for _ in range(batches):
        rows = []
        for _ in range(SAMPLES):
            x = rng.normal(size=DIM).astype(np.float32)
            acc = 0.0
            for _ in range(WORK):
                for v in x.tolist():
                    acc += v * v
            rows.append(x / np.float32(1.0 + 1e-9 * acc))
        np.stack(rows)
    return (time.perf_counter() - t0) / batches * 1e3


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--batches", type=int, default=60, help="batches per measurement")
    args = parser.parse_args(argv)
    context = multiprocessing.get_context("fork")
    rounds = []
    for r in range(args.rounds):
        alone = batch_ms(args.batches, r)
        with context.Pool(2) as pool:
            both = pool.starmap(batch_ms, [(args.batches, 100 + r), (args.batches, 200 + r)])
        share = alone / statistics.mean(both)
        rounds.append({"alone_ms": round(alone, 2), "two_ms": [round(x, 2) for x in both],
                       "share": round(share, 3)})
        print(f"round {r + 1}: alone {alone:.2f} ms a batch; two at once {both[0]:.2f} and "
              f"{both[1]:.2f} ms: each ran at {share:.2f} of its speed alone")
    shares = [x["share"] for x in rounds]
    alone = [x["alone_ms"] for x in rounds]
    print(f"share: mean {statistics.mean(shares):.2f}, {min(shares):.2f}-{max(shares):.2f}; "
          f"alone: {min(alone):.2f}-{max(alone):.2f} ms a batch")
    print(json.dumps({"bench": "core_share", "rounds": rounds,
                      "mean_share": round(statistics.mean(shares), 3),
                      "min_share": min(shares), "max_share": max(shares)}))


if __name__ == "__main__":
    main()
