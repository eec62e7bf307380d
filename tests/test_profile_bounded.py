"""A long job's profile stays bounded: each program's first steps in full, the rest in windows
(paddletune/profile/accumulate.py), and the figures computed from the windows agree with the
exact ones (computed from every step) within 1%."""

import json
import random

import pytest

from paddletune import profile as prof
from paddletune.profile import records as r
from paddletune.profile.accumulate import HEAD_STEPS, SLOWEST, Accumulator, window_length_s
from paddletune.profile.sketch import ACCURACY, DistBuilder, SketchBuilder

N_STEPS = 20_000


def steps(n=N_STEPS, seed=1, program=1, t0=0.1):
    """A fast loop's steps: a slow compile step and a short warm-up, then ~3 ms steps
    (lognormal, with a rare 10x outlier), a small gap and a DataLoader queue's fill."""
    rng = random.Random(seed)
    t, out = t0, []
    for i in range(n):
        wall = 0.003 * rng.lognormvariate(0, 0.25) * (20 if i == 0 else 3 if i < 4 else 1)
        if rng.random() < 0.002:
            wall *= 10
        feed, fetch = 0.1 * wall, 0.05 * wall
        gap = None if i == 0 else 0.0004 * rng.lognormvariate(0, 0.5)
        waited = 0.2 * (wall - feed - fetch) * rng.random()  # (off the CPU while computing)
        out.append(r.Step(t, program, 1, i, wall, feed, wall - feed - fetch, fetch, gap, 64,
                          64 * 3136, 4, queue=rng.randrange(9), n_ops=20, fetch=("loss",),
                          feed=("x", "y"), startup=False, place="CPUPlace",
                          compute_wait_s=waited, compute_queued_s=waited * rng.random(),
                          samples=128 if i % 3 == 0 else None))  # (every third step: two
        # batches, gradient accumulation)
        t += wall + (gap or 0.0)
    return out


def header(head_steps=None):
    options = {} if head_steps is None else {"head_steps": head_steps}
    return prof.header_record({"argv": ["train.py"]}, options, {}, t0_unix=1.7e9)


def write(path, records, head_steps=None, clock=None):
    """Records through a ProfileWriter, as a session sends them; the loaded profile."""
    w = prof.ProfileWriter(path, flush_interval_s=60, clock=clock, head_steps=head_steps)
    w.submit(header(head_steps))
    for i, record in enumerate(records):
        w.submit(record)
        if i % 5000 == 4999:
            w.flush()
    w.submit(r.ExitEvent(records[-1].end_s + 0.01, 0, "returned", len(records)))
    w.finish()
    return prof.load(path)


@pytest.fixture(scope="module")
def long_run(tmp_path_factory):
    """The same 20,000 steps written bounded (the default) and in full."""
    d = tmp_path_factory.mktemp("long")
    every = steps()
    return write(d / "bounded.jsonl", every), write(d / "exact.jsonl", every, 10 ** 6)


def test_the_tail_is_kept_in_windows_not_step_records(long_run):
    bounded, exact = long_run
    assert len(exact.steps) == N_STEPS and not exact.windows
    assert len(bounded.steps) == HEAD_STEPS
    assert sum(w.n for w in bounded.windows) == N_STEPS - HEAD_STEPS
    assert bounded.summary.n_steps == exact.summary.n_steps == N_STEPS
    assert bounded.summary.aggregated_steps == N_STEPS - HEAD_STEPS
    assert bounded.path != exact.path
    size, full = (prof.load(p.path) and _size(p.path) for p in long_run)
    assert size < full / 5


def _size(path):
    import os
    return os.path.getsize(path)


@pytest.mark.parametrize("figure", ["step_s", "cycle_s"])
def test_step_time_quantiles_agree_with_the_exact_ones_within_1_percent(long_run, figure):
    bounded, exact = (getattr(p.summary, figure) for p in long_run)
    for q in ("p50", "p90", "p99"):
        assert getattr(bounded, q) == pytest.approx(getattr(exact, q), rel=0.01), q
    assert (bounded.mean, bounded.min, bounded.max, bounded.n) == pytest.approx(
        (exact.mean, exact.min, exact.max, exact.n), rel=1e-9)
    assert bounded.cv == pytest.approx(exact.cv, rel=1e-6)


