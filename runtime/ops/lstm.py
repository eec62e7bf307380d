"""lstm: Fluid 1.8's LSTM over LoD sequences (what layers.dynamic_lstm appends).

Input [rows, 4H] holds each step's projected input (one LoD level splits the rows into
sequences); Weight [H, 4H] the recurrent weights; Bias [1, 4H], or [1, 7H] with peepholes
(then its last 3H are the peephole weights W_ic, W_fc, W_oc). The 4H columns are, in order,
the candidate, input gate, forget gate and output gate (Paddle's layout). Per step, with
g = Input[row] + h_prev @ Weight + Bias[:4H]:

    c~ = act_cand(g_c)           i = act_gate(g_i + c_prev * W_ic)
    f = act_gate(g_f + c_prev * W_fc)
    c = c~ * i + c_prev * f      o = act_gate(g_o + c * W_oc)       h = o * act_cell(c)

h and c start from H0 / C0 ([sequences, H], in the LoD's order) or zeros; is_reverse runs each
sequence from its last row. Hidden and Cell are [rows, H] with Input's LoD. BatchGate holds the
activated gates and BatchCellPreAct c, per row in Input's order (Paddle keeps them in its
length-sorted batch order; both are intermediates). The gradient is hand-written
back-propagation through time over the same steps.
"""

import numpy as np

from ..lod import lod_of, with_lod
from .fluid18_more import _host
from .registry import defop

_ACTS = {
    "sigmoid": (lambda x: 1.0 / (1.0 + np.exp(-x)), lambda y: y * (1.0 - y)),
    "tanh": (np.tanh, lambda y: 1.0 - y * y),
    "relu": (lambda x: np.maximum(x, 0.0), lambda y: (y > 0).astype(y.dtype)),
    "identity": (lambda x: x, np.ones_like),
}

lstm = defop("lstm", inputs=("Input", "H0?", "C0?", "Weight", "Bias"),
             outputs=("Hidden", "Cell", "BatchGate", "BatchCellPreAct"),
             attrs={"use_peepholes": True, "is_reverse": False, "is_test": False,
                    "gate_activation": "sigmoid", "cell_activation": "tanh",
                    "candidate_activation": "tanh"})


@lstm.infer
def _lstm_shape(ic):
    x, w, b = ic.input("Input"), ic.input("Weight"), ic.input("Bias")
    ic.check(len(x.shape) == 2, f"{ic.describe('Input')} must be 2-D [rows, 4 * hidden]")
    ic.check(len(w.shape) == 2 and w.shape[1] == 4 * w.shape[0],
             f"{ic.describe('Weight')} must be [hidden, 4 * hidden]")
    size = w.shape[0]
    ic.check(x.shape[1] < 0 or x.shape[1] == 4 * size,
             f"{ic.describe('Input')} has {x.shape[1]} columns; Weight {list(w.shape)} needs "
             f"4 * {size}")
    width = 7 * size if ic.attr("use_peepholes") else 4 * size
    ic.check(list(b.shape) == [1, width],
             f"{ic.describe('Bias')} must be [1, {width}] (use_peepholes="
             f"{ic.attr('use_peepholes')})")
    for act in ("gate_activation", "cell_activation", "candidate_activation"):
        ic.check(ic.attr(act) in _ACTS, f"{act}={ic.attr(act)!r}: one of {sorted(_ACTS)}")
    for out, cols in (("Hidden", size), ("Cell", size), ("BatchGate", 4 * size),
                      ("BatchCellPreAct", size)):
        ic.set_output(out, [x.shape[0], cols], x.dtype, lod_level=x.lod_level)


def _steps(x, reverse):
    """[(rows, sequences)] per time step: the row each active sequence reads at step t."""
    lod = lod_of(x)
    if not lod:
        raise ValueError("lstm: Input has no LoD; feed a LoDTensor with the sequence lengths")
    bounds = np.asarray(lod[-1], dtype=np.int64)
    if bounds[-1] != x.shape[0]:
        raise ValueError(f"lstm: the LoD {lod} does not end at the {x.shape[0]} rows of Input")
    starts, lens = bounds[:-1], np.diff(bounds)
    steps = []
    for t in range(int(lens.max()) if len(lens) else 0):
        seqs = np.flatnonzero(lens > t)
        rows = (starts[seqs] + lens[seqs] - 1 - t) if reverse else starts[seqs] + t
        steps.append((rows, seqs))
    return lod, len(lens), steps


def _parts(attrs, bias, size):
    peep = attrs["use_peepholes"]
    b = bias.reshape(-1)
    checks = (b[4 * size:5 * size], b[5 * size:6 * size], b[6 * size:7 * size]) if peep \
        else (None, None, None)
    return b[:4 * size], checks


