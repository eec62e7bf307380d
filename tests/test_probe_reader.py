"""The reader probe: interval records from fake reader events (empty pops, drains, shapes,
step costs, speed-test intervals) and from real thread-producer DataLoaders."""

import threading
import time

import numpy as np
import pytest

import runtime as fluid
from paddletune.probes.base import Clock
from paddletune.probes.reader import ReaderProbe
from paddletune.profile.records import (ProbeRecord, ReaderEnd, ReaderInterval, ReaderStart,
                                        StepCost)
from paddletune.sources.fluid import FluidSource
from runtime import events

SOURCE = FluidSource()

CONFIG = {"name": "L", "capacity": 2, "feed": ["x", "y"], "num_workers": 0}
SHAPES = ((4, 3), (4, 1))  # 16 elements


def push(index, t, size, produce_s=0.001):
    events.reader_push.emit(events.ReaderPush(7, 1, index, -1, t, produce_s, 0.0, size, 2,
                                              64, SHAPES, produce_s / 2))


def pop(index, t, wait_s, size, speed_test=False):
    events.reader_pop.emit(events.ReaderPop(7, 1, index, t, wait_s, size, 2, speed_test))


def step(compute_s=0.002, startup=False):
    events.step_end.emit(events.StepRecord(1, 3, 0, 0.0, 0.01, 0.0, compute_s, 0.0, 4, 5, 0,
                                           0, (), "CPUPlace", startup))


def state(what, t, **kw):
    events.reader_state.emit(events.ReaderState(7, 1, t, what, **kw))


def intervals(sink):
    return [r for r in sink if isinstance(r, ReaderInterval)]


def test_fake_events_give_compact_interval_records():
    sink = []
    probe = ReaderProbe(sink.append, Clock(t0=100.0), interval_s=100, sample_s=100,
                        source=SOURCE).start()
    state("start", 100.0, config=CONFIG)
    push(0, 100.001, 1)
    push(1, 100.002, 2)  # the queue is full
    assert probe.snapshot() == {"loaders": [{"loader": 7, "pass": 1, "size": 0, "capacity": 2,
                                             "name": "L", "passes": 1, "pushes": 0, "pops": 0,
                                             "peeks": 0, "empty_pops": 0, "wait_s": 0.0,
                                             "produce_s": 0.0, "swings": 0}]}
    pop(0, 100.003, 0.001, 2)  # a slow pop of a batch already queued: not an empty queue
    step()
    pop(1, 100.004, 0.0, 1)
    step(startup=True)  # startup programs pair with nothing
    step()
    push(2, 100.009, 1)
    pop(2, 100.010, 0.004, 0)  # it waited for the push: the queue was empty when it asked
    step(compute_s=0.003)
    push(3, 100.011, 1)
    pop(3, 100.012, 0.0, 1, speed_test=True)  # the flag switched: a new interval
    pop(3, 100.013, 0.0, 1, speed_test=True)
    state("end", 100.02, batches=3)
    result = probe.stop()
    kinds = [type(r) for r in sink if isinstance(r, (ReaderStart, ReaderEnd, ReaderInterval))]
    assert kinds == [ReaderStart, ReaderInterval, ReaderInterval, ReaderEnd]
    first, second = intervals(sink)
    assert (first.t0_s, first.t_s) == (0.0, pytest.approx(0.012))  # the first peek began
    assert (first.pushes, first.pops, first.empty_pops, first.swings) == (4, 3, 1, 1)
    assert first.wait_s == pytest.approx(0.005) and first.step_wait_s == pytest.approx(0.005)
    assert first.shapes == {"x": {"4x3": 4}, "y": {"4x1": 4}}
    assert first.cost == {16: StepCost(3, pytest.approx(0.007))} and first.steps == 3
    assert first.programs == {3: 3} and first.workers[-1].batches == 4
    assert first.cpu_s == pytest.approx(0.002) and first.cpu_n == 4
    assert sum(first.wait_hist.values()) == 3 and first.pop_sizes == {2: 1, 1: 1, 0: 1}
    assert (second.speed_test, second.peeks, second.pops) == (True, 2, 0)
    assert sink[-2].batches == 3 and isinstance(sink[-1], ProbeRecord)
    assert result.in_step and result.overhead_s > 0
    totals = result.details["loaders"]["7"]
    assert (totals["pushes"], totals["pops"], totals["peeks"], totals["empty_pops"]) == \
        (4, 3, 2, 1)


