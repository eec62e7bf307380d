"""Cases for instance_norm (its gradient and second-order rule), affine_channel (NCHW,
NHWC, 2-D inputs) and layer_norm. References loop over the slices, channels or samples."""

import numpy as np

from opcheck import case

R = np.random.default_rng(11)


def f64(*shape, lo=-1.0, hi=1.0):
    return R.uniform(lo, hi, shape)


# --- instance_norm ----------------------------------------------------------------------------
def instance_norm_ref(ins, attrs):
    """Each (n, c) slice normalised by its own mean and biased variance."""
    x, eps = ins["X"], attrs["epsilon"]
    n, c = x.shape[:2]
    y = np.empty_like(x)
    means, inv_stds = np.empty(n * c), np.empty(n * c)
    for i in range(n):
        for j in range(c):
            values = x[i, j]
            mean = values.sum() / values.size
            var = ((values - mean) ** 2).sum() / values.size
            y[i, j] = (values - mean) / np.sqrt(var + eps) * ins["Scale"][j] + ins["Bias"][j]
            means[i * c + j], inv_stds[i * c + j] = mean, 1 / np.sqrt(var + eps)
    return {"Y": y, "SavedMean": means, "SavedVariance": inv_stds}


def instance_norm_inputs(x_shape):
    c = x_shape[1]
    return {"X": f64(*x_shape, lo=-2, hi=3), "Scale": f64(c, lo=0.5, hi=1.5), "Bias": f64(c)}


case("instance_norm", instance_norm_inputs((2, 3, 3, 4)), attrs={"epsilon": 1e-5},
     reference=instance_norm_ref, name="nchw", grad_inputs=["X", "Scale", "Bias"])
case("instance_norm", instance_norm_inputs((3, 2, 5)), attrs={"epsilon": 1e-3},
     reference=instance_norm_ref, name="rank3", grad_inputs=["X", "Scale", "Bias"])
case("instance_norm", instance_norm_inputs((2, 2, 2, 2, 3)), attrs={"epsilon": 1e-5},
     reference=instance_norm_ref, name="rank5", grad_inputs=["X", "Scale", "Bias"])


def instance_norm_grad_ref(ins, attrs):
    """The first-order gradient written out per slice, through the chain rule for the mean
    and the variance."""
    x, dy, eps = ins["X"], ins["Y@GRAD"], attrs["epsilon"]
    n, c = x.shape[:2]
    dx = np.empty_like(x)
    for i in range(n):
        for j in range(c):
            v, g = x[i, j], dy[i, j] * ins["Scale"][j]
            m = v.size
            mean = v.mean()
            var = ((v - mean) ** 2).mean()
            d_var = (g * (v - mean)).sum() * -0.5 * (var + eps) ** -1.5
            d_mean = -g.sum() / np.sqrt(var + eps) - 2 * d_var * (v - mean).sum() / m
            dx[i, j] = g / np.sqrt(var + eps) + d_var * 2 * (v - mean) / m + d_mean / m
    x_hat = instance_norm_ref(dict(ins, Bias=np.zeros(c), Scale=np.ones(c)), attrs)["Y"]
    return {"X@GRAD": dx, "Scale@GRAD": (dy * x_hat).sum(axis=(0, 2, 3)),
            "Bias@GRAD": dy.sum(axis=(0, 2, 3))}


def instance_norm_grad_inputs(x_shape):
    ins = instance_norm_inputs(x_shape)
    del ins["Bias"]
    ins["Y@GRAD"] = f64(*x_shape)
    return ins


case("instance_norm_grad", instance_norm_grad_inputs((2, 3, 3, 3)), attrs={"epsilon": 1e-5},
     reference=instance_norm_grad_ref, name="second_order", rtol=1e-4, atol=1e-7)
case("instance_norm_grad", instance_norm_grad_inputs((2, 2, 4, 2)), attrs={"epsilon": 1e-3},
     reference=instance_norm_grad_ref, name="second_order_eps", rtol=1e-4, atol=1e-7)


# --- affine_channel ---------------------------------------------------------------------------
def affine_channel_ref(ins, attrs):
    x = ins["X"]
    c_axis = 1 if attrs["data_layout"] == "NCHW" else x.ndim - 1
    xc = np.moveaxis(x, c_axis, 0)
    out = np.stack([xc[k] * ins["Scale"][k] + ins["Bias"][k] for k in range(xc.shape[0])])
    return {"Out": np.moveaxis(out, 0, c_axis)}


def affine_channel_inputs(x_shape, c):
    return {"X": f64(*x_shape), "Scale": f64(c, lo=0.5, hi=2.0), "Bias": f64(c)}


case("affine_channel", affine_channel_inputs((2, 3, 4, 2), 3), attrs={"data_layout": "NCHW"},
     reference=affine_channel_ref, name="nchw")
case("affine_channel", affine_channel_inputs((2, 4, 2, 3), 3), attrs={"data_layout": "NHWC"},
     reference=affine_channel_ref, name="nhwc")
case("affine_channel", affine_channel_inputs((5, 3), 3), attrs={"data_layout": "NCHW"},
     reference=affine_channel_ref, name="2d")
case("affine_channel", affine_channel_inputs((2, 2, 4), 4), attrs={"data_layout": "AnyLayout"},
     reference=affine_channel_ref, name="any_layout_is_channel_last")


# --- layer_norm ---------------------------------------------------------------------------------
def layer_norm_ref(ins, attrs):
    """Each sample's values from begin_norm_axis on normalised by their mean and biased
    variance, one sample at a time, then scaled and shifted elementwise."""
    x, eps, axis = ins["X"], attrs["epsilon"], attrs["begin_norm_axis"]
    rows = int(np.prod(x.shape[:axis]))
    flat = x.reshape(rows, -1)
    y, means, variances = np.empty_like(flat), np.empty(rows), np.empty(rows)
    for i in range(rows):
        values = flat[i]
        mean = values.sum() / values.size
        var = ((values - mean) ** 2).sum() / values.size
        y[i] = (values - mean) / np.sqrt(var + eps)
        if "Scale" in ins:
            y[i] = y[i] * ins["Scale"]
        if "Bias" in ins:
            y[i] = y[i] + ins["Bias"]
        means[i], variances[i] = mean, var
    return {"Y": y.reshape(x.shape), "Mean": means, "Variance": variances}


case("layer_norm", {"X": f64(3, 4), "Scale": f64(4, lo=0.5, hi=1.5), "Bias": f64(4)},
     attrs={"epsilon": 1e-5, "begin_norm_axis": 1}, reference=layer_norm_ref, name="2d")
case("layer_norm", {"X": f64(2, 3, 2, 2), "Scale": f64(12, lo=0.5, hi=1.5), "Bias": f64(12)},
     attrs={"epsilon": 1e-3, "begin_norm_axis": 1}, reference=layer_norm_ref, name="4d_axis1")
case("layer_norm", {"X": f64(2, 3, 4), "Scale": f64(4, lo=0.5, hi=1.5)},
     attrs={"epsilon": 1e-5, "begin_norm_axis": 2}, reference=layer_norm_ref,
     name="axis2_no_bias")
case("layer_norm", {"X": f64(3, 5)}, attrs={"epsilon": 1e-5, "begin_norm_axis": 1},
     reference=layer_norm_ref, name="no_scale_no_bias")
