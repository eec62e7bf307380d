"""LoD tensors as Fluid 1.8 has them (issue 27): LoD feeds, the LoD ops (lod_rank_table,
lod_tensor_to_array / array_to_lod_tensor, shrink_memory, reorder_lod_tensor_by_rank,
split / merge_lod_tensor, lod_reset), sequence_pool on LoD input, ShareLoD through ordinary
ops, DynamicRNN, the DataFeeder's nested sequences and a LoD batch split over places.

Expected values are those of Paddle 1.8.5's own tests (test_lod_tensor_array_ops.py,
test_lod_rank_table.py, test_split_and_merge_lod_tensor_op.py, test_shrink_rnn_memory.py);
gradients are checked against central finite differences."""

import numpy as np
import pytest

import runtime as fluid
from opcheck import check_program_gradient

L = fluid.layers
CF = fluid.layers.control_flow


@pytest.fixture(autouse=True)
def fresh_programs():
    with fluid.program_guard(fluid.Program(), fluid.Program()), fluid.scope_guard(fluid.Scope()):
        yield


def lod_tensor(array, lengths):
    tensor = fluid.LoDTensor()
    tensor.set(np.asarray(array))
    tensor.set_recursive_sequence_lengths(lengths)
    return tensor


def run(fetch, feed):
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(fluid.default_startup_program())
    return exe.run(fluid.default_main_program(), feed=feed, fetch_list=fetch,
                   return_numpy=False)


# --- forward values (Paddle's expectations) ---------------------------------------------------
def test_rank_table_sorts_sequences_longest_first():
    x = L.data("x", [100])
    table = CF.lod_rank_table(x, level=1)
    table.persistable = True
    scope = fluid.global_scope()
    data = lod_tensor(np.random.random((17, 100)), [[1, 2], [5, 1, 1], [3, 1, 5, 1, 3, 3, 1]])
    fluid.Executor(fluid.CPUPlace()).run(feed={"x": data})
    assert scope.find_var(table.name).get_lod_rank_table().items() == [(0, 5), (1, 1), (2, 1)]


@pytest.mark.parametrize("lengths,level,expect,expect_lod,max_len", [
    ([[3, 6, 1]], 0, [[3, 0, 9], [4, 1], [5, 2], [6], [7], [8]], [[]] * 6, 6),
    ([[3, 6, 0, 1]], 0, [[3, 0, 9], [4, 1], [5, 2], [6], [7], [8]], [[]] * 6, 6),
    ([[2, 3], [3, 6, 2, 6, 3]], 0,
     [[9, 10, 0, 1, 2], [11, 12, 13, 14, 15, 16, 3, 4, 5, 6, 7, 8], [17, 18, 19]],
     [[[2, 3]], [[6, 6]], [[3]]], 3),
])
def test_lod_tensor_to_array_and_back(lengths, level, expect, expect_lod, max_len):
    rows = sum(lengths[-1])
    x = L.data("x", [1], dtype="int32")
    table = CF.lod_rank_table(x, level=level)
    array = CF.lod_tensor_to_array(x, table)
    back = CF.array_to_lod_tensor(array, table)
    longest = CF.max_sequence_len(table)
    data = lod_tensor(np.arange(rows, dtype="int32").reshape(rows, 1), lengths)
    got_array, got_back, got_len = run([array, back, longest], {"x": data})
    assert [np.array(t).ravel().tolist() for t in got_array] == expect
    assert [t.recursive_sequence_lengths() for t in got_array] == expect_lod
    np.testing.assert_array_equal(np.array(got_back), np.array(data))
    assert got_back.recursive_sequence_lengths() == lengths
    assert np.array(got_len)[0] == max_len


@pytest.mark.parametrize("x_lengths,expect_rows", [([[2, 3, 1]], (6, 5, 2)), (None, (3, 2, 1))])
def test_shrink_memory_keeps_the_running_sequences(x_lengths, expect_rows):
    x = L.data("x", [100])
    ref = L.data("ref", [1], lod_level=1)
    table = CF.lod_rank_table(ref)
    i = L.zeros(dtype="int64", shape=[1])
    mems = []
    mem = x
    for _ in range(3):
        mem = CF.shrink_memory(mem, i, table)
        mems.append(mem)
        i = L.increment(i)
    values = np.random.random((6 if x_lengths else 3, 100)).astype("float32")
    x_feed = lod_tensor(values, x_lengths) if x_lengths else values
    out = run(mems, {"x": x_feed, "ref": lod_tensor(np.zeros((6, 1), "float32"), [[1, 2, 3]])})
    for got, rows in zip(out, expect_rows):
        np.testing.assert_array_equal(np.array(got), values[:rows])


