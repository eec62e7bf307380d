"""Reductions and selections: reduce_{sum,mean,max,min,prod}, matmul (a contraction, with
NumPy-style batch broadcasting), arg_max, arg_min, top_k, one_hot and the accuracy metric.

reduce_max/reduce_min send the gradient to the elements equal to the extreme; when several
tie, it is split evenly between them (Fluid gives each of them the whole gradient).
"""

import numpy as np

from .. import gemm
from ..dtypes import convert_dtype
from . import fused
from .math import reduce_to
from .registry import linear_grad_grad, defop, dims_match


# --- reduce_* ------------------------------------------------------------------------------------
def reduced_axes(rank, attrs):
    """The axes a reduce op sums over, normalised to [0, rank); ValueError when out of range."""
    if attrs["reduce_all"]:
        return tuple(range(rank))
    dims = [int(d) for d in attrs["dim"]]
    for d in dims:
        if not -rank <= d < rank:
            raise ValueError(f"dim={dims} has {d}, out of range for a {rank}-D input")
    return tuple(sorted({d % rank for d in dims}))


def _reduced_shape(shape, axes, keep_dim):
    if keep_dim:
        return [1 if i in axes else d for i, d in enumerate(shape)]
    return [d for i, d in enumerate(shape) if i not in axes] or [1]


def _infer_reduce(ic):
    x = ic.input("X")
    try:
        axes = reduced_axes(len(x.shape), ic.attrs)
    except ValueError as err:
        ic.fail(f"{err} ({ic.describe('X')})")
    ic.set_output("Out", _reduced_shape(x.shape, axes, ic.attr("keep_dim")), x.dtype)


def _keepdims(dout, x_shape, axes):
    """A reduced array (Out or Out@GRAD) reshaped so that it broadcasts against X."""
    return dout.reshape([1 if i in axes else d for i, d in enumerate(x_shape)])


def _reduce_op(name, forward, grad, uses, shape_only=()):
    """Register reduce_<name>: forward(xp, x, axes) keeps dims; grad(ctx, x, out, dout, axes)
    gets out and dout broadcastable against x and returns X@GRAD."""
    opdef = defop(f"reduce_{name}", inputs=("X",), outputs=("Out",),
                  attrs={"dim": [0], "keep_dim": False, "reduce_all": False})
    opdef.infer(_infer_reduce)

    @opdef.kernel
    def kernel(ctx, ins, attrs):
        x = ins["X"]
        axes = reduced_axes(x.ndim, attrs)
        out = forward(ctx.xp, x, axes).astype(x.dtype, copy=False)
        return {"Out": out.reshape(_reduced_shape(x.shape, axes, attrs["keep_dim"]))}

    @opdef.grad(uses=uses, shape_only=shape_only)
    def grad_kernel(ctx, ins, attrs):
        x, dout = ins["X"], ins["Out@GRAD"]
        axes = reduced_axes(x.ndim, attrs)
        out = ins.get("Out")
        out = _keepdims(out, x.shape, axes) if out is not None else None
        dx = grad(ctx, x, out, _keepdims(dout, x.shape, axes), axes)
        return {"X@GRAD": dx.astype(dout.dtype, copy=False)}

    return opdef


def _broadcast(ctx, value, shape):
    return ctx.xp.broadcast_to(value, shape).copy()


def _extreme_grad(ctx, x, out, dout, axes):
    hit = x == out
    return hit * (dout / hit.sum(axis=axes, keepdims=True))


def _prod_grad(ctx, x, out, dout, axes):
    """d prod / d x_i = product of the other elements, from exclusive running products (exact
    when some elements are 0, unlike out / x)."""
    xp, rank = ctx.xp, x.ndim
    rest = [a for a in range(rank) if a not in axes]
    moved = x.transpose(rest + list(axes))
    flat = moved.reshape(moved.shape[:len(rest)] + (-1,))
    ones = xp.ones(flat.shape[:-1] + (1,), dtype=x.dtype)
    before = xp.cumprod(xp.concatenate([ones, flat[..., :-1]], axis=-1), axis=-1)
    after = xp.cumprod(xp.concatenate([ones, flat[..., :0:-1]], axis=-1), axis=-1)[..., ::-1]
    back = tuple(int(a) for a in np.argsort(rest + list(axes)))
    others = (before * after).reshape(moved.shape).transpose(back)
    return others * dout


_SUM = _reduce_op("sum", lambda xp, x, axes: x.sum(axis=axes, keepdims=True, dtype=x.dtype),
                  lambda ctx, x, out, dout, axes: _broadcast(ctx, dout, x.shape),
                  uses=("X",), shape_only=("X",))
_MEAN = _reduce_op("mean", lambda xp, x, axes: x.mean(axis=axes, keepdims=True),
                   lambda ctx, x, out, dout, axes: _broadcast(
                       ctx, dout / max(1, int(np.prod([x.shape[a] for a in axes]))), x.shape),
                   uses=("X",), shape_only=("X",))
