"""Normalisation and regularisation ops: batch_norm and dropout.

batch_norm normalises each channel with the batch's statistics over every other axis (N, H, W
for NCHW images, N for [N, C] inputs) while training, and with the running statistics in test
mode (is_test) or when use_global_stats is set. Training updates the running statistics,
`MeanOut = momentum * Mean + (1 - momentum) * batch_mean` (the variance likewise, with the
biased batch variance, as Paddle's CPU kernel does); MeanOut/VarianceOut name the same
variables as Mean/Variance. SavedMean/SavedVariance hold the statistics that normalised this
batch, the variance as 1 / sqrt(var + epsilon) like Paddle; unlike Paddle they are also filled
in global-stats mode (with the running statistics), so the gradient only ever reads them.

dropout zeroes each element with probability dropout_prob. "downgrade_in_infer" (the default)
keeps the survivors as they are in training and scales by (1 - p) at inference;
"upscale_in_train" scales survivors by 1 / (1 - p) in training and is the identity at inference.
"""

import numpy as np

from .registry import defop

# --- batch_norm ---------------------------------------------------------------------------------
batch_norm = defop("batch_norm",
                   inputs=("X", "Scale", "Bias", "Mean", "Variance", "MomentumTensor?"),
                   outputs=("Y", "MeanOut", "VarianceOut", "SavedMean", "SavedVariance"),
                   attrs={"momentum": 0.9, "epsilon": 1e-5, "is_test": False,
                          "data_layout": "NCHW", "use_global_stats": False,
                          "trainable_statistics": False, "use_mkldnn": False,
                          "fuse_with_relu": False})


def _channel_axis(ndim, layout):
    if layout in ("NCHW", "AnyLayout"):
        return 1
    if layout == "NHWC":
        return ndim - 1
    raise ValueError(f"data_layout must be 'NCHW' or 'NHWC', got {layout!r}")


def _axes(ndim, layout):
    """(axes reduced by the statistics, shape that broadcasts a [C] vector against X)."""
    c_axis = _channel_axis(ndim, layout)
    axes = tuple(a for a in range(ndim) if a != c_axis)
    shape = [1] * ndim
    shape[c_axis] = -1
    return axes, tuple(shape)


def _global_stats(attrs):
    """Normalise with the running statistics (Paddle: is_test unless trainable_statistics)."""
    return attrs["use_global_stats"] or (attrs["is_test"] and not attrs["trainable_statistics"])


@batch_norm.infer
def _bn_infer(ic):
    x = ic.input("X")
    ic.check(2 <= len(x.shape) <= 5, f"{ic.describe('X')} must have rank 2 to 5")
    try:
        c = x.shape[_channel_axis(len(x.shape), ic.attr("data_layout"))]
    except ValueError as err:
        ic.fail(str(err))
    for slot in ("Scale", "Bias", "Mean", "Variance"):
        var = ic.input(slot)
        ic.check(len(var.shape) == 1 and (c < 0 or var.shape[0] in (c, -1)),
                 f"{ic.describe(slot)} must be [C] = [{c}] for {ic.describe('X')} "
                 f"(data_layout={ic.attr('data_layout')})")
    ic.same_as("Y", "X")
    for slot in ("MeanOut", "VarianceOut", "SavedMean", "SavedVariance"):
        ic.set_output(slot, [c], x.dtype)


@batch_norm.kernel
def _bn(ctx, ins, attrs):
    xp, x = ctx.xp, ins["X"]
    axes, shape = _axes(x.ndim, attrs["data_layout"])
    eps = attrs["epsilon"]
    if _global_stats(attrs):
        mean, var = ins["Mean"], ins["Variance"]
        mean_out, var_out = mean, var
    else:
        mean = x.mean(axis=axes)
        centred = x - mean.reshape(shape)
        var = (centred * centred).mean(axis=axes)
        momentum = attrs["momentum"]
        if ins.get("MomentumTensor") is not None:
            momentum = float(ins["MomentumTensor"].reshape(-1)[0])
        mean_out = ins["Mean"] * momentum + mean * (1.0 - momentum)
        var_out = ins["Variance"] * momentum + var * (1.0 - momentum)
    inv_std = (1.0 / xp.sqrt(var + eps)).astype(x.dtype, copy=False)
    gain = ins["Scale"] * inv_std
    y = x * gain.reshape(shape) + (ins["Bias"] - mean * gain).reshape(shape)
    return {"Y": y.astype(x.dtype, copy=False), "MeanOut": mean_out, "VarianceOut": var_out,
            "SavedMean": mean, "SavedVariance": inv_std}


