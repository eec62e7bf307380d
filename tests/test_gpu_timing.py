"""GPU timing (runtime/gpu_timing.py) on a fake CuPy that runs the kernels with NumPy: one stream
synchronisation per step, before compute_s ends; per-op CUDA events read once per step, never a
sync per op; the records' `timing`; the ops probe's record of it; the CPU path untouched."""

import time

import numpy as np
import pytest

import runtime as fluid
from paddletune.probes.base import Clock
from paddletune.profile.codec import to_json
from paddletune.profile.records import OpsRecord
from paddletune.sources.fluid import FluidSource
from paddletune.probes.ops import OpsProbe
from runtime import events

import fakecupy
from fakecupy import restore_gpu_flags  # noqa: F401  (autouse: the flags back after each test)

TICK_MS = 0.25  # the fake device clock's advance per recorded event


@pytest.fixture
def fake(monkeypatch):
    cupy = fakecupy.FakeCupy(numpy_kernels=True, event_tick_ms=TICK_MS)
    fakecupy.inject(monkeypatch, cupy)
    return cupy


def _trainer(place):
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 1
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.data("x", [None, 4])
        y = fluid.data("y", [None, 1])
        loss = fluid.layers.mean(fluid.layers.square(fluid.layers.fc(x, 1) - y))
        fluid.optimizer.SGD(0.1).minimize(loss)
    exe, scope = fluid.Executor(place), fluid.Scope()
    exe.run(startup, scope=scope)
    feed = {"x": np.ones((8, 4), "float32"), "y": np.zeros((8, 1), "float32")}
    return lambda: exe.run(main, feed=feed, fetch_list=[loss], scope=scope), main, exe


def test_a_gpu_step_synchronises_its_stream_exactly_once_without_the_op_probe(fake):
    step, _main, _exe = _trainer(fluid.CUDAPlace(0))
    before = len(fake.stream_syncs)
    losses = [float(step()[0][0]) for _ in range(5)]
    assert len(fake.stream_syncs) - before == 5 and set(fake.stream_syncs) == {0}
    assert fake.events_recorded == 0 and fake.event_syncs == 0 and fake.elapsed_reads == 0
    assert losses[-1] < losses[0]  # the fake really trains (NumPy kernels)


def test_the_sync_comes_before_compute_ends_so_step_time_includes_the_device(fake, monkeypatch):
    step, _main, _exe = _trainer(fluid.CUDAPlace(0))
    wait_s = 0.03
    del fake.stream_syncs[:]  # the startup run's

    def slow_sync(stream):  # the device still busy when the ops were launched
        time.sleep(wait_s)
        fake.stream_syncs.append(stream.device_id)
    monkeypatch.setattr(fakecupy.FakeStream, "synchronize", slow_sync)
    seen = []

    def on_step(record):
        seen.append((record, len(fake.stream_syncs)))
    with events.subscribe("step_end", on_step):
        step()
    (record, syncs), = seen
    assert syncs == 1 and record.compute_s >= wait_s and record.wall_s >= wait_s
    assert record.fetch_s < wait_s  # the fetch copies after the wait, it does not absorb it


def test_op_times_come_from_cuda_events_resolved_once_per_step(fake):
    step, main, exe = _trainer(fluid.CUDAPlace(0))
    n_ops = len(main.global_block().ops)
    order = []
    with events.subscribe("op_end", order.append), \
            events.subscribe("step_end", lambda r: order.append("end")):
        syncs = len(fake.stream_syncs)
        for _ in range(3):
            step()
    assert len(fake.stream_syncs) - syncs == 3  # still one stream sync per step ...
    assert fake.event_syncs == 3  # ... plus one wait for the last event: none per op
    assert fake.events_recorded == 3 * (n_ops + 1)  # after each op, one anchor before all
    assert fake.elapsed_reads == 3 * n_ops  # each op's duration; begins add them up
    assert len(exe._events) == n_ops + 1  # events are reused from step to step
    assert [o == "end" for o in order] == ([False] * n_ops + [True]) * 3
    ops = [o for o in order if o != "end"]
    assert {o.timing for o in ops} == {"cuda_event"}
    assert [o.index for o in ops[:n_ops]] == list(range(n_ops))
    assert all(o.dur_s == pytest.approx(TICK_MS * 1e-3) for o in ops)
    begins = [o.t_begin for o in ops[:n_ops]]
    assert begins == sorted(begins) and begins[1] - begins[0] == pytest.approx(TICK_MS * 1e-3)
    assert all(a.t_end == pytest.approx(b.t_begin) for a, b in zip(ops, ops[1:n_ops]))


def test_the_cpu_path_records_host_timing_and_touches_no_cuda(fake):
    step, main, _exe = _trainer(fluid.CPUPlace())
    with events.subscribe("op_end", (ops := []).append):
        step()
    assert len(ops) == len(main.global_block().ops) and {o.timing for o in ops} == {"host"}
    assert fake.stream_syncs == [] and fake.events_recorded == 0


def test_the_ops_probe_records_how_op_times_were_taken(fake):
    step, _main, _exe = _trainer(fluid.CUDAPlace(0))
    sink = []
    probe = OpsProbe(sink.append, Clock(), FluidSource()).start()
    step()
    record = probe.stop()
    (ops,) = [r for r in sink if isinstance(r, OpsRecord)]
    assert ops.timing == "cuda_event" and record.details["timing"] == "cuda_event"
    assert all(op.dur_s == pytest.approx(TICK_MS * 1e-3) for op in ops.ops)


def test_cpu_ops_records_stay_as_they_were():
    sink = []
    probe = OpsProbe(sink.append, Clock(t0=0.0), FluidSource()).start()
    events.op_end.emit(events.OpRecord(1, 0, 0, "mul", 0, 1.0, 1.5))
    record = probe.stop()
    (ops,) = [r for r in sink if isinstance(r, OpsRecord)]
    assert ops.timing == "host" and "timing" not in to_json(ops)
    assert record.details["timing"] == "host"


def test_a_failing_gpu_step_keeps_the_times_of_the_ops_that_ran(fake):
    step, main, exe = _trainer(fluid.CUDAPlace(0))
    step()
    (plan,) = [p for p in exe._plans.values() if p.program is main]
    failing = next(s for s in plan.steps if s.type == "mean")

    def broken(ctx, ins, attrs):
        raise RuntimeError("kernel launch failed")
    failing.fn = broken
    with events.subscribe("op_end", (ops := []).append), pytest.raises(Exception, match="mean"):
        step()
    assert [o.index for o in ops] == list(range(failing.index))
    assert {o.timing for o in ops} == {"cuda_event"}
