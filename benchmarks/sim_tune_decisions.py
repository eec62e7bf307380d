"""How often `paddletune tune`'s search takes a real gain, and how often it takes a setting that
is no better, on a simulated noisy job: a Monte Carlo of its decisions, for judging a change
to its rules (search.py, compare.py) before spending a real benchmark on it.

The job has one knob, num_workers (0, the job's own; 1; 2), and no real trials: each trial's
samples/s is its setting's true rate times 1 + a normal error of --noise (a trial-level
effect: the same at any length), and its batch-means error sees --within of that (trials
vary more from one to the next than within themselves). num_workers=2 is clearly worse
(0.85x); num_workers=1 is --gain better. With --quiet-baseline the job's own setting varies
by 1% only (a GIL-bound thread and quiet worker processes invert that in practice; this is
the case where pooling the spread over settings misleads).

    python benchmarks/sim_tune_decisions.py                  # a real +6% gain, 6% noise
    python benchmarks/sim_tune_decisions.py --gain 0         # no real gain: false accepts
    python benchmarks/sim_tune_decisions.py --quiet-baseline --gain 0

Prints the share of runs that took num_workers=1, the mean number of trials, and one JSON
line (the last line of output).
"""

import argparse
import json
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from paddletune.profile import figures, records  # noqa: E402
from paddletune.profile.model import Profile  # noqa: E402
from paddletune.tune import search  # noqa: E402
from paddletune.tune.search import TuneOptions, Tuner  # noqa: E402
from paddletune.tune.trials import Trial  # noqa: E402


class Clock:
    now = 0.0

    def monotonic(self):
        return self.now


class SimulatedRunner:
    def __init__(self, clock, rate, noise_of, within, seed):
        self.clock, self.rate, self.noise_of, self.within = clock, rate, noise_of, within
        self.rng, self.count = random.Random(seed), 0

    def run(self, setting, env, steps, timeout_s, phase, label):
        self.count += 1
        t = Trial(self.count, dict(setting), label, phase, steps, status="ok")
        t.run_s = steps * 0.01
        t.wall_s = t.run_s + 0.5
        self.clock.now += t.wall_s
        sd = self.noise_of(setting)
        t.samples_per_s = self.rate(setting) * (1 + self.rng.gauss(0, sd))
        t.steps_per_s = t.samples_per_s / 10
        t.se = self.within * sd * t.samples_per_s
        t.ci = 2.36 * t.se
        return t


def job_profile(batch_size=32):
    """The baseline profile's part the space is built from: a thread-fed DataLoader over a
    sample generator at `batch_size`, on 2 cores (typed, as a loaded profile holds it)."""
    config = records.LoaderConfig(name="DataLoader#0", num_workers=0, capacity=2,
                                  use_double_buffer=True, source="sample",
                                  batch_size=batch_size)
    loader = figures.LoaderFigures(
        loader=0, name=config.name, config=config, passes=1, scope="steady", span_s=1.0,
        batches=100, pushes=100, peeks=0, empty_pops=0, empty_ratio=0.0,
        wait=figures.WaitFigures(), occupancy=None, timeline=(),
        producer=figures.ProducerFigures(producers=1), workers=(),
        consumer=figures.ConsumerFigures(), swings=0, oscillating=False)
    env = records.Env(cpu=records.CpuInfo(usable_cores=2), flags={})
    summary = figures.Summary(reader=figures.ReaderFigures(loaders=(loader,), main=0))
    return Profile(path="baseline.jsonl", header=records.Header(schema=2, env=env),
                   summary=summary)


def one_run(args, seed):
    real = search.time.monotonic  # (search.time is the time module itself: put it back)
    search.time.monotonic = Clock().monotonic  # the budget runs on simulated time
    try:
        return _tune(args, seed, search.time.monotonic.__self__)
    finally:
        search.time.monotonic = real


def _tune(args, seed, clock):

    def rate(setting):
        workers = setting.get("num_workers", 0)
        return 1000.0 * {0: 1.0, 1: 1.0 + args.gain, 2: 0.85}[workers]

    def noise_of(setting):
        return 0.01 if args.quiet_baseline and not setting else args.noise

    runner = SimulatedRunner(clock, rate, noise_of, args.within, seed)
    tuner = Tuner(runner, TuneOptions(trial_steps=50, keep_batch_size=True,
                                      specs=("only=num_workers",)))
    tuner.load_profile = lambda path: job_profile()
    tuner.advise = lambda profile: []
    tuner.run()
    return tuner.incumbent.get("num_workers") == 1, len(tuner.trials)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gain", type=float, default=0.06, help="num_workers=1's real gain")
    parser.add_argument("--noise", type=float, default=0.06, help="a trial's relative sd")
    parser.add_argument("--within", type=float, default=0.3,
                        help="the batch-means error as a share of --noise")
    parser.add_argument("--quiet-baseline", action="store_true")
    parser.add_argument("--runs", type=int, default=300)
    args = parser.parse_args(argv)
    runs = [one_run(args, seed) for seed in range(args.runs)]
    took = sum(r[0] for r in runs) / len(runs)
    trials = statistics.mean(r[1] for r in runs)
    print(f"gain {args.gain:+.0%}, trial noise {args.noise:.0%}"
          f"{' (the baseline 1%)' if args.quiet_baseline else ''}: took num_workers=1 in "
          f"{took:.0%} of {len(runs)} runs, {trials:.1f} trials on average")
    print(json.dumps({"bench": "sim_tune_decisions", **vars(args), "took": took,
                      "trials": trials}))


if __name__ == "__main__":
    main()
