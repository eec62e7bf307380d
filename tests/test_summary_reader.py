"""Reader and speed-test figures of the summary, from canned reader-probe records."""

import pytest

from paddletune.profile import loghist
from paddletune.profile import reader_figures as R
from paddletune.profile import load
from paddletune.profile.figures import DimFigures, Growth, ShapeFigures
from paddletune.profile.records import StepCost
from profiles import make_profile, reader_records, step_records


def speed_test_events(baseline_t, ceiling_t, done_t, start=10, window=10, done_step=None,
                      cpu_s=(None, None, None), thread_cpu_s=(None, None, None)):
    """The speed test's switches; `cpu_s` the process's CPU time at each, `thread_cpu_s`
    the training thread's."""
    from paddletune.profile.records import SpeedTestEvent
    rows = [SpeedTestEvent(baseline_t, "baseline", start, "baseline", cpu_s[0],
                           thread_cpu_s[0]),
            SpeedTestEvent(ceiling_t, "ceiling", start + window, "ceiling", cpu_s[1],
                           thread_cpu_s[1])]
    if done_t is not None:
        rows.append(SpeedTestEvent(done_t, "done", done_step or start + 2 * window, "done",
                                   cpu_s[2], thread_cpu_s[2]))
    return rows


def starved(tmp_path, **per_batch):
    """40 steps of 10 ms + a 5 ms gap, the loop waiting 4 ms per step for a 12 ms producer."""
    steps = step_records(gap_s=0.005)
    extra = reader_records(steps, **{"wait_s": 0.004, "empty_ratio": 0.9, "produce_s": 0.012,
                                     "cpu_s": 0.006, "fill": 0, **per_batch})
    return load(make_profile(tmp_path / "p.jsonl", steps=steps, extra=extra)).summary


def test_no_dataloader_no_reader_figures(tmp_path):
    s = load(make_profile(tmp_path / "p.jsonl")).summary
    assert s.reader is None and s.speed_test is None
    assert s.speed_test_steps_excluded == 0


def test_starved_loader_figures(tmp_path):
    s = starved(tmp_path)
    reader = s.reader
    f = reader.loaders[0]
    assert reader.main == 0 and reader.errors == ()
    assert (f.name, f.passes, f.scope) == ("DataLoader#0", 1, "steady")
    assert f.batches == 30  # the first interval holds the start-up: left out
    assert f.empty_ratio == pytest.approx(0.9)
    w = f.wait
    assert w.mean_s == pytest.approx(0.004) and w.per_step_s == pytest.approx(0.004)
    assert w.share == pytest.approx(0.004 / 0.015)  # of the steady 15 ms cycle
    assert w.p50_s == pytest.approx(0.004, rel=0.15) and w.max_s == pytest.approx(0.006)
    p, c = f.producer, f.consumer
    assert p.s_per_batch == pytest.approx(0.012) and p.rate_per_s == pytest.approx(1 / 0.012)
    assert p.cpu_share == pytest.approx(0.5) and p.producers == 1
    assert c.s_per_batch == pytest.approx(0.011) and c.batches_per_step == 1
    assert c.actual_per_s == pytest.approx(1 / 0.015)
    assert f.occupancy.empty_share == 1.0 and f.occupancy.source == "samples"
    assert not f.oscillating


def test_full_queue_occupancy_and_oscillation(tmp_path):
    f = starved(tmp_path, fill=8, empty_ratio=0.0, wait_s=0.0, swings=2).reader.loaders[0]
    o = f.occupancy
    assert (o.mean, o.min, o.max, o.capacity) == (8, 8, 8, 8)
    assert (o.full_share, o.empty_share) == (1.0, 0.0)
    assert f.swings == 6 and f.oscillating  # 2 per steady interval
    assert [round(fill) for _, fill in f.timeline] == [8, 8, 8, 8]


def test_workers_and_shapes(tmp_path):
    shapes = {"img": {"64x100": 18, "64x230": 1, "64x5000": 1}, "label": {"64x1": 20}}
    f = starved(tmp_path, workers=(0, 1), shapes=shapes).reader.loaders[0]
    assert [(r.worker, r.batches) for r in f.workers] == [(0, 15), (1, 15)]
    assert f.workers[0].s_per_batch == pytest.approx(0.012)
    img = f.shapes["img"]
    assert img.shape == (64, None) and not img.rank_varies
    assert img.varying == (DimFigures(dim=1, min=100, p50=100, p95=230, max=5000),)
    assert f.shapes["label"] == ShapeFigures(batches=600, rank_varies=False, shape=(64, 1),
                                             varying=())


