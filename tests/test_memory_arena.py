"""The step's static memory plan (runtime/memory/arena.py): after one recorded step per feed
shape, a steady-state step takes its temporaries from one planned arena; results stay bitwise
equal to the pool's, the memory figures stay the recorded ones, and any step that departs from
the plan (another shape, data-dependent sizes, an array kept by user code) is served by the
pool without corruption."""

import gc
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import runtime as fluid
from runtime import events
from runtime import memory as rmem
from runtime.memory import arena

pytestmark = pytest.mark.skipif(not arena.available(),
                                reason="compiled allocator entry points unavailable")

FLAG_NAMES = ["FLAGS_static_memory_plan", "FLAGS_eager_delete_tensor_gb",
              "FLAGS_cpu_memory_limit_mb"]


@pytest.fixture(autouse=True)
def restore_flags():
    saved = fluid.get_flags(FLAG_NAMES)
    try:
        yield
    finally:
        fluid.set_flags(saved)


def _pool():
    return rmem.pool_for(fluid.CPUPlace())


def _mlp(width=32, features=12):
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 5
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.data("x", [None, features])
        y = fluid.data("y", [None, 1], dtype="int64")
        h = fluid.layers.fc(x, width, act="relu")
        h = fluid.layers.fc(h, width, act="tanh")
        logits = fluid.layers.fc(h, 4)
        loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(logits, y))
        fluid.optimizer.Momentum(0.05, 0.9).minimize(loss)
    return main, startup, loss


def _batches(n, batch=16, features=12, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((batch, features)).astype(np.float32),
             rng.integers(0, 4, (batch, 1)).astype(np.int64)) for _ in range(n)]


def _train(planned, batches, build=_mlp):
    fluid.set_flags({"FLAGS_static_memory_plan": planned})
    main, startup, loss = build()
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    records, losses = [], []
    with events.subscribe("memory_step", records.append):
        for x, y in batches:
            losses.append(exe.run(main, feed={"x": x, "y": y}, fetch_list=[loss],
                                  scope=scope)[0].copy())
    params = {p.name: scope.find_var(p.name).value.copy()
              for p in main.global_block().all_parameters()}
    return losses, params, [r for r in records if r.program_id == main._uid]


def test_a_steady_step_asks_the_pool_for_its_arena_only_and_fetches_its_own_copies():
    """The fetched loss is copied out inside the step, then held by the plan like the other
    temporaries (executor._fetch_in_step): from step 2 on the pool serves the arena alone,
    and the values fetched are the unplanned steps' and plain NumPy arrays."""
    batches = _batches(6)
    plain, _, _ = _train(False, batches)
    fluid.set_flags({"FLAGS_static_memory_plan": True})
    main, startup, loss = _mlp()
    exe, scope, pool = fluid.Executor(fluid.CPUPlace()), fluid.Scope(), _pool()
    exe.run(startup, scope=scope)
    planned, requests = [], []
    for x, y in batches:
        before = pool.n_requests
        planned.append(exe.run(main, feed={"x": x, "y": y}, fetch_list=[loss],
                               scope=scope)[0])
        requests.append(pool.n_requests - before)
    for a, b in zip(plain, planned):
        assert np.array_equal(a, b)
        assert not rmem.numpy_hook.pooled(b)  # the caller's copy, not the pool's
    assert all(count == 1 for count in requests[2:]), requests


def test_planned_steps_train_bitwise_like_the_pool_and_ask_it_once():
    batches = _batches(8)
    pool = _pool()
    plain_losses, plain_params, plain = _train(False, batches)
    requests_before = pool.n_requests
    losses, params, planned = _train(True, batches)
    for a, b in zip(plain_losses, losses):
        assert np.array_equal(a, b)
    for name in plain_params:
        assert np.array_equal(plain_params[name], params[name])
    # the same requests are made and counted (and, from the recorded step on, the arena's),
    # the same peaks measured ...
    assert [r.requests for r in planned] == [r.requests + (1 if i >= 1 else 0)
                                             for i, r in enumerate(plain)]
    assert [r.step_peak for r in planned] == [r.step_peak for r in plain]
    assert [r.phase_peaks for r in planned] == [r.phase_peaks for r in plain]
    # ... but from step 2 on the pool serves only the arena and what outlives the step
    # (the startup program and steps 0 and 1 go to the pool request by request)
    assert pool.n_requests - requests_before < plain[0].requests * 3
    assert planned[-1].system_allocs == 0
    pool.check()


def _pool_requests_per_step(planned, batches):
    """How many requests the pool served in each step of a fresh MLP job."""
    fluid.set_flags({"FLAGS_static_memory_plan": planned})
    main, startup, loss = _mlp()
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    pool, counts = _pool(), []
    for x, y in batches:
        before = pool.n_requests
        exe.run(main, feed={"x": x, "y": y}, fetch_list=[loss], scope=scope)
        counts.append(pool.n_requests - before)
    return counts


