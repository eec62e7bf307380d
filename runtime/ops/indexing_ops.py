"""Ops behind Variable.__getitem__ and sequence_mask (Fluid 1.8).

strided_slice: Input[start:end:stride] on each listed axis. Bounds come from the attrs, or per
axis from the optional StartsTensorList/EndsTensorList/StridesTensorList ([1]-shaped int
tensors; attr entries for those axes are placeholders). Negative bounds count from the end; with
a negative stride an end of -1 means "run to the front" (Fluid's encoding of a missing stop).
decrease_axis drops size-1 axes; an index given as start=-1, end=0 (end = start + 1 computed at
run time) means the last element. Fluid rejects empty slices; so does this op.

sequence_mask: Y[..., j] = j < X[...] for j < maxlen, where maxlen is MaxLenTensor, else the
attr, else (attr < 0) max(X). Not differentiable.
"""

import numpy as np

from ..dtypes import convert_dtype
from .registry import defop
from .tensor import _check_axes, _decreased

strided_slice = defop("strided_slice",
                      inputs=("Input", "StartsTensorList*?", "EndsTensorList*?",
                              "StridesTensorList*?"),
                      outputs=("Out",),
                      attrs={"axes": [], "starts": [], "ends": [], "strides": [],
                             "decrease_axis": [], "infer_flags": []})


def _axis_slice(start, end, stride, dim, decrease):
    """The Python slice for one axis (dim known), or raise ValueError."""
    if stride == 0:
        raise ValueError("a slice step cannot be zero")
    if decrease and start == -1 and end == 0:
        return slice(dim - 1, dim, 1)
    start = start + dim if start < 0 else start
    if stride > 0:
        stop = end + dim if end < 0 else end
        s = slice(min(max(start, 0), dim), min(max(stop, 0), dim), stride)
    else:
        stop = None if end == -1 else (end + dim if end < 0 else end)
        if stop is not None and stop < 0:
            stop = None
        s = slice(min(start, dim - 1), stop, stride) if start >= 0 else slice(0, 0, 1)
    if len(range(*s.indices(dim))) == 0:
        raise ValueError(f"the slice [{start}:{end}:{stride}] of a dimension of size {dim} "
                         f"is empty (Fluid does not allow empty slices)")
    return s


def _values(attr_vals, tensors, xp_vals):
    if not tensors:
        return [int(v) for v in attr_vals]
    return [int(np.asarray(t).reshape(-1)[0]) for t in xp_vals]


def _index(shape, attrs, starts, ends, strides):
    axes = attrs["axes"]
    if not len(axes) == len(starts) == len(ends) == len(strides):
        raise ValueError(f"axes={axes}, starts={starts}, ends={ends}, strides={strides} "
                         f"must have one length")
    _check_axes(axes, len(shape), "axes")
    decrease = {a % len(shape) for a in attrs["decrease_axis"]}
    index = [slice(None)] * len(shape)
    for a, st, en, sd in zip(axes, starts, ends, strides):
        a %= len(shape)
        index[a] = _axis_slice(st, en, sd, shape[a], a in decrease)
    return tuple(index)


def _bounds(ins, attrs):
    def pick(attr, slot):
        ts = ins.get(slot) or []
        ts = [t for t in ts if t is not None]
        return _values(attrs[attr], ts, [ctxless(t) for t in ts])
    return pick("starts", "StartsTensorList"), pick("ends", "EndsTensorList"), \
        pick("strides", "StridesTensorList")


def ctxless(t):
    return t.get() if hasattr(t, "get") and not isinstance(t, np.ndarray) else t


@strided_slice.infer
def _strided_slice_shape(ic):
    x = ic.input("Input")
    shape = list(x.shape)
    attrs = ic.attrs
    axes = attrs["axes"]
    try:
        _check_axes(axes, len(shape), "axes")
        _check_axes(attrs["decrease_axis"], len(shape), "decrease_axis")
    except ValueError as err:
        ic.fail(f"cannot slice {ic.describe('Input')}: {err}")
    ic.check(len(attrs["starts"]) == len(attrs["ends"]) == len(attrs["strides"]) == len(axes),
             f"axes, starts, ends and strides need one length: {attrs}")
    tensor_bounds = any(ic.inputs(s) for s in ("StartsTensorList", "EndsTensorList",
                                               "StridesTensorList"))
    decrease = {a % len(shape) for a in attrs["decrease_axis"]}
    out = list(shape)
    for a, st, en, sd in zip(axes, attrs["starts"], attrs["ends"], attrs["strides"]):
        a %= len(shape)
        if a in decrease:
            out[a] = 1
        elif tensor_bounds or shape[a] < 0:
            out[a] = -1
        else:
            try:
                out[a] = len(range(*_axis_slice(st, en, sd, shape[a], False).indices(shape[a])))
            except ValueError as err:
                ic.fail(f"cannot slice {ic.describe('Input')}: {err}")
    ic.set_output("Out", _decreased(out, attrs), x.dtype)


@strided_slice.kernel
def _strided_slice(ctx, ins, attrs):
    x = ins["Input"]
    out = x[_index(x.shape, attrs, *_bounds(ins, attrs))]
    return {"Out": out.reshape(_decreased(list(out.shape), attrs))}


@strided_slice.grad(uses=("Input", "StartsTensorList", "EndsTensorList", "StridesTensorList"),
                    inputs=("Input",), outputs=("Out",), shape_only=("Input",))
def _strided_slice_grad(ctx, ins, attrs):
    x, dout = ins["Input"], ins["Out@GRAD"]
    index = _index(x.shape, attrs, *_bounds(ins, attrs))
    dx = ctx.xp.zeros(x.shape, dtype=dout.dtype)
    dx[index] = dout.reshape(dx[index].shape)
    return {"Input@GRAD": dx}


# --- sequence_mask -------------------------------------------------------------------------------
sequence_mask = defop("sequence_mask", inputs=("X", "MaxLenTensor?"), outputs=("Y",),
                      attrs={"maxlen": -1, "out_dtype": "int64"})
sequence_mask.no_grad_reason = "sequence_mask's output is a 0/1 mask of integer lengths"


@sequence_mask.infer
def _sequence_mask_shape(ic):
    x = ic.input("X")
    maxlen = int(ic.attr("maxlen"))
    last = -1 if ic.input("MaxLenTensor") is not None or maxlen < 0 else maxlen
    ic.check(ic.input("MaxLenTensor") is not None or maxlen != 0,
             "maxlen must be positive, or negative to take max(X)")
    ic.set_output("Y", list(x.shape) + [last], convert_dtype(ic.attr("out_dtype")))


@sequence_mask.kernel
def _sequence_mask(ctx, ins, attrs):
    xp, x = ctx.xp, ins["X"]
    if ins.get("MaxLenTensor") is not None:
        maxlen = int(np.asarray(ctxless(ins["MaxLenTensor"])).reshape(-1)[0])
    else:
        maxlen = int(attrs["maxlen"])
        if maxlen < 0:
            maxlen = int(xp.max(x)) if x.size else 0
    if maxlen < 0:
        raise ValueError(f"sequence_mask: maxlen={maxlen} must not be negative")
    cols = xp.arange(maxlen)
    y = cols < x[..., None]
    return {"Y": y.astype(convert_dtype(attrs["out_dtype"]))}