linear_grad_grad(_SUM)
linear_grad_grad(_MEAN)
_reduce_op("max", lambda xp, x, axes: x.max(axis=axes, keepdims=True), _extreme_grad,
           uses=("X", "Out"))
_reduce_op("min", lambda xp, x, axes: x.min(axis=axes, keepdims=True), _extreme_grad,
           uses=("X", "Out"))
_reduce_op("prod", lambda xp, x, axes: x.prod(axis=axes, keepdims=True, dtype=x.dtype),
           _prod_grad, uses=("X",))


# --- matmul --------------------------------------------------------------------------------------
matmul = defop("matmul", inputs=("X", "Y"), outputs=("Out",),
               attrs={"transpose_X": False, "transpose_Y": False, "alpha": 1.0})


def _matrix_shapes(x_shape, y_shape, tx, ty):
    """Fluid's view of the operands as (batched) matrices: a 1-D X is a row [1, K], a 1-D Y a
    column [K, 1]; then the transposes. Returns the two [..., rows, cols] shapes."""
    xs = [1] + list(x_shape) if len(x_shape) == 1 else list(x_shape)
    ys = list(y_shape) + [1] if len(y_shape) == 1 else list(y_shape)
    if tx:
        xs[-2], xs[-1] = xs[-1], xs[-2]
    if ty:
        ys[-2], ys[-1] = ys[-1], ys[-2]
    return xs, ys


def _matmul_out_shape(batch, m, n, x_rank, y_rank):
    """Drop the dimensions a 1-D operand added (when they are 1); [1] if nothing is left."""
    out = list(batch) + [m, n]
    if x_rank == 1 and out[-2] == 1:
        del out[-2]
    if y_rank == 1 and out[-1] == 1:
        del out[-1]
    return out or [1]


def _broadcast_batch(ic, a, b):
    a, b = list(a), list(b)
    a = [1] * (len(b) - len(a)) + a
    b = [1] * (len(a) - len(b)) + b
    out = []
    for da, db in zip(a, b):
        ic.check(dims_match(da, db) or da == 1 or db == 1,
                 f"batch dimensions do not broadcast: {ic.describe('X')}, {ic.describe('Y')}")
        out.append(db if da == 1 else da)
    return out


@matmul.infer
def _matmul_shape(ic):
    x, y = ic.input("X"), ic.input("Y")
    ic.check(len(x.shape) >= 1 and len(y.shape) >= 1, "X and Y must have at least one dimension")
    xs, ys = _matrix_shapes(x.shape, y.shape, ic.attr("transpose_X"), ic.attr("transpose_Y"))
    ic.check(dims_match(xs[-1], ys[-2]),
             f"the inner dimensions differ: {ic.describe('X')} (transpose_X="
             f"{ic.attr('transpose_X')}) gives K={xs[-1]}, {ic.describe('Y')} (transpose_Y="
             f"{ic.attr('transpose_Y')}) gives K={ys[-2]}")
    batch = _broadcast_batch(ic, xs[:-2], ys[:-2])
    ic.set_output("Out", _matmul_out_shape(batch, xs[-2], ys[-1], len(x.shape), len(y.shape)),
                  x.dtype)


def _as_matrices(x, y, attrs):
    """(a, b): x and y as the [..., M, K] and [..., K, N] operands of the product."""
    a = x.reshape(1, -1) if x.ndim == 1 else x
    b = y.reshape(-1, 1) if y.ndim == 1 else y
    if attrs["transpose_X"]:
        a = a.swapaxes(-1, -2)
    if attrs["transpose_Y"]:
        b = b.swapaxes(-1, -2)
    return a, b


@matmul.kernel
def _matmul(ctx, ins, attrs):
    x, y = ins["X"], ins["Y"]
    a, b = _as_matrices(x, y, attrs)
    if a.shape[-1] != b.shape[-2]:
        raise ValueError(f"matmul: inner dimensions differ, {list(a.shape)} @ {list(b.shape)} "
                         f"(after transposes and promoting 1-D operands)")
    out = gemm.matmul(a, b)
    if attrs["alpha"] != 1.0:
        out = (out * attrs["alpha"]).astype(out.dtype, copy=False)
    shape = _matmul_out_shape(out.shape[:-2], out.shape[-2], out.shape[-1], x.ndim, y.ndim)
    return {"Out": out.reshape(shape)}


