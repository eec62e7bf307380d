"""Core layers: fc, mul, elementwise ops, mean, scale, sums, softmax, losses."""

from ..errors import ShapeError, where
from ..framework import Variable, user_callsite
from ..layer_helper import LayerHelper
from ..ops.registry import shape_product


def fc(input, size, num_flatten_dims=1, param_attr=None, bias_attr=None, act=None, name=None,
       is_test=False):
    """out = act(sum_i flatten(input_i) @ W_i + b). Dimensions of each input from
    num_flatten_dims on are flattened into one; W_i has shape [that product, size]."""
    helper = LayerHelper("fc", input=input, param_attr=param_attr, bias_attr=bias_attr, act=act,
                         name=name)
    if not isinstance(size, int) or size <= 0:
        raise ValueError(f"fc: size must be a positive int, got {size!r}{where(user_callsite())}")
    dtype = helper.input_dtype()
    products = []
    for inp, attr in helper.iter_inputs_and_params():
        if not 0 < num_flatten_dims < len(inp.shape) + 1:
            raise ShapeError(f"fc: num_flatten_dims={num_flatten_dims} does not fit input "
                             f"{inp.name!r} of shape {list(inp.shape)}{where(user_callsite())}")
        inner = shape_product(inp.shape[num_flatten_dims:])
        if inner <= 0:
            raise ShapeError(f"fc: input {inp.name!r} has shape {list(inp.shape)}; the dimensions "
                             f"after num_flatten_dims={num_flatten_dims} must be known to size "
                             f"the weight{where(user_callsite())}")
        w = helper.create_parameter(attr, [inner, size], dtype)
        tmp = helper.create_variable_for_type_inference(dtype)
        helper.append_op("mul", inputs={"X": inp, "Y": w}, outputs={"Out": tmp},
                         attrs={"x_num_col_dims": num_flatten_dims, "y_num_col_dims": 1})
        products.append(tmp)
    if len(products) == 1:
        pre_bias = products[0]
    else:
        pre_bias = helper.create_variable_for_type_inference(dtype)
        helper.append_op("sum", inputs={"X": products}, outputs={"Out": pre_bias})
    return helper.append_activation(helper.append_bias_op(pre_bias, dim_start=num_flatten_dims))


def mul(x, y, x_num_col_dims=1, y_num_col_dims=1, name=None):
    helper = LayerHelper("mul", name=name)
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op("mul", inputs={"X": x, "Y": y}, outputs={"Out": out},
                     attrs={"x_num_col_dims": x_num_col_dims, "y_num_col_dims": y_num_col_dims})
    return out


def _elementwise(op_type, x, y, axis=-1, act=None, name=None):
    helper = LayerHelper(op_type, act=act, name=name)
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op(op_type, inputs={"X": x, "Y": y}, outputs={"Out": out},
                     attrs={"axis": axis})
    return helper.append_activation(out)


def elementwise_add(x, y, axis=-1, act=None, name=None):
    """x + y; y is broadcast onto x starting at dimension `axis` (-1: trailing dimensions)."""
    return _elementwise("elementwise_add", x, y, axis, act, name)


def elementwise_sub(x, y, axis=-1, act=None, name=None):
    return _elementwise("elementwise_sub", x, y, axis, act, name)


def elementwise_mul(x, y, axis=-1, act=None, name=None):
    return _elementwise("elementwise_mul", x, y, axis, act, name)


def elementwise_div(x, y, axis=-1, act=None, name=None):
    return _elementwise("elementwise_div", x, y, axis, act, name)


def elementwise_max(x, y, axis=-1, act=None, name=None):
    return _elementwise("elementwise_max", x, y, axis, act, name)


def elementwise_min(x, y, axis=-1, act=None, name=None):
    return _elementwise("elementwise_min", x, y, axis, act, name)


def elementwise_pow(x, y, axis=-1, act=None, name=None):
    return _elementwise("elementwise_pow", x, y, axis, act, name)


def _unary(op_type, x, name=None, **attrs):
    helper = LayerHelper(op_type, name=name)
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op(op_type, inputs={"X": x}, outputs={"Out": out}, attrs=attrs)
    return out


def mean(x, name=None):
    """The mean of all elements, shape [1]."""
    return _unary("mean", x, name)


def scale(x, scale=1.0, bias=0.0, bias_after_scale=True, act=None, name=None):
    helper = LayerHelper("scale", act=act, name=name)
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op("scale", inputs={"X": x}, outputs={"Out": out},
                     attrs={"scale": float(scale), "bias": float(bias),
                            "bias_after_scale": bias_after_scale})
    return helper.append_activation(out)


def sums(input, out=None):
    helper = LayerHelper("sum")
    if out is None:
        out = helper.create_variable_for_type_inference(input[0].dtype)
    helper.append_op("sum", inputs={"X": list(input)}, outputs={"Out": out})
    return out


