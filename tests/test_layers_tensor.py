"""Tensor and sequence layers built into programs and run by the Executor, against NumPy:
shapes with an unknown batch (-1), build-time shape errors naming the op and the call site,
accuracy, padded sequence_pool, and gradients flowing through reshape/transpose/concat."""

import numpy as np
import pytest

import runtime as fluid
from runtime.errors import OpRuntimeError, ShapeError

HERE = "test_layers_tensor.py"
R = np.random.default_rng(3)


def run(build, feed, startup=True):
    """Build with `build()` (returning the fetch list) in fresh programs; run; return values."""
    main, start = fluid.Program(), fluid.Program()
    main.random_seed = start.random_seed = 5
    with fluid.program_guard(main, start), fluid.unique_name.guard():
        fetches = build()
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    if startup:
        exe.run(start, scope=scope)
    return exe.run(main, feed=feed, fetch_list=list(fetches), scope=scope), fetches


def build_error(build):
    main, start = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, start), fluid.unique_name.guard():
        with pytest.raises(ShapeError) as err:
            build()
    return str(err.value)


# --- shapes and values ---------------------------------------------------------------------------
def test_reshape_with_unknown_batch_and_copied_dims():
    x_np = R.normal(size=(5, 3, 4)).astype("float32")

    def build():
        x = fluid.data("x", [None, 3, 4])
        flat = fluid.layers.reshape(x, [-1, 12])
        copied = fluid.layers.reshape(x, [0, -1])
        split_last = fluid.layers.reshape(x, [0, 0, 2, 2])
        assert flat.shape == (-1, 12) and copied.shape == (-1, 12)
        assert split_last.shape == (-1, 3, 2, 2)
        return flat, copied, split_last

    (flat, copied, split_last), _ = run(build, {"x": x_np})
    np.testing.assert_array_equal(flat, x_np.reshape(-1, 12))
    np.testing.assert_array_equal(copied, x_np.reshape(5, 12))
    np.testing.assert_array_equal(split_last, x_np.reshape(5, 3, 2, 2))


def test_layout_layers_match_numpy():
    x_np = R.normal(size=(2, 1, 3)).astype("float32")

    def build():
        x = fluid.data("x", [None, 1, 3])
        return (fluid.layers.transpose(x, [2, 0, 1]), fluid.layers.squeeze(x, [1]),
                fluid.layers.unsqueeze(x, [0, -1]), fluid.layers.flatten(x, axis=2),
                fluid.layers.slice(x, axes=[2], starts=[1], ends=[10]),
                fluid.layers.expand(x, [1, 2, 1]), fluid.layers.cast(x, "float64"),
                fluid.layers.stack([x, x], axis=1))

    outs, fetches = run(build, {"x": x_np})
    expected = [x_np.transpose(2, 0, 1), x_np[:, 0], x_np[None, ..., None], x_np.reshape(2, 3),
                x_np[:, :, 1:], np.tile(x_np, (1, 2, 1)), x_np.astype("float64"),
                np.stack([x_np, x_np], 1)]
    for got, want, var in zip(outs, expected, fetches):
        np.testing.assert_array_equal(got, want)
        assert got.dtype == want.dtype
        assert len(var.shape) == want.ndim


