"""The layers of runtime/layers/fluid18_more.py against NumPy, and the two ops that cannot be
checked alone (tests/test_ops.py's PROGRAM_CHECKED): sequence_reverse (LoD input) and
tensor_array_to_tensor (an array input), gradients against central finite differences."""

import numpy as np
import pytest

import runtime as fluid
from opcheck import check_program_gradient

L = fluid.layers


@pytest.fixture(autouse=True)
def fresh_programs():
    with fluid.program_guard(fluid.Program(), fluid.Program()), fluid.scope_guard(fluid.Scope()):
        yield


def run(fetch, feed=None):
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(fluid.default_startup_program())
    return exe.run(fluid.default_main_program(), feed=feed or {}, fetch_list=fetch,
                   return_numpy=False)


def lod_tensor(array, lengths):
    t = fluid.LoDTensor()
    t.set(np.asarray(array))
    t.set_recursive_sequence_lengths(lengths)
    return t


def test_range_numbers_and_variables():
    a = L.range(0, 10, 3, "int32")
    end = L.fill_constant([1], "int64", 4)
    b = L.range(1.5, end, 0.5, "float32")
    c = L.range(5, 0, -2, "int64")
    got = run([a, b, c])
    np.testing.assert_array_equal(np.array(got[0]), np.arange(0, 10, 3, dtype=np.int32))
    np.testing.assert_allclose(np.array(got[1]), np.arange(1.5, 4, 0.5, dtype=np.float32))
    np.testing.assert_array_equal(np.array(got[2]), [5, 3, 1])
    assert np.array(got[1]).dtype == np.float32


def test_range_rejects_bad_step_and_dtype():
    with pytest.raises(TypeError):
        L.range(0, 3, 1, "bool")
    bad = L.range(0, 3, -1, "int64")
    with pytest.raises(Exception, match="greater than 0"):
        run([bad])


def test_gather_nd_forward_and_gradient():
    x = np.random.default_rng(0).uniform(-1, 1, (3, 4, 5))
    idx = np.array([[0, 1], [2, 3], [0, 1]], np.int64)
    xv = L.data("x", [3, 4, 5], dtype="float64", append_batch_size=False)
    iv = L.data("idx", [3, 2], dtype="int64", append_batch_size=False)
    out = L.gather_nd(xv, iv)
    assert tuple(out.shape) == (3, 5)
    got, = run([out], {"x": x, "idx": idx})
    np.testing.assert_allclose(np.array(got), x[idx[:, 0], idx[:, 1]])

    def build():
        xv = L.data("x", [3, 4, 5], dtype="float64", append_batch_size=False)
        iv = L.data("idx", [3, 2], dtype="int64", append_batch_size=False)
        w = L.assign(np.arange(15, dtype=np.float64).reshape(3, 5))
        return L.reduce_sum(L.gather_nd(xv, iv) * w)
    grad, = check_program_gradient(build, {"x": x, "idx": idx}, ["x"])
    expected = np.zeros_like(x)
    np.add.at(expected, (idx[:, 0], idx[:, 1]), np.arange(15.0).reshape(3, 5))
    np.testing.assert_allclose(grad, expected)


def test_similarity_focus_paddle_example():
    x = np.array([[[[0.8, 0.1], [0.4, 0.5]], [[0.9, 0.7], [0.9, 0.9]],
                   [[0.8, 0.9], [0.1, 0.2]]]], np.float32)
    xv = L.data("x", [1, 3, 2, 2], append_batch_size=False)
    out = L.similarity_focus(xv, axis=1, indexes=[0])
    got, = run([out], {"x": x})
    np.testing.assert_array_equal(np.array(got), [[[[1, 0], [0, 1]]] * 3])
    with pytest.raises(ValueError):
        L.similarity_focus(xv, axis=0, indexes=[0])
    with pytest.raises(ValueError):
        L.similarity_focus(xv, axis=1, indexes=[])


def _pe(length, size, alpha, beta, x):
    half = size // 2
    pos = np.arange(length)[:, None]
    angle = pos / 10000.0 ** (np.arange(half)[None, :] / (half - 1))
    return alpha * x + beta * np.concatenate([np.sin(angle), np.cos(angle)], axis=1)