def softmax(input, use_cudnn=False, name=None, axis=-1):
    return _unary("softmax", input, name, axis=axis, use_cudnn=use_cudnn)


def cross_entropy(input, label, soft_label=False, ignore_index=-100):
    """-log(input[label]) per row, shape [batch, 1]; `input` holds probabilities (e.g. the
    output of softmax). Hard labels may also lack the trailing 1 (the loss is then shaped
    like them). Prefer softmax_with_cross_entropy on logits: fused and stabler."""
    helper = LayerHelper("cross_entropy")
    out = helper.create_variable_for_type_inference(input.dtype)
    if soft_label:
        helper.append_op("cross_entropy", inputs={"X": input, "Label": label},
                         outputs={"Y": out},
                         attrs={"soft_label": True, "ignore_index": ignore_index})
        return out
    if len(label.shape) == len(input.shape) - 1:
        # Fluid 1.8's cross_entropy2 also takes labels without the trailing 1 and then gives
        # a loss shaped like them: the same op on the labels with that axis added
        from .tensor import squeeze, unsqueeze
        return squeeze(cross_entropy(input, unsqueeze(label, [-1]), soft_label, ignore_index),
                       [-1])
    # hard labels: Fluid 1.8 appends cross_entropy2 (it also keeps the matched probability)
    match = helper.create_variable_for_type_inference(input.dtype, stop_gradient=True)
    x_shape = helper.create_variable_for_type_inference(input.dtype, stop_gradient=True)
    helper.append_op("cross_entropy2", inputs={"X": input, "Label": label},
                     outputs={"Y": out, "MatchX": match, "XShape": x_shape},
                     attrs={"ignore_index": ignore_index})
    return out


def softmax_with_cross_entropy(logits, label, soft_label=False, ignore_index=-100,
                               numeric_stable_mode=True, return_softmax=False, axis=-1):
    """Softmax and cross entropy in one numerically stable op; returns the loss per row
    (and the softmax when return_softmax=True)."""
    helper = LayerHelper("softmax_with_cross_entropy")
    softmax_out = helper.create_variable_for_type_inference(logits.dtype)
    loss = helper.create_variable_for_type_inference(logits.dtype)
    helper.append_op("softmax_with_cross_entropy", inputs={"Logits": logits, "Label": label},
                     outputs={"Softmax": softmax_out, "Loss": loss},
                     attrs={"soft_label": soft_label, "ignore_index": ignore_index,
                            "numeric_stable_mode": numeric_stable_mode, "axis": axis})
    return (loss, softmax_out) if return_softmax else loss


def square_error_cost(input, label):
    """(input - label)^2 elementwise."""
    _check_var(input, "square_error_cost: input")
    _check_var(label, "square_error_cost: label")
    minus = elementwise_sub(input, label)
    return _unary("square", minus)


def _check_var(value, what):
    if not isinstance(value, Variable):
        raise TypeError(f"{what} must be a Variable, got {type(value).__name__}")


def embedding(input, size, is_sparse=False, is_distributed=False, padding_idx=None,
              param_attr=None, dtype="float32"):
    """fluid.layers.embedding: rows of a [vocab, dim] table for ids of shape [..., 1].
    is_sparse=True makes the table's gradient row-sparse (only the looked-up rows)."""
    return _embedding("lookup_table", input, size, is_sparse, is_distributed, padding_idx,
                      param_attr, dtype)


def embedding_v2(input, size, is_sparse=False, is_distributed=False, padding_idx=None,
                 param_attr=None, dtype="float32"):
    """fluid.embedding (1.6+): like layers.embedding but ids need no trailing dimension of 1."""
    return _embedding("lookup_table_v2", input, size, is_sparse, is_distributed, padding_idx,
                      param_attr, dtype)


def _embedding(op_type, input, size, is_sparse, is_distributed, padding_idx, param_attr, dtype):
    helper = LayerHelper("embedding", param_attr=param_attr)
    if len(size) != 2 or any(int(d) <= 0 for d in size):
        raise ValueError(f"embedding: size must be [vocab_size, dim], got {size!r}"
                         f"{where(user_callsite())}")
    w = helper.create_parameter(helper.param_attr, list(size), dtype)
    out = helper.create_variable_for_type_inference(dtype)
    if padding_idx is None:
        padding_idx = -1
    elif padding_idx < 0:
        padding_idx += size[0]
    helper.append_op(op_type, inputs={"Ids": input, "W": w}, outputs={"Out": out},
                     attrs={"is_sparse": bool(is_sparse), "is_distributed": is_distributed,
                            "padding_idx": padding_idx})
    return out


__all__ = ["fc", "mul", "elementwise_add", "elementwise_sub", "elementwise_mul",
           "elementwise_div", "elementwise_max", "elementwise_min", "elementwise_pow", "mean",
           "scale", "sums", "softmax", "cross_entropy", "softmax_with_cross_entropy",
           "square_error_cost", "embedding"]
