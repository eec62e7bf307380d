"""fluid.nets: small compositions of layers (Fluid 1.8's signatures and defaults)."""

from . import layers
from .framework import Variable


def simple_img_conv_pool(input, num_filters, filter_size, pool_size, pool_stride,
                         pool_padding=0, pool_type="max", global_pooling=False, conv_stride=1,
                         conv_padding=0, conv_dilation=1, conv_groups=1, param_attr=None,
                         bias_attr=None, act=None, use_cudnn=True):
    """conv2d (with act) followed by pool2d."""
    conv = layers.conv2d(input=input, num_filters=num_filters, filter_size=filter_size,
                         stride=conv_stride, padding=conv_padding, dilation=conv_dilation,
                         groups=conv_groups, param_attr=param_attr, bias_attr=bias_attr,
                         act=act, use_cudnn=use_cudnn)
    return layers.pool2d(input=conv, pool_size=pool_size, pool_type=pool_type,
                         pool_stride=pool_stride, pool_padding=pool_padding,
                         global_pooling=global_pooling, use_cudnn=use_cudnn)


def img_conv_group(input, conv_num_filter, pool_size, conv_padding=1, conv_filter_size=3,
                   conv_act=None, param_attr=None, conv_with_batchnorm=False,
                   conv_batchnorm_drop_rate=0.0, pool_stride=1, pool_type="max",
                   use_cudnn=True):
    """A VGG block: len(conv_num_filter) convolutions (each optionally batch-normalised, then
    dropped out at its rate), then one pool2d. Per-conv arguments may be lists."""
    if not isinstance(conv_num_filter, (list, tuple)):
        raise TypeError("img_conv_group: conv_num_filter must be a list or tuple")
    n = len(conv_num_filter)

    def per_conv(value):
        if not hasattr(value, "__len__") or isinstance(value, str):
            return [value] * n
        if len(value) != n:
            raise ValueError(f"img_conv_group: {len(value)} values for {n} convolutions")
        return list(value)

    paddings, sizes = per_conv(conv_padding), per_conv(conv_filter_size)
    attrs, with_bn = per_conv(param_attr), per_conv(conv_with_batchnorm)
    drop_rates = per_conv(conv_batchnorm_drop_rate)
    out = input
    for i in range(n):
        out = layers.conv2d(input=out, num_filters=conv_num_filter[i], filter_size=sizes[i],
                            padding=paddings[i], param_attr=attrs[i],
                            act=None if with_bn[i] else conv_act, use_cudnn=use_cudnn)
        if with_bn[i]:
            out = layers.batch_norm(input=out, act=conv_act)
            if abs(drop_rates[i]) > 1e-5:
                out = layers.dropout(x=out, dropout_prob=drop_rates[i])
    return layers.pool2d(input=out, pool_size=pool_size, pool_type=pool_type,
                         pool_stride=pool_stride, use_cudnn=use_cudnn)


def sequence_conv_pool(input, num_filters, filter_size, param_attr=None, act="sigmoid",
                       pool_type="max", bias_attr=None):
    """sequence_conv then sequence_pool over each sequence of a LoD input."""
    conv = layers.sequence_conv(input=input, num_filters=num_filters,
                                filter_size=filter_size, param_attr=param_attr,
                                bias_attr=bias_attr, act=act)
    return layers.sequence_pool(input=conv, pool_type=pool_type)


def glu(input, dim=-1):
    """Gated linear unit: split input in two halves a, b along dim; a * sigmoid(b)."""
    _check_float(input, "input", "glu")
    a, b = layers.split(input, num_or_sections=2, dim=dim)
    return layers.elementwise_mul(x=a, y=layers.sigmoid(x=b))


def scaled_dot_product_attention(queries, keys, values, num_heads=1, dropout_rate=0.0):
    """softmax(Q K^T / sqrt(d_k)) V over 3-D [batch, length, hidden] inputs; with
    num_heads > 1, Q, K and V are first projected by fc layers and split into heads."""
    for name, var in (("queries", queries), ("keys", keys), ("values", values)):
        _check_float(var, name, "scaled_dot_product_attention")
    if not queries.dtype == keys.dtype == values.dtype:
        raise TypeError(f"The dtype of keys, values and queries should be the same. But "
                        f"received queries.dtype = {queries.dtype.name},  keys.dtype = "
                        f"{keys.dtype.name}, values.dtype) = {values.dtype.name}.")
    _check_attention_shapes(queries, keys, values, num_heads)
    if num_heads > 1:
        queries, keys, values = [layers.fc(input=v, size=v.shape[-1], num_flatten_dims=2)
                                 for v in (queries, keys, values)]
    q, k, v = [_split_heads(t, num_heads) for t in (queries, keys, values)]
    scaled_q = layers.scale(x=q, scale=(keys.shape[-1] // num_heads) ** -0.5)
    product = layers.matmul(x=scaled_q, y=k, transpose_y=True)
    weights = layers.reshape(
        x=layers.reshape(x=product, shape=[-1, product.shape[-1]], act="softmax"),
        shape=product.shape)
    if dropout_rate:
        weights = layers.dropout(weights, dropout_prob=dropout_rate, is_test=False)
    return _combine_heads(layers.matmul(weights, v))


def _check_attention_shapes(queries, keys, values, num_heads):
    if not len(queries.shape) == len(keys.shape) == len(values.shape) == 3:
        raise ValueError(f"Inputs queries, keys and values should all be 3-D tensors.But "
                         f"received len(queries.shape) = {len(queries.shape)}, "
                         f"len(keys.shape) = {len(keys.shape)}, len(values.shape) = "
                         f"{len(values.shape)}.")
    if queries.shape[-1] != keys.shape[-1]:
        raise ValueError(f"The hidden size of queries and keys should be the same.But received "
                         f"queries' hidden size = {queries.shape[-1]} and keys' hidden size = "
                         f"{keys.shape[-1]}.")
    if keys.shape[-2] != values.shape[-2]:
        raise ValueError(f"The max sequence length in value batch and in key batch should be "
                         f"the same. But received max sequence length in value batch = "
                         f"{values.shape[-2]}, in key batch = {keys.shape[-2]}.")
    for name, var in (("keys", keys), ("values", values)):
        if var.shape[-1] % num_heads:
            raise ValueError(f"The hidden size of {name} ({var.shape[-1]}) must be divisible "
                             f"by the number of attention heads ({num_heads}).")


def _split_heads(x, num_heads):
    if num_heads == 1:
        return x
    hidden = x.shape[-1]
    shaped = layers.reshape(x=x, shape=list(x.shape[:-1]) + [num_heads, hidden // num_heads])
    return layers.transpose(x=shaped, perm=[0, 2, 1, 3])


def _combine_heads(x):
    if len(x.shape) == 3:
        return x
    t = layers.transpose(x, perm=[0, 2, 1, 3])
    return layers.reshape(x=t, shape=[t.shape[0], t.shape[1], t.shape[2] * t.shape[3]])


def _check_float(var, name, api):
    if not isinstance(var, Variable):
        raise TypeError(f"The type of '{name}' in {api} must be Variable, but received "
                        f"{type(var).__name__}.")
    if var.dtype.name not in ("float16", "float32", "float64"):
        raise TypeError(f"The data type of '{name}' in {api} must be float16, float32 or "
                        f"float64, but received {var.dtype.name}.")


__all__ = ["simple_img_conv_pool", "sequence_conv_pool", "glu", "scaled_dot_product_attention",
           "img_conv_group"]