def test_the_loop_only_queues_its_events_and_the_sampler_counts_them():
    """A pass's start, a batch's push and pop and a step reach the probe as queued events
    (one append on the emitting thread); the sampler thread counts them at its next wake, in
    order."""
    sink = []
    probe = ReaderProbe(sink.append, Clock(t0=100.0), interval_s=100, sample_s=0.01,
                        source=SOURCE).start()
    with probe._fold_lock:
        state("start", 100.0, config=CONFIG)
        assert not probe._passes and len(probe._events) == 1  # queued, not begun yet
    deadline = time.monotonic() + 5.0
    while 7 not in probe._passes and time.monotonic() < deadline:
        time.sleep(0.005)
    with probe._fold_lock:  # (the sampler waits here if it wakes meanwhile)
        push(0, 100.001, 1)
        pop(0, 100.002, 0.001, 1)
        step()
        st = probe._passes[7]
        assert st.produced.pushes == 0 and st.consumed.pops == 0  # queued, not counted yet
        assert len(probe._events) == 3
    while probe._events and time.monotonic() < deadline:
        time.sleep(0.005)
    assert (st.produced.pushes, st.consumed.pops, st.consumed.steps) == (1, 1, 1)
    assert probe.cost_s["sampler"] > 0.0
    probe.stop()


def test_a_step_after_its_pops_interval_was_cut_is_kept():
    """The sampler cuts an interval between a pass's last pop and the step that consumed it:
    the step lands in an interval with no push, pop or queue sample, which is still recorded
    (it was dropped as empty: a pass of 30 batches counted 29 steps, once in ~100 runs of
    test_slow_producer_starves_the_queue on a loaded machine)."""
    sink = []
    probe = ReaderProbe(sink.append, Clock(t0=100.0), interval_s=0.01, sample_s=0.005,
                        source=SOURCE).start()
    state("start", 100.0, config=CONFIG)
    push(0, 100.001, 1)
    pop(0, 100.002, 0.001, 1)
    deadline = time.monotonic() + 10.0
    while not intervals(sink) and time.monotonic() < deadline:  # the sampler's cut
        time.sleep(0.005)
    assert [(iv.pops, iv.steps) for iv in intervals(sink)] == [(1, 0)]
    step()
    state("end", 100.1, batches=1)
    probe.stop()
    assert [(iv.pops, iv.steps) for iv in intervals(sink)] == [(1, 0), (0, 1)]
    assert intervals(sink)[1].cost == {16: StepCost(1, pytest.approx(0.002))}


def test_sealing_takes_what_is_held_back_at_once():
    """A second Ctrl-C seals the profile at once: the passes' starts, ends and open
    intervals still queued for the sampler go to the seal (never through the sink), unless
    the probe's lock stays busy."""
    sink = []
    probe = ReaderProbe(sink.append, Clock(t0=100.0), interval_s=100, sample_s=100,
                        source=SOURCE).start()
    with probe._fold_lock:  # (the sampler cannot count meanwhile)
        state("start", 100.0, config=CONFIG)
        push(0, 100.001, 1)
        pop(0, 100.002, 0.001, 1)
        t0 = time.monotonic()
        assert probe.sealed_records(timeout_s=0.01) == []  # busy: nothing, at once
        assert time.monotonic() - t0 < 1.0
    records = probe.sealed_records()
    assert [type(r).__name__ for r in records] == ["ReaderStart", "ReaderInterval"]
    assert (records[0].loader, records[1].pushes, records[1].pops) == (7, 1, 1)
    assert sink == []
    probe.stop()


def test_in_a_forked_process_the_queued_events_are_dropped_at_each_pass(monkeypatch):
    """A process the job forks inherits the subscriptions but no sampler thread, and writes
    no profile: what it queues is dropped at its passes' starts and ends, not kept."""
    probe = ReaderProbe([].append, Clock(t0=100.0), interval_s=100, sample_s=100,
                        source=SOURCE).start()
    monkeypatch.setattr(probe, "_owner", -1)  # (as if this were the forked child)
    state("start", 100.0, config=CONFIG)
    push(0, 100.001, 1)
    pop(0, 100.002, 0.001, 1)
    assert len(probe._events) == 2
    state("end", 100.01, batches=1)
    assert not probe._events and probe._sampler is None
    monkeypatch.undo()
    probe.stop()


