"""fluid.metrics, fluid.layers.auc, fluid.layers.detection_map and fluid.layers.IfElse (Fluid
1.8): the values Paddle gives on small known cases, state kept across runs, and IfElse's
gradient against central finite differences (tests/opcheck.py)."""

import numpy as np
import pytest

import runtime as fluid
from opcheck import check_program_gradient

L = fluid.layers

# Paddle's docstring example for Precision/Recall/CompositeMetric
PREDS = np.array([[0.1], [0.7], [0.8], [0.9], [0.2], [0.2], [0.3], [0.5], [0.8], [0.6]])
LABELS = np.array([[0], [1], [1], [1], [1], [0], [0], [0], [0], [0]])


@pytest.fixture(autouse=True)
def fresh_programs():
    with fluid.program_guard(fluid.Program(), fluid.Program()), fluid.scope_guard(fluid.Scope()):
        yield


def _exe():
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(fluid.default_startup_program())
    return exe


def _lod(array, lengths):
    tensor = fluid.LoDTensor()
    tensor.set(np.asarray(array, dtype=np.float32))
    tensor.set_recursive_sequence_lengths([lengths])
    return tensor


# --- Python metrics ---------------------------------------------------------------------------
def test_precision_recall_and_composite():
    comp = fluid.metrics.CompositeMetric()
    precision, recall = fluid.metrics.Precision(), fluid.metrics.Recall()
    comp.add_metric(precision)
    comp.add_metric(recall)
    comp.update(preds=PREDS, labels=LABELS)
    got_p, got_r = comp.eval()
    assert got_p == pytest.approx(3 / 5) and got_r == pytest.approx(3 / 4)
    assert (precision.tp, precision.fp, recall.fn) == (3, 2, 1)
    with pytest.raises(ValueError):
        comp.add_metric(object())
    with pytest.raises(ValueError):
        precision.update([0.5], LABELS)
    precision.reset()
    assert (precision.tp, precision.fp) == (0, 0) and precision.eval() == 0.0


def test_accuracy_is_weighted_and_resets():
    acc = fluid.metrics.Accuracy()
    acc.update(value=0.9, weight=128)
    acc.update(value=0.8, weight=128)
    assert acc.eval() == pytest.approx(0.85)
    config = acc.get_config()
    assert config["name"] == "Accuracy" and config["states"]["weight"] == 256
    acc.reset()
    assert (acc.value, acc.weight) == (0.0, 0.0)
    with pytest.raises(ValueError):
        acc.eval()
    with pytest.raises(ValueError):
        acc.update(value=0.5, weight=-1)
    with pytest.raises(ValueError):
        acc.update(value="x", weight=1)


def test_chunk_evaluator():
    metric = fluid.metrics.ChunkEvaluator()
    metric.update(10, 9, 8)
    p, r, f1 = metric.eval()
    assert p == pytest.approx(0.8) and r == pytest.approx(8 / 9)
    assert f1 == pytest.approx(2 * 0.8 * (8 / 9) / (0.8 + 8 / 9))
    metric.update(3, 3, 3)
    assert metric.eval()[0] == pytest.approx(11 / 13)
    assert fluid.metrics.ChunkEvaluator().eval() == (0, 0, 0)


def test_edit_distance():
    metric = fluid.metrics.EditDistance("ed")
    with pytest.raises(ValueError):
        metric.eval()
    metric.update(np.array([[0], [2], [1], [0]]), 4)
    avg, wrong = metric.eval()
    assert avg == pytest.approx(0.75) and wrong == pytest.approx(0.5)
    assert str(metric) == "ed"


def test_auc_metric_known_value():
    metric = fluid.metrics.Auc("auc")
    positive = np.array([0.1, 0.4, 0.35, 0.8])
    metric.update(np.stack([1 - positive, positive], axis=1), np.array([[0], [0], [1], [1]]))
    assert metric.eval() == pytest.approx(0.75)  # sklearn's roc_auc_score on these
    metric.update(np.array([[0.5, 0.5]]), np.array([[1]]))
    assert 0 < metric.eval() < 1


