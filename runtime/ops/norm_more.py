"""More normalisation ops of Fluid 1.8: instance_norm (with a second-order rule) and
affine_channel.

instance_norm normalises every (sample, channel) slice of an NCHW-like input (rank 2 to 5)
over its spatial positions: `Y = Scale[c] * (X - mean) / sqrt(var + epsilon) + Bias[c]`, the
variance biased (divided by the slice size M). SavedMean and SavedVariance, both [N * C], hold
each slice's mean and 1 / sqrt(var + epsilon), as Paddle's kernel does. The gradient kernels
recompute these statistics from X (cheap), so the gradient of the grad op with respect to X
includes the statistics' dependence on X, as a second-order rule must.

Notation used by the gradient rules, per slice: r = 1 / sqrt(var + epsilon), x_hat = (X -
mean) * r, and the projection P(v) = v - mean(v) - x_hat * mean(v * x_hat), which is
self-adjoint. Then d(x_hat) = r * P(dX), so X@GRAD = r * P(Y@GRAD * Scale).

affine_channel is `Out = X * Scale[c] + Bias[c]` with c the channel axis: 1 for "NCHW",
the last one for "NHWC" (and for the op's default "AnyLayout", as in Paddle's kernel).
"""

from .registry import defop

# --- instance_norm ------------------------------------------------------------------------------
instance_norm = defop("instance_norm", inputs=("X", "Scale", "Bias"),
                      outputs=("Y", "SavedMean", "SavedVariance"), attrs={"epsilon": 1e-5})


def _spatial_axes(ndim):
    return tuple(range(2, ndim))


def _channel_shape(ndim):
    """Shape that broadcasts a [C] vector against an [N, C, ...] array."""
    return (1, -1) + (1,) * (ndim - 2)


def _slice_stats(xp, x, epsilon):
    """(x_hat, r) of every (n, c) slice; r keeps the reduced axes (shape [N, C, 1, ...])."""
    axes = _spatial_axes(x.ndim)
    if not axes:  # [N, C]: each slice holds one value
        mean = x
        var = xp.zeros_like(x)
    else:
        mean = x.mean(axis=axes, keepdims=True)
        var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    r = 1.0 / xp.sqrt(var + epsilon)
    return (x - mean) * r, r, mean


def _slice_sum(v):
    """Sum over each slice's spatial positions, keeping the axes."""
    axes = _spatial_axes(v.ndim)
    return v.sum(axis=axes, keepdims=True) if axes else v


def _slice_size(x):
    size = 1
    for d in x.shape[2:]:
        size *= d
    return size


def _project(v, x_hat):
    """P(v) = v - mean(v) - x_hat * mean(v * x_hat), per slice."""
    m = _slice_size(v)
    return v - _slice_sum(v) / m - x_hat * (_slice_sum(v * x_hat) / m)


def _per_channel_sum(v):
    """Sum over every axis but the channel axis 1: a [C] vector."""
    return v.sum(axis=(0,) + _spatial_axes(v.ndim))


@instance_norm.infer
def _instance_norm_infer(ic):
    x = ic.input("X")
    ic.check(2 <= len(x.shape) <= 5, f"{ic.describe('X')} must have rank 2 to 5")
    eps = ic.attr("epsilon")
    ic.check(0.0 <= eps <= 1e-3, f"epsilon must be in [0, 0.001], got {eps}")
    n, c = x.shape[0], x.shape[1]
    for slot in ("Scale", "Bias"):
        var = ic.input(slot)
        ic.check(len(var.shape) == 1 and (c < 0 or var.shape[0] in (c, -1)),
                 f"{ic.describe(slot)} must be [C] = [{c}] for {ic.describe('X')}")
    ic.same_as("Y", "X")
    nc = n * c if n >= 0 and c >= 0 else -1
    for slot in ("SavedMean", "SavedVariance"):
        ic.set_output(slot, [nc], x.dtype)


@instance_norm.kernel
def _instance_norm(ctx, ins, attrs):
    xp, x = ctx.xp, ins["X"]
    x_hat, r, mean = _slice_stats(xp, x, attrs["epsilon"])
    shape = _channel_shape(x.ndim)
    y = x_hat * ins["Scale"].reshape(shape) + ins["Bias"].reshape(shape)
    n_slices = x.shape[0] * x.shape[1]
    return {"Y": y.astype(x.dtype, copy=False),
            "SavedMean": mean.reshape(n_slices).astype(x.dtype, copy=False),
            "SavedVariance": r.reshape(n_slices).astype(x.dtype, copy=False)}


@instance_norm.grad(uses=("X", "Scale"), inputs=("X", "Scale", "Bias"), outputs=("Y",))
def _instance_norm_grad(ctx, ins, attrs):
    xp, x, dy = ctx.xp, ins["X"], ins["Y@GRAD"]
    x_hat, r, _ = _slice_stats(xp, x, attrs["epsilon"])
    result = {}
    if "X@GRAD" in ctx.want:
        g = dy * ins["Scale"].reshape(_channel_shape(x.ndim))
        result["X@GRAD"] = (r * _project(g, x_hat)).astype(x.dtype, copy=False)
    if "Scale@GRAD" in ctx.want:
        result["Scale@GRAD"] = _per_channel_sum(dy * x_hat).astype(x.dtype, copy=False)
    if "Bias@GRAD" in ctx.want:
        result["Bias@GRAD"] = _per_channel_sum(dy).astype(x.dtype, copy=False)
    return result


