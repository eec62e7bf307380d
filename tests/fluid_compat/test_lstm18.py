"""layers.dynamic_lstm and its `lstm` op (Fluid 1.8) against a NumPy LSTM written per
sequence from Paddle's definition (gate columns: candidate, input, forget, output; peephole
weights after the 4H gate biases; H0/C0 per sequence; is_reverse from each sequence's end),
and the op's gradients for every input against central finite differences."""

import numpy as np
import pytest

import runtime as fluid
from runtime.initializer import NumpyArrayInitializer
from runtime.layer_helper import LayerHelper
from opcheck import check_program_gradient

H = 3
LENS = [3, 0, 1, 4]
ROWS = sum(LENS)
R = np.random.default_rng(5)


def _sig(x):
    return 1.0 / (1.0 + np.exp(-x))


def _reference(x, w, b, h0, c0, peep, reverse, cell_act=np.tanh):
    hidden, cell = np.zeros((ROWS, H)), np.zeros((ROWS, H))
    start = 0
    for s, n in enumerate(LENS):
        h, c = h0[s].copy(), c0[s].copy()
        order = range(start + n - 1, start - 1, -1) if reverse else range(start, start + n)
        for row in order:
            g = x[row] + h @ w + b[0, :4 * H]
            ci, cf, co = (b[0, (4 + k) * H:(5 + k) * H] if peep else 0.0 for k in range(3))
            i = _sig(g[H:2 * H] + c * ci)
            f = _sig(g[2 * H:3 * H] + c * cf)
            c = np.tanh(g[:H]) * i + c * f
            o = _sig(g[3 * H:] + c * co)
            h = o * cell_act(c)
            hidden[row], cell[row] = h, c
        start += n
    return hidden, cell


@pytest.mark.parametrize("peep,reverse", [(True, False), (False, True)])
def test_dynamic_lstm_matches_numpy(peep, reverse):
    x = R.normal(0, 1, (ROWS, 4 * H))
    w = R.normal(0, 0.5, (H, 4 * H))
    b = R.normal(0, 0.5, (1, 7 * H if peep else 4 * H))
    h0, c0 = R.normal(0, 1, (len(LENS), H)), R.normal(0, 1, (len(LENS), H))
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        xv = fluid.layers.data("x", [4 * H], dtype="float64", lod_level=1)
        h0v = fluid.layers.data("h0", [H], dtype="float64")
        c0v = fluid.layers.data("c0", [H], dtype="float64")
        hidden, cell = fluid.layers.dynamic_lstm(
            xv, 4 * H, h_0=h0v, c_0=c0v, use_peepholes=peep, is_reverse=reverse,
            dtype="float64", param_attr=fluid.ParamAttr(initializer=NumpyArrayInitializer(w)),
            bias_attr=fluid.ParamAttr(initializer=NumpyArrayInitializer(b)))
    assert [p.name for p in main.all_parameters()] == ["lstm_0.w_0", "lstm_0.b_0"]
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    feed = {"x": fluid.create_lod_tensor(x, [LENS], fluid.CPUPlace()), "h0": h0, "c0": c0}
    got_h, got_c = exe.run(main, feed=feed, fetch_list=[hidden, cell], return_numpy=False)
    want_h, want_c = _reference(x, w, b, h0, c0, peep, reverse)
    np.testing.assert_allclose(np.array(got_h), want_h, rtol=1e-10)
    np.testing.assert_allclose(np.array(got_c), want_c, rtol=1e-10)
    assert got_h.lod() == [[0, 3, 3, 4, 8]]


@pytest.mark.parametrize("peep,reverse,acts", [
    (True, False, ("sigmoid", "tanh", "tanh")),
    (False, True, ("sigmoid", "tanh", "tanh")),
    (True, True, ("tanh", "identity", "sigmoid"))])
def test_lstm_op_gradients(peep, reverse, acts):
    feed = {"x": R.normal(0, 1, (ROWS, 4 * H)), "w": R.normal(0, 0.5, (H, 4 * H)),
            "b": R.normal(0, 0.5, (1, 7 * H if peep else 4 * H)),
            "h0": R.normal(0, 1, (len(LENS), H)), "c0": R.normal(0, 1, (len(LENS), H))}
    weights = R.normal(0, 1, (2, ROWS, H))

    def build():
        v = {k: fluid.data(k, list(a.shape), "float64", lod_level=1 if k == "x" else 0)
             for k, a in feed.items()}
        helper = LayerHelper("lstm")
        outs = {k: helper.create_variable_for_type_inference("float64")
                for k in ("Hidden", "Cell", "BatchGate", "BatchCellPreAct")}
        helper.append_op("lstm", inputs={"Input": v["x"], "Weight": v["w"], "Bias": v["b"],
                                         "H0": v["h0"], "C0": v["c0"]}, outputs=outs,
                         attrs={"use_peepholes": peep, "is_reverse": reverse,
                                "gate_activation": acts[0], "cell_activation": acts[1],
                                "candidate_activation": acts[2]})
        wh = fluid.layers.assign(weights[0])
        wc = fluid.layers.assign(weights[1])
        return fluid.layers.reduce_sum(outs["Hidden"] * wh + outs["Cell"] * wc)

    check_program_gradient(build, feed, ["x", "w", "b", "h0", "c0"], lods={"x": [LENS]},
                           rtol=1e-5, atol=1e-7)
