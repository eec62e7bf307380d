"""Activation and unary math ops: relu, sigmoid, tanh, leaky_relu, softmax, exp, log, sqrt,
square, abs. Gradients that can be written from the output use only Out (as Paddle does), so
the input can be freed early."""

from . import fused
from .registry import defop, infer_same_as


def _unary(name, forward, backward, uses, attrs=None, inplace=True):
    """Register `name` with forward(xp, x, attrs, out) and backward(xp, x, out_value, dout,
    attrs, out). `out` is a buffer the result may be written into (or None): the executor
    grants the input's buffer when nothing else needs it."""
    opdef = defop(name, inputs=("X",), outputs=("Out",), attrs=dict(attrs or {}),
                  inplace={"Out": "X"} if inplace else None)
    opdef.infer(infer_same_as())

    @opdef.kernel
    def kernel(ctx, ins, attrs):
        x = ins["X"]
        return {"Out": forward(ctx.xp, x, attrs, ctx.reuse("Out", x, x.shape, x.dtype))}

    @opdef.grad(uses=uses, inplace={"X@GRAD": "Out@GRAD"})
    def grad(ctx, ins, attrs):
        dout = ins["Out@GRAD"]
        buf = ctx.reuse("X@GRAD", dout, dout.shape, dout.dtype)
        return {"X@GRAD": backward(ctx.xp, ins.get("X"), ins.get("Out"), dout, attrs, buf)}

    return opdef


def _relu_grad(xp, x, out, dout, attrs, buf):
    kernels = fused.kernels(xp)
    if kernels is not None and fused.takes(out, dout):
        # one launch, no boolean temporary
        return kernels.relu_grad(out, dout) if buf is None else kernels.relu_grad(out, dout, buf)
    return xp.multiply(dout, out > 0, out=buf)


def _leaky(xp, x, attrs, buf):
    return xp.where(x > 0, x, x * attrs["alpha"]).astype(x.dtype, copy=False)


def _leaky_grad(xp, x, out, dout, attrs, buf):
    return xp.where(x > 0, dout, dout * attrs["alpha"]).astype(dout.dtype, copy=False)


def _sigmoid(xp, x, attrs, buf):
    # split by sign so exp never overflows
    z = xp.exp(-xp.abs(x))
    return xp.where(x >= 0, 1 / (1 + z), z / (1 + z)).astype(x.dtype, copy=False)


_unary("relu", lambda xp, x, a, buf: xp.maximum(x, 0, out=buf), _relu_grad, uses=("Out",))
_unary("sigmoid", _sigmoid, lambda xp, x, o, d, a, buf: xp.multiply(d, o * (1 - o), out=buf),
       uses=("Out",))
_unary("tanh", lambda xp, x, a, buf: xp.tanh(x, out=buf),
       lambda xp, x, o, d, a, buf: xp.multiply(d, 1 - o * o, out=buf), uses=("Out",))
_unary("leaky_relu", _leaky, _leaky_grad, uses=("X",), attrs={"alpha": 0.02})
_unary("exp", lambda xp, x, a, buf: xp.exp(x, out=buf),
       lambda xp, x, o, d, a, buf: xp.multiply(d, o, out=buf), uses=("Out",))
_unary("log", lambda xp, x, a, buf: xp.log(x),
       lambda xp, x, o, d, a, buf: xp.divide(d, x, out=buf), uses=("X",), inplace=False)
_unary("sqrt", lambda xp, x, a, buf: xp.sqrt(x, out=buf),
       lambda xp, x, o, d, a, buf: xp.multiply(d, 0.5 / o, out=buf), uses=("Out",))
_unary("square", lambda xp, x, a, buf: x * x,
       lambda xp, x, o, d, a, buf: xp.multiply(d, 2 * x, out=buf), uses=("X",), inplace=False)
_unary("abs", lambda xp, x, a, buf: xp.abs(x),
       lambda xp, x, o, d, a, buf: xp.multiply(d, xp.sign(x), out=buf), uses=("X",),
       inplace=False)


# --- softmax along an axis ---------------------------------------------------------------------
softmax = defop("softmax", inputs=("X",), outputs=("Out",),
                attrs={"axis": -1, "use_cudnn": False, "data_format": "AnyLayout"})


@softmax.infer
def _softmax_shape(ic):
    x = ic.input("X")
    axis = ic.attr("axis")
    ic.check(-len(x.shape) <= axis < len(x.shape),
             f"axis={axis} is out of range for {ic.describe('X')}")
    ic.same_as()


def stable_softmax(xp, x, axis):
    shifted = x - x.max(axis=axis, keepdims=True)
    e = xp.exp(shifted)
    e /= e.sum(axis=axis, keepdims=True)
    return e


@softmax.kernel
def _softmax(ctx, ins, attrs):
    return {"Out": stable_softmax(ctx.xp, ins["X"], attrs["axis"])}


@softmax.grad(uses=("Out",))
def _softmax_grad(ctx, ins, attrs):
    out, dout = ins["Out"], ins["Out@GRAD"]
    axis = attrs["axis"]
    return {"X@GRAD": out * (dout - (dout * out).sum(axis=axis, keepdims=True))}
