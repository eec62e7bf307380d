"""Fluid 1.8 normalisation layers: WeightNormParamAttr (Paddle's `<name>_g` / `<name>_v`
parameters and w = g * v / ||v||), instance_norm, affine_channel and inplace_abn against NumPy."""

import numpy as np
import pytest

import runtime as fluid
from runtime.param_attr import WeightNormParamAttr


def _run(build, feed):
    """Build in fresh programs, run startup then main; returns (fetched values, main)."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        fetch = build()
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    exe.run(startup, scope=scope)
    return exe.run(main, feed=feed, fetch_list=fetch, scope=scope), main


# --- weight normalisation ------------------------------------------------------------------------
@pytest.mark.parametrize("dim", [None, 0, 1])
def test_weight_norm_parameters_and_identity(dim):
    x_value = np.random.default_rng(0).uniform(-1, 1, (3, 4)).astype("float32")

    def build():
        x = fluid.data("x", [3, 4], "float32")
        attr = WeightNormParamAttr(dim=dim, name="wn",
                                   initializer=fluid.initializer.Uniform(-1.0, 1.0, seed=3))
        out = fluid.layers.fc(x, size=5, param_attr=attr, bias_attr=False)
        loss = fluid.layers.reduce_sum(out)
        fluid.backward.append_backward(loss)
        return ["wn_g", "wn_v", out, "wn_g@GRAD", "wn_v@GRAD"]

    (g, v, out, dg, dv), main = _run(build, {"x": x_value})
    params = {p.name for p in main.global_block().all_parameters()}
    assert params == {"wn_g", "wn_v"}
    expected_g_shape = {None: (1, 1), 0: (4, 1), 1: (1, 5)}[dim]
    assert g.shape == expected_g_shape and v.shape == (4, 5)
    axes = None if dim is None else tuple(a for a in range(2) if a != dim)
    norm = np.sqrt((v.astype(np.float64) ** 2).sum(axis=axes, keepdims=True))
    np.testing.assert_allclose(g, norm, rtol=1e-5)  # startup: g = ||v||, so w starts as v
    w = g * v / norm
    np.testing.assert_allclose(out, x_value @ w, rtol=1e-5, atol=1e-6)
    # d loss / d g = sum over the normalised axes of (x^T 1) * v / ||v||
    dw = x_value.T @ np.ones((3, 5))
    np.testing.assert_allclose(dg, (dw * v / norm).sum(axis=axes, keepdims=True), rtol=1e-4,
                               atol=1e-5)
    assert dv.shape == v.shape


def test_weight_norm_g_is_trainable_and_w_follows_it():
    def build():
        x = fluid.data("x", [2, 3], "float32")
        attr = WeightNormParamAttr(name="p", initializer=fluid.initializer.Constant(1.0))
        out = fluid.layers.fc(x, size=2, param_attr=attr, bias_attr=False)
        return [out, "p_g"]

    (out, g), _ = _run(build, {"x": np.ones((2, 3), "float32")})
    np.testing.assert_allclose(g, [[np.sqrt(6.0)]], rtol=1e-6)
    np.testing.assert_allclose(out, np.full((2, 2), 3.0), rtol=1e-6)  # w == v == ones


# --- instance_norm -------------------------------------------------------------------------------
def _instance_norm_np(x, scale, bias, eps):
    axes = tuple(range(2, x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    var = x.var(axis=axes, keepdims=True)
    shape = (1, -1) + (1,) * (x.ndim - 2)
    return (x - mean) / np.sqrt(var + eps) * scale.reshape(shape) + bias.reshape(shape)


def test_instance_norm_matches_numpy():
    x_value = np.random.default_rng(1).normal(2.0, 3.0, (2, 3, 4, 5)).astype("float32")

    def build():
        x = fluid.data("x", [-1, 3, 4, 5], "float32")
        y = fluid.layers.instance_norm(
            x, epsilon=1e-4, param_attr=fluid.ParamAttr(
                name="s", initializer=fluid.initializer.Constant(1.5)),
            bias_attr=fluid.ParamAttr(name="b", initializer=fluid.initializer.Constant(-0.5)))
        return [y]

    (y,), main = _run(build, {"x": x_value})
    expected = _instance_norm_np(x_value, np.full(3, 1.5), np.full(3, -0.5), 1e-4)
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-4)
    ops = [op.type for op in main.global_block().ops]
    assert ops == ["instance_norm"]


def test_instance_norm_refuses_no_bias():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = fluid.data("x", [2, 3, 4], "float32")
        with pytest.raises(ValueError):
            fluid.layers.instance_norm(x, bias_attr=False)


# --- affine_channel ------------------------------------------------------------------------------
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_affine_channel_matches_numpy(layout):
    rng = np.random.default_rng(2)
    shape = [2, 3, 4, 5] if layout == "NCHW" else [2, 4, 5, 3]
    x_value = rng.uniform(-1, 1, shape).astype("float32")
    s_value = rng.uniform(0.5, 2, 3).astype("float32")
    b_value = rng.uniform(-1, 1, 3).astype("float32")

    def build():
        x = fluid.data("x", shape, "float32")
        s = fluid.data("s", [3], "float32")
        b = fluid.data("b", [3], "float32")
        return [fluid.layers.affine_channel(x, scale=s, bias=b, data_layout=layout)]

    (out,), _ = _run(build, {"x": x_value, "s": s_value, "b": b_value})
    bshape = (1, 3, 1, 1) if layout == "NCHW" else (1, 1, 1, 3)
    np.testing.assert_allclose(out, x_value * s_value.reshape(bshape) + b_value.reshape(bshape),
                               rtol=1e-6)


# --- inplace_abn ---------------------------------------------------------------------------------
@pytest.mark.parametrize("act,alpha", [(None, 1.0), ("leaky_relu", 0.1), ("elu", 1.0)])
def test_inplace_abn_is_batch_norm_then_activation(act, alpha):
    x_value = np.random.default_rng(3).uniform(-2, 2, (4, 3, 2, 2)).astype("float64")

    def build():
        x = fluid.data("x", [4, 3, 2, 2], "float64")
        return [fluid.layers.inplace_abn(x, act=act, act_alpha=alpha)]

    (out,), _ = _run(build, {"x": x_value})
    axes = (0, 2, 3)  # batch statistics: per channel over N, H, W
    mean, var = x_value.mean(axis=axes, keepdims=True), x_value.var(axis=axes, keepdims=True)
    y = (x_value - mean) / np.sqrt(var + 1e-5)
    if act == "leaky_relu":
        y = np.where(y > 0, y, alpha * y)
    elif act == "elu":
        y = np.where(y > 0, y, alpha * (np.exp(np.minimum(y, 0)) - 1))
    np.testing.assert_allclose(out, y, rtol=1e-6, atol=1e-8)


# --- layer_norm -----------------------------------------------------------------------------------
def test_layer_norm_layer_parameters_and_values():
    x = np.random.default_rng(3).normal(2.0, 3.0, (2, 3, 4))

    def build():
        xv = fluid.data("x", [2, 3, 4], "float64")
        y = fluid.layers.layer_norm(xv, begin_norm_axis=1, epsilon=1e-5)
        z = fluid.layers.layer_norm(xv, begin_norm_axis=2, shift=False, act="relu")
        return [y, z, "layer_norm_0.w_0", "layer_norm_0.b_0"]

    (y, z, scale, bias), main = _run(build, {"x": x})
    params = [p.name for p in main.all_parameters()]
    assert params == ["layer_norm_0.w_0", "layer_norm_0.b_0", "layer_norm_1.w_0"]
    assert scale.shape == bias.shape == (12,)
    assert np.all(scale == 1.0) and np.all(bias == 0.0)
    flat = x.reshape(2, 12)
    want = (flat - flat.mean(1, keepdims=True)) / np.sqrt(flat.var(1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(y, want.reshape(x.shape), rtol=1e-10)
    rows = x.reshape(6, 4)
    want_z = (rows - rows.mean(1, keepdims=True)) / np.sqrt(rows.var(1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(z, np.maximum(want_z, 0).reshape(x.shape), rtol=1e-10)


def test_compiled_program_is_data_parallel():
    """Fluid 1.8's CompiledProgram._is_data_parallel (Paddle's test helpers read it)."""
    program = fluid.Program()
    compiled = fluid.CompiledProgram(program)
    assert compiled._is_data_parallel is False
    assert compiled.with_data_parallel()._is_data_parallel is True
