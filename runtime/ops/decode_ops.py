"""Ops of Fluid 1.8's decoding API (layers/decode.py): reduce_all / reduce_any (logical
reductions of bool tensors), gather_tree (backtracking beam-search ids through their parents)
and sampling_id (one draw per row of a probability table). None is differentiable.

gather_tree: Ids and Parents are [T, B, beam]; Out[T-1] = Ids[T-1], and going back in time
each beam follows its parent: Out[t, b, k] = Ids[t, b, p] with p = Parents[t+1, b, ...] of the
chain started at (T-1, b, k) (Paddle's gather_tree kernel).

sampling_id: X [B, V], each row a distribution; Out[b] is the first j where
r - X[b, 0] - ... - X[b, j] < 0 for r ~ U(min, max) (V - 1 when there is none). A seed attr
fixes the draws; seed 0 uses the executor's generator. Paddle writes int64 ids.
"""

import numpy as np

from .fill import _generator
from .fluid18_more import _host
from .reduce import _infer_reduce, _reduced_shape, reduced_axes
from .registry import defop


def _logical_reduce(name, numpy_fn):
    opdef = defop(name, inputs=("X",), outputs=("Out",),
                  attrs={"dim": [0], "keep_dim": False, "reduce_all": False})
    opdef.infer(_infer_reduce)

    @opdef.kernel
    def kernel(ctx, ins, attrs):
        x = ins["X"]
        axes = reduced_axes(x.ndim, attrs)
        out = numpy_fn(x.astype(bool, copy=False), axis=axes)
        return {"Out": ctx.xp.asarray(out).reshape(
            _reduced_shape(x.shape, axes, attrs["keep_dim"]))}

    return opdef


_logical_reduce("reduce_all", np.all)
_logical_reduce("reduce_any", np.any)


gather_tree = defop("gather_tree", inputs=("Ids", "Parents"), outputs=("Out",))


@gather_tree.infer
def _gather_tree_shape(ic):
    ids, parents = ic.input("Ids"), ic.input("Parents")
    ic.check(len(ids.shape) == 3, f"{ic.describe('Ids')} must be 3-D [max_time, batch, beam]")
    ic.check(list(ids.shape) == list(parents.shape),
             f"{ic.describe('Ids')} and {ic.describe('Parents')} must have the same shape")
    ic.set_output("Out", list(ids.shape), ids.dtype)


@gather_tree.kernel
def _gather_tree(ctx, ins, attrs):
    ids, parents = ins["Ids"], ins["Parents"]
    if ids.shape != parents.shape or ids.ndim != 3:
        raise ValueError(f"Ids {list(ids.shape)} and Parents {list(parents.shape)} must be "
                         f"the same 3-D shape [max_time, batch, beam]")
    steps, batch, beam = ids.shape
    out = ctx.xp.empty_like(ids)
    if steps == 0:
        return {"Out": out}
    rows = ctx.xp.arange(batch)[:, None]
    out[steps - 1] = ids[steps - 1]
    parent = parents[steps - 1]
    for t in range(steps - 2, -1, -1):
        if (parent < 0).any() or (parent >= beam).any():
            raise ValueError(f"Parents holds a beam index outside [0, {beam}) at step {t + 1}")
        out[t] = ids[t][rows, parent]
        parent = parents[t][rows, parent]
    return {"Out": out}


sampling_id = defop("sampling_id", inputs=("X",), outputs=("Out",),
                    attrs={"min": 0.0, "max": 1.0, "seed": 0}, random=True)


@sampling_id.infer
def _sampling_id_shape(ic):
    x = ic.input("X")
    ic.check(len(x.shape) == 2, f"{ic.describe('X')} must be 2-D [batch, classes]")
    ic.set_output("Out", [x.shape[0]], np.dtype("int64"))


@sampling_id.kernel
def _sampling_id(ctx, ins, attrs):
    x = _host(ins["X"])
    if x.ndim != 2:
        raise ValueError(f"X must be 2-D [batch, classes], got {list(x.shape)}")
    r = _generator(ctx, attrs).uniform(attrs["min"], attrs["max"], size=x.shape[0])
    below = (r[:, None] - np.cumsum(x, axis=1)) < 0
    ids = np.where(below.any(axis=1), below.argmax(axis=1), x.shape[1] - 1)
    return {"Out": ctx.xp.asarray(ids.astype(np.int64))}
