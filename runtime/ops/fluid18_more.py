"""More Fluid 1.8 ops: range, gather_nd, similarity_focus, add_position_encoding,
sequence_reverse, tensor_array_to_tensor (described above its code).

range: Out = [Start, Start + Step, ...) up to End (all [1]-shaped, Out takes Start's dtype);
the length is ceil(|End - Start| / |Step|), and the values are accumulated one step at a time
in the output dtype, as Paddle's kernel does. Step 0, or a step pointing away from End, fails.
Not differentiable.

gather_nd: Index [..., k] picks X[i_0, ..., i_{k-1}] (the trailing X dims kept): Out has shape
Index.shape[:-1] + X.shape[k:]. Its gradient adds Out@GRAD back at the picked positions.

similarity_focus: X [N, A, B, C]; for each `indexes` entry i of `axis`, the 2-D slice X[:, i]
(along that axis) is walked from its largest value down, greedily keeping positions whose row
and column are both still free (min of the two sizes positions); the kept (row, column) pairs
are set to 1 in Out across the whole `axis`. Out has X's shape and dtype; no gradient.

add_position_encoding: Out = alpha * X + beta * PE, PE[j, k] = sin(j / 10000^(k / (h - 1)))
for k < h = E/2 and cos(...) of the same angle for the second half (j / 10000 when h == 1).
X is [B, L, E] (j the position along L), or [N, E] with a one-level LoD (j restarting at each
sequence). E must be even. X@GRAD = alpha * Out@GRAD.

sequence_reverse: X [N, ...] with a one-level LoD; each sequence's rows in reverse order (Y
keeps X's LoD). The gradient reverses Out@GRAD the same way.

Values (index bounds, range limits, LoDs) are read on the host; the arrays themselves stay in
`ctx.xp`'s memory.
"""

import math

import numpy as np

from ..lod import lod_of, with_lod
from .registry import defop


def _host(value):
    """A host NumPy copy of `value` (a NumPy or device array)."""
    return value.get() if hasattr(value, "get") and not isinstance(value, np.ndarray) \
        else np.asarray(value)


def _scalar(value):
    return _host(value).reshape(-1)[0]


# --- range --------------------------------------------------------------------------------------
range_op = defop("range", inputs=("Start", "End", "Step"), outputs=("Out",))
range_op.no_grad_reason = "range's output depends on its bounds only through its length"


@range_op.infer
def _range_shape(ic):
    for slot in ("Start", "End", "Step"):
        var = ic.input(slot)
        if var.shape is not None:
            ic.check(len(var.shape) == 1 and var.shape[0] in (1, -1),
                     f"{ic.describe(slot)} must have shape [1]")
    ic.set_output("Out", [-1], ic.input("Start").dtype)


