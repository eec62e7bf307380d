"""`paddletune tune` on a job with a known ExecutionStrategy optimum: tests/dropjob.py drops its
local scopes every step (num_iteration_per_drop_scope = 1) and each drop costs a fixed wait
(see its docstring), so 100 is the best of the tuner's candidates (100, 1, 10): ~10x over 1,
~2x over 10. The costs are waits, so the optimum holds on a busy 2-core machine."""

import json
import os
import subprocess
import sys
from pathlib import Path

import dropjob
import pytest

from runtime import events, overrides

REPO = Path(__file__).resolve().parents[1]
JOB = str(REPO / "tests" / "dropjob.py")


@pytest.fixture
def drop_every(monkeypatch):
    """Set num_iteration_per_drop_scope through PADDLETUNE_OVERRIDES, as a tuning trial does."""
    def set_it(n):
        monkeypatch.setenv(overrides.ENV, json.dumps(
            {"exec_strategy": {"num_iteration_per_drop_scope": n}}))
        overrides.reset()
    yield set_it
    monkeypatch.delenv(overrides.ENV, raising=False)
    overrides.reset()


def run_job(steps, drop_ms):
    """dropjob's main in this process: its drops and the wall time of its training steps."""
    drops, steps_s = [], []
    with events.subscribe("drop_scope", drops.append), \
            events.subscribe("step_end", lambda r: steps_s.append(r) if not r.is_startup
                             else None):
        assert dropjob.main(["--steps", str(steps), "--drop-ms", str(drop_ms),
                             "--step-ms", "0"]) == 0
    return drops, steps_s


def test_the_drop_cost_follows_the_knob(drop_every):
    """The override reaches the job's ExecutionStrategy and the wait is paid once per drop,
    inside the step that drops: 20 steps cost >= 20 x drop-ms at N = 1, 2 drops at N = 10.
    (Lower bounds only: a busy machine makes steps slower, never a sleep shorter.)"""
    drop_every(1)
    drops, steps = run_job(20, 15)
    assert len(drops) == 20 and len(steps) == 20
    assert all(s.wall_s >= 0.015 for s in steps)  # every step pays a drop
    drop_every(10)
    drops, steps = run_job(20, 15)
    assert [d.step for d in drops] == [9, 19]
    assert steps[9].wall_s >= 0.015 and steps[19].wall_s >= 0.015
    assert any(a["key"] == "num_iteration_per_drop_scope" and (a["value"], a["was"]) == (10, 1)
               for a in overrides.applied())
    drop_every(100)
    drops, _ = run_job(20, 15)
    assert drops == []  # no drop within 20 steps: no drop cost at all


def test_tune_finds_the_drop_scope_optimum(tmp_path):
    """The real tuner, restricted to the one knob, must leave the job's 1 for 100 (not 10)."""
    env = {k: v for k, v in os.environ.items() if k != "PADDLETUNE_OVERRIDES"}
    env.update({"COLUMNS": "120", "OPENBLAS_NUM_THREADS": "1"})
    out = tmp_path / "t.tune.json"
    run = subprocess.run(
        [sys.executable, "-m", "paddletune", "tune", "--out", str(out), "--budget", "40s",
         "--trial-steps", "60", "--space", "only=num_iteration_per_drop_scope", JOB],
        cwd=tmp_path, capture_output=True, text=True, env=env, timeout=180)
    assert run.returncode == 0, run.stderr
    record = json.loads(out.read_text())
    assert record["best"]["setting"] == {"num_iteration_per_drop_scope": 100}, \
        record["ranking"]
    assert record["final"]["speedup"] > 2.0, record["final"]  # ~10x measured
    assert "Best: num_iteration_per_drop_scope=100" in run.stdout
    assert "exec_strategy.num_iteration_per_drop_scope = 100" in run.stdout
    # the job's own value (1) is the baseline, not a challenger; 10 was tried and lost to 100
    by_label = {t["label"]: t for t in record["trials"] if t["status"] == "ok"}
    ten, hundred = (by_label.get(f"num_iteration_per_drop_scope={n}") for n in (10, 100))
    assert hundred is not None and hundred["applied"][0]["was"] == 1
    if ten is not None:
        assert hundred["samples_per_s"] > 1.3 * ten["samples_per_s"]
