"""LoD (level of detail): Fluid's variable-length sequences packed end to end.

A LoD is a list of levels, each a list of offsets (Paddle's `LoDTensor.lod()`): level k splits
the items of level k+1 (the rows, for the last level) into sequences. Between ops the runtime
passes a LoD tensor as a `LoDArray`, a NumPy array with a `.lod`; arrays derived from it by
NumPy carry no LoD (`lod == ()`), so a LoD exists only where it was fed or an op set it.

In a program that uses LoD (a variable with lod_level > 0, or a LoD op), each op's outputs take
the LoD of its main input when their first dimension matches (Paddle's ShareLoD: elementwise
ops, activations, fc, embedding, softmax, cross_entropy...); a gradient X@GRAD takes X's. Ops
that change the sequence structure (the sequence and LoD ops) set their outputs' LoD
themselves; reductions keep none. LoD lives on the host: on a GPU place it is dropped."""

import numpy as np

__all__ = ["LoDArray", "lod_of", "with_lod", "offsets", "lengths", "gather_items",
           "LoDRankTable", "uses_lod", "sharing", "split_for_places", "concat_parts"]


class LoDArray(np.ndarray):
    """An ndarray with a LoD (`.lod`, offsets per level)."""

    lod = ()

    def __reduce__(self):  # pickles (worker processes, save) as a plain array plus its LoD
        return (with_lod, (np.asarray(self), self.lod))


def lod_of(value):
    """The LoD (offsets per level) `value` carries, or []."""
    return list(getattr(value, "lod", None) or ())


def with_lod(array, lod):
    """`array` carrying `lod` (a view; the array itself when lod is empty or the array is not a
    host array)."""
    if not lod or not isinstance(array, np.ndarray):
        return array
    view = array.view(LoDArray)
    view.lod = [list(map(int, level)) for level in lod]
    return view


def offsets(lens):
    out = [0]
    for n in lens:
        out.append(out[-1] + int(n))
    return out


def lengths(level):
    return [b - a for a, b in zip(level[:-1], level[1:])]


def gather_items(x, lod, level, indices):
    """The rows of the items `indices` of `level` (level len(lod) is the rows themselves),
    concatenated, and the LoD (lengths) that describes them: their own lengths first, then
    those of every deeper level."""
    if level >= len(lod):
        return x[np.asarray(indices, dtype=np.int64)], []
    bounds = lod[level]
    own = [bounds[i + 1] - bounds[i] for i in indices]
    children = [c for i in indices for c in range(bounds[i], bounds[i + 1])]
    rows, deeper = gather_items(x, lod, level + 1, children)
    return rows, [own] + deeper


def lod_from_lengths(lens):
    return [offsets(level) for level in lens]


class LoDRankTable:
    """core.LoDRankTable: the sequences of one LoD level as (index, length) sorted by length,
    longest first (ties keep their order), and the coarser levels above it."""

    def __init__(self, lod=(), level=0):
        self.level = level
        self.from_rows = False
        self.coarse_lod = [list(l) for l in lod[:level]]
        if level < len(lod):
            lens = lengths(lod[level])
        else:
            lens = []
        order = sorted(range(len(lens)), key=lambda i: -lens[i])
        self._items = [(i, lens[i]) for i in order]

    @classmethod
    def for_rows(cls, n):
        """The table of a tensor without LoD: each of its n rows is a sequence of length 1."""
        table = cls()
        table.from_rows = True
        table._items = [(i, 1) for i in range(n)]
        return table

    def items(self):
        return list(self._items)

    def __len__(self):
        return len(self._items)

    def __repr__(self):
        return f"LoDRankTable(level={self.level}, items={self._items})"


# --- which programs need LoD handling -----------------------------------------------------------
LOD_OPS = frozenset({
    "lod_rank_table", "max_sequence_len", "lod_tensor_to_array", "array_to_lod_tensor",
    "shrink_rnn_memory", "split_lod_tensor", "merge_lod_tensor", "merge_lod_tensor_infer",
    "reorder_lod_tensor_by_rank", "lod_reset", "sequence_pool", "sequence_expand",
    "sequence_softmax"})
# ops whose outputs never share their input's LoD (reductions, shapes, optimizer updates...)
NO_SHARE = frozenset({
    "mean", "reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod", "accuracy",
    "shape", "squared_l2_norm", "fill_constant", "fill_constant_batch_size_like", "transpose2",
    "matmul", "lod_array_length", "write_to_array", "read_from_array", "increment", "auc",
    "sgd", "momentum", "adam", "top_k", "arg_max", "arg_min", "argsort", "stack", "gather"})


def uses_lod(program):
    """Whether `program` has a variable with lod_level > 0 or an op that reads or sets LoD."""
    for block in program.blocks:
        if any(op.type in LOD_OPS for op in block.ops):
            return True
        if any(getattr(v, "lod_level", 0) for v in block.vars.values()):
            return True
    return False


def _first(value):
    if isinstance(value, (list, tuple)):
        return value[0] if value else None
    return value


def _source(ins, slot):
    """The input whose LoD output `slot` takes: for a gradient S@GRAD, S (else the gradient
    flowing in); otherwise the first input that has a LoD."""
    if slot.endswith("@GRAD"):
        base = ins.get(slot[:-5])
        if base is not None and getattr(_first(base), "lod", None):
            return _first(base)
    for value in ins.values():
        value = _first(value)
        if getattr(value, "lod", None):
            return value
    return None


def sharing(op_type, fn):
    """`fn` (a kernel), with Paddle's ShareLoD applied to its outputs."""
    if op_type in NO_SHARE or op_type in LOD_OPS or (
            op_type.endswith("_grad") and op_type[:-5] in LOD_OPS):
        return fn

    def kernel(ctx, ins, attrs):
        res = fn(ctx, ins, attrs)
        for slot, value in res.items():
            if not isinstance(value, np.ndarray) or getattr(value, "lod", None) or \
                    value.ndim == 0:
                continue
            src = _source(ins, slot)
            if src is not None and src.shape[:1] == value.shape[:1]:
                res[slot] = with_lod(value, src.lod)
        return res
    kernel.__name__ = getattr(fn, "__name__", "kernel")
    return kernel


# --- data parallelism: a LoD batch split by sequences, and fetched parts merged -----------------
def split_for_places(value, n):
    """`value` (with a LoD) cut into at most n parts of whole top-level sequences, as Paddle's
    SplitLoDTensor: ceil(sequences / n) sequences a part."""
    lod = lod_of(value)
    count = len(lod[0]) - 1
    step = max(1, -(-count // n))
    parts = []
    for start in range(0, count, step):
        rows, lens = gather_items(np.asarray(value), lod, 0, range(start, min(count, start + step)))
        parts.append(with_lod(rows, lod_from_lengths(lens)))
    return parts


def concat_parts(parts):
    """The parts of a fetched LoD tensor (one per place) joined, their LoDs joined too."""
    arrays = [np.asarray(p) for p in parts]
    lods = [lod_of(p) for p in parts]
    joined = np.concatenate(arrays, axis=0)
    if not all(lods) or len({len(l) for l in lods}) != 1:
        return joined
    lens = [sum((lengths(l[k]) for l in lods), []) for k in range(len(lods[0]))]
    return with_lod(joined, lod_from_lengths(lens))
