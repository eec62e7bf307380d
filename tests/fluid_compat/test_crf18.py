"""linear_chain_crf and crf_decoding (Fluid 1.8) against brute force over every tagging of
small sequences: the loss is -log P(label) with scores start[y0] + sum x[k, yk] +
sum trans[yk, yk+1] + end[ylast] (Transition rows: start, end, then tag-to-tag), one per
sequence; the decoding is the best tagging; gradients against central finite differences."""

import itertools

import numpy as np
import pytest

import runtime as fluid
from runtime.layer_helper import LayerHelper
from opcheck import check_program_gradient

D = 3
LENS = [2, 0, 4, 1]
ROWS = sum(LENS)
R = np.random.default_rng(9)


def _score(x, w, tags):
    s = w[0, tags[0]] + w[1, tags[-1]] + sum(x[k, t] for k, t in enumerate(tags))
    return s + sum(w[2 + a, b] for a, b in zip(tags[:-1], tags[1:]))


def _brute(x, w, labels):
    nll, best, start = [], [], 0
    for n in LENS:
        seq = x[start:start + n]
        if n == 0:
            nll.append(0.0)
            continue
        scores = {t: _score(seq, w, t) for t in itertools.product(range(D), repeat=n)}
        top = max(scores.values())
        log_z = top + np.log(sum(np.exp(v - top) for v in scores.values()))
        nll.append(log_z - scores[tuple(labels[start:start + n])])
        best += list(max(scores, key=scores.get))
        start += n
    return np.array(nll).reshape(-1, 1), np.array(best).reshape(-1, 1)


def _feed():
    return {"x": R.normal(0, 1, (ROWS, D)), "w": R.normal(0, 1, (D + 2, D)),
            "label": R.integers(0, D, (ROWS, 1))}


def test_layers_match_brute_force():
    feed = _feed()
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = fluid.layers.data("x", [D], dtype="float64", lod_level=1)
        label = fluid.layers.data("label", [1], dtype="int64", lod_level=1)
        attr = fluid.ParamAttr(name="crfw",
                               initializer=fluid.initializer.NumpyArrayInitializer(feed["w"]))
        cost = fluid.layers.linear_chain_crf(x, label, param_attr=attr)
        path = fluid.layers.crf_decoding(x, param_attr=fluid.ParamAttr(name="crfw"))
        hits = fluid.layers.crf_decoding(x, param_attr=fluid.ParamAttr(name="crfw"),
                                         label=label)
    assert [p.name for p in main.all_parameters()] == ["crfw"]
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    lod = [LENS]
    got_cost, got_path, got_hits = exe.run(
        main, feed={"x": fluid.create_lod_tensor(feed["x"], lod, fluid.CPUPlace()),
                    "label": fluid.create_lod_tensor(feed["label"], lod, fluid.CPUPlace())},
        fetch_list=[cost, path, hits], return_numpy=False)
    got_cost, got_path, got_hits = (np.array(t) for t in (got_cost, got_path, got_hits))
    want_cost, want_path = _brute(feed["x"], feed["w"], feed["label"].ravel())
    np.testing.assert_allclose(got_cost, want_cost, rtol=1e-9)
    np.testing.assert_array_equal(got_path, want_path)
    np.testing.assert_array_equal(got_hits, (want_path == feed["label"]).astype(np.int64))


@pytest.mark.parametrize("seed", [0, 1])
def test_linear_chain_crf_gradients(seed):
    feed = _feed()
    weights = np.random.default_rng(seed).normal(0, 1, (len(LENS), 1))

    def build():
        x = fluid.data("x", [ROWS, D], "float64", lod_level=1)
        w = fluid.data("w", [D + 2, D], "float64")
        label = fluid.data("label", [ROWS, 1], "int64", lod_level=1)
        helper = LayerHelper("linear_chain_crf")
        outs = {k: helper.create_variable_for_type_inference("float64")
                for k in ("Alpha", "EmissionExps", "TransitionExps", "LogLikelihood")}
        helper.append_op("linear_chain_crf", inputs={"Emission": x, "Transition": w,
                                                     "Label": label}, outputs=outs)
        return fluid.layers.reduce_sum(outs["LogLikelihood"] * fluid.layers.assign(weights))

    check_program_gradient(build, feed, ["x", "w"], lods={"x": [LENS], "label": [LENS]},
                           rtol=1e-6, atol=1e-8)