@batch_norm.grad(uses=("X", "Scale", "SavedMean", "SavedVariance"),
                 inputs=("X", "Scale", "Bias"), outputs=("Y",))
def _bn_grad(ctx, ins, attrs):
    x, dy = ins["X"], ins["Y@GRAD"]
    axes, shape = _axes(x.ndim, attrs["data_layout"])
    inv_std = ins["SavedVariance"]
    x_hat = (x - ins["SavedMean"].reshape(shape)) * inv_std.reshape(shape)
    d_bias = dy.sum(axis=axes)
    d_scale = (dy * x_hat).sum(axis=axes)
    result = {}
    if "X@GRAD" in ctx.want:
        gain = (ins["Scale"] * inv_std).reshape(shape)
        if _global_stats(attrs):  # the statistics are constants
            dx = dy * gain
        else:  # the batch mean and variance depend on x too
            count = x.size // inv_std.size
            mean_dy = (d_bias / count).reshape(shape)
            mean_dy_xhat = (d_scale / count).reshape(shape)
            dx = gain * (dy - mean_dy - x_hat * mean_dy_xhat)
        result["X@GRAD"] = dx.astype(x.dtype, copy=False)
    if "Scale@GRAD" in ctx.want:
        result["Scale@GRAD"] = d_scale
    if "Bias@GRAD" in ctx.want:
        result["Bias@GRAD"] = d_bias
    return result


# --- dropout ------------------------------------------------------------------------------------
dropout = defop("dropout", inputs=("X", "Seed?"), outputs=("Out", "Mask"),
                attrs={"dropout_prob": 0.5, "is_test": False, "fix_seed": False, "seed": 0,
                       "dropout_implementation": "downgrade_in_infer"}, random=True)

_IMPLEMENTATIONS = ("downgrade_in_infer", "upscale_in_train")


def _dropout_attrs(attrs):
    """(p, upscale_in_train), validated."""
    p, impl = float(attrs["dropout_prob"]), attrs["dropout_implementation"]
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout_prob must be in [0, 1], got {p}")
    if impl not in _IMPLEMENTATIONS:
        raise ValueError(f"dropout_implementation must be one of {_IMPLEMENTATIONS}, got {impl!r}")
    return p, impl == "upscale_in_train"


@dropout.infer
def _dropout_infer(ic):
    try:
        _dropout_attrs(ic.attrs)
    except ValueError as err:
        ic.fail(str(err))
    x = ic.input("X")
    ic.same_as("Out", "X")
    ic.set_output("Mask", x.shape, np.dtype(np.uint8))


def keep_mask(rng, shape, p):
    """Bool array: True where an element survives (probability 1 - p)."""
    return rng.random(shape, dtype=np.float32) >= p


@dropout.kernel
def _dropout(ctx, ins, attrs):
    xp, x = ctx.xp, ins["X"]
    p, upscale = _dropout_attrs(attrs)
    if attrs["is_test"]:
        out = x if upscale else (x * (1.0 - p)).astype(x.dtype, copy=False)
        mask = xp.broadcast_to(xp.ones((), dtype=np.uint8), x.shape)
    else:
        # fix_seed: a fresh generator per call, so every step drops the same elements (Paddle);
        # a Seed tensor (a seed op's, for recomputation) fixes this call's mask the same way
        seed = ins.get("Seed")
        if seed is not None:
            host = seed.get() if hasattr(seed, "get") else np.asarray(seed)
            rng = np.random.default_rng(int(host.reshape(-1)[0]))
        else:
            rng = np.random.default_rng(attrs["seed"]) if attrs["fix_seed"] else ctx.rng
        keep = xp.asarray(keep_mask(rng, x.shape, p))
        out = x * keep
        if upscale:
            out *= (1.0 / (1.0 - p)) if p < 1.0 else 0.0
        mask = keep.astype(np.uint8)
    result = {"Out": out}
    if "Mask" in ctx.want:
        result["Mask"] = mask
    return result


@dropout.grad(uses=("Mask",), inputs=("X",), outputs=("Out",))
def _dropout_grad(ctx, ins, attrs):
    dout = ins["Out@GRAD"]
    p, upscale = _dropout_attrs(attrs)
    if attrs["is_test"]:
        dx = dout if upscale else dout * (1.0 - p)
    else:
        dx = dout * ins["Mask"]
        if upscale:
            dx *= (1.0 / (1.0 - p)) if p < 1.0 else 0.0
    return {"X@GRAD": dx.astype(dout.dtype, copy=False)}