@matmul.grad(uses=("X", "Y"))
def _matmul_grad(ctx, ins, attrs):
    x, y = ins["X"], ins["Y"]
    a, b = _as_matrices(x, y, attrs)
    dout = ins["Out@GRAD"] * attrs["alpha"] if attrs["alpha"] != 1.0 else ins["Out@GRAD"]
    dout = dout.reshape(np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
                        + (a.shape[-2], b.shape[-1]))
    result = {}
    if "X@GRAD" in ctx.want:
        da = gemm.matmul(dout, b.swapaxes(-1, -2))
        dx = da.swapaxes(-1, -2) if attrs["transpose_X"] else da
        dx_shape = (1, x.shape[0]) if x.ndim == 1 else x.shape
        result["X@GRAD"] = reduce_to(dx, dx_shape).reshape(x.shape).astype(x.dtype, copy=False)
    if "Y@GRAD" in ctx.want:
        db = gemm.matmul(a.swapaxes(-1, -2), dout)
        dy = db.swapaxes(-1, -2) if attrs["transpose_Y"] else db
        dy_shape = (y.shape[0], 1) if y.ndim == 1 else y.shape
        result["Y@GRAD"] = reduce_to(dy, dy_shape).reshape(y.shape).astype(y.dtype, copy=False)
    return result



# --- arg_max / arg_min ---------------------------------------------------------------------------
def _index_dtype(attrs):
    dtype = attrs.get("dtype", -1)
    return np.dtype("int64") if dtype in (-1, None) else convert_dtype(dtype)


def _arg_op(name, pick):
    opdef = defop(name, inputs=("X",), outputs=("Out",),
                  attrs={"axis": 0, "keepdims": False, "flatten": False, "dtype": -1})

    @opdef.infer
    def _shape(ic):
        x = ic.input("X")
        if ic.attr("flatten"):
            shape = [1]
        else:
            rank, axis = len(x.shape), ic.attr("axis")
            ic.check(-rank <= axis < rank, f"axis={axis} is out of range for {ic.describe('X')}")
            shape = _reduced_shape(x.shape, (axis % rank,), ic.attr("keepdims"))
        ic.set_output("Out", shape, _index_dtype(ic.attrs))

    @opdef.kernel
    def _kernel(ctx, ins, attrs):
        x = ins["X"]
        if attrs["flatten"]:
            return {"Out": pick(x.reshape(-1), 0).reshape(1).astype(_index_dtype(attrs))}
        axis = attrs["axis"] % x.ndim
        out = pick(x, axis).reshape(_reduced_shape(x.shape, (axis,), attrs["keepdims"]))
        return {"Out": out.astype(_index_dtype(attrs), copy=False)}

    return opdef


_arg_op("arg_max", lambda x, axis: x.argmax(axis=axis))
_arg_op("arg_min", lambda x, axis: x.argmin(axis=axis))


# --- top_k ---------------------------------------------------------------------------------------
top_k = defop("top_k", inputs=("X",), outputs=("Out", "Indices"), attrs={"k": 1})


@top_k.infer
def _top_k_shape(ic):
    x, k = ic.input("X"), ic.attr("k")
    ic.check(k >= 1, f"k={k} must be >= 1")
    ic.check(x.shape[-1] < 0 or k <= x.shape[-1],
             f"k={k} is larger than the last dimension of {ic.describe('X')}")
    shape = list(x.shape[:-1]) + [k]
    ic.set_output("Out", shape, x.dtype)
    ic.set_output("Indices", shape, np.dtype("int64"))


@top_k.kernel
def _top_k(ctx, ins, attrs):
    x, k = ins["X"], attrs["k"]
    if k > x.shape[-1]:
        raise ValueError(f"k={k} is larger than the last dimension ({x.shape[-1]})")
    kernels = fused.kernels(ctx.xp)
    if k == 1 and kernels is not None and fused.takes(x) and 0 < x.size \
            and x.shape[-1] <= fused.TOP1_MAX:
        out, order = kernels.top1(ctx.xp.ascontiguousarray(x.reshape(-1, x.shape[-1])))
        shape = x.shape[:-1] + (1,)
        return {"Out": out.reshape(shape), "Indices": order.reshape(shape)}
    if k == 1:  # the common case (accuracy): argmax is O(n) and also picks the first of ties;
        # the max is the value there (a reduction: cheaper than gathering it, on a GPU most)
        order = ctx.xp.argmax(x, axis=-1)[..., None]
        return {"Out": x.max(axis=-1, keepdims=True), "Indices": order}
    # a stable sort puts ties in index order (CuPy's sort is always stable, and takes no kind)
    stable = {"kind": "stable"} if ctx.xp is np else {}
    order = ctx.xp.argsort(-x, axis=-1, **stable)[..., :k]
    return {"Out": ctx.xp.take_along_axis(x, order, axis=-1), "Indices": order}


