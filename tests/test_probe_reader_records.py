"""The reader probe's records, exactly, from one fixed stream of reader and step events: two
loaders' passes side by side, a pass restarted without its end, pushes of several shapes and
producers, pops that wait or not, find the queue empty or drain it from full, pop a batch never
pushed, peek in speed-test mode (the interval is cut at each switch), steps with no pop and
startup steps, queue samples, events of no running pass, and one event it cannot count.

The stream is the same for the payload classes of every source (the embedded runtime's
dataclasses, the eager bus's NamedTuples, and plain objects that only have the attributes
sources/base.py lists), and the records are the same whether the probe counts the queued
events all at once, after each event, or on its sampler thread."""

import random
import threading
import time
from dataclasses import replace
from types import SimpleNamespace

import pytest

from paddletune.probes import reader
from paddletune.probes.base import Clock
from paddletune.probes.reader import ReaderProbe
from paddletune.profile.records import (LoaderConfig, ProbeRecord, ReaderEnd, ReaderInterval,
                                        ReaderStart, StepCost, WorkerCounts)
from paddletune.sources.eager import bus as eager
from paddletune.sources.fluid import FluidSource
from runtime import events as rt

A = {"name": "A", "capacity": 2, "feed": ["x", "y"], "num_workers": 0}
B = {"name": "B", "capacity": 3, "feed": ["img"], "num_workers": 2}
XY = ((4, 3), (4, 1))  # 16 elements
XY_SMALL = ((2, 3), (2, 1))  # 8 elements
IMG = ((5, 5, 1),)  # 25 elements


class Sizes:
    """The queue sizes and speed-test switch a test sets (what a source's loaders report)."""

    def __init__(self):
        self.sizes, self.speed_test = {}, False

    def queue_sizes(self):
        return dict(self.sizes)

    def speed_test_mode(self):
        return self.speed_test


class RuntimeSource(Sizes, FluidSource):
    """The embedded runtime's channels and payload dataclasses (runtime/events.py)."""

    def __init__(self):
        Sizes.__init__(self)
        FluidSource.__init__(self)

    def emit(self, event, payload):
        getattr(rt, event).emit(payload)

    def push(self, loader, pass_no, index, worker, t, produce_s, put_wait_s, size, capacity,
             nbytes, shapes, cpu_s):
        self.emit("reader_push", rt.ReaderPush(loader, pass_no, index, worker, t, produce_s,
                                               put_wait_s, size, capacity, nbytes, shapes,
                                               cpu_s))

    def pop(self, loader, pass_no, index, t, wait_s, size, capacity, speed_test, copy_s):
        self.emit("reader_pop", rt.ReaderPop(loader, pass_no, index, t, wait_s, size, capacity,
                                             speed_test, copy_s))

    def step(self, program, compute_s, startup=False):
        self.emit("step_end", rt.StepRecord(1, program, 0, 0.0, 0.01, 0.0, compute_s, 0.0, 4,
                                            5, 0, 0, (), "CPUPlace", startup))

    def state(self, loader, pass_no, t, what, config=None, batches=0, detail=""):
        self.emit("reader_state", rt.ReaderState(loader, pass_no, t, what, config, detail,
                                                 batches))


class BusSource(Sizes):
    """An eager framework's bus (sources/eager/bus.py) and its NamedTuple payloads."""

    def __init__(self):
        super().__init__()
        self.bus = eager.Bus()

    def subscribe(self, event, fn):
        return self.bus.subscribe(event, fn)

    def push(self, *fields):
        self.bus.emit("reader_push", eager.ReaderPush(*fields))

    def pop(self, *fields):
        self.bus.emit("reader_pop", eager.ReaderPop(*fields))

    def step(self, program, compute_s, startup=False):
        self.bus.emit("step_end", eager.StepEnd(0, 0.0, 0.01, 0.0, 0.0, 0.0, compute_s, 4,
                                                "cpu", program_id=program, is_startup=startup))

    def state(self, loader, pass_no, t, what, config=None, batches=0, detail=""):
        self.bus.emit("reader_state", eager.ReaderState(loader, pass_no, t, what, config or {},
                                                        detail or None, batches))


