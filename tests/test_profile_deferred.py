"""Records built later: the memory probe hands a profile writer the parts of its per-step
records (Deferred: paddletune/profile/deferred.py), the step probe queues the source's step
and pop events as they are (ProfileWriter.tap), and the writer builds the records as it
flushes, in their place. The profile is record for record the one the probes' immediate
records make; a record whose building raises is the only one lost; a sealed (killed) job's
queue is built too."""

import json
import time
from types import SimpleNamespace

from paddletune import profile as prof
from paddletune.probes.base import Clock
from paddletune.probes.memory import MemoryProbe
from paddletune.probes.step import StepProbe
from paddletune.profile import records as r
from paddletune.profile.deferred import Deferred, takes_deferred
from paddletune.sources.fluid import FluidSource
from runtime import events

SOURCE = FluidSource()
HEAD = 12  # steps kept in full; the stream below runs well past them


def writer(path, warn=None):
    w = prof.ProfileWriter(path, flush_interval_s=3600, head_steps=HEAD, warn=warn)
    w.submit(prof.header_record({"argv": ["train.py"]}, {"head_steps": HEAD}, {},
                                t0_unix=1.7e9))
    return w


def records(path) -> list:
    """The profile's records as JSON objects, the probes' timed overhead left out (building
    a step at the flush is not the probe's time, so the two ways differ there, by design)."""
    return [drop_overhead(json.loads(line)) for line in path.read_text().splitlines()]


def drop_overhead(value):
    if isinstance(value, dict):
        return {k: drop_overhead(v) for k, v in value.items() if "overhead" not in k}
    if isinstance(value, list):
        return [drop_overhead(v) for v in value]
    return value


def step_event(executor, step, t_begin, wall, startup=False, program=1):
    return events.StepRecord(executor, program, step, t_begin, t_begin + wall, 0.001,
                             wall - 0.002, 0.001, None if startup else 16, 5, 64, 4, ("loss",),
                             "CPUPlace", startup, ("x",), 0.0005, 0.0002, 0.0001)