def test_metric_base_is_abstract():
    base = fluid.metrics.MetricBase("m")
    with pytest.raises(NotImplementedError):
        base.update(None, None)
    with pytest.raises(NotImplementedError):
        base.eval()


# --- layers.auc ---------------------------------------------------------------------------------
def _auc_program(slide_steps=1):
    predict = L.data(name="predict", shape=[2], dtype="float32")
    label = L.data(name="label", shape=[1], dtype="int64")
    return L.auc(input=predict, label=label, slide_steps=slide_steps)


def _batch(seed, n=16):
    rng = np.random.default_rng(seed)
    positive = rng.uniform(0, 1, n).astype(np.float32)
    label = rng.integers(0, 2, (n, 1)).astype(np.int64)
    return np.stack([1 - positive, positive], axis=1), label


def _python_auc(batches):
    metric = fluid.metrics.Auc("ref")
    for predict, label in batches:
        metric.update(predict, label)
    return metric.eval()


def test_layers_auc_states_and_shapes():
    global_auc, batch_auc, states = _auc_program(slide_steps=1)
    assert global_auc.dtype == np.float64 and batch_auc.dtype == np.float64
    assert [tuple(s.shape) for s in states] == [(2 * 4096 + 1,), (2 * 4096 + 1,),
                                                (1, 4096), (1, 4096)]
    assert all(s.persistable for s in states)
    ops = [op for op in fluid.default_main_program().global_block().ops if op.type == "auc"]
    assert [op.attrs["slide_steps"] for op in ops] == [1, 0]


def test_layers_auc_global_accumulates_batch_slides():
    global_auc, batch_auc, states = _auc_program(slide_steps=1)
    exe = _exe()
    batches = [_batch(s) for s in range(3)]
    for i, (predict, label) in enumerate(batches):
        g, b, pos = exe.run(feed={"predict": predict, "label": label},
                            fetch_list=[global_auc, batch_auc, states[2]])
        assert g[0] == pytest.approx(_python_auc(batches[:i + 1]), rel=1e-12)
        assert b[0] == pytest.approx(_python_auc(batches[i:i + 1]), rel=1e-12)
        assert pos.sum() == sum(int(lab.sum()) for _, lab in batches[:i + 1])


def test_layers_auc_slide_steps_window():
    _, batch_auc, states = _auc_program(slide_steps=2)
    exe = _exe()
    batches = [_batch(s) for s in range(4)]
    for i, (predict, label) in enumerate(batches):
        b, stat = exe.run(feed={"predict": predict, "label": label},
                          fetch_list=[batch_auc, states[0]])
        assert b[0] == pytest.approx(_python_auc(batches[max(0, i - 1):i + 1]), rel=1e-12)
        assert stat[-1] == i + 1  # the step counter


def test_layers_auc_checks_dtypes():
    predict = L.data(name="p", shape=[2], dtype="float32")
    with pytest.raises(TypeError):
        L.auc(input=predict, label=L.data(name="l", shape=[1], dtype="float32"))


# --- detection_map / DetectionMAP ---------------------------------------------------------------
# two images; class 1: found (0.9), found again (0.8, a false positive), found in image 2 (0.6);
# class 2: missed (0.7), and detected in image 2 which has no class-2 ground truth (0.5)
GT_LABEL = np.array([[1], [2], [1]])
GT_BOX = np.array([[.1, .1, .3, .3], [.5, .5, .8, .8], [.2, .2, .4, .4]])
DETS = np.array([[1, .9, .1, .1, .3, .3], [1, .8, .1, .1, .3, .3], [2, .7, 0, 0, .1, .1],
                 [1, .6, .2, .2, .4, .4], [2, .5, .5, .5, .8, .8]])
FEED = {"detect_res": _lod(DETS, [3, 2]), "label": _lod(GT_LABEL, [2, 1]),
        "bbox": _lod(GT_BOX, [2, 1])}
INTEGRAL = (0.5 + (2 / 3) * 0.5) / 2  # AP(1) = 0.8333, AP(2) = 0
ELEVEN_POINT = (6 + 5 * (2 / 3)) / 11 / 2