class PlainSource(BusSource):
    """Payloads that are plain objects with the attributes sources/base.py lists."""

    def push(self, loader, pass_no, index, worker, t, produce_s, put_wait_s, size, capacity,
             nbytes, shapes, cpu_s):
        self.bus.emit("reader_push", SimpleNamespace(
            loader_id=loader, pass_no=pass_no, index=index, worker=worker, t=t,
            produce_s=produce_s, put_wait_s=put_wait_s, size=size, capacity=capacity,
            nbytes=nbytes, shapes=shapes, cpu_s=cpu_s))

    def pop(self, loader, pass_no, index, t, wait_s, size, capacity, speed_test, copy_s):
        self.bus.emit("reader_pop", SimpleNamespace(
            loader_id=loader, pass_no=pass_no, index=index, t=t, wait_s=wait_s, size=size,
            capacity=capacity, speed_test=speed_test, copy_s=copy_s))

    def step(self, program, compute_s, startup=False):
        self.bus.emit("step_end", SimpleNamespace(
            executor_id=0, program_id=program, step=0, t_begin=0.0, t_end=0.01, feed_s=0.0,
            compute_s=compute_s, fetch_s=0.0, read_s=0.0, batch_size=4, n_ops=5,
            feed_bytes=0, fetch_bytes=0, fetch_names=(), feed_names=(), place="cpu",
            is_startup=startup))

    def state(self, loader, pass_no, t, what, config=None, batches=0, detail=""):
        self.bus.emit("reader_state", SimpleNamespace(
            loader_id=loader, pass_no=pass_no, t=t, what=what, config=config, detail=detail,
            batches=batches))


SOURCES = {"runtime": RuntimeSource, "bus": BusSource, "plain": PlainSource}


def play(source, probe, between=lambda: None):
    """The fixed stream (times from 100 s: the probe's clock starts there); `between` runs
    after each event. The snapshots it took on the way."""
    snaps = []

    def push(loader, index, t, size, shapes=XY, worker=-1, produce_s=0.001, put_wait_s=0.0,
             nbytes=64, cpu_s=0.0005, pass_no=1):
        capacity = 2 if loader == 7 else 3
        source.push(loader, pass_no, index, worker, t, produce_s, put_wait_s, size, capacity,
                    nbytes, shapes, cpu_s)
        between()

    def pop(loader, index, t, wait_s, size, speed_test=False, copy_s=0.0, pass_no=1):
        capacity = 2 if loader == 7 else 3
        source.pop(loader, pass_no, index, t, wait_s, size, capacity, speed_test, copy_s)
        between()

    def step(program, compute_s, startup=False):
        source.step(program, compute_s, startup)
        between()

    def state(loader, pass_no, t, what, **kw):
        source.state(loader, pass_no, t, what, **kw)
        between()

    state(7, 1, 100.0, "start", config=A)
    state(8, 1, 100.001, "start", config=B)
    push(7, 0, 100.01, 1, cpu_s=0.0005)
    push(7, 1, 100.02, 2, worker=0, produce_s=0.002, put_wait_s=0.0001, cpu_s=None)  # full
    push(8, 0, 100.02, 1, IMG, worker=1, produce_s=0.003, nbytes=100, cpu_s=0.001)
    snaps.append(probe.snapshot())
    pop(7, 0, 100.03, 0.001, 2, copy_s=0.0002)  # a slow pop of a queued batch: not empty
    pop(8, 0, 100.03, 0.0, 1)
    step(3, 0.002)  # both loaders' pops: one step of each pass
    step(3, 0.5, startup=True)  # a startup program pairs with nothing
    step(4, 0.007)  # no pop since the last step: no step of either pass
    pop(7, 1, 100.04, 5e-7, 1)  # under 1 us: the floor bucket
    source.sizes, source.speed_test = {7: 2, 8: 1, 99: 5}, False
    probe.sample(time.perf_counter())  # (no record: interval_s is 100 s)
    push(7, 2, 100.05, 1, XY_SMALL, worker=1, produce_s=0.0015, cpu_s=0.0007)
    pop(7, 2, 100.06, 0.004, 0)  # the queue was empty: a drain from full (sampled full)
    step(3, 0.003)  # pairs with two pops of loader 7: 16 + 8 elements
    pop(7, 99, 100.065, 0.0, 0)  # a batch never pushed: 0 elements; empty, but no drain
    step(5, 0.001)
    pop(7, 4, 100.066, 0.25, 1, pass_no=9)  # no such pass
    pop(99, 0, 100.066, 0.25, 1)  # no such loader
    push(7, 9, 100.067, 1, shapes=None)  # not countable: left out, named in the reason
    push(7, 3, 100.07, 2, cpu_s=None)  # full again
    source.sizes, source.speed_test = {7: 2, 8: 0}, True
    probe.sample(time.perf_counter())  # speed-test mode: the sizes are not counted
    pop(7, 3, 100.08, 0.003, 2, speed_test=True)  # a peek: a new interval from 100.077
    pop(7, 3, 100.09, 0.0, 2, speed_test=True)
    pop(7, 3, 100.1, 0.002, 1, copy_s=0.0001)  # popped at last: a new interval from 100.098
    step(3, 0.004)
    state(8, 1, 100.2, "end", batches=1)
    push(8, 1, 100.21, 1, IMG)  # after its pass ended: not counted
    snaps.append(probe.snapshot())
    state(7, 2, 100.3, "start", config=A)  # a new pass, pass 1 never ended
    push(7, 0, 100.31, 1, pass_no=2)
    pop(7, 0, 100.32, 0.0, 1, pass_no=2)
    step(6, 0.002)
    state(7, 1, 100.4, "end", batches=4)  # the old pass's late end: ignored
    snaps.append(probe.snapshot())
    return snaps


