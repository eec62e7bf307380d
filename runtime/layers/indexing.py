"""Variable.__getitem__ with Fluid 1.8's rules (framework.py's _getitem_impl_).

Supported, as in 1.8: an int or a slice per leading axis (a tuple of them for several axes),
negative ints and bounds counting from the end, slice steps (negative too), and [1]-shaped
integer Variables as an index or as a slice's start/stop. An int or Variable index drops its
axis (the op's decrease_axis); indexing every axis leaves shape [1], not a scalar, as in Fluid.

Ops: all-int bounds with step 1 become one `slice` op; steps other than 1 or Variable bounds one
`strided_slice` op (Fluid 1.8 puts Variable bounds on `slice`'s tensor inputs, which this
runtime's slice lacks). Gradients flow through those ops' grad kernels.

Not supported (1.8 does not support them either): None (newaxis), Ellipsis, bools, floats,
lists/arrays (fancy indexing), Variable steps, and empty slices (Fluid has no 0-size dims).
"""

import math
import numbers

from ..framework import Variable
from ..layer_helper import LayerHelper

_BIG = 2 ** 31 - 1  # "to the end" for an unknown dimension


def _is_int(v):
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _check_index_var(v, what):
    if v.dtype is not None and v.dtype.kind not in "iu":
        raise TypeError(f"a Variable used as {what} must be int32/int64, "
                        f"{v.name!r} is {v.dtype}")
    if v.shape is not None and all(d >= 0 for d in v.shape) and \
            math.prod(v.shape) != 1:
        raise IndexError(f"a Variable used as {what} must hold one value (shape [1]), "
                         f"{v.name!r} has shape {list(v.shape)}")
    v.stop_gradient = True


def _unsupported(item, dim):
    if item is None:
        return "None (newaxis) is not supported by Fluid 1.8's Variable indexing; " \
               "use fluid.layers.unsqueeze"
    if item is Ellipsis:
        return "Ellipsis (...) is not supported by Fluid 1.8's Variable indexing; " \
               "spell out the leading axes with ':'"
    if isinstance(item, bool):
        return "boolean indices are not supported by Fluid 1.8's Variable indexing"
    return (f"index {item!r} ({type(item).__name__}) at position {dim} is not supported: "
            f"Fluid 1.8 indexes a Variable with ints, slices and [1]-shaped int Variables "
            f"(no lists, arrays or floats; use fluid.layers.gather for those)")


