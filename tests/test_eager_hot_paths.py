"""The per-batch and per-step paths of an eager source, which run on the training thread:
LoaderTracker.made and StepTimer.step_done keep Bus.emit's guarantees (a subscriber that
raises is dropped, the rest still get the payload, the step limit goes through); the step
probe queues the steps and pops through the profile writer's tap, and the writer builds the
Step records as it flushes; the session's step counter lets the writer catch up every 64
steps."""

import os
import warnings
from types import SimpleNamespace

import pytest

from paddletune import profile as prof
from paddletune.probes.base import Clock
from paddletune.probes.step import StepProbe
from paddletune.profile import records as r
from paddletune.session import StepCounter, StepLimitReached
from paddletune.sources.eager.bus import Bus, ReaderBatch, ReaderPop, StepEnd
from paddletune.sources.eager.loaders import LoaderTracker
from paddletune.sources.eager.source import EagerSource
from paddletune.sources.eager.steps import StepTimer


class Stop(BaseException):
    """A BaseException from a subscriber (as the session's step limit is)."""


def shape_of(item):
    return getattr(item, "shape", None)


def tracker_on(bus: Bus):
    timer = StepTimer(bus)
    return timer, LoaderTracker(bus, timer, shape_of, lambda item, shape=None: 4 * len(shape))


def made_one(tracker, handle, t):
    batch = (SimpleNamespace(shape=(8, 3)), SimpleNamespace(shape=(8,)))
    tracker.made(handle, t - 0.001, t, 0.001, None, batch, 0)


@pytest.mark.parametrize("path", ["reader_batch", "step_end"])
def test_a_subscriber_that_raises_is_dropped_and_the_rest_still_get_the_payload(path):
    bus = Bus()
    got = {"first": [], "last": []}

    def broken(payload):
        raise ValueError("a probe's bug")
    for fn in (got["first"].append, broken, got["last"].append):
        bus.subscribe(path, fn)
    timer, tracker = tracker_on(bus)
    handle = tracker.start(1, {}, 0, lambda: 0)
    with pytest.warns(RuntimeWarning, match=r"broken.*raised ValueError: a probe's bug; it was "
                                            r"unsubscribed"):
        made_one(tracker, handle, 10.0)
        timer.step_done("cpu")
    assert broken not in bus.subs[path]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (dropped: no second warning)
        made_one(tracker, handle, 10.01)
        timer.step_done("cpu")
    kind = ReaderBatch if path == "reader_batch" else StepEnd
    for name in ("first", "last"):
        mine = [p for p in got[name] if type(p) is kind]
        assert [p.step if kind is StepEnd else p.index for p in mine] == [0, 1]


def test_two_subscribers_that_raise_are_both_dropped_and_the_last_still_gets_it():
    bus, got = Bus(), []

    def broken(payload):
        raise KeyError(payload)

    def also_broken(payload):
        raise ValueError(payload)
    for fn in (broken, also_broken, got.append):
        bus.subscribe("step_end", fn)
    timer, _ = tracker_on(bus)
    with pytest.warns(RuntimeWarning) as caught:
        timer.step_done("cpu")
    assert len(caught) == 2 and bus.subs["step_end"] == (got.append,)
    assert [p.step for p in got] == [0]


def test_a_base_exception_from_a_subscriber_goes_through_to_the_loop():
    bus = Bus()

    def limit(payload):
        raise Stop(payload.step)
    bus.subscribe("step_end", limit)
    timer, _ = tracker_on(bus)
    with pytest.raises(Stop):
        timer.step_done("cpu")
    assert timer.steps == 1 and bus.subs["step_end"] == (limit,)  # (still subscribed)


def test_made_keeps_the_step_timer_s_reads():
    bus = Bus()
    bus.subscribe("reader_batch", lambda p: None)
    timer, tracker = tracker_on(bus)
    handle = tracker.start(1, {}, 0, lambda: 0)
    made_one(tracker, handle, 10.0)
    made_one(tracker, handle, 10.5)
    assert (timer._t_first, timer.batch_size) == (9.999, 8)
    assert timer._read_s == pytest.approx(0.002)
    ended = []
    bus.subscribe("step_end", ended.append)
    timer.step_done("cpu")
    assert ended[0].t_begin == 9.999 and ended[0].read_s == pytest.approx(0.002)
    assert timer._read_s == 0.0


def writer_at(path):
    w = prof.ProfileWriter(path, flush_interval_s=3600, head_steps=1000)
    w.submit(prof.header_record({"argv": ["train.py"]}, {}, {}, t0_unix=1.7e9))
    return w


def test_the_writer_s_tap_converts_each_event_in_order_at_the_flush(tmp_path):
    w, seen, warned = writer_at(tmp_path / "p.jsonl"), [], []
    w._warn = warned.append

    def convert(event):
        seen.append(event)
        if event == "bad":
            raise ValueError("cannot")
        return None if event == "skip" else r.StepLimitEvent(0.1, len(seen), event)
    tap = w.tap({str: convert})
    assert tap == w._pending.append  # (the queue's own append: C, no frame)
    for item in ("first", "skip", "bad"):
        tap(item)
    w.submit(r.StepLimitEvent(0.2, 0, "submitted"))
    tap("last")
    assert seen == []  # (nothing built before the flush)
    w.finish()
    messages = [e.message for e in prof.load(tmp_path / "p.jsonl").events
                if isinstance(e, r.StepLimitEvent)]
    assert messages == ["first", "submitted", "last"]
    assert seen == ["first", "skip", "bad", "last"]
    assert w.lost_records == 1 and len(warned) == 1 and "(str)" in warned[0]