CONFIG_A = LoaderConfig(name="A", capacity=2, num_workers=0, feed=("x", "y"))
T_B = 0.0010000000000047748  # (100.001 - 100.0)
T_CUT = 0.07699999999999818  # the first peek's start: 100.08 - 0.003 - 100.0
T_CUT2 = 0.09799999999999898  # the pop after the peeks: 100.1 - 0.002 - 100.0
T_END_B, T_PASS_2 = 0.20000000000000284, 0.29999999999999716
EXPECTED = [
    ReaderStart(0.0, 7, 1, CONFIG_A),
    ReaderStart(T_B, 8, 1, LoaderConfig(name="B", capacity=3, num_workers=2, feed=("img",))),
    ReaderInterval(  # cut where loader 7's first peek began
        0.0, T_CUT, 7, 1, pushes=4, produce_s=0.0055000000000000005,
        cpu_s=0.0012000000000000001, cpu_n=2, put_wait_s=0.0001, nbytes=256,
        workers={-1: WorkerCounts(2, 0.002, 0.0005, 1), 0: WorkerCounts(1, 0.002, 0.0, 0),
                 1: WorkerCounts(1, 0.0015, 0.0007, 1)},
        shapes={"x": {"4x3": 3, "2x3": 1}, "y": {"4x1": 3, "2x1": 1}},
        pops=4, empty_pops=2, wait_s=0.0050005, wait_max_s=0.004, copy_s=0.0002,
        wait_hist={-30: 1, -60: 2, -24: 1}, pop_sizes={2: 1, 1: 1, 0: 2},
        occupancy={2: 1}, swings=1,
        cost={16: StepCost(1, 0.002), 24: StepCost(1, 0.003), 0: StepCost(1, 0.001)},
        steps=3, step_wait_s=0.0050005, programs={3: 2, 5: 1}),
    ReaderInterval(T_CUT, T_CUT2, 7, 1, speed_test=True, peeks=2),
    ReaderInterval(
        T_B, T_END_B, 8, 1, pushes=1, produce_s=0.003, cpu_s=0.001, cpu_n=1, nbytes=100,
        workers={1: WorkerCounts(1, 0.003, 0.001, 1)}, shapes={"img": {"5x5x1": 1}}, pops=1,
        wait_hist={-60: 1}, pop_sizes={1: 1}, occupancy={1: 1}, cost={25: StepCost(1, 0.002)},
        steps=1, programs={3: 1}),
    ReaderEnd(T_END_B, 8, 1, "end", 1, ""),
    ReaderInterval(  # loader 7's new pass: its old pass's last interval, then the start
        T_CUT2, T_PASS_2, 7, 1, pops=1, wait_s=0.002, wait_max_s=0.002, copy_s=0.0001,
        wait_hist={-27: 1}, pop_sizes={1: 1}, cost={16: StepCost(1, 0.004)}, steps=1,
        step_wait_s=0.002, programs={3: 1}),
    ReaderStart(T_PASS_2, 7, 2, CONFIG_A),
]
EXPECTED_AT_STOP = ReaderInterval(  # (t_s: when it stopped)
    T_PASS_2, None, 7, 2, pushes=1, produce_s=0.001, cpu_s=0.0005, cpu_n=1, nbytes=64,
    workers={-1: WorkerCounts(1, 0.001, 0.0005, 1)}, shapes={"x": {"4x3": 1}, "y": {"4x1": 1}},
    pops=1, wait_hist={-60: 1}, pop_sizes={1: 1}, cost={16: StepCost(1, 0.002)}, steps=1,
    programs={6: 1})


