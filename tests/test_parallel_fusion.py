"""The BuildStrategy fusions as fused kernels, and the ParallelExecutor's static memory plan:
fuse_elewise_add_act_ops runs an fc's bias + relu (and their gradients) as one pass each,
bit for bit the unfused ops; what the kernels do not serve (another activation, a sum that is
fetched, NaN checking) runs as the ops; a one-thread ParallelExecutor's steady steps take their
temporaries from one planned arena."""

import warnings

import numpy as np
import pytest

import runtime as fluid
from runtime import memory as rmem
from runtime.errors import NanInfError, OpRuntimeError
from runtime.memory import arena
from runtime.ops import cpu_kernels

pytestmark = pytest.mark.skipif(cpu_kernels._kernels() is None,
                                reason=f"no fused CPU kernels: {cpu_kernels.REASON}")

FLAG_NAMES = ["FLAGS_static_memory_plan", "FLAGS_check_nan_inf"]


@pytest.fixture(autouse=True)
def _isolated():
    saved = fluid.get_flags(FLAG_NAMES)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "ParallelExecutor: .* BLAS threads", RuntimeWarning)
        yield
    fluid.set_flags(saved)


@pytest.fixture
def kernel_calls(monkeypatch):
    """How many times each fused bias kernel served a pair (returned a result)."""
    calls = {"bias_relu": 0, "relu_grad_bias": 0}
    for name in calls:
        real = getattr(cpu_kernels, name)

        def spy(*args, _real=real, _name=name):
            found = _real(*args)
            calls[_name] += found is not None
            return found
        monkeypatch.setattr(cpu_kernels, name, spy)
    return calls


def _build(act="relu", hidden=96, opt="momentum"):
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 3
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.data("x", [None, 40])
        y = fluid.data("y", [None, 1], dtype="int64")
        h = fluid.layers.fc(x, hidden, act=act)
        h = fluid.layers.fc(h, hidden, act=act)
        loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(
            fluid.layers.fc(h, 4), y))
        if opt == "adam":
            fluid.optimizer.Adam(0.01).minimize(loss)
        else:
            fluid.optimizer.Momentum(0.05, 0.9).minimize(loss)
    return main, startup, loss


def _data(steps, batch=48, seed=0):
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(4, 40)) * 2
    out = []
    for _ in range(steps):
        y = rng.integers(0, 4, (batch, 1))
        x = (centers[y[:, 0]] + rng.normal(size=(batch, 40))).astype(np.float32)
        out.append((x, y.astype(np.int64)))
    return out


def _compiled(places=1, threads=1, fuse=False):
    """_build()'s program, started in a scope of its own and compiled for `places` CPU places
    on `threads` executor threads: (main, loss, scope, exe, the compiled program)."""
    main, startup, loss = _build()
    scope, exe = fluid.Scope(), fluid.Executor(fluid.CPUPlace())
    exe.run(startup, scope=scope)
    bs = fluid.BuildStrategy()
    bs.fuse_elewise_add_act_ops = fuse
    es = fluid.ExecutionStrategy()
    es.num_threads = threads
    prog = fluid.CompiledProgram(main).with_data_parallel(
        loss.name, build_strategy=bs, exec_strategy=es, places=fluid.cpu_places(places))
    return main, loss, scope, exe, prog


def _train(places, steps=6, fuse=False, threads=1, act="relu", opt="momentum",
           extra_fetch=None):
    """(losses, parameters, extra fetched values); places=0: the plain Executor."""
    main, startup, loss = _build(act, opt=opt)
    scope, exe = fluid.Scope(), fluid.Executor(fluid.CPUPlace())
    exe.run(startup, scope=scope)
    prog = main
    if places:
        bs = fluid.BuildStrategy()
        bs.fuse_elewise_add_act_ops = bs.fuse_all_optimizer_ops = fuse
        es = fluid.ExecutionStrategy()
        es.num_threads = threads
        prog = fluid.CompiledProgram(main).with_data_parallel(
            loss.name, build_strategy=bs, exec_strategy=es, places=fluid.cpu_places(places))
    fetch = [loss] + ([extra_fetch(main)] if extra_fetch else [])
    losses, extra = [], []
    for x, y in _data(steps):
        got = exe.run(prog, feed={"x": x, "y": y}, fetch_list=fetch, scope=scope)
        losses.append(np.array(got[0]))
        extra.extend(np.array(v) for v in got[1:])
    params = [np.array(scope.find_var(p.name).value)
              for p in main.global_block().all_parameters()]
    return losses, params, extra


def _bitwise_equal(a, b):
    assert len(a) == len(b)
    for u, v in zip(a, b):
        assert u.shape == v.shape and np.array_equal(u, v, equal_nan=True)


