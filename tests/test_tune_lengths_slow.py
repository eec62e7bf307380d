"""A slow job's first tuning trial: the calibration's CALIBRATION_S of steps holds a handful of
a slow job's steps, too few to measure; the trial runs MIN_STEPS steps at least (trialrun
--min-steps), and a trial tune's own cut left without enough steady steps says so, not that
the job ended too soon."""

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from paddletune.profile import figures as F
from paddletune.profile import records as R
from paddletune.profile.model import Profile
from paddletune.session import StepCounter, StepLimitReached
from paddletune.trialrun import parse_all
from paddletune.tune import search, trials
from paddletune.tune.lengths import MIN_STEPS
from paddletune.tune.search import TuneOptions, Tuner
from paddletune.tune.trials import Trial, TrialRunner
from test_tune import Clock, FakeRunner, fake_profile, job_rate

REPO = Path(__file__).resolve().parents[1]
JOB = str(REPO / "tests" / "tunejob.py")


def test_the_duration_ends_the_job_only_after_min_steps():
    counter = StepCounter(None, 1e-9, lambda: None, lambda: None, min_steps=5)
    step = SimpleNamespace(is_startup=False)
    for _ in range(4):
        counter.count(step)
    with pytest.raises(StepLimitReached) as raised:
        counter.count(step)
    assert raised.value.args[0] == 5


def test_a_duration_trial_asks_for_min_steps():
    runner = TrialRunner("train.py", [], Path("/tmp"), {}, python=sys.executable)
    command = runner.command(2000, "p.jsonl", duration_s=1.5)
    assert command[command.index("--min-steps") + 1] == str(MIN_STEPS)
    assert "--min-steps" not in runner.command(50, "p.jsonl")
    assert parse_all(command[3:])[4:] == (2000, 1.5, None, MIN_STEPS)
    with pytest.raises(ValueError):
        parse_all(["--steps", "9", "--min-steps", "0", "--out", "p", "t.py"])


def _cut_profile(reason, n_steps=4, warmup=1):
    steps = tuple(R.Step(t_s=0.5 * i, program=1, executor=1, step=i, wall_s=0.5, feed_s=0.0,
                         compute_s=0.5, fetch_s=0.0, gap_s=0.0, batch_size=32)
                  for i in range(n_steps))
    summary = F.Summary(n_steps=n_steps, warmup_steps=warmup, steady_steps=n_steps - warmup)
    return Profile(path="trial.jsonl", header=R.Header(schema=2), summary=summary,
                   steps=steps, events=(R.ExitEvent(t_s=2.0, status=0, reason=reason,
                                                    train_steps=n_steps),))


@pytest.mark.parametrize("reason, says", [
    ("step_limit", "tune stopped the trial at 4 steps: only 3 steady steps"),
    ("returned", "the job ended after 4 steps: only 3 steady steps")])
def test_too_few_steady_steps_say_who_ended_the_trial(monkeypatch, reason, says):
    """The profile's exit reason tells tune's cut (step_limit: its --steps / --duration)
    from the job's own end."""
    monkeypatch.setattr(trials, "load", lambda path: _cut_profile(reason))
    trial = Trial(1, {}, "baseline", "baseline", 2000)
    trials.measure(trial, "trial.jsonl", 0, False, 120, {}, counted=True)
    assert trial.status == "no-steps" and trial.exit_reason == reason
    assert trial.message.startswith(says), trial.message
    assert ("ended too soon" in trial.message) is False


def test_a_calibration_tune_cut_short_runs_twice_as_many_steps_again(monkeypatch):
    """The first trial, cut by tune at MIN_STEPS with too few steady steps (a long warm-up):
    the next baseline runs twice as many, not MIN_STEPS again."""
    clock = Clock()
    monkeypatch.setattr(search.time, "monotonic", clock.monotonic)

    class LongWarmup(FakeRunner):
        def run(self, setting, env, steps, timeout_s, phase, label, duration_s=None):
            t = super().run(setting, env, steps, timeout_s, phase, label)
            if duration_s is not None:
                t.status, t.samples_per_s, t.steps = "no-steps", None, MIN_STEPS
                t.exit_reason = "step_limit"
            return t

    tuner = Tuner(LongWarmup(clock, job_rate), TuneOptions(keep_batch_size=True,
                                                           specs=("only=num_workers",)))
    tuner.load_profile = lambda path: fake_profile()
    tuner.advise = lambda profile: []
    tuner.run()
    assert [(t.status, t.steps) for t in tuner.trials[:2]] == [
        ("no-steps", MIN_STEPS), ("ok", 2 * MIN_STEPS)]
    assert tuner.steps0 == 2 * MIN_STEPS


def test_a_slow_jobs_first_trial_measures_enough_steps(tmp_path):
    """Steps of 60 ms: 0.3 s of them are 5 or 6 steps (too few to measure); the duration
    trial runs MIN_STEPS and measures them."""
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "OPENBLAS_NUM_THREADS": "1"}
    runner = TrialRunner(JOB, ["--batch-ms", "1", "--burst-every", "0", "--step-ms", "60"],
                         tmp_path / "trials", env, python=sys.executable)
    trial = runner.run({}, {}, 2000, 120, "baseline", "baseline", duration_s=0.3)
    runner.close()
    assert trial.status == "ok", (trial.message, Path(trial.log).read_text()[-2000:])
    assert trial.steps == MIN_STEPS and trial.exit_reason == "step_limit"