def totals(name, passes, **kw):
    row = {"name": name, "passes": passes, "pushes": 0, "pops": 0, "peeks": 0, "empty_pops": 0,
           "wait_s": 0.0, "produce_s": 0.0, "swings": 0}
    row.update(kw)
    return row


EXPECTED_SNAPSHOTS = [
    {"loaders": [{"loader": 7, "pass": 1, "size": 0, "capacity": 2, **totals("A", 1)},
                 {"loader": 8, "pass": 1, "size": 0, "capacity": 3, **totals("B", 1)}]},
    {"loaders": [{"loader": 7, "pass": 1, "size": 2, "capacity": 2,
                  **totals("A", 1, pushes=4, pops=4, peeks=2, empty_pops=2, wait_s=0.0050005,
                           produce_s=0.0055000000000000005, swings=1)}]},
    {"loaders": [{"loader": 7, "pass": 2, "size": 0, "capacity": 2,
                  **totals("A", 2, pushes=4, pops=5, peeks=2, empty_pops=2,
                           wait_s=0.0070005, produce_s=0.0055000000000000005, swings=1)}]},
]
EXPECTED_TOTALS = {
    "7": totals("A", 2, pushes=5, pops=6, peeks=2, empty_pops=2, wait_s=0.0070005,
                produce_s=0.006500000000000001, swings=1),
    "8": totals("B", 1, pushes=1, pops=1, produce_s=0.003)}


def run(kind, between=None):
    """The stream played to a new probe; `between(probe)` after each event."""
    source = SOURCES[kind]()
    sink = []
    probe = ReaderProbe(sink.append, Clock(t0=100.0), interval_s=100, sample_s=100,
                        source=source).start()
    try:
        snaps = play(source, probe, (lambda: between(probe)) if between else (lambda: None))
    finally:
        record = probe.stop()
    return sink, snaps, record


def exact(records):
    """The records as written: every field, its dicts' order and its floats' every bit."""
    return [repr(r) for r in records]


