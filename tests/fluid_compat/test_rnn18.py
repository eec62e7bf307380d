"""Fluid 1.8's RNN cell API (fluid.layers.RNNCell / GRUCell / LSTMCell / rnn) and
fluid.contrib.layers (BasicGRUUnit, BasicLSTMUnit, basic_gru, basic_lstm): values against
NumPy references of the GRU / LSTM equations in Paddle's gate order (GRU: r | u, then the
candidate from [x, r*h]; LSTM: i | j | f | o), and gradients through the time loop against
central finite differences (tests/opcheck.py)."""

import numpy as np
import pytest

import runtime as fluid
from opcheck import check_program_gradient

L = fluid.layers
C = fluid.contrib.layers


@pytest.fixture(autouse=True)
def fresh_programs():
    with fluid.program_guard(fluid.Program(), fluid.Program()), \
            fluid.scope_guard(fluid.Scope()), fluid.unique_name.guard():
        yield


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def gru_step(x, h, gate_w, gate_b, cand_w, cand_b):
    gates = _sigmoid(np.concatenate([x, h], 1) @ gate_w + gate_b)
    r, u = np.split(gates, 2, axis=1)
    c = np.tanh(np.concatenate([x, r * h], 1) @ cand_w + cand_b)
    return u * h + (1 - u) * c


def lstm_step(x, h, c, w, b, forget_bias=1.0):
    i, j, f, o = np.split(np.concatenate([x, h], 1) @ w + b, 4, axis=1)
    new_c = c * _sigmoid(f + forget_bias) + _sigmoid(i) * np.tanh(j)
    return np.tanh(new_c) * _sigmoid(o), new_c


def _params(names, rng):
    """Give the named parameters random values; returns them by name."""
    scope, values = fluid.global_scope(), {}
    for name in names:
        tensor = scope.find_var(name).get_tensor()
        values[name] = rng.uniform(-0.5, 0.5, np.array(tensor).shape).astype("float32")
        tensor.set(values[name], fluid.CPUPlace())
    return values


def _exe():
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(fluid.default_startup_program())
    return exe


def test_gru_cell_and_lstm_cell_one_step():
    rng = np.random.RandomState(0)
    x = fluid.data("x", [None, 3], "float32")
    h = fluid.data("h", [None, 4], "float32")
    c = fluid.data("c", [None, 4], "float32")
    gru_out, gru_state = L.GRUCell(4)(x, h)
    lstm_out, (lstm_h, lstm_c) = L.LSTMCell(4, forget_bias=0.5)(x, [h, c])
    exe = _exe()
    p = _params(["GRUCell/BasicGRUUnit_0.w_0", "GRUCell/BasicGRUUnit_0.b_0",
                 "GRUCell/BasicGRUUnit_0.w_1", "GRUCell/BasicGRUUnit_0.b_1",
                 "LSTMCell/BasicLSTMUnit_0.w_0", "LSTMCell/BasicLSTMUnit_0.b_0"], rng)
    feed = {k: rng.uniform(-1, 1, (2, 3 if k == "x" else 4)).astype("float32")
            for k in "xhc"}
    got = exe.run(feed=feed, fetch_list=[gru_out, gru_state, lstm_out, lstm_c])
    want_h = gru_step(feed["x"], feed["h"], p["GRUCell/BasicGRUUnit_0.w_0"],
                      p["GRUCell/BasicGRUUnit_0.b_0"], p["GRUCell/BasicGRUUnit_0.w_1"],
                      p["GRUCell/BasicGRUUnit_0.b_1"])
    want_lh, want_lc = lstm_step(feed["x"], feed["h"], feed["c"],
                                 p["LSTMCell/BasicLSTMUnit_0.w_0"],
                                 p["LSTMCell/BasicLSTMUnit_0.b_0"], forget_bias=0.5)
    for value, want in zip(got, [want_h, want_h, want_lh, want_lc]):
        np.testing.assert_allclose(value, want, rtol=1e-5, atol=1e-6)
    assert lstm_h is lstm_out


def test_cells_reject_non_variables_and_integer_dtypes():
    x = fluid.data("x", [None, 3], "float32")
    h = fluid.data("h", [None, 4], "float32")
    with pytest.raises(TypeError):
        L.GRUCell(4)(np.zeros((2, 3), "float32"), h)
    with pytest.raises(TypeError):
        L.LSTMCell(4)(x, (h, h))  # states must be a list
    with pytest.raises(TypeError):
        L.GRUCell(4, dtype="int32")
    with pytest.raises(TypeError):
        L.rnn(L.GRUCell(4), np.zeros((2, 5, 3), "float32"))


