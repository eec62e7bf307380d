"""The fused CPU kernels (runtime/ops/cpu_kernels.py) give NumPy's results bit for bit and
leave to NumPy what they do not serve."""

import numpy as np
import pytest

import runtime as fluid
from runtime.ops import cpu_kernels

pytestmark = pytest.mark.skipif(cpu_kernels._kernels() is None,
                                reason=f"no fused CPU kernels: {cpu_kernels.REASON}")


def _arrays(n, dtype, count, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(n).astype(dtype) for _ in range(count)]


SIZES = [cpu_kernels.SMALL, 5000, 65613, 3 * 65536]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("nesterov", [False, True])
def test_momentum_is_numpys_bit_for_bit(dtype, n, nesterov):
    p, v, g = _arrays(n, dtype, 3)
    lr, mu = np.array([0.037], dtype), 0.9
    p_ref, v_ref = p.copy(), v.copy()
    v_ref *= mu
    v_ref += g
    if nesterov:
        p_ref -= lr * (g + mu * v_ref)
    else:
        p_ref -= lr * v_ref
    assert cpu_kernels.momentum(p, v, g, lr, mu, nesterov)
    assert np.array_equal(p, p_ref) and np.array_equal(v, v_ref)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", SIZES)
def test_sgd_is_numpys_bit_for_bit(dtype, n):
    p, g = _arrays(n, dtype, 2, seed=1)
    lr = np.array([0.25], dtype)
    p_ref = p - lr * g
    assert cpu_kernels.sgd(p, g, lr)
    assert np.array_equal(p, p_ref)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("into", ["new", "other", "dout"])
def test_relu_grad_is_numpys_bit_for_bit_also_in_place(dtype, n, into):
    out, dout = _arrays(n, dtype, 2, seed=2)
    out[::7] = 0.0  # relu's zeros: their gradient is 0 (or -0 for a negative dout, as NumPy)
    dout[::5] = np.nan
    expected = np.multiply(dout, out > 0)
    buf = {"new": None, "other": np.empty_like(dout), "dout": dout}[into]
    got = cpu_kernels.relu_grad(out, dout, buf)
    assert got is not None and (buf is None or got is buf)
    assert np.array_equal(got, expected, equal_nan=True)
    assert np.array_equal(np.signbit(got), np.signbit(expected))


def _bitwise(got, expected):
    return (got.shape == expected.shape and got.dtype == expected.dtype
            and np.array_equal(got.view(np.uint8), expected.view(np.uint8)))


def _specials(a):
    """NaN, +-0 and values a bias cancels to -0, at the start of `a` (flat)."""
    flat = a.reshape(-1)
    flat[:4] = [np.nan, -0.0, 0.0, -np.inf]
    return a


BIAS_SHAPES = [((128, 512), (512,)), ((3, 1024), (1024,)), ((1000, 7), (7,)),
               ((257, 33), (33,)), ((4, 96, 40), (40,)), ((6, 20, 30), (20, 30))]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("x_shape,b_shape", BIAS_SHAPES)
@pytest.mark.parametrize("into", ["new", "x"])
def test_bias_relu_is_numpys_add_then_maximum_bit_for_bit(dtype, x_shape, b_shape, into):
    rng = np.random.default_rng(3)
    x = _specials(rng.standard_normal(x_shape).astype(dtype))
    bias = rng.standard_normal(b_shape).astype(dtype)
    bias.reshape(-1)[1] = 0.0  # -0 + 0
    expected = np.maximum(np.add(x, bias), 0)
    got = cpu_kernels.bias_relu(x, bias, x if into == "x" else None)
    assert got is not None and (got is x) == (into == "x")
    assert _bitwise(got, expected)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("x_shape,b_shape", BIAS_SHAPES)
@pytest.mark.parametrize("into", ["new", "dout"])
def test_relu_grad_bias_is_numpys_product_and_sum_bit_for_bit(dtype, x_shape, b_shape, into):
    """dX as relu's gradient gives it, dBias as elementwise_add_grad sums it (NumPy's sum
    over the leading axes: row after row, from +0, so a column of -0 sums to +0)."""
    rng = np.random.default_rng(4)
    out = np.maximum(rng.standard_normal(x_shape).astype(dtype), 0)
    dout = _specials(rng.standard_normal(x_shape).astype(dtype))
    dout.reshape(-1, int(np.prod(b_shape)))[:, -1] = -0.0  # a column of -0
    dx_expected = np.multiply(dout, out > 0)
    lead = tuple(range(len(x_shape) - len(b_shape)))
    db_expected = dx_expected.sum(axis=lead, keepdims=True).reshape(b_shape)
    got = cpu_kernels.relu_grad_bias(out, dout, b_shape, dout if into == "dout" else None)
    assert got is not None
    dx, db = got
    assert (dx is dout) == (into == "dout")
    assert _bitwise(dx, dx_expected) and _bitwise(db, db_expected)


