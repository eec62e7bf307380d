"""`gc.freeze()` before a training loop against none, side by side in one process, with the
gain the gc-full-collections advice predicts from the same run's figures
(advisors/collector.py: 1 / (1 - p * h0 / h), p the full collections' share of the plain
rounds' time, h0 the objects tracked as the loop began, h at its end).

The job: a PyTorch MLP (1,024 x 128 -> 256 -> 1) trained with SGD after a setup that leaves
`--heap` dicts, each with a list (a dataset held as Python objects: twice as many tracked
objects), whose loop keeps each step's 1,000 per-sample records for 8 steps (a rolling
window of metrics): they live long enough to reach the oldest generation, and a full
collection comes every 80 steps or so, each scanning the setup's heap again. Rounds
alternate: plain, then frozen (`gc.collect(); gc.freeze()` before it, `gc.unfreeze()`
after), `--rounds` times each. Wall time moves with the machine's load; the collector's own
time is reported too.

Prints a table and, last, one JSON line. Run:
    python benchmarks/bench_gc_freeze.py [--rounds 5] [--steps 400] [--heap 200000]
"""

import argparse
import collections
import gc
import json
import statistics
import time


class Collections:
    """The full collections' count and time on this thread, from gc.callbacks."""

    def __init__(self):
        self.full, self.full_s, self._t = 0, 0.0, None

    def __call__(self, phase, info):
        if phase == "start":
            self._t = time.perf_counter()
        elif self._t is not None:
            if info.get("generation") == 2:
                self.full += 1
                self.full_s += time.perf_counter() - self._t
            self._t = None


def job(steps_per_round: int):
    import torch
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(1024, 128), torch.randn(1024, 1)
    window = collections.deque(maxlen=8)  # each step's per-sample records, kept 8 steps

    def run_round() -> float:
        t0 = time.perf_counter()
        for _ in range(steps_per_round):
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
            window.append([{"sample": i, "scores": [0.0]} for i in range(1000)])
        return time.perf_counter() - t0
    return run_round


def measure(rounds: int, steps: int, heap_size: int) -> dict:
    heap = [{"id": i, "tokens": [i]} for i in range(heap_size)]  # the setup's objects
    run_round = job(steps)
    run_round()  # warm up
    clock = Collections()
    gc.callbacks.append(clock)
    rows = {"plain": [], "frozen": []}
    try:
        for _ in range(rounds):
            for kind in ("plain", "frozen"):
                if kind == "frozen":
                    gc.collect()
                    gc.freeze()
                h0 = len(gc.get_objects())
                full, full_s = clock.full, clock.full_s
                wall_s = run_round()
                rows[kind].append({"wall_s": wall_s, "full": clock.full - full,
                                   "full_s": clock.full_s - full_s, "h0": h0,
                                   "h": len(gc.get_objects())})
                if kind == "frozen":
                    gc.unfreeze()
    finally:
        gc.callbacks.remove(clock)
    del heap
    return rows


def summary(rows: dict, steps: int) -> dict:
    plain, frozen = rows["plain"], rows["frozen"]
    plain_s = statistics.median(r["wall_s"] for r in plain)
    frozen_s = statistics.median(r["wall_s"] for r in frozen)
    predicted = [1 / (1 - (r["full_s"] / r["wall_s"]) * min(r["h0"] / r["h"], 1.0))
                 for r in plain]
    ratios = [p["wall_s"] / f["wall_s"] for p, f in zip(plain, frozen)]
    return {"steps_per_round": steps, "rounds": len(plain),
            "plain_steps_per_s": steps / plain_s, "frozen_steps_per_s": steps / frozen_s,
            "speedup": plain_s / frozen_s, "speedup_per_pair": ratios,
            "predicted": statistics.median(predicted),
            "plain_full_per_round": statistics.median(r["full"] for r in plain),
            "frozen_full_per_round": statistics.median(r["full"] for r in frozen),
            "plain_full_share": statistics.median(r["full_s"] / r["wall_s"] for r in plain),
            "frozen_full_share": statistics.median(r["full_s"] / r["wall_s"] for r in frozen),
            "heap_start": plain[0]["h0"], "heap_end": plain[-1]["h"]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--heap", type=int, default=200_000)
    args = parser.parse_args()
    result = summary(measure(args.rounds, args.steps, args.heap), args.steps)
    print(f"{'':10} {'steps/s':>9} {'full GCs':>9} {'full GC share':>14}")
    for kind in ("plain", "frozen"):
        print(f"{kind:10} {result[f'{kind}_steps_per_s']:9.1f} "
              f"{result[f'{kind}_full_per_round']:9.0f} {result[f'{kind}_full_share']:14.1%}")
    pairs = ", ".join(f"{r:.2f}" for r in result["speedup_per_pair"])
    print(f"speedup {result['speedup']:.2f}x (pairs: {pairs}); the advice's prediction "
          f"{result['predicted']:.2f}x; heap {result['heap_start']:,} -> "
          f"{result['heap_end']:,} objects")
    print(json.dumps({"benchmark": "gc_freeze", **result}))


if __name__ == "__main__":
    main()