@pytest.mark.parametrize("kind", sorted(SOURCES))
def test_a_fixed_stream_gives_exactly_these_records(kind):
    sink, snaps, record = run(kind)
    assert isinstance(sink[-1], ProbeRecord) and sink[-1] is record
    *records, at_stop, _ = sink
    assert exact(records) == exact(EXPECTED)
    assert at_stop.t_s > 0.3  # (the stop's own clock)
    assert exact([at_stop]) == exact([replace(EXPECTED_AT_STOP, t_s=at_stop.t_s)])
    assert repr(snaps) == repr(EXPECTED_SNAPSHOTS)
    details = record.details
    assert details["records"] == len(sink) - 1
    assert repr(details["loaders"]) == repr(EXPECTED_TOTALS)
    name = {"runtime": "ReaderPush", "bus": "ReaderPush", "plain": "SimpleNamespace"}[kind]
    assert record.reason == (f"a {name} was not counted: TypeError: 'NoneType' object is not "
                             f"iterable")
    assert record.available and record.in_step
    assert set(details["overhead_by_thread_s"]) == {"consumer", "sampler", "snapshot"}
    assert record.overhead_s == sum(details["overhead_by_thread_s"].values()) > 0.0


def fold_on_another_thread(probe):
    thread = threading.Thread(target=probe._fold)
    thread.start()
    thread.join()


@pytest.mark.parametrize("between", [ReaderProbe._fold, fold_on_another_thread],
                         ids=["each-event", "each-event-another-thread"])
@pytest.mark.parametrize("kind", sorted(SOURCES))
def test_counting_the_events_in_other_groups_gives_the_same_records(kind, between):
    """However the queued events are grouped when they are counted (all at a pass's start or
    end, or one at a time, on the loop's thread or another), the records are the same."""
    sink, snaps, record = run(kind)
    each, each_snaps, each_record = run(kind, between)
    assert exact(each[:-2]) == exact(sink[:-2]) and repr(each_snaps) == repr(snaps)
    assert each_record.reason == record.reason


@pytest.mark.parametrize("tally_at", [1, 2, 5])
@pytest.mark.parametrize("kind", sorted(SOURCES))
def test_tallying_the_kept_events_often_gives_the_same_records(kind, tally_at, monkeypatch):
    """The probe tallies what it kept before each record and every TALLY_AT events counted;
    where that falls does not change a record."""
    sink, snaps, record = run(kind, ReaderProbe._fold)
    monkeypatch.setattr(reader, "TALLY_AT", tally_at)
    often, often_snaps, often_record = run(kind, ReaderProbe._fold)
    assert exact(often[:-2]) == exact(sink[:-2]) and repr(often_snaps) == repr(snaps)
    assert often_record.reason == record.reason


def test_a_payload_a_tally_cannot_add_is_counted_as_it_was_before_it_and_named():
    """A field a tally cannot add (a produce_s that is not a number) leaves the tally to
    count its payloads one at a time: the others are counted, and that one as far as it
    goes (its push, not its time), as the probe counted each event before it tallied."""
    source = BusSource()
    sink = []
    probe = ReaderProbe(sink.append, Clock(t0=100.0), interval_s=100, sample_s=100,
                        source=source).start()
    source.state(7, 1, 100.0, "start", config=A)
    for index, produce_s in enumerate([0.001, "0.002", 0.003]):
        source.push(7, 1, index, -1, 100.01, produce_s, 0.0, 1, 2, 64, XY, 0.0005)
        source.pop(7, 1, index, 100.02, 0.001, 1, 2, False, 0.0)
        source.step(3, 0.002)
    source.state(7, 1, 100.1, "end", batches=3)
    record = probe.stop()
    interval = [r for r in sink if isinstance(r, ReaderInterval)]
    assert exact(interval) == exact([ReaderInterval(
        0.0, 0.09999999999999432, 7, 1, pushes=3, produce_s=0.004, cpu_s=0.001, cpu_n=2,
        nbytes=128, workers={-1: WorkerCounts(2, 0.004, 0.001, 2)},
        shapes={"x": {"4x3": 2}, "y": {"4x1": 2}}, pops=3, wait_s=0.003, wait_max_s=0.001,
        wait_hist={-30: 3}, pop_sizes={1: 3}, cost={16: StepCost(3, 0.006)}, steps=3,
        step_wait_s=0.003, programs={3: 3})])
    assert record.reason == ("a ReaderPush was not counted: TypeError: unsupported operand "
                             "type(s) for +=: 'float' and 'str'")


