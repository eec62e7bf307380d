"""Tensor layers: creation (fill_constant, zeros, assign, create_parameter, ...), shape and
layout (reshape, transpose, concat, split, ...), reductions, matmul, top-k, one_hot, accuracy
and clipping, with Fluid 1.8 signatures."""

import numpy as np

from ..dtypes import convert_dtype
from ..framework import Variable
from ..initializer import ConstantInitializer, assign_value_attrs
from ..layer_helper import LayerHelper
from ..param_attr import ParamAttr


def _single_out(op_type, inputs, attrs, dtype, name=None, out_slot="Out", act=None):
    """Append `op_type` with one output of `dtype`; returns it (after `act`, if any)."""
    helper = LayerHelper(op_type, name=name, act=act)
    out = helper.create_variable_for_type_inference(dtype)
    helper.append_op(op_type, inputs=inputs, outputs={out_slot: out}, attrs=attrs)
    return helper.append_activation(out)


def _with_xshape(op_type, x, attrs, name=None, act=None):
    """Append one of the `*2` ops (Out plus the shape-only XShape); returns Out."""
    helper = LayerHelper(op_type, name=name, act=act)
    out = helper.create_variable_for_type_inference(x.dtype)
    x_shape = helper.create_variable_for_type_inference(x.dtype, stop_gradient=True)
    helper.append_op(op_type, inputs={"X": x}, outputs={"Out": out, "XShape": x_shape},
                     attrs=attrs)
    return helper.append_activation(out)


def _int_list(value, what):
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    for item in items:
        if isinstance(item, Variable):
            raise TypeError(f"{what}: Variables inside the list are not supported; pass ints "
                            f"(or a shape tensor through actual_shape for reshape)")
    return [int(v) for v in items]


# --- creation ------------------------------------------------------------------------------------
def fill_constant(shape, dtype, value, force_cpu=False, out=None):
    """A tensor of `shape` filled with `value` (no gradient flows through it)."""
    helper = LayerHelper("fill_constant")
    dtype = convert_dtype(dtype)
    if out is None:
        out = helper.create_variable_for_type_inference(dtype)
    helper.append_op("fill_constant", outputs={"Out": out},
                     attrs={"shape": _int_list(shape, "fill_constant shape"),
                            "dtype": dtype.name, "value": float(value), "force_cpu": force_cpu})
    out.stop_gradient = True
    return out


def fill_constant_batch_size_like(input, shape, dtype, value, input_dim_idx=0,
                                  output_dim_idx=0, force_cpu=False):
    """fill_constant whose dimension output_dim_idx is input's dimension input_dim_idx at run
    time (typically the batch size)."""
    attrs = {"shape": _int_list(shape, "fill_constant_batch_size_like shape"),
             "dtype": convert_dtype(dtype).name, "value": float(value),
             "input_dim_idx": input_dim_idx, "output_dim_idx": output_dim_idx,
             "force_cpu": force_cpu}
    out = _single_out("fill_constant_batch_size_like", {"Input": input}, attrs, dtype)
    out.stop_gradient = True
    return out


def zeros(shape, dtype, force_cpu=False):
    return fill_constant(shape, dtype, 0.0, force_cpu)


def ones(shape, dtype, force_cpu=False):
    return fill_constant(shape, dtype, 1.0, force_cpu)


def _fill_like(x, value, out):
    helper = LayerHelper("fill_any_like")
    if out is None:
        out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op("fill_any_like", inputs={"X": x}, outputs={"Out": out},
                     attrs={"value": float(value)})
    out.stop_gradient = True
    return out


def zeros_like(x, out=None):
    return _fill_like(x, 0.0, out)


def ones_like(x, out=None):
    return _fill_like(x, 1.0, out)


_MAX_ASSIGN_ELEMENTS = 1024 * 1024  # Fluid's limit for values stored in the program


