"""argsort (Fluid 1.8): the values sorted along an axis and where they came from."""

import numpy as np

from .registry import defop

argsort = defop("argsort", inputs=("X",), outputs=("Out", "Indices"),
                attrs={"axis": -1, "descending": False})


@argsort.infer
def _argsort_shape(ic):
    x = ic.input("X")
    ic.set_output("Out", x.shape, x.dtype, lod_level=x.lod_level)
    ic.set_output("Indices", x.shape, np.dtype("int64"))


@argsort.kernel
def _argsort(ctx, ins, attrs):
    x, axis = ins["X"], attrs["axis"]
    order = ctx.xp.argsort(x, axis=axis, kind="quicksort" if ctx.xp is np else None)
    if attrs["descending"]:
        order = ctx.xp.flip(order, axis=axis)
    return {"Out": ctx.xp.take_along_axis(x, order, axis=axis),
            "Indices": order.astype(np.int64, copy=False)}


@argsort.grad(uses=("X", "Indices"), inputs=("X",), outputs=("Out",), shape_only=("X",))
def _argsort_grad(ctx, ins, attrs):
    """Each sorted value's gradient goes back to the position it was taken from."""
    x, order, dout = ins["X"], ins["Indices"], ins["Out@GRAD"]
    dx = ctx.xp.zeros(x.shape, dout.dtype)
    ctx.xp.put_along_axis(dx, order, dout, axis=attrs["axis"])
    return {"X@GRAD": dx}