def test_concat_split_matmul_and_reductions():
    a_np = R.normal(size=(4, 3)).astype("float32")
    b_np = R.normal(size=(4, 2)).astype("float32")

    def build():
        a, b = fluid.data("a", [None, 3]), fluid.data("b", [None, 2])
        ab = fluid.layers.concat([a, b], axis=1)
        left, right = fluid.layers.split(ab, [2, -1], dim=1)
        gram = fluid.layers.matmul(ab, ab, transpose_x=True, alpha=0.5)
        return (ab, left, right, gram, fluid.layers.reduce_sum(ab),
                fluid.layers.reduce_mean(ab, dim=0), fluid.layers.reduce_max(ab, dim=[1],
                                                                             keep_dim=True),
                fluid.layers.reduce_min(ab, dim=-1), fluid.layers.reduce_prod(left, dim=1))

    outs, _ = run(build, {"a": a_np, "b": b_np})
    ab = np.concatenate([a_np, b_np], 1)
    expected = [ab, ab[:, :2], ab[:, 2:], 0.5 * ab.T @ ab, ab.sum().reshape(1), ab.mean(0),
                ab.max(1, keepdims=True), ab.min(1), ab[:, :2].prod(1)]
    for got, want in zip(outs, expected):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_creation_layers():
    def build():
        x = fluid.data("x", [None, 2])
        const = fluid.layers.fill_constant([2, 3], "int64", 7)
        like = fluid.layers.fill_constant_batch_size_like(x, [-1, 4], "float32", 1.5)
        glob = fluid.layers.create_global_var([3], 2.5, "float32", persistable=True)
        target = fluid.layers.create_tensor("float32")
        fluid.layers.assign(np.arange(6, dtype="float32").reshape(2, 3), target)
        return (const, like, fluid.layers.zeros([2], "float32"), fluid.layers.ones([1], "int32"),
                fluid.layers.zeros_like(x), fluid.layers.ones_like(x), glob, target,
                fluid.layers.assign(x))

    x_np = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], "float32")
    outs, _ = run(build, {"x": x_np})
    expected = [np.full((2, 3), 7), np.full((3, 4), 1.5), np.zeros(2), np.ones(1),
                np.zeros((3, 2)), np.ones((3, 2)), np.full(3, 2.5),
                np.arange(6).reshape(2, 3), x_np]
    dtypes = ["int64", "float32", "float32", "int32", "float32", "float32", "float32", "float32",
              "float32"]
    for got, want, dtype in zip(outs, expected, dtypes):
        np.testing.assert_array_equal(got, want)
        assert got.dtype == np.dtype(dtype)


def test_create_parameter_is_trainable_and_initialised():
    def build():
        w = fluid.layers.create_parameter([2, 3], "float32", name="my_w",
                                          default_initializer=fluid.initializer.Constant(0.5))
        assert isinstance(w, fluid.Parameter) and w.trainable
        return (w,)

    (w,), _ = run(build, {})
    np.testing.assert_array_equal(w, np.full((2, 3), 0.5, "float32"))


def test_argmax_argmin_topk_one_hot_and_clip():
    x_np = np.array([[0.1, 0.9, 0.3], [0.8, -0.2, 0.5]], "float32")

    def build():
        x = fluid.data("x", [None, 3])
        ids = fluid.data("ids", [None, 1], dtype="int64")
        values, indices = fluid.layers.topk(x, 2)
        return (fluid.layers.argmax(x, axis=1), fluid.layers.argmin(x, axis=1), values, indices,
                fluid.layers.one_hot(ids, 4), fluid.layers.clip(x, 0.0, 0.5),
                fluid.layers.clip_by_norm(x, 1.0))

    ids = np.array([[2], [0]], "int64")
    outs, _ = run(build, {"x": x_np, "ids": ids})
    expected = [[1, 0], [0, 1], [[0.9, 0.3], [0.8, 0.5]], [[1, 2], [0, 2]],
                np.eye(4)[[2, 0]], np.clip(x_np, 0, 0.5), x_np / np.linalg.norm(x_np)]
    for got, want in zip(outs, expected):
        np.testing.assert_allclose(got, want, rtol=1e-6)
    assert outs[0].dtype == np.int64 and outs[4].dtype == np.float32


def test_one_hot_out_of_range_id_is_a_clear_runtime_error():
    def build():
        return (fluid.layers.one_hot(fluid.data("ids", [None, 1], dtype="int64"), 3),)

    with pytest.raises(OpRuntimeError) as err:
        run(build, {"ids": np.array([[1], [3]], "int64")})
    msg = str(err.value)
    assert "one_hot" in msg and "id 3" in msg and "depth=3" in msg and HERE in msg


def test_accuracy_on_a_known_batch():
    scores = np.array([[0.1, 0.7, 0.2],    # top1 = 1, top2 = {1, 2}
                       [0.5, 0.1, 0.4],    # top1 = 0, top2 = {0, 2}
                       [0.2, 0.3, 0.5],    # top1 = 2, top2 = {2, 1}
                       [0.6, 0.3, 0.1]], "float32")  # top1 = 0, top2 = {0, 1}
    labels = np.array([[1], [2], [0], [0]], "int64")

    def build():
        x = fluid.data("x", [None, 3])
        y = fluid.data("y", [None, 1], dtype="int64")
        correct = fluid.layers.create_tensor("int64")
        total = fluid.layers.create_tensor("int64")
        top2 = fluid.layers.accuracy(x, y, k=2, correct=correct, total=total)
        return fluid.layers.accuracy(x, y), top2, correct, total

    (top1, top2, correct, total), fetches = run(build, {"x": scores, "y": labels})
    assert top1.dtype == np.float32 and top1.shape == (1,)
    np.testing.assert_allclose(top1, [0.5])
    np.testing.assert_allclose(top2, [0.75])
    assert correct.tolist() == [3] and total.tolist() == [4] and correct.dtype == np.int64


