"""A real tuning trial (a `paddletune profile` subprocess) and what it leaves behind."""

import sys
from pathlib import Path

import pytest

from paddletune.tune.trials import TrialRunner

REPO = Path(__file__).resolve().parents[1]
JOB = str(REPO / "tests" / "tunejob.py")


def test_trials_cache_bytecode_privately_when_the_environment_forbids_writing_it(tmp_path):
    """PYTHONDONTWRITEBYTECODE (common in container images) would make every trial compile
    paddletune, the runtime and NumPy again: the trials cache bytecode under their own directory
    instead, and close() removes it."""
    env = {"PYTHONDONTWRITEBYTECODE": "1", "PATH": "/usr/bin:/bin",
           "PYTHONPATH": str(REPO), "OPENBLAS_NUM_THREADS": "1"}
    runner = TrialRunner(JOB, ["--batch-ms", "0", "--burst-every", "0", "--step-ms", "0"],
                         tmp_path / "trials", env, python=sys.executable)
    assert "PYTHONDONTWRITEBYTECODE" not in runner.base_env
    cache = Path(runner.base_env["PYTHONPYCACHEPREFIX"])
    assert cache.parent == tmp_path / "trials"
    trial = runner.run({}, {}, 20, 60, "baseline", "baseline")
    assert trial.status == "ok", (trial.message, Path(trial.log).read_text()[-2000:])
    assert 0 <= trial.input_share <= 1 and trial.put_wait_share >= 0  # the reader's figures
    compiled = {p.name.split(".")[0] for p in cache.rglob("*.pyc")}
    assert {"session", "executor", "_methods"} <= compiled  # paddletune, runtime, NumPy
    runner.close()
    assert not cache.exists() and Path(trial.profile).exists()


def test_trials_leave_the_bytecode_setting_alone_otherwise(tmp_path):
    runner = TrialRunner(JOB, [], tmp_path / "trials", {"PATH": "/usr/bin:/bin"})
    assert runner.pycache is None and "PYTHONPYCACHEPREFIX" not in runner.base_env
    runner.close()


def test_a_trial_can_measure_the_no_data_ceiling(tmp_path):
    """runner.speed_test: the trials run with --speed-test (bench_advice measures a GIL-bound
    reader thread's upper bound this way): the profile holds the speed test's two windows."""
    from paddletune.profile import load
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "OPENBLAS_NUM_THREADS": "1"}
    runner = TrialRunner(JOB, ["--batch-ms", "2", "--burst-every", "0", "--step-ms", "1"],
                         tmp_path / "trials", env, python=sys.executable)
    runner.speed_test = 10
    assert runner.command(60, tmp_path / "p.jsonl")[3:7] == ["--steps", "60", "--speed-test",
                                                             "10"]
    trial = runner.run({}, {}, 60, 120, "baseline", "baseline")
    runner.close()
    assert trial.status == "ok", (trial.message, Path(trial.log).read_text()[-2000:])
    speed = load(trial.profile).summary.speed_test
    assert speed is not None and speed.ceiling is not None


def test_a_trial_keeps_its_producers_rate_over_the_loops():
    """What prune reads to leave buffering out: the main loader's producers' batches a second
    over those the loop takes when it does not wait; None where either is unknown or
    unbounded (a producer that took no time)."""
    from types import SimpleNamespace

    from paddletune.profile.figures import LoaderFigures

    def loader(made, taken):
        return SimpleNamespace(producer=SimpleNamespace(rate_per_s=made),
                               consumer=SimpleNamespace(rate_per_s=taken))

    _producer_ratio = LoaderFigures.producer_ratio.fget  # what _throughput copies to a trial
    assert _producer_ratio(loader(116.0, 730.0)) == pytest.approx(116 / 730)
    assert _producer_ratio(loader(float("inf"), 730.0)) is None
    assert _producer_ratio(loader(None, 730.0)) is None
    assert _producer_ratio(loader(116.0, 0.0)) is None
