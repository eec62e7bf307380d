"""sequence_pool, two layouts:
* LoD (Fluid 1.x): X [rows, D...] carries a LoD; each sequence of its last level becomes one
  row of Out (whose LoD is the levels above). MaxIndex holds the row of each maximum.
* padded (Paddle 2.x's layout): X [N, T, D...] with Length [N] (or [N, 1]); only the first
  Length[i] steps of row i count. MaxIndex holds the time step of each maximum (-1 if empty).
Pool types: SUM, AVERAGE, SQRT (sum / sqrt(length)), MAX, LAST, FIRST; empty sequences give
pad_value. runtime/ops/sequence_lod.py has the LoD kernels.
"""

import numpy as np

from .registry import defop, dims_match
from .sequence_lod import pool_lod, pool_lod_grad

POOL_TYPES = ("SUM", "AVERAGE", "SQRT", "MAX", "LAST", "FIRST")

sequence_pool = defop("sequence_pool", inputs=("X", "Length?"), outputs=("Out", "MaxIndex"),
                      attrs={"pooltype": "AVERAGE", "is_test": False, "pad_value": 0.0})


@sequence_pool.infer
def _sequence_pool_shape(ic):
    x, length = ic.input("X"), ic.input("Length")
    pooltype = ic.attr("pooltype")
    ic.check(pooltype in POOL_TYPES, f"pooltype={pooltype!r} must be one of {POOL_TYPES}")
    if length is None:  # LoD layout: one row per sequence
        out = [-1] + list(x.shape[1:])
        ic.set_output("Out", out, x.dtype, lod_level=max(x.lod_level - 1, 0))
        ic.set_output("MaxIndex", out, np.dtype("int32"))
        return
    ic.check(len(x.shape) >= 2, f"{ic.describe('X')} must be padded [batch, time, ...]")
    ic.check(length.dtype.kind in "iu", f"lengths must be integers (int64), got "
                                        f"{ic.describe('Length')} of {length.dtype.name}")
    ic.check(len(length.shape) == 1 or (len(length.shape) == 2 and length.shape[1] in (1, -1)),
             f"{ic.describe('Length')} must be [batch] or [batch, 1]")
    ic.check(dims_match(length.shape[0], x.shape[0]),
             f"{ic.describe('Length')} needs one length per row of {ic.describe('X')}")
    out = [x.shape[0]] + list(x.shape[2:])
    ic.set_output("Out", out, x.dtype)
    ic.set_output("MaxIndex", out, np.dtype("int32"))


def _lengths(xp, length, x_shape):
    """Length as a flat int array, checked against the padded time dimension."""
    lengths = length.reshape(-1)
    if lengths.shape[0] != x_shape[0]:
        raise ValueError(f"Length has {lengths.shape[0]} entries for {x_shape[0]} sequences")
    if lengths.size and (int(lengths.min()) < 0 or int(lengths.max()) > x_shape[1]):
        raise ValueError(f"lengths must be in [0, {x_shape[1]}] (the padded time dimension), "
                         f"got min {int(lengths.min())}, max {int(lengths.max())}")
    return lengths


def _mask(xp, lengths, x_shape):
    """[N, T, 1, ...] booleans: True on the real (unpadded) steps."""
    steps = xp.arange(x_shape[1])
    valid = steps[None, :] < lengths[:, None]
    return valid.reshape(valid.shape + (1,) * (len(x_shape) - 2))


def _broadcast_rows(values, rank):
    """A per-row [N] array shaped [N, 1, ...] to broadcast against Out of the given rank."""
    return values.reshape(values.shape + (1,) * (rank - 1))


@sequence_pool.kernel
def _sequence_pool(ctx, ins, attrs):
    xp, x, pooltype = ctx.xp, ins["X"], attrs["pooltype"]
    if ins.get("Length") is None:
        return pool_lod(ctx, x, attrs)
    lengths = _lengths(xp, ins["Length"], x.shape)
    mask = _mask(xp, lengths, x.shape)
    result = {}
    if pooltype == "MAX":
        masked = xp.where(mask, x, -xp.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min)
        index = masked.argmax(axis=1)
        out = xp.take_along_axis(x, index[:, None], axis=1)[:, 0]
        if "MaxIndex" in ctx.want:
            empty = _broadcast_rows(lengths == 0, index.ndim)
            result["MaxIndex"] = xp.where(empty, -1, index).astype(np.int32)
    elif pooltype in ("LAST", "FIRST"):
        steps = xp.maximum(lengths - 1, 0) if pooltype == "LAST" else xp.zeros_like(lengths)
        out = x[xp.arange(x.shape[0]), steps]
    else:
        out = xp.where(mask, x, 0).sum(axis=1, dtype=x.dtype)
        out = out / _broadcast_rows(_divisor(xp, lengths, pooltype, x.dtype), out.ndim)
    empty = _broadcast_rows(lengths == 0, out.ndim)
    result["Out"] = xp.where(empty, xp.asarray(attrs["pad_value"], dtype=x.dtype),
                             out).astype(x.dtype, copy=False)
    if "MaxIndex" in ctx.want and "MaxIndex" not in result:  # only MAX fills it
        result["MaxIndex"] = xp.full(result["Out"].shape, -1, dtype=np.int32)
    return result


def _divisor(xp, lengths, pooltype, dtype):
    """What the masked sum is divided by: 1 (SUM), length (AVERAGE) or sqrt(length) (SQRT);
    at least 1, so empty rows stay finite (they are replaced by pad_value)."""
    count = xp.maximum(lengths, 1).astype(dtype)
    if pooltype == "SUM":
        return xp.ones_like(count)
    return xp.sqrt(count) if pooltype == "SQRT" else count


@sequence_pool.grad(uses=("X", "Length", "MaxIndex"), inputs=("X",), outputs=("Out",),
                    shape_only=("X",))
def _sequence_pool_grad(ctx, ins, attrs):
    xp, x, dout = ctx.xp, ins["X"], ins["Out@GRAD"]
    pooltype = attrs["pooltype"]
    if ins.get("Length") is None:
        return {"X@GRAD": pool_lod_grad(ctx, x, dout, ins.get("MaxIndex"), attrs)}
    lengths = _lengths(xp, ins["Length"], x.shape)
    rows = xp.arange(x.shape[0])
    nonempty = lengths > 0
    dx = xp.zeros(x.shape, dtype=dout.dtype)
    if pooltype == "MAX":
        index = ins["MaxIndex"].astype(np.int64)
        _scatter_max(xp, dx, xp.maximum(index, 0), dout * (index >= 0))
    elif pooltype in ("LAST", "FIRST"):
        steps = xp.maximum(lengths - 1, 0) if pooltype == "LAST" else xp.zeros_like(lengths)
        dx[rows[nonempty], steps[nonempty]] = dout[nonempty]
    else:
        scale = 1 / _divisor(xp, lengths, pooltype, dout.dtype)
        per_step = dout * _broadcast_rows(scale, dout.ndim)
        dx[...] = per_step[:, None]
        dx *= _mask(xp, lengths, x.shape)
    return {"X@GRAD": dx}


def _scatter_max(xp, dx, index, dout):
    """dx[n, index[n, d...], d...] = dout[n, d...] (dx is a fresh contiguous array)."""
    n, t = dx.shape[:2]
    flat = dx.reshape(n, t, -1)
    cols = xp.arange(flat.shape[2])[None, :]
    flat[xp.arange(n)[:, None], index.reshape(n, -1), cols] = dout.reshape(n, -1)
