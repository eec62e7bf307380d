"""layer_norm (Fluid 1.8): X viewed as [left, right] (right = the product of the dimensions
from begin_norm_axis on) is normalised per row: Y = (X - mean) / sqrt(var + epsilon) * Scale
+ Bias, the variance biased, Scale and Bias (both optional) of `right` values. Mean and
Variance ([left]) hold each row's statistics, as Paddle's kernel does.

Gradient, per row, with r = 1 / sqrt(var + epsilon), x_hat = (X - mean) * r and g = Y@GRAD *
Scale: X@GRAD = r * (g - mean(g) - x_hat * mean(g * x_hat)); Scale@GRAD = sum over rows of
Y@GRAD * x_hat; Bias@GRAD = sum over rows of Y@GRAD.
"""

import numpy as np

from .registry import defop

layer_norm = defop("layer_norm", inputs=("X", "Scale?", "Bias?"),
                   outputs=("Y", "Mean", "Variance"),
                   attrs={"epsilon": 1e-5, "begin_norm_axis": 1})


def _split(shape, axis):
    if not 1 <= axis < len(shape) + (len(shape) == 1):
        raise ValueError(f"begin_norm_axis={axis} must be in [1, {len(shape)}) for an input of "
                         f"shape {list(shape)}")
    return int(np.prod(shape[:axis])), int(np.prod(shape[axis:]))


@layer_norm.infer
def _shape(ic):
    x = ic.input("X")
    axis = ic.attr("begin_norm_axis")
    ic.check(1 <= axis < len(x.shape), f"begin_norm_axis={axis} must be in [1, "
                                       f"{len(x.shape)}) for {ic.describe('X')}")
    right = x.shape[axis:]
    width = -1 if any(d < 0 for d in right) else int(np.prod(right))
    for slot in ("Scale", "Bias"):
        value = ic.input(slot) if ic.inputs(slot) else None
        if value is not None and width >= 0:
            ic.check(int(np.prod(value.shape)) == width,
                     f"{ic.describe(slot)} must hold {width} values (the product of "
                     f"{list(right)})")
    left = -1 if any(d < 0 for d in x.shape[:axis]) else int(np.prod(x.shape[:axis]))
    ic.set_output("Y", list(x.shape), x.dtype)
    ic.set_output("Mean", [left], x.dtype)
    ic.set_output("Variance", [left], x.dtype)


def _stats(xp, x, attrs):
    rows, width = _split(x.shape, attrs["begin_norm_axis"])
    x2 = x.reshape(rows, width)
    mean = x2.mean(axis=1)
    var = x2.var(axis=1)
    r = 1.0 / xp.sqrt(var + attrs["epsilon"])
    return x2, mean, var, r, (x2 - mean[:, None]) * r[:, None]


@layer_norm.kernel
def _layer_norm(ctx, ins, attrs):
    x = ins["X"]
    _, mean, var, _, x_hat = _stats(ctx.xp, x, attrs)
    y = x_hat
    if ins.get("Scale") is not None:
        y = y * ins["Scale"].reshape(1, -1)
    if ins.get("Bias") is not None:
        y = y + ins["Bias"].reshape(1, -1)
    return {"Y": y.reshape(x.shape).astype(x.dtype, copy=False), "Mean": mean, "Variance": var}


@layer_norm.grad(uses=("X", "Scale", "Bias"), inputs=("X", "Scale", "Bias"), outputs=("Y",))
def _layer_norm_grad(ctx, ins, attrs):
    x, dy, scale = ins["X"], ins["Y@GRAD"], ins.get("Scale")
    _, _, _, r, x_hat = _stats(ctx.xp, x, attrs)
    dy2 = dy.reshape(x_hat.shape)
    g = dy2 * scale.reshape(1, -1) if scale is not None else dy2
    dx = r[:, None] * (g - g.mean(axis=1, keepdims=True)
                       - x_hat * (g * x_hat).mean(axis=1, keepdims=True))
    result = {"X@GRAD": dx.reshape(x.shape).astype(x.dtype, copy=False)}
    if scale is not None:
        result["Scale@GRAD"] = (dy2 * x_hat).sum(axis=0).reshape(scale.shape)
    if ins.get("Bias") is not None:
        result["Bias@GRAD"] = dy2.sum(axis=0).reshape(ins["Bias"].shape)
    return {k: v for k, v in result.items() if k in ctx.want}
