"""Cases for batch_norm (training, test mode, use_global_stats, 2-D and NHWC inputs) and
dropout (both implementations, training with a fixed seed and inference)."""

import numpy as np

from opcheck import case

R = np.random.default_rng(5)


def f64(*shape, lo=-1.0, hi=1.0):
    return R.uniform(lo, hi, shape)


# --- batch_norm -------------------------------------------------------------------------------
def bn_ref(ins, attrs):
    """Per channel, with explicit loops over the channels."""
    x = ins["X"]
    channel_axis = 1 if attrs["data_layout"] == "NCHW" else x.ndim - 1
    xc = np.moveaxis(x, channel_axis, 0)  # [C, ...]
    eps, mom = attrs["epsilon"], attrs["momentum"]
    use_running = attrs["is_test"] or attrs["use_global_stats"]
    y = np.empty_like(xc)
    outs = {k: np.empty(xc.shape[0]) for k in ("MeanOut", "VarianceOut", "SavedMean",
                                                "SavedVariance")}
    for c in range(xc.shape[0]):
        values = xc[c].ravel()
        if use_running:
            mean, var = ins["Mean"][c], ins["Variance"][c]
            outs["MeanOut"][c], outs["VarianceOut"][c] = mean, var
        else:
            mean = values.sum() / values.size
            var = ((values - mean) ** 2).sum() / values.size  # biased, as Paddle
            outs["MeanOut"][c] = mom * ins["Mean"][c] + (1 - mom) * mean
            outs["VarianceOut"][c] = mom * ins["Variance"][c] + (1 - mom) * var
        outs["SavedMean"][c], outs["SavedVariance"][c] = mean, 1 / np.sqrt(var + eps)
        y[c] = (xc[c] - mean) / np.sqrt(var + eps) * ins["Scale"][c] + ins["Bias"][c]
    outs["Y"] = np.moveaxis(y, 0, channel_axis)
    return outs


def bn_inputs(x_shape, channels):
    return {"X": f64(*x_shape, lo=-2, hi=3), "Scale": f64(channels, lo=0.5, hi=1.5),
            "Bias": f64(channels), "Mean": f64(channels), "Variance": f64(channels, lo=0.5, hi=2)}


def bn_attrs(**kw):
    attrs = {"momentum": 0.9, "epsilon": 1e-5, "is_test": False, "data_layout": "NCHW",
             "use_global_stats": False}
    attrs.update(kw)
    return attrs


case("batch_norm", bn_inputs((2, 3, 3, 3), 3), attrs=bn_attrs(), reference=bn_ref, name="train")
case("batch_norm", bn_inputs((2, 3, 3, 3), 3), attrs=bn_attrs(is_test=True), reference=bn_ref,
     name="test")
case("batch_norm", bn_inputs((2, 3, 2, 2), 3), attrs=bn_attrs(use_global_stats=True),
     reference=bn_ref, name="global_stats")
case("batch_norm", bn_inputs((5, 3), 3), attrs=bn_attrs(momentum=0.5, epsilon=1e-3),
     reference=bn_ref, name="train_2d")
case("batch_norm", bn_inputs((2, 2, 3, 3), 3), attrs=bn_attrs(data_layout="NHWC"),
     reference=bn_ref, name="train_nhwc")
case("batch_norm", bn_inputs((2, 3, 3, 3), 3), attrs=bn_attrs(), reference=bn_ref,
     name="unknown_batch", var_shapes={"X": (-1, 3, 3, 3)}, check_grad=False)


# --- dropout ----------------------------------------------------------------------------------
def dropout_ref(ins, attrs):
    """The mask is the fixed seed's uniform draws >= p (the documented rule)."""
    x, p = ins["X"], attrs["dropout_prob"]
    upscale = attrs["dropout_implementation"] == "upscale_in_train"
    if attrs["is_test"]:
        return {"Out": x if upscale else x * (1 - p)}
    keep = np.random.default_rng(attrs["seed"]).random(x.shape, dtype=np.float32) >= p
    out = np.where(keep, x / (1 - p) if upscale else x, 0.0)
    return {"Out": out, "Mask": keep.astype(np.uint8)}


def dropout_attrs(impl, **kw):
    attrs = {"dropout_prob": 0.4, "is_test": False, "fix_seed": True, "seed": 5,
             "dropout_implementation": impl}
    attrs.update(kw)
    return attrs


for _impl in ("downgrade_in_infer", "upscale_in_train"):
    case("dropout", {"X": f64(4, 6)}, attrs=dropout_attrs(_impl), reference=dropout_ref,
         name=f"train_{_impl}")
    case("dropout", {"X": f64(4, 6)}, attrs=dropout_attrs(_impl, is_test=True),
         reference=dropout_ref, name=f"test_{_impl}")
case("dropout", {"X": f64(3, 4)}, attrs=dropout_attrs("downgrade_in_infer", dropout_prob=0.0),
     reference=lambda i, a: {"Out": i["X"], "Mask": np.ones((3, 4), np.uint8)}, name="p0")
case("dropout", {"X": f64(3, 4)}, attrs=dropout_attrs("upscale_in_train", dropout_prob=1.0),
     reference=lambda i, a: {"Out": np.zeros((3, 4)), "Mask": np.zeros((3, 4), np.uint8)},
     name="p1_upscale")