@top_k.grad(uses=("X", "Indices"), inputs=("X",), outputs=("Out",), shape_only=("X",))
def _top_k_grad(ctx, ins, attrs):
    x, idx, dout = ins["X"], ins["Indices"], ins["Out@GRAD"]
    rows = int(np.prod(x.shape[:-1]))
    dx = ctx.xp.zeros((rows, x.shape[-1]), dtype=dout.dtype)
    dx[ctx.xp.arange(rows)[:, None], idx.reshape(rows, -1)] = dout.reshape(rows, -1)
    return {"X@GRAD": dx.reshape(x.shape)}


# --- one_hot -------------------------------------------------------------------------------------
one_hot = defop("one_hot", inputs=("X",), outputs=("Out",),
                attrs={"depth": 1, "dtype": "float32", "allow_out_of_range": False})


@one_hot.infer
def _one_hot_shape(ic):
    x, depth = ic.input("X"), ic.attr("depth")
    ic.check(x.dtype.kind in "iu", f"ids must be integers (int64), got {ic.describe('X')} "
                                   f"of {x.dtype.name}")
    ic.check(len(x.shape) >= 1 and x.shape[-1] in (1, -1),
             f"{ic.describe('X')} must end in a dimension of 1 ([batch, 1])")
    ic.check(depth >= 1, f"depth={depth} must be >= 1")
    ic.set_output("Out", list(x.shape[:-1]) + [depth], convert_dtype(ic.attr("dtype")))


@one_hot.kernel
def _one_hot(ctx, ins, attrs):
    ids, depth = ins["X"], attrs["depth"]
    flat = ids.reshape(-1)
    bad = (flat < 0) | (flat >= depth)
    if bool(bad.any()) and not attrs["allow_out_of_range"]:
        pos = int(ctx.xp.nonzero(bad)[0][0])
        raise ValueError(f"id {int(flat[pos])} (at position {pos}) is out of range [0, {depth}) "
                         f"for one_hot with depth={depth}; pass allow_out_of_range=True to "
                         f"get an all-zero row instead")
    out = ctx.xp.zeros((flat.size, depth), dtype=convert_dtype(attrs["dtype"]))
    rows = ctx.xp.nonzero(~bad)[0]
    out[rows, flat[rows]] = 1
    return {"Out": out.reshape(ids.shape[:-1] + (depth,))}


# --- accuracy (metric, no gradient) --------------------------------------------------------------
accuracy = defop("accuracy", inputs=("Out", "Indices", "Label"),
                 outputs=("Accuracy", "Correct", "Total"))


def _count_dtype(block, names):
    """Correct/Total are int32 (Fluid's default) unless the variable was declared int64."""
    var = block.vars.get(names[0]) if names else None
    dtype = getattr(var, "dtype", None)
    return dtype if dtype in (np.dtype("int32"), np.dtype("int64")) else np.dtype("int32")


@accuracy.infer
def _accuracy_shape(ic):
    idx, label = ic.input("Indices"), ic.input("Label")
    ic.check(len(idx.shape) == 2, f"{ic.describe('Indices')} must be [batch, k] (from top_k)")
    ic.check(label.dtype.kind in "iu", f"labels must be integers, got {ic.describe('Label')}")
    ic.check(len(label.shape) == 2 and label.shape[1] in (1, -1),
             f"{ic.describe('Label')} must be [batch, 1]")
    ic.check(dims_match(idx.shape[0], label.shape[0]),
             f"{ic.describe('Indices')} and {ic.describe('Label')} differ in batch size")
    ic.set_output("Accuracy", [1], np.dtype("float32"))
    for slot in ("Correct", "Total"):
        ic.set_output(slot, [1], _count_dtype(ic.block, ic.op.outputs.get(slot, ())))


@accuracy.kernel
def _accuracy(ctx, ins, attrs):
    idx, label = ins["Indices"], ins["Label"]
    if idx.shape[0] != label.shape[0]:
        raise ValueError(f"Indices has {idx.shape[0]} rows but Label has {label.shape[0]}")
    xp, total, outs = ctx.xp, idx.shape[0], ctx.op.outputs
    correct_dtype = _count_dtype(ctx.op.block, outs.get("Correct", ()))
    total_dtype = _count_dtype(ctx.op.block, outs.get("Total", ()))
    kernels = fused.kernels(xp)
    if kernels is not None and fused.label_types_ok(idx, label) and total:
        rate, correct, count = kernels.accuracy(xp.ascontiguousarray(idx),
                                                xp.ascontiguousarray(label.reshape(-1)),
                                                correct_dtype, total_dtype)
        return {"Accuracy": rate, "Correct": correct, "Total": count}
    # counted where the arrays are: on a GPU, no read-back (a wait) and no host-to-device copies
    correct = (idx == label.reshape(-1, 1)).any(axis=1).sum().reshape(1)
    rate = (correct / total).astype(np.float32) if total else xp.zeros(1, np.float32)
    return {"Accuracy": rate, "Correct": correct.astype(correct_dtype),
            "Total": xp.full(1, total, dtype=total_dtype)}
