"""Activation and unary math layers: relu, sigmoid, tanh, leaky_relu, exp, log, sqrt, square,
abs, sign, floor, ceil, round, cos, sin, reciprocal, rsqrt, softplus, softsign, relu6,
logsigmoid, hard_sigmoid, swish."""

from .nn import _unary


def relu(x, name=None):
    return _unary("relu", x, name)


def sigmoid(x, name=None):
    return _unary("sigmoid", x, name)


def tanh(x, name=None):
    return _unary("tanh", x, name)


def leaky_relu(x, alpha=0.02, name=None):
    return _unary("leaky_relu", x, name, alpha=float(alpha))


def exp(x, name=None):
    return _unary("exp", x, name)


def log(x, name=None):
    return _unary("log", x, name)


def sqrt(x, name=None):
    return _unary("sqrt", x, name)


def square(x, name=None):
    return _unary("square", x, name)


def abs(x, name=None):  # noqa: A001  (Paddle's name)
    return _unary("abs", x, name)


def sign(x, name=None):
    return _unary("sign", x, name)


def _plain(op_type):
    def layer(x, name=None):
        return _unary(op_type, x, name)
    layer.__name__ = layer.__qualname__ = op_type
    layer.__doc__ = f"Elementwise {op_type} (Paddle's layers.{op_type})."
    return layer


floor, ceil, round, cos, sin = (_plain(n) for n in ("floor", "ceil", "round", "cos", "sin"))
reciprocal, rsqrt, softplus = (_plain(n) for n in ("reciprocal", "rsqrt", "softplus"))
softsign, logsigmoid = _plain("softsign"), _plain("logsigmoid")


def relu6(x, threshold=6.0, name=None):
    return _unary("relu6", x, name, threshold=float(threshold))


def hard_sigmoid(x, slope=0.2, offset=0.5, name=None):
    return _unary("hard_sigmoid", x, name, slope=float(slope), offset=float(offset))


def swish(x, beta=1.0, name=None):
    return _unary("swish", x, name, beta=float(beta))


__all__ = ["relu", "sigmoid", "tanh", "leaky_relu", "exp", "log", "sqrt", "square", "abs",
           "sign", "floor", "ceil", "round", "cos", "sin", "reciprocal", "rsqrt", "softplus",
           "softsign", "relu6", "logsigmoid", "hard_sigmoid", "swish"]