def test_the_step_probe_queues_an_eager_source_s_steps_and_pops_through_the_tap(tmp_path):
    w = writer_at(tmp_path / "p.jsonl")
    source = EagerSource()
    bus = source.bus
    probe = StepProbe(w.submit, Clock(t0=0.0), source).start()
    assert probe._writer is w and set(w._converters) == {StepEnd, ReaderPop, ReaderBatch}
    assert bus.subs["step_end"] == (w._pending.append,)
    w.flush()
    for i in range(6):
        if i % 2:
            bus.emit("reader_pop", ReaderPop(1, 1, i, 1.0 + i, 0.0, 3 + i, 8))
        elif i == 4:
            bus.emit("reader_pop", ReaderPop(1, 1, i, 1.0 + i, 0.0, 9, 8, speed_test=True))
            bus.emit("reader_batch", ReaderBatch(1, 1, i, 1.0 + i, 0.1, None, 0.0, 2, 0, 64,
                                                 ((8, 3),)))
        bus.emit("step_end", StepEnd(i, 1.0 + i, 1.5 + i, 0.0, 0.0, 0.0, 0.5, 8, "cpu"))
    assert probe.n_steps == 0 and len(w._pending) == 11  # (queued as they are)
    probe.stop()  # (flushes the writer: the count is whole)
    assert probe.n_steps == 6 and probe.last.step == 5
    w.finish()
    loaded = prof.load(tmp_path / "p.jsonl")
    assert [s.queue for s in loaded.steps] == [None, 4, None, 6, 2, 8]  # (a peek: no fill)
    assert loaded.summary.n_steps == 6


def test_the_runtime_s_steps_and_pops_are_queued_but_no_reader_batch_is_listened_to(tmp_path):
    """The Fluid source sends no reader_batch (Source.may_send): the tap is not put there,
    where its class is unknown."""
    from paddletune.sources.fluid import FluidSource
    from runtime import events
    w = writer_at(tmp_path / "p.jsonl")
    probe = StepProbe(w.submit, Clock(t0=0.0), FluidSource()).start()
    try:
        assert set(w._converters) == {events.StepRecord, events.ReaderPop}
        assert w._pending.append in events.step_end.subs
        assert w._pending.append in events.reader_pop.subs
        assert FluidSource().subscribers("reader_batch") == 0
    finally:
        probe.stop()
        w.finish()


def test_in_a_forked_process_the_queued_pops_are_dropped_at_each_pass(tmp_path):
    """A process the job forked writes no profile: a DataLoader read there without training
    does not pile its pops up in the writer's queue (dropped at each pass's start and end)."""
    from paddletune.sources.eager.bus import ReaderState
    w = writer_at(tmp_path / "p.jsonl")
    source = EagerSource()
    probe = StepProbe(w.submit, Clock(t0=0.0), source).start()
    w.flush()
    for i in range(3):
        source.bus.emit("reader_pop", ReaderPop(1, 1, i, 1.0 + i, 0.0, 3, 8))
    source.bus.emit("reader_state", ReaderState(1, 2, 5.0, "start"))
    assert len(w._pending) == 3  # (the job's own process: written at the flush)
    probe._owner = -1  # (as seen from a forked child)
    w._owner = -1
    source.bus.emit("reader_state", ReaderState(1, 2, 6.0, "end"))
    assert len(w._pending) == 0
    w._owner = probe._owner = os.getpid()
    probe.stop()
    w.finish()


def test_a_sink_that_is_not_a_writer_gets_each_step_at_once():
    source, sink = EagerSource(), []
    probe = StepProbe(sink.append, Clock(t0=0.0), source).start()
    source.bus.emit("reader_batch", ReaderBatch(1, 1, 0, 1.0, 0.1, None, 0.0, 2, 0, 64,
                                                ((8, 3),)))
    source.bus.emit("step_end", StepEnd(0, 1.0, 1.5, 0.0, 0.0, 0.0, 0.5, 8, "cpu"))
    assert probe._writer is None and [s.queue for s in sink] == [2]
    assert probe.n_steps == 1 and probe.overhead_s > 0


def test_the_session_s_step_counter_lets_the_writer_catch_up_every_64_steps():
    calls = []
    counter = StepCounter(None, None, lambda: calls.append("keep_up"),
                          lambda: calls.append("first"))
    step = SimpleNamespace(is_startup=False)
    for _ in range(130):
        counter.count(step)
    counter.count(SimpleNamespace(is_startup=True))  # (not a training step)
    assert counter.n == 130 and calls == ["first", "keep_up", "keep_up"]


def test_the_step_counter_ends_the_job_at_its_limit():
    counter = StepCounter(3, None, lambda: None, lambda: None)
    step = SimpleNamespace(is_startup=False)
    counter.count(step), counter.count(step)
    with pytest.raises(StepLimitReached) as raised:
        counter.count(step)
    assert raised.value.args == (3, "--steps")


def test_keep_up_flushes_only_when_the_flusher_fell_two_intervals_behind(tmp_path):
    w = prof.ProfileWriter(tmp_path / "p.jsonl", flush_interval_s=3600)
    w._stop.set()  # (its own thread stops: this test flushes)
    w.submit(r.StepLimitEvent(0.1, 1, "queued"))
    w.keep_up()
    assert len(w._pending) == 1  # (the flusher is not behind)
    w._last_flush -= 3 * 3600
    w.keep_up()
    assert len(w._pending) == 0 and w.n_written == 1
    w.close()