def test_split_and_merge_by_sequence_mask():
    x = L.data("x", [1], dtype="int32")
    mask = L.data("mask", [1], dtype="bool")
    out_true, out_false = CF.split_lod_tensor(x, mask, level=0)
    merged = CF.merge_lod_tensor(out_true, out_false, x, mask, level=0)
    data = lod_tensor(np.arange(10, dtype="int32").reshape(10, 1), [[3, 6, 1]])
    got_t, got_f, got_m = run([out_true, out_false, merged],
                              {"x": data, "mask": np.array([[False], [True], [False]])})
    assert np.array(got_t).ravel().tolist() == [3, 4, 5, 6, 7, 8]
    assert got_t.recursive_sequence_lengths() == [[6]]
    assert np.array(got_f).ravel().tolist() == [0, 1, 2, 9]
    assert got_f.recursive_sequence_lengths() == [[3, 1]]
    np.testing.assert_array_equal(np.array(got_m), np.array(data))
    assert got_m.recursive_sequence_lengths() == [[3, 6, 1]]


def test_lod_argument_types_are_checked_as_in_paddle():
    with pytest.raises(TypeError):
        CF.lod_rank_table(np.zeros((2, 4), "float32"))
    x = L.data("x", [4], dtype="float32")
    with pytest.raises(TypeError):
        CF.reorder_lod_tensor_by_rank(x, L.data("t", [4], dtype="int32"))
    with pytest.raises(TypeError):
        CF.split_lod_tensor(x, L.data("m", [1], dtype="bool"), level=None)


def test_ops_share_lod_and_fetching_it_needs_return_numpy_false():
    x = L.data("x", [2], lod_level=1)
    y = L.relu(L.fc(x, size=3)) * 2.0
    data = lod_tensor(np.ones((5, 2), "float32"), [[2, 3]])
    (out,) = run([y], {"x": data})
    assert out.recursive_sequence_lengths() == [[2, 3]] and y.lod_level == 1
    exe = fluid.Executor(fluid.CPUPlace())
    with pytest.raises(RuntimeError, match="return_numpy"):
        exe.run(fluid.default_main_program(), feed={"x": data}, fetch_list=[y])


def test_lod_reset_and_sequence_last_step():
    x = L.data("x", [1], dtype="float32")
    reset = L.lod_reset(x, target_lod=[0, 1, 4, 6])
    last = L.sequence_last_step(reset)
    first = L.sequence_first_step(reset)
    got_reset, got_last, got_first = run(
        [reset, last, first], {"x": np.arange(6, dtype="float32").reshape(6, 1)})
    assert got_reset.lod() == [[0, 1, 4, 6]]
    assert np.array(got_last).ravel().tolist() == [0, 3, 5]
    assert np.array(got_first).ravel().tolist() == [0, 1, 4]


# --- gradients against finite differences ----------------------------------------------------
W = np.random.default_rng(27).uniform(0.5, 1.5, (10, 2))


def _weighted(out, rows=10):
    weights = L.assign(W[:rows])
    return L.reduce_sum(out * weights, dim=None)


def test_array_roundtrip_and_reorder_gradients():
    x = np.random.default_rng(1).random((10, 2))

    def roundtrip():
        data = L.data("x", [2], dtype="float64", lod_level=1)
        table = CF.lod_rank_table(data)
        back = CF.array_to_lod_tensor(CF.lod_tensor_to_array(data, table), table)
        return _weighted(back * back)

    def reorder():
        data = L.data("x", [2], dtype="float64", lod_level=1)
        out = CF.reorder_lod_tensor_by_rank(data, CF.lod_rank_table(data))
        return _weighted(out * out)

    for build in (roundtrip, reorder):
        check_program_gradient(build, {"x": x}, ["x"], lods={"x": [[3, 6, 1]]})