def test_add_position_encoding_dense_and_lod():
    x = np.random.default_rng(1).uniform(-1, 1, (2, 4, 6)).astype(np.float32)
    xv = L.data("x", [2, 4, 6], append_batch_size=False)
    out = L.add_position_encoding(xv, alpha=0.5, beta=2.0)
    seq = L.data("s", [6], lod_level=1)
    out_lod = L.add_position_encoding(seq, alpha=1.0, beta=1.0)
    rows = x.reshape(8, 6)[:5]
    got = run([out, out_lod], {"x": x, "s": lod_tensor(rows, [[2, 3]])})
    np.testing.assert_allclose(np.array(got[0]), _pe(4, 6, 0.5, 2.0, x), rtol=1e-5, atol=1e-6)
    expected = np.concatenate([_pe(2, 6, 1, 1, rows[:2]), _pe(3, 6, 1, 1, rows[2:])])
    np.testing.assert_allclose(np.array(got[1]), expected, rtol=1e-5, atol=1e-6)
    assert got[1].recursive_sequence_lengths() == [[2, 3]]

    def build():
        xv = L.data("x", [2, 4, 6], dtype="float64", append_batch_size=False)
        return L.reduce_sum(L.square(L.add_position_encoding(xv, alpha=0.5, beta=2.0)))
    check_program_gradient(build, {"x": x.astype(np.float64)}, ["x"])


def test_sequence_reverse_forward_and_gradient():
    x = np.arange(20, dtype=np.float32).reshape(5, 4)
    xv = L.data("x", [4], lod_level=1)
    out = L.sequence_reverse(xv)
    got, = run([out], {"x": lod_tensor(x, [[2, 3]])})
    np.testing.assert_array_equal(np.array(got), x[[1, 0, 4, 3, 2]])
    assert got.recursive_sequence_lengths() == [[2, 3]]

    def build():
        xv = L.data("x", [4], dtype="float64", lod_level=1)
        w = L.assign(np.arange(20, dtype=np.float64).reshape(5, 4))
        return L.reduce_sum(L.sequence_reverse(xv) * w)
    grad, = check_program_gradient(build, {"x": x.astype(np.float64)}, ["x"],
                                   lods={"x": [[2, 3]]})
    np.testing.assert_allclose(grad, np.arange(20.0).reshape(5, 4)[[1, 0, 4, 3, 2]])


def test_sequence_reverse_needs_a_lod():
    xv = L.data("x", [4])
    out = L.sequence_reverse(xv)
    with pytest.raises(Exception, match="no LoD"):
        run([out], {"x": np.ones((3, 4), np.float32)})


@pytest.mark.parametrize("use_stack,axis", [(False, 1), (True, 0), (False, 0), (True, 2)])
def test_tensor_array_to_tensor_forward_and_gradient(use_stack, axis):
    rng = np.random.default_rng(2)
    parts = [rng.uniform(-1, 1, (2, 3)) for _ in range(3)]

    def build():
        arr = L.create_array("float64")
        for k in range(3):
            v = L.data(f"p{k}", [2, 3], dtype="float64", append_batch_size=False)
            L.array_write(v, L.fill_constant([1], "int64", k), array=arr)
        out, index = L.tensor_array_to_tensor(arr, axis=axis, use_stack=use_stack)
        build.out, build.index = out, index
        w = L.assign(np.arange(18, dtype=np.float64).reshape(
            np.stack(parts, axis) .shape if use_stack else np.concatenate(parts, axis).shape))
        return L.reduce_sum(L.square(out) * w)
    feed = {f"p{k}": p for k, p in enumerate(parts)}
    check_program_gradient(build, feed, list(feed))
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        build()
        got = run([build.out, build.index], feed)
    expected = np.stack(parts, axis) if use_stack else np.concatenate(parts, axis)
    np.testing.assert_allclose(np.array(got[0]), expected)
    size = parts[0].shape[axis] if axis < 2 else 1
    np.testing.assert_array_equal(np.array(got[1]), [size] * 3)
    assert np.array(got[1]).dtype == np.int32
