"""The step and ops probes: records from the runtime's events (gap per executor, program
description, per-step op grouping, overhead bookkeeping), on fake events and on real runs."""

import numpy as np

import runtime as fluid
from paddletune.probes.base import Clock
from paddletune.probes.ops import OpsProbe
from paddletune.probes.step import StepProbe
from paddletune.profile.codec import StepCompressor, StepFiller, from_json
from paddletune.profile.records import STICKY, OpsRecord, OpTime, Program, Step
from paddletune.sources.fluid import FluidSource
from runtime import events

SOURCE = FluidSource()


def of(sink, cls):
    return [r for r in sink if isinstance(r, cls)]


def fake_step(executor, step, t_begin, t_end, startup=False, program=1):
    return events.StepRecord(executor, program, step, t_begin, t_end, 0.001, t_end - t_begin
                             - 0.002, 0.001, None if startup else 16, 5, 64, 4, ("loss",),
                             "CPUPlace", startup)


def test_gap_is_per_executor_and_none_at_first():
    sink, clock = [], Clock(t0=100.0)
    probe = StepProbe(sink.append, clock, SOURCE).start()
    events.step_end.emit(fake_step(1, 0, 100.0, 100.010))
    events.step_end.emit(fake_step(2, 0, 100.011, 100.020))
    events.step_end.emit(fake_step(1, 1, 100.030, 100.040))
    record = probe.stop()
    steps = of(sink, Step)
    assert [s.gap_s for s in steps] == [None, None, pytest_approx(0.020)]
    assert steps[0].t_s == 0.0 and steps[2].wall_s == pytest_approx(0.010)
    assert steps[0].fetch == ("loss",) and steps[0].batch_size == 16
    assert record.name == "step" and record.overhead_s > 0 and record.in_step
    assert record.details == {"steps": 3}
    events.step_end.emit(fake_step(1, 2, 100.05, 100.06))  # stopped: no longer listening
    assert len(of(sink, Step)) == 3


def test_a_step_carries_the_queue_fill_of_its_pop():
    """A DataLoader's step records say how full the queue was at the step's pop (before it);
    a speed-test peek takes nothing and is not that; steps without a pop carry nothing."""
    sink, clock = [], Clock(t0=100.0)
    probe = StepProbe(sink.append, clock, SOURCE).start()

    def pop(size, peek=False):
        events.reader_pop.emit(events.ReaderPop(7, 1, 0, 100.0, 0.0, size, 8, peek))
    pop(8)
    events.step_end.emit(fake_step(1, 0, 100.0, 100.01))
    pop(5)
    pop(3, peek=True)
    events.step_end.emit(fake_step(1, 1, 100.02, 100.03))
    events.step_end.emit(fake_step(1, 2, 100.04, 100.05))  # fed without the loader
    pop(4)
    events.step_end.emit(fake_step(1, 3, 100.06, 100.07, startup=True))
    probe.stop()
    assert [s.queue for s in of(sink, Step)] == [8, 5, None, None]


def test_real_loader_steps_carry_the_queue_and_plain_feeds_do_not():
    sink, clock = [], Clock()
    main, startup, loss = tiny_program()
    x = main.global_block().var("x")
    loader = fluid.io.DataLoader.from_generator(feed_list=[x], capacity=4)
    loader.set_batch_generator(lambda: ([np.ones((4, 3), "float32")] for _ in range(6)),
                               places=fluid.CPUPlace())
    exe = fluid.Executor(fluid.CPUPlace())
    probe = StepProbe(sink.append, clock, SOURCE).start()
    with fluid.scope_guard(fluid.Scope()):
        exe.run(startup)
        exe.run(main, feed={"x": np.ones((4, 3), "float32")}, fetch_list=[loss])
        for data in loader():
            exe.run(main, feed=data, fetch_list=[loss])
    probe.stop()
    steps = of(sink, Step)
    assert steps[0].queue is None and steps[1].queue is None  # startup, a plain feed
    fills = [s.queue for s in steps[2:]]
    assert len(fills) == 6 and all(0 <= f <= 4 for f in fills)


