"""`paddletune tune` on a model of bench_tune.py's batch job, many times over: the share of the
grid's time it takes and the share of the grid's best it finds, as distributions (a real
run of the batch job takes minutes and gives one point of each). For judging a change to
the search's rules before spending real benchmark runs on it.

The model, measured on the 2-core machine (bench_tune's batch job: tests/tunejob.py with a
4096-wide hidden layer under FLAGS_cpu_memory_limit_mb=10, a thread reader, batch 16):
- samples/s by batch size: 8 -> 2.1k, 16 -> 4.1k, 32 -> 7.0k, 64 -> 12.5k, 107 -> 16.5k,
  128 -> 17.2k, 162 -> 18.7k (linear in between); the reader knobs change nothing at these
  sizes (8 interleaved trials a setting at batch 128: within 5% of each other, inside the
  noise), unless --knob-gain gives num_workers=2 a real gain at 64 and above;
- a trial's relative error: 2% at 16 and below, 4% at 32, 6% at 64, 13-14% from 107 up, the
  same at any length (it is the run's, not its steps': 750-step trials at batch 128 varied
  by 12%, 200-step ones by 16%); its batch-means error a quarter of that;
- the step's peak memory 0.53 MB + 54.4 kB a sample (out of memory above ~183), the memory
  model's first guess 199; a trial's start-up 0.22 s (0.5 s more for the first);
- the grid: bench_tune's (batch 8..256 x num_workers 0, 1, 2 x capacity 2, 16; trials of
  twice the tuner's first rung; an out-of-memory trial 0.3 s).

    python benchmarks/sim_tune_batch.py                   # 300 runs
    python benchmarks/sim_tune_batch.py --knob-gain 0.2   # a real +20% from 2 workers

Prints the distributions and one JSON line (the last line of output).
"""

import argparse
import json
import math
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from paddletune.tune import search, space as sp  # noqa: E402
from paddletune.tune.search import TuneOptions, Tuner  # noqa: E402
from paddletune.tune.trials import Trial  # noqa: E402
from sim_tune_decisions import Clock, job_profile  # noqa: E402

RATES = [(8, 2100), (16, 4100), (32, 7000), (64, 12500), (107, 16500), (128, 17200),
         (162, 18700), (512, 18700)]
NOISE = [(8, 0.02), (16, 0.02), (32, 0.04), (64, 0.06), (107, 0.13), (512, 0.14)]
CAPACITY = 10 * 2 ** 20
START_S, FIRST_START_S = 0.22, 0.5
SPECS = ("only=batch_size,num_workers,capacity", "capacity=2,16")
GRID_BATCHES = (8, 16, 32, 64, 128, 192, 256)
GRID_READERS = [{}, {"num_workers": 1}, {"num_workers": 2}, {"capacity": 16},
                {"num_workers": 1, "capacity": 16}, {"num_workers": 2, "capacity": 16}]


def _linear(points, x):
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if x0 <= x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return points[-1][1]


def peak_bytes(batch):
    return int(526_000 + 54_400 * batch)


class Job:
    """The model's true samples/s of a setting, and its trials."""

    def __init__(self, knob_gain):
        self.knob_gain = knob_gain

    def rate(self, setting) -> float:
        batch = setting.get("batch_size", 16)
        gain = self.knob_gain if setting.get("num_workers") == 2 and batch >= 64 else 0.0
        return _linear(RATES, batch) * (1 + gain)

    def grid_s(self, steps) -> float:
        total = 0.0
        for batch in GRID_BATCHES:
            for reader in GRID_READERS:
                rate = self.rate({"batch_size": batch, **reader})
                total += 0.3 if peak_bytes(batch) > CAPACITY else START_S + steps * batch / rate
        return total

    def grid_best(self) -> float:
        return max(self.rate({"batch_size": b, **r}) for b in GRID_BATCHES for r in GRID_READERS
                   if peak_bytes(b) <= CAPACITY)


class Runner:
    def __init__(self, job, clock, seed):
        self.job, self.clock, self.rng, self.count = job, clock, random.Random(seed), 0

    def run(self, setting, env, steps, timeout_s, phase, label, duration_s=None):
        self.count += 1
        batch = setting.get("batch_size", 16)
        t = Trial(self.count, dict(setting), label, phase, steps)
        if peak_bytes(batch) > CAPACITY:
            t.status, t.wall_s = "oom", 0.3
            self.clock.now += t.wall_s
            return t
        noise = _linear(NOISE, batch)
        rate = self.job.rate(setting) * math.exp(self.rng.gauss(0, noise))
        if duration_s is not None:  # the steps that fit in the time, at this trial's speed
            t.steps = steps = min(steps, 1 + int(duration_s * rate / batch))
        t.status, t.samples_per_s, t.steps_per_s, t.batch_size = "ok", rate, rate / batch, batch
        t.run_s = steps / t.steps_per_s
        t.wall_s = t.run_s + START_S + (FIRST_START_S if self.count == 1 else 0.0)
        t.se = rate * noise / 4 * self.rng.uniform(0.5, 1.5) / math.sqrt(max(t.run_s / 1.5, 0.2))
        t.ci = 2.36 * t.se
        t.peak_bytes, t.capacity_bytes = peak_bytes(batch), CAPACITY
        t.batch_model = {"largest_batch": 199}
        t.input_share, t.put_wait_share = (0.8 if batch <= 16 else 0.55), 0.2
        self.clock.now += t.wall_s
        return t


def one_run(job, seed) -> dict:
    clock, real = Clock(), search.time.monotonic
    search.time.monotonic = clock.monotonic  # the budget runs on simulated time
    try:
        tuner = Tuner(Runner(job, clock, seed),
                      TuneOptions(budget_s=300, specs=SPECS, max_batch_size=512))
        tuner.load_profile = lambda path: job_profile(batch_size=16)
        tuner.advise = lambda profile: []
        tuner.run()
    finally:
        search.time.monotonic = real
    return {"time_share": clock.now / job.grid_s(2 * tuner.steps0),
            "quality": job.rate(tuner.incumbent) / job.grid_best(),
            "trials": len(tuner.trials), "best": sp.label(tuner.incumbent)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--knob-gain", type=float, default=0.0,
                        help="num_workers=2's real gain at batch 64 and above")
    parser.add_argument("--runs", type=int, default=300)
    args = parser.parse_args(argv)
    job = Job(args.knob_gain)
    runs = [one_run(job, seed) for seed in range(args.runs)]
    shares = sorted(r["time_share"] for r in runs)
    quality = [r["quality"] for r in runs]
    result = {"runs": len(runs), "knob_gain": args.knob_gain,
              "time_share_median": statistics.median(shares),
              "time_share_p90": shares[int(0.9 * (len(shares) - 1))],
              "within_time": sum(s <= 0.25 for s in shares) / len(runs),
              "within_quality": sum(q >= 0.95 for q in quality) / len(runs),
              "quality_mean": statistics.mean(quality),
              "trials_mean": statistics.mean(r["trials"] for r in runs)}
    print(f"{len(runs)} simulated runs (num_workers=2 {args.knob_gain:+.0%} at batch 64 and "
          f"up): time share median {result['time_share_median']:.0%}, 90th percentile "
          f"{result['time_share_p90']:.0%}, <= 25% in {result['within_time']:.0%}; best >= "
          f"95% of the grid's in {result['within_quality']:.0%} (mean "
          f"{result['quality_mean']:.1%}); {result['trials_mean']:.1f} trials on average")
    print(json.dumps({"bench": "sim_tune_batch", **result}))


if __name__ == "__main__":
    main()