def test_a_loop_made_loader_is_counted_at_least_every_half_second():
    """Nothing is queued for a loader the loop reads itself, so its queue is not sampled,
    but its events are counted at least every FOLD_MAX_S however long the interval."""
    from paddletune.probes.reader import FOLD_MAX_S
    probe = ReaderProbe([].append, Clock(t0=100.0), interval_s=60, sample_s=0.01,
                        source=SOURCE).start()
    state("start", 100.0, config={**CONFIG, "capacity": None})
    assert probe._sample_wait() == FOLD_MAX_S == 0.5
    state("end", 100.01, batches=0)
    probe.stop()


def test_an_event_it_cannot_count_is_left_out_and_said_so():
    sink = []
    probe = ReaderProbe(sink.append, Clock(t0=100.0), interval_s=100, sample_s=100,
                        source=SOURCE).start()
    state("start", 100.0, config=CONFIG)
    events.reader_push.emit(events.ReaderPush(7, 1, 0, -1, 100.001, 0.001, 0.0, 1, 2, 64,
                                              None, None))  # (no shapes: not countable)
    push(1, 100.002, 1)
    pop(1, 100.003, 0.0, 1)
    state("end", 100.01, batches=1)
    record = probe.stop()
    interval, = intervals(sink)
    assert (interval.pushes, interval.pops) == (1, 1)
    assert record.available and "ReaderPush was not counted: TypeError" in record.reason


def test_a_broken_queue_sampler_still_counts_the_queued_events():
    class Broken(FluidSource):
        def queue_sizes(self):
            raise RuntimeError("the queue is gone")

    sink = []
    probe = ReaderProbe(sink.append, Clock(t0=100.0), interval_s=100, sample_s=0.005,
                        source=Broken()).start()
    state("start", 100.0, config=CONFIG)
    deadline = time.monotonic() + 5.0
    while probe.reason is None and time.monotonic() < deadline:
        time.sleep(0.005)
    assert probe.reason == "queue sampling failed: the queue is gone"
    push(0, 100.001, 1)
    pop(0, 100.002, 0.0, 1)
    while probe._events and time.monotonic() < deadline:
        time.sleep(0.005)
    assert not probe._events and probe._passes[7].consumed.pops == 1
    probe.stop()


def test_no_dataloader_costs_nothing():
    before = events.subscribers("step_end")
    probe = ReaderProbe([].append, Clock(), source=SOURCE).start()
    assert events.subscribers("step_end") == before and probe._sampler is None
    step()
    record = probe.stop()
    assert record.details["loaders"] == {} and record.details["records"] == 0
    assert events.subscribers("reader_pop") == 0


def loader_over(gen, capacity):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [-1, 3], "float32")
        total = fluid.layers.reduce_sum(x)
        loader = fluid.io.DataLoader.from_generator(feed_list=[x], capacity=capacity)
    return main, total, loader.set_batch_generator(gen)


def run_loader(gen, capacity=4, step_sleep_s=0.0, interval_s=0.02, loaders=None,
               after_step=None):
    """Train on `gen` through a thread-producer DataLoader with the probe on; its records.
    The loader is appended to `loaders` (for a generator that watches its queue), and
    `after_step(loader)` runs after each step's sleep, before the next pop."""
    main, total, loader = loader_over(gen, capacity)
    if loaders is not None:
        loaders.append(loader)
    sink = []
    probe = ReaderProbe(sink.append, Clock(), interval_s=interval_s, sample_s=0.002,
                        source=SOURCE).start()
    exe = fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(fluid.Scope()):
        for data in loader():
            exe.run(main, feed=data, fetch_list=[total])
            time.sleep(step_sleep_s)
            if after_step is not None:
                after_step(loader)
    probe.stop()
    rows = intervals(sink)
    return rows, {k: sum(getattr(r, k) for r in rows) for k in ("pushes", "pops",
                                                                 "empty_pops", "steps",
                                                                 "swings")}


