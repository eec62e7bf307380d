"""The plan's compiled op runners (runtime/plan.py `runner`, used by the ParallelExecutor and by
Executor._run_plain with batched GC), its straight-line function (`Plan.straight`) and its
specialised steps (`Plan.trace`/`Plan.special`, the Executor's plain loop) do exactly what
executor._run_op does: same outputs, frees, ShapeOnly stand-ins and inplace grants, with or
without the frees, and a replaced `step.fn` is the one called."""

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
    assert plan._straight is not None or plan._special is not None  # (made by that step)
    mean = next(step for step in plan.steps if step.type == "mean")
    mean.fn = lambda ctx, ins, attrs: {"Out": np.full(1, 7.0, np.float32)}
    value, = exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
    assert value.tolist() == [7.0]


def _mlp(sizes, nesterov=False):
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 5
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.data("x", [None, sizes[0]])
        y = fluid.data("y", [None, 1], dtype="int64")
        h = x
        for width in sizes[1:-1]:
            h = fluid.layers.fc(h, width, act="relu")
        logits = fluid.layers.fc(h, sizes[-1])
        loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(logits, y))
        fluid.optimizer.Momentum(0.05, 0.9, use_nesterov=nesterov).minimize(loss)
    scope = fluid.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup, scope=scope)
    return main, scope, loss, exe


def _train(sizes, specialise, batches, nesterov=False, between=None):
    """Losses and final persistables of steps over `batches` ((x, y) pairs), the plan's
    specialised steps on or off (from the first step: it is the one traced)."""
    main, scope, loss, exe = _mlp(sizes, nesterov)
    losses = []
    for k, (x, y) in enumerate(batches):
        if between is not None:
            between(k, scope)
        losses.append(exe.run(main, feed={"x": x, "y": y}, fetch_list=[loss], scope=scope)[0])
        if k == 0 and not specialise:
            for plan in exe._plans.values():
                plan.specializable = False
    plan = [p for p in exe._plans.values() if not p.is_startup][-1]
    state = {n: scope.find_var(n).value.copy() for n in plan.reads}
    return losses, state, plan


def _batches(sizes, rows, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((n, sizes[0]), dtype=np.float32),
             rng.integers(0, sizes[-1], (n, 1)).astype(np.int64)) for n in rows]


