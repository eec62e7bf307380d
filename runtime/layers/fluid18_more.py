"""More Fluid 1.8 layers: range, gather_nd, similarity_focus, add_position_encoding,
sequence_reverse, tensor_array_to_tensor (their ops: runtime/ops/fluid18_more.py)."""

import numbers

from ..dtypes import convert_dtype
from ..framework import Variable
from ..layer_helper import LayerHelper
from .logic import check_variable
from .tensor import cast, fill_constant

__all__ = ["range", "gather_nd", "similarity_focus", "add_position_encoding",
           "sequence_reverse", "tensor_array_to_tensor"]

_FLOATS = ("float32", "float64")
_RANGE_DTYPES = ("float32", "float64", "int32", "int64")


def _bound(value, what, dtype):
    if isinstance(value, bool) or not isinstance(value, (numbers.Real, Variable)):
        raise TypeError(f"The type of '{what}' in range must be (float, int, Variable), but "
                        f"received {type(value)}.")
    if not isinstance(value, Variable):
        return fill_constant([1], dtype, value)
    if value.dtype != dtype:
        return cast(value, dtype)
    return value


def range(start, end, step, dtype):  # noqa: A001  (Fluid's name)
    """A 1-D tensor of start, start + step, ... below end (above it for a negative step).
    start/end/step: numbers or [1]-shaped Variables (cast to dtype); dtype: float32, float64,
    int32 or int64."""
    dtype = convert_dtype(dtype)
    if dtype.name not in _RANGE_DTYPES:
        raise TypeError(f"The data type of 'create data type' in range must be "
                        f"{list(_RANGE_DTYPES)}, but received {dtype.name}.")
    start = _bound(start, "start", dtype)
    end = _bound(end, "end", dtype)
    step = _bound(step, "step", dtype)
    helper = LayerHelper("range")
    out = helper.create_variable_for_type_inference(start.dtype, stop_gradient=True)
    helper.append_op("range", inputs={"Start": start, "End": end, "Step": step},
                     outputs={"Out": out})
    out.stop_gradient = True
    return out


def gather_nd(input, index, name=None):
    """input[index[..., 0], ..., index[..., k-1]] for k = index.shape[-1]: shape
    index.shape[:-1] + input.shape[k:]."""
    check_variable(input, "input", "gather_nd")
    check_variable(index, "index", "gather_nd", ("int32", "int64"))
    helper = LayerHelper("gather_nd", name=name)
    out = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op("gather_nd", inputs={"X": input, "Index": index}, outputs={"Out": out})
    return out


def similarity_focus(input, axis, indexes, name=None):
    """A 0/1 mask of input [N, A, B, C]: for each of `indexes` along `axis` (1, 2 or 3), the
    greedy largest-first positions with distinct rows and columns in that slice, set across
    the whole axis."""
    check_variable(input, "input", "similarity_focus", _FLOATS)
    if not isinstance(axis, int) or isinstance(axis, bool):
        raise TypeError(f"The type of 'axis' in similarity_focus must be <class 'int'>, but "
                        f"received {type(axis)}. ")
    if not isinstance(indexes, list):
        raise TypeError(f"The type of 'indexes' in similarity_focus must be <class 'list'>, "
                        f"but received {type(indexes)}. ")
    if axis not in (1, 2, 3):
        raise ValueError("axis must be 1, 2 or 3.")
    if not indexes:
        raise ValueError("indexes can not be empty.")
    helper = LayerHelper("similarity_focus", name=name)
    out = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op("similarity_focus", inputs={"X": input}, outputs={"Out": out},
                     attrs={"axis": axis, "indexes": [int(i) for i in indexes]})
    return out


def add_position_encoding(input, alpha, beta, name=None):
    """alpha * input + beta * sinusoidal position encoding; input [batch, length, size] or a
    [rows, size] LoD tensor (positions restart at each sequence); size must be even."""
    check_variable(input, "input", "add_position_encoding", _FLOATS)
    helper = LayerHelper("add_position_encoding", name=name)
    out = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op("add_position_encoding", inputs={"X": input}, outputs={"Out": out},
                     attrs={"alpha": float(alpha), "beta": float(beta)})
    return out


def sequence_reverse(x, name=None):
    """Each sequence of the one-level LoD tensor x with its rows in reverse order."""
    check_variable(x, "x", "fluid.layers.sequence_reverse",
                   ("float32", "float64", "int8", "int32", "int64"))
    helper = LayerHelper("sequence_reverse", name=name)
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op("sequence_reverse", inputs={"X": x}, outputs={"Y": out})
    return out


def tensor_array_to_tensor(input, axis=1, name=None, use_stack=False):
    """The LoDTensorArray `input`'s entries concatenated along axis (stacked on a new axis
    with use_stack), and an int32 tensor of each entry's size along axis."""
    check_variable(input, "input", "tensor_array_to_tensor")
    helper = LayerHelper("tensor_array_to_tensor", name=name)
    out = helper.create_variable_for_type_inference(input.dtype)
    out_index = helper.create_variable_for_type_inference("int32", stop_gradient=True)
    helper.append_op("tensor_array_to_tensor", inputs={"X": input},
                     outputs={"Out": out, "OutIndex": out_index},
                     attrs={"axis": int(axis), "use_stack": bool(use_stack)})
    return out, out_index