def assign(input, output=None):
    """Copy a Variable (assign op) or a NumPy array (assign_value op, the values are stored in
    the program) into `output` (a new variable by default)."""
    helper = LayerHelper("assign")
    if isinstance(input, Variable):
        if output is None:
            output = helper.create_variable_for_type_inference(input.dtype)
        helper.append_op("assign", inputs={"X": input}, outputs={"Out": output})
        return output
    if not isinstance(input, np.ndarray):
        raise TypeError(f"assign: input must be a Variable or a numpy.ndarray, got "
                        f"{type(input).__name__}")
    if input.size > _MAX_ASSIGN_ELEMENTS:
        raise ValueError(f"assign: an array of {input.size} elements is too large to store in "
                         f"the program (limit {_MAX_ASSIGN_ELEMENTS}); load it as data instead")
    dtype = convert_dtype(input.dtype)
    if output is None:
        output = helper.create_variable_for_type_inference(dtype)
    attrs = assign_value_attrs(input)
    if "values" in attrs:
        attrs["values"] = input.ravel().tolist()
    helper.append_op("assign_value", outputs={"Out": output}, attrs=attrs)
    return output


def create_tensor(dtype, name=None, persistable=False):
    """An empty variable to be written later (e.g. as assign's output)."""
    helper = LayerHelper("create_tensor", name=name)
    return helper.create_variable(name=helper.name, dtype=dtype, persistable=persistable)


def create_parameter(shape, dtype, name=None, attr=None, is_bias=False,
                     default_initializer=None):
    """A trainable parameter of `shape` (initialised in the startup program)."""
    from ..initializer import Initializer
    _check_shape(shape, "create_parameter")
    if attr is not None and not isinstance(attr, (ParamAttr, str)):
        raise TypeError(f"create_parameter: attr must be a ParamAttr, a name or None, got "
                        f"{type(attr).__name__}")
    if default_initializer is not None and not isinstance(default_initializer, Initializer):
        raise TypeError(f"create_parameter: default_initializer must be an Initializer or "
                        f"None, got {type(default_initializer).__name__}")
    if isinstance(attr, str):
        attr = ParamAttr(name=attr)
    helper = LayerHelper("create_parameter")
    if attr is None:
        attr = ParamAttr(name=name)
    return helper.create_parameter(attr, shape, dtype, is_bias, default_initializer)


def create_global_var(shape, value, dtype, persistable=False, force_cpu=False, name=None):
    """A global variable filled with `value` by the startup program (no gradient)."""
    _check_shape(shape, "create_global_var")
    try:
        convert_dtype(dtype)
    except TypeError as err:  # Paddle's check_dtype raises ValueError here
        raise ValueError(f"create_global_var: {err}") from None
    if isinstance(value, np.ndarray) and value.size == 1:
        value = value.reshape(-1)[0]
    helper = LayerHelper("global_var")
    var = helper.create_global_variable(dtype=dtype, shape=list(shape), persistable=persistable,
                                        name=name, stop_gradient=True)
    helper.set_variable_initializer(var, ConstantInitializer(float(value), force_cpu))
    return var


def _check_shape(shape, api):
    """TypeError (as Paddle's check_type) unless shape is a list/tuple of ints."""
    if not isinstance(shape, (list, tuple, np.ndarray)):
        raise TypeError(f"The type of 'shape' in {api} must be list or tuple, but received "
                        f"{type(shape)}")
    for item in shape:
        if isinstance(item, bool) or not isinstance(item, (int, np.integer)):
            raise TypeError(f"All elements in 'shape' of {api} must be integers, but received "
                            f"{type(item)}")


# --- shape and layout ----------------------------------------------------------------------------
def reshape(x, shape, actual_shape=None, act=None, inplace=False, name=None):
    """x with a new shape: 0 copies x's dimension at that index, one -1 is inferred. With
    actual_shape (an int tensor) the shape is taken from it at run time. `inplace` is accepted
    for compatibility: the output is always a view of x, so no copy is made either way."""
    helper = LayerHelper("reshape2", name=name, act=act)
    inputs = {"X": x}
    if actual_shape is not None:
        inputs["Shape"] = actual_shape
    out = helper.create_variable_for_type_inference(x.dtype)
    x_shape = helper.create_variable_for_type_inference(x.dtype, stop_gradient=True)
    helper.append_op("reshape2", inputs=inputs, outputs={"Out": out, "XShape": x_shape},
                     attrs={"shape": _int_list(shape, "reshape shape")})
    return helper.append_activation(out)


