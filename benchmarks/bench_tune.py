"""`paddletune tune` against an exhaustive grid over the same space, on mis-configured jobs.

For each job: the tuner runs (trials of S and 2S steps, its own stopping rule, a generous
budget; S is the tuner's own calibration, about 1.5 s of the job's steps, unless
--trial-steps is given; a setting whose steps are slower, a larger batch, runs fewer steps
for about the same time: paddletune/tune/lengths.py); then every combination of the same
knobs' values is measured once at 2S steps (the tuner's longest trials); then the tuner's
best and the grid's best are measured again, alternating, `--verify` times each, so the two
are compared under the same conditions (and the grid's winner's luck in its one measurement
does not count). Reported per job: the tuner's best as a share of the grid's best (target
>= 95%) and the tuner's time as a share of the grid's (target <= 25%), its whole time (the
final interleaved pairs that measure its speedup included: the grid has no such
measurement) and the time of its search alone.
Each trial is a new process: its start-up (~0.25 s here: Python, NumPy, the runtime, the
script's set-up, the profile's summary; for the PyTorch job, importing torch, ~2.5 s) weighs
on short trials, the tuner's and the grid's alike. One untimed run of the job comes first, so
that the tuner and the grid both start warm: the first run of a job reads its imports from
disk (the PyTorch job's first baseline took 15 s, its later trials 5-7 s) and, with
PYTHONDONTWRITEBYTECODE set, fills the trials' private bytecode cache (~1.5 s). The floor
column is about the least time any search that measures its noise, tries each knob value
once and states a measured speedup could take (see floor_s): a search
that tries every value cannot meet a target below it on that space (the tuner can, where it
leaves out values that cannot win: paddletune/tune/prune.py).

Jobs (all deliberately mis-configured):
  reader   tests/tunejob.py defaults: a reader thread and a 2-batch queue in front of a
           producer slower than the step with bursts (best: 2 workers, capacity >= 16);
           knobs num_workers x capacity x use_double_buffer x blas_threads x
           FLAGS_eager_delete_tensor_gb (120 settings)
  batch    tests/tunejob.py with a 4096-wide hidden layer under FLAGS_cpu_memory_limit_mb=10
           at batch 16 with a thread reader: knobs batch_size x num_workers x capacity; the
           grid's batch sizes are 8..256 (those that do not fit fail, as in the tuner)
  pipeline examples/input_pipeline.py --reader loader: a Python-heavy (GIL-holding) reader
           thread; knobs num_workers x capacity x blas_threads (30 settings)
  torch    examples/torch/input_heavy.py: a PyTorch DataLoader with num_workers=0 over a
           Dataset whose __getitem__ does per-sample Python work; knobs num_workers x
           prefetch_factor x persistent_workers x blas_threads (torch's threads,
           OMP_NUM_THREADS; 36 settings)
  paddle   examples/paddle/input_heavy.py: a Paddle 3 DataLoader with num_workers=0 (its
           reading thread) over a Dataset whose __getitem__ sorts and transforms per sample;
           the same knobs (Paddle's CPU math threads)

    python benchmarks/bench_tune.py                  # all jobs (several minutes)
    python benchmarks/bench_tune.py --jobs reader --trial-steps 60 --keep /tmp/records
                                                     # short trials: start-up dominated

Prints a table per job and one JSON line (the last line of output).
"""

import argparse
import itertools
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from paddletune.tune import record as rec  # noqa: E402
from paddletune.tune import space as sp  # noqa: E402
from paddletune.tune.search import TuneOptions, Tuner  # noqa: E402
from paddletune.tune.trials import TrialRunner, t95  # noqa: E402

JOBS = {
    "reader": dict(script="tests/tunejob.py", args=[], env={}, keep_batch_size=True,
                   specs=["only=num_workers,capacity,use_double_buffer,blas_threads,"
                          "FLAGS_eager_delete_tensor_gb"]),
    "batch": dict(script="tests/tunejob.py",
                  args=["--hidden", "4096", "--in-dim", "8", "--burst-every", "0",
                        "--batch-ms", "2"],
                  env={"FLAGS_cpu_memory_limit_mb": "10"}, keep_batch_size=False,
                  specs=["only=batch_size,num_workers,capacity", "capacity=2,16"],
                  grid_batches=[8, 16, 32, 64, 128, 192, 256], max_batch_size=512),
    "pipeline": dict(script="examples/input_pipeline.py",
                     args=["--reader", "loader", "--steps", "100000", "--log-every", "0"],
                     env={}, keep_batch_size=True,
                     specs=["only=num_workers,capacity,blas_threads"]),
    "torch": dict(script="examples/torch/input_heavy.py", args=["--steps", "100000"],
                  env={}, keep_batch_size=True,
                  specs=["only=num_workers,prefetch_factor,persistent_workers,blas_threads"]),
    "paddle": dict(script="examples/paddle/input_heavy.py", args=["--steps", "100000"],
                   env={"GLOG_minloglevel": "2"}, keep_batch_size=True,
                   specs=["only=num_workers,prefetch_factor,persistent_workers,"
                          "blas_threads"]),
}