def play(writers):
    """One job's events (two executors, a startup run, a DataLoader's pops, a speed-test
    window past the head steps) into each writer, as a session sends them; flushed at uneven
    points so deferred records are built in several batches."""
    t = 100.02  # (after the first startup run)
    for i in range(80):
        if i % 3:
            events.reader_pop.emit(events.ReaderPop(7, 1, i, t, 0.0, i % 5, 8, False))
        if i in (30, 45):
            phase = "ceiling" if i == 30 else "done"
            for w in writers:
                w.submit(r.SpeedTestEvent(t - 100.0, phase, i, f"to {phase}"))
        wall = 0.004 + 0.0001 * (i % 7)
        events.step_end.emit(step_event(1, i, t, wall, startup=i == 0))
        if i % 10 == 4:
            events.step_end.emit(step_event(2, i // 10, t + wall, 0.002, program=2))
        t += wall + 0.0003
        if i in (5, 17, 31, 60):
            for w in writers:
                w.flush()
    return t


def test_deferred_steps_write_the_profile_immediate_steps_write(tmp_path):
    deferring, immediate = writer(tmp_path / "deferred.jsonl"), writer(tmp_path / "now.jsonl")
    clock = Clock(t0=100.0)
    at_once = StepProbe(lambda record: immediate.submit(record), clock, SOURCE)
    deferring_probe = StepProbe(deferring.submit, clock, SOURCE)
    at_once.start(), deferring_probe.start()
    assert deferring_probe._writer is deferring and at_once._writer is None
    deferring.flush()
    events.step_end.emit(step_event(1, 0, 100.0, 0.01, startup=True))
    assert [type(x) for x in deferring._pending] == [events.StepRecord]  # (queued as it is)
    assert deferring_probe.last is None and at_once.last is not None
    deferring.flush()
    assert deferring_probe.last == at_once.last  # built by the flush
    play([deferring, immediate])
    for probe, w in ((at_once, immediate), (deferring_probe, deferring)):
        probe.stop()
        w.finish()
    lines = records(tmp_path / "deferred.jsonl")
    assert lines == records(tmp_path / "now.jsonl")
    assert len(lines) > 100
    loaded = prof.load(tmp_path / "deferred.jsonl")
    assert loaded.summary.n_steps == 79 and loaded.windows  # (the main program's)
    assert not loaded.warnings
    assert sum(line.get("kind") == "speed_test" for line in lines) == 2
    assert deferring_probe.n_steps == at_once.n_steps == 87
    assert deferring_probe.last == at_once.last


def test_deferred_memory_steps_match_immediate_ones(tmp_path):
    deferring, immediate = writer(tmp_path / "deferred.jsonl"), writer(tmp_path / "now.jsonl")
    clock = Clock(t0=0.0)
    probes = [MemoryProbe(deferring.submit, clock),
              MemoryProbe(lambda record: immediate.submit(record), clock)]
    assert probes[0]._defer and not probes[1]._defer
    for i in range(30):
        memory = SimpleNamespace(
            executor_id=1, program_id=1, step=i, place="CPUPlace", allocated=1000 + i,
            reserved=4096, step_peak=2000 + i, phase_peaks={"forward": 1500 + i},
            peak_allocated=2000 + 3 * i, peak_reserved=4096, requests=10, system_allocs=i % 2,
            system_alloc_s=1e-5 * i, by_tag_at_peak={"x": 1}, batch_size=16)
        step = SimpleNamespace(executor_id=1, program_id=1, is_startup=False,
                               t_begin=0.01 * i, feed_bytes=64)
        for probe in probes:
            probe._on_memory(memory)
            probe._on_step(step)
    assert any(type(x) is Deferred for x in deferring._pending)
    for w in (deferring, immediate):
        w.finish()
    steps = [[line for line in records(tmp_path / name) if line.get("what") == "step"]
             for name in ("deferred.jsonl", "now.jsonl")]  # (peaks carry the clock's now)
    assert steps[0] == steps[1] and len(steps[0]) == HEAD  # (the rest: windows)


def test_a_record_whose_building_raises_is_the_only_one_lost(tmp_path):
    warnings = []
    w = writer(tmp_path / "p.jsonl", warn=warnings.append)

    def broken(n):
        raise ValueError(f"bad {n}")
    w.submit(r.StepLimitEvent(0.1, 1, "first"))
    w.submit(Deferred(broken, (1,)))
    w.submit(Deferred(r.StepLimitEvent, (0.2, 2, "built")))
    w.submit(Deferred(broken, (2,)))
    w.submit(r.StepLimitEvent(0.3, 3, "last"))
    w.finish()
    messages = [e.message for e in prof.load(tmp_path / "p.jsonl").events
                if isinstance(e, r.StepLimitEvent)]
    assert messages == ["first", "built", "last"]
    assert w.lost_records == 2 and len(warnings) == 1  # (warned once)
    assert "ValueError: bad 1" in warnings[0] and "broken" in warnings[0]


def test_seal_builds_what_is_queued(tmp_path):
    w = writer(tmp_path / "killed.jsonl")
    probe = StepProbe(w.submit, Clock(t0=100.0), SOURCE).start()
    for i in range(5):
        events.step_end.emit(step_event(1, i, 100.0 + 0.01 * i, 0.005))
    assert sum(type(x) is events.StepRecord for x in w._pending) == 5  # (queued as they are)
    assert w.seal([r.ExitEvent(0.2, 143, "terminated", 5)])  # (no flush since: all queued)
    probe.stop()
    loaded = prof.load(tmp_path / "killed.jsonl")
    assert [s.step for s in loaded.steps] == [0, 1, 2, 3, 4]
    assert loaded.steps[1].gap_s is not None


def test_only_a_writer_s_submit_takes_deferred_records(tmp_path):
    w = writer(tmp_path / "p.jsonl")
    assert takes_deferred(w.submit)
    assert not takes_deferred([].append) and not takes_deferred(lambda x: None)
    w.finish()


def test_a_record_the_accumulator_cannot_keep_is_the_only_one_lost_and_flushing_goes_on(
        tmp_path):
    warnings = []
    w = prof.ProfileWriter(tmp_path / "p.jsonl", flush_interval_s=0.02, warn=warnings.append)
    w.submit(prof.header_record({"argv": ["train.py"]}, {}, {}, t0_unix=1.7e9))
    keep = w.accumulator.add

    def add(record):  # (a probe's bug: a record the accumulator chokes on)
        if getattr(record, "message", None) == "poison":
            raise TypeError("cannot keep it")
        return keep(record)
    w.accumulator.add = add
    w.submit(r.StepLimitEvent(0.1, 1, "before"))
    w.submit(r.StepLimitEvent(0.2, 2, "poison"))
    deadline = time.monotonic() + 10
    while w._pending and time.monotonic() < deadline:  # the writer's own thread flushes
        time.sleep(0.01)
    w.submit(r.StepLimitEvent(0.3, 3, "after"))
    while w._pending and time.monotonic() < deadline:
        time.sleep(0.01)
    assert w._thread.is_alive()  # (the failed record did not stop the flusher)
    assert not w._pending, "the writer's thread stopped flushing"
    w.finish()
    messages = [e.message for e in prof.load(tmp_path / "p.jsonl").events
                if isinstance(e, r.StepLimitEvent)]
    assert messages == ["before", "after"]
    assert w.lost_records == 1 and len(warnings) == 1
    assert "StepLimitEvent" in warnings[0] and "TypeError: cannot keep it" in warnings[0]


def test_a_record_no_line_can_hold_is_the_only_one_lost_and_the_file_goes_on(tmp_path):
    warnings = []
    w = writer(tmp_path / "p.jsonl", warn=warnings.append)
    line = w._line

    def encode(record):  # (a probe's bug: a record its line cannot be made of)
        if getattr(record, "message", None) == "poison":
            raise TypeError("cannot encode it")
        return line(record)
    w._line = encode
    w.submit(r.StepLimitEvent(0.1, 1, "before"))
    w.submit(r.StepLimitEvent(0.2, 2, "poison"))
    w.submit(r.StepLimitEvent(0.3, 3, "after"))
    w.flush()
    w.submit(r.StepLimitEvent(0.4, 4, "later"))
    w.finish()
    assert not w.failed  # (the file was not given up)
    messages = [e.message for e in prof.load(tmp_path / "p.jsonl").events
                if isinstance(e, r.StepLimitEvent)]
    assert messages == ["before", "after", "later"]
    assert w.lost_records == 1 and len(warnings) == 1
    assert "StepLimitEvent" in warnings[0] and "TypeError: cannot encode it" in warnings[0]
