"""Fluid 1.8 APIs and semantics the runtime lacked (issue 27), with Paddle's expected values:
name_scope, `a == b` as an equal op, bias_attr=True, create_parameter(initializer=),
BilinearInitializer, learning-rate decay layers, GradientClipBy*(need_clip=), Adamax,
RecomputeOptimizer, contrib.memory_usage, memory_optimize/release_memory, layers.pow /
uniform_random, py_func, StaticRNN, layers.py_reader / read_file, install_check."""

import math

import numpy as np
import pytest

import runtime as fluid
from opcheck import check_program_gradient

L = fluid.layers


@pytest.fixture(autouse=True)
def fresh_programs():
    with fluid.program_guard(fluid.Program(), fluid.Program()), fluid.scope_guard(fluid.Scope()):
        yield


def run(fetch, feed=None, program=None):
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(fluid.default_startup_program())
    return exe.run(program or fluid.default_main_program(), feed=feed or {}, fetch_list=fetch)


# --- program building ------------------------------------------------------------------------
def test_name_scope_is_recorded_on_ops():
    with fluid.name_scope("encoder"):
        with fluid.name_scope("layer"):
            y = L.fill_constant([1], "float32", 1.0) * 2.0
    op = fluid.default_main_program().global_block().ops[-1]
    assert op.attr("op_namescope") == "/encoder/layer/" and y is not None


def test_equality_of_variables_builds_an_equal_op():
    a = L.fill_constant([2], "int64", 3)
    b = L.assign(np.array([3, 4], "int64"))
    same = a == b
    assert fluid.default_main_program().global_block().ops[-1].type == "equal"
    assert run([same])[0].tolist() == [True, False]


def test_bias_attr_true_means_a_default_bias():
    x = L.data(name="x", shape=[3], dtype="float32")
    L.fc(x, size=2, bias_attr=True)
    params = [p.name for p in fluid.default_main_program().all_parameters()]
    assert any(".b_" in name for name in params)


def test_block_create_parameter_with_initializer_adds_its_init_op():
    # Paddle 1.8: the init op goes into the block the parameter is created in (here the
    # startup program's, as Paddle's own tests do)
    block = fluid.default_startup_program().global_block()
    block.create_parameter(name="w", shape=[2], dtype="float32",
                           initializer=fluid.initializer.Constant(4.0))
    assert [op.type for op in block.ops] == ["fill_constant"]
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(fluid.default_startup_program())
    assert np.array(fluid.global_scope().find_var("w").get_tensor()).tolist() == [4.0, 4.0]


def test_bilinear_initializer_gives_upsampling_weights():
    w = L.create_parameter(shape=[1, 1, 4, 4], dtype="float32",
                           default_initializer=fluid.initializer.Bilinear())
    got = run([w])[0][0, 0]
    f, c = 2.0, (2 * 2 - 1 - 2 % 2) / (2.0 * 2)  # size 4: factor 2, centre 0.75
    row = 1 - np.abs(np.arange(4) / f - c)
    np.testing.assert_allclose(got, np.outer(row, row), rtol=1e-6)


def test_pow_and_uniform_random_layers():
    x = L.assign(np.array([1.0, 2.0, 3.0], "float32"))
    y = L.pow(x, factor=2.0)
    u = L.uniform_random([1000], min=-2.0, max=3.0, seed=5)
    got_y, got_u = run([y, u])
    assert got_y.tolist() == [1.0, 4.0, 9.0]
    assert got_u.min() >= -2.0 and got_u.max() < 3.0 and got_u.std() > 1.0


def test_memory_usage_and_deprecated_memory_optimize():
    x = L.data(name="x", shape=[100], dtype="float32")
    L.fc(x, size=10)
    lower, upper, unit = fluid.contrib.memory_usage(fluid.default_main_program(), 32)
    assert 0 < lower <= upper and unit in ("B", "KB", "MB")
    assert fluid.memory_optimize(fluid.default_main_program()) is None  # no-ops in 1.8
    assert fluid.release_memory(fluid.default_main_program()) is None