def getitem(var, item):
    items = list(item) if isinstance(item, tuple) else [item]
    shape = list(var.shape) if var.shape is not None else None
    if shape is not None and len(items) > len(shape):
        raise IndexError(f"too many indices for {var.name!r}: {len(items)} given, "
                         f"it has {len(shape)} dimensions (shape {shape})")
    axes, starts, ends, steps, decrease = [], [], [], [], []
    for dim, it in enumerate(items):
        size = shape[dim] if shape is not None else -1
        if isinstance(it, slice):
            start, stop, step = it.start, it.stop, it.step
            if step is None:
                step = 1
            if isinstance(step, Variable):
                raise TypeError("a Variable slice step is not supported; use an int")
            for b in (start, stop):
                if b is not None and not _is_int(b) and not isinstance(b, Variable):
                    raise TypeError(_unsupported(b, dim))
            if not _is_int(step):
                raise TypeError(_unsupported(step, dim))
            step = int(step)
            if step == 0:
                raise ValueError("slice step cannot be zero")
            if start is None and stop is None and step == 1:
                continue
            has_var = isinstance(start, Variable) or isinstance(stop, Variable)
            for b, what in ((start, "a slice start"), (stop, "a slice stop")):
                if isinstance(b, Variable):
                    _check_index_var(b, what)
            if not has_var and size >= 0:
                lo, hi, step = slice(start, stop, step).indices(size)
                if len(range(lo, hi, step)) == 0:
                    raise IndexError(f"slice {it} of axis {dim} (size {size}) of {var.name!r} "
                                     f"is empty; Fluid does not support empty tensors")
                start, stop = lo, hi  # with step < 0, stop -1 means "through index 0"
            else:
                if start is None:
                    start = 0 if step > 0 else -1
                elif _is_int(start):
                    start = int(start)
                if stop is None:
                    stop = _BIG if step > 0 else -1
                elif _is_int(stop):
                    stop = int(stop)
            axes.append(dim)
            starts.append(start)
            ends.append(stop)
            steps.append(step)
        elif _is_int(it):
            i = int(it)
            if size >= 0 and not -size <= i < size:
                raise IndexError(f"index {i} is out of range for axis {dim} of {var.name!r} "
                                 f"(size {size})")
            if size >= 0:
                i %= size
            axes.append(dim)
            starts.append(i)
            ends.append(i + 1 if i != -1 else _BIG)
            steps.append(1)
            decrease.append(dim)
        elif isinstance(it, Variable):
            _check_index_var(it, "an index")
            axes.append(dim)
            starts.append(it)
            ends.append(("plus_one", it))
            steps.append(1)
            decrease.append(dim)
        else:
            raise (IndexError if it is None or it is Ellipsis else TypeError)(
                _unsupported(it, dim))
    if not axes:
        return var

    helper = LayerHelper("getitem")
    tensors = any(isinstance(b, (Variable, tuple)) for b in starts + ends)
    out = helper.create_variable_for_type_inference(var.dtype)
    if not tensors and all(s == 1 for s in steps):
        helper.append_op("slice", inputs={"Input": var}, outputs={"Out": out},
                         attrs={"axes": axes, "starts": starts, "ends": ends,
                                "decrease_axis": decrease, "infer_flags": [1] * len(axes)})
        return out

    def const(value, dtype):
        c = helper.create_variable_for_type_inference(dtype, stop_gradient=True)
        helper.append_op("fill_constant", outputs={"Out": c},
                         attrs={"shape": [1], "dtype": dtype, "value": float(value),
                                "force_cpu": True})
        return c

    def plus_one(v):
        one = const(1, v.dtype.name)
        end = helper.create_variable_for_type_inference(v.dtype, stop_gradient=True)
        helper.append_op("elementwise_add", inputs={"X": v, "Y": one}, outputs={"Out": end},
                         attrs={"axis": -1})
        return end

    inputs = {"Input": var}
    attrs = {"axes": axes, "decrease_axis": decrease, "strides": steps}
    flags = [1] * len(axes)
    for key, slot, values in (("starts", "StartsTensorList", starts),
                              ("ends", "EndsTensorList", ends)):
        if any(isinstance(b, (Variable, tuple)) for b in values):
            lst, placeholders = [], []
            for i, b in enumerate(values):
                if isinstance(b, tuple):
                    b = plus_one(b[1])
                if isinstance(b, Variable):
                    lst.append(b)
                    placeholders.append(-1 if key == "starts" else 0)
                    flags[i] = -1
                else:
                    lst.append(const(b, "int32"))
                    placeholders.append(b)
            inputs[slot] = lst
            attrs[key] = placeholders
        else:
            attrs[key] = list(values)
    attrs["infer_flags"] = flags
    helper.append_op("strided_slice", inputs=inputs, outputs={"Out": out}, attrs=attrs)
    return out


def sequence_mask(x, maxlen=None, dtype="int64", name=None):
    """A [..., maxlen] mask of x's integer lengths: out[..., j] = (j < x[...]). maxlen may be an
    int, a [1]-shaped int Variable, or None (then max(x) at run time). No gradient."""
    from ..dtypes import convert_dtype
    if not isinstance(x, Variable):
        raise TypeError(f"sequence_mask: x must be a Variable, got {type(x).__name__}")
    if x.dtype is not None and x.dtype.kind not in "iu":
        raise TypeError(f"sequence_mask: x must hold int32/int64 lengths, got {x.dtype}")
    dtype = convert_dtype(dtype)
    helper = LayerHelper("sequence_mask", name=name)
    out = helper.create_variable_for_type_inference(dtype, stop_gradient=True)
    inputs, attrs = {"X": x}, {"out_dtype": dtype.name}
    if isinstance(maxlen, Variable):
        _check_index_var(maxlen, "sequence_mask's maxlen")
        inputs["MaxLenTensor"] = maxlen
    elif maxlen is not None:
        if not _is_int(maxlen):
            raise TypeError(f"sequence_mask: maxlen must be an int or a Variable, got {maxlen!r}")
        attrs["maxlen"] = int(maxlen)
    helper.append_op("sequence_mask", inputs=inputs, outputs={"Y": out}, attrs=attrs)
    out.stop_gradient = True
    return out
