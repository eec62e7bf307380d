"""Variable.__getitem__ (Fluid 1.8's _getitem_impl_) and fluid.layers.sequence_mask."""

import numpy as np
import pytest

import runtime as fluid
from opcheck import check_program_gradient

L = fluid.layers
A = np.arange(3 * 5 * 6, dtype="float32").reshape(3, 5, 6) - 40.0

INDICES = [
    0, -1, 2, (1, 2), (-3, -1, 0), (1, 4, 5),
    slice(1, 3), slice(None, 2), slice(-2, None), slice(None, None, -1), slice(None, None, 2),
    (slice(None), slice(1, 4)), (slice(None), slice(4, 0, -2), slice(None, None, 3)),
    (slice(None), -1, -1), (slice(None), slice(-3, None), 2), (1, slice(None, None, -2)),
    (slice(2, -4, -1), 0), (slice(-100, 100), slice(1, -1, 2)),
]


@pytest.fixture(autouse=True)
def _fresh_programs():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        yield


def _run(fetch, feed):
    exe = fluid.Executor(fluid.CPUPlace())
    return exe.run(fluid.default_main_program(), feed=feed, fetch_list=fetch)


def _same(got, expected):
    expected = np.asarray(expected)
    assert got.size == expected.size
    np.testing.assert_array_equal(got, expected.reshape(got.shape))
    # Fluid keeps shape [1] when every axis is indexed; otherwise shapes match NumPy's
    assert got.shape == (expected.shape or (1,))


@pytest.mark.parametrize("batch", [3, -1], ids=["static", "batch_dim"])
def test_int_and_slice_indices_match_numpy(batch):
    x = fluid.data("x", [batch, 5, 6], "float32")
    outs = [x[i] for i in INDICES]
    for out, i in zip(outs, INDICES):
        declared = np.shape(A[i]) or (1,)
        assert len(out.shape) == len(declared)
        assert all(d in (-1, e) for d, e in zip(out.shape, declared))
    for got, i in zip(_run(outs, {"x": A}), INDICES):
        _same(got, A[i])


def test_slice_with_step_one_uses_slice_op_and_steps_use_strided_slice():
    x = fluid.data("x", [3, 5, 6], "float32")
    x[1:, 2]
    x[::2]
    types = [op.type for op in fluid.default_main_program().global_block().ops]
    assert types == ["slice", "strided_slice"]


def test_variable_indices_and_bounds():
    x = fluid.data("x", [3, 5, 6], "float32")
    i = L.fill_constant([1], "int64", 3)
    m = L.fill_constant([1], "int32", -1)
    outs = [x[:, i], x[m], x[:, i:], x[1, :i, m], x[m, 1:i], x[:, :, m]]
    expected = [A[:, 3], A[-1], A[:, 3:], A[1, :3, -1], A[-1, 1:3], A[:, :, -1]]
    for got, e in zip(_run(outs, {"x": A}), expected):
        _same(got, e)


def test_shape_of_target_indexed():
    x = fluid.data("x", [-1, 7, 2], "float32")
    n = L.shape(x)[1]
    got, = _run([n], {"x": np.zeros((4, 7, 2), "float32")})
    assert got.tolist() == [7]


def test_gradient_through_slices():
    def build():
        x = fluid.data("x", [4, 5], "float64")
        k = L.fill_constant([1], "int64", 2)
        y = x[1:3] * x[::-1][:2] + L.reduce_sum(x[:, k]) * x[-1, ::-2][0]
        return L.reduce_sum(y * y)
    check_program_gradient(build, {"x": np.random.default_rng(0).uniform(-1, 1, (4, 5))},
                           ["x"])


@pytest.mark.parametrize("index, error", [
    (None, IndexError), (Ellipsis, IndexError), ((0, None), IndexError),
    ([0, 1], TypeError), (np.array([0]), TypeError), (1.5, TypeError), (True, TypeError),
    (slice(0, 2, 0), ValueError), (3, IndexError), (-4, IndexError), ((0, 0, 0, 0), IndexError),
    (slice(2, 1), IndexError),
])
def test_unsupported_indices_fail_clearly(index, error):
    x = fluid.data("x", [3, 5, 6], "float32")
    with pytest.raises(error):
        x[index]


def test_variable_step_and_float_variable_index_fail():
    x = fluid.data("x", [3, 5, 6], "float32")
    with pytest.raises(TypeError):
        x[::L.fill_constant([1], "int64", 2)]
    with pytest.raises(TypeError):
        x[L.fill_constant([1], "float32", 1.0)]


def test_variables_are_not_iterable():
    x = fluid.data("x", [3], "float32")
    with pytest.raises(TypeError):
        list(x)


@pytest.mark.parametrize("maxlen", [None, 7, "var"])
@pytest.mark.parametrize("dtype", ["int64", "float32", "bool"])
def test_sequence_mask_matches_numpy(maxlen, dtype):
    lens = np.array([[3, 0], [5, 1]], np.int64)
    x = fluid.data("lens", [2, 2], "int64")
    n = {None: None, 7: 7, "var": L.fill_constant([1], "int32", 6)}[maxlen]
    y = L.sequence_mask(x, maxlen=n, dtype=dtype)
    assert y.stop_gradient and y.shape == (2, 2, 7 if maxlen == 7 else -1)
    got, = _run([y], {"lens": lens})
    width = {None: 5, 7: 7, "var": 6}[maxlen]
    expected = (np.arange(width) < lens[..., None]).astype(dtype)
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)


def test_sequence_mask_rejects_float_lengths():
    with pytest.raises(TypeError):
        L.sequence_mask(fluid.data("f", [3], "float32"))