WARMUP_STEPS = 20


def run_job(name, job, args, workdir):
    env = {k: v for k, v in os.environ.items() if k != "PADDLETUNE_OVERRIDES"}
    env.update(job["env"])
    runner = TrialRunner(str(REPO / job["script"]), job["args"], workdir / name, env)
    # untimed: the first run of a job reads its imports from disk (torch: ~10 s more than a
    # warm start here) and fills the trials' bytecode cache; the grid, run after the tuner,
    # would otherwise start warm and the tuner cold
    runner.run({}, {}, WARMUP_STEPS, 300, "warm-up", "warm-up")
    runner.count = 0  # the tuner's trials are numbered from 1 (trial-001's files reused)
    t0 = time.monotonic()
    options = TuneOptions(budget_s=args.budget, trial_steps=args.trial_steps,
                          keep_batch_size=job["keep_batch_size"], specs=tuple(job["specs"]),
                          max_batch_size=job.get("max_batch_size"))
    tuner = Tuner(runner, options).run()
    tune_s = time.monotonic() - t0
    final_s = sum(t.wall_s or 0.0 for t in tuner.trials if t.phase == "final")
    steps = tuner.steps0  # the tuner's shortest trials; the grid's are twice as long
    if args.keep:
        rec.save(rec.build(tuner, {"script": job["script"], "args": job["args"]},
                           vars(options)), Path(args.keep) / f"{name}.tune.json")
    space = tuner.space
    print(f"[{name}] tune: {len(tuner.trials)} trials in {tune_s:.0f} s, best "
          f"{sp.label(tuner.incumbent)} (trials of {steps} and {2 * steps} steps; "
          f"{final_s:.0f} s of final pairs)", flush=True)
    grid = grid_settings(space, job)
    t0 = time.monotonic()
    measured = []
    for setting in grid:
        trial = runner.run(setting, sp.to_env(setting, space), 2 * steps, 120, "grid",
                           sp.label(setting))
        measured.append(trial)
    grid_s = time.monotonic() - t0
    if args.keep:  # the grid's trials too: a search change can be replayed against them
        (Path(args.keep) / f"{name}.grid.json").write_text(json.dumps(
            {"steps": 2 * steps, "trials": [t.to_dict() for t in measured]}, indent=1))
    ok = [t for t in measured if t.ok and tuner.fits(t)]
    grid_best = max(ok, key=lambda t: t.samples_per_s)
    floor = floor_s(grid, measured, grid_best)
    print(f"[{name}] grid: {len(grid)} settings in {grid_s:.0f} s, best "
          f"{grid_best.label} ({grid_best.samples_per_s:,.0f} samples/s in its one trial)",
          flush=True)
    verify = {"tune": [], "grid": []}
    for _ in range(args.verify):
        for which, setting in (("tune", tuner.incumbent), ("grid", grid_best.setting)):
            t = runner.run(setting, sp.to_env(setting, space), 2 * steps, 120, "verify",
                           sp.label(setting))
            if t.ok:
                verify[which].append(t.samples_per_s)
    runner.close()
    tune_rate = sum(verify["tune"]) / len(verify["tune"])
    grid_rate = sum(verify["grid"]) / len(verify["grid"])
    base = tuner.first_baseline().samples_per_s
    return {"job": name, "settings": len(grid), "tune_trials": len(tuner.trials),
            "tune_s": tune_s, "grid_s": grid_s, "time_share": tune_s / grid_s,
            "search_s": tune_s - final_s, "search_share": (tune_s - final_s) / grid_s,
            "trial_steps": steps,
            "floor_s": floor, "floor_share": floor / grid_s if floor else None,
            "tune_best": tuner.incumbent, "grid_best": grid_best.setting,
            "tune_samples_per_s": tune_rate, "grid_samples_per_s": grid_rate,
            "of_grid_optimum": tune_rate / grid_rate,
            "of_grid_ci": ratio_ci(verify["tune"], verify["grid"]),
            "baseline_samples_per_s": base,
            "tune_speedup": (tuner.final or {}).get("speedup"),
            "grid_failed": sum(1 for t in measured if not t.ok)}


