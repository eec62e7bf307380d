"""The optimizer pipeline: accumulators as persistable state, regularization, per-parameter
learning rates, gradient clipping, and every optimizer actually reducing a loss."""

import numpy as np
import pytest

import runtime as fluid

OPTIMIZERS = {
    "SGD": lambda: fluid.optimizer.SGD(0.05),
    "Momentum": lambda: fluid.optimizer.Momentum(0.05, 0.9),
    "Nesterov": lambda: fluid.optimizer.Momentum(0.05, 0.9, use_nesterov=True),
    "Adam": lambda: fluid.optimizer.Adam(0.05),
    "Adagrad": lambda: fluid.optimizer.Adagrad(0.2),
    "Adadelta": lambda: fluid.optimizer.Adadelta(1.0, epsilon=1e-2, rho=0.9),
    "RMSProp": lambda: fluid.optimizer.RMSProp(0.01),
}


def _regression(make_opt, w_attr=None, **minimize_kwargs):
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 11
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.data("x", [None, 3])
        y = fluid.data("y", [None, 1])
        pred = fluid.layers.fc(x, 1, param_attr=w_attr or "w", bias_attr="b")
        loss = fluid.layers.mean(fluid.layers.square_error_cost(pred, y))
        opt = make_opt()
        ops, pg = opt.minimize(loss, **minimize_kwargs)
    return main, startup, loss, opt, ops, pg


def _data(n=64):
    rng = np.random.default_rng(5)
    x = rng.normal(size=(n, 3)).astype(np.float32)
    y = (x @ np.array([[1.5], [-2.0], [0.5]]) + 0.3).astype(np.float32)
    return {"x": x, "y": y}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_every_optimizer_reduces_the_loss(name):
    main, startup, loss, _, _, _ = _regression(OPTIMIZERS[name])
    exe, scope, feed = fluid.Executor(), fluid.Scope(), _data()
    exe.run(startup, scope=scope)
    first = exe.run(main, feed=feed, fetch_list=[loss], scope=scope)[0][0]
    for _ in range(150):
        last = exe.run(main, feed=feed, fetch_list=[loss], scope=scope)[0][0]
    assert last < 0.1 * first, (name, first, last)


def test_accumulators_are_persistable_and_initialised_by_startup():
    main, startup, _, opt, ops, pg = _regression(lambda: fluid.optimizer.Adam(0.01))
    assert [op.type for op in ops] == ["adam", "adam"]
    assert sorted(p.name for p, _ in pg) == ["b", "w"]
    persist = {v.name for v in main.list_vars() if v.persistable}
    for acc in ("w_moment1_0", "w_moment2_0", "w_beta1_pow_acc_0", "learning_rate_0"):
        assert acc in persist
        assert startup.global_block().has_var(acc)
    scope = fluid.Scope()
    fluid.Executor().run(startup, scope=scope)
    np.testing.assert_allclose(scope.find_var("w_beta1_pow_acc_0").value, [0.9])
    assert scope.find_var("w_moment1_0").value.shape == (3, 1)


def test_adadelta_state_costs_two_parameter_copies():
    main, *_ = _regression(lambda: fluid.optimizer.Adadelta(1.0))
    state = [v for v in main.list_vars() if v.persistable and v.name.startswith("w_")]
    assert sorted(v.name for v in state) == ["w__avg_squared_grad_0", "w__avg_squared_update_0"]
    assert all(v.shape == (3, 1) for v in state)


def _one_sgd_step(w_attr=None, regularization=None, grad_clip=None):
    """(w before, the raw gradient of the loss w.r.t. w computed in NumPy, w after one step)."""
    main, startup, loss, _, _, pg = _regression(
        lambda: fluid.optimizer.SGD(0.1, regularization=regularization, grad_clip=grad_clip),
        w_attr=w_attr)
    exe, scope, feed = fluid.Executor(), fluid.Scope(), _data(8)
    exe.run(startup, scope=scope)
    w0 = scope.find_var("w").value.copy()
    b0 = scope.find_var("b").value.copy()
    residual = feed["x"] @ w0 + b0 - feed["y"]
    grad = 2.0 / len(residual) * feed["x"].T @ residual
    exe.run(main, feed=feed, scope=scope)
    return w0, grad, scope.find_var("w").value


def test_l2_regularization_adds_coeff_times_param():
    w0, g, w1 = _one_sgd_step(regularization=fluid.regularizer.L2Decay(0.5))
    np.testing.assert_allclose(w1, w0 - 0.1 * (g + 0.5 * w0), rtol=1e-5)


def test_l1_regularization_adds_coeff_times_sign():
    w0, g, w1 = _one_sgd_step(regularization=fluid.regularizer.L1Decay(0.5))
    np.testing.assert_allclose(w1, w0 - 0.1 * (g + 0.5 * np.sign(w0)), rtol=1e-5)


