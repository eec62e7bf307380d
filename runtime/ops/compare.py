"""Comparison and logical ops (bool outputs, no gradient) and increment (Fluid 1.8's names:
less_than, less_equal, greater_than, greater_equal, equal, not_equal; logical_and/or/xor/not).
Comparisons broadcast with Fluid's axis rule, like the elementwise ops."""

import numpy as np

from .math import broadcast_operands, operand_shapes
from .registry import defop, infer_same_as


def _infer_compare(ic):
    x, y = ic.input("X"), ic.input("Y")
    if len(x.shape) >= len(y.shape):
        shape = x.shape
    else:
        shape = y.shape
    if all(d >= 0 for d in x.shape) and all(d >= 0 for d in y.shape):
        a, b = operand_shapes(x.shape, y.shape, ic.attr("axis"))
        shape = np.broadcast_shapes(a, b)
    ic.set_output("Out", shape, np.dtype("bool"), lod_level=x.lod_level)


def _compare(name, fn):
    opdef = defop(name, inputs=("X", "Y"), outputs=("Out",), attrs={"axis": -1,
                                                                     "force_cpu": False})
    opdef.infer(_infer_compare)

    @opdef.kernel
    def kernel(ctx, ins, attrs):
        x, y = broadcast_operands(ins["X"], ins["Y"], attrs["axis"])
        return {"Out": fn(x, y)}
    return opdef


for _name, _fn in (("less_than", np.less), ("less_equal", np.less_equal),
                   ("greater_than", np.greater), ("greater_equal", np.greater_equal),
                   ("equal", np.equal), ("not_equal", np.not_equal)):
    _compare(_name, _fn)


def _logical(name, fn, unary=False):
    opdef = defop(name, inputs=("X",) if unary else ("X", "Y"), outputs=("Out",))

    @opdef.infer
    def infer(ic):
        x = ic.input("X")
        shape = x.shape
        y = None if unary else ic.input("Y")
        if y is not None and all(d >= 0 for d in x.shape + y.shape):
            shape = np.broadcast_shapes(x.shape, y.shape)
        ic.set_output("Out", shape, np.dtype("bool"), lod_level=x.lod_level)

    @opdef.kernel
    def kernel(ctx, ins, attrs):
        if unary:
            return {"Out": fn(ins["X"])}
        return {"Out": fn(ins["X"], ins["Y"])}
    return opdef


_logical("logical_and", np.logical_and)
_logical("logical_or", np.logical_or)
_logical("logical_xor", np.logical_xor)
_logical("logical_not", np.logical_not, unary=True)


# --- increment: x + step (a counter, usually written back into x) ------------------------------
increment = defop("increment", inputs=("X",), outputs=("Out",), attrs={"step": 1.0})
increment.infer(infer_same_as())


@increment.kernel
def _increment(ctx, ins, attrs):
    x = ins["X"]
    if x.size != 1:
        raise ValueError(f"increment needs a one-element tensor, got shape {list(x.shape)}")
    return {"Out": (x + attrs["step"]).astype(x.dtype, copy=False)}


# --- elementwise_floordiv / elementwise_mod (x // y, x % y; no gradient) ------------------------
def _no_grad_elementwise(name, fn):
    from .math import _infer_elementwise
    opdef = defop(f"elementwise_{name}", inputs=("X", "Y"), outputs=("Out",),
                  attrs={"axis": -1, "use_mkldnn": False})
    opdef.infer(_infer_elementwise)

    @opdef.kernel
    def kernel(ctx, ins, attrs):
        x, y = broadcast_operands(ins["X"], ins["Y"], attrs["axis"])
        return {"Out": fn(x, y).astype(ins["X"].dtype, copy=False)}
    return opdef


_no_grad_elementwise("floordiv", np.floor_divide)
_no_grad_elementwise("mod", np.mod)