def _numpy_lstm_rnn(x, lengths, w, b, reverse=False):
    """Batch-major x [B, T, in]; sequences keep their state after their length."""
    batch, steps, _ = x.shape
    hidden = w.shape[1] // 4
    h, c = np.zeros((batch, hidden)), np.zeros((batch, hidden))
    outs = [None] * steps
    for t in (reversed(range(steps)) if reverse else range(steps)):
        new_h, new_c = lstm_step(x[:, t], h, c, w, b)
        mask = (t < lengths)[:, None]
        h, c = np.where(mask, new_h, h), np.where(mask, new_c, c)
        outs[t] = new_h
    return np.stack(outs, 1), h, c


@pytest.mark.parametrize("reverse", [False, True])
def test_rnn_with_an_lstm_cell_and_sequence_lengths(reverse):
    rng = np.random.RandomState(1)
    x = fluid.data("x", [None, None, 3], "float32")  # the length is unknown when building
    lengths = fluid.data("len", [None], "int64")
    out, (last_h, last_c) = L.rnn(L.LSTMCell(5, name="cell"), x, sequence_length=lengths,
                                  is_reverse=reverse)
    exe = _exe()
    p = _params(["cell/BasicLSTMUnit_0.w_0", "cell/BasicLSTMUnit_0.b_0"], rng)
    xs = rng.uniform(-1, 1, (3, 6, 3)).astype("float32")
    lens = np.array([6, 2, 4], "int64")
    got = exe.run(feed={"x": xs, "len": lens}, fetch_list=[out, last_h, last_c])
    want = _numpy_lstm_rnn(xs, lens, p["cell/BasicLSTMUnit_0.w_0"],
                           p["cell/BasicLSTMUnit_0.b_0"], reverse)
    for value, expected in zip(got, want):
        np.testing.assert_allclose(value, expected, rtol=1e-5, atol=1e-6)


def test_basic_gru_two_layers_bidirectional_time_major():
    rng = np.random.RandomState(2)
    hidden, layers_n = 4, 2
    x = fluid.data("x", [None, None, 3], "float32")
    out, last = C.basic_gru(x, None, hidden, num_layers=layers_n, bidirectional=True,
                            batch_first=False)
    exe = _exe()
    names = [f"basic_gru_{d}layers_{k}/BasicGRUUnit_0.{p}"
             for d in ("", "reverse_") for k in range(layers_n)
             for p in ("w_0", "b_0", "w_1", "b_1")]
    p = _params(names, rng)
    xs = rng.uniform(-1, 1, (5, 2, 3)).astype("float32")
    got_out, got_last = exe.run(feed={"x": xs}, fetch_list=[out, last])

    def direction(prefix, seq):
        finals = []
        for k in range(layers_n):
            params = [p[f"{prefix}{k}/BasicGRUUnit_0.{n}"] for n in ("w_0", "b_0", "w_1", "b_1")]
            h, outs = np.zeros((2, hidden)), []
            for x_t in seq:
                h = gru_step(x_t, h, *params)
                outs.append(h)
            seq, finals = outs, finals + [h]
        return np.stack(seq), finals

    fw_out, fw_last = direction("basic_gru_layers_", list(xs))
    bw_out, bw_last = direction("basic_gru_reverse_layers_", list(xs[::-1]))
    np.testing.assert_allclose(got_out, np.concatenate([fw_out, bw_out[::-1]], 2),
                               rtol=1e-5, atol=1e-6)
    want_last = np.stack([fw_last[0], bw_last[0], fw_last[1], bw_last[1]])
    np.testing.assert_allclose(got_last, want_last, rtol=1e-5, atol=1e-6)


def test_rnn_gradient_matches_finite_differences():
    def build():
        x = fluid.data("x", [2, 3, 2], "float64")
        h0 = fluid.data("h0", [2, 3], "float64")
        lengths = L.fill_constant([2], "int64", 2)
        out, last = L.rnn(L.GRUCell(3, dtype="float64"), x, initial_states=h0,
                          sequence_length=lengths)
        return L.reduce_sum(out * out) + L.reduce_sum(last)
    rng = np.random.RandomState(3)
    check_program_gradient(build, {"x": rng.uniform(-1, 1, (2, 3, 2)),
                                   "h0": rng.uniform(-1, 1, (2, 3))}, ["x", "h0"])


def test_basic_lstm_gradient_matches_finite_differences():
    def build():
        x = fluid.data("x", [3, 2, 2], "float64")
        out, last_h, last_c = C.basic_lstm(x, None, None, 2, batch_first=False,
                                           dtype="float64")
        return L.reduce_sum(out * out) + L.reduce_sum(last_c)
    check_program_gradient(build, {"x": np.random.RandomState(4).uniform(-1, 1, (3, 2, 2))},
                           ["x"])
