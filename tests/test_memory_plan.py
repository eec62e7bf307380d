"""The plan's memory decisions (eager deletion, shape-only stand-ins, inplace reuse) never
change results, and reuse happens where it should."""

import numpy as np
import pytest

import runtime as fluid
from runtime.plan import ShapeOnly, exclusive


def _mlp():
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 2
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.data("x", [None, 6])
        y = fluid.data("y", [None, 1], dtype="int64")
        h = fluid.layers.fc(x, 16, act="relu")
        h = fluid.layers.fc(h, 16, act="tanh")
        logits = fluid.layers.fc(h, 3)
        loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(logits, y))
        fluid.optimizer.Momentum(0.1, 0.9).minimize(loss)
    return main, startup, loss


def _train(gc, steps=15, inplace=True):
    """Train the MLP; `inplace` runs it as a CompiledProgram with enable_inplace (a plain
    Program gets no inplace reuse, as in Paddle)."""
    fluid.set_flags({"FLAGS_eager_delete_tensor_gb": 0.0 if gc else -1.0})
    try:
        main, startup, loss = _mlp()
        exe, scope = fluid.Executor(), fluid.Scope()
        exe.run(startup, scope=scope)
        rng = np.random.default_rng(0)
        feed = {"x": rng.normal(size=(32, 6)).astype(np.float32),
                "y": rng.integers(0, 3, (32, 1))}
        bs = fluid.BuildStrategy()
        bs.enable_inplace, bs.memory_optimize = inplace, False
        runnable = fluid.CompiledProgram(main, build_strategy=bs)
        losses = [exe.run(runnable, feed=feed, fetch_list=[loss], scope=scope)[0][0]
                  for _ in range(steps)]
        plan = next(p for p in exe._plans.values() if p.program is main)
        return losses, plan
    finally:
        fluid.set_flags({"FLAGS_eager_delete_tensor_gb": 0.0})


def test_gc_and_inplace_do_not_change_training():
    with_gc, plan_on = _train(gc=True)
    without, plan_off = _train(gc=False)
    np.testing.assert_array_equal(with_gc, without)
    assert any(step.frees for step in plan_on.steps)
    assert not any(step.frees or step.shrinks for step in plan_off.steps)


def test_inplace_is_granted_for_dead_temporaries():
    _, plan = _train(gc=True, steps=2)
    granted = {step.type for step in plan.steps if step.ctx.inplace}
    assert {"relu", "tanh", "elementwise_add", "relu_grad"} <= granted


def test_shape_only_inputs_become_stand_ins():
    """elementwise_add_grad needs only X's shape: X is freed after the forward add."""
    _, plan = _train(gc=True, steps=1)
    add = next(s for s in plan.steps if s.type == "elementwise_add")
    x_slot = plan.slot_of[add.op.input("X")[0]]
    assert x_slot in add.shrinks


def test_a_value_still_needed_later_is_not_overwritten():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [None, 3])
        a = x * 1.0  # a temporary
        b = fluid.layers.relu(a)  # relu may not reuse a: the next op still reads it
        c = a * 2.0
    xv = np.array([[-1.0, 2.0, -3.0]], np.float32)
    got_b, got_c = fluid.Executor().run(main, feed={"x": xv}, fetch_list=[b, c])
    np.testing.assert_array_equal(got_b, np.maximum(xv, 0))
    np.testing.assert_array_equal(got_c, xv * 2)


def test_fetched_intermediates_keep_their_values():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [None, 3])
        pre = x + 0.0
        post = fluid.layers.relu(pre)
    xv = np.array([[-1.0, 2.0, -3.0]], np.float32)
    got_pre, got_post = fluid.Executor().run(main, feed={"x": xv}, fetch_list=[pre, post])
    np.testing.assert_array_equal(got_pre, xv)
    np.testing.assert_array_equal(got_post, np.maximum(xv, 0))
    # the user's fed array is never written into
    np.testing.assert_array_equal(xv, [[-1.0, 2.0, -3.0]])


@pytest.mark.skipif(not hasattr(fluid.layers, "reshape"), reason="needs fluid.layers.reshape")
def test_views_are_never_reused_in_place():
    """reshape returns a view of its input; an inplace relu on the view would corrupt the
    input, which a later op still reads."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [None, 4])
        a = x * 1.0
        view = fluid.layers.reshape(a, [-1, 2, 2])
        r = fluid.layers.relu(view)
        later = a * 3.0
    xv = np.array([[-1.0, 2.0, -3.0, 4.0]], np.float32)
    got_r, got_later = fluid.Executor().run(main, feed={"x": xv}, fetch_list=[r, later])
    np.testing.assert_array_equal(got_r, np.maximum(xv, 0).reshape(1, 2, 2))
    np.testing.assert_array_equal(got_later, xv * 3)


def test_exclusive_refuses_aliases_and_views():
    # results are taken outside `assert`: pytest's assertion rewriting keeps extra references
    env = [np.ones(4), None]
    alone = exclusive(env[0])
    env[1] = env[0]
    aliased = exclusive(env[0])
    env[1] = env[0][1:]
    base_of_view, view = exclusive(env[0]), exclusive(env[1])
    stand_in = exclusive(ShapeOnly((4,), np.float32))
    assert alone and not aliased and not base_of_view and not view and not stand_in


def test_a_replayed_steps_phase_peaks_are_worked_out_when_asked_for():
    """A step on its memory plan keeps the recorded phase peaks (above what the pool held at
    its start) and works its own out only when asked (the out-of-memory estimate, the memory
    record): they are the recorded step's, as the memory_step record of every step says."""
    from runtime import events
    from runtime.memory import arena
    if not arena.available():
        pytest.skip("compiled allocator entry points unavailable")
    main, startup, loss = _mlp()
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    rng = np.random.default_rng(1)
    feed = {"x": rng.normal(size=(32, 6)).astype(np.float32), "y": rng.integers(0, 3, (32, 1))}
    for _ in range(4):
        exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
    plan = next(p for p in exe._plans.values() if p.program is main)
    (shape,) = plan.memory_plans.values()
    mem = plan.memory_seen[1]
    above = shape.plan.phase_peaks_above_start
    assert mem.replay is above  # (nothing worked out yet)
    assert mem.phase_peaks == {tag: mem.allocated_at_start + bytes_above
                               for tag, bytes_above in above.items()}
    assert mem.replay is None
    records = []
    with events.subscribe("memory_step", records.append):
        exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
    (record,) = records
    assert record.phase_peaks == plan.memory_seen[1].phase_peaks == mem.phase_peaks


def test_a_steps_serving_uses_the_handler_it_is_given():
    """Serving(pool, handler): the NumPy handler the executor found for the pool once per
    flags version is the one serving the step's arrays (no look-up each step), and the one
    before it serves again after."""
    from runtime import memory
    from runtime.exec_memory import Serving
    if not memory.numpy_hook.AVAILABLE:
        pytest.skip("no NumPy allocator hook")
    pool = memory.pool_for(fluid.CPUPlace())
    handler = memory.numpy_hook.handler_for(pool, "optimizer_state")  # (a fixed tag: its own)
    mem = Serving(pool, handler)
    mem.begin()
    try:
        array = np.ones(1024)
    finally:
        mem.end()
    assert memory.numpy_hook.pooled(array)
    assert pool._live[array.__array_interface__["data"][0]].tag == "optimizer_state"
    assert not memory.numpy_hook.pooled(np.ones(1024))
