"""Image layers: conv2d, conv2d_transpose, conv3d, pool2d, adaptive_pool2d, batch_norm, dropout.

Signatures, defaults and parameter names follow Fluid 1.8 (conv2d_0.w_0, batch_norm_0.w_1 ...).
Convolution and pooling compute NCHW; data_format="NHWC" transposes the input to NCHW and the
result back (batch_norm takes either layout: it only needs the channel axis).
"""

import functools

from ..errors import ShapeError, where
from ..framework import Variable, user_callsite
from ..initializer import Constant, Normal
from ..layer_helper import LayerHelper
from ..param_attr import ParamAttr


# --- argument normalisation ---------------------------------------------------------------------
def _pair(value, what, layer):
    values = [value, value] if isinstance(value, int) else list(value)
    if len(values) != 2 or not all(isinstance(v, int) for v in values):
        raise ValueError(f"{layer}: {what} must be an int or a list of 2 ints, got {value!r}"
                         f"{where(user_callsite())}")
    return values


def _padding(padding, layer):
    """(paddings as 4 values [top, bottom, left, right], padding_algorithm) from what Fluid
    accepts: 'SAME'/'VALID', an int, [pad_h, pad_w], [top, bottom, left, right], or
    [[0, 0], [0, 0], [top, bottom], [left, right]]."""
    if isinstance(padding, str):
        algorithm = padding.upper()
        if algorithm not in ("SAME", "VALID"):
            raise ValueError(f"{layer}: padding {padding!r} must be 'SAME', 'VALID' or numbers"
                             f"{where(user_callsite())}")
        return [0, 0, 0, 0], algorithm
    if isinstance(padding, (list, tuple)) and len(padding) == 4:
        if isinstance(padding[0], (list, tuple)):
            if list(padding[0]) != [0, 0] or list(padding[1]) != [0, 0]:
                raise ValueError(f"{layer}: padding of the batch/channel dimensions must be "
                                 f"[0, 0], got {padding!r}{where(user_callsite())}")
            padding = list(padding[2]) + list(padding[3])
        return [int(p) for p in padding], "EXPLICIT"
    pad_h, pad_w = _pair(padding, "padding", layer)
    return [pad_h, pad_h, pad_w, pad_w], "EXPLICIT"


def _op_paddings(pads):
    """Fluid passes symmetric paddings as [pad_h, pad_w]."""
    return [pads[0], pads[2]] if pads[0] == pads[1] and pads[2] == pads[3] else pads


def _channels_last(layer):
    """Let `layer` (computing NCHW) take data_format="NHWC": the input is transposed to NCHW
    and the output back, so the values and gradients are those of an NHWC layer."""
    @functools.wraps(layer)
    def wrapped(input, *args, data_format="NCHW", **kwargs):
        if data_format == "NHWC" and isinstance(input, Variable) and len(input.shape) == 4:
            from .tensor import transpose
            out = layer(transpose(input, [0, 3, 1, 2]), *args, data_format="NCHW", **kwargs)
            return transpose(out, [0, 2, 3, 1])
        return layer(input, *args, data_format=data_format, **kwargs)
    return wrapped


def _check_image(input, layer, data_format):
    if not isinstance(input, Variable):
        raise TypeError(f"{layer}: input must be a Variable, got {type(input).__name__}")
    if data_format != "NCHW":
        raise ValueError(f"{layer}: data_format={data_format!r} is not supported; use 'NCHW' "
                         f"or 'NHWC'{where(user_callsite())}")
    if len(input.shape) != 4:
        raise ShapeError(f"{layer}: input {input.name!r} must be 4-D [N, C, H, W], got shape "
                         f"{list(input.shape)}{where(user_callsite())}")
    if input.shape[1] < 0:
        raise ShapeError(f"{layer}: the channel dimension of input {input.name!r} "
                         f"{list(input.shape)} must be known{where(user_callsite())}")
    return input.shape[1]


def _groups(groups, channels, layer):
    groups = 1 if groups is None else int(groups)
    if groups < 1 or channels % groups:
        raise ValueError(f"{layer}: groups={groups} must be >= 1 and divide the {channels} input "
                         f"channels{where(user_callsite())}")
    return groups