def _forward(ins, attrs):
    """Per row: the activated gates [rows, 4H], c, c_prev, h_prev and h."""
    x, w, bias = (_host(ins[k]) for k in ("Input", "Weight", "Bias"))
    size = w.shape[0]
    lod, n, steps = _steps(ins["Input"], attrs["is_reverse"])
    gate_bias, (ci, cf, co) = _parts(attrs, bias, size)
    act_g, act_c, act_n = (_ACTS[attrs[k]][0] for k in
                           ("gate_activation", "cell_activation", "candidate_activation"))
    h0, c0 = ins.get("H0"), ins.get("C0")
    h = np.zeros((n, size), x.dtype) if h0 is None else _host(h0).astype(x.dtype)
    c = np.zeros((n, size), x.dtype) if c0 is None else _host(c0).astype(x.dtype)
    rows_n = x.shape[0]
    saved = {k: np.zeros((rows_n, size), x.dtype) for k in ("c", "c_prev", "h_prev", "h")}
    gates = np.zeros((rows_n, 4 * size), x.dtype)
    for rows, seqs in steps:
        g = x[rows] + h[seqs] @ w + gate_bias
        cand = act_n(g[:, :size])
        c_prev = c[seqs]
        gi, gf, go = g[:, size:2 * size], g[:, 2 * size:3 * size], g[:, 3 * size:]
        i = act_g(gi + c_prev * ci if ci is not None else gi)
        f = act_g(gf + c_prev * cf if cf is not None else gf)
        c_new = cand * i + c_prev * f
        o = act_g(go + c_new * co if co is not None else go)
        h_new = o * act_c(c_new)
        gates[rows] = np.concatenate([cand, i, f, o], axis=1)
        saved["c"][rows], saved["c_prev"][rows] = c_new, c_prev
        saved["h_prev"][rows], saved["h"][rows] = h[seqs], h_new
        c[seqs], h[seqs] = c_new, h_new
    return lod, n, steps, gates, saved


@lstm.kernel
def _lstm(ctx, ins, attrs):
    lod, _, _, gates, saved = _forward(ins, attrs)
    xp = ctx.xp
    return {"Hidden": with_lod(xp.asarray(saved["h"]), lod),
            "Cell": with_lod(xp.asarray(saved["c"]), lod),
            "BatchGate": with_lod(xp.asarray(gates), lod),
            "BatchCellPreAct": with_lod(xp.asarray(saved["c"]), lod)}


@lstm.grad(uses=("Input", "H0", "C0", "Weight", "Bias"))
def _lstm_grad(ctx, ins, attrs):
    lod, n, steps, gates, saved = _forward(ins, attrs)
    x, w, bias = (_host(ins[k]) for k in ("Input", "Weight", "Bias"))
    size = w.shape[0]
    _, (ci, cf, co) = _parts(attrs, bias, size)
    d_g, d_c, d_n = (_ACTS[attrs[k]][1] for k in
                     ("gate_activation", "cell_activation", "candidate_activation"))
    act_c = _ACTS[attrs["cell_activation"]][0]
    dh_out, dc_out = ins.get("Hidden@GRAD"), ins.get("Cell@GRAD")
    dh_out = np.zeros((x.shape[0], size), x.dtype) if dh_out is None else _host(dh_out)
    dc_out = np.zeros((x.shape[0], size), x.dtype) if dc_out is None else _host(dc_out)
    dh, dc = np.zeros((n, size), x.dtype), np.zeros((n, size), x.dtype)
    dx, dw = np.zeros_like(x), np.zeros_like(w)
    dbias = np.zeros(bias.size, x.dtype)
    for rows, seqs in reversed(steps):
        cand, i, f, o = (gates[rows, k * size:(k + 1) * size] for k in range(4))
        c, c_prev = saved["c"][rows], saved["c_prev"][rows]
        h_grad = dh[seqs] + dh_out[rows]
        c_act = act_c(c)
        do = h_grad * c_act * d_g(o)
        dc_total = dc[seqs] + dc_out[rows] + h_grad * o * d_c(c_act)
        if co is not None:
            dc_total = dc_total + do * co
        dcand = dc_total * i * d_n(cand)
        di = dc_total * cand * d_g(i)
        df = dc_total * c_prev * d_g(f)
        dgate = np.concatenate([dcand, di, df, do], axis=1)
        dx[rows] = dgate
        dw += saved["h_prev"][rows].T @ dgate
        dbias[:4 * size] += dgate.sum(axis=0)
        dc_prev = dc_total * f
        if ci is not None:
            dc_prev = dc_prev + di * ci + df * cf
            dbias[4 * size:5 * size] += (di * c_prev).sum(axis=0)
            dbias[5 * size:6 * size] += (df * c_prev).sum(axis=0)
            dbias[6 * size:] += (do * c).sum(axis=0)
        dh[seqs] = dgate @ w.T
        dc[seqs] = dc_prev
    xp = ctx.xp
    result = {"Input@GRAD": with_lod(xp.asarray(dx), lod), "Weight@GRAD": xp.asarray(dw),
              "Bias@GRAD": xp.asarray(dbias.reshape(bias.shape))}
    if ins.get("H0") is not None:
        result["H0@GRAD"] = xp.asarray(dh)
    if ins.get("C0") is not None:
        result["C0@GRAD"] = xp.asarray(dc)
    return {k: v for k, v in result.items() if k in ctx.want}
