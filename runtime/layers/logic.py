"""Comparison and logical layers (bool outputs, no gradient), increment, and the argument
checks Fluid 1.8 makes on them (TypeError on a wrong type or dtype)."""

from ..framework import Variable
from ..layer_helper import LayerHelper

_NUMERIC = ("float32", "float64", "int32", "int64")


def check_variable(value, what, api, dtypes=None):
    """TypeError (Paddle's wording) unless `value` is a Variable of one of `dtypes`."""
    if not isinstance(value, Variable):
        raise TypeError(f"The type of '{what}' in {api} must be <class "
                        f"'paddle.fluid.framework.Variable'>, but received "
                        f"{type(value)}. ")
    if dtypes is not None and value.dtype is not None and value.dtype.name not in dtypes:
        raise TypeError(f"The data type of '{what}' in {api} must be {list(dtypes)}, but "
                        f"received {value.dtype.name}. ")


def _compare(op_type, x, y, cond, force_cpu=None):
    check_variable(x, "x", op_type, _NUMERIC + ("bool",))
    check_variable(y, "y", op_type, _NUMERIC + ("bool",))
    if cond is not None and not isinstance(cond, Variable):
        raise TypeError(f"The type of 'cond' in {op_type} must be Variable, but received "
                        f"{type(cond)}.")
    if force_cpu is not None and not isinstance(force_cpu, bool):
        raise TypeError(f"The type of 'force_cpu' in {op_type} must be bool")
    helper = LayerHelper(op_type)
    if cond is None:
        cond = helper.create_variable_for_type_inference("bool", stop_gradient=True)
    attrs = {"force_cpu": force_cpu} if force_cpu is not None else {}
    helper.append_op(op_type, inputs={"X": x, "Y": y}, outputs={"Out": cond}, attrs=attrs)
    return cond


def less_than(x, y, force_cpu=None, cond=None):
    return _compare("less_than", x, y, cond, force_cpu)


def less_equal(x, y, cond=None):
    return _compare("less_equal", x, y, cond)


def greater_than(x, y, cond=None):
    return _compare("greater_than", x, y, cond)


def greater_equal(x, y, cond=None):
    return _compare("greater_equal", x, y, cond)


def equal(x, y, cond=None):
    return _compare("equal", x, y, cond)


def not_equal(x, y, cond=None):
    return _compare("not_equal", x, y, cond)


def _logical(op_type, x, y=None, out=None, name=None):
    check_variable(x, "x", op_type, ("bool",))
    if y is not None:
        check_variable(y, "y", op_type, ("bool",))
    if out is not None and not isinstance(out, Variable):
        raise TypeError(f"The type of 'out' in {op_type} must be Variable")
    helper = LayerHelper(op_type, name=name)
    if out is None:
        out = helper.create_variable_for_type_inference("bool", stop_gradient=True)
    inputs = {"X": x} if y is None else {"X": x, "Y": y}
    helper.append_op(op_type, inputs=inputs, outputs={"Out": out})
    return out


def logical_and(x, y, out=None, name=None):
    return _logical("logical_and", x, y, out, name)


def logical_or(x, y, out=None, name=None):
    return _logical("logical_or", x, y, out, name)


def logical_xor(x, y, out=None, name=None):
    return _logical("logical_xor", x, y, out, name)


def logical_not(x, out=None, name=None):
    return _logical("logical_not", x, None, out, name)


def increment(x, value=1.0, in_place=True):
    """x + value (a one-element counter), written back into x when in_place."""
    check_variable(x, "x", "increment", _NUMERIC)
    helper = LayerHelper("increment")
    out = x if in_place else helper.create_variable_for_type_inference(x.dtype)
    helper.append_op("increment", inputs={"X": x}, outputs={"Out": out},
                     attrs={"step": float(value)})
    return out


__all__ = ["less_than", "less_equal", "greater_than", "greater_equal", "equal", "not_equal",
           "logical_and", "logical_or", "logical_xor", "logical_not", "increment"]