@pytest.mark.parametrize("opt", ["momentum", "adam"])
def test_fused_bias_relu_trains_bit_for_bit_like_the_ops(kernel_calls, opt):
    steps = 6
    plain = _train(0, steps, opt=opt)
    unfused = _train(1, steps, opt=opt)
    assert kernel_calls == {"bias_relu": 0, "relu_grad_bias": 0}
    fused = _train(1, steps, fuse=True, opt=opt)
    assert kernel_calls == {"bias_relu": 2 * steps, "relu_grad_bias": 2 * steps}
    for run in (unfused, fused):
        _bitwise_equal(run[0], plain[0])
        _bitwise_equal(run[1], plain[1])
    assert fused[0][-1].item() < fused[0][0].item()  # it learns


def test_fused_pairs_on_two_places_match_the_unfused_ones(kernel_calls):
    unfused = _train(2, 4, threads=2)
    fused = _train(2, 4, fuse=True, threads=2)
    assert kernel_calls["bias_relu"] == 2 * 2 * 4  # two pairs, two places, four steps
    _bitwise_equal(fused[0], unfused[0])
    _bitwise_equal(fused[1], unfused[1])


def test_another_activation_runs_the_pair_as_its_ops(kernel_calls):
    unfused = _train(1, 4, act="tanh")
    fused = _train(1, 4, fuse=True, act="tanh")
    assert kernel_calls == {"bias_relu": 0, "relu_grad_bias": 0}
    _bitwise_equal(fused[0], unfused[0])
    _bitwise_equal(fused[1], unfused[1])


def _first_sum(main):
    add = next(op for op in main.global_block().ops if op.type == "elementwise_add")
    return add.output("Out")[0]


def test_a_fetched_sum_is_made_and_right(kernel_calls):
    """The fused forward never makes the sum: where the sum is fetched, that pair runs as its
    two ops (the other pair stays fused)."""
    unfused = _train(1, 3, extra_fetch=_first_sum)
    fused = _train(1, 3, fuse=True, extra_fetch=_first_sum)
    assert kernel_calls["bias_relu"] == 3  # the second layer's pair only
    assert kernel_calls["relu_grad_bias"] == 2 * 3  # the backward needs no sum
    _bitwise_equal(fused[2], unfused[2])
    _bitwise_equal(fused[1], unfused[1])
    assert (fused[2][0] < 0).any()  # the sum itself, before relu


def test_nan_checking_names_the_op_inside_a_fused_pair():
    main, loss, scope, exe, prog = _compiled(fuse=True)
    bias = next(p for p in main.global_block().all_parameters() if p.name.endswith(".b_0"))
    scope.find_var(bias.name).value[...] = np.inf
    fluid.set_flags({"FLAGS_check_nan_inf": True})
    x, y = _data(1)[0]
    with pytest.raises(NanInfError, match="elementwise_add"):
        exe.run(prog, feed={"x": x, "y": y}, fetch_list=[loss], scope=scope)


def _requests_per_step(threads, planned, steps=8):
    fluid.set_flags({"FLAGS_static_memory_plan": planned})
    main, loss, scope, exe, prog = _compiled(threads=threads)
    pool = rmem.pool_for(fluid.CPUPlace())
    batches = _data(steps)
    losses, counts = [], []
    for x, y in batches:
        before = pool.n_requests
        losses.append(np.array(exe.run(prog, feed={"x": x, "y": y}, fetch_list=[loss],
                                       scope=scope)[0]))
        counts.append(pool.n_requests - before)
    params = [np.array(scope.find_var(p.name).value)
              for p in main.global_block().all_parameters()]
    return counts, losses, params


@pytest.mark.skipif(not arena.available(), reason="compiled allocator entry points unavailable")
def test_a_one_thread_parallel_step_runs_on_a_memory_plan():
    counts, losses, params = _requests_per_step(1, True)
    pool_counts, pool_losses, pool_params = _requests_per_step(1, False)
    two_counts, two_losses, two_params = _requests_per_step(2, True)
    # the first step of the shape runs on the pool, the second is recorded, then the plan
    assert max(counts[3:]) <= 4 < min(pool_counts[3:])
    # several worker threads interleave their requests differently each step: no plan
    assert min(two_counts[3:]) > 4
    _bitwise_equal(losses, pool_losses)
    _bitwise_equal(params, pool_params)
    _bitwise_equal(two_losses, pool_losses)
    _bitwise_equal(two_params, pool_params)


