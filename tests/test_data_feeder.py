"""fluid.DataFeeder: minibatches of samples -> feed dicts (stacking, dtypes, shapes inferred
from samples), its error messages, feed_parallel and decorate_reader."""

import numpy as np
import pytest

import runtime as fluid
from runtime.errors import FeedError


@pytest.fixture
def prog():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        img = fluid.layers.data("img", [1, 2, 3])
        label = fluid.layers.data("label", [1], dtype="int64")
        tokens = fluid.data("tokens", [None, -1], dtype="int64")
        grid = fluid.data("grid", [None, -1, -1])
    return main, startup, {"img": img, "label": label, "tokens": tokens, "grid": grid}


def feeder(prog, *names):
    main, _, vars_ = prog
    return fluid.DataFeeder([vars_[n] for n in names], fluid.CPUPlace(), main)


def test_stacks_each_slot_with_the_variables_dtype_and_shape(prog):
    f = feeder(prog, "img", "label")
    out = f.feed([(np.arange(6), 1), (np.ones((1, 2, 3)), 2), (list(range(6)), 0)])
    assert set(out) == {"img", "label"}
    assert out["img"].shape == (3, 1, 2, 3) and out["img"].dtype == np.float32
    np.testing.assert_array_equal(out["img"][0].ravel(), np.arange(6))
    assert out["label"].shape == (3, 1) and out["label"].dtype == np.int64  # scalars -> [b, 1]
    np.testing.assert_array_equal(out["label"].ravel(), [1, 2, 0])


def test_feed_list_may_name_variables_of_the_program_or_the_default_program(prog):
    main, startup, _ = prog
    by_name = fluid.DataFeeder(["label", "img"], fluid.CPUPlace(), program=main)
    assert by_name.feed_names == ["label", "img"]
    assert by_name.feed([(3, np.zeros(6))])["label"].tolist() == [[3]]
    with fluid.program_guard(main, startup):
        default = fluid.DataFeeder(["label"], fluid.CPUPlace())
    assert default.feed([(4,)])["label"].tolist() == [[4]]


def test_unknown_name_suggests_a_close_one(prog):
    with pytest.raises(FeedError, match=r"'lable'.*did you mean 'label'"):
        fluid.DataFeeder(["lable"], fluid.CPUPlace(), program=prog[0])


def test_unknown_dims_are_inferred_from_the_samples(prog):
    out = feeder(prog, "tokens", "grid").feed([([1, 2, 3], np.ones((2, 4))),
                                               ([4, 5, 6], np.zeros((2, 4)))])
    assert out["tokens"].shape == (2, 3) and out["tokens"].dtype == np.int64
    assert out["grid"].shape == (2, 2, 4)


def test_one_variable_samples_may_be_bare_values(prog):
    out = feeder(prog, "label").feed([1, 2, 3])
    assert out["label"].tolist() == [[1], [2], [3]]


def test_feeds_train_a_program():
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 3
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.layers.data("x", [4])
        y = fluid.layers.data("y", [1], dtype="int64")
        loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(
            fluid.layers.fc(x, 2), y))
        fluid.optimizer.Momentum(0.1, 0.9).minimize(loss)
    rng = np.random.default_rng(0)
    samples = [(rng.normal(size=4).tolist(), int(i % 2)) for i in range(16)]
    samples = [(np.array(f) + 2 * lab, lab) for f, lab in samples]
    f = fluid.DataFeeder([x, y], fluid.CPUPlace())
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    losses = [exe.run(main, feed=f.feed(samples), fetch_list=[loss], scope=scope)[0][0]
              for _ in range(20)]
    assert losses[-1] < 0.5 * losses[0]


# --- errors ----------------------------------------------------------------------------------
def test_wrong_number_of_fields_names_the_sample_and_the_variables(prog):
    with pytest.raises(FeedError, match=r"sample 1 has 1 field\(s\) but there are 2 feed "
                                        r"variables \['img', 'label'\]"):
        feeder(prog, "img", "label").feed([(np.zeros(6), 1), (np.zeros(6),)])