# --- sequence_pool -------------------------------------------------------------------------------
@pytest.mark.parametrize("pool_type", ["sum", "average", "sqrt", "max", "last", "first"])
def test_sequence_pool_on_padded_batches_with_empty_rows(pool_type):
    lengths = np.array([2, 0, 3, 1], "int64")
    x_np = R.normal(size=(4, 3, 2)).astype("float32")
    x_np[np.arange(3)[None, :] >= lengths[:, None]] = 1e6  # padding must not leak

    def build():
        x = fluid.data("x", [None, 3, 2])
        length = fluid.data("len", [None], dtype="int64")
        return (fluid.layers.sequence_pool(x, pool_type, pad_value=-1.0, length=length),)

    (out,), (var,) = run(build, {"x": x_np, "len": lengths})
    assert var.shape == (-1, 2)
    pools = {"sum": lambda s: s.sum(0), "average": lambda s: s.mean(0),
             "sqrt": lambda s: s.sum(0) / np.sqrt(len(s)), "max": lambda s: s.max(0),
             "last": lambda s: s[-1], "first": lambda s: s[0]}
    expected = [pools[pool_type](row[:n]) if n else np.full(2, -1.0)
                for row, n in zip(x_np, lengths)]
    np.testing.assert_allclose(out, np.stack(expected), rtol=1e-6)


@pytest.mark.parametrize("pool_type", ["sum", "average", "sqrt", "max", "last", "first"])
def test_sequence_pool_without_length_pools_the_lod_sequences(pool_type):
    # Paddle 1.8 semantics (issue 27): a LoD input pools each sequence of its last level;
    # this runtime used to refuse LoD here
    x_np = np.arange(12, dtype="float32").reshape(6, 2) * np.float32(0.5)
    x = fluid.LoDTensor()
    x.set(x_np)
    x.set_recursive_sequence_lengths([[2, 0, 4]])

    def build():
        data = fluid.data("x", [None, 2], lod_level=1)
        return (fluid.layers.sequence_pool(data, pool_type, pad_value=-1.0),)

    (out,), _ = run(build, {"x": x})
    pools = {"sum": lambda s: s.sum(0), "average": lambda s: s.mean(0),
             "sqrt": lambda s: s.sum(0) / np.sqrt(len(s)), "max": lambda s: s.max(0),
             "last": lambda s: s[-1], "first": lambda s: s[0]}
    expected = [pools[pool_type](x_np[a:b]) if b > a else np.full(2, -1.0)
                for a, b in ((0, 2), (2, 2), (2, 6))]
    np.testing.assert_allclose(out, np.stack(expected), rtol=1e-6)


def test_sequence_pool_length_beyond_padding_is_a_runtime_error():
    def build():
        x = fluid.data("x", [None, 3, 2])
        return (fluid.layers.sequence_pool(x, "max", length=fluid.data("n", [None], "int64")),)

    with pytest.raises(OpRuntimeError) as err:
        run(build, {"x": np.zeros((2, 3, 2), "float32"), "n": np.array([1, 4], "int64")})
    assert "sequence_pool" in str(err.value) and "[0, 3]" in str(err.value)


# --- build-time errors ---------------------------------------------------------------------------
@pytest.mark.parametrize("build, words", [
    (lambda: fluid.layers.concat([fluid.data("a", [None, 3, 4]), fluid.data("b", [None, 2, 5])],
                                 axis=1), ["concat", "except axis=1"]),
    # [-1, 3, 4] -> [0, 5]: the batch is copied, so 12 elements per row must become 5
    (lambda: fluid.layers.reshape(fluid.data("x", [None, 3, 4]), [0, 5]),
     ["reshape2", "does not fit"]),
    (lambda: fluid.layers.reshape(fluid.data("x", [2, 3, 4]), [5, 5]),
     ["reshape2", "hold 24 elements"]),
    (lambda: fluid.layers.reshape(fluid.data("x", [2, 3, 4]), [-1, -1]),
     ["reshape2", "more than one -1"]),
    (lambda: fluid.layers.matmul(fluid.data("x", [None, 3]), fluid.data("y", [4, 2])),
     ["matmul", "inner dimensions"]),
    (lambda: fluid.layers.split(fluid.data("x", [None, 5]), 2, dim=1), ["split", "num=2"]),
    (lambda: fluid.layers.transpose(fluid.data("x", [None, 5]), [0, 0]), ["transpose2"]),
    (lambda: fluid.layers.reduce_sum(fluid.data("x", [None, 5]), dim=3), ["reduce_sum"]),
    (lambda: fluid.layers.stack([fluid.data("a", [2, 3]), fluid.data("b", [3, 2])]), ["stack"]),
], ids=["concat", "reshape_unknown", "reshape_size", "reshape_two_unknowns", "matmul", "split",
        "transpose", "reduce", "stack"])
