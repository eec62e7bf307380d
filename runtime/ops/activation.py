"""Activation and unary math ops: relu, sigmoid, tanh, leaky_relu, elu, softmax, exp, log, sqrt,
square, abs, pow, with second-order rules for the elementwise ones. Gradients that can be written from the output use only Out (as Paddle does), so
the input can be freed early."""

import numpy as np

from . import cpu_kernels, fused
from .registry import Special, defop, infer_same_as


def _unary(name, forward, backward, uses, attrs=None, inplace=True, second=None, line=None):
    """Register `name` with forward(xp, x, attrs, out) and backward(xp, x, out_value, dout,
    attrs, out). `out` is a buffer the result may be written into (or None): the executor
    grants the input's buffer when nothing else needs it. second=(d1, d2): the gradient is
    dOut * d1(v) with v the one input it uses (X or Out); d2 = d(d1)/dv gives the second-order
    rule."""
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

    @opdef.specialize
    def special(step, ins):  # (no buffer granted: the specialised ops have no inplace)
        x = ins["X"]
        if type(x) is not np.ndarray:
            return None
        if line is not None:
            return Special([line], {"maximum": np.maximum})
        return Special(["{Out} = {k_f}({k_xp}, {X}, {k_attrs}, None)"],
                       {"f": forward, "xp": np, "attrs": step.attrs})

    @opdef.grad_def.specialize
    def grad_special(step, ins):
        dout, x, out = ins["Out@GRAD"], ins.get("X"), ins.get("Out")
        if any(v is not None and type(v) is not np.ndarray for v in (dout, x, out)):
            return None
        if backward is _relu_grad and out.size < cpu_kernels.SMALL:  # (its NumPy calls)
            return Special(["{X@GRAD} = {k_multiply}({Out@GRAD}, {Out} > 0)"],
                           {"multiply": np.multiply})
        xe, oe = ("{X}" if x is not None else "None"), ("{Out}" if out is not None else "None")
        return Special([f"{{X@GRAD}} = {{k_b}}({{k_xp}}, {xe}, {oe}, {{Out@GRAD}}, {{k_attrs}}, "
                        f"None)"], {"b": backward, "xp": np, "attrs": step.attrs})

    if second is not None:
        _second_order(opdef, uses[0], *second)
    return opdef


def _second_order(opdef, use, d1, d2):
    """The grad op computes dX = dOut * d1(v): its gradient given ddX (what arrives for dX)
    is d(dOut) = ddX * d1(v) and dv = ddX * dOut * d2(v)."""
    @opdef.grad_def.grad(uses=(use, "Out@GRAD"), inputs=(use, "Out@GRAD"))
    def grad2(ctx, ins, attrs):
        xp, v, dout, ddx = ctx.xp, ins[use], ins["Out@GRAD"], ins["X@GRAD@GRAD"]
        result = {}
        if "Out@GRAD@GRAD" in ctx.want:
            result["Out@GRAD@GRAD"] = (ddx * d1(xp, v, attrs)).astype(dout.dtype, copy=False)
        if use + "@GRAD" in ctx.want:
            result[use + "@GRAD"] = (ddx * dout * d2(xp, v, attrs)).astype(dout.dtype,
                                                                          copy=False)
        return result


def _relu_grad(xp, x, out, dout, attrs, buf):
    if xp is not np or out.size >= cpu_kernels.SMALL:  # (smaller: NumPy's two calls are cheaper)
        kernels = fused.kernels(xp)
        if kernels is not None and fused.takes(out, dout):
            # one launch, no boolean temporary
            return (kernels.relu_grad(out, dout) if buf is None
                    else kernels.relu_grad(out, dout, buf))
        fused_cpu = cpu_kernels.relu_grad(out, dout, buf)  # one pass, no boolean temporary
        if fused_cpu is not None:
            return fused_cpu
    return xp.multiply(dout, out > 0, out=buf)


def _leaky(xp, x, attrs, buf):
    return xp.where(x > 0, x, x * attrs["alpha"]).astype(x.dtype, copy=False)


def _leaky_grad(xp, x, out, dout, attrs, buf):
    return xp.where(x > 0, dout, dout * attrs["alpha"]).astype(dout.dtype, copy=False)


def _sigmoid(xp, x, attrs, buf):
    # split by sign so exp never overflows
    z = xp.exp(-xp.abs(x))
    return xp.where(x >= 0, 1 / (1 + z), z / (1 + z)).astype(x.dtype, copy=False)


