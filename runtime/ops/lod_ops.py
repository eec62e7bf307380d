"""LoD ops of Fluid 1.8 (runtime/lod.py describes LoD): lod_rank_table, max_sequence_len,
lod_tensor_to_array / array_to_lod_tensor (a batch of sequences <-> one array entry per time
step, longest sequences first), shrink_rnn_memory, reorder_lod_tensor_by_rank,
split_lod_tensor / merge_lod_tensor, lod_reset.

All of them move whole rows: each computes which rows of its input make its output (a row
map) and the output's LoD; the gradient sends the output gradient's rows back through the
same map (zeros where nothing flowed), with the input's LoD."""

import numpy as np

from ..dtypes import VarType
from ..lod import LoDRankTable, gather_items, lengths, lod_from_lengths, lod_of, with_lod
from .registry import defop, infer_same_as


def _rows_of(lod, level, indices):
    """(row indices, LoD lengths) of the items `indices` of `level`."""
    index = np.arange(lod[-1][-1] if lod else 0)
    rows, lens = gather_items(index, lod, level, list(indices))
    return rows, lens


def _lod_or_rows(x):
    """x's LoD, or (no LoD) one level making each row a sequence of its own."""
    return lod_of(x) or [list(range(x.shape[0] + 1))]


def _zeros_like(xp, x, dtype=None):
    return xp.zeros(x.shape, dtype=dtype or x.dtype)


# --- lod_rank_table ---------------------------------------------------------------------------
rank_table = defop("lod_rank_table", inputs=("X",), outputs=("Out",), attrs={"level": 0})


@rank_table.infer
def _rank_table_shape(ic):
    ic.set_output("Out", None, None, type=VarType.LOD_RANK_TABLE)


@rank_table.kernel
def _rank_table(ctx, ins, attrs):
    x = ins["X"]
    lod = lod_of(x)
    if not lod:
        return {"Out": LoDRankTable.for_rows(x.shape[0])}
    return {"Out": LoDRankTable(lod, attrs["level"])}


# --- max_sequence_len ---------------------------------------------------------------------------
max_len = defop("max_sequence_len", inputs=("RankTable",), outputs=("Out",))


@max_len.infer
def _max_len_shape(ic):
    ic.set_output("Out", [1], np.dtype("int64"))


@max_len.kernel
def _max_len(ctx, ins, attrs):
    items = ins["RankTable"].items()
    return {"Out": np.array([items[0][1] if items else 0], dtype=np.int64)}


# --- lod_tensor_to_array / array_to_lod_tensor ------------------------------------------------
def _step_rows(x, table):
    """[(row indices, LoD lengths)] of each time step: step t holds, for every sequence of the
    table's level longer than t (longest first), its t-th element with what lies below it."""
    lod = _lod_or_rows(x)
    level = table.level
    items = table.items()
    steps = []
    for t in range(items[0][1] if items else 0):
        subs = [lod[level][i] + t for i, n in items if n > t]
        steps.append(_rows_of(lod, level + 1, subs))
    return steps


to_array = defop("lod_tensor_to_array", inputs=("X", "RankTable"), outputs=("Out",))


@to_array.infer
def _to_array_shape(ic):
    x = ic.input("X")
    ic.set_output("Out", x.shape, x.dtype, type=VarType.LOD_TENSOR_ARRAY, lod_level=x.lod_level)


@to_array.kernel
def _to_array(ctx, ins, attrs):
    x = ins["X"]
    return {"Out": [with_lod(x[rows], lod_from_lengths(lens))
                    for rows, lens in _step_rows(x, ins["RankTable"])]}


@to_array.grad(uses=("X", "RankTable"), inputs=("X",), shape_only=("X",))
def _to_array_grad(ctx, ins, attrs):
    x, grads = ins["X"], ins["Out@GRAD"] or []
    dx = _zeros_like(ctx.xp, x)
    for t, (rows, _) in enumerate(_step_rows(x, ins["RankTable"])):
        if t < len(grads) and grads[t] is not None:
            dx[rows] = grads[t]
    return {"X@GRAD": with_lod(dx, lod_of(x))}


def _merge_layout(array, table):
    """(for each output piece in order: (step, row indices in that step's entry)), the
    output's LoD lengths."""
    items = table.items()
    position = {index: p for p, (index, _) in enumerate(items)}
    count = len(items)
    seq_lens = [0] * count
    for index, n in items:
        seq_lens[index] = n
    pieces, deeper = [], []
    for index in range(count):
        for t in range(seq_lens[index]):
            entry_lod = lod_of(array[t])
            rows, lens = _rows_of(entry_lod, 0, [position[index]]) if entry_lod else (
                np.array([position[index]]), [])
            pieces.append((t, rows))
            for k, level in enumerate(lens):
                if k == len(deeper):
                    deeper.append([])
                deeper[k].extend(level)
    if table.from_rows and not deeper:  # the table of a tensor without LoD: none back
        return pieces, []
    coarse = [lengths(level) for level in table.coarse_lod]
    return pieces, coarse + [seq_lens] + deeper


