"""How much a tuning trial of one of bench_tune.py's jobs varies from run to run: settings
measured in turn, `--repeats` times each, as the tuner measures them (a `paddletune profile`
subprocess each, the setting imposed through the environment), then each setting's mean
samples/s and coefficient of variation. The tuner can only tell settings apart by more than
this noise (what sim_tune_batch.py's model takes from it).

    python benchmarks/trial_noise.py --job batch --steps 200 --repeats 8 \\
        '{"batch_size": 128}' '{"batch_size": 128, "num_workers": 2}'

Settings are JSON objects of the job's knobs (no setting: the job as it is). Prints a line
per setting and one JSON line (the last line of output).
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_tune import JOBS, REPO  # noqa: E402
from paddletune.tune import space as sp  # noqa: E402
from paddletune.tune.trials import TrialRunner  # noqa: E402


def measure(job, settings, steps, repeats, workdir) -> dict:
    """{label: [samples/s of each ok trial]}, the settings interleaved."""
    env = {k: v for k, v in os.environ.items() if k != "PADDLETUNE_OVERRIDES"}
    env.update(job["env"])
    runner = TrialRunner(str(REPO / job["script"]), job["args"], workdir, env)
    rates = {sp.label(s): [] for s in settings}
    try:
        for _ in range(repeats):
            for setting in settings:
                overrides = {"PADDLETUNE_OVERRIDES": json.dumps({"reader": setting})} \
                    if setting else {}
                t = runner.run(setting, overrides, steps, 120, "noise", sp.label(setting))
                if t.ok:
                    rates[sp.label(setting)].append(t.samples_per_s)
    finally:
        runner.close()
    return rates


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("settings", nargs="*", help="JSON objects of reader knobs")
    parser.add_argument("--job", default="batch", choices=sorted(JOBS))
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=6)
    args = parser.parse_args(argv)
    settings = [json.loads(s) for s in args.settings] or [{}]
    with tempfile.TemporaryDirectory(prefix="trial-noise-") as tmp:
        rates = measure(JOBS[args.job], settings, args.steps, args.repeats, Path(tmp))
    out = {}
    for label, values in rates.items():
        mean = statistics.mean(values) if values else None
        cv = statistics.stdev(values) / mean if len(values) > 1 else None
        out[label] = {"mean": mean, "cv": cv, "trials": values}
        print(f"{label:<40} " + (f"{mean:>9,.0f} samples/s, CV {cv:.1%} over {len(values)}"
                                  if cv is not None else f"{len(values)} ok trial(s)"))
    print(json.dumps({"bench": "trial_noise", "job": args.job, "steps": args.steps,
                      "settings": out}))


if __name__ == "__main__":
    main()