def test_split_merge_and_shrink_gradients():
    x = np.random.default_rng(2).random((10, 2))

    def split_merge():
        data = L.data("x", [2], dtype="float64", lod_level=1)
        mask = L.assign(np.array([[False], [True], [False]]))
        yes, no = CF.split_lod_tensor(data, mask)
        return _weighted(CF.merge_lod_tensor(yes * 3.0, no * no, data, mask))

    def shrink():
        data = L.data("x", [2], dtype="float64", lod_level=1)
        table = CF.lod_rank_table(L.data("ref", [1], dtype="float64", lod_level=1))
        step = L.fill_constant([1], "int64", 1)
        # at step 1 the sequences of lengths 6 and 3 run: x's first 2 sequences, 9 rows
        return _weighted(CF.shrink_memory(data, step, table) ** 2, rows=9)

    check_program_gradient(split_merge, {"x": x}, ["x"], lods={"x": [[3, 6, 1]]})
    check_program_gradient(shrink, {"x": x, "ref": np.zeros((10, 1))}, ["x"],
                           lods={"x": [[6, 3, 1]], "ref": [[3, 6, 1]]})


@pytest.mark.parametrize("pool_type", ["sum", "average", "sqrt", "max", "last", "first"])
def test_sequence_pool_lod_gradient(pool_type):
    x = np.random.default_rng(3).random((6, 2))

    def build():
        data = L.data("x", [2], dtype="float64", lod_level=1)
        pooled = L.sequence_pool(data, pool_type)
        return L.reduce_sum(pooled * L.assign(W[:3]), dim=None)

    check_program_gradient(build, {"x": x}, ["x"], lods={"x": [[2, 0, 4]]})


def test_dynamic_rnn_matches_a_python_rnn_and_its_gradient():
    rng = np.random.default_rng(4)
    x = rng.random((6, 3))
    w = rng.uniform(-0.5, 0.5, (3 + 2, 2))

    def build():
        data = L.data("x", [3], dtype="float64", lod_level=1)
        rnn = L.DynamicRNN()
        with rnn.block():
            step = rnn.step_input(data)
            prev = rnn.memory(shape=[2], value=0.0, dtype="float64")
            hidden = L.tanh(L.matmul(L.concat([step, prev], axis=1), L.assign(w)))
            rnn.update_memory(prev, hidden)
            rnn.output(hidden)
        last = L.sequence_last_step(rnn())
        return L.reduce_sum(last * L.assign(W[:3]), dim=None)

    with fluid.program_guard(fluid.Program(), fluid.Program()):
        loss = build()
        out = fluid.Executor(fluid.CPUPlace()).run(
            feed={"x": lod_tensor(x, [[1, 3, 2]])}, fetch_list=[loss])[0]
    expected = 0.0
    for k, (a, b) in enumerate(((0, 1), (1, 4), (4, 6))):
        h = np.zeros(2)
        for row in x[a:b]:
            h = np.tanh(np.concatenate([row, h]) @ w)
        expected += (h * W[k]).sum()
    assert out[0] == pytest.approx(expected)
    check_program_gradient(build, {"x": x}, ["x"], lods={"x": [[1, 3, 2]]})


# --- feeding ------------------------------------------------------------------------------------
def test_data_feeder_nests_sequences_into_a_lod():
    words = L.data("words", [1], dtype="int64", lod_level=1)
    fed = fluid.DataFeeder([words], fluid.CPUPlace()).feed([([1, 2, 3],), ([4],)])
    assert np.array(fed["words"]).ravel().tolist() == [1, 2, 3, 4]
    assert fed["words"].lod() == [[0, 3, 4]]


def test_a_lod_batch_is_split_by_sequences_over_places(monkeypatch):
    monkeypatch.setenv("CPU_NUM", "2")
    x = L.data("x", [1], dtype="float32", lod_level=1)
    pooled = L.sequence_pool(x, "sum")
    loss = L.mean(pooled)
    compiled = fluid.CompiledProgram(fluid.default_main_program()).with_data_parallel(
        loss_name=loss.name)
    exe = fluid.Executor(fluid.CPUPlace())
    data = lod_tensor(np.arange(6, dtype="float32").reshape(6, 1), [[1, 2, 3]])
    (out,) = exe.run(compiled, feed={"x": data}, fetch_list=[pooled])
    # place 0 gets sequences 0-1 and place 1 sequence 2 (ceil(3 / 2) per place, as Paddle)
    assert np.asarray(out).ravel().tolist() == [0.0, 3.0, 12.0]