@pytest.mark.parametrize("bad", ["pop", "step", "neither"])
def test_an_event_a_tally_cannot_add_is_named_and_the_others_are_counted(bad):
    """(The bad event itself counts as far as it goes: a pop that pairs with its step, a
    step that has its pops.)"""
    source = BusSource()
    sink = []
    probe = ReaderProbe(sink.append, Clock(t0=100.0), interval_s=100, sample_s=100,
                        source=source).start()
    source.state(7, 1, 100.0, "start", config=A)
    for index in range(3):
        source.push(7, 1, index, -1, 100.01, 0.001, 0.0, 1, 2, 64, XY, 0.0005)
        if bad == "pop" and index == 1:  # (copy_s: not a number)
            source.bus.emit("reader_pop", eager.ReaderPop(7, 1, index, 100.02, 0.001, 1, 2,
                                                          False, "none"))
        else:
            source.pop(7, 1, index, 100.02, 0.001, 1, 2, False, 0.0)
        if bad == "step" and index == 1:  # (a program id that is no dict key)
            source.bus.emit("step_end", eager.StepEnd(0, 0.0, 0.01, 0.0, 0.0, 0.0, 0.002, 4,
                                                      "cpu", program_id=[3]))
        else:
            source.step(3, 0.002)
        if bad == "neither" and index == 1:
            source.bus.emit("reader_push", SimpleNamespace(loader_id=7, pass_no=1))
    source.state(7, 1, 100.1, "end", batches=3)
    record = probe.stop()
    interval, = [r for r in sink if isinstance(r, ReaderInterval)]
    name = {"pop": "ReaderPop", "step": "StepEnd", "neither": "SimpleNamespace"}[bad]
    assert record.reason.startswith(f"a {name} was not counted: TypeError")
    assert interval.pushes == 3 and interval.workers[-1].batches == 3
    assert interval.pops == 3 and interval.wait_hist[-30] == (2 if bad == "pop" else 3)
    assert interval.steps == 3 and interval.programs[3] == (2 if bad == "step" else 3)


@pytest.mark.parametrize("wait", [0, 0.0, -1.0, 1e-9, 9.99e-7, reader.loghist.FLOOR_S,
                                  1.0000001e-6, 1.0001e-6, 2e-6, 1e-5, 0.000123, 0.001,
                                  0.0012589254117941673, 0.25, 1, 3.7, 1e3, 1e12])
def test_the_tallys_wait_buckets_are_loghist_buckets(wait):
    assert list(reader.loghist.buckets([wait])) == [reader.loghist.bucket(wait)]
    assert type(list(reader.loghist.buckets([wait]))[0]) is type(reader.loghist.bucket(wait))


def test_the_tallys_wait_buckets_are_loghist_buckets_over_many_waits():
    waits = [10.0 ** (k / 1000) for k in range(-9000, 3000)] + [k * 1e-7 for k in range(100)]
    assert list(reader.loghist.buckets(waits)) == [reader.loghist.bucket(w) for w in waits]


def random_pushes(rng, n):
    return [eager.ReaderPush(7, 1, i, rng.choice([-1, 0, 1, 2]), 100.0, rng.random() * 0.01,
                             rng.choice([0.0, rng.random() * 1e-3]), 1, 2,
                             rng.randint(1, 10 ** 6), rng.choice([XY, XY_SMALL, IMG]),
                             rng.choice([None, rng.random() * 1e-3])) for i in range(n)]


def random_pops(rng, n):
    return [eager.ReaderPop(7, 1, i, 100.0, rng.choice([0.0, 5e-7, 1e-6, rng.random() * 1e-2,
                                                        rng.random() * 1e-5, 3]),
                            rng.randint(0, 3), 2, False, rng.choice([0.0, rng.random() * 1e-4]))
            for i in range(n)]


def random_steps(rng, n):
    return [(eager.StepEnd(0, 0.0, 0.01, 0.0, 0.0, 0.0, rng.random() * 0.01, 4, "cpu",
                           program_id=rng.choice([1, 2, 3])), rng.choice([0, 8, 16, 24]),
             rng.random() * 0.01) for _ in range(n)]