def test_breakdown_shares_and_throughput_agree(long_run):
    bounded, exact = (p.summary for p in long_run)
    assert bounded.warmup_steps == exact.warmup_steps
    for part in bounded.breakdown_s.PARTS:
        assert bounded.shares.part(part) == pytest.approx(exact.shares.part(part), rel=0.01)
    for wait in ("compute_wait_s", "compute_queued_s"):  # (means of every steady step)
        assert getattr(exact.breakdown_s, wait) > 0
        assert getattr(bounded.breakdown_s, wait) == pytest.approx(
            getattr(exact.breakdown_s, wait), rel=1e-9)
    assert bounded.throughput == exact.throughput or (
        bounded.throughput.samples_per_s == pytest.approx(exact.throughput.samples_per_s,
                                                          rel=1e-9))
    # every third step took two batches of 64: 4/3 batches a step, in the windows too
    assert bounded.throughput.batches_per_step == pytest.approx(4 / 3, rel=1e-3)
    assert bounded.verdict.kind == exact.verdict.kind


def test_the_slowest_and_sampled_tail_steps_are_kept_in_full(long_run):
    bounded, exact = long_run
    tail = sorted(exact.steps[HEAD_STEPS:], key=lambda s: -s.cycle_s)
    slow = [s for s in bounded.exemplars if s.exemplar == "slow"]
    assert {s.step for s in tail[:SLOWEST]} <= {s.step for s in slow}
    sampled = [s for s in bounded.exemplars if s.exemplar == "sample"]
    assert 0 < len(sampled) <= 32 and all(s.step >= HEAD_STEPS for s in sampled)


def test_window_lengths_grow_with_the_run():
    assert window_length_s(0.0) == 1.0 and window_length_s(512.0) == 2.0
    assert window_length_s(10 ** 6) == 300.0


def test_windows_close_on_the_clock_so_a_killed_job_keeps_them(tmp_path):
    path = tmp_path / "killed.jsonl"
    now = [0.0]
    w = prof.ProfileWriter(path, flush_interval_s=60, clock=lambda: now[0])
    w.submit(header())
    every = steps(3000)
    for s in every:
        w.submit(s)
    now[0] = every[-1].end_s + 2.0  # the next flush comes after the last window's time
    w.flush()  # ... and the job is killed before it ends: no exit, no finish()
    loaded = prof.load(path)
    assert not loaded.complete
    assert loaded.summary.n_steps == 3000 and loaded.windows
    w.close()


def test_a_v1_profile_of_a_long_job_is_bounded_as_it_loads(tmp_path):
    """The old one-record-per-step profiles are folded into windows as they are read."""
    every = steps(5000)
    v1 = [{"type": "header", "schema": 1, "t0_unix": 1.7e9, "command": {"argv": ["t.py"]},
           "env": {}, "options": {}}]
    v1 += [{**json.loads(json.dumps(s._asdict())), "type": "step", "t": s.t_s} for s in every]
    loaded = prof.load(prof.write_records(tmp_path / "v1.jsonl", v1))
    assert len(loaded.steps) == HEAD_STEPS and loaded.summary.n_steps == 5000
    exact = write(tmp_path / "exact.jsonl", every, 10 ** 6).summary
    assert loaded.summary.cycle_s.p90 == pytest.approx(exact.cycle_s.p90, rel=0.01)


def test_samples_and_reader_intervals_past_their_head_are_windowed():
    acc = Accumulator()
    acc.add(header())
    for i in range(1000):
        acc.add(r.SystemSample(0.5 * i, cpu_percent=float(i % 100), rss_bytes=1000 + i))
        acc.add(r.ReaderInterval(0.5 * i, 0.5 * (i + 1), 3, 1, pops=2, wait_s=0.001))
    acc.close()
    kept = acc.kept
    assert len(kept.system) == 240 and kept.sample_windows
    assert sum(w.n for w in kept.sample_windows) == 1000 - 240
    intervals = [x for x in kept.reader if isinstance(x, r.ReaderInterval)]
    assert sum(x.pops for x in intervals) == 2000  # every pop counted once
    tail = intervals[240:]
    assert len(tail) < (1000 - 240) / 1.5
    for merged in tail[:-1]:  # each spans its window: a 256th of the run so far, 1 s at least
        assert merged.t_s - merged.t0_s >= window_length_s(merged.t0_s) - 1e-9