def _run_with_a_failing_step(planned, fail_at=3, steps=6):
    """One-thread steps, the `fail_at`-th fed a label out of range (its op fails mid-step,
    on the memory plan when `planned`); the losses and parameters of the others."""
    fluid.set_flags({"FLAGS_static_memory_plan": planned})
    main, loss, scope, exe, prog = _compiled()
    losses = []
    for i, (x, y) in enumerate(_data(steps)):
        if i == fail_at:
            bad = y.copy()
            bad[5] = 99
            with pytest.raises(OpRuntimeError, match="softmax_with_cross_entropy"):
                exe.run(prog, feed={"x": x, "y": bad}, fetch_list=[loss], scope=scope)
        losses.append(np.array(exe.run(prog, feed={"x": x, "y": y}, fetch_list=[loss],
                                       scope=scope)[0]))
    params = [np.array(scope.find_var(p.name).value)
              for p in main.global_block().all_parameters()]
    return losses, params


@pytest.mark.skipif(not arena.available(), reason="compiled allocator entry points unavailable")
def test_a_one_thread_step_failing_on_its_plan_names_the_op_and_the_next_ones_are_right():
    planned = _run_with_a_failing_step(True)
    pool = _run_with_a_failing_step(False)
    _bitwise_equal(planned[0], pool[0])
    _bitwise_equal(planned[1], pool[1])


def _one_step_gradients(build, fuse, fetch_names, batch=2048, features=16):
    """One SGD step of `build()` (-> loss) on the plain Executor (fuse None) or a one-thread
    CompiledProgram with fuse_elewise_add_act_ops = `fuse`: the fetched values."""
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 3
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.data("x", [None, features])
        y = fluid.data("y", [None, 1], dtype="int64")
        loss = build(x, y)
        fluid.optimizer.SGD(0.1).minimize(loss)
    scope, exe = fluid.Scope(), fluid.Executor(fluid.CPUPlace())
    exe.run(startup, scope=scope)
    prog = main
    if fuse is not None:
        bs = fluid.BuildStrategy()
        bs.fuse_elewise_add_act_ops = fuse
        es = fluid.ExecutionStrategy()
        es.num_threads = 1
        prog = fluid.CompiledProgram(main).with_data_parallel(
            loss.name, build_strategy=bs, exec_strategy=es, places=fluid.cpu_places(1))
    rng = np.random.default_rng(0)
    feed = {"x": rng.normal(size=(batch, features)).astype(np.float32),
            "y": rng.integers(0, 2, (batch, 1)).astype(np.int64)}
    got = exe.run(prog, feed=feed, fetch_list=[loss.name] + fetch_names(main), scope=scope)
    params = [np.array(scope.find_var(p.name).value)
              for p in main.global_block().all_parameters()]
    return [np.array(g) for g in got] + params


def _bits(arrays):
    return [a.tobytes() for a in arrays]


def test_a_one_unit_relu_layer_keeps_numpys_pairwise_bias_gradient():
    """fc(size=1, act="relu") on 2048 rows: NumPy sums its one-column bias gradient pairwise,
    so that pair runs as its ops."""
    def build(x, y):
        h = fluid.layers.fc(x, 1, act="relu")
        return fluid.layers.mean(fluid.layers.square(h - fluid.layers.cast(y, "float32")))

    def bias_grad(main):
        return [p.name + "@GRAD" for p in main.global_block().all_parameters()
                if p.name.endswith(".b_0")]
    plain = _one_step_gradients(build, None, bias_grad)
    assert _bits(_one_step_gradients(build, True, bias_grad)) == _bits(plain)


def test_an_add_of_equal_shapes_keeps_the_gradients_negative_zeros():
    """relu(a + b) of two equal-shaped activations: elementwise_add_grad gives dOut itself as
    b's gradient, its -0 entries kept."""
    names = {}

    def build(x, y):
        a, b = fluid.layers.fc(x, 64), fluid.layers.fc(x, 64)
        names["b"] = b.name
        h = fluid.layers.relu(fluid.layers.elementwise_add(a, b))
        return fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(
            fluid.layers.fc(h, 2), y))

    def b_grad(main):
        return [names["b"] + "@GRAD"]
    plain = _one_step_gradients(build, None, b_grad, batch=32)
    fused = _one_step_gradients(build, True, b_grad, batch=32)
    assert (np.signbit(plain[1]) & (plain[1] == 0)).any()  # the case is exercised
    assert _bits(fused) == _bits(plain)


@pytest.mark.skipif(not arena.available(), reason="compiled allocator entry points unavailable")
def test_batches_split_unevenly_over_places_each_get_their_plan():
    """64 rows on 2 places is 32 + 32, 63 is 32 + 31: place 0's shapes alone would mix the
    two, and the plan would fail on every other step."""
    main, loss, scope, exe, prog = _compiled(places=2)
    pool = rmem.pool_for(fluid.CPUPlace())
    counts = []
    for rows in [64, 63] * 6:
        x, y = _data(1, batch=rows)[0]
        before = pool.n_requests
        exe.run(prog, feed={"x": x, "y": y}, fetch_list=[loss], scope=scope)
        counts.append(pool.n_requests - before)
    assert max(counts[-4:]) <= 6, counts
