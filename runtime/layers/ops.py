"""Activation layers: relu, sigmoid, tanh, leaky_relu, exp, log, sqrt, square, abs."""

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


__all__ = ["relu", "sigmoid", "tanh", "leaky_relu", "exp", "log", "sqrt", "square", "abs",
           "sign"]
