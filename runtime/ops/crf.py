"""linear_chain_crf and crf_decoding (Fluid 1.8): a linear-chain CRF over LoD sequences.

Emission [rows, D] holds each row's tag scores; Transition [D + 2, D] the start scores (row
0), the end scores (row 1) and the tag-to-tag scores (rows 2..: Transition[2 + i, j] scores
tag i followed by tag j). A tagging y of a sequence scores start[y_0] + sum_k x[k, y_k] +
sum_k trans[y_k, y_k+1] + end[y_last]; LogLikelihood [sequences, 1] is, as in Paddle, the
*negative* log-likelihood of Label: log Z - score(Label) (0 for an empty sequence). Alpha
holds the forward variables normalised per row, EmissionExps exp(x - max of the row),
TransitionExps exp(Transition) (Paddle's intermediates). The gradient comes from the
forward-backward marginals: d/dx[k, i] = P(y_k = i) - [label_k = i], and likewise for the
start, end and transition scores.

crf_decoding: ViterbiPath [rows, 1] int64, the highest-scoring tagging (the first best tag on
ties, as Paddle's strict comparison gives); with Label, 1 where the path equals the label
and 0 elsewhere.
"""

import numpy as np

from ..lod import lod_of, with_lod
from .fluid18_more import _host
from .registry import defop


def _sequences(emission, what):
    lod = lod_of(emission)
    if not lod:
        raise ValueError(f"{what}: Emission has no LoD; feed a LoDTensor with the sequence "
                         f"lengths")
    bounds = np.asarray(lod[-1], dtype=np.int64)
    if bounds[-1] != emission.shape[0]:
        raise ValueError(f"{what}: the LoD {lod} does not end at the {emission.shape[0]} rows")
    return lod, bounds


def _logsumexp(a, axis):
    m = a.max(axis=axis, keepdims=True)
    return (m + np.log(np.exp(a - m).sum(axis=axis, keepdims=True))).squeeze(axis)


def _check_labels(label, tags, what):
    if label.size and (label.min() < 0 or label.max() >= tags):
        raise ValueError(f"{what}: a label is outside [0, {tags})")


def _infer_crf(ic):
    x, w = ic.input("Emission"), ic.input("Transition")
    ic.check(len(x.shape) == 2, f"{ic.describe('Emission')} must be 2-D [rows, tags]")
    tags = x.shape[1]
    ic.check(list(w.shape) == [tags + 2, tags] or tags < 0,
             f"{ic.describe('Transition')} must be [tags + 2, tags] = [{tags + 2}, {tags}]")
    return x


linear_chain_crf = defop("linear_chain_crf", inputs=("Emission", "Transition", "Label"),
                         outputs=("Alpha", "EmissionExps", "TransitionExps", "LogLikelihood"))


@linear_chain_crf.infer
def _crf_shape(ic):
    x = _infer_crf(ic)
    ic.set_output("Alpha", list(x.shape), x.dtype, lod_level=x.lod_level)
    ic.set_output("EmissionExps", list(x.shape), x.dtype, lod_level=x.lod_level)
    ic.set_output("TransitionExps", list(ic.input("Transition").shape), x.dtype)
    ic.set_output("LogLikelihood", [-1, 1], x.dtype)


def _forward_backward(x, w, label):
    """(negative log-likelihood, normalised alphas, marginals [T, D], pair marginals summed over
    time [D, D]) of one non-empty sequence."""
    start, end, trans = w[0], w[1], w[2:]
    steps = x.shape[0]
    la = np.empty_like(x)
    lb = np.empty_like(x)
    la[0] = start + x[0]
    for k in range(1, steps):
        la[k] = _logsumexp(la[k - 1][:, None] + trans, axis=0) + x[k]
    lb[-1] = end
    for k in range(steps - 2, -1, -1):
        lb[k] = _logsumexp(trans + (x[k + 1] + lb[k + 1])[None, :], axis=1)
    log_z = _logsumexp(la[-1] + end, axis=0)
    score = start[label[0]] + x[np.arange(steps), label].sum() + end[label[-1]] + \
        trans[label[:-1], label[1:]].sum()
    marginals = np.exp(la + lb - log_z)
    pairs = np.zeros_like(trans)
    for k in range(steps - 1):
        pairs += np.exp(la[k][:, None] + trans + (x[k + 1] + lb[k + 1])[None, :] - log_z)
    alpha = np.exp(la - la.max(axis=1, keepdims=True))
    return log_z - score, alpha / alpha.sum(axis=1, keepdims=True), marginals, pairs