def queue_samples(rows):
    """{queue size: samples} over the interval records."""
    occupancy = {}
    for r in rows:
        for size, n in r.occupancy.items():
            occupancy[int(size)] = occupancy.get(int(size), 0) + n
    return occupancy


def batches(n, sleep_s=0.0, rows=4, before=None, done=None):
    """A batch generator; `before()` runs before each batch is made, `done` is set once the
    last one was pushed."""
    def gen():
        for i in range(n):
            if before is not None:
                before()
            time.sleep(sleep_s)
            yield [np.full((rows, 3), i, "float32")]
        if done is not None:
            done.set()
    return gen


WAIT_S = 10.0  # the most a test below waits for the other side of the queue (never reached)


def _consumer_waiting(loaders):
    """Wait until the consumer is blocked in pop on the loader's (empty) queue: the one
    waiter on its condition, as the producer never waits on a queue that is not full."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if loaders and loaders[0].queue._cond._waiters:
            return
        time.sleep(0.0002)


def test_slow_producer_starves_the_queue():
    # each batch is made once the consumer waits for it, and takes 3 ms more: every pop
    # finds the queue empty, however the threads are scheduled (a sleep alone did not
    # ensure it on a loaded machine: a consumer held off its core let batches queue)
    loaders = []
    rows, total = run_loader(batches(30, sleep_s=0.003,
                                     before=lambda: _consumer_waiting(loaders)),
                             loaders=loaders)
    assert total["pushes"] == total["pops"] == total["steps"] == 30
    assert total["empty_pops"] == 30
    assert len(rows) >= 2  # the sampler cut intervals every 20 ms
    occupancy = queue_samples(rows)
    assert occupancy and min(occupancy) == 0


def _queue_full(done):
    """after_step: wait until the producer has filled the queue (or made its last batch)."""
    def wait(loader):
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline and not done.is_set() and \
                loader.queue.size() < loader.queue.capacity():
            time.sleep(0.0002)
    return wait


def test_fast_producer_keeps_the_queue_full():
    # after each step the consumer lets the producer fill the queue (a producer held off
    # its core on a loaded machine could fall behind a consumer that only slept 3 ms)
    done = threading.Event()
    rows, total = run_loader(batches(30, done=done), step_sleep_s=0.003,
                             after_step=_queue_full(done))
    assert total["pops"] == 30 and total["empty_pops"] <= 1  # (the first pop may wait)
    occupancy = queue_samples(rows)
    assert max(occupancy) == 4
    full = sum(n for size, n in occupancy.items() if size >= 3)
    assert full >= 0.5 * sum(occupancy.values())
    # each interval's shapes count its pushes (the first interval may hold only queue
    # samples, from before the producer's first push)
    assert [r.shapes for r in rows] == [{"x": {"4x3": r.pushes}} if r.pushes else {}
                                        for r in rows]
    assert sum(r.pushes for r in rows) == 30


def test_a_pops_hand_over_is_summed_and_left_out_of_its_wait_in_the_histogram():
    """A pop's hand-over (a worker's batch taken over once made: sources/torch) is part of
    its wait, summed on its own; the histogram, whose long waits mean no batch was ready,
    holds each wait less it. A payload without the field (the runtime's) counts none."""
    from paddletune.profile import loghist
    from paddletune.sources.eager.bus import ReaderPop as EagerPop
    sink = []
    probe = ReaderProbe(sink.append, Clock(t0=100.0), interval_s=100, sample_s=100,
                        source=SOURCE).start()
    state("start", 100.0, config=CONFIG)
    for i in range(4):
        push(i, 100.001 + i * 0.01, 1)
        events.reader_pop.emit(EagerPop(7, 1, i, 100.005 + i * 0.01, 0.003, 1, 2, False,
                                        0.0, 0.0025))
        step()
    push(4, 100.05, 1)
    pop(4, 100.055, 0.003, 1)  # the runtime's payload: no hand-over
    step()
    state("end", 100.1, batches=5)
    probe.stop()
    (iv,) = intervals(sink)
    assert iv.wait_s == pytest.approx(0.015) and iv.handover_s == pytest.approx(0.010)
    assert iv.wait_hist == {loghist.bucket(0.0005): 4, loghist.bucket(0.003): 1}