def _bitwise(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("nesterov", [False, True])
@pytest.mark.parametrize("sizes", [(6, 5, 3), (40, 30, 4)])  # (40 x 30: momentum's C loop)
def test_the_specialised_step_gives_the_kernels_results_bit_for_bit(sizes, nesterov):
    batches = _batches(sizes, [4] * 6)
    special_losses, special_state, plan = _train(sizes, True, batches, nesterov)
    losses, state, generic = _train(sizes, False, batches, nesterov)
    assert plan._special is not None and plan.traces == 1 and generic.traces == 1
    assert "{k_run}" not in plan._special.run.source  # (the lines were put in)
    assert all(f"# {step.type}\n" in plan._special.run.source for step in plan.steps)
    assert all(_bitwise(a, b) for a, b in zip(special_losses, losses))
    assert special_state.keys() == state.keys()
    assert all(_bitwise(special_state[n], state[n]) for n in state)


def test_every_op_of_an_mlp_is_specialised():
    main, scope, loss, exe = _mlp((6, 5, 3))
    x, y = _batches((6, 5, 3), [4])[0]
    exe.run(main, feed={"x": x, "y": y}, fetch_list=[loss], scope=scope)
    plan = [p for p in exe._plans.values() if not p.is_startup][-1]
    source = plan._special.run.source
    assert "op.fn(" not in source and "run_op(" not in source


def test_a_new_feed_shape_is_specialised_and_the_old_one_kept():
    sizes = (6, 5, 3)
    batches = _batches(sizes, [4, 4, 3, 3, 4, 3, 4])
    special_losses, special_state, plan = _train(sizes, True, batches)
    losses, state, _ = _train(sizes, False, batches)
    assert plan.traces == 2 and len(plan._specials) == 2
    assert all(_bitwise(a, b) for a, b in zip(special_losses, losses))
    assert all(_bitwise(special_state[n], state[n]) for n in state)


def test_a_persistable_replaced_in_the_scope_is_read_by_the_specialised_step():
    sizes = (6, 5, 3)
    batches = _batches(sizes, [4] * 5)

    def replace(k, scope):  # a new array of the same shape and dtype, another of another dtype
        if k in (2, 3):
            holder = scope.find_var("fc_0.w_0")
            holder.value = (holder.value * 0.5).astype(np.float32 if k == 2 else np.float64)

    special_losses, special_state, plan = _train(sizes, True, batches, between=replace)
    losses, state, _ = _train(sizes, False, batches, between=replace)
    assert plan.traces == 2  # (the float64 weight's step made another)
    assert all(_bitwise(a, b) for a, b in zip(special_losses, losses))
    assert all(_bitwise(special_state[n], state[n]) for n in state)


def test_the_specialised_step_names_a_failing_op():
    main, scope, loss, exe = _mlp((6, 5, 3))
    feed = {"x": np.ones((2, 6), np.float32), "y": np.zeros((2, 1), np.int64)}
    exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
    feed["y"] = np.full((2, 1), 7, np.int64)  # (a label out of range: the kernel's check)
    with pytest.raises(OpRuntimeError, match=r"op softmax_with_cross_entropy \(#\d+"):
        exe.run(main, feed=feed, fetch_list=[loss], scope=scope)


def test_steps_run_op_by_op_between_specialised_ones_keep_the_memory_plan():
    """The specialised step makes the kernels' allocations in their order: steps timed op by
    op (an op_end subscriber: the kernels themselves run) between specialised ones replay the
    same memory plan, which never fails."""
    from runtime import events
    main, scope, loss, exe = _mlp((6, 5, 3))
    batches = _batches((6, 5, 3), [4] * 12)
    for k, (x, y) in enumerate(batches):
        if k % 2:
            with events.subscribe("op_end", lambda record: None):
                exe.run(main, feed={"x": x, "y": y}, fetch_list=[loss], scope=scope)
        else:
            exe.run(main, feed={"x": x, "y": y}, fetch_list=[loss], scope=scope)
    plan = [p for p in exe._plans.values() if not p.is_startup][-1]
    shapes = list(plan.memory_plans.values())
    assert plan._special is not None and len(shapes) == 1
    assert shapes[0].plan is not None and shapes[0].failures == 0


def test_the_executor_takes_the_last_steps_plan_only_for_the_same_step():
    """Executor._plan's shortcut (the last step's plan): another fetch list, feed, GC setting
    or a changed program each get their own plan."""
    main, scope, loss, exe = _mlp((6, 5, 3))
    x, y = _batches((6, 5, 3), [4])[0]
    feed = {"x": x, "y": y}
    plans = []

    def step(fetch, **kw):
        counts = dict(exe._steps)
        exe.run(main, feed=dict(feed, **kw), fetch_list=fetch, scope=scope)
        ran = [p for p, n in exe._steps.items() if counts.get(p, 0) != n]  # (the one counted)
        assert len(ran) == 1
        plans.append(ran[0])

    step([loss])
    step([loss])
    assert plans[1] is plans[0]
    step([loss, "fc_0.w_0"])
    assert plans[2] is not plans[0] and plans[2].fetch_names == (loss.name, "fc_0.w_0")
    step([loss], **{"fc_0.b_0": np.zeros(5, np.float32)})  # (a fed persistable)
    assert plans[3] is not plans[0] and len(plans[3].feed_slots) == 3
    fluid.set_flags({"FLAGS_eager_delete_tensor_gb": -1.0})
    try:
        step([loss])
        assert plans[4] is not plans[0] and not plans[4].gc
    finally:
        fluid.set_flags({"FLAGS_eager_delete_tensor_gb": 0.0})
    step([loss])
    assert plans[5] is plans[0]
    with fluid.program_guard(main):
        fluid.layers.scale(loss, 2.0)  # (the program changes: its version)
    step([loss])
    assert plans[6] is not plans[0] and plans[6].program is main


def test_a_specialised_step_retags_nothing_only_where_its_ops_update_the_state_in_place():
    """Plan._writes_in_place: Momentum's specialised lines update the parameters and velocities
    in place (the pool's tags stay right without retag_writes); an op left to its kernel that
    writes a persistable (Adam's) keeps the retagging."""
    from runtime import memory
    main, scope, loss, exe = _mlp((6, 5, 3))
    for x, y in _batches((6, 5, 3), [4] * 3):
        exe.run(main, feed={"x": x, "y": y}, fetch_list=[loss], scope=scope)
    plan = [p for p in exe._plans.values() if not p.is_startup][-1]
    assert plan._special.writes_in_place
    seen = plan.memory_seen  # (the out-of-memory estimate's last step: kept up all the same)
    exe.run(main, feed={"x": x, "y": y}, fetch_list=[loss], scope=scope)
    assert plan.memory_seen is not seen and plan.memory_seen[0] == 4
    pool = memory.pool_for(fluid.CPUPlace())
    for name in plan.writes:
        value = scope.find_var(name).value
        assert pool.owns(value.__array_interface__["data"][0])
    main2, startup2 = fluid.Program(), fluid.Program()
    with fluid.program_guard(main2, startup2), fluid.unique_name.guard():
        x = fluid.data("x", [None, 6])
        loss2 = fluid.layers.mean(fluid.layers.fc(x, 2))
        fluid.optimizer.Adam(0.01).minimize(loss2)
    scope2 = fluid.Scope()
    exe.run(startup2, scope=scope2)
    exe.run(main2, feed={"x": np.ones((2, 6), np.float32)}, fetch_list=[loss2], scope=scope2)
    plan2 = [p for p in exe._plans.values() if p.program is main2][-1]
    assert plan2._special is not None and not plan2._special.writes_in_place


def test_a_fed_value_that_is_not_a_plain_array_still_runs_every_op():
    """A LoDTensor with a LoD fed to a program without LoD variables reaches the step as an
    array of another type: the specialised step checks that type (the ops reading the value
    keep their kernels) and runs, step after step, as the op-by-op step does."""
    sizes = (6, 5, 3)

    def lod_batches():
        for x, y in _batches(sizes, [4] * 4):
            t = fluid.LoDTensor()
            t.set(x, fluid.CPUPlace())
            t.set_recursive_sequence_lengths([[2, 2]])
            yield t, y

    special_losses, special_state, plan = _train(sizes, True, list(lod_batches()))
    losses, state, _ = _train(sizes, False, list(lod_batches()))
    assert plan._special is not None and plan.traces == 1
    assert len({float(np.asarray(v).ravel()[0]) for v in special_losses}) > 1
    assert all(_bitwise(np.asarray(a), np.asarray(b)) for a, b in zip(special_losses, losses))
    assert all(_bitwise(special_state[n], state[n]) for n in state)


def test_the_scope_io_loads_and_stores_the_plans_persistables_in_order():
    """Plan.scope_io: `load` puts each read variable's value in its slot and names the first
    variable without one (the executor's uninitialised-variable error); `store` writes each
    written slot back and counts the write; both as plan.bind lists them."""
    main, scope, loss = _model()
    plan = Plan(main, ["x", "y"], (loss.name,), np, CPUPlace())
    io = plan.scope_io(scope)
    assert plan.bind(scope) == (io.reads, io.writes) and plan.scope_io(scope) is io
    env = [None] * plan.n_slots
    assert io.load(env) is None
    for slot, holder in io.reads:
        assert env[slot] is holder.value
    writes = {holder.name: holder.writes for _, holder in io.writes}
    for slot, holder in io.writes:
        env[slot] = np.full(2, slot)
    assert io.store(env) is None
    for slot, holder in io.writes:
        assert np.array_equal(holder.value, np.full(2, slot))
        assert holder.writes == writes[holder.name] + 1
    missing = io.reads[1][1]
    missing.value = None
    env = [None] * plan.n_slots
    assert io.load(env) is missing
    assert env[io.reads[0][0]] is io.reads[0][1].value and env[io.reads[1][0]] is None


def test_a_scopes_values_die_with_it_once_its_steps_are_done():
    """A plan's loading and storing code holds the scope's variables without a reference
    cycle: once the scope and the executor are gone, the parameters' arrays are freed at
    once, not at the cyclic collector's next pass (they are the memory pool's blocks)."""
    import gc
    import weakref
    main, scope, loss = _model()
    exe = fluid.Executor(fluid.CPUPlace())
    rng = np.random.default_rng(0)
    feed = {"x": rng.standard_normal((4, 6), dtype=np.float32),
            "y": rng.integers(0, 3, (4, 1)).astype(np.int64)}
    for _ in range(3):
        exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
    name = main.global_block().all_parameters()[0].name
    value = weakref.ref(scope.find_var(name).value)
    gc.disable()
    try:
        del exe, scope
        assert value() is None
    finally:
        gc.enable()


def test_a_specialised_step_a_plan_lets_go_is_freed_at_once():
    """A plan keeps the specialised steps of MAX_SPECIALS input signatures; the oldest one it
    lets go is freed at once, with its constants, not at the cyclic collector's next pass:
    its generated functions' globals hold its KnownReads, not the Specialized itself."""
    import gc
    import weakref
    from runtime.plan import MAX_SPECIALS, Specialized
    main, scope, loss = _model()
    exe = fluid.Executor(fluid.CPUPlace())
    rng = np.random.default_rng(0)

    def steps(batch):
        feed = {"x": rng.standard_normal((batch, 6), dtype=np.float32),
                "y": rng.integers(0, 3, (batch, 1)).astype(np.int64)}
        for _ in range(3):  # traced, then specialised
            exe.run(main, feed=feed, fetch_list=[loss], scope=scope)

    steps(2)
    made = [obj for obj in gc.get_objects() if isinstance(obj, Specialized)]
    assert len(made) == 1
    first = weakref.ref(made[0])
    del made
    gc.disable()
    try:
        for batch in range(3, 3 + MAX_SPECIALS):  # the first signature is let go
            steps(batch)
        assert first() is None
    finally:
        gc.enable()