def test_the_bias_kernels_leave_what_they_do_not_serve_to_numpy():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((64, 128)).astype(np.float32)
    bias = rng.standard_normal(128).astype(np.float32)
    out = np.maximum(x, 0)
    assert cpu_kernels.bias_relu(x, bias.astype(np.float64), None) is None  # mixed dtypes
    assert cpu_kernels.bias_relu(x, rng.standard_normal(64).astype(np.float32), None) is None
    assert cpu_kernels.bias_relu(x[:, :64], bias[:64], None) is None  # strided
    assert cpu_kernels.bias_relu(x[:4], bias, None) is None  # small: NumPy is cheaper
    assert cpu_kernels.bias_relu(x, bias, x.copy()) is None  # only x's own buffer is taken
    assert cpu_kernels.bias_relu(x, x[0], x) is None  # the bias would be overwritten
    assert cpu_kernels.relu_grad_bias(out, x, (64,), None) is None  # not trailing
    assert cpu_kernels.relu_grad_bias(out, x, (), None) is None
    assert cpu_kernels.relu_grad_bias(out, x.T.copy(), (128,), None) is None  # shapes differ
    assert cpu_kernels.relu_grad_bias(x, x, (128,), x) is None  # Out would be overwritten
    # one column: NumPy sums it pairwise (not row by row, as the kernel does)
    column = rng.standard_normal((2048, 1)).astype(np.float32)
    assert cpu_kernels.relu_grad_bias(np.maximum(column, 0), column, (1,), None) is None
    # an add of equal shapes: NumPy's gradient is dOut itself (its -0 kept)
    assert cpu_kernels.relu_grad_bias(out, x, (64, 128), None) is None
    cpu_kernels.ENABLED[0] = False
    try:
        assert cpu_kernels.bias_relu(x, bias, None) is None
    finally:
        cpu_kernels.ENABLED[0] = True


def test_what_the_kernels_do_not_serve_is_left_to_numpy():
    p, v, g = _arrays(4096, np.float32, 3)
    lr = np.array([0.1], np.float32)
    assert not cpu_kernels.momentum(p[::2], v[::2], g[::2], lr, 0.9, False)  # strided
    assert not cpu_kernels.momentum(p, v, g.astype(np.float64), lr, 0.9, False)  # mixed
    assert not cpu_kernels.momentum(p, v, g, lr.astype(np.float64), 0.9, False)
    assert not cpu_kernels.sgd(p[:100], g[:100], lr)  # small: NumPy's calls are cheaper
    assert cpu_kernels.relu_grad(p.astype(np.float16), g.astype(np.float16), None) is None
    readonly = p.copy()
    readonly.flags.writeable = False
    assert not cpu_kernels.sgd(readonly, g, lr)
    assert not cpu_kernels.momentum(p, v, g, lr, np.float64(0.9), False)  # NumPy: in double
    assert not cpu_kernels.momentum(p, v, v, lr, 0.9, False)  # the gradient is the velocity
    assert not cpu_kernels.sgd(p, p, lr)
    assert cpu_kernels.relu_grad(p.reshape(-1, 1), g.reshape(1, -1), None) is None  # broadcast
    cpu_kernels.ENABLED[0] = False
    try:
        assert not cpu_kernels.sgd(p, g, lr)
    finally:
        cpu_kernels.ENABLED[0] = True


def test_arrays_that_partly_overlap_are_left_to_numpy_and_adjacent_ones_are_not():
    n, lr = 2048, np.array([0.1], np.float32)
    one = np.zeros(3 * n + 8, np.float32)
    g = np.ones(n, np.float32)
    for shift in (1, n - 1):  # v starts inside p (one element in, or one from p's end)
        p, v = one[:n], one[shift:shift + n]
        assert not cpu_kernels.momentum(p, v, g, lr, 0.9, False)
        assert not cpu_kernels.momentum(v, p, g, lr, 0.9, False)
        assert not cpu_kernels.sgd(p, one[shift:shift + n], lr)
    p, v = one[:n], one[n:2 * n]  # (adjacent: no element shared)
    assert cpu_kernels.momentum(p, v, g, lr, 0.9, False)


def _train(steps=6, nesterov=False, optimizer="momentum"):
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 9
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.data("x", [None, 96])
        y = fluid.data("y", [None, 1], dtype="int64")
        h = fluid.layers.fc(x, 256, act="relu")
        h = fluid.layers.fc(h, 128, act="relu")
        loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(
            fluid.layers.fc(h, 5), y))
        if optimizer == "sgd":
            fluid.optimizer.SGD(0.1).minimize(loss)
        else:
            fluid.optimizer.Momentum(0.05, 0.9, use_nesterov=nesterov).minimize(loss)
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    rng = np.random.default_rng(0)
    losses = []
    for _ in range(steps):
        feed = {"x": rng.standard_normal((32, 96)).astype(np.float32),
                "y": rng.integers(0, 5, (32, 1)).astype(np.int64)}
        losses.append(exe.run(main, feed=feed, fetch_list=[loss], scope=scope)[0].copy())
    params = [scope.find_var(p.name).value.copy()
              for p in main.global_block().all_parameters()]
    return losses, params


@pytest.mark.parametrize("optimizer,nesterov", [("momentum", False), ("momentum", True),
                                                 ("sgd", False)])
def test_training_with_the_kernels_is_bitwise_the_numpy_paths(optimizer, nesterov):
    fused = _train(nesterov=nesterov, optimizer=optimizer)
    cpu_kernels.ENABLED[0] = False
    try:
        plain = _train(nesterov=nesterov, optimizer=optimizer)
    finally:
        cpu_kernels.ENABLED[0] = True
    for a, b in zip(fused[0] + fused[1], plain[0] + plain[1]):
        assert np.array_equal(a, b)
    assert fused[0][-1] < fused[0][0]  # and it learns