def range_length(start, end, step, integral):
    if step == 0:
        raise ValueError("range: the step should not be 0")
    if start < end and step < 0:
        raise ValueError(f"range: the step {step} should be greater than 0 while start "
                         f"{start} < end {end}")
    if start > end and step > 0:
        raise ValueError(f"range: the step {step} should be less than 0 while start "
                         f"{start} > end {end}")
    if integral:
        return int((abs(end - start) + abs(step) - 1) // abs(step))
    return int(math.ceil(abs((end - start) / step)))


@range_op.kernel
def _range(ctx, ins, attrs):
    start = _scalar(ins["Start"])
    dtype = start.dtype
    end = _scalar(ins["End"]).astype(dtype)
    step = _scalar(ins["Step"]).astype(dtype)
    n = range_length(start, end, step, dtype.kind in "iu")
    steps = np.full(n, step, dtype=dtype)
    if n:
        steps[0] = start
    values = np.add.accumulate(steps, dtype=dtype)  # value += step, in the output dtype
    return {"Out": ctx.xp.asarray(values)}


# --- gather_nd ----------------------------------------------------------------------------------
gather_nd = defop("gather_nd", inputs=("X", "Index"), outputs=("Out",))


@gather_nd.infer
def _gather_nd_shape(ic):
    x, index = ic.input("X"), ic.input("Index")
    ic.check(index.dtype is None or index.dtype.kind in "iu",
             f"{ic.describe('Index')} must be int32/int64, got {index.dtype}")
    ic.check(len(index.shape) >= 2, f"the rank of {ic.describe('Index')} must be at least 2")
    k = index.shape[-1]
    ic.check(k <= len(x.shape), f"Index.shape[-1] ({k}) must not exceed the rank of "
                                f"{ic.describe('X')}")
    tail = list(x.shape[k:]) if k >= 0 else [-1]
    ic.set_output("Out", list(index.shape[:-1]) + tail, x.dtype)


def _nd_index(x, index):
    k = index.shape[-1]
    if k > x.ndim:
        raise ValueError(f"gather_nd: Index.shape[-1] ({k}) exceeds the rank of X "
                         f"(shape {list(x.shape)})")
    if index.size:
        host = _host(index).reshape(-1, k)
        for j in range(k):
            lo, hi = int(host[:, j].min()), int(host[:, j].max())
            if lo < 0 or hi >= x.shape[j]:
                raise ValueError(f"gather_nd: Index[..., {j}] holds {lo if lo < 0 else hi}, "
                                 f"outside [0, {x.shape[j]}) (X shape {list(x.shape)})")
    return tuple(index[..., j] for j in range(k)), k


@gather_nd.kernel
def _gather_nd(ctx, ins, attrs):
    x, index = ins["X"], ins["Index"]
    picks, k = _nd_index(x, index)
    if k == 0:
        shape = tuple(index.shape[:-1]) + tuple(x.shape)
        return {"Out": ctx.xp.broadcast_to(x, shape).copy()}
    return {"Out": x[picks]}


@gather_nd.grad(uses=("X", "Index"), inputs=("X",), shape_only=("X",))
def _gather_nd_grad(ctx, ins, attrs):
    x, index, dout = ins["X"], ins["Index"], ins["Out@GRAD"]
    xp = ctx.xp
    k = index.shape[-1]
    dx = xp.zeros(x.shape, dtype=dout.dtype)
    if k == 0:
        lead = dout.ndim - len(x.shape)
        dx += dout.reshape((-1,) + tuple(x.shape)).sum(axis=0) if lead else dout
        return {"X@GRAD": dx}
    xp.add.at(dx, tuple(index[..., j] for j in range(k)), dout)
    return {"X@GRAD": dx}


# --- similarity_focus ---------------------------------------------------------------------------
similarity_focus = defop("similarity_focus", inputs=("X",), outputs=("Out",),
                         attrs={"axis": 1, "indexes": []})
similarity_focus.no_grad_reason = "similarity_focus outputs a 0/1 mask"


def _check_focus(shape, axis, indexes):
    if len(shape) != 4:
        raise ValueError(f"similarity_focus: X must be 4-D, got shape {list(shape)}")
    if axis not in (1, 2, 3):
        raise ValueError(f"similarity_focus: axis must be 1, 2 or 3, got {axis}")
    if not indexes:
        raise ValueError("similarity_focus: indexes must not be empty")
    for i in indexes:
        if shape[axis] >= 0 and not 0 <= i < shape[axis]:
            raise ValueError(f"similarity_focus: index {i} is outside [0, {shape[axis]}) "
                             f"(axis {axis} of X shape {list(shape)})")


@similarity_focus.infer
def _similarity_focus_shape(ic):
    x = ic.input("X")
    try:
        _check_focus(x.shape, ic.attr("axis"), list(ic.attr("indexes")))
    except ValueError as err:
        ic.fail(str(err))
    ic.same_as()


def similarity_focus_mask(x, axis, indexes):
    """The 0/1 mask (host NumPy, x's dtype) for host array x [N, A, B, C]."""
    out = np.zeros(x.shape, dtype=x.dtype)
    moved = np.moveaxis(x, axis, 1)  # [N, focus, R, C]
    view = np.moveaxis(out, axis, 1)
    rows, cols = moved.shape[2], moved.shape[3]
    for n in range(x.shape[0]):
        for i in indexes:
            plane = moved[n, i].reshape(-1)
            order = np.argsort(-plane, kind="stable")
            used_r, used_c = np.zeros(rows, bool), np.zeros(cols, bool)
            kept = 0
            for flat in order:
                r, c = divmod(int(flat), cols)
                if used_r[r] or used_c[c]:
                    continue
                used_r[r] = used_c[c] = True
                view[n, :, r, c] = 1
                kept += 1
                if kept == min(rows, cols):
                    break
    return out


@similarity_focus.kernel
def _similarity_focus(ctx, ins, attrs):
    x = ins["X"]
    axis, indexes = int(attrs["axis"]), [int(i) for i in attrs["indexes"]]
    _check_focus(x.shape, axis, indexes)
    return {"Out": ctx.xp.asarray(similarity_focus_mask(_host(x), axis, indexes))}


# --- add_position_encoding ----------------------------------------------------------------------
position_encoding = defop("add_position_encoding", inputs=("X",), outputs=("Out",),
                          attrs={"alpha": 1.0, "beta": 1.0})


@position_encoding.infer
def _position_encoding_shape(ic):
    x = ic.input("X")
    ic.check(len(x.shape) in (2, 3), f"{ic.describe('X')} must be [batch, length, size] or "
                                     f"(with a LoD) [rows, size]")
    ic.check(x.shape[-1] < 0 or x.shape[-1] % 2 == 0,
             f"the feature size of {ic.describe('X')} must be even")
    ic.check(x.dtype is None or x.dtype.kind == "f", f"{ic.describe('X')} must be float")
    ic.same_as()


def position_table(positions, size):
    """[len(positions), size] float64: sin of the angles, then cos of them."""
    half = size // 2
    k = np.arange(half, dtype=np.float64)
    scale = np.power(10000.0, k / (half - 1)) if half > 1 else np.full(half, 10000.0)
    angle = np.asarray(positions, np.float64)[:, None] / scale[None, :]
    return np.concatenate([np.sin(angle), np.cos(angle)], axis=1)


def _positions(x):
    lod = lod_of(x)
    if lod:
        if x.ndim != 2 or len(lod) != 1:
            raise ValueError(f"add_position_encoding: a LoD input must be 2-D with one LoD "
                             f"level, got shape {list(x.shape)} and LoD {lod}")
        bounds = lod[0]
        return np.concatenate([np.arange(b - a) for a, b in zip(bounds[:-1], bounds[1:])]
                              + [np.zeros(0, np.int64)])
    if x.ndim != 3:
        raise ValueError(f"add_position_encoding: X must be [batch, length, size] (or 2-D "
                         f"with a LoD), got shape {list(x.shape)}")
    return np.arange(x.shape[1])


@position_encoding.kernel
def _position_encoding(ctx, ins, attrs):
    x = ins["X"]
    size = x.shape[-1]
    if size % 2:
        raise ValueError(f"add_position_encoding: the feature size {size} must be even")
    table = position_table(_positions(x), size) * float(attrs["beta"])
    if x.ndim == 3:
        table = table[None]
    out = x * float(attrs["alpha"]) + ctx.xp.asarray(table)
    return {"Out": with_lod(out.astype(x.dtype, copy=False), lod_of(x))}


@position_encoding.grad(uses=("X",), shape_only=("X",))
def _position_encoding_grad(ctx, ins, attrs):
    dout = ins["Out@GRAD"]
    return {"X@GRAD": with_lod(dout * dout.dtype.type(attrs["alpha"]), lod_of(ins["X"]))}


# --- sequence_reverse ---------------------------------------------------------------------------
sequence_reverse = defop("sequence_reverse", inputs=("X",), outputs=("Y",))


@sequence_reverse.infer
def _sequence_reverse_shape(ic):
    x = ic.input("X")
    ic.check(len(x.shape) >= 2, f"the rank of {ic.describe('X')} must be at least 2")
    ic.same_as("Y")


def reverse_rows(lod, rows):
    """The row permutation reversing each sequence of a one-level LoD."""
    if not lod:
        raise ValueError("sequence_reverse: X has no LoD. Feed a LoDTensor with sequence "
                         "lengths")
    if len(lod) != 1:
        raise ValueError(f"sequence_reverse supports a one-level LoD only, X has {lod}")
    bounds = lod[0]
    if bounds[-1] != rows:
        raise ValueError(f"sequence_reverse: the LoD {lod} does not end at the {rows} rows "
                         f"of X")
    perm = np.arange(rows, dtype=np.int64)
    for a, b in zip(bounds[:-1], bounds[1:]):
        perm[a:b] = perm[a:b][::-1]
    return perm


@sequence_reverse.kernel
def _sequence_reverse(ctx, ins, attrs):
    x = ins["X"]
    lod = lod_of(x)
    return {"Y": with_lod(x[reverse_rows(lod, x.shape[0])], lod)}


@sequence_reverse.grad(uses=("X",), inputs=("X",), outputs=("Y",))
def _sequence_reverse_grad(ctx, ins, attrs):
    x, dy = ins["X"], ins["Y@GRAD"]
    lod = lod_of(x)
    return {"X@GRAD": with_lod(dy[reverse_rows(lod, x.shape[0])], lod)}


# --- tensor_array_to_tensor ---------------------------------------------------------------------
# Out: the array's entries concatenated along `axis` (stacked on a new `axis` with use_stack);
# OutIndex (int32): each entry's size along `axis`. The gradient splits Out@GRAD back into an
# array of the entries' shapes.
array_to_tensor = defop("tensor_array_to_tensor", inputs=("X",), outputs=("Out", "OutIndex"),
                        attrs={"axis": 0, "use_stack": False})


@array_to_tensor.infer
def _array_to_tensor_shape(ic):
    x = ic.input("X")
    axis, stack = int(ic.attr("axis")), bool(ic.attr("use_stack"))
    shape = None
    if x.shape is not None:
        shape = list(x.shape)
        rank = len(shape) + (1 if stack else 0)
        ic.check(-rank <= axis < rank, f"axis {axis} is out of range for the entries of "
                                       f"{ic.describe('X')}")
        axis %= rank
        if stack:
            shape.insert(axis, -1)
        else:
            shape[axis] = -1
    ic.set_output("Out", shape, x.dtype)
    ic.set_output("OutIndex", [-1], np.dtype("int32"))


def _entries(array):
    if not array or any(a is None for a in array):
        raise ValueError("tensor_array_to_tensor: the input array is empty or has entries "
                         "that were never written")
    return list(array)


@array_to_tensor.kernel
def _array_to_tensor(ctx, ins, attrs):
    xp, entries = ctx.xp, _entries(ins["X"])
    axis, stack = int(attrs["axis"]), bool(attrs["use_stack"])
    rank = entries[0].ndim
    axis %= rank + (1 if stack else 0)
    sizes = [a.shape[axis] if axis < a.ndim else 1 for a in entries]
    out = xp.stack(entries, axis=axis) if stack else xp.concatenate(entries, axis=axis)
    return {"Out": out, "OutIndex": xp.asarray(np.asarray(sizes, np.int32))}


@array_to_tensor.grad(uses=("X",), inputs=("X",), outputs=("Out",))
def _array_to_tensor_grad(ctx, ins, attrs):
    entries, dout = _entries(ins["X"]), ins["Out@GRAD"]
    axis, stack = int(attrs["axis"]), bool(attrs["use_stack"])
    axis %= entries[0].ndim + (1 if stack else 0)
    grads, start = [], 0
    for a in entries:
        if stack:
            grads.append(dout[(slice(None),) * axis + (start,)])
            start += 1
        else:
            n = a.shape[axis]
            grads.append(dout[(slice(None),) * axis + (slice(start, start + n),)])
            start += n
    return {"X@GRAD": [g.reshape(a.shape) for g, a in zip(grads, entries)]}