# --- convolution --------------------------------------------------------------------------------
@_channels_last
def conv2d(input, num_filters, filter_size, stride=1, padding=0, dilation=1, groups=None,
           param_attr=None, bias_attr=None, use_cudnn=True, act=None, name=None,
           data_format="NCHW"):
    """2-D convolution: out = act(conv(input, W) + b), W [num_filters, C/groups, kh, kw]
    initialised Normal(0, sqrt(2 / (kh * kw * C))) unless param_attr says otherwise."""
    channels = _check_image(input, "conv2d", data_format)
    groups_n = _groups(groups, channels, "conv2d")
    depthwise = groups_n == channels and num_filters % channels == 0 and not use_cudnn
    op_type = "depthwise_conv2d" if depthwise else "conv2d"
    helper = LayerHelper(op_type, param_attr=param_attr, bias_attr=bias_attr, act=act, name=name)
    kh, kw = _pair(filter_size, "filter_size", "conv2d")
    pads, algorithm = _padding(padding, "conv2d")
    std = (2.0 / (kh * kw * channels)) ** 0.5
    w = helper.create_parameter(helper.param_attr, [num_filters, channels // groups_n, kh, kw],
                                input.dtype, default_initializer=Normal(0.0, std, 0))
    pre_bias = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op(op_type, inputs={"Input": input, "Filter": w},
                     outputs={"Output": pre_bias},
                     attrs={"strides": _pair(stride, "stride", "conv2d"),
                            "paddings": _op_paddings(pads), "padding_algorithm": algorithm,
                            "dilations": _pair(dilation, "dilation", "conv2d"),
                            "groups": groups_n, "use_cudnn": use_cudnn, "use_mkldnn": False,
                            "fuse_relu_before_depthwise_conv": False,
                            "data_format": data_format})
    return helper.append_activation(helper.append_bias_op(pre_bias, dim_start=1, dim_end=2))


@_channels_last
def conv2d_transpose(input, num_filters, output_size=None, filter_size=None, padding=0,
                     stride=1, dilation=1, groups=None, param_attr=None, bias_attr=None,
                     use_cudnn=True, act=None, name=None, data_format="NCHW"):
    """Transposed 2-D convolution (the adjoint of conv2d), W [C, num_filters/groups, kh, kw].
    filter_size may be omitted when output_size is given: it is then derived from it."""
    channels = _check_image(input, "conv2d_transpose", data_format)
    groups_n = _groups(groups, channels, "conv2d_transpose")
    if num_filters % groups_n:
        raise ValueError(f"conv2d_transpose: num_filters={num_filters} must divide into "
                         f"groups={groups_n}{where(user_callsite())}")
    depthwise = groups_n == channels and num_filters == channels and not use_cudnn
    op_type = "depthwise_conv2d_transpose" if depthwise else "conv2d_transpose"
    helper = LayerHelper(op_type, param_attr=param_attr, bias_attr=bias_attr, act=act, name=name)
    stride = _pair(stride, "stride", "conv2d_transpose")
    dilation = _pair(dilation, "dilation", "conv2d_transpose")
    pads, algorithm = _padding(padding, "conv2d_transpose")
    if output_size is not None:
        output_size = _pair(output_size, "output_size", "conv2d_transpose")
    if filter_size is None:
        filter_size = _filter_from_output(input, output_size, stride, pads, dilation)
    kh, kw = _pair(filter_size, "filter_size", "conv2d_transpose")
    w = helper.create_parameter(helper.param_attr, [channels, num_filters // groups_n, kh, kw],
                                input.dtype)
    pre_bias = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op(op_type, inputs={"Input": input, "Filter": w},
                     outputs={"Output": pre_bias},
                     attrs={"output_size": output_size or [], "strides": stride,
                            "paddings": _op_paddings(pads), "padding_algorithm": algorithm,
                            "dilations": dilation, "groups": groups_n, "use_cudnn": use_cudnn,
                            "data_format": data_format})
    return helper.append_activation(helper.append_bias_op(pre_bias, dim_start=1, dim_end=2))


def _filter_from_output(input, output_size, stride, pads, dilation):
    """The filter size that makes conv2d_transpose produce output_size (Fluid's rule)."""
    h, w = input.shape[2:]
    if output_size is None:
        raise ValueError(f"conv2d_transpose: give filter_size or output_size"
                         f"{where(user_callsite())}")
    if h < 0 or w < 0:
        raise ShapeError(f"conv2d_transpose: deriving filter_size from output_size needs a known "
                         f"input height and width, got {list(input.shape)}"
                         f"{where(user_callsite())}")
    return [(output_size[0] - (h - 1) * stride[0] + pads[0] + pads[1] - 1) // dilation[0] + 1,
            (output_size[1] - (w - 1) * stride[1] + pads[2] + pads[3] - 1) // dilation[1] + 1]


def conv3d(input, num_filters, filter_size, stride=1, padding=0, dilation=1, groups=None,
           param_attr=None, bias_attr=None, use_cudnn=True, act=None, name=None,
           data_format="NCDHW"):
    """3-D convolution: out = act(conv(input, W) + b), W [num_filters, C/groups, kd, kh, kw]
    initialised Normal(0, sqrt(2 / (kd * kh * kw * C))). padding: 'SAME'/'VALID', an int, 3
    values, 6 ([front, back, top, bottom, left, right]) or 5 pairs. The op computes NCDHW;
    data_format="NDHWC" transposes the input to NCDHW and the output back."""
    if data_format not in ("NCDHW", "NDHWC"):
        raise ValueError(f"conv3d: data_format must be 'NCDHW' or 'NDHWC', got {data_format!r}"
                         f"{where(user_callsite())}")
    if not isinstance(input, Variable) or len(input.shape) != 5:
        raise ShapeError(f"conv3d: input must be a 5-D Variable, got "
                         f"{getattr(input, 'shape', input)!r}{where(user_callsite())}")
    from .tensor import transpose
    last = data_format == "NDHWC"
    x = transpose(input, [0, 4, 1, 2, 3]) if last else input
    channels = x.shape[1]
    if channels < 0:
        raise ShapeError(f"conv3d: the channel dimension of input {input.name!r} "
                         f"{list(input.shape)} must be known{where(user_callsite())}")
    groups_n = _groups(groups, channels, "conv3d")
    helper = LayerHelper("conv3d", param_attr=param_attr, bias_attr=bias_attr, act=act, name=name)
    ksize = _triple(filter_size, "filter_size")
    pads, algorithm = _padding3(padding, data_format)
    std = (2.0 / (ksize[0] * ksize[1] * ksize[2] * channels)) ** 0.5
    w = helper.create_parameter(helper.param_attr, [num_filters, channels // groups_n] + ksize,
                                input.dtype, default_initializer=Normal(0.0, std, 0))
    pre_bias = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op("conv3d", inputs={"Input": x, "Filter": w}, outputs={"Output": pre_bias},
                     attrs={"strides": _triple(stride, "stride"), "paddings": pads,
                            "padding_algorithm": algorithm,
                            "dilations": _triple(dilation, "dilation"), "groups": groups_n,
                            "use_cudnn": use_cudnn, "use_mkldnn": False,
                            "data_format": "NCDHW"})
    out = helper.append_activation(helper.append_bias_op(pre_bias, dim_start=1, dim_end=2))
    return transpose(out, [0, 2, 3, 4, 1]) if last else out


def _triple(value, what):
    values = [value] * 3 if isinstance(value, int) else list(value)
    if len(values) != 3 or not all(isinstance(v, int) for v in values):
        raise ValueError(f"conv3d: {what} must be an int or a list of 3 ints, got {value!r}"
                         f"{where(user_callsite())}")
    return values


def _padding3(padding, data_format):
    """(the op's paddings: 3 values when symmetric, else 6; padding_algorithm)."""
    if isinstance(padding, str):
        algorithm = padding.upper()
        if algorithm not in ("SAME", "VALID"):
            raise ValueError(f"conv3d: padding {padding!r} must be 'SAME', 'VALID' or numbers"
                             f"{where(user_callsite())}")
        return [0, 0, 0], algorithm
    if isinstance(padding, (list, tuple)) and len(padding) == 5:
        spatial = [1, 2, 3] if data_format == "NDHWC" else [2, 3, 4]
        others = [i for i in range(5) if i not in spatial]
        if any(list(padding[i]) != [0, 0] for i in others):
            raise ValueError(f"conv3d: padding of the batch/channel dimensions must be [0, 0], "
                             f"got {padding!r}{where(user_callsite())}")
        padding = [int(p) for i in spatial for p in padding[i]]
    if isinstance(padding, (list, tuple)) and len(padding) == 6:
        pads = [int(p) for p in padding]
        if pads[0::2] == pads[1::2]:
            return pads[0::2], "EXPLICIT"
        return pads, "EXPLICIT"
    return _triple(padding, "padding"), "EXPLICIT"


# --- pooling ------------------------------------------------------------------------------------
@_channels_last
def pool2d(input, pool_size=-1, pool_type="max", pool_stride=1, pool_padding=0,
           global_pooling=False, use_cudnn=True, ceil_mode=False, name=None, exclusive=True,
           data_format="NCHW"):
    """Max or average pooling. exclusive=True: averages ignore the padding."""
    _check_image(input, "pool2d", data_format)
    if pool_type not in ("max", "avg"):
        raise ValueError(f"pool2d: pool_type must be 'max' or 'avg', got {pool_type!r}"
                         f"{where(user_callsite())}")
    if not global_pooling and pool_size == -1:
        raise ValueError(f"pool2d: pass pool_size (or global_pooling=True)"
                         f"{where(user_callsite())}")
    pads, algorithm = _padding(pool_padding, "pool2d")
    if algorithm == "SAME" and ceil_mode:
        raise ValueError(f"pool2d: ceil_mode must be False with pool_padding='SAME'"
                         f"{where(user_callsite())}")
    attrs = {"pooling_type": pool_type, "global_pooling": global_pooling,
             "ksize": _pair(pool_size, "pool_size", "pool2d"),
             "strides": _pair(pool_stride, "pool_stride", "pool2d"),
             "paddings": _op_paddings(pads), "padding_algorithm": algorithm,
             "use_cudnn": use_cudnn, "ceil_mode": ceil_mode, "use_mkldnn": False,
             "exclusive": exclusive, "data_format": data_format}
    return _append_pool(input, name, attrs)


def adaptive_pool2d(input, pool_size, pool_type="max", require_index=False, name=None):
    """Pooling to a fixed output size pool_size: output cell i covers input rows
    floor(i*H/out) to ceil((i+1)*H/out) (likewise for columns)."""
    _check_image(input, "adaptive_pool2d", "NCHW")
    if pool_type not in ("max", "avg"):
        raise ValueError(f"adaptive_pool2d: pool_type must be 'max' or 'avg', got "
                         f"{pool_type!r}{where(user_callsite())}")
    if require_index:
        raise NotImplementedError("adaptive_pool2d: require_index=True (max_pool2d_with_index) "
                                  "is not implemented by this runtime")
    attrs = {"pooling_type": pool_type, "ksize": _pair(pool_size, "pool_size", "adaptive_pool2d"),
             "adaptive": True}
    return _append_pool(input, name, attrs)


def _append_pool(input, name, attrs):
    helper = LayerHelper("pool2d", name=name)
    out = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op("pool2d", inputs={"X": input}, outputs={"Out": out}, attrs=attrs)
    return out


# --- batch norm and dropout ---------------------------------------------------------------------
def batch_norm(input, act=None, is_test=False, momentum=0.9, epsilon=1e-05, param_attr=None,
               bias_attr=None, data_layout="NCHW", in_place=False, name=None,
               moving_mean_name=None, moving_variance_name=None,
               do_model_average_for_mean_and_var=False, use_global_stats=False):
    """Batch normalisation over the channel axis (axis 1 for NCHW, the last for NHWC).
    Parameters: scale (w_0, init 1), bias (b_0, init 0), and the non-trainable running mean
    (w_1, init 0) and variance (w_2, init 1). in_place is accepted but the output is always a
    new variable (memory reuse is the executor's business)."""
    helper = LayerHelper("batch_norm", input=input, param_attr=param_attr, bias_attr=bias_attr,
                         act=act, name=name)
    if data_layout not in ("NCHW", "NHWC") or len(input.shape) < 2:
        raise ValueError(f"batch_norm: needs data_layout 'NCHW' or 'NHWC' and an input of rank "
                         f">= 2, got {data_layout!r} and {list(input.shape)}"
                         f"{where(user_callsite())}")
    out = append_batch_norm(helper, input, data_layout, momentum, epsilon, is_test,
                            use_global_stats, moving_mean_name, moving_variance_name,
                            do_model_average_for_mean_and_var)
    return helper.append_activation(out)


def append_batch_norm(helper, input, data_layout, momentum, epsilon, is_test, use_global_stats,
                      moving_mean_name, moving_variance_name, model_average):
    """The batch_norm op and its parameters (scale, bias, running mean and variance, named
    after `helper`'s layer), appended; its normalised output. `momentum` may be a Variable
    (the op's MomentumTensor)."""
    dtype = helper.input_dtype()
    shape = [input.shape[1] if data_layout == "NCHW" else input.shape[-1]]
    scale = helper.create_parameter(helper.param_attr, shape, dtype,
                                    default_initializer=Constant(1.0))
    bias = helper.create_parameter(helper.bias_attr, shape, dtype, is_bias=True)
    mean = _running_stat(helper, moving_mean_name, 0.0, shape, dtype, model_average)
    variance = _running_stat(helper, moving_variance_name, 1.0, shape, dtype, model_average)
    saved_mean = helper.create_variable_for_type_inference(dtype, stop_gradient=True)
    saved_variance = helper.create_variable_for_type_inference(dtype, stop_gradient=True)
    out = helper.create_variable_for_type_inference(dtype)
    inputs = {"X": input, "Scale": scale, "Bias": bias, "Mean": mean, "Variance": variance}
    attrs = {"epsilon": float(epsilon), "is_test": is_test, "data_layout": data_layout,
             "use_mkldnn": False, "fuse_with_relu": False, "use_global_stats": use_global_stats}
    if isinstance(momentum, Variable):
        inputs["MomentumTensor"] = momentum
    else:
        attrs["momentum"] = float(momentum)
    helper.append_op("batch_norm", inputs=inputs,
                     outputs={"Y": out, "MeanOut": mean, "VarianceOut": variance,
                              "SavedMean": saved_mean, "SavedVariance": saved_variance},
                     attrs=attrs)
    return out


def _running_stat(helper, name, value, shape, dtype, model_average):
    attr = ParamAttr(name=name, initializer=Constant(value), trainable=False,
                     do_model_average=model_average)
    stat = helper.create_parameter(attr, shape, dtype)
    stat.stop_gradient = True
    return stat


def dropout(x, dropout_prob, is_test=False, seed=None, name=None,
            dropout_implementation="downgrade_in_infer"):
    """Zero each element with probability dropout_prob (see ops/norm.py for the two
    implementations). seed fixes the mask: the same elements are dropped at every step.
    Unlike Fluid, a Program.random_seed does not fix the mask (Fluid copies it into `seed`);
    the executor's generator is seeded from it instead, so runs stay reproducible while each
    step still draws a new mask."""
    helper = LayerHelper("dropout", name=name)
    out = helper.create_variable_for_type_inference(x.dtype)
    mask = helper.create_variable_for_type_inference("uint8", stop_gradient=True)
    helper.append_op("dropout", inputs={"X": x}, outputs={"Out": out, "Mask": mask},
                     attrs={"dropout_prob": float(dropout_prob), "is_test": is_test,
                            "fix_seed": seed is not None, "seed": int(seed or 0),
                            "dropout_implementation": dropout_implementation})
    return out


__all__ = ["conv2d", "conv2d_transpose", "conv3d", "pool2d", "adaptive_pool2d", "batch_norm",
           "dropout"]
