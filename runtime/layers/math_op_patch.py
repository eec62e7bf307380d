"""Operators on Variables, as Fluid 1.8 patches them in: arithmetic (x + y, 2 * x, x ** y,
x // y, x % y), comparisons making ops (x < y gives a bool variable; x == y an `equal` op,
as in Paddle: compare Variables by identity with `is`), -x and x.astype(dtype).

A Python number on the right of + - * / is folded into a `scale` op (not for integer
division); any other non-Variable operand becomes a [1] tensor (or, reversed, a tensor shaped
like the Variable, its batch dimension taken at run time) of the Variable's dtype, and an
operand of another dtype is cast to the left operand's.
"""

from ..dtypes import convert_dtype
from ..framework import Variable
from ..layer_helper import LayerHelper

_INT_KINDS = ("i", "u")
_COMPARE = ("__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__")


def _block(var):
    return var.block.program.current_block()


def _tmp(var, dtype):
    helper = LayerHelper("tmp")
    return _block(var).create_var(name=helper.name, dtype=dtype)


def _fill(var, value, dtype, shape):
    out = _tmp(var, dtype)
    _block(var).append_op("fill_constant", outputs={"Out": out},
                          attrs={"dtype": convert_dtype(dtype).name, "shape": list(shape),
                                 "value": float(value), "force_cpu": False})
    out.stop_gradient = True
    return out


def _fill_like_batch(ref, value, dtype):
    """A tensor shaped like `ref`, its first unknown dimension taken from ref at run time."""
    batch_dim = next(i for i, d in enumerate(ref.shape) if d < 0)
    shape = [d if d >= 0 else (d if i == batch_dim else 1) for i, d in enumerate(ref.shape)]
    out = _tmp(ref, dtype)
    _block(ref).append_op("fill_constant_batch_size_like", inputs={"Input": ref},
                          outputs={"Out": out},
                          attrs={"shape": shape, "value": float(value),
                                 "dtype": convert_dtype(dtype).name,
                                 "input_dim_idx": batch_dim, "output_dim_idx": batch_dim})
    out.stop_gradient = True
    return out


def astype(self, dtype):
    """A cast of this variable to `dtype`."""
    out = _tmp(self, dtype)
    _block(self).append_op("cast", inputs={"X": self}, outputs={"Out": out},
                           attrs={"in_dtype": self.dtype.name,
                                  "out_dtype": convert_dtype(dtype).name})
    return out


def _scale(var, scale, bias):
    out = _tmp(var, var.dtype)
    _block(var).append_op("scale", inputs={"X": var}, outputs={"Out": out},
                          attrs={"scale": float(scale), "bias": float(bias)})
    return out


_SCALAR = {
    "elementwise_add": lambda v, s, rev: _scale(v, 1.0, s),
    "elementwise_sub": lambda v, s, rev: _scale(v, -1.0, s) if rev else _scale(v, 1.0, -s),
    "elementwise_mul": lambda v, s, rev: _scale(v, s, 0.0),
    "elementwise_div": lambda v, s, rev: None if rev else _scale(v, 1.0 / s, 0.0),
}


def _method(name, op_type, reverse=False):
    def method(self, other):
        if isinstance(other, (int, float)) and not isinstance(other, bool) \
                and op_type in _SCALAR and name not in _COMPARE:
            int_div = op_type == "elementwise_div" and self.dtype.kind in _INT_KINDS
            folded = None if int_div else _SCALAR[op_type](self, float(other), reverse)
            if folded is not None:
                return folded
        if not isinstance(other, Variable):
            if reverse:
                other = (_fill_like_batch(self, other, self.dtype) if any(
                    d < 0 for d in self.shape) else _fill(self, other, self.dtype, self.shape))
            else:
                other = _fill(self, other, self.dtype, [1])
        if other.dtype != self.dtype:
            other = astype(other, self.dtype)
        x, y = (other, self) if reverse else (self, other)
        out = _tmp(x, "bool" if name in _COMPARE else self.dtype)
        axis = 0 if y.shape and y.shape[0] == -1 else -1
        _block(x).append_op(op_type, inputs={"X": x, "Y": y}, outputs={"Out": out},
                            attrs={"axis": axis})
        return out
    method.__name__ = name
    return method


_METHODS = (("__add__", "elementwise_add", False), ("__radd__", "elementwise_add", False),
            ("__sub__", "elementwise_sub", False), ("__rsub__", "elementwise_sub", True),
            ("__mul__", "elementwise_mul", False), ("__rmul__", "elementwise_mul", False),
            ("__truediv__", "elementwise_div", False),
            ("__rtruediv__", "elementwise_div", True),
            ("__pow__", "elementwise_pow", False), ("__rpow__", "elementwise_pow", True),
            ("__floordiv__", "elementwise_floordiv", False),
            ("__mod__", "elementwise_mod", False),
            ("__eq__", "equal", False), ("__ne__", "not_equal", False),
            ("__lt__", "less_than", False), ("__le__", "less_equal", False),
            ("__gt__", "greater_than", False), ("__ge__", "greater_equal", False))


def install():
    for name, op_type, reverse in _METHODS:
        setattr(Variable, name, _method(name, op_type, reverse))
    Variable.__neg__ = lambda self: _scale(self, -1.0, 0.0)
    Variable.astype = astype
    Variable.__hash__ = lambda self: id(self)  # == makes an op: hash by identity
