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
        name="p", start_method=None, first_waits=None, wait_s=0.0):
    """A training loader with 2 workers over `passes` passes of 40 steps (10 ms each), the
    first pass's iter() taking `first_s`, each later one's `later_s`; the loop waits `wait_s`
    for each batch, and `first_waits` (the first pass's, a later one's: spawn workers
    starting in the first request, ReaderStart.first_wait_s) for each pass's first."""
    steps = step_records(n_steps=40 * passes, wall_s=0.010, gap_s=0.0)
    config = {"name": "DataLoader#0", "num_workers": 2, "producer": "workers",
              "capacity": 4, "prefetch_factor": 2, "persistent_workers": persistent,
              "batch_size": 32, "start_method": start_method}
    records, train = [], steps[1:]
    for p in range(passes):
        chunk = train[40 * p:40 * (p + 1)]
        rows = reader_records(chunk, config=config, intervals=1, workers=(0, 1),
                              wait_s=wait_s)
        for row in rows:
            row["pass"] = p + 1
        rows[0]["startup_s"] = first_s if p == 0 else later_s
        if first_waits is not None:
            first_wait = first_waits[0] if p == 0 else first_waits[1]
            rows[0]["first_wait_s"] = first_wait
            rows[1]["wait_s"] += first_wait - wait_s  # (its one pop of 40 that waited so)
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


def test_spawned_workers_start_up_adds_the_first_batch_s_wait_beyond_the_others(tmp_path):
    """Spawn workers start inside the pass's first next(): the start-up is the iter() and the
    first batch's wait beyond the pass's other batches' mean wait (its intervals')."""
    f = job(tmp_path, start_method="spawn", first_s=0.04, later_s=0.015,
            first_waits=(0.12, 0.16), wait_s=0.004).summary.main_loader
    p = f.pass_starts
    assert p.in_first_batch and f.config.start_method == "spawn"
    assert p.first_s == pytest.approx(0.04 + 0.12 - 0.004)
    assert p.later_s == pytest.approx(0.015 + 0.16 - 0.004) and p.later == 3
    # (the pass's time is still from its iter(): startup_s, the start's t_s, its end)
    assert p.pass_s == pytest.approx(0.015 + 40 * 0.010 + 0.002, rel=0.05)


def test_a_spawn_loader_s_later_starts_are_advised_to_keep_its_workers(tmp_path):
    profile = job(tmp_path, start_method="spawn", first_s=0.04, later_s=0.015,
                  first_waits=(0.12, 0.16), wait_s=0.004)
    (a,) = worker_start_per_pass(profile)
    fig = a.figures
    assert fig["suggested_persistent_workers"] is True and fig["in_first_batch"] is True
    assert fig["later_s"] == pytest.approx(0.171)
    assert fig["saved_s_per_pass"] == pytest.approx(0.171)
    pass_s = profile.summary.main_loader.pass_starts.pass_s
    assert a.expected_speedup == pytest.approx(pass_s / (pass_s - 0.171))
    assert a.severity == "high" and "persistent_workers=True" in a.change
    assert a.evidence.startswith(
        "the start of DataLoader#0's passes (its iter(), and the wait for the first batch "
        "beyond the pass's other batches' mean: its spawn workers start a new interpreter "
        "each inside the first next()) took 156.00 ms on the first pass and 171.00 ms on "
        "each of the 3 later ones")


def test_a_forked_loader_s_start_up_is_its_iter_alone(tmp_path):
    """Forked workers start in iter(): a first batch's wait (none recorded) adds nothing."""
    profile = job(tmp_path, start_method="fork", first_s=0.001, later_s=0.001, wait_s=0.004)
    p = profile.summary.main_loader.pass_starts
    assert not p.in_first_batch and p.later_s == pytest.approx(0.001)
    assert worker_start_per_pass(profile) == []