@pytest.mark.parametrize("seed", range(20))
def test_a_tally_counts_exactly_what_counting_each_payload_in_turn_does(seed):
    """The tallies' C passes (map, reduce, _count_elements) against the payload-at-a-time
    counting they replace: the same counters, bit for bit and in the same order, from
    counters that already hold counts (a tally adds to them)."""
    rng = random.Random(seed)
    tallied, each = reader._Produced(), reader._Produced()
    for n in (rng.randint(1, 40), rng.randint(1, 40)):
        pushes = random_pushes(rng, n)
        tallied.batches = list(pushes)
        assert tallied.pushes == each.pushes + n
        assert tallied.tally() == [] and not tallied.batches
        for push in pushes:
            each.add(push)
        assert repr(tallied.fields(["x", "y"])) == repr(each.fields(["x", "y"]))
    tallied, each = reader._Consumed(), reader._Consumed()
    for n in (rng.randint(1, 40), rng.randint(1, 40)):
        pops, steps = random_pops(rng, n), random_steps(rng, rng.randint(1, 40))
        tallied.taken, tallied.stepped = list(pops), list(steps)
        assert (tallied.pops, tallied.steps) == (each.pops + n, each.steps + len(steps))
        assert tallied.tally() == [] and not tallied.taken and not tallied.stepped
        for pop in pops:
            each.add_pop(pop)
        for step in steps:
            each.add_step(*step)
        assert repr(tallied.fields()) == repr(each.fields())


def play_loop_batches(source, probe, combined):
    """Batches the training loop makes itself (worker -1; LoaderTracker.made), each sent as a
    reader_push and at once its reader_pop, or (`combined`) as one reader_batch: two shapes,
    waits under 1 us and none, a cpu_s not measured, steps and a startup step, a queue
    sample, a speed-test peek (the next batch's push lands before the interval's cut, its pop
    after it), a batch of no running pass, and a pass restarted. The snapshots on the way."""
    snaps = []

    def batch(index, t, wait_s, size, shapes=XY, produce_s=0.001, cpu_s=0.0005, pass_no=1):
        if combined:
            source.bus.emit("reader_batch", eager.ReaderBatch(
                7, pass_no, index, t, produce_s, cpu_s, wait_s, size, 2, 64, shapes))
        else:
            source.push(7, pass_no, index, -1, t, produce_s, 0.0, 0, 2, 64, shapes, cpu_s)
            source.pop(7, pass_no, index, t, wait_s, size, 2, False, 0.0)

    source.state(7, 1, 100.0, "start", config=A)
    batch(0, 100.01, 0.001, 0)
    batch(1, 100.02, 0.0, 1, XY_SMALL, produce_s=0.002, cpu_s=None)
    source.step(3, 0.002)
    source.step(3, 0.5, startup=True)
    batch(2, 100.03, 5e-7, 0)
    source.sizes = {7: 2}
    probe.sample(time.perf_counter())
    snaps.append(probe.snapshot())
    source.step(4, 0.003)
    source.pop(7, 1, 3, 100.04, 0.0, 0, 2, True, 0.0)  # a peek (the replay): a new interval
    batch(3, 100.05, 0.002, 0)  # its push in the peek's interval, its pop in a new one
    source.step(3, 0.001)
    batch(9, 100.06, 0.0, 0, pass_no=5)  # no such pass
    snaps.append(probe.snapshot())
    source.state(7, 2, 100.1, "start", config=A)
    batch(0, 100.11, 0.0, 0, pass_no=2)
    source.step(6, 0.002)
    return snaps


