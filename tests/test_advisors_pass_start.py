"""Advice #31, worker-start-per-pass (advisors/pass_start.py), and the figures it reads: each
pass's start-up, the loop's iter() before its first batch (records.ReaderStart.startup_s,
profile/reader_figures.pass_starts)."""

import pytest

from paddletune.advisors.pass_start import worker_start_per_pass
from paddletune.profile import load
from profiles import make_profile, reader_records, source_info, step_records

CORES_2 = {"cpu": {"model": "Test CPU", "logical_cores": 2, "physical_cores": 2,
                   "usable_cores": 2}}


def job(tmp_path, framework="torch", persistent=False, first_s=0.05, later_s=0.05, passes=4,
        name="p"):
    """A training loader with 2 workers over `passes` passes of 40 steps (10 ms each), the
    first pass's iter() taking `first_s`, each later one's `later_s`."""
    steps = step_records(n_steps=40 * passes, wall_s=0.010, gap_s=0.0)
    config = {"name": "DataLoader#0", "num_workers": 2, "producer": "workers",
              "capacity": 4, "prefetch_factor": 2, "persistent_workers": persistent,
              "batch_size": 32}
    records, train = [], steps[1:]
    for p in range(passes):
        chunk = train[40 * p:40 * (p + 1)]
        rows = reader_records(chunk, config=config, intervals=1, workers=(0, 1))
        for row in rows:
            row["pass"] = p + 1
        rows[0]["startup_s"] = first_s if p == 0 else later_s
        records += rows
    return load(make_profile(tmp_path / f"{name}.jsonl", steps=steps, env=CORES_2,
                             extra=records, source=source_info(framework)))


def test_the_figures_hold_the_first_and_later_starts(tmp_path):
    f = job(tmp_path, first_s=0.05, later_s=0.06).summary.main_loader
    p = f.pass_starts
    assert p.first_s == pytest.approx(0.05) and p.later_s == pytest.approx(0.06)
    assert p.later == 3
    # a later pass: from its iter() to its end (its 40 steps' batches, the probe's interval)
    assert p.pass_s == pytest.approx(0.06 + 40 * 0.010 + 0.002, rel=0.05)


def test_workers_started_every_pass_are_kept(tmp_path):
    profile = job(tmp_path, first_s=0.05, later_s=0.05)
    (a,) = worker_start_per_pass(profile)
    assert a.id == "worker-start-per-pass" and a.source == 31
    fig = a.figures
    assert fig["suggested_persistent_workers"] is True and fig["predicted_start_s"] == 0.0
    pass_s = profile.summary.main_loader.pass_starts.pass_s
    assert fig["saved_share"] == pytest.approx(0.05 / pass_s)
    assert a.expected_speedup == pytest.approx(pass_s / (pass_s - 0.05))
    assert a.severity == "low" and not fig["evaluation"]
    assert a.change == ("loader = torch.utils.data.DataLoader(dataset, batch_size=32, "
                        "drop_last=True, num_workers=2, persistent_workers=True)")


def test_persistent_workers_slower_to_wake_than_to_start_are_not_kept(tmp_path):
    """Paddle 3.3.1's: 0.5 s in each later iter() against 30 ms to fork them."""
    profile = job(tmp_path, "paddle", persistent=True, first_s=0.03, later_s=0.5)
    (a,) = worker_start_per_pass(profile)
    assert a.figures["suggested_persistent_workers"] is False
    assert a.figures["saved_s_per_pass"] == pytest.approx(0.47)
    assert a.severity == "high" and "waking its persistent workers" in a.evidence
    assert a.change.splitlines() == [
        "loader = paddle.io.DataLoader(dataset, batch_size=32, drop_last=True, "
        "num_workers=2, persistent_workers=False)",
        "# its persistent workers take longer to wake than to start"]


def test_cheap_or_well_kept_starts_are_not_advised(tmp_path):
    assert worker_start_per_pass(job(tmp_path, first_s=0.001, later_s=0.001, name="a")) == []
    # persistent workers woken in less than twice their start
    assert worker_start_per_pass(job(tmp_path, persistent=True, first_s=0.05,
                                     later_s=0.002, name="b")) == []
    # Paddle's workers are not kept by the advice (their waking is what costs there)
    assert worker_start_per_pass(job(tmp_path, "paddle", first_s=0.05, later_s=0.05,
                                     name="c")) == []
    # one pass: nothing recurs
    assert worker_start_per_pass(job(tmp_path, passes=1, name="d")) == []