def ns(step):
    """A step as written: its times rounded to the nanosecond."""
    times = ("t_s", "wall_s", "feed_s", "compute_s", "fetch_s", "gap_s", "read_s",
             "compute_wait_s", "compute_queued_s")
    return step._replace(**{k: round(getattr(step, k), 9) for k in times
                            if getattr(step, k) is not None})


def pytest_approx(x):
    import pytest
    return pytest.approx(x)


def tiny_program():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [None, 3])
        loss = fluid.layers.mean(fluid.layers.fc(x, 2, act="relu"))
        fluid.optimizer.SGD(0.1).minimize(loss)
    return main, startup, loss


def test_real_runs_give_steps_programs_and_ops():
    sink, clock = [], Clock()
    main, startup, loss = tiny_program()
    exe = fluid.Executor(fluid.CPUPlace())
    probes = [StepProbe(sink.append, clock, SOURCE).start(),
              OpsProbe(sink.append, clock, SOURCE).start()]
    with fluid.scope_guard(fluid.Scope()):
        exe.run(startup)
        for _ in range(3):
            exe.run(main, feed={"x": np.ones((4, 3), "float32")}, fetch_list=[loss])
    results = [p.stop() for p in probes]
    steps = of(sink, Step)
    assert [s.startup for s in steps] == [True, False, False, False]
    assert [s.feed for s in steps] == [(), ("x",), ("x",), ("x",)]
    assert [s.batch_size for s in steps[1:]] == [4, 4, 4]
    # the training thread's time off its CPU while computing, and of it waiting for a core
    assert all(0.0 <= (s.compute_queued_s or 0.0) <= s.compute_wait_s <= s.compute_s
               for s in steps)
    # the writer leaves out a step's rarely changing fields when they did not change; the
    # loader fills them in again
    compressor, filler = StepCompressor(), StepFiller()
    written = [compressor.compress(s) for s in steps]
    assert [set(STICKY) <= set(w) for w in written] == [True, True, False, False]
    assert [filler.fill(from_json(w)) for w in written] == [ns(s) for s in steps]
    programs = of(sink, Program)
    assert {p.program for p in programs} == {main._uid, startup._uid}
    main_ops = next(p for p in programs if p.program == main._uid).ops
    assert [o.type for o in main_ops][:3] == ["mul", "elementwise_add", "relu"]
    assert main_ops[0].inputs["X"] == ("x",)
    ops = [r for r in of(sink, OpsRecord) if r.program == main._uid]
    assert [r.step for r in ops] == [0, 1, 2]
    n_ops = len(main.global_block().ops)
    assert all(len(r.ops) == n_ops for r in ops)
    assert all(op.dur_s >= 0 for r in ops for op in r.ops)
    assert results[1].details["op_types"] >= 5 and results[1].overhead_s > 0
    assert set(probes[1].snapshot()) >= {"mul", "sgd"}


def test_ops_of_a_step_cut_short_are_kept():
    sink = []
    probe = OpsProbe(sink.append, Clock(t0=0.0), SOURCE).start()
    events.op_end.emit(events.OpRecord(1, 0, 0, "mul", 0, 1.0, 1.5))
    events.op_end.emit(events.OpRecord(1, 0, 1, "log", 0, 1.5, 1.6))
    probe.stop()
    (record,) = of(sink, OpsRecord)
    assert record.ops == (OpTime(0, "mul", 1.0, 0.5), OpTime(1, "log", 1.5, pytest_approx(0.1)))


def test_step_snapshot_has_the_full_last_step():
    probe = StepProbe([].append, Clock(t0=100.0), SOURCE).start()
    assert probe.snapshot() == {"steps": 0, "last": None}
    events.step_end.emit(fake_step(1, 0, 100.0, 100.010))
    events.step_end.emit(fake_step(1, 1, 100.020, 100.030))
    snap = probe.snapshot()
    probe.stop()
    assert snap["steps"] == 2 and snap["last"].step == 1
    assert snap["last"].fetch == ("loss",) and snap["last"].place == "CPUPlace"