def test_a_producers_cpu_per_batch_is_over_the_batches_it_was_measured_on():
    """WorkerCounts.cpu_n: the batches cpu_s covers (a PyTorch loop's own batches are
    measured one in eight); a row without it (a profile from before) covers every batch."""
    from paddletune.profile.records import LoaderConfig, ReaderInterval, WorkerCounts
    rows = [ReaderInterval(0.0, 1.0, 0, 1, pushes=16, pops=16, produce_s=0.16,
                           workers={-1: WorkerCounts(16, 0.16, 0.02, 2),
                                    0: WorkerCounts(4, 0.08, 0.04)}),
            ReaderInterval(1.0, 2.0, 0, 1, pushes=8, pops=8, produce_s=0.08,
                           workers={-1: WorkerCounts(8, 0.08, 0.01, 1)})]
    f = R.loader_figures(0, LoaderConfig(name="L"), 1, None, None, rows)
    loop, worker = f.workers
    assert (loop.worker, loop.batches) == (-1, 24)
    assert loop.s_per_batch == pytest.approx(0.01)
    assert loop.cpu_s_per_batch == pytest.approx(0.03 / 3)  # (not 0.03 / 24)
    assert worker.cpu_s_per_batch == pytest.approx(0.01)  # (all 4 batches)
    assert R.loader_figures(0, LoaderConfig(name="L"), 1, None, None, [
        ReaderInterval(0.0, 1.0, 0, 1, workers={-1: WorkerCounts(3, 0.03, 0.0, 0)})
    ]).workers[0].cpu_s_per_batch is None  # (none measured: unknown, not 0)


def test_the_intervals_begun_in_the_steady_window_stand_for_it_only_with_most_of_its_pops():
    """A short job (a tune trial): the pass's first interval, begun before the steady
    window, holds 90 of its 100 batches; the 10 after the first flush's cut, one with a slow
    file's burst, would read as a producer several times slower. A long job's first interval
    is left out (it holds the start-up) once those begun inside hold most of the pops."""
    from paddletune.profile.records import LoaderConfig, ReaderInterval

    def interval(t0, t1, pops, produce_s):
        return ReaderInterval(t0, t1, 0, 1, pushes=pops, pops=pops, produce_s=produce_s)
    first = interval(0.0, 0.5, 90, 90 * 0.005)
    burst = interval(0.5, 0.55, 10, 10 * 0.005 + 0.06)
    short = R.loader_figures(0, LoaderConfig(name="L"), 1, (0.02, 0.55), None, [first, burst])
    assert (short.scope, short.batches) == ("steady", 100)
    assert short.producer.s_per_batch == pytest.approx((0.5 + 0.06) / 100)
    later = [interval(0.5 * k, 0.5 * (k + 1), 90, 90 * 0.005) for k in range(1, 10)]
    long = R.loader_figures(0, LoaderConfig(name="L"), 1, (0.02, 5.0), None,
                            [interval(0.0, 0.5, 90, 90 * 0.009)] + later)
    assert (long.scope, long.batches) == ("steady", 810)  # (the first, start-up's, left out)
    assert long.producer.s_per_batch == pytest.approx(0.005)


def test_long_batches_against_the_others():
    cost = {6400: StepCost(95, 95 * 0.010), 320000: StepCost(5, 5 * 0.200)}
    f = R.long_batches(cost)
    assert (f.steps, f.p95_elements, f.max_elements, f.long_steps) == \
        (100, 6400, 320000, 5)
    assert f.slowdown == pytest.approx(20.0)
    assert f.long_share == pytest.approx(1.0 / 1.95)
    assert R.long_batches({6400: StepCost(10, 0.1)}) is None


def test_loghist_quantiles():
    hist = {loghist.bucket(0.001): 50, loghist.bucket(0.01): 50}
    assert loghist.quantile(hist, 0.25) == pytest.approx(0.001, rel=0.3)
    assert loghist.quantile(hist, 0.9) == pytest.approx(0.01, rel=0.3)
    assert loghist.bucket(0.0) == loghist.FLOOR and loghist.value(loghist.FLOOR) == 0.0
    assert loghist.quantile({}, 0.5) is None


