"""The scheduler probe (ParallelExecutor figures), its summary entry and the report's Parallel
section, on synthetic events and records (test_parallel_*.py run the real thing)."""

import pytest

from paddletune.probes.base import Clock
from paddletune.probes.scheduler import SchedulerProbe
from paddletune.profile import load
from paddletune.profile.records import SchedDrop, SchedStep
from paddletune.sources.fluid import FluidSource
from profiles import make_profile, sched_records, step_records
from runtime import events
from test_render_reader import render, section


def sched_event(step, **kw):
    fields = dict(executor_id=1, program_id=3, step=step, num_places=2, num_threads=4,
                  reduce_strategy="AllReduce", wall_s=0.01, busy_s=[0.008, 0.002, 0.0, 0.0],
                  ops_run=100, sched_s=0.001, ready_max=2, ready_mean=0.25, concurrency=1.0,
                  combine_s=0.002, place_s=[0.009, 0.01], num_iteration_per_drop_scope=100,
                  dropped=False, fused={"fuse_all_optimizer_ops": 5})
    fields.update(kw)
    return events.SchedStepRecord(**fields)


def test_probe_writes_a_record_per_step_and_per_drop():
    records = []
    probe = SchedulerProbe(records.append, Clock(t0=0.0), FluidSource()).start()
    try:
        events.sched_step.emit(sched_event(0))
        events.drop_scope.emit(events.DropScopeRecord(1, 3, 1, 5.0, 0.003, 1 << 20, 12))
        events.sched_step.emit(sched_event(1, dropped=True))
    finally:
        result = probe.stop().details
    steps = [r for r in records if isinstance(r, SchedStep)]
    assert [r.step for r in steps] == [0, 1] and steps[1].dropped
    assert steps[0].busy_s == (0.008, 0.002, 0.0, 0.0) and steps[0].threads == 4
    assert steps[0].fused == {"fuse_all_optimizer_ops": 5}
    drop = next(r for r in records if isinstance(r, SchedDrop))
    assert drop == SchedDrop(5.0, 1, 3, 1, 0.003, 1 << 20, 12)
    assert result == {"steps": 2, "drops": 1, "places": 2, "threads": 4,
                      "reduce": "AllReduce", "drop_every": 100,
                      "fused": {"fuse_all_optimizer_ops": 5}}
    assert not events.sched_step.subs and not events.drop_scope.subs  # unsubscribed


def test_summary_figures(tmp_path):
    steps = step_records(n_steps=30, wall_s=0.01)
    extra = sched_records(steps, drops=[(9, (0.002, 3 << 20)), (19, (0.004, 1 << 20))],
                          drop_every=10)
    p = load(make_profile(tmp_path / "p.jsonl", steps=steps, extra=extra)).summary.parallel
    assert p.places == 2 and p.threads == 4 and p.reduce == "AllReduce"
    assert p.scope == "steady" and p.steps == 29  # the first step is warm-up
    assert p.thread_busy == pytest.approx((0.6, 0.4, 0.1, 0.0))
    assert p.thread_busy_mean == pytest.approx(0.275)
    assert p.sched_s_per_op == pytest.approx(0.0012 / 120)
    assert p.sched_share == pytest.approx(0.12)
    assert p.combine_share == pytest.approx(0.1)
    assert p.straggler_share == pytest.approx(0.05)
    d = p.drop
    assert d.every == 10 and d.count == 2 and d.wall_s_mean == pytest.approx(0.003)
    assert d.held_bytes_max == 3 << 20
    total = sum(s["wall_s"] for s in steps if not s.get("startup"))
    assert d.share == pytest.approx(0.006 / total)


def test_no_parallel_figures_without_records(tmp_path):
    assert load(make_profile(tmp_path / "p.jsonl")).summary.parallel is None
    assert not any(line.startswith("Parallel:") for line in
                   render(make_profile(tmp_path / "q.jsonl"), width=200))


def test_parallel_section(tmp_path):
    steps = step_records(n_steps=30, wall_s=0.01)
    extra = sched_records(steps, drops=[(9, (0.002, 3 << 20))], drop_every=10,
                          fused={"fuse_all_optimizer_ops": 6})
    lines = section(render(make_profile(tmp_path / "p.jsonl", steps=steps, extra=extra),
                           width=200), "Parallel:")
    assert lines == [
        "Parallel: ParallelExecutor · 2 place(s) · 4 thread(s) · AllReduce",
        "threads busy  mean 28% of the step inside ops (per thread: 60% 40% 10% 0%)",
        "cpu threads   4 executor x 1 BLAS = 4 on 2 usable cores (oversubscribed)",
        "concurrency   1.10 ops at a time on average (1.00 = one after another); ready queue "
        "mean 0.5, max 3",
        "scheduler     10.0 µs per op, 120 ops per step (12.0% of the step, thread time)",
        "combine       gradient all-reduce 1.00 ms per step (10.0% of the step)",
        "stragglers    the places finish 5.0% of the step apart on average",
        # 2 ms over 29 steps of 10 ms and a warm-up step of 50 ms
        "drop scope    every 10 steps: 1 drop(s), 2.00 ms each (0.59% of the time), holding "
        "up to 3.0 MiB",
        "fused         fuse_all_optimizer_ops replaced 6 ops",
    ]
