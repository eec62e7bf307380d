"""benchmarks/bench_tune.py's floor (the least time any search that measures its noise, each
knob value once and one final pair could take, from the grid's own trials) and its quality
interval; benchmarks/sim_tune_decisions.py, sim_tune_batch.py and trial_noise.py run."""

import json
import os
import subprocess
import sys
import time

import pytest

from benchscripts import BENCHMARKS, load
from paddletune.tune.trials import Trial


@pytest.fixture(scope="module")
def bench():
    return load("bench_tune.py")


def trial(setting, wall, run):
    t = Trial(0, setting, "", "grid", 100, status="ok", samples_per_s=1.0)
    t.wall_s, t.run_s = wall, run
    return t


def test_floor_counts_two_baselines_each_value_once_and_a_short_final_pair(bench):
    grid = [{}, {"a": 1}, {"a": 2}, {"b": 1}, {"a": 1, "b": 1}, {"a": 2, "b": 1}]
    # start-up 0.5 s each; runs at the long length: the baseline 4 s, the others 2 s
    measured = [trial(grid[0], 4.5, 4.0)] + [trial(s, 2.5, 2.0) for s in grid[1:]]
    best = measured[-1]
    short_base, short_other = 0.5 + 2.0, 0.5 + 1.0
    expected = 2 * short_base + 3 * short_other + short_base + short_other  # + final pair
    assert bench.floor_s(grid, measured, best) == pytest.approx(expected)
    assert bench.floor_s(grid[1:], measured[1:], best) is None  # no baseline in the grid


def test_ratio_interval_from_the_verification_spread(bench):
    assert bench.ratio_ci([100.0], [100.0, 90.0]) is None  # one trial: no spread to use
    assert bench.ratio_ci([100.0, 100.0], [50.0, 50.0]) == 0.0
    wide = bench.ratio_ci([90.0, 110.0, 100.0], [100.0, 100.0, 100.0])
    # relative sd 10% over 3 trials: se 5.8% of the ratio 1.0; the spread of 3 trials is
    # uncertain itself: Student's t at 2 degrees of freedom (4.30), about +-25%
    assert wide == pytest.approx(4.30 * 0.1 / 3 ** 0.5, rel=1e-6)
    # both sides spread alike: Welch's degrees of freedom 4 (t 2.78)
    both = bench.ratio_ci([90.0, 110.0, 100.0], [90.0, 110.0, 100.0])
    assert both == pytest.approx(2.78 * (2 * 0.01 / 3) ** 0.5, rel=1e-6)


def test_the_decision_simulation_runs_and_takes_a_clear_gain(capsys):
    sim = load("sim_tune_decisions.py")
    monotonic = time.monotonic
    sim.main(["--runs", "5", "--gain", "0.5", "--noise", "0.02"])
    assert time.monotonic is monotonic  # the simulated clock is gone with the simulation
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["took"] == 1.0 and result["trials"] > 4  # +50% against 2% noise: always


def test_the_batch_job_simulation_runs_and_keeps_the_searchs_time_within_reach(capsys):
    """The model of bench_tune's batch job: the tuner finds a batch of 107 or more (4x the
    job's own samples/s) every time, and its time is a fraction of the grid's."""
    sim = load("sim_tune_batch.py")
    monotonic = time.monotonic
    sim.main(["--runs", "20"])
    assert time.monotonic is monotonic
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["within_quality"] == 1.0 and result["trials_mean"] > 8
    assert 0.1 < result["time_share_median"] < 0.5


def test_trial_noise_measures_each_setting_in_turn():
    """Two settings of the batch job, twice each, in real trial subprocesses: a mean and a
    coefficient of variation per setting (how far apart they are is the script's output,
    not a test's: a loaded machine may squeeze it)."""
    script = os.path.join(BENCHMARKS, "trial_noise.py")
    run = subprocess.run([sys.executable, script, "--steps", "30", "--repeats", "2",
                          '{"batch_size": 128}', "{}"], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout.strip().splitlines()[-1])
    settings = result["settings"]
    assert set(settings) == {"batch_size=128", "baseline"}
    assert all(len(s["trials"]) == 2 and s["cv"] is not None for s in settings.values())
    assert all(s["mean"] > 0 and all(t > 0 for t in s["trials"]) for s in settings.values())
