"""Shape and layout ops: concat, split, stack, reshape2, transpose2, squeeze2, unsqueeze2,
flatten2, cast, slice, expand, fill_constant_batch_size_like. (Reductions, matmul and the
selection ops are in reduce.py.)

The `*2` ops (reshape2, transpose2, squeeze2, unsqueeze2, flatten2) also output XShape, as
Fluid does: an array of shape [0] + X.shape that holds no data, only X's shape, so their
gradients need not keep X alive. Their outputs are views of X (no copy).
"""

import numpy as np

from ..dtypes import convert_dtype
from .registry import linear_grad_grad, defop, dims_match, shape_product


def normalize_axis(ic, axis, rank, what="axis"):
    """axis in [-rank, rank) -> [0, rank); a clear build-time error otherwise."""
    ic.check(-rank <= axis < rank,
             f"{what}={axis} is out of range for a {rank}-D input {ic.describe('X')}")
    return axis + rank if axis < 0 else axis


def _set_xshape(ic, x):
    ic.set_output("XShape", [0] + list(x.shape), x.dtype)


def _xshape(ctx, x):
    return ctx.xp.empty((0,) + tuple(x.shape), dtype=x.dtype)


def _reshaping_op(name, attrs, out_shape, inputs=("X",)):
    """Register `name` (X -> Out, XShape) where Out = X.reshape(out_shape(shape, attrs, ins)).
    out_shape raises ValueError on a bad request; at build time `ins` is None and `shape` may
    hold -1 dims. The gradient reshapes Out@GRAD back to the shape recorded in XShape."""
    opdef = defop(name, inputs=inputs, outputs=("Out", "XShape"), attrs=attrs)

    @opdef.infer
    def _shape(ic):
        x = ic.input("X")
        try:
            shape = out_shape(list(x.shape), ic.attrs, None)
        except ValueError as err:
            ic.fail(f"cannot apply to {ic.describe('X')}: {err}")
        ic.set_output("Out", shape, x.dtype, lod_level=x.lod_level)
        _set_xshape(ic, x)

    @opdef.kernel
    def _kernel(ctx, ins, attrs):
        x = ins["X"]
        out = {"Out": x.reshape(out_shape(list(x.shape), attrs, ins))}
        if "XShape" in ctx.want:
            out["XShape"] = _xshape(ctx, x)
        return out

    @opdef.grad(uses=("XShape",), inputs=("X",), outputs=("Out",), shape_only=("XShape",))
    def _grad(ctx, ins, attrs):
        return {"X@GRAD": ins["Out@GRAD"].reshape(ins["XShape"].shape[1:])}

    return opdef


# --- concat / split / stack ----------------------------------------------------------------------
concat = defop("concat", inputs=("X*",), outputs=("Out",), attrs={"axis": 0})


@concat.infer
def _concat_shape(ic):
    xs = ic.inputs("X")
    ic.check(len(xs) > 0, "needs at least one input")
    first = xs[0]
    rank = len(first.shape)
    axis = normalize_axis(ic, ic.attr("axis"), rank)
    out = list(first.shape)
    for x in xs[1:]:
        ic.check(len(x.shape) == rank, f"all inputs must have one rank: {first.name!r} is "
                                       f"{list(first.shape)}, {x.name!r} is {list(x.shape)}")
        for i, (a, b) in enumerate(zip(out, x.shape)):
            ic.check(i == axis or dims_match(a, b),
                     f"inputs must agree on every dimension except axis={axis}: "
                     f"{first.name!r} is {list(first.shape)}, {x.name!r} is {list(x.shape)} "
                     f"(dimension {i})")
            if i != axis and a < 0:
                out[i] = b
        out[axis] = -1 if out[axis] < 0 or x.shape[axis] < 0 else out[axis] + x.shape[axis]
    ic.set_output("Out", out, first.dtype, lod_level=first.lod_level)


@concat.kernel
def _concat(ctx, ins, attrs):
    return {"Out": ctx.xp.concatenate(ins["X"], axis=attrs["axis"])}