@pytest.mark.parametrize("tally_at", [1, 3, reader.TALLY_AT])
@pytest.mark.parametrize("between", [None, ReaderProbe._fold], ids=["at-once", "each-event"])
def test_a_loop_batch_as_one_reader_batch_gives_the_records_of_its_push_and_pop(
        between, tally_at, monkeypatch):
    monkeypatch.setattr(reader, "TALLY_AT", tally_at)
    runs = []
    for combined in (False, True):
        source, sink = BusSource(), []
        probe = ReaderProbe(sink.append, Clock(t0=100.0), interval_s=100, sample_s=100,
                            source=source).start()
        if between is not None:  # (each event counted as it comes)
            source.bus.subscribe("reader_batch", lambda r, probe=probe: between(probe))
            source.bus.subscribe("reader_pop", lambda r, probe=probe: between(probe))
        snaps = play_loop_batches(source, probe, combined)
        record = probe.stop()
        *records, at_stop, _ = sink
        runs.append((exact(records), exact([replace(at_stop, t_s=None)]), repr(snaps),
                     repr(record.details["loaders"]), record.reason))
    assert runs[0] == runs[1]
    records = runs[1][0]
    assert len(records) == 5 and "speed_test=True, pushes=1" in records[2]
    assert "pushes=3" in records[1] and "pops=3" in records[1] and "peeks=1" in records[2]
    assert "pushes=0" in records[3] and "pops=1" in records[3] and "pushes=1" in runs[1][1][0]


class Recorded:
    def __init__(self, bus, event):
        self.payloads = []
        bus.subscribe(event, self.payloads.append)


def test_the_tracker_sends_a_loop_batch_as_one_event_only_while_every_subscriber_takes_it():
    """LoaderTracker.made: one reader_batch while the reader and step probes are the
    subscribers (they take it); the push and the pop while a subscriber of either does not
    (then to every subscriber, the probes too); the same records and timer figures."""
    from paddletune.probes.step import StepProbe
    from paddletune.sources.eager.loaders import LoaderTracker
    from paddletune.sources.eager.steps import StepTimer

    def run(extra):
        source, sink = BusSource(), []
        timer = StepTimer(source.bus)
        tracker = LoaderTracker(source.bus, timer, lambda item: getattr(item, "shape", None),
                                lambda item, shape=None: 8 * len(item.shape))
        probes = [ReaderProbe(sink.append, Clock(t0=100.0), interval_s=100, sample_s=100,
                              source=source).start(),
                  StepProbe(sink.append, Clock(t0=100.0), source).start()]
        batches = Recorded(source.bus, "reader_batch")
        pops = Recorded(source.bus, extra) if extra else None
        handle = tracker.start(7, {"capacity": 0, "feed": ["x", "y"]}, 0, lambda: 0)
        for index, t in enumerate((100.01, 100.02, 100.03)):
            batch = (SimpleNamespace(shape=(4, 3)), SimpleNamespace(shape=(4,)))
            t_request = t - 0.001 * index
            tracker.made(handle, t_request, t, 0.0005, None, batch, index % 2)
            assert (timer.batch_size, timer._read_s) == (4, t - t_request)
            source.bus.emit("step_end", eager.StepEnd(index, t, t + 0.001, 0.0, 0.0, 0.0,
                                                      0.001, 4, "cpu", program_id=3))
            timer._read_s = 0.0
        tracker.end(handle)
        for probe in probes:
            probe.stop()
        readers = [replace(r, t0_s=None, t_s=None) for r in sink  # (the pass's start and
                   if isinstance(r, ReaderInterval)]  # end: the tracker's clock)
        steps = [repr(r) for r in sink if type(r).__name__ == "Step"]
        assert (handle.batches, handle.produced) == (3, 3)
        return exact(readers), steps, batches.payloads, pops.payloads if pops else None

    readers, steps, batches, _ = run(None)
    assert [b.index for b in batches] == [0, 1, 2]
    assert [b.size for b in batches] == [0, 1, 0] and batches[0].shapes == ((4, 3), (4,))
    for extra in ("reader_pop", "reader_push"):
        pair_readers, pair_steps, pair_batches, parts = run(extra)
        assert pair_batches == [] and [p.index for p in parts] == [0, 1, 2]
        assert (pair_readers, pair_steps) == (readers, steps)
    assert "pushes=3" in readers[0] and "pops=3" in readers[0] and "steps=3" in readers[0]
    assert [s.split("queue=")[1].split(",")[0] for s in steps] == ["0", "1", "0"]
