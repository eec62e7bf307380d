"""More unary ops of Fluid 1.8 (used by the learning-rate decay layers and the book models):
floor, ceil, round, cos, sin, reciprocal, rsqrt, softplus, softsign, relu6, logsigmoid,
hard_sigmoid, swish. floor/ceil/round have a zero gradient, as in Paddle."""

from .activation import _unary


def _zero_grad(xp, x, out, dout, attrs, buf):
    return xp.zeros_like(dout)


def _softplus(xp, x, attrs, buf):
    # log(1 + e^x) without overflow
    return (xp.maximum(x, 0) + xp.log1p(xp.exp(-xp.abs(x)))).astype(x.dtype, copy=False)


def _sigmoid_of(xp, x):
    z = xp.exp(-xp.abs(x))
    return xp.where(x >= 0, 1 / (1 + z), z / (1 + z))


def _hard_sigmoid(xp, x, attrs, buf):
    return xp.clip(attrs["slope"] * x + attrs["offset"], 0.0, 1.0).astype(x.dtype, copy=False)


def _hard_sigmoid_grad(xp, x, out, dout, attrs, buf):
    inside = (out > 0) & (out < 1)
    return (dout * inside * attrs["slope"]).astype(dout.dtype, copy=False)


def _swish_grad(xp, x, out, dout, attrs, buf):
    beta = attrs["beta"]
    s = _sigmoid_of(xp, beta * x)
    return (dout * (s + beta * x * s * (1 - s))).astype(dout.dtype, copy=False)


for _name, _fn in (("floor", "floor"), ("ceil", "ceil"), ("round", "round")):
    _unary(_name, lambda xp, x, a, buf, fn=_fn: getattr(xp, fn)(x), _zero_grad, uses=(),
           inplace=False)

_unary("cos", lambda xp, x, a, buf: xp.cos(x),
       lambda xp, x, o, d, a, buf: -d * xp.sin(x), uses=("X",), inplace=False,
       second=(lambda xp, x, a: -xp.sin(x), lambda xp, x, a: -xp.cos(x)))
_unary("sin", lambda xp, x, a, buf: xp.sin(x),
       lambda xp, x, o, d, a, buf: d * xp.cos(x), uses=("X",), inplace=False,
       second=(lambda xp, x, a: xp.cos(x), lambda xp, x, a: -xp.sin(x)))
_unary("reciprocal", lambda xp, x, a, buf: 1 / x,
       lambda xp, x, o, d, a, buf: -d * o * o, uses=("Out",), inplace=False)
_unary("rsqrt", lambda xp, x, a, buf: 1 / xp.sqrt(x),
       lambda xp, x, o, d, a, buf: -0.5 * d * o * o * o, uses=("Out",), inplace=False)
_unary("softplus", _softplus,
       lambda xp, x, o, d, a, buf: d * _sigmoid_of(xp, x), uses=("X",), inplace=False)
_unary("softsign", lambda xp, x, a, buf: x / (1 + xp.abs(x)),
       lambda xp, x, o, d, a, buf: d / ((1 + xp.abs(x)) ** 2), uses=("X",), inplace=False)
_unary("relu6", lambda xp, x, a, buf: xp.clip(x, 0.0, a["threshold"]),
       lambda xp, x, o, d, a, buf: d * ((x > 0) & (x < a["threshold"])), uses=("X",),
       attrs={"threshold": 6.0}, inplace=False)
_unary("logsigmoid", lambda xp, x, a, buf: -_softplus(xp, -x, a, None),
       lambda xp, x, o, d, a, buf: d * _sigmoid_of(xp, -x), uses=("X",), inplace=False)
_unary("hard_sigmoid", _hard_sigmoid, _hard_sigmoid_grad, uses=("X", "Out"),
       attrs={"slope": 0.2, "offset": 0.5}, inplace=False)
_unary("swish", lambda xp, x, a, buf: x * _sigmoid_of(xp, a["beta"] * x), _swish_grad,
       uses=("X",), attrs={"beta": 1.0}, inplace=False)