@concat.grad(uses=("X",))
def _concat_grad(ctx, ins, attrs):
    xs, dout = ins["X"], ins["Out@GRAD"]
    axis = attrs["axis"] % dout.ndim
    bounds = np.cumsum([x.shape[axis] for x in xs])[:-1]
    return {"X@GRAD": ctx.xp.split(dout, [int(b) for b in bounds], axis=axis)}


split = defop("split", inputs=("X",), outputs=("Out*",), attrs={"num": 0, "sections": [],
                                                               "axis": 0})


def _split_sizes(dim, num, sections, n_outputs):
    """Sizes of the pieces along the axis (-1 where unknown); raises ValueError when they
    cannot fit `dim`."""
    if num > 0:
        if dim >= 0 and dim % num:
            raise ValueError(f"dimension {dim} does not divide into num={num} equal parts")
        return [dim // num if dim >= 0 else -1] * num
    sizes = [int(s) for s in sections]
    if not sizes:
        raise ValueError("give num > 0 or a list of sections")
    unknown = [i for i, s in enumerate(sizes) if s < 0]
    if len(unknown) > 1:
        raise ValueError(f"sections={sizes} may contain at most one -1")
    known = sum(s for s in sizes if s >= 0)
    if unknown and dim >= 0:
        if known > dim:
            raise ValueError(f"sections={sizes} need more than the dimension's {dim}")
        sizes[unknown[0]] = dim - known
    elif not unknown and dim >= 0 and known != dim:
        raise ValueError(f"sections={sizes} add up to {known}, but the dimension is {dim}")
    return sizes


@split.infer
def _split_shape(ic):
    x = ic.input("X")
    axis = normalize_axis(ic, ic.attr("axis"), len(x.shape))
    n_out = len(ic.op.outputs.get("Out", ()))
    try:
        sizes = _split_sizes(x.shape[axis], ic.attr("num"), ic.attr("sections"), n_out)
    except ValueError as err:
        ic.fail(f"cannot split {ic.describe('X')} along axis={axis}: {err}")
    ic.check(len(sizes) == n_out, f"makes {len(sizes)} pieces but the op has {n_out} outputs")
    for i, size in enumerate(sizes):
        shape = list(x.shape)
        shape[axis] = size
        ic.set_output("Out", shape, x.dtype, index=i, lod_level=x.lod_level)


@split.kernel
def _split(ctx, ins, attrs):
    x = ins["X"]
    axis = attrs["axis"] % x.ndim
    n_out = len(ctx.op.outputs["Out"])
    sizes = _split_sizes(x.shape[axis], attrs["num"], attrs["sections"], n_out)
    bounds = np.cumsum(sizes)[:-1]
    return {"Out": ctx.xp.split(x, [int(b) for b in bounds], axis=axis)}


@split.grad(uses=())
def _split_grad(ctx, ins, attrs):
    douts = ins["Out@GRAD"]
    axis = attrs["axis"] % douts[0].ndim
    return {"X@GRAD": ctx.xp.concatenate(douts, axis=axis)}


stack = defop("stack", inputs=("X*",), outputs=("Y",), attrs={"axis": 0})


@stack.infer
def _stack_shape(ic):
    xs = ic.inputs("X")
    ic.check(len(xs) > 0, "needs at least one input")
    first = xs[0]
    for x in xs[1:]:
        ic.check(len(x.shape) == len(first.shape) and all(map(dims_match, x.shape, first.shape)),
                 f"all inputs must have one shape: {first.name!r} is {list(first.shape)}, "
                 f"{x.name!r} is {list(x.shape)}")
    rank = len(first.shape) + 1
    axis = normalize_axis(ic, ic.attr("axis"), rank)
    out = list(first.shape)
    out.insert(axis, len(xs))
    ic.set_output("Y", out, first.dtype)


@stack.kernel
def _stack(ctx, ins, attrs):
    return {"Y": ctx.xp.stack(ins["X"], axis=attrs["axis"])}


@stack.grad(uses=())
def _stack_grad(ctx, ins, attrs):
    dy = ins["Y@GRAD"]
    axis = attrs["axis"] % dy.ndim
    return {"X@GRAD": [dy.take(i, axis=axis) for i in range(dy.shape[axis])]}


# --- reshape2 / squeeze2 / unsqueeze2 / flatten2 -------------------------------------------------
def reshape_target(in_shape, shape):
    """Fluid's reshape rule: 0 copies the input dimension at that index, one -1 is inferred
    from the element count. Unknown (-1) input dimensions give -1 where the size cannot be
    known. Raises ValueError when the shape cannot fit."""
    shape = [int(d) for d in shape]
    if shape.count(-1) > 1:
        raise ValueError(f"shape={shape} has more than one -1; only one dimension can be inferred")
    out, copied = [], set()
    for i, d in enumerate(shape):
        if d == 0:
            if i >= len(in_shape):
                raise ValueError(f"shape[{i}] is 0 (copy input dimension {i}) but the input has "
                                 f"only {len(in_shape)} dimensions")
            copied.add(i)
            out.append(in_shape[i])
        elif d < -1:
            raise ValueError(f"shape[{i}]={d}; the only special values are -1 (infer) and 0 "
                             f"(copy the input dimension)")
        else:
            out.append(d)
    unknown = shape.index(-1) if -1 in shape else None
    rest_in = [d for i, d in enumerate(in_shape) if i not in copied]
    rest_out = [d for i, d in enumerate(out) if i not in copied and i != unknown]
    in_size, out_size = shape_product(rest_in), shape_product(rest_out)
    which = "input dimensions not copied by 0" if copied else "input dimensions"
    what = f"shape={shape} does not fit: the {which} {rest_in} hold {in_size} elements"
    if unknown is not None:
        if in_size >= 0 and (out_size == 0 or in_size % out_size):
            raise ValueError(f"{what}, not a multiple of {out_size} (the product of {rest_out})")
        out[unknown] = in_size // out_size if in_size >= 0 else -1
    elif in_size >= 0 and in_size != out_size:
        raise ValueError(f"{what}, the new dimensions {rest_out} hold {out_size}")
    return out


def _reshape2_shape(shape, attrs, ins):
    actual = ins.get("Shape") if ins else None
    target = actual.tolist() if actual is not None else attrs["shape"]
    return reshape_target(shape, target)


def _check_axes(axes, rank, what):
    for a in axes:
        if not -rank <= a < rank:
            raise ValueError(f"{what}={list(axes)} has {a}, out of range for rank {rank}")


def _squeeze2_shape(shape, attrs, ins):
    """Drop the listed size-1 dims (all size-1 dims when axes is empty). A listed dimension
    that is not 1 is kept, as in Fluid 1.8; an unknown (-1) one is assumed to be 1."""
    axes = attrs["axes"]
    _check_axes(axes, len(shape), "axes")
    if axes:
        drop = {a % len(shape) for a in axes if shape[a % len(shape)] in (1, -1)}
    else:
        drop = {i for i, d in enumerate(shape) if d == 1}
    return [d for i, d in enumerate(shape) if i not in drop]


def _unsqueeze2_shape(shape, attrs, ins):
    """Insert size-1 dims one axis at a time; a negative axis counts from the end of the shape
    built so far (-1 appends)."""
    out = list(shape)
    for a in attrs["axes"]:
        pos = a + len(out) + 1 if a < 0 else a
        if not 0 <= pos <= len(out):
            raise ValueError(f"axis {a} is out of range for a {len(out)}-D shape {out}")
        out.insert(pos, 1)
    return out


def _flatten2_shape(shape, attrs, ins):
    axis = attrs["axis"]
    if not 0 <= axis <= len(shape):
        raise ValueError(f"axis={axis} must be in [0, {len(shape)}]")
    return [shape_product(shape[:axis]), shape_product(shape[axis:])]


for _op in (_reshaping_op("reshape2", {"shape": []}, _reshape2_shape, inputs=("X", "Shape?")),
            _reshaping_op("squeeze2", {"axes": []}, _squeeze2_shape),
            _reshaping_op("unsqueeze2", {"axes": []}, _unsqueeze2_shape),
            _reshaping_op("flatten2", {"axis": 1}, _flatten2_shape)):
    linear_grad_grad(_op)


# --- transpose2 ----------------------------------------------------------------------------------
transpose2 = defop("transpose2", inputs=("X",), outputs=("Out", "XShape"), attrs={"axis": []})


@transpose2.infer
def _transpose2_shape(ic):
    x = ic.input("X")
    perm = [int(a) for a in ic.attr("axis")]
    ic.check(sorted(perm) == list(range(len(x.shape))),
             f"axis={perm} must be a permutation of 0..{len(x.shape) - 1} for "
             f"{ic.describe('X')}")
    ic.set_output("Out", [x.shape[a] for a in perm], x.dtype)
    _set_xshape(ic, x)


@transpose2.kernel
def _transpose2(ctx, ins, attrs):
    x = ins["X"]
    out = {"Out": x.transpose(attrs["axis"])}
    if "XShape" in ctx.want:
        out["XShape"] = _xshape(ctx, x)
    return out


@transpose2.grad(uses=(), inputs=("X",), outputs=("Out",))
def _transpose2_grad(ctx, ins, attrs):
    inverse = tuple(int(a) for a in np.argsort(attrs["axis"]))
    return {"X@GRAD": ins["Out@GRAD"].transpose(inverse)}


# --- cast ----------------------------------------------------------------------------------------
cast = defop("cast", inputs=("X",), outputs=("Out",),
             attrs={"in_dtype": "float32", "out_dtype": "float32"})


@cast.infer
def _cast_shape(ic):
    x = ic.input("X")
    ic.set_output("Out", x.shape, convert_dtype(ic.attr("out_dtype")), lod_level=x.lod_level)


@cast.kernel
def _cast(ctx, ins, attrs):
    x, dtype = ins["X"], convert_dtype(attrs["out_dtype"])
    return {"Out": x.view() if x.dtype == dtype else x.astype(dtype)}


@cast.grad(uses=())
def _cast_grad(ctx, ins, attrs):
    """Only float -> float casts are differentiated (the backward pass skips integer
    variables), so this just casts the gradient back."""
    return {"X@GRAD": ins["Out@GRAD"].astype(convert_dtype(attrs["in_dtype"]))}


# --- slice ---------------------------------------------------------------------------------------
slice_op = defop("slice", inputs=("Input",), outputs=("Out",),
                 attrs={"axes": [], "starts": [], "ends": [], "decrease_axis": [],
                        "infer_flags": []})


def _slice_index(shape, attrs):
    """A tuple of Python slices taking [start, end) on each listed axis. As in Fluid, negative
    bounds count from the end and bounds are clamped to [0, dim]."""
    axes, starts, ends = attrs["axes"], attrs["starts"], attrs["ends"]
    if not len(axes) == len(starts) == len(ends):
        raise ValueError(f"axes={axes}, starts={starts}, ends={ends} must have one length")
    _check_axes(axes, len(shape), "axes")
    index = [slice(None)] * len(shape)
    for a, start, end in zip(axes, starts, ends):
        dim = shape[a]
        start, end = (start + dim if start < 0 else start), (end + dim if end < 0 else end)
        start, end = min(max(start, 0), dim), min(max(end, 0), dim)
        index[a % len(shape)] = slice(start, max(start, end))
    return tuple(index)


def _decreased(shape, attrs):
    drop = {a % len(shape) for a in attrs["decrease_axis"]}
    return [d for i, d in enumerate(shape) if i not in drop] or [1]


@slice_op.infer
def _slice_shape(ic):
    x = ic.input("Input")
    shape = list(x.shape)
    known = [d if d >= 0 else 1 << 62 for d in shape]  # unknown dims: give -1 below
    try:
        index = _slice_index(known, ic.attrs)
        _check_axes(ic.attr("decrease_axis"), len(shape), "decrease_axis")
    except ValueError as err:
        ic.fail(f"cannot slice {ic.describe('Input')}: {err}")
    out = [d if d < 0 or s == slice(None) else len(range(*s.indices(d)))
           for d, s in zip(shape, index)]
    for a in ic.attr("decrease_axis"):
        ic.check(out[a] in (1, -1), f"decrease_axis={ic.attr('decrease_axis')} removes "
                                    f"dimension {a}, which has size {out[a]}, not 1")
    ic.set_output("Out", _decreased(out, ic.attrs), x.dtype)


@slice_op.kernel
def _slice(ctx, ins, attrs):
    x = ins["Input"]
    out = x[_slice_index(x.shape, attrs)]
    if attrs["decrease_axis"]:
        if any(out.shape[a] != 1 for a in attrs["decrease_axis"]):
            raise ValueError(f"decrease_axis={attrs['decrease_axis']} needs size-1 dimensions, "
                             f"the slice has shape {list(out.shape)}")
        out = out.reshape(_decreased(list(out.shape), attrs))
    return {"Out": out}


@slice_op.grad(uses=("Input",), shape_only=("Input",))
def _slice_grad(ctx, ins, attrs):
    x, dout = ins["Input"], ins["Out@GRAD"]
    index = _slice_index(x.shape, attrs)
    dx = ctx.xp.zeros(x.shape, dtype=dout.dtype)
    dx[index] = dout.reshape(dx[index].shape)
    return {"Input@GRAD": dx}


# --- expand (tile) -------------------------------------------------------------------------------
expand = defop("expand", inputs=("X",), outputs=("Out",), attrs={"expand_times": []})


@expand.infer
def _expand_shape(ic):
    x, times = ic.input("X"), [int(t) for t in ic.attr("expand_times")]
    ic.check(len(times) == len(x.shape), f"expand_times={times} needs one entry per dimension "
                                         f"of {ic.describe('X')}")
    ic.check(all(t >= 1 for t in times), f"expand_times={times} must all be >= 1")
    ic.set_output("Out", [d * t if d >= 0 else -1 for d, t in zip(x.shape, times)], x.dtype)


@expand.kernel
def _expand(ctx, ins, attrs):
    return {"Out": ctx.xp.tile(ins["X"], attrs["expand_times"])}


@expand.grad(uses=("X",), shape_only=("X",))
def _expand_grad(ctx, ins, attrs):
    x, dout = ins["X"], ins["Out@GRAD"]
    times = attrs["expand_times"]
    split = [n for pair in zip(times, x.shape) for n in pair]  # [t0, d0, t1, d1, ...]
    return {"X@GRAD": dout.reshape(split).sum(axis=tuple(range(0, 2 * x.ndim, 2)))}


# --- fill_constant_batch_size_like ---------------------------------------------------------------
fill_batch_like = defop("fill_constant_batch_size_like", inputs=("Input",), outputs=("Out",),
                        attrs={"shape": [], "dtype": "float32", "value": 0.0,
                               "input_dim_idx": 0, "output_dim_idx": 0, "force_cpu": False})
fill_batch_like.shape_only = ("Input",)  # only Input's shape is read


def _batch_like_shape(in_shape, attrs):
    shape = [int(d) for d in attrs["shape"]]
    i, o = attrs["input_dim_idx"], attrs["output_dim_idx"]
    if not (-len(in_shape) <= i < len(in_shape) and -len(shape) <= o < len(shape)):
        raise ValueError(f"input_dim_idx={i} or output_dim_idx={o} is out of range for input "
                         f"shape {list(in_shape)} and shape={shape}")
    shape[o] = in_shape[i]
    return shape


@fill_batch_like.infer
def _fill_batch_like_shape(ic):
    try:
        shape = _batch_like_shape(ic.input("Input").shape, ic.attrs)
    except ValueError as err:
        ic.fail(str(err))
    ic.set_output("Out", shape, convert_dtype(ic.attr("dtype")))


@fill_batch_like.kernel
def _fill_batch_like(ctx, ins, attrs):
    shape = _batch_like_shape(ins["Input"].shape, attrs)
    return {"Out": ctx.xp.full(shape, attrs["value"], dtype=convert_dtype(attrs["dtype"]))}


for _op in (slice_op, expand, transpose2, concat, split, stack):
    linear_grad_grad(_op)  # linear ops: their gradients' gradients are the ops themselves


@transpose2.grad_def.infer
def _transpose2_grad_shape(ic):
    dout = ic.input("Out@GRAD")
    inverse = [int(a) for a in np.argsort(ic.attr("axis"))]
    ic.set_output("X@GRAD", [dout.shape[a] for a in inverse], dout.dtype)