@linear_chain_crf.kernel
def _crf(ctx, ins, attrs):
    x, w = _host(ins["Emission"]), _host(ins["Transition"])
    label = _host(ins["Label"]).reshape(-1).astype(np.int64)
    lod, bounds = _sequences(ins["Emission"], "linear_chain_crf")
    _check_labels(label, x.shape[1], "linear_chain_crf")
    nll = np.zeros((len(bounds) - 1, 1), x.dtype)
    alpha = np.zeros_like(x)
    for s, (a, b) in enumerate(zip(bounds[:-1], bounds[1:])):
        if b > a:
            nll[s, 0], alpha[a:b], _, _ = _forward_backward(x[a:b], w, label[a:b])
    xp = ctx.xp
    emission_exps = np.exp(x - x.max(axis=1, keepdims=True)) if x.size else x.copy()
    return {"Alpha": with_lod(xp.asarray(alpha), lod),
            "EmissionExps": with_lod(xp.asarray(emission_exps), lod),
            "TransitionExps": xp.asarray(np.exp(w)), "LogLikelihood": xp.asarray(nll)}


@linear_chain_crf.grad(uses=("Emission", "Transition", "Label"),
                       inputs=("Emission", "Transition"), outputs=("LogLikelihood",))
def _crf_grad(ctx, ins, attrs):
    x, w = _host(ins["Emission"]), _host(ins["Transition"])
    label = _host(ins["Label"]).reshape(-1).astype(np.int64)
    dnll = _host(ins["LogLikelihood@GRAD"]).reshape(-1)
    lod, bounds = _sequences(ins["Emission"], "linear_chain_crf")
    dx, dw = np.zeros_like(x), np.zeros_like(w)
    for s, (a, b) in enumerate(zip(bounds[:-1], bounds[1:])):
        if b == a:
            continue
        lbl = label[a:b]
        _, _, marginals, pairs = _forward_backward(x[a:b], w, lbl)
        hot = np.zeros_like(marginals)
        hot[np.arange(b - a), lbl] = 1.0
        g = dnll[s]
        dx[a:b] = g * (marginals - hot)
        dw[0] += g * (marginals[0] - hot[0])
        dw[1] += g * (marginals[-1] - hot[-1])
        counts = np.zeros_like(pairs)
        np.add.at(counts, (lbl[:-1], lbl[1:]), 1.0)
        dw[2:] += g * (pairs - counts)
    xp = ctx.xp
    result = {"Emission@GRAD": with_lod(xp.asarray(dx), lod), "Transition@GRAD": xp.asarray(dw)}
    return {k: v for k, v in result.items() if k in ctx.want}


crf_decoding = defop("crf_decoding", inputs=("Emission", "Transition", "Label?"),
                     outputs=("ViterbiPath",))


@crf_decoding.infer
def _decoding_shape(ic):
    x = _infer_crf(ic)
    ic.set_output("ViterbiPath", [x.shape[0], 1], np.dtype("int64"), lod_level=x.lod_level)


def _viterbi(x, w):
    start, end, trans = w[0], w[1], w[2:]
    steps = x.shape[0]
    best = start + x[0]
    back = np.zeros((steps, x.shape[1]), np.int64)
    for k in range(1, steps):
        total = best[:, None] + trans
        back[k] = total.argmax(axis=0)
        best = total.max(axis=0) + x[k]
    path = np.empty(steps, np.int64)
    path[-1] = int((best + end).argmax())
    for k in range(steps - 1, 0, -1):
        path[k - 1] = back[k, path[k]]
    return path


@crf_decoding.kernel
def _decode(ctx, ins, attrs):
    x, w = _host(ins["Emission"]), _host(ins["Transition"])
    lod, bounds = _sequences(ins["Emission"], "crf_decoding")
    path = np.zeros(x.shape[0], np.int64)
    for a, b in zip(bounds[:-1], bounds[1:]):
        if b > a:
            path[a:b] = _viterbi(x[a:b], w)
    label = ins.get("Label")
    if label is not None:
        path = (path == _host(label).reshape(-1)).astype(np.int64)
    return {"ViterbiPath": with_lod(ctx.xp.asarray(path.reshape(-1, 1)), lod)}