def _map_eval(ap_version="integral"):
    detect = L.data(name="detect_res", shape=[6], dtype="float32", lod_level=1)
    label = L.data(name="label", shape=[1], dtype="float32", lod_level=1)
    box = L.data(name="bbox", shape=[4], dtype="float32", lod_level=1)
    return fluid.metrics.DetectionMAP(detect, label, box, class_num=3,
                                      overlap_threshold=0.5, ap_version=ap_version)


@pytest.mark.parametrize("ap_version,expected", [("integral", INTEGRAL),
                                                 ("11point", ELEVEN_POINT)])
def test_detection_map_batch_value(ap_version, expected):
    cur, accum = _map_eval(ap_version).get_map_var()
    got = _exe().run(feed=FEED, fetch_list=[cur, accum])
    assert got[0][0] == pytest.approx(expected, rel=1e-6)
    assert got[1][0] == pytest.approx(expected, rel=1e-6)


def test_detection_map_accumulates_and_resets():
    evaluator = _map_eval()
    cur, accum = evaluator.get_map_var()
    exe = _exe()
    exe.run(feed=FEED, fetch_list=[accum])
    got = exe.run(feed=FEED, fetch_list=[cur, accum])
    # twice the same batch: class 1 has 4 positives, hits ranked 1,1,0,0,1,1
    assert got[0][0] == pytest.approx(INTEGRAL, rel=1e-6)
    assert got[1][0] == pytest.approx((0.25 + 0.25 + 0.6 * 0.25 + (4 / 6) * 0.25) / 2,
                                      rel=1e-6)
    evaluator.reset(exe)
    got = exe.run(feed=FEED, fetch_list=[accum])
    assert got[0][0] == pytest.approx(INTEGRAL, rel=1e-6)


# --- IfElse -------------------------------------------------------------------------------------
def _ifelse(x, label):
    limit = L.fill_constant(shape=[1], dtype="int64", value=5)
    ie = L.IfElse(L.less_than(x=label, y=limit))
    with ie.true_block():
        ie.output(L.scale(ie.input(x), scale=2.0))
    with ie.false_block():
        part = ie.input(x)
        ie.output(part * part)
    return ie()


def test_ifelse_selects_rows():
    x = L.data(name="x", shape=[3], dtype="float32")
    label = L.data(name="label", shape=[1], dtype="int64")
    out, = _ifelse(x, label)
    xs = np.arange(12, dtype=np.float32).reshape(4, 3)
    labels = np.array([[1], [7], [3], [9]], dtype=np.int64)
    got, = _exe().run(feed={"x": xs, "label": labels}, fetch_list=[out])
    expected = np.where(labels < 5, 2 * xs, xs * xs)
    np.testing.assert_allclose(got, expected)


def test_ifelse_all_rows_one_way():
    x = L.data(name="x", shape=[2], dtype="float32")
    label = L.data(name="label", shape=[1], dtype="int64")
    out, = _ifelse(x, label)
    xs = np.ones((3, 2), np.float32)
    got, = _exe().run(feed={"x": xs, "label": np.zeros((3, 1), np.int64)}, fetch_list=[out])
    np.testing.assert_allclose(got, 2 * xs)


def test_ifelse_gradient():
    def build():
        x = L.data(name="x", shape=[3], dtype="float64")
        label = L.data(name="label", shape=[1], dtype="int64")
        out, = _ifelse(x, label)
        return L.reshape(L.reduce_sum(out * out), [1])

    rng = np.random.default_rng(3)
    feed = {"x": rng.uniform(-1, 1, (5, 3)), "label": np.array([[1], [8], [2], [6], [4]])}
    check_program_gradient(build, feed, ["x"])


def test_ifelse_misuse():
    x = L.data(name="x", shape=[2], dtype="float32")
    label = L.data(name="label", shape=[1], dtype="int64")
    cond = L.less_than(x=label, y=L.fill_constant(shape=[1], dtype="int64", value=5))
    ie = L.IfElse(cond)
    with pytest.raises(ValueError):
        ie.input(x)
    with pytest.raises(ValueError):
        ie.output(x)
    with pytest.raises(ValueError):
        ie()
    with pytest.raises(ValueError, match="Must set output"):
        with ie.true_block():
            ie.input(x)
    with pytest.raises(TypeError):
        L.IfElse(np.zeros(2))
