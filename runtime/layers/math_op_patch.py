"""Arithmetic operators on Variables (x + y, x * 2.0, -x, ...), as Fluid patches them in."""

import numbers

from ..framework import Variable
from . import nn


def _scalar_op(x, scale, bias):
    return nn.scale(x, scale=scale, bias=bias)


def _fill_like(x, value):
    from ..layer_helper import LayerHelper
    helper = LayerHelper("fill_any_like")
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op("fill_any_like", inputs={"X": x}, outputs={"Out": out},
                     attrs={"value": float(value)})
    return out


def _binary(op, reverse=False):
    def method(self, other):
        if isinstance(other, numbers.Number):
            if op == "elementwise_add":
                return _scalar_op(self, 1.0, other)
            if op == "elementwise_sub":
                return _scalar_op(self, -1.0, other) if reverse else _scalar_op(self, 1.0, -other)
            if op == "elementwise_mul":
                return _scalar_op(self, other, 0.0)
            if op == "elementwise_div" and not reverse:
                return _scalar_op(self, 1.0 / other, 0.0)
            other = _fill_like(self, other)
        if not isinstance(other, Variable):
            return NotImplemented
        x, y = (other, self) if reverse else (self, other)
        return nn._elementwise(op, x, y)
    return method


def install():
    Variable.__add__ = _binary("elementwise_add")
    Variable.__radd__ = _binary("elementwise_add", reverse=True)
    Variable.__sub__ = _binary("elementwise_sub")
    Variable.__rsub__ = _binary("elementwise_sub", reverse=True)
    Variable.__mul__ = _binary("elementwise_mul")
    Variable.__rmul__ = _binary("elementwise_mul", reverse=True)
    Variable.__truediv__ = _binary("elementwise_div")
    Variable.__rtruediv__ = _binary("elementwise_div", reverse=True)
    Variable.__pow__ = _binary("elementwise_pow")
    Variable.__neg__ = lambda self: _scalar_op(self, -1.0, 0.0)
