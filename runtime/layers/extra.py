"""More Fluid 1.8 layers: argsort, clamp, pow, elu, shape, sum, uniform_random, randn,
gaussian_random. Argument checks raise TypeError as Fluid's do."""

import sys

import numpy as np

from ..dtypes import convert_dtype
from ..framework import Variable
from ..layer_helper import LayerHelper
from .logic import check_variable

_FLOATS = ("float16", "float32", "float64")


def argsort(input, axis=-1, descending=False, name=None):
    """(values sorted along axis, their int64 positions in input)."""
    check_variable(input, "input", "argsort", _FLOATS + ("int16", "int32", "int64", "uint8"))
    helper = LayerHelper("argsort", name=name)
    out = helper.create_variable_for_type_inference(input.dtype)
    ids = helper.create_variable_for_type_inference("int64", stop_gradient=True)
    helper.append_op("argsort", inputs={"X": input}, outputs={"Out": out, "Indices": ids},
                     attrs={"axis": int(axis), "descending": bool(descending)})
    return out, ids


def clamp(input, min=None, max=None, output=None, name=None):  # noqa: A002
    """input clipped to [min, max]; either bound a float or a [1] tensor, or left open."""
    if min is None and max is None:
        raise AssertionError("either min or max should be defined.")
    check_variable(input, "input", "clamp", ("float32", "float64"))
    inputs, attrs = {"X": input}, {"min": sys.float_info.min, "max": sys.float_info.max}
    for key, bound in (("min", min), ("max", max)):
        if bound is None:
            if key == "min":
                attrs["min"] = -sys.float_info.max
            continue
        if isinstance(bound, Variable):
            check_variable(bound, key, "clamp", ("float32", "float64", "int32"))
            bound.stop_gradient = True
            inputs[key.capitalize()] = bound
        elif isinstance(bound, float):
            attrs[key] = bound
        else:
            raise TypeError(f"The type of '{key}' in clamp must be float or Variable, but "
                            f"received {type(bound)}.")
    helper = LayerHelper("clamp", name=name)
    if output is None:
        output = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op("clip", inputs=inputs, outputs={"Out": output}, attrs=attrs)
    return output


def pow(x, factor=1.0, name=None):  # noqa: A001  (Fluid's name)
    """x ** factor (factor a float or a float32 [1] tensor)."""
    check_variable(x, "x", "pow", ("int32", "int64", "float32", "float64"))
    helper = LayerHelper("pow", name=name)
    inputs, attrs = {"X": x}, {}
    if isinstance(factor, Variable):
        check_variable(factor, "factor", "pow", ("float32",))
        factor.stop_gradient = True
        inputs["FactorTensor"] = factor
    else:
        attrs["factor"] = float(factor)
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op("pow", inputs=inputs, outputs={"Out": out}, attrs=attrs)
    return out


def elu(x, alpha=1.0, name=None):
    """x where x > 0, alpha * (exp(x) - 1) elsewhere."""
    check_variable(x, "x", "elu", _FLOATS)
    helper = LayerHelper("elu", name=name)
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op("elu", inputs={"X": x}, outputs={"Out": out}, attrs={"alpha": alpha})
    return out


def shape(input):
    """input's dimensions (at run time) as an int32 tensor."""
    check_variable(input, "input", "shape", ("float32", "float64", "int32", "int64"))
    helper = LayerHelper("shape")
    out = helper.create_variable_for_type_inference("int32", stop_gradient=True)
    helper.append_op("shape", inputs={"Input": input}, outputs={"Out": out})
    return out


def sum(x):  # noqa: A001  (Fluid's name)
    """The elementwise sum of a list of tensors (or one tensor)."""
    items = list(x) if isinstance(x, (list, tuple)) else [x]
    for item in items:
        check_variable(item, "x", "sum", ("float32", "float64", "int32", "int64"))
    helper = LayerHelper("sum")
    out = helper.create_variable_for_type_inference(items[0].dtype)
    helper.append_op("sum", inputs={"X": items}, outputs={"Out": out},
                     attrs={"use_mkldnn": False})
    return out


def _random(op_type, shape, dtype, attrs, api, out=None):
    if not isinstance(shape, (list, tuple)):
        raise TypeError(f"The type of 'shape' in {api} must be list or tuple, but received "
                        f"{type(shape)}.")
    if len(shape) == 0:
        raise AssertionError("The size of argument(shape) can't be zero.")
    dtype = convert_dtype(dtype)
    if dtype.name not in ("float32", "float64"):
        raise TypeError(f"The data type of 'dtype' in {api} must be ['float32', 'float64'], "
                        f"but received {dtype.name}.")
    helper = LayerHelper(api)
    if out is None:
        out = helper.create_variable_for_type_inference(dtype)
    helper.append_op(op_type, outputs={"Out": out},
                     attrs=dict(attrs, shape=[int(d) for d in shape], dtype=dtype.name))
    return out


def uniform_random(shape, dtype="float32", min=-1.0, max=1.0, seed=0):  # noqa: A002
    """Uniform values in [min, max) (seed 0: the program's random stream)."""
    return _random("uniform_random", shape, dtype,
                   {"min": float(min), "max": float(max), "seed": int(seed)}, "uniform_random")


def gaussian_random(shape, mean=0.0, std=1.0, seed=0, dtype="float32"):
    return _random("gaussian_random", shape, dtype,
                   {"mean": float(mean), "std": float(std), "seed": int(seed)},
                   "gaussian_random")


def randn(shape, out=None, dtype=None, device=None, stop_gradient=True, name=None):
    """Standard normal values of `shape`."""
    result = _random("gaussian_random", shape, dtype or "float32",
                     {"mean": 0.0, "std": 1.0, "seed": int(np.random.randint(1, 100))},
                     "randn", out)
    result.stop_gradient = stop_gradient
    return result


__all__ = ["argsort", "clamp", "pow", "elu", "shape", "sum", "uniform_random",
           "gaussian_random", "randn"]