from_array = defop("array_to_lod_tensor", inputs=("X", "RankTable"), outputs=("Out",))


from_array.infer(infer_same_as())


@from_array.kernel
def _from_array(ctx, ins, attrs):
    array, table = ins["X"], ins["RankTable"]
    pieces, lens = _merge_layout(array, table)
    first = next(a for a in array if a is not None)
    parts = [array[t][rows] for t, rows in pieces]
    out = ctx.xp.concatenate(parts, axis=0) if parts else first[:0]
    return {"Out": with_lod(out, lod_from_lengths(lens))}


@from_array.grad(uses=("X", "RankTable"), inputs=("X",))
def _from_array_grad(ctx, ins, attrs):
    array, table, dout = ins["X"], ins["RankTable"], ins["Out@GRAD"]
    grads = [None if a is None else _zeros_like(ctx.xp, a) for a in array]
    start = 0
    for t, rows in _merge_layout(array, table)[0]:
        grads[t][rows] = dout[start:start + len(rows)]
        start += len(rows)
    return {"X@GRAD": [with_lod(g, lod_of(a)) if g is not None else None
                       for g, a in zip(grads, array)]}


# --- shrink_rnn_memory: the rows of the sequences still running at step I ------------------------
shrink = defop("shrink_rnn_memory", inputs=("X", "I", "RankTable"), outputs=("Out",))


shrink.infer(infer_same_as())


def _shrunk_rows(x, i, table):
    step = int(np.asarray(i).reshape(-1)[0])
    running = sum(1 for _, n in table.items() if n > step)
    lod = lod_of(x)
    if not lod:
        return running, []
    rows, lens = _rows_of(lod, 0, range(running))
    return len(rows), lens


@shrink.kernel
def _shrink(ctx, ins, attrs):
    x = ins["X"]
    height, lens = _shrunk_rows(x, ins["I"], ins["RankTable"])
    return {"Out": with_lod(x[:height], lod_from_lengths(lens))}


@shrink.grad(uses=("X", "I", "RankTable"), inputs=("X",), shape_only=("X",))
def _shrink_grad(ctx, ins, attrs):
    x, dout = ins["X"], ins.get("Out@GRAD")
    dx = _zeros_like(ctx.xp, x)
    if dout is not None:
        dx[:dout.shape[0]] = dout
    return {"X@GRAD": with_lod(dx, lod_of(x))}


# --- reorder_lod_tensor_by_rank: X's sequences in the table's order ------------------------------
reorder = defop("reorder_lod_tensor_by_rank", inputs=("X", "RankTable"), outputs=("Out",))


reorder.infer(infer_same_as())


def _reordered_rows(x, table):
    order = [index for index, _ in table.items()]
    lod = lod_of(x)
    if not lod:
        return np.asarray(order, dtype=np.int64), []
    return _rows_of(lod, 0, order)


@reorder.kernel
def _reorder(ctx, ins, attrs):
    x = ins["X"]
    rows, lens = _reordered_rows(x, ins["RankTable"])
    return {"Out": with_lod(x[rows], lod_from_lengths(lens))}


@reorder.grad(uses=("X", "RankTable"), inputs=("X",), shape_only=("X",))
def _reorder_grad(ctx, ins, attrs):
    x, dout = ins["X"], ins["Out@GRAD"]
    rows, _ = _reordered_rows(x, ins["RankTable"])
    dx = _zeros_like(ctx.xp, x, dout.dtype)
    dx[rows] = dout
    return {"X@GRAD": with_lod(dx, lod_of(x))}


# --- split_lod_tensor / merge_lod_tensor: sequences picked by a boolean mask --------------------
def _mask_rows(x, mask, level):
    """(rows of the true sequences, their LoD lengths, rows of the false ones, theirs)."""
    flags = np.asarray(mask).reshape(-1).astype(bool)
    lod = lod_of(x)
    if not lod:
        return np.flatnonzero(flags), [], np.flatnonzero(~flags), []
    true_rows, true_lens = _rows_of(lod, level, np.flatnonzero(flags).tolist())
    false_rows, false_lens = _rows_of(lod, level, np.flatnonzero(~flags).tolist())
    return true_rows, true_lens, false_rows, false_lens


split = defop("split_lod_tensor", inputs=("X", "Mask"), outputs=("OutTrue", "OutFalse"),
              attrs={"level": 0})


