"""sequence_pool's kernels for LoD input (Fluid 1.x's layout): X [rows, D...] whose last LoD
level splits the rows into sequences; Out gets one row per sequence and the LoD levels above.
Empty sequences give pad_value (and no gradient); MaxIndex holds each maximum's row."""

import numpy as np

from ..lod import lod_of, with_lod


def _bounds(x):
    lod = lod_of(x)
    if not lod:
        raise ValueError("sequence_pool: X has no LoD. Feed a LoDTensor with sequence lengths "
                         "(or pass padded data with length=)")
    bounds = np.asarray(lod[-1], dtype=np.int64)
    if bounds[-1] != x.shape[0]:
        raise ValueError(f"sequence_pool: the LoD {lod} does not end at the {x.shape[0]} rows "
                         f"of X")
    return lod, bounds


def pool_lod(ctx, x, attrs):
    xp, pooltype = ctx.xp, attrs["pooltype"]
    lod, bounds = _bounds(x)
    lens = np.diff(bounds)
    n, flat = len(lens), np.asarray(x).reshape(x.shape[0], -1)
    starts, nonempty = bounds[:-1], lens > 0
    out = np.full((n, flat.shape[1]), attrs["pad_value"], dtype=x.dtype)
    result = {}
    if pooltype == "MAX":
        index = np.full(out.shape, -1, dtype=np.int32)
        for i in np.flatnonzero(nonempty):
            rows = flat[starts[i]:bounds[i + 1]]
            index[i] = starts[i] + rows.argmax(axis=0)
            out[i] = rows.max(axis=0)
        result["MaxIndex"] = index.reshape((n,) + x.shape[1:])
    elif pooltype in ("LAST", "FIRST"):
        pick = bounds[1:] - 1 if pooltype == "LAST" else starts
        out[nonempty] = flat[pick[nonempty]]
    else:
        sums = np.zeros(out.shape, dtype=x.dtype)
        np.add.at(sums, np.repeat(np.arange(n), lens), flat)
        sums /= _divisor(lens, pooltype, x.dtype)[:, None]
        out[nonempty] = sums[nonempty]
    if "MaxIndex" in ctx.want and "MaxIndex" not in result:
        result["MaxIndex"] = np.full((n,) + x.shape[1:], -1, dtype=np.int32)
    result["Out"] = with_lod(xp.asarray(out.reshape((n,) + x.shape[1:])), lod[:-1])
    return result


def _divisor(lens, pooltype, dtype):
    count = np.maximum(lens, 1).astype(dtype)
    if pooltype == "SUM":
        return np.ones_like(count)
    return np.sqrt(count) if pooltype == "SQRT" else count


def pool_lod_grad(ctx, x, dout, max_index, attrs):
    pooltype = attrs["pooltype"]
    lod, bounds = _bounds(x)
    lens = np.diff(bounds)
    n = len(lens)
    dflat = np.asarray(dout).reshape(n, -1)
    dx = np.zeros((x.shape[0], dflat.shape[1]), dtype=dout.dtype)
    nonempty = lens > 0
    if pooltype == "MAX":
        index = np.asarray(max_index).reshape(n, -1)
        cols = np.arange(dflat.shape[1])
        for i in np.flatnonzero(nonempty):
            dx[index[i], cols] += dflat[i]
    elif pooltype in ("LAST", "FIRST"):
        pick = bounds[1:] - 1 if pooltype == "LAST" else bounds[:-1]
        dx[pick[nonempty]] = dflat[nonempty]
    else:
        scaled = dflat / _divisor(lens, pooltype, dout.dtype)[:, None]
        dx[:] = np.repeat(scaled, lens, axis=0)
    return with_lod(ctx.xp.asarray(dx.reshape(x.shape)), lod)