def speed_test_run(tmp_path, n_steps=40, after=None):
    """`n_steps` steps of 15 ms cycles with a speed test: baseline window from step 10,
    ceiling window (5 ms cycles) over steps 20..29, done at step 30; `after(i, row)` changes
    step i's record before the times are laid out."""
    steps = step_records(n_steps=n_steps, gap_s=0.005)
    t = steps[1]["t"]
    for i, st in enumerate(steps[1:]):
        if 20 <= i < 30:
            st["wall_s"], st["compute_s"], st["gap_s"] = 0.004, 0.0033, 0.001
        if after is not None:
            after(i, st)
        st["t"] = t
        t += st["wall_s"] + st["gap_s"]
    events = speed_test_events(steps[11]["t"] - 1e-4, steps[21]["t"] - 1e-4,
                               steps[31]["t"] - 1e-4)
    return load(make_profile(tmp_path / "p.jsonl", steps=steps, options={"speed_test": 10},
                             extra=events + reader_records(steps)))


def test_speed_test_windows_and_ceiling_steps_left_out(tmp_path):
    p = speed_test_run(tmp_path)
    st = p.summary.speed_test
    assert st.has_loader and st.complete and st.reached == "done"
    assert st.baseline.steps == st.ceiling.steps == 10
    assert st.baseline.steps_per_s == pytest.approx(1 / 0.015)
    assert st.ceiling.samples_per_s == pytest.approx(64 / 0.005)
    assert st.ratio == pytest.approx(3.0) and st.data_share == pytest.approx(2 / 3)
    assert p.summary.speed_test_steps_excluded == 10 and p.summary.steady_steps == 29
    assert p.summary.cycle_s.max == pytest.approx(0.015)


@pytest.mark.parametrize("drains", [True, False])
def test_steps_draining_the_queue_the_speed_test_filled_are_left_out(tmp_path, drains):
    """The ceiling window only peeks at the queue, so a producer slower than the step fills
    it meanwhile; the 4 steps after the window take those batches (5 ms cycles, the queue at
    8, 6, 4, 2) until a pop finds it empty: not the job's steady step, left out with the
    window. A queue that stays full (a producer that keeps up) leaves nothing more out."""
    def queue(i, row):
        row["queue"] = 0 if drains else 8
        if drains and 30 <= i < 34:
            row["gap_s"], row["queue"] = 0.0, 8 - 2 * (i - 30)
            row["wall_s"], row["compute_s"] = 0.005, 0.0043
    p = speed_test_run(tmp_path, n_steps=50, after=queue)
    assert p.summary.speed_test_steps_excluded == (14 if drains else 10)
    assert p.summary.cycle_s.min == pytest.approx(0.015)
    assert p.summary.cycle_s.mean == pytest.approx(0.015)


def test_speed_test_cut_short_and_without_a_loader(tmp_path):
    steps = step_records(gap_s=0.005)
    events = speed_test_events(steps[11]["t"] - 1e-4, steps[36]["t"] - 1e-4, None)
    p = load(make_profile(tmp_path / "p.jsonl", steps=steps, options={"speed_test": 10},
                          extra=events))
    st = p.summary.speed_test
    assert not st.has_loader and not st.complete and st.reached == "ceiling"
    assert st.baseline.steps == 25 and st.ceiling.steps == 5
    requested = load(make_profile(tmp_path / "q.jsonl", options={"speed_test": 20}))
    assert requested.summary.speed_test.baseline is None


def test_non_iterable_wait_inside_the_run_counts_as_input(tmp_path):
    steps = step_records(wall_s=0.014)
    for st in steps[1:]:
        st["read_s"] = 0.004
    s = load(make_profile(tmp_path / "p.jsonl", steps=steps)).summary
    assert s.breakdown_s.read_s == pytest.approx(0.004)
    assert s.input_share == pytest.approx((0.004 + 0.0005) / 0.014)
    assert "+ 4.00 ms waiting for the DataLoader inside exe.run" in s.verdict.text