@instance_norm.grad_def.infer
def _instance_norm_grad_infer(ic):
    """X@GRAD is shaped like X; Scale@GRAD and Bias@GRAD like Scale (for the variables the
    backward builder did not shape already)."""
    x, scale = ic.input("X"), ic.input("Scale")
    for slot, like in (("X@GRAD", x), ("Scale@GRAD", scale), ("Bias@GRAD", scale)):
        for name in ic.op.outputs.get(slot, ()):
            var = ic.block._find_var_recursive(name)
            if var is not None and var.shape is None:
                var.shape, var.dtype = like.shape, like.dtype


@instance_norm.grad_def.grad(uses=("X", "Scale", "Y@GRAD"), inputs=("X", "Scale", "Y@GRAD"),
                             outputs=("X@GRAD", "Scale@GRAD", "Bias@GRAD"))
def _instance_norm_grad_grad(ctx, ins, attrs):
    """The grad op maps (X, Scale, dY) to dX = r * P(dY * Scale), dScale = sum(dY * x_hat) and
    dBias = sum(dY). Given ddX, ddScale, ddBias (what arrives for those), with g = dY * Scale,
    p = r * P(ddX) and per slice A = sum(p * g), M the slice size:
      d(dY)   = Scale * p + ddScale * x_hat + ddBias   (the forward's directional derivative)
      d Scale = per-channel sum of p * dY
      d X     = r * P(G) - A * r * x_hat / M, where G = ddScale * dY
                - (r / M) * (sum(g * x_hat) * ddX + sum(ddX * x_hat) * g)."""
    xp, x, dy = ctx.xp, ins["X"], ins["Y@GRAD"]
    shape = _channel_shape(x.ndim)
    scale = ins["Scale"].reshape(shape)
    ddx = ins.get("X@GRAD@GRAD")
    dds, ddb = ins.get("Scale@GRAD@GRAD"), ins.get("Bias@GRAD@GRAD")
    x_hat, r, _ = _slice_stats(xp, x, attrs["epsilon"])
    ddx = xp.zeros_like(x) if ddx is None else ddx
    dds = xp.zeros(scale.shape, x.dtype) if dds is None else dds.reshape(shape)
    ddb = xp.zeros(scale.shape, x.dtype) if ddb is None else ddb.reshape(shape)
    p = r * _project(ddx, x_hat)
    result = {}
    if "Y@GRAD@GRAD" in ctx.want:
        ddy = scale * p + dds * x_hat + ddb
        result["Y@GRAD@GRAD"] = ddy.astype(x.dtype, copy=False)
    if "Scale@GRAD" in ctx.want:
        result["Scale@GRAD"] = _per_channel_sum(p * dy).astype(x.dtype, copy=False)
    if "X@GRAD" in ctx.want:
        m = _slice_size(x)
        g = dy * scale
        a = _slice_sum(p * g)
        g_hat = dds * dy - (r / m) * (_slice_sum(g * x_hat) * ddx + _slice_sum(ddx * x_hat) * g)
        dx = r * _project(g_hat, x_hat) - a * r * x_hat / m
        result["X@GRAD"] = dx.astype(x.dtype, copy=False)
    return result


# --- affine_channel -----------------------------------------------------------------------------
affine_channel = defop("affine_channel", inputs=("X", "Scale", "Bias"), outputs=("Out",),
                       attrs={"data_layout": "AnyLayout"})


def _affine_axes(ndim, layout):
    """(the channel axis, the other axes) of an input of rank ndim."""
    if layout not in ("NCHW", "NHWC", "AnyLayout"):
        raise ValueError(f"data_layout must be 'NCHW' or 'NHWC', got {layout!r}")
    c_axis = 1 if layout == "NCHW" else ndim - 1
    return c_axis, tuple(a for a in range(ndim) if a != c_axis)


def _affine_shape(ndim, layout):
    c_axis, _ = _affine_axes(ndim, layout)
    shape = [1] * ndim
    shape[c_axis] = -1
    return tuple(shape)


@affine_channel.infer
def _affine_channel_infer(ic):
    x = ic.input("X")
    ic.check(len(x.shape) >= 2, f"{ic.describe('X')} must have rank >= 2")
    try:
        c_axis, _ = _affine_axes(len(x.shape), ic.attr("data_layout"))
    except ValueError as err:
        ic.fail(str(err))
    c = x.shape[c_axis]
    for slot in ("Scale", "Bias"):
        var = ic.input(slot)
        ic.check(len(var.shape) == 1 and (c < 0 or var.shape[0] in (c, -1)),
                 f"{ic.describe(slot)} must be [C] = [{c}] for {ic.describe('X')} "
                 f"(data_layout={ic.attr('data_layout')})")
    ic.same_as("Out", "X")


@affine_channel.kernel
def _affine_channel(ctx, ins, attrs):
    x = ins["X"]
    shape = _affine_shape(x.ndim, attrs["data_layout"])
    out = x * ins["Scale"].reshape(shape) + ins["Bias"].reshape(shape)
    return {"Out": out.astype(x.dtype, copy=False)}


@affine_channel.grad(uses=("X", "Scale"))
def _affine_channel_grad(ctx, ins, attrs):
    x, dout = ins["X"], ins["Out@GRAD"]
    _, others = _affine_axes(x.ndim, attrs["data_layout"])
    result = {}
    if "X@GRAD" in ctx.want:
        scale = ins["Scale"].reshape(_affine_shape(x.ndim, attrs["data_layout"]))
        result["X@GRAD"] = (dout * scale).astype(x.dtype, copy=False)
    if "Scale@GRAD" in ctx.want:
        result["Scale@GRAD"] = (dout * x).sum(axis=others).astype(x.dtype, copy=False)
    if "Bias@GRAD" in ctx.want:
        result["Bias@GRAD"] = dout.sum(axis=others).astype(x.dtype, copy=False)
    return result