# --- learning-rate decay ----------------------------------------------------------------------
@pytest.mark.parametrize("layer,kwargs,expected", [
    ("exponential_decay", dict(learning_rate=1.0, decay_steps=5, decay_rate=0.5),
     lambda s: 0.5 ** (s / 5)),
    ("natural_exp_decay", dict(learning_rate=1.0, decay_steps=5, decay_rate=0.5,
                               staircase=True), lambda s: math.exp(-0.5 * math.floor(s / 5))),
    ("inverse_time_decay", dict(learning_rate=1.0, decay_steps=5, decay_rate=0.5),
     lambda s: 1 / (1 + 0.5 * s / 5)),
    ("polynomial_decay", dict(learning_rate=1.0, decay_steps=5),
     lambda s: (1 - 1e-4) * (1 - min(s, 5) / 5) + 1e-4),
    ("piecewise_decay", dict(boundaries=[3, 6, 9], values=[0.1, 0.2, 0.3, 0.4]),
     lambda s: [0.1, 0.2, 0.3, 0.4][sum(s >= b for b in (3, 6, 9))]),
    ("cosine_decay", dict(learning_rate=0.1, step_each_epoch=3, epochs=10),
     lambda s: 0.1 * 0.5 * (math.cos(math.floor(s / 3) * math.pi / 10) + 1)),
    ("noam_decay", dict(d_model=0.01, warmup_steps=4, learning_rate=2.0),
     lambda s: 2.0 * 0.01 ** -0.5 * min((s + 1) ** -0.5, 4 ** -1.5 * (s + 1))),
])
def test_learning_rate_decay_layers(layer, kwargs, expected):
    lr = getattr(L, layer)(**kwargs)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(fluid.default_startup_program())
    for step in range(12):  # the counter starts at 0 (noam's at 1) and grows each run
        got = exe.run(fetch_list=[lr])[0][0]
        assert got == pytest.approx(expected(step), rel=1e-5), step


def test_linear_lr_warmup_then_the_wrapped_rate():
    lr = L.linear_lr_warmup(L.exponential_decay(1.0, 5, 0.5), warmup_steps=3, start_lr=0.0,
                            end_lr=0.3)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(fluid.default_startup_program())
    got = [exe.run(fetch_list=[lr])[0][0] for _ in range(5)]
    assert got == pytest.approx([0.0, 0.1, 0.2, 0.5 ** (3 / 5), 0.5 ** (4 / 5)], rel=1e-5)


# --- clipping and optimizers ------------------------------------------------------------------
def test_gradient_clip_need_clip_filters_parameters():
    block = fluid.default_main_program().global_block()
    x = block.create_parameter(name="x", shape=[2, 3], dtype="float32")
    y = block.create_parameter(name="y", shape=[2, 3], dtype="float32")
    clip = fluid.clip.GradientClipByGlobalNorm(0.2, need_clip=lambda p: p.name == "x")
    pairs = clip([(x, None), (x, y), (y, x)])
    assert len(pairs) == 2 and pairs[0][1].name != "y" and pairs[1][1].name == "x"
    by_norm = fluid.clip.GradientClipByNorm(0.2, need_clip=lambda p: p.name == "z")
    assert [g.name for _, g in by_norm([(x, None), (x, y)])] == ["y"]
    with pytest.raises(TypeError):
        fluid.clip.GradientClipByValue(1.0, need_clip="not a function")


def test_adamax_update_matches_its_formula():
    w = L.create_parameter(shape=[2], dtype="float32", name="w",
                           default_initializer=fluid.initializer.Constant(1.0))
    loss = L.reduce_sum(w * L.assign(np.array([0.5, -2.0], "float32")))
    fluid.optimizer.Adamax(learning_rate=0.1, beta1=0.9, beta2=0.999, epsilon=1e-8) \
        .minimize(loss)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(fluid.default_startup_program())
    exe.run(fetch_list=[loss])
    g = np.array([0.5, -2.0])
    m, u = 0.1 * g, np.maximum(0.0, np.abs(g) + 1e-8)  # one step from zero moments
    expected = 1.0 - 0.1 / (1 - 0.9) * m / u
    got = np.array(fluid.global_scope().find_var("w").get_tensor())
    np.testing.assert_allclose(got, expected, rtol=1e-5)


def test_recompute_gives_the_same_gradients_and_recomputes():
    def build(recompute):
        main, startup = fluid.Program(), fluid.Program()
        main.random_seed = startup.random_seed = 3
        with fluid.program_guard(main, startup), fluid.unique_name.guard():
            x = L.data(name="x", shape=[4], dtype="float32")
            h1 = L.fc(x, size=8, act="tanh")
            h2 = L.fc(h1, size=8, act="tanh")
            loss = L.mean(L.fc(h2, size=1))
            opt = fluid.optimizer.SGD(0.1)
            if recompute:
                opt = fluid.optimizer.RecomputeOptimizer(opt)
                opt._set_checkpoints([h2])
            _, pairs = opt.minimize(loss)
        return main, startup, [g for _, g in sorted(pairs, key=lambda pg: pg[0].name)]

    results, types = [], []
    for recompute in (False, True):
        main, startup, grads = build(recompute)
        exe = fluid.Executor(fluid.CPUPlace())
        with fluid.scope_guard(fluid.Scope()):
            exe.run(startup)
            results.append(exe.run(main, feed={"x": np.ones((3, 4), "float32")},
                                   fetch_list=grads))
        types.append([op.type for op in main.global_block().ops])
    for a, b in zip(*results):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    assert len(types[1]) > len(types[0])  # the first block's forward ops run again