def test_a_steady_planned_step_asks_the_pool_for_a_few_blocks_only():
    counts = _pool_requests_per_step(True, _batches(6))
    # steps 0 and 1 (first and recorded) go to the pool request by request; the plan then
    # leaves the arena and the few blocks that outlive a step (the fetched loss)
    assert counts[0] > 20 and counts[1] > 20
    assert all(c <= 3 for c in counts[2:]), counts


def test_the_flag_off_sends_every_request_to_the_pool():
    assert min(_pool_requests_per_step(False, _batches(5))) > 20


def test_each_feed_shape_gets_its_own_plan():
    small, large = _batches(6, batch=8), _batches(6, batch=24, seed=1)
    mixed = [b for pair in zip(small, large) for b in pair]
    plain_losses, plain_params, _ = _train(False, mixed)
    losses, params, _ = _train(True, mixed)
    for a, b in zip(plain_losses, losses):
        assert np.array_equal(a, b)
    for name in plain_params:
        assert np.array_equal(plain_params[name], params[name])
    counts = _pool_requests_per_step(True, mixed)
    assert all(c <= 3 for c in counts[4:]), counts


def _mask_sum():
    """A program whose temporaries' sizes depend on the data: sequence_mask without maxlen is
    as wide as the longest length fed."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        lengths = fluid.data("lengths", [None], dtype="int64")
        mask = fluid.layers.sequence_mask(lengths, dtype="float32")
        total = fluid.layers.reduce_sum(mask * 2.0 + 1.0)
    return main, startup, total


def test_data_dependent_sizes_leave_the_plan_and_stay_right():
    fluid.set_flags({"FLAGS_static_memory_plan": True})
    main, startup, total = _mask_sum()
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    rng = np.random.default_rng(3)
    for step in range(12):
        lengths = rng.integers(1, 40, 32).astype(np.int64)
        lengths[0] = 40 + step  # every step's widest row differs
        got = exe.run(main, feed={"lengths": lengths}, fetch_list=[total], scope=scope)[0]
        expected = 2.0 * lengths.sum() + lengths.size * lengths.max()
        assert np.allclose(got, expected, rtol=1e-6)
    (plan,) = [p for p in exe._plans.values() if not p.is_startup]
    shape_plans = plan.memory_plans
    (shape,) = shape_plans.values()
    assert shape.failures == arena.MAX_FAILURES  # given up on: the pool serves that shape
    _pool().check()


KEPT, KEEPING = [], [False]


def _keep(x):
    """py_func: keeps the array it is given (a temporary of the step) past the step, while
    KEEPING says so."""
    array = np.asarray(x)
    if KEEPING[0]:
        KEPT.append((array, array.copy()))
    return array * 1.0


def _keeping_program():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.data("x", [None, 8])
        hidden = fluid.layers.relu(x * 3.0 + 1.0)
        out = main.global_block().create_var(name="kept_out", dtype="float32",
                                             shape=[-1, 8])
        fluid.layers.py_func(_keep, hidden, out)
        total = fluid.layers.reduce_sum(fluid.layers.tanh(out * 0.5) + hidden)
    return main, startup, total


def test_a_temporary_kept_by_user_code_is_never_overwritten():
    fluid.set_flags({"FLAGS_static_memory_plan": True})
    KEPT.clear()
    main, startup, total = _keeping_program()
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    rng = np.random.default_rng(4)
    for step in range(10):
        KEEPING[0] = step == 4  # steps 0-1 run and record with nothing kept; 4 replays
        x = rng.standard_normal((16, 8)).astype(np.float32)
        got = exe.run(main, feed={"x": x}, fetch_list=[total], scope=scope)[0]
        hidden = np.maximum(x * 3.0 + 1.0, 0)
        assert np.allclose(got, (np.tanh(hidden * 0.5) + hidden).sum(), rtol=1e-5)
        if step == 4:
            (plan,) = [p for p in exe._plans.values() if not p.is_startup]
            (shape,) = plan.memory_plans.values()
            assert shape.failures == 1 and arena._RETIRED  # the arena stays with the array
    kept, copy = KEPT[0]
    assert np.array_equal(kept, copy)  # later steps did not write into its bytes
    del kept, copy
    KEPT.clear()
    gc.collect()
    exe.run(main, feed={"x": rng.standard_normal((16, 8)).astype(np.float32)},
            fetch_list=[total], scope=scope)
    assert not arena._RETIRED  # the arena it kept went back once it died
    _pool().check()


def test_a_failing_step_on_the_plan_leaves_the_next_ones_right():
    fluid.set_flags({"FLAGS_static_memory_plan": True})
    main, startup, loss = _mlp()
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    batches = _batches(6)
    for x, y in batches[:4]:
        exe.run(main, feed={"x": x, "y": y}, fetch_list=[loss], scope=scope)
    bad_labels = np.full((16, 1), 99, np.int64)  # out of range: the loss op raises
    with pytest.raises(Exception):
        exe.run(main, feed={"x": batches[4][0], "y": bad_labels}, fetch_list=[loss],
                scope=scope)
    value = exe.run(main, feed={"x": batches[5][0], "y": batches[5][1]}, fetch_list=[loss],
                    scope=scope)[0]
    assert np.isfinite(value).all()
    _pool().check()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 5000), st.integers(0, 40), st.integers(1, 20)),
                min_size=1, max_size=40))
def test_packed_blocks_never_share_bytes_while_both_live(blocks):
    sizes = [(s + 63) // 64 * 64 for s, _, _ in blocks]
    starts = [start for _, start, _ in blocks]
    ends = [start + life for _, start, life in blocks]
    offsets, span = arena.pack(sizes, starts, ends)
    for i in range(len(sizes)):
        assert offsets[i] % 64 == 0 and offsets[i] + sizes[i] <= span
        for j in range(i):
            in_time = starts[i] < ends[j] and starts[j] < ends[i]
            in_memory = (offsets[i] < offsets[j] + sizes[j]
                         and offsets[j] < offsets[i] + sizes[i])
            assert not (in_time and in_memory)
    # never worse than giving every block bytes of its own
    assert span <= sum(sizes)
    live_peak = max(sum(sizes[i] for i in range(len(sizes)) if starts[i] <= t < ends[i])
                    for t in range(0, 61))
    assert span >= live_peak


def test_a_step_with_a_few_temporaries_stays_on_the_pool():
    fluid.set_flags({"FLAGS_static_memory_plan": True})
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [None, 4])
        doubled = fluid.layers.scale(x, 2.0)
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    for _ in range(4):
        exe.run(main, feed={"x": np.ones((2, 4), np.float32)}, fetch_list=[doubled],
                scope=scope)
    (plan,) = [p for p in exe._plans.values() if not p.is_startup]
    (shape,) = plan.memory_plans.values()
    assert shape.plan is None and shape.not_worth_it  # an arena would cost more than it saves


def test_jobs_in_two_threads_share_the_plan_machinery_safely():
    """Two executors stepping in two threads, switching inside each other's steps: one
    records or replays at a time (arena._IN_USE), the other runs on the pool, and both train
    bitwise as the pool alone does (a smoke test: the interleavings that would corrupt memory
    without the guard are too rare to be forced here)."""
    import threading
    batches = _batches(12)
    expected = _train(False, batches)
    fluid.set_flags({"FLAGS_static_memory_plan": True})
    jobs = []
    for _ in range(2):  # built here: building programs is not thread-safe (Fluid's globals)
        main, startup, loss = _mlp()
        exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
        exe.run(startup, scope=scope)
        jobs.append((main, loss, exe, scope))
    results, errors = [[], []], []

    def job(k):
        main, loss, exe, scope = jobs[k]
        try:
            for x, y in batches:
                results[k].append(exe.run(main, feed={"x": x, "y": y}, fetch_list=[loss],
                                          scope=scope)[0].copy())
        except Exception as err:  # noqa: B902 (reported by the test below)
            errors.append(err)

    threads = [threading.Thread(target=job, args=(k,)) for k in range(2)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # the threads switch inside each other's steps
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
    finally:
        sys.setswitchinterval(interval)
    assert not errors
    for (main, _, _, scope), losses in zip(jobs, results):
        for a, b in zip(expected[0], losses):
            assert np.array_equal(a, b)
        for p in main.global_block().all_parameters():
            assert np.array_equal(expected[1][p.name], scope.find_var(p.name).value)
    _pool().check()


def test_a_replayed_step_ends_its_arena_before_another_step_may_claim_the_plan(monkeypatch):
    """The C side has one arena: a step that let go of the claim (arena._IN_USE) before ending
    its arena could see another thread's step begin its own in between, and then end that
    one. So the arena ends while the step still holds the claim."""
    from runtime.memory import native
    functions = native.arena_functions()
    claimed_at_end = []

    class Watched:
        def __getattr__(self, name):
            return getattr(functions, name)

        def pt_arena_finish(self, expected):
            claimed_at_end.append(arena._IN_USE[0] is not None)
            return functions.pt_arena_finish(expected)

    monkeypatch.setattr(native, "arena_functions", lambda: Watched())
    _train(True, _batches(5))
    assert claimed_at_end and all(claimed_at_end), claimed_at_end


def test_no_arena_starts_without_room_to_record_what_outlives_it(monkeypatch):
    """With the C side's table of retired arenas full, a step runs on the pool: an arena whose
    blocks outlived the step could not be recorded, and one of them, freed later, would hand
    the whole arena back to the pool while the others still live."""
    functions = arena.native.arena_functions()
    monkeypatch.setattr(arena.native, "arena_functions",
                        lambda: _NoRoom(functions))
    counts = _pool_requests_per_step(True, _batches(5))
    assert min(counts) > 20  # every step on the pool


class _NoRoom:
    def __init__(self, functions):
        self._functions = functions

    def pt_arena_room(self):
        return 0

    def __getattr__(self, name):
        return getattr(self._functions, name)
