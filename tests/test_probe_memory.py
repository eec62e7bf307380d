"""The memory probe: records and result from fake memory events, and from a real run."""

import numpy as np

import runtime as fluid
from paddletune.probes.base import Clock
from paddletune.probes.memory import MemoryProbe
from paddletune.profile.records import (MemoryOom, MemoryPeak, MemoryPool, MemoryStep,
                                        MemoryTrace, ProbeRecord)
from paddletune.sources.fluid import FluidSource
from runtime import events

MB = 1 << 20


def mem(step, program=3, peak=8 * MB, step_peak=6 * MB, batch=4):
    return events.MemoryStepRecord(
        1, program, step, "CPUPlace", "auto_growth", 1 << 30, 2 * MB, 4 * MB, step_peak, peak,
        2 * peak, {"activations": 3 * MB, "gradients": 5 * MB}, 50, 2, 0.001,
        {"parameters": MB}, {"parameters": MB, "activations": peak - MB}, MB, 0.5, batch,
        True, False)


def step_end(step, program=3, startup=False, t_begin=10.0):
    events.step_end.emit(events.StepRecord(1, program, step, t_begin, t_begin + 0.01, 0.0,
                                           0.01, 0.0, 4, 5, 4 * 785 * 4, 0, (), "CPUPlace",
                                           startup))


def run_probe(emit):
    records = []
    probe = MemoryProbe(records.append, Clock(t0=0.0), FluidSource()).start()
    try:
        emit()
    finally:
        result = probe.stop()
    return records, result


def test_step_samples_skip_startup_and_result_has_totals():
    def emit():
        events.memory_step.emit(mem(0, program=2, peak=MB, step_peak=MB, batch=None))
        step_end(0, program=2, startup=True, t_begin=1.0)
        for i in range(3):
            events.memory_step.emit(mem(i, peak=8 * MB if i else 6 * MB))
            step_end(i, t_begin=2.0 + i)
    records, probe = run_probe(emit)
    steps = [r for r in records if isinstance(r, MemoryStep)]
    assert [(r.program, r.step, r.t_s) for r in steps] == [(3, 0, 2.0), (3, 1, 3.0),
                                                           (3, 2, 4.0)]
    assert steps[0] == MemoryStep(2.0, 3, 0, 2 * MB, 4 * MB, 6 * MB,
                                  {"activations": 3 * MB, "gradients": 5 * MB}, 50, 2, 0.001,
                                  4, 4 * 785 * 4)
    peaks = [r.peak_allocated_bytes for r in records if isinstance(r, MemoryPeak)]
    assert peaks == [MB, 6 * MB, 8 * MB]  # only when the all-time peak rose
    assert isinstance(records[-1], ProbeRecord) and records[-1].in_step
    pool = next(r for r in records if isinstance(r, MemoryPool))
    assert pool.steps == 3 and pool.startup_runs == 1
    assert pool.peak_allocated_bytes == 8 * MB and pool.peak_reserved_bytes == 16 * MB
    assert pool.capacity_bytes == 1 << 30 and pool.strategy == "auto_growth"
    assert pool.by_tag_at_peak == {"parameters": MB, "activations": 7 * MB}
    assert pool.requests == 200 and pool.system_allocs == 8
    assert abs(pool.system_alloc_s - 0.004) < 1e-12
    assert pool.gc is True and pool.inplace is False
    assert probe.overhead_s > 0 and probe.details["steps"] == 3


def test_first_trace_per_program_and_oom_details():
    trace = events.MemoryTrace(3, 1, 4, True, False, 1024,
                               [{"index": 0, "type": "mul", "before": 0, "peak": 8,
                                 "after": 4}], {"x": 0}, {0: [["y", "x"]]})

    def emit():
        events.memory_trace.emit(trace)
        events.memory_trace.emit(trace)
        events.memory_oom.emit({"requested": 10, "capacity": 100, "op_type": "mul"})
    records, probe = run_probe(emit)
    traces = [r for r in records if isinstance(r, MemoryTrace)]
    assert len(traces) == 1 and traces[0].inplace_candidates == {0: (("y", "x"),)}
    assert traces[0].persistable_bytes == 1024 and traces[0].ops[0].type == "mul"
    oom = [r for r in records if isinstance(r, MemoryOom)]
    assert oom[0].requested_bytes == 10 and oom[0].op_type == "mul"
    assert probe.details["ooms"] == 1
    assert not any(isinstance(r, MemoryPool) for r in records)  # no step: no pool state


def test_real_training_steps(tmp_path):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", shape=[16])
        y = fluid.layers.data("y", shape=[1])
        loss = fluid.layers.mean(fluid.layers.square_error_cost(fluid.layers.fc(x, 8), y))
        fluid.optimizer.SGD(0.1).minimize(loss)
    exe = fluid.Executor(fluid.CPUPlace())
    feed = {"x": np.ones((4, 16), "float32"), "y": np.ones((4, 1), "float32")}

    def emit():
        exe.run(startup)
        for _ in range(3):
            exe.run(main, feed=feed, fetch_list=[loss])
    records, probe = run_probe(emit)
    steps = [r for r in records if isinstance(r, MemoryStep)]
    assert len(steps) == 3 and all(r.batch_size == 4 for r in steps)
    assert len([r for r in records if isinstance(r, MemoryTrace)]) == 1
    pool = next(r for r in records if isinstance(r, MemoryPool))
    assert pool.steps == 3 and pool.startup_runs == 1
    assert pool.peak_allocated_bytes >= (16 * 8 + 8) * 4 and pool.capacity_bytes > 0