def test_the_sketch_is_within_its_accuracy_and_merges():
    rng = random.Random(3)
    values = [rng.lognormvariate(-6, 1) for _ in range(5000)]
    a, b, whole = DistBuilder(), DistBuilder(), DistBuilder()
    for v in values[:2000]:
        a.add(v)
    for v in values[2000:]:
        b.add(v)
    for v in values:
        whole.add(v)
    a.merge(b.frozen())
    ordered = sorted(values)
    for q in (0.1, 0.5, 0.9, 0.99):
        exact = ordered[int(q * (len(values) - 1))]
        assert a.sketch.quantile(q) == pytest.approx(exact, rel=2 * ACCURACY + 1e-3)
    assert a.mean == pytest.approx(whole.mean) and a.cv() == pytest.approx(whole.cv())
    empty = SketchBuilder()
    assert empty.quantile(0.5) is None and empty.frozen() == r.Sketch(0, (), 0)


def test_values_added_at_once_give_the_figures_of_values_added_one_by_one():
    rng = random.Random(4)
    values = [0.0, 1e-12] + [rng.lognormvariate(-7, 1.5) for _ in range(3000)]
    import numpy as np
    one, many = DistBuilder(), DistBuilder()
    for v in values:
        one.add(v)
    many.add_many(np.array(values[:1000]))
    many.add_many(np.array([]))
    many.add_many(np.array(values[1000:]))
    a, b = one.frozen(), many.frozen()
    assert (a.n, a.min, a.max, a.sketch) == (b.n, b.min, b.max, b.sketch)
    assert a.sum == pytest.approx(b.sum, rel=1e-12) and a.m2 == pytest.approx(b.m2, rel=1e-9)
    assert b.sketch.zeros == 2
    wide = [1e-6, 2e-6, 1e40, 1e40]  # a span of buckets too wide to count them in one array
    one_wide, many_wide = DistBuilder(), DistBuilder()
    for v in wide:
        one_wide.add(v)
    many_wide.add_many(np.array(wide))
    assert one_wide.frozen().sketch == many_wide.frozen().sketch


def test_a_window_folds_its_steps_in_batches_to_the_figures_of_each_step():
    """WindowBuilder holds steps and folds them FOLD_STEPS at a time; the window it freezes
    holds what adding each step's parts one by one gives (gap None: 0, a first step's)."""
    from paddletune.profile.windows import FOLD_STEPS, PARTS, WindowBuilder
    tail = steps(n=3 * FOLD_STEPS + 7)[5:]
    tail[10] = tail[10]._replace(gap_s=None, queue=None, batch_size=None,
                                 compute_wait_s=None, compute_queued_s=None)
    window = WindowBuilder(1, tail[0].t_s)
    for s in tail:
        window.add_step(s)
    frozen = window.frozen()
    expect = {name: DistBuilder() for name in PARTS}
    for s in tail:
        gap = s.gap_s or 0.0
        for name, value in (("wall", s.wall_s), ("cycle", s.wall_s + gap), ("feed", s.feed_s),
                            ("compute", s.compute_s), ("fetch", s.fetch_s), ("outside", gap),
                            ("read", s.read_s), ("compute_wait", s.compute_wait_s),
                            ("compute_queued", s.compute_queued_s)):
            if value is not None:  # (a step that did not measure its compute wait)
                expect[name].add(value)
    assert frozen.n == len(tail) and set(frozen.parts) == set(PARTS)
    assert frozen.parts["compute_wait"].n == frozen.parts["compute_queued"].n == len(tail) - 1
    for name, dist in frozen.parts.items():
        want = expect[name].frozen()
        assert (dist.n, dist.min, dist.max, dist.sketch) == (want.n, want.min, want.max,
                                                             want.sketch), name
        assert dist.sum == pytest.approx(want.sum, rel=1e-12), name
        assert dist.m2 == pytest.approx(want.m2, rel=1e-9, abs=1e-18), name
    assert frozen.t_s == max(s.t_s + s.wall_s for s in tail)
    assert frozen.samples == sum(s.sample_count for s in tail)  # (a step's samples, where
    # it took several batches: every third step's 128)
    assert frozen.batch_sizes == {64: len(tail) - 1}
    assert (frozen.feed_bytes, frozen.fetch_bytes) == (sum(s.feed_bytes for s in tail),
                                                       sum(s.fetch_bytes for s in tail))
    queues = [s.queue for s in tail if s.queue is not None]
    assert (frozen.queue_first, frozen.queue_last) == (queues[0], queues[-1])
