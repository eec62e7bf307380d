"""The plan's compiled op runners (runtime/plan.py `runner`, used by the ParallelExecutor and by
Executor._run_plain with batched GC) and its straight-line function (`Plan.straight`, the
Executor's plain loop) do exactly what executor._run_op does: same outputs, frees, ShapeOnly
stand-ins and inplace grants, with or without the frees, and `step.fn` looked up at each
call."""

import numpy as np
import pytest

import runtime as fluid
from runtime.errors import OpRuntimeError
from runtime.executor import _run_op
from runtime.place import CPUPlace
from runtime.plan import Plan, ShapeOnly


def _model():
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 3
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.data("x", [None, 6])
        y = fluid.data("y", [None, 1], dtype="int64")
        h = fluid.layers.fc(x, 5, act="relu")
        h = fluid.layers.concat([h, x], axis=1)  # (a duplicable input: runs through _run_op)
        logits = fluid.layers.fc(h, 3)
        loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(logits, y))
        fluid.optimizer.Momentum(0.1, 0.9).minimize(loss)
    scope = fluid.Scope()
    fluid.Executor(fluid.CPUPlace()).run(startup, scope=scope)
    return main, scope, loss


def _env(plan, scope, feed):
    env = [None] * plan.n_slots
    for slot, var in plan.feed_slots:
        env[slot] = feed[var.name]
    for slot, holder in plan.bind(scope)[0]:
        env[slot] = holder.value.copy()  # (each run updates its own parameters)
    return env


def _same(a, b):
    if isinstance(a, ShapeOnly):
        return (isinstance(b, ShapeOnly) and a.shape == b.shape and a.dtype == b.dtype
                and a.lod == b.lod)
    if a is None or b is None:
        return a is b
    return type(a) is type(b) and a.shape == b.shape and np.array_equal(a, b)


@pytest.mark.parametrize("inplace", [False, True])
@pytest.mark.parametrize("free", [True, False])
def test_runners_do_what_run_op_does(free, inplace):
    main, scope, loss = _model()
    rng = np.random.default_rng(0)
    feed = {"x": rng.standard_normal((4, 6), dtype=np.float32),
            "y": rng.integers(0, 3, (4, 1)).astype(np.int64)}
    plan = Plan(main, sorted(feed), (loss.name,), np, CPUPlace(), gc=True, inplace=inplace)
    assert any(step.frees for step in plan.steps) and any(step.shrinks for step in plan.steps)
    assert not inplace or any(step.inplace for step in plan.steps)
    by_run_op, by_runner = _env(plan, scope, feed), _env(plan, scope, feed)
    granted_run_op, granted_runner = [], []
    for step in plan.steps:
        _run_op(step, by_run_op, False, free)
        granted_run_op.append(list(step.ctx.inplace))
    runs = [pair for _, ops in plan.runs(free) for pair in ops]
    assert [step for step, _ in runs] == plan.steps
    for step, run in runs:
        run(by_runner, step)
        granted_runner.append(list(step.ctx.inplace))
    assert granted_runner == granted_run_op
    assert not inplace or any(granted_runner)
    assert all(_same(a, b) for a, b in zip(by_run_op, by_runner))


@pytest.mark.parametrize("inplace", [False, True])
def test_the_straight_line_plan_does_what_run_op_does(inplace):
    main, scope, loss = _model()
    rng = np.random.default_rng(1)
    feed = {"x": rng.standard_normal((4, 6), dtype=np.float32),
            "y": rng.integers(0, 3, (4, 1)).astype(np.int64)}
    plan = Plan(main, sorted(feed), (loss.name,), np, CPUPlace(), gc=True, inplace=inplace)
    by_run_op, straight = _env(plan, scope, feed), _env(plan, scope, feed)
    granted_run_op, granted_straight = [], []
    for step in plan.steps:
        _run_op(step, by_run_op, False, True)
        granted_run_op.append(list(step.ctx.inplace))
    for step in plan.steps:
        step.ctx.inplace = ()
    plan.straight()(plan, straight, None)
    granted_straight = [list(step.ctx.inplace) for step in plan.steps]
    assert granted_straight == granted_run_op
    assert not inplace or any(granted_straight)
    assert all(_same(a, b) for a, b in zip(by_run_op, straight))


def test_a_failing_op_in_the_straight_line_plan_is_named():
    main, scope, loss = _model()
    feed = {"x": np.ones((2, 6), np.float32), "y": np.zeros((2, 1), np.int64)}
    plan = Plan(main, sorted(feed), (loss.name,), np, CPUPlace(), gc=True, inplace=True)
    mean = next(step for step in plan.steps if step.type == "mean")
    mean.fn = lambda ctx, ins, attrs: 1 / 0
    with pytest.raises(OpRuntimeError, match=r"op mean \(#\d+ in the program\).*ZeroDivision"):
        plan.straight()(plan, _env(plan, scope, feed), None)


def test_a_kernel_replaced_after_the_runners_were_made_is_the_one_called():
    main, scope, loss = _model()
    exe = fluid.Executor(fluid.CPUPlace())
    feed = {"x": np.ones((2, 6), np.float32), "y": np.zeros((2, 1), np.int64)}
    exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
    plan = [p for p in exe._plans.values() if not p.is_startup][-1]
    assert plan._straight is not None  # (made by that step)
    mean = next(step for step in plan.steps if step.type == "mean")
    mean.fn = lambda ctx, ins, attrs: {"Out": np.full(1, 7.0, np.float32)}
    value, = exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
    assert value.tolist() == [7.0]