def ratio_ci(a, b):
    """Half-width of a 95% interval of mean(a) / mean(b) from the spread of the verification
    trials (delta method, Student's t at the Welch-Satterthwaite degrees of freedom: with
    three trials a side the spread is itself uncertain, and z = 2 would understate it by
    about 1.4x; None with fewer than two of either)."""
    if len(a) < 2 or len(b) < 2:
        return None
    ma, mb = sum(a) / len(a), sum(b) / len(b)

    def rel_var(xs, m):
        return sum((x / m - 1) ** 2 for x in xs) / (len(xs) - 1) / len(xs)

    va, vb = rel_var(a, ma), rel_var(b, mb)
    if va + vb == 0:
        return 0.0
    dof = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    return t95(dof) * (ma / mb) * (va + vb) ** 0.5


def floor_s(grid, measured, grid_best):
    """A floor under the time of any search of this space that measures its noise (two
    baseline trials), tries each knob's every other value once, in the job's own setting,
    at the short length, and states its speedup from one final pair (baseline and best, at
    the short length too): no longer rungs, no second round, no calibration. A short trial's
    time is taken as the grid trial's start-up (wall - run) plus half its run. None without
    the job's own setting in the grid. (A search that changes a knob before trying the next
    tries that one in the new setting, which may be faster or slower than the job's own.)"""
    by_key = {sp.key(s): t for s, t in zip(grid, measured)}
    base = by_key.get(sp.key({}))
    if base is None or base.run_s is None:
        return None

    def short(t):
        return t.wall_s - (t.run_s or 0.0) / 2

    singles = [t for s, t in zip(grid, measured) if len(s) == 1]
    return 3 * short(base) + sum(short(t) for t in singles) + short(grid_best)


def grid_settings(space, job):
    knobs = list(space.knobs.values())
    values = []
    for knob in knobs:
        if knob.name == "batch_size":
            values.append(job["grid_batches"])
        else:
            values.append(list(knob.values))
    out = []
    for combo in itertools.product(*values):
        out.append(sp.merged({}, dict(zip([k.name for k in knobs], combo)), space))
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", default=",".join(JOBS))
    parser.add_argument("--trial-steps", type=int, default=None,
                        help="the tuner's shortest trials (the grid uses twice as many)")
    parser.add_argument("--budget", type=float, default=300.0, help="the tuner's budget, s")
    parser.add_argument("--verify", type=int, default=3)
    parser.add_argument("--keep", default=None,
                        help="a directory for the tuning records and the grids' trials "
                             "(to inspect or replay them after)")
    args = parser.parse_args(argv)
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-tune-") as tmp:
        for name in args.jobs.split(","):
            results.append(run_job(name, JOBS[name], args, Path(tmp)))
    print()
    print(f"{'job':<9} {'steps':>5} {'settings':>8} {'tune':>12} {'grid':>12} {'time':>6} "
          f"{'search':>6} {'floor':>6} {'tune best':>11} {'grid best':>11} {'of grid':>8} "
          f"{'±':>6}  tune's setting")
    for r in results:
        print(f"{r['job']:<9} {r['trial_steps']:>5} {r['settings']:>8} "
              f"{r['tune_trials']:>3} in {r['tune_s']:>4.0f} s "
              f"{r['settings']:>3} in {r['grid_s']:>4.0f} s {r['time_share']:>6.0%} "
              f"{r['search_share']:>6.0%} {_share(r['floor_share']):>6} "
              f"{r['tune_samples_per_s']:>11,.0f} {r['grid_samples_per_s']:>11,.0f} "
              f"{r['of_grid_optimum']:>8.1%} {_pm(r['of_grid_ci']):>6}  "
              f"{sp.label(r['tune_best'])}")
    print("targets: tune's best >= 95% of the grid's, in <= 25% of the grid's time (time: "
          "all of it; search: without its final pairs; floor: the least any search that "
          "measures its noise, each knob value once and a final pair could take; ±: the "
          "95% interval of 'of grid' from the --verify pairs' spread)")
    print(json.dumps({"bench": "tune", "cores": os.cpu_count(), "results": results}))


def _pm(value):
    return f"±{value:.1%}" if value is not None else "-"


def _share(value):
    return f"{value:.0%}" if value is not None else "-"


if __name__ == "__main__":
    main()