def test_worker_process_memory_and_cpu(tmp_path):
    from profiles import worker_samples
    steps = step_records(gap_s=0.005)
    extra = reader_records(steps, workers=(0, 1), config={"num_workers": 2}) + \
        worker_samples(workers=2, growth=40 * 2 ** 20, cores=0.75)
    s = load(make_profile(tmp_path / "p.jsonl", steps=steps, extra=extra)).summary
    p = s.reader.loaders[0].processes
    assert p.workers == 2 and p.cores == pytest.approx(1.5)
    assert p.uss_growth_bytes == Growth(mean=40 * 2 ** 20, max=40 * 2 ** 20)
    assert p.uss_max_bytes == 48 * 2 ** 20
    assert [r.worker for r in p.per_worker] == [0, 1]
    assert s.system is None  # per-worker rows are not averaged into the system figures


def test_no_worker_samples_no_process_figures(tmp_path):
    assert starved(tmp_path).reader.loaders[0].processes is None


def test_a_speed_test_window_has_the_process_cpu_per_step(tmp_path):
    steps = step_records(gap_s=0.005)
    events = speed_test_events(steps[11]["t"] - 1e-4, steps[21]["t"] - 1e-4,
                               steps[31]["t"] - 1e-4, cpu_s=(1.0, 1.3, 1.35),
                               thread_cpu_s=(0.5, 0.6, 0.62))
    st = load(make_profile(tmp_path / "p.jsonl", steps=steps, options={"speed_test": 10},
                           extra=events + reader_records(steps))).summary.speed_test
    assert st.baseline.cpu_s_per_step == pytest.approx(0.03)
    assert st.ceiling.cpu_s_per_step == pytest.approx(0.005)
    assert st.baseline.thread_cpu_s_per_step == pytest.approx(0.01)
    assert st.ceiling.thread_cpu_s_per_step == pytest.approx(0.002)
    unmeasured = speed_test_events(steps[11]["t"] - 1e-4, steps[21]["t"] - 1e-4,
                                   steps[31]["t"] - 1e-4)
    st = load(make_profile(tmp_path / "q.jsonl", steps=steps, options={"speed_test": 10},
                           extra=unmeasured + reader_records(steps))).summary.speed_test
    assert st.ceiling.cpu_s_per_step is None and st.ceiling.thread_cpu_s_per_step is None


def two_datasets(tmp_path, env=None, extra=()):
    """40 steps of 10 ms fed by DataLoader#0 (waiting 1 ms a batch), then 40 of 40 ms fed
    by DataLoader#1 (waiting 30 ms a batch its thread takes 31 ms to make, 3 ms of it CPU):
    an epoch on a slower dataset."""
    fast = step_records(n_steps=40, wall_s=0.010)
    t = fast[-1]["t"] + fast[-1]["wall_s"]
    slow = step_records(n_steps=40, wall_s=0.040, warmup=0, t_start=t)[1:]
    for i, s in enumerate(slow):
        s["step"] = 40 + i
    records = (reader_records(fast, wait_s=0.001, empty_ratio=1.0, fill=0)
               + reader_records(slow, config={"name": "DataLoader#1"}, loader=1,
                                wait_s=0.030, produce_s=0.031, cpu_s=0.003,
                                empty_ratio=1.0, fill=0) + list(extra))
    return load(make_profile(tmp_path / "p.jsonl", steps=fast + slow, env=env,
                             extra=records))


def test_a_loader_that_fed_some_steps_is_measured_against_those_steps(tmp_path):
    """Each loader's wait share and consumer figures are of the steps it fed (10 and 40 ms),
    not of the mean step over both (25 ms: the slow one's wait read 120% of it); the main
    loader is the slow one, whose waits held the steps back (not the first, with as many
    batches)."""
    s = two_datasets(tmp_path).summary
    fast, slow = s.reader.loaders
    assert s.reader.main == 1
    assert slow.cycle_s == pytest.approx(0.040) and fast.cycle_s == pytest.approx(0.010)
    assert slow.wait.share == pytest.approx(0.030 / 0.040)
    assert fast.wait.share == pytest.approx(0.001 / 0.010)
    assert slow.consumer.s_per_batch == pytest.approx(0.010)
    # their shares of the steady steps' time (the intervals the figures hold)
    assert slow.steps_share == pytest.approx(40 * 0.040 / (39 * 0.010 + 40 * 0.040))
    assert fast.steps_share == pytest.approx(39 * 0.010 / (39 * 0.010 + 40 * 0.040))


