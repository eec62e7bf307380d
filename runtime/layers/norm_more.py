"""More normalisation layers of Fluid 1.8: instance_norm, affine_channel and inplace_abn.

inplace_abn (Paddle's "in-place activated batch norm") is batch_norm followed by an identity,
leaky_relu or elu activation. Here it appends a batch_norm op and the activation op, so its
gradients are those ops' checked rules; Paddle's in-place memory saving is the executor's
business (it reuses buffers of temporaries), so the output is a new variable.
"""

from ..framework import Variable
from ..initializer import Constant
from ..layer_helper import LayerHelper
from .conv import append_batch_norm
from .logic import check_variable

_FLOATS = ("float32", "float64")
_ABN_ACTIVATIONS = (None, "identity", "leaky_relu", "elu")


def instance_norm(input, epsilon=1e-05, param_attr=None, bias_attr=None, name=None):
    """Normalise every (sample, channel) slice of an [N, C, ...] input over its spatial
    positions, then scale and shift per channel. Parameters: scale (init 1) and bias (init
    0), both [C]; bias_attr=False is refused as in Paddle."""
    check_variable(input, "input", "instance_norm", _FLOATS)
    if bias_attr is False:
        raise ValueError("bias_attr should not be False in instance_norm.")
    helper = LayerHelper("instance_norm", input=input, param_attr=param_attr,
                         bias_attr=bias_attr, name=name)
    dtype = helper.input_dtype()
    shape = [input.shape[1]]
    scale = helper.create_parameter(helper.param_attr, shape, dtype,
                                    default_initializer=Constant(1.0))
    bias = helper.create_parameter(helper.bias_attr, shape, dtype, is_bias=True,
                                   default_initializer=Constant(0.0))
    saved_mean = helper.create_variable_for_type_inference(dtype, stop_gradient=True)
    saved_variance = helper.create_variable_for_type_inference(dtype, stop_gradient=True)
    out = helper.create_variable_for_type_inference(dtype)
    helper.append_op("instance_norm", inputs={"X": input, "Scale": scale, "Bias": bias},
                     outputs={"Y": out, "SavedMean": saved_mean,
                              "SavedVariance": saved_variance},
                     attrs={"epsilon": float(epsilon)})
    return out


def layer_norm(input, scale=True, shift=True, begin_norm_axis=1, epsilon=1e-05,
               param_attr=None, bias_attr=None, act=None, name=None):
    """Normalise each sample over the dimensions from begin_norm_axis on (their values as one
    row), then scale and shift elementwise. Parameters (when scale / shift): scale (init 1) and
    bias (init 0), both [product of input.shape[begin_norm_axis:]]."""
    check_variable(input, "input", "layer_norm", _FLOATS)
    if not 1 <= begin_norm_axis < len(input.shape):
        raise ValueError(f"layer_norm: begin_norm_axis={begin_norm_axis} must be in [1, "
                         f"{len(input.shape)}) for the input of shape {list(input.shape)}")
    right = input.shape[begin_norm_axis:]
    if any(d < 0 for d in right):
        raise ValueError(f"layer_norm: the normalised dimensions {list(right)} must be known")
    helper = LayerHelper("layer_norm", input=input, param_attr=param_attr, bias_attr=bias_attr,
                         act=act, name=name)
    dtype = helper.input_dtype()
    shape = [1]
    for d in right:
        shape[0] *= d
    inputs = {"X": input}
    if scale:
        inputs["Scale"] = helper.create_parameter(helper.param_attr, shape, dtype,
                                                  default_initializer=Constant(1.0))
    if shift:
        inputs["Bias"] = helper.create_parameter(helper.bias_attr, shape, dtype, is_bias=True)
    mean = helper.create_variable_for_type_inference(dtype, stop_gradient=True)
    variance = helper.create_variable_for_type_inference(dtype, stop_gradient=True)
    out = helper.create_variable_for_type_inference(dtype)
    helper.append_op("layer_norm", inputs=inputs,
                     outputs={"Y": out, "Mean": mean, "Variance": variance},
                     attrs={"epsilon": float(epsilon), "begin_norm_axis": begin_norm_axis})
    return helper.append_activation(out)


def affine_channel(x, scale=None, bias=None, data_layout="NCHW", name=None, act=None):
    """x * scale[c] + bias[c] with c the channel axis (1 for NCHW, the last for NHWC); scale
    and bias are [C] Variables."""
    check_variable(x, "x", "affine_channel", _FLOATS)
    for what, value in (("scale", scale), ("bias", bias)):
        if value is not None and not isinstance(value, Variable):
            raise TypeError(f"The type of '{what}' in affine_channel must be Variable or "
                            f"None, but received {type(value)}. ")
    if data_layout not in ("NCHW", "NHWC"):
        raise ValueError(f"affine_channel: data_layout must be 'NCHW' or 'NHWC', got "
                         f"{data_layout!r}")
    helper = LayerHelper("affine_channel", name=name, act=act)
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op("affine_channel", inputs={"X": x, "Scale": scale, "Bias": bias},
                     outputs={"Out": out}, attrs={"data_layout": data_layout})
    return helper.append_activation(out)


def inplace_abn(input, act=None, is_test=False, momentum=0.9, epsilon=1e-05, param_attr=None,
                bias_attr=None, data_layout="NCHW", name=None, moving_mean_name=None,
                moving_variance_name=None, do_model_average_for_mean_and_var=True,
                use_global_stats=False, act_alpha=1.0):
    """batch_norm (same parameters, running statistics and temporaries, in the same order)
    followed by act: None/'identity', 'leaky_relu' (slope act_alpha) or 'elu' (act_alpha)."""
    if act not in _ABN_ACTIVATIONS:
        raise ValueError(f"inplace_abn only supports act in {list(_ABN_ACTIVATIONS)}, got "
                         f"{act!r}")
    if bias_attr is False:
        raise ValueError("bias_attr should not be False in inplace_abn.")
    check_variable(input, "input", "inplace_abn", _FLOATS)
    if data_layout not in ("NCHW", "NHWC"):
        raise ValueError(f"unsupported data layout: {data_layout}")
    helper = LayerHelper("inplace_abn", input=input, param_attr=param_attr,
                         bias_attr=bias_attr, name=name)
    out = append_batch_norm(helper, input, data_layout, momentum, epsilon, is_test,
                            use_global_stats, moving_mean_name, moving_variance_name,
                            do_model_average_for_mean_and_var)
    return _abn_activation(helper, out, act, act_alpha)


def _abn_activation(helper, x, act, alpha):
    """x through inplace_abn's activation (a new variable unless act is None/'identity')."""
    if act in (None, "identity"):
        return x
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op(act, inputs={"X": x}, outputs={"Out": out}, attrs={"alpha": float(alpha)})
    return out


__all__ = ["instance_norm", "layer_norm", "affine_channel", "inplace_abn"]