def transpose(x, perm, name=None):
    return _with_xshape("transpose2", x, {"axis": _int_list(perm, "transpose perm")}, name)


def squeeze(input, axes, name=None):
    """Remove the listed size-1 dimensions (a listed dimension that is not 1 is kept)."""
    return _with_xshape("squeeze2", input, {"axes": _int_list(axes, "squeeze axes")}, name)


def unsqueeze(input, axes, name=None):
    """Insert size-1 dimensions at `axes`, one after another."""
    return _with_xshape("unsqueeze2", input, {"axes": _int_list(axes, "unsqueeze axes")}, name)


def flatten(x, axis=1, name=None):
    """A 2-D view: [prod(shape[:axis]), prod(shape[axis:])]."""
    return _with_xshape("flatten2", x, {"axis": int(axis)}, name)


def concat(input, axis=0, name=None):
    helper = LayerHelper("concat", input=input, name=name)
    out = helper.create_variable_for_type_inference(helper.input_dtype())
    helper.append_op("concat", inputs={"X": helper.multiple_input()}, outputs={"Out": out},
                     attrs={"axis": int(axis)})
    return out


def split(input, num_or_sections, dim=-1, name=None):
    """Split along `dim` into num_or_sections equal parts (an int) or parts of the listed
    sizes (one of them may be -1); returns the list of parts."""
    helper = LayerHelper("split", name=name)
    if isinstance(num_or_sections, int):
        num, sections, n_out = num_or_sections, [], num_or_sections
    else:
        sections = _int_list(num_or_sections, "split sections")
        num, n_out = 0, len(sections)
    if n_out < 1:
        raise ValueError(f"split: num_or_sections={num_or_sections!r} must make at least one part")
    outs = [helper.create_variable_for_type_inference(input.dtype) for _ in range(n_out)]
    helper.append_op("split", inputs={"X": input}, outputs={"Out": outs},
                     attrs={"num": num, "sections": sections, "axis": int(dim)})
    return outs


def stack(x, axis=0):
    xs = list(x) if isinstance(x, (list, tuple)) else [x]
    return _single_out("stack", {"X": xs}, {"axis": int(axis)}, xs[0].dtype, out_slot="Y")


def slice(input, axes, starts, ends):  # noqa: A001  (Fluid's name)
    """input[starts:ends] on each of `axes` (negative bounds count from the end; clamped)."""
    attrs = {"axes": _int_list(axes, "slice axes"), "starts": _int_list(starts, "slice starts"),
             "ends": _int_list(ends, "slice ends")}
    return _single_out("slice", {"Input": input}, attrs, input.dtype)


def expand(x, expand_times, name=None):
    """Tile x: dimension i is repeated expand_times[i] times."""
    return _single_out("expand", {"X": x}, {"expand_times": _int_list(expand_times, "expand")},
                       x.dtype, name)


def cast(x, dtype):
    dtype = convert_dtype(dtype)
    return _single_out("cast", {"X": x}, {"in_dtype": x.dtype.name, "out_dtype": dtype.name},
                       dtype)


# --- math and reductions -------------------------------------------------------------------------
def matmul(x, y, transpose_x=False, transpose_y=False, alpha=1.0, name=None):
    """alpha * (x @ y) with optional transposes of the last two dimensions; batch dimensions
    broadcast; a 1-D x is a row vector and a 1-D y a column vector (squeezed afterwards)."""
    attrs = {"transpose_X": bool(transpose_x), "transpose_Y": bool(transpose_y),
             "alpha": float(alpha)}
    return _single_out("matmul", {"X": x, "Y": y}, attrs, x.dtype, name)