def test_bad_shapes_fail_at_build_time_naming_op_and_call_site(build, words):
    msg = build_error(build)
    for word in words:
        assert word in msg, msg
    assert HERE in msg, msg


# --- gradients -----------------------------------------------------------------------------------
def test_training_through_reshape_transpose_concat_reduces_the_loss():
    rng = np.random.default_rng(0)
    x_np = rng.normal(size=(64, 4, 3)).astype("float32")
    w_true = rng.normal(size=(24, 1)).astype("float32")

    def features(x):
        t = fluid.layers.transpose(x, [0, 2, 1])                 # [-1, 3, 4]
        both = fluid.layers.concat([x, fluid.layers.reshape(t, [0, 4, 3])], axis=2)
        return fluid.layers.reshape(both, [-1, 24])              # [-1, 24]

    y_np = features_np(x_np) @ w_true
    main, start = fluid.Program(), fluid.Program()
    main.random_seed = start.random_seed = 1
    with fluid.program_guard(main, start), fluid.unique_name.guard():
        x = fluid.data("x", [None, 4, 3])
        y = fluid.data("y", [None, 1])
        pred = fluid.layers.fc(features(x), 1)
        loss = fluid.layers.reduce_mean(fluid.layers.square(pred - y))
        fluid.optimizer.SGD(0.05).minimize(loss)
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    exe.run(start, scope=scope)
    losses = [float(exe.run(main, feed={"x": x_np, "y": y_np}, fetch_list=[loss],
                            scope=scope)[0][0]) for _ in range(60)]
    assert losses[-1] < 0.05 * losses[0]


def features_np(x):
    t = x.transpose(0, 2, 1).reshape(len(x), 4, 3)
    return np.concatenate([x, t], axis=2).reshape(len(x), 24)


def test_input_gradients_through_layout_layers_match_numpy():
    x_np = R.normal(size=(2, 3, 4))

    def build():
        x = fluid.data("x", [None, 3, 4], dtype="float64")
        x.stop_gradient = False
        t = fluid.layers.transpose(fluid.layers.reshape(x, [0, 4, 3]), [0, 2, 1])
        parts = fluid.layers.split(t, [1, 2], dim=1)
        out = fluid.layers.concat([parts[1], parts[0]], axis=1)
        w = fluid.layers.assign(np.arange(24, dtype="float64").reshape(2, 3, 4))
        loss = fluid.layers.reduce_sum(fluid.layers.elementwise_mul(out, w))
        return fluid.gradients([loss], [x])

    (grad,), _ = run(build, {"x": x_np})
    # loss = sum(w * perm(x)): the gradient is w sent back through the inverse permutation
    index = np.arange(24).reshape(2, 3, 4)
    t = index.reshape(2, 4, 3).transpose(0, 2, 1)
    moved = np.concatenate([t[:, 1:], t[:, :1]], axis=1)
    expected = np.zeros(24)
    expected[moved.ravel()] = np.arange(24, dtype="float64")
    np.testing.assert_array_equal(grad, expected.reshape(2, 3, 4))


def test_reduce_max_splits_the_gradient_between_ties():
    def build():
        x = fluid.data("x", [2, 3], dtype="float64")
        x.stop_gradient = False
        return fluid.gradients([fluid.layers.reduce_max(x, dim=1)], [x])

    (grad,), _ = run(build, {"x": np.array([[1.0, 3.0, 3.0], [2.0, 0.0, 1.0]])})
    np.testing.assert_array_equal(grad, [[0, 0.5, 0.5], [1, 0, 0]])