@split.infer
def _split_shape(ic):
    x = ic.input("X")
    for slot in ("OutTrue", "OutFalse"):
        ic.set_output(slot, x.shape, x.dtype, lod_level=x.lod_level)


@split.kernel
def _split(ctx, ins, attrs):
    x = ins["X"]
    t_rows, t_lens, f_rows, f_lens = _mask_rows(x, ins["Mask"], attrs["level"])
    return {"OutTrue": with_lod(x[t_rows], lod_from_lengths(t_lens)),
            "OutFalse": with_lod(x[f_rows], lod_from_lengths(f_lens))}


@split.grad(uses=("X", "Mask"), inputs=("X",), shape_only=("X",))
def _split_grad(ctx, ins, attrs):
    x = ins["X"]
    t_rows, _, f_rows, _ = _mask_rows(x, ins["Mask"], attrs["level"])
    dx = _zeros_like(ctx.xp, x)
    for rows, slot in ((t_rows, "OutTrue@GRAD"), (f_rows, "OutFalse@GRAD")):
        if ins.get(slot) is not None:
            dx[rows] = ins[slot]
    return {"X@GRAD": with_lod(dx, lod_of(x))}


def _merge_shape(ic):
    x, part = ic.input("X"), ic.input("InTrue")
    ic.set_output("Out", [-1] + list(part.shape[1:]), part.dtype, lod_level=x.lod_level)


def _merge(ctx, ins, attrs):
    x, in_true, in_false = ins["X"], ins.get("InTrue"), ins.get("InFalse")
    t_rows, _, f_rows, _ = _mask_rows(x, ins["Mask"], attrs["level"])
    like = in_true if in_true is not None else in_false
    out = ctx.xp.zeros((x.shape[0],) + tuple(like.shape[1:]), dtype=like.dtype)
    if in_true is not None and len(t_rows):
        out[t_rows] = in_true
    if in_false is not None and len(f_rows):
        out[f_rows] = in_false
    lod = lod_of(x)
    return {"Out": with_lod(out, lod_from_lengths([lengths(l) for l in lod[attrs["level"]:]]))}


merge = defop("merge_lod_tensor", inputs=("X", "Mask", "InTrue?", "InFalse?"),
              outputs=("Out",), attrs={"level": 0})
merge.infer(_merge_shape)
merge.kernel(_merge)
merge_infer = defop("merge_lod_tensor_infer", inputs=("X", "Mask", "InTrue?", "InFalse?"),
                    outputs=("Out",), attrs={"level": 0})
merge_infer.infer(_merge_shape)
merge_infer.kernel(_merge)
merge_infer.no_grad_reason = "merge_lod_tensor_infer is for inference programs"


@merge.grad(uses=("X", "Mask", "InTrue", "InFalse"), inputs=("InTrue", "InFalse"),
            shape_only=("X", "InTrue", "InFalse"))
def _merge_grad(ctx, ins, attrs):
    x, dout = ins["X"], ins["Out@GRAD"]
    t_rows, t_lens, f_rows, f_lens = _mask_rows(x, ins["Mask"], attrs["level"])
    return {"InTrue@GRAD": with_lod(dout[t_rows], lod_from_lengths(t_lens)),
            "InFalse@GRAD": with_lod(dout[f_rows], lod_from_lengths(f_lens))}


# --- lod_reset: X with another LoD (from Y's LoD, Y's values as offsets, or target_lod) ---------
reset = defop("lod_reset", inputs=("X", "Y?"), outputs=("Out",),
              attrs={"target_lod": [], "append": False})


@reset.infer
def _reset_shape(ic):
    x = ic.input("X")
    ic.set_output("Out", x.shape, x.dtype, lod_level=max(1, x.lod_level))


def _new_lod(x, y, attrs):
    if y is not None:
        lod = lod_of(y) or [np.asarray(y).reshape(-1).astype(int).tolist()]
    else:
        lod = [list(attrs["target_lod"])]
    if lod[-1][-1] != x.shape[0]:
        raise ValueError(f"lod_reset: the new LoD {lod} does not end at the {x.shape[0]} rows "
                         f"of X")
    return (lod_of(x) + lod) if attrs.get("append") else lod


@reset.kernel
def _reset(ctx, ins, attrs):
    x = ins["X"]
    return {"Out": with_lod(np.asarray(x), _new_lod(x, ins.get("Y"), attrs))}


@reset.grad(uses=("X",), inputs=("X",), shape_only=("X",))
def _reset_grad(ctx, ins, attrs):
    return {"X@GRAD": with_lod(np.asarray(ins["Out@GRAD"]), lod_of(ins["X"]))}