def _reduce(op_type, input, dim, keep_dim, name):
    if dim is not None and not isinstance(dim, (list, tuple)):
        dim = [dim]
    reduce_all = dim is None or len(dim) == 0 or len(dim) == len(input.shape)
    attrs = {"dim": _int_list(dim, op_type) if dim else [0], "keep_dim": bool(keep_dim),
             "reduce_all": reduce_all}
    return _single_out(op_type, {"X": input}, attrs, input.dtype, name)


def reduce_sum(input, dim=None, keep_dim=False, name=None):
    """Sum over `dim` (an int or list; None: every dimension, giving shape [1])."""
    return _reduce("reduce_sum", input, dim, keep_dim, name)


def reduce_mean(input, dim=None, keep_dim=False, name=None):
    return _reduce("reduce_mean", input, dim, keep_dim, name)


def reduce_max(input, dim=None, keep_dim=False, name=None):
    return _reduce("reduce_max", input, dim, keep_dim, name)


def reduce_min(input, dim=None, keep_dim=False, name=None):
    return _reduce("reduce_min", input, dim, keep_dim, name)


def reduce_prod(input, dim=None, keep_dim=False, name=None):
    return _reduce("reduce_prod", input, dim, keep_dim, name)


def _arg(op_type, x, axis):
    out = _single_out(op_type, {"X": x}, {"axis": int(axis)}, "int64")
    out.stop_gradient = True
    return out


def argmax(x, axis=0):
    return _arg("arg_max", x, axis)


def argmin(x, axis=0):
    return _arg("arg_min", x, axis)


def topk(input, k, name=None):
    """The k largest values along the last dimension and their int64 indices."""
    helper = LayerHelper("top_k", name=name)
    values = helper.create_variable_for_type_inference(input.dtype)
    indices = helper.create_variable_for_type_inference("int64", stop_gradient=True)
    helper.append_op("top_k", inputs={"X": input}, outputs={"Out": values, "Indices": indices},
                     attrs={"k": int(k)})
    return values, indices


def one_hot(input, depth, allow_out_of_range=False):
    """int ids [..., 1] -> float32 one-hot rows [..., depth]."""
    out = _single_out("one_hot", {"X": input}, {"depth": int(depth), "dtype": "float32",
                                                "allow_out_of_range": allow_out_of_range},
                      "float32")
    out.stop_gradient = True
    return out


def accuracy(input, label, k=1, correct=None, total=None):
    """Top-k accuracy of `input` (scores [batch, classes]) against int64 `label` [batch, 1]:
    a float32 [1] variable. correct/total (int32 by default) receive the counts."""
    helper = LayerHelper("accuracy")
    values, indices = topk(input, k)
    acc = helper.create_variable_for_type_inference("float32", stop_gradient=True)
    if correct is None:
        correct = helper.create_variable_for_type_inference("int32", stop_gradient=True)
    if total is None:
        total = helper.create_variable_for_type_inference("int32", stop_gradient=True)
    helper.append_op("accuracy", inputs={"Out": values, "Indices": indices, "Label": label},
                     outputs={"Accuracy": acc, "Correct": correct, "Total": total})
    return acc


def clip(x, min, max, name=None):  # noqa: A002  (Fluid's argument names)
    """x clamped to [min, max]."""
    return _single_out("clip", {"X": x}, {"min": float(min), "max": float(max)}, x.dtype, name)


def clip_by_norm(x, max_norm, name=None):
    """x scaled down so that its L2 norm is at most max_norm."""
    return _single_out("clip_by_norm", {"X": x}, {"max_norm": float(max_norm)}, x.dtype, name)


__all__ = ["fill_constant", "fill_constant_batch_size_like", "zeros", "ones", "zeros_like",
           "ones_like", "assign", "create_tensor", "create_parameter", "create_global_var",
           "reshape", "transpose", "squeeze", "unsqueeze", "flatten", "concat", "split", "stack",
           "slice", "expand", "cast", "matmul", "reduce_sum", "reduce_mean", "reduce_max",
           "reduce_min", "reduce_prod", "argmax", "argmin", "topk", "one_hot", "accuracy",
           "clip", "clip_by_norm"]