def test_one_training_loader_keeps_the_steps_mean_cycle(tmp_path):
    f = starved(tmp_path).reader.loaders[0]
    assert f.cycle_s is None and f.steps_share is None


def test_loaders_read_together_each_step_keep_the_steps_cycle(tmp_path):
    """Two loaders zipped (each step reads one batch of each): both fed every step, so their
    figures are of the steps' mean cycle (no cycle_s of their own); the main one is the
    second, whose waits (2 ms a batch against 1 ms) held the steps back more."""
    steps = step_records(n_steps=40, wall_s=0.010)
    records = (reader_records(steps, wait_s=0.001)
               + reader_records(steps, config={"name": "DataLoader#1"}, loader=1,
                                wait_s=0.002))
    s = load(make_profile(tmp_path / "p.jsonl", steps=steps, extra=records)).summary
    assert [(f.cycle_s, f.steps_share) for f in s.reader.loaders] == [(None, None)] * 2
    assert s.reader.main == 1


def test_a_loader_that_only_ran_in_the_warm_up_is_not_the_main_one(tmp_path):
    """A two-batch pass during the warm-up that waited 0.5 s (a sanity check): its figures
    are of the whole run, not the steady window's, and it does not become the main loader
    however long it waited."""
    steps = step_records(n_steps=40, wall_s=0.010, warmup_factor=60.0)
    warm = [s for s in steps if s["step"] == 0]
    records = (reader_records(steps, wait_s=0.001)
               + reader_records(warm, config={"name": "DataLoader#1"}, loader=1,
                                intervals=1, wait_s=0.5))
    s = load(make_profile(tmp_path / "p.jsonl", steps=steps, extra=records)).summary
    assert s.reader.of(1).scope == "all" and s.reader.main == 0


def test_the_wait_share_is_of_the_steps_its_intervals_hold(tmp_path):
    """helper-34's s10 (spawn workers, two passes): the first pass's first interval holds the
    warm-up step's 0.99 s start and is left out; the second pass's first interval, its
    workers' 0.49 s start in it, is in. The per-step wait of the intervals used was divided
    by the mean cycle of every steady step (70% of the loop, where the steps said 55%): it is
    now of the cycle of the steps those intervals hold, and so is the consumer's time."""
    from profiles import EAGER_SOURCE, eager_step_records, reader_interval, READER_BATCH
    steps = eager_step_records(n_steps=80, read_s=0.002)
    for i, wait in ((0, 0.990), (40, 0.490)):  # each pass's first batch: its workers' start
        steps[i].update(wall_s=0.008 + wait, read_s=wait)
    t = steps[0]["t"]
    for s in steps:
        s["t"], t = t, t + s["wall_s"]
    rows = []
    for k in range(4):  # two passes of two intervals, 20 steps each
        chunk = steps[20 * k:20 * (k + 1)]
        row = reader_interval(chunk[0]["t"], chunk[-1]["t"] + chunk[-1]["wall_s"], 20,
                              {**READER_BATCH, "wait_s": 0.002, "shapes": {}})
        waited = sum(s["read_s"] for s in chunk)
        row.update({"pass": k // 2 + 1, "wait_s": waited, "step_wait_s": waited,
                    "programs": {"0": 20}})
        rows.append(row)
    config = {"name": "DataLoader#0", "capacity": 4, "iterable": True, "num_workers": 2}
    starts = [{"type": "reader", "what": "start", "t": steps[20 * k]["t"], "loader": 0,
               "pass": k // 2 + 1, "config": config} for k in (0, 2)]
    ends = [{"type": "reader", "what": "end", "t": rows[k]["t"], "loader": 0,
             "pass": k // 2 + 1, "batches": 40, "detail": ""} for k in (1, 3)]
    s = load(make_profile(tmp_path / "p.jsonl", steps=steps, extra=starts + rows + ends,
                          source=EAGER_SOURCE)).summary
    f = s.reader.loaders[0]
    assert s.warmup_steps == 1 and f.batches == 60  # (the first interval left out)
    held = steps[20:]
    cycle = sum(x["wall_s"] for x in held) / len(held)
    waited = sum(x["read_s"] for x in held) / len(held)
    assert f.wait.per_step_s == pytest.approx(waited)
    assert f.wait.share == pytest.approx(waited / cycle)  # 56%; the steps' mean: 63%
    assert f.consumer.s_per_batch == pytest.approx(cycle - waited)