def _zero(xp, v, a):
    return xp.zeros_like(v)


def _elu(xp, x, attrs, buf):
    alpha = attrs["alpha"]
    return xp.where(x > 0, x, alpha * (xp.exp(xp.minimum(x, 0)) - 1)).astype(x.dtype, copy=False)


def _elu_d1(xp, x, a):
    return xp.where(x > 0, 1.0, a["alpha"] * xp.exp(xp.minimum(x, 0)))


def _elu_d2(xp, x, a):
    return xp.where(x > 0, 0.0, a["alpha"] * xp.exp(xp.minimum(x, 0)))


_unary("relu", lambda xp, x, a, buf: xp.maximum(x, 0, out=buf), _relu_grad, uses=("Out",),
       second=(lambda xp, o, a: (o > 0).astype(o.dtype), _zero),
       line="{Out} = {k_maximum}({X}, 0)")
_unary("sigmoid", _sigmoid, lambda xp, x, o, d, a, buf: xp.multiply(d, o * (1 - o), out=buf),
       uses=("Out",), second=(lambda xp, o, a: o * (1 - o), lambda xp, o, a: 1 - 2 * o))
_unary("tanh", lambda xp, x, a, buf: xp.tanh(x, out=buf),
       lambda xp, x, o, d, a, buf: xp.multiply(d, 1 - o * o, out=buf), uses=("Out",),
       second=(lambda xp, o, a: 1 - o * o, lambda xp, o, a: -2 * o))
_unary("leaky_relu", _leaky, _leaky_grad, uses=("X",), attrs={"alpha": 0.02},
       second=(lambda xp, x, a: xp.where(x > 0, 1.0, a["alpha"]), _zero))
_unary("elu", _elu, lambda xp, x, o, d, a, buf: d * _elu_d1(xp, x, a).astype(d.dtype),
       uses=("X",), attrs={"alpha": 1.0}, inplace=False, second=(_elu_d1, _elu_d2))
_unary("exp", lambda xp, x, a, buf: xp.exp(x, out=buf),
       lambda xp, x, o, d, a, buf: xp.multiply(d, o, out=buf), uses=("Out",),
       second=(lambda xp, o, a: o, lambda xp, o, a: xp.ones_like(o)))
_unary("log", lambda xp, x, a, buf: xp.log(x),
       lambda xp, x, o, d, a, buf: xp.divide(d, x, out=buf), uses=("X",), inplace=False,
       second=(lambda xp, x, a: 1 / x, lambda xp, x, a: -1 / (x * x)))
_unary("sqrt", lambda xp, x, a, buf: xp.sqrt(x, out=buf),
       lambda xp, x, o, d, a, buf: xp.multiply(d, 0.5 / o, out=buf), uses=("Out",),
       second=(lambda xp, o, a: 0.5 / o, lambda xp, o, a: -0.5 / (o * o)))
_unary("square", lambda xp, x, a, buf: x * x,
       lambda xp, x, o, d, a, buf: xp.multiply(d, 2 * x, out=buf), uses=("X",), inplace=False,
       second=(lambda xp, x, a: 2 * x, lambda xp, x, a: xp.full_like(x, 2)))
_unary("abs", lambda xp, x, a, buf: xp.abs(x),
       lambda xp, x, o, d, a, buf: xp.multiply(d, xp.sign(x), out=buf), uses=("X",),
       inplace=False, second=(lambda xp, x, a: xp.sign(x), _zero))


# --- pow: x ** factor (factor an attr, or a [1] FactorTensor) -----------------------------------
pow_op = defop("pow", inputs=("X", "FactorTensor?"), outputs=("Out",), attrs={"factor": 1.0})
pow_op.infer(infer_same_as())


def _factor(ins, attrs):
    tensor = ins.get("FactorTensor")
    return attrs["factor"] if tensor is None else float(tensor.reshape(-1)[0])


@pow_op.kernel
def _pow(ctx, ins, attrs):
    x = ins["X"]
    return {"Out": ctx.xp.power(x, _factor(ins, attrs)).astype(x.dtype, copy=False)}


@pow_op.grad(uses=("X", "FactorTensor"), inputs=("X",))
def _pow_grad(ctx, ins, attrs):
    x, dout, p = ins["X"], ins["Out@GRAD"], _factor(ins, attrs)
    return {"X@GRAD": (dout * p * ctx.xp.power(x, p - 1)).astype(dout.dtype, copy=False)}


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