def test_param_attr_regularizer_and_learning_rate_win():
    attr = fluid.ParamAttr(name="w", regularizer=fluid.regularizer.L2Decay(0.0),
                           learning_rate=0.5)
    w0, g, w1 = _one_sgd_step(w_attr=attr, regularization=fluid.regularizer.L2Decay(10.0))
    np.testing.assert_allclose(w1, w0 - 0.05 * g, rtol=1e-5)


def test_clip_by_global_norm():
    clip = fluid.clip.GradientClipByGlobalNorm(clip_norm=0.01)
    main, startup, loss, _, _, pg = _regression(lambda: fluid.optimizer.SGD(1.0, grad_clip=clip))
    exe, scope, feed = fluid.Executor(), fluid.Scope(), _data(8)
    exe.run(startup, scope=scope)
    before = {p.name: scope.find_var(p.name).value.copy() for p, _ in pg}
    grads = exe.run(main, feed=feed, fetch_list=["w@GRAD", "b@GRAD"], scope=scope)
    norm = np.sqrt(sum((g.astype(np.float64) ** 2).sum() for g in grads))
    assert norm > 0.01
    for (name, g) in zip(("w", "b"), grads):
        expected = before[name] - g * 0.01 / norm
        np.testing.assert_allclose(scope.find_var(name).value, expected, rtol=1e-4)


def test_clip_by_value_via_set_gradient_clip():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [None, 3])
        y = fluid.data("y", [None, 1])
        pred = fluid.layers.fc(x, 1, param_attr="w", bias_attr="b")
        loss = fluid.layers.mean(fluid.layers.square_error_cost(pred, y))
        fluid.clip.set_gradient_clip(fluid.clip.GradientClipByValue(0.001))
        fluid.optimizer.SGD(1.0).minimize(loss)
    exe, scope, feed = fluid.Executor(), fluid.Scope(), _data(8)
    exe.run(startup, scope=scope)
    w0 = scope.find_var("w").value.copy()
    exe.run(main, feed=feed, scope=scope)
    assert np.abs(scope.find_var("w").value - w0).max() <= 0.001 + 1e-7


def test_minimize_errors_are_clear():
    with pytest.raises(TypeError, match="learning_rate"):
        fluid.optimizer.SGD("fast")
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [None, 3])
        h = fluid.layers.fc(x, 1, param_attr=fluid.ParamAttr(trainable=False), bias_attr=False)
        # Paddle 1.8 returns ([], []) here without a word (issue 27); the runtime used to
        # raise ValueError: now it warns and returns what Paddle does
        with pytest.warns(RuntimeWarning, match="no trainable parameter"):
            assert fluid.optimizer.SGD(0.1).minimize(fluid.layers.mean(h)) == ([], [])


# --- the small NumPy momentum path: NumPy scalars of the operands' types -----------------------
def _momentum_kernel(p, v, g, lr, mu, nesterov):
    from runtime.ops.registry import get_op_def
    from runtime.plan import KernelCtx
    ctx = KernelCtx(np, None, frozenset({"ParamOut", "VelocityOut"}), None, None)
    get_op_def("momentum").fn(ctx, {"Param": p, "Grad": g, "Velocity": v, "LearningRate": lr},
                              {"mu": mu, "use_nesterov": nesterov})


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("lr_dtype", [np.float32, np.float64])
@pytest.mark.parametrize("mu", [0.9, -0.0, 0.0, float("nan"), np.float64(0.9), 1])
@pytest.mark.parametrize("nesterov", [False, True])
def test_small_momentum_is_numpys_python_scalar_update_bit_for_bit(dtype, lr_dtype, mu,
                                                                   nesterov):
    rng = np.random.default_rng(3)
    p, v, g = (rng.standard_normal((3, 5)).astype(dtype) for _ in range(3))
    lr = np.array([0.037], lr_dtype)
    p_ref, v_ref = p.copy(), v.copy()
    with np.errstate(all="ignore"):
        v_ref *= mu
        v_ref += g
        p_ref -= lr * (g + mu * v_ref) if nesterov else lr * v_ref
        for _ in range(2):  # the second time from the cache of typed scalars
            p_run, v_run = p.copy(), v.copy()
            _momentum_kernel(p_run, v_run, g, lr, mu, nesterov)
            assert p_run.dtype == p.dtype and v_run.dtype == v.dtype
            assert p_run.tobytes() == p_ref.tobytes() and v_run.tobytes() == v_ref.tobytes()


def test_typed_scalars_keep_what_numpy_would_not_round_alike():
    from runtime.ops.cpu_kernels import typed
    f32 = np.dtype("float32")
    assert type(typed(0.9, f32)) is np.float32 and typed(0.9, f32) == np.float32(0.9)
    assert typed(1, f32) == 1 and type(typed(1, f32)) is np.float32
    for kept in (-0.0, 0.0, 0, 2 ** 40, 1e300, np.float64(0.9), True):
        assert typed(kept, f32) is kept
    assert np.signbit(typed(-0.0, f32))
    assert typed(0.9, np.dtype("float16")) == 0.9 and typed(0.5, np.dtype("int64")) == 0.5