def test_a_sample_that_does_not_fit_names_sample_variable_and_shapes(prog):
    with pytest.raises(FeedError, match=r"sample 2, variable 'img': a field of shape \[5\] "
                                        r"\(5 values\) does not fit .* \[1, 2, 3\]"):
        feeder(prog, "img").feed([(np.zeros(6),), (np.zeros(6),), (np.zeros(5),)])
    with pytest.raises(FeedError, match=r"sample 0, variable 'label'.*\[2\]"):
        feeder(prog, "label").feed([([1, 2],)])
    with pytest.raises(FeedError, match=r"sample 0, variable 'grid'.*\[6\]"):
        feeder(prog, "grid").feed([(np.zeros(6),)])  # two unknown dims: needs a 2-D field


def test_ragged_samples_are_refused_with_a_padding_hint(prog):
    with pytest.raises(FeedError, match=r"'tokens' got ragged samples: sample 0 has shape "
                                        r"\[3\] but sample 1 has \[2\].*Pad"):
        feeder(prog, "tokens").feed([([1, 2, 3],), ([4, 5],)])
    with pytest.raises(FeedError, match=r"sample 0, variable 'grid': cannot convert"):
        feeder(prog, "grid").feed([([[1, 2], [3]],)])  # ragged inside one field


def test_unconvertible_values_name_the_sample_and_dtype(prog):
    with pytest.raises(FeedError, match=r"sample 0, variable 'label': cannot convert the "
                                        r"field to int64"):
        feeder(prog, "label").feed([("cat",)])


def test_a_sample_that_is_not_a_tuple_with_several_variables(prog):
    with pytest.raises(FeedError, match=r"sample 0 is a int, not a tuple/list"):
        feeder(prog, "img", "label").feed([3])


def test_empty_minibatch_and_fixed_batch_dimension(prog):
    with pytest.raises(FeedError, match="empty"):
        feeder(prog, "label").feed([])
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        fixed = fluid.data("fixed", [2, 3])
    with pytest.raises(FeedError, match=r"fixed batch dimension of 2 but the minibatch has 3"):
        fluid.DataFeeder([fixed], fluid.CPUPlace(), main).feed([(np.zeros(3),)] * 3)


def test_lod_variables_get_a_lod_tensor_as_in_fluid():
    # Paddle 1.8 semantics (issue 27): nested sequences become rows and a LoD; this runtime
    # used to refuse lod_level > 0
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        words = fluid.layers.data("words", [1], dtype="int64", lod_level=1)
        nested = fluid.layers.data("nested", [2], dtype="float32", lod_level=2)
    fed = fluid.DataFeeder([words, nested], fluid.CPUPlace(), main).feed(
        [([3, 1, 4], [[[1, 2]], [[3, 4], [5, 6]]]), ([5], [[[7, 8]]])])
    assert np.array(fed["words"]).tolist() == [[3], [1], [4], [5]]
    assert fed["words"].recursive_sequence_lengths() == [[3, 1]]
    assert np.array(fed["nested"]).shape == (4, 2)
    assert fed["nested"].recursive_sequence_lengths() == [[2, 1], [1, 2, 1]]


def test_feed_list_must_be_a_list():
    with pytest.raises(TypeError, match="feed_list must be a list"):
        fluid.DataFeeder("x", fluid.CPUPlace())


# --- several places --------------------------------------------------------------------------
def test_feed_parallel_gives_one_dict_per_place(prog, monkeypatch):
    f = feeder(prog, "label")
    parts = f.feed_parallel([[1, 2], [3]], num_places=2)
    assert [p["label"].tolist() for p in parts] == [[[1], [2]], [[3]]]
    monkeypatch.setenv("CPU_NUM", "3")
    assert len(f.feed_parallel([[1], [2], [3]])) == 3
    with pytest.raises(FeedError, match=r"got 2 minibatch\(es\) for 3 place\(s\)"):
        f.feed_parallel([[1], [2]])


def test_decorate_reader_single_and_multi_device(prog):
    f = feeder(prog, "label")

    def minibatches():
        for start in range(0, 10, 2):
            yield [start, start + 1]
    single = list(f.decorate_reader(minibatches, multi_devices=False)())
    assert len(single) == 5 and single[4]["label"].tolist() == [[8], [9]]
    multi = list(f.decorate_reader(minibatches, multi_devices=True, num_places=2)())
    assert len(multi) == 2 and [len(m) for m in multi] == [2, 2]  # the 5th batch is dropped
    assert multi[1][1]["label"].tolist() == [[6], [7]]
    with pytest.raises(ValueError, match=r"1 minibatch\(es\) are left over for 2 places"):
        list(f.decorate_reader(minibatches, True, num_places=2, drop_last=False)())