# --- py_func, StaticRNN, py_reader --------------------------------------------------------------
def test_py_func_forward_and_backward_against_finite_differences():
    def build():
        x = L.data(name="x", shape=[3], dtype="float64")
        out = fluid.default_main_program().current_block().create_var(
            name="tanh_out", dtype="float64", shape=[-1, 3])
        L.py_func(func=lambda t: np.tanh(np.array(t)), x=x, out=out,
                  backward_func=lambda y, dy: np.array(dy) * (1 - np.square(np.array(y))),
                  skip_vars_in_backward_input=x)
        return L.reduce_sum(out * out, dim=None)

    x = np.random.default_rng(1).uniform(-1, 1, (2, 3))
    check_program_gradient(build, {"x": x}, ["x"])


def test_static_rnn_unrolls_and_its_gradient():
    w = np.random.default_rng(2).uniform(-0.5, 0.5, (2, 2))

    def build():
        x = L.data(name="x", shape=[4, 3, 2], dtype="float64", append_batch_size=False)
        boot = L.data(name="boot", shape=[3, 2], dtype="float64", append_batch_size=False)
        rnn = L.StaticRNN()
        with rnn.step():
            prev = rnn.memory(init=boot)
            step = rnn.step_input(x)
            hidden = L.tanh(L.matmul(step + prev, L.assign(w)))
            rnn.update_memory(prev, hidden)
            rnn.step_output(hidden)
        return L.reduce_sum(rnn() ** 2, dim=None)

    rng = np.random.default_rng(3)
    feed = {"x": rng.uniform(-1, 1, (4, 3, 2)), "boot": rng.uniform(-1, 1, (3, 2))}
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        loss = build()
        got = fluid.Executor(fluid.CPUPlace()).run(feed=feed, fetch_list=[loss])[0][0]
    h, total = feed["boot"], 0.0
    for t in range(4):
        h = np.tanh((feed["x"][t] + h) @ w)
        total += (h ** 2).sum()
    assert got == pytest.approx(total)
    check_program_gradient(build, feed, ["x", "boot"])


def test_py_reader_feeds_the_program_from_a_generator_and_by_hand():
    reader = L.py_reader(capacity=4, shapes=[[-1, 2], [-1, 1]], dtypes=["float32", "int64"])
    data, label = L.read_file(reader)
    total = L.reduce_sum(data) + L.cast(L.reduce_sum(label), "float32")
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(fluid.default_startup_program())

    def batches():
        for i in range(3):
            yield [np.full((2, 2), i, "float32"), np.full((2, 1), 1, "int64")]
    reader.decorate_tensor_provider(batches)
    reader.start()
    got = []
    with pytest.raises(fluid.core.EOFException):
        while True:
            got.append(float(exe.run(fetch_list=[total])[0][0]))
    reader.reset()
    assert got == [2.0, 6.0, 10.0]  # 4 i from the data, 2 from the labels
    reader.queue.push([np.ones((1, 2), "float32"), np.ones((1, 1), "int64")])
    reader.queue.close()
    assert float(exe.run(fetch_list=[total])[0][0]) == 3.0


def test_install_check_runs():
    fluid.install_check.run_check()


def test_distributions_follow_their_formulas():
    from runtime.layers.distributions import Categorical, Normal, Uniform
    loc, scale = np.array([0.5, -1.0], "float32"), np.array([2.0, 0.5], "float32")
    normal, other = Normal(loc, scale), Normal(np.zeros(2, "float32"), np.ones(2, "float32"))
    value = L.assign(np.array([1.0, 0.0], "float32"))
    uniform = Uniform(np.array([0.0], "float32"), np.array([2.0], "float32"))
    logits = np.array([[1.0, 2.0, 0.5]], "float32")
    cat = Categorical(logits)
    got = run([normal.entropy(), normal.log_prob(value), normal.kl_divergence(other),
               normal.sample([3, 2], seed=1), uniform.entropy(), cat.entropy()])
    np.testing.assert_allclose(got[0], 0.5 + 0.5 * np.log(2 * np.pi) + np.log(scale), rtol=1e-6)
    np.testing.assert_allclose(got[1], -((np.array([1.0, 0.0]) - loc) ** 2) / (2 * scale ** 2)
                               - np.log(scale) - 0.5 * np.log(2 * np.pi), rtol=1e-6)
    np.testing.assert_allclose(got[2], 0.5 * (scale ** 2 + loc ** 2 - 1 - np.log(scale ** 2)),
                               rtol=1e-6)
    assert got[3].shape == (3, 2, 2)
    np.testing.assert_allclose(got[4], [np.log(2.0)], rtol=1e-6)
    p = np.exp(logits) / np.exp(logits).sum()
    np.testing.assert_allclose(got[5], [[-(p * np.log(p)).sum()]], rtol=1e-6)


def test_execution_strategy_use_cuda_and_framework_get_var():
    es = fluid.ExecutionStrategy()
    assert es.use_cuda is True  # Fluid 1.8's default; the places passed decide the device
    es.use_cuda = False
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        x = fluid.data("x_get_var", [None, 2], "float32")
        assert fluid.framework._get_var("x_get_var") is x
    assert fluid.framework._get_var("x_get_var", main) is x
