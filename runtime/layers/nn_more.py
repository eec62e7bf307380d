"""More fluid.layers of Fluid 1.8, built on the existing ops (so their gradients are those
ops' checked rules): sigmoid_cross_entropy_with_logits, l2_normalize, npair_loss."""

from ..framework import Variable
from ..layer_helper import LayerHelper
from .logic import check_variable, equal
from . import nn, ops, tensor

_FLOATS = ("float16", "float32", "float64")


def sigmoid_cross_entropy_with_logits(x, label, ignore_index=-100, name=None,
                                      normalize=False):
    """Elementwise binary cross entropy of sigmoid(x) against label (both [N, D]); entries
    whose label is ignore_index give 0; normalize divides by the number of the others."""
    check_variable(x, "input", "sigmoid_cross_entropy_with_logits", _FLOATS)
    helper = LayerHelper("sigmoid_cross_entropy_with_logits", name=name)
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op("sigmoid_cross_entropy_with_logits", inputs={"X": x, "Label": label},
                     outputs={"Out": out},
                     attrs={"ignore_index": ignore_index, "normalize": bool(normalize)})
    return out


def l2_normalize(x, axis, epsilon=1e-12, name=None):
    """x / sqrt(sum(x^2 along axis) + epsilon)."""
    check_variable(x, "x", "l2_normalize", _FLOATS)
    axis = axis if axis >= 0 else len(x.shape) + axis
    squares = tensor.reduce_sum(ops.square(x), dim=axis, keep_dim=True)
    return nn.elementwise_div(x, ops.sqrt(squares + float(epsilon)))


def npair_loss(anchor, positive, labels, l2_reg=0.002):
    """N-pair loss (Sohn, 2016): softmax cross entropy of the anchor-positive similarities
    against the same-label matrix (rows normalised), plus l2_reg/4 times the mean squared
    norms of the embeddings."""
    check_variable(anchor, "anchor", "npair_loss", _FLOATS)
    check_variable(positive, "positive", "npair_loss", _FLOATS)
    check_variable(labels, "labels", "npair_loss", _FLOATS)
    batch = labels.shape[0]
    column = tensor.reshape(labels, shape=[batch, 1])
    grid = tensor.expand(column, expand_times=[1, batch])
    same = tensor.cast(equal(grid, tensor.transpose(grid, perm=[1, 0])), "float32")
    targets = nn.elementwise_div(same, tensor.reduce_sum(same, dim=1, keep_dim=True))
    l2loss = tensor.reduce_mean(tensor.reduce_sum(ops.square(anchor), 1)) + \
        tensor.reduce_mean(tensor.reduce_sum(ops.square(positive), 1))
    similarity = tensor.matmul(anchor, positive, transpose_y=True)
    ce = nn.softmax_with_cross_entropy(similarity, targets, soft_label=True)
    return l2loss * (0.25 * l2_reg) + tensor.reduce_mean(ce)


def _var_list(value, what):
    if value is None:
        return []
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    for item in items:
        if not isinstance(item, Variable):
            raise TypeError(f"py_func: {what} must be a Variable, a list/tuple of them or None, "
                            f"got {type(item).__name__}")
    return items


def py_func(func, x, out, backward_func=None, skip_vars_in_backward_input=None):
    """An op calling the Python function `func` on x (LoDTensors) that fills `out` (created by
    the caller with their dtypes); backward_func(inputs, outputs, output gradients; minus the
    skip_vars_in_backward_input) gives the inputs' gradients. Returns out."""
    from ..ops.py_func import register
    if not callable(func):
        raise TypeError("py_func: func must be a Python function")
    xs, outs = _var_list(x, "x"), _var_list(out, "out")
    skip = [v.name if isinstance(v, Variable) else v
            for v in _var_list(skip_vars_in_backward_input, "skip_vars_in_backward_input")]
    known = {v.name for v in xs + outs}
    for name in skip:
        if name not in known:
            raise ValueError(f"py_func: {name!r} in skip_vars_in_backward_input is neither an "
                             f"input nor an output")
    helper = LayerHelper("py_func")
    helper.append_op("py_func", inputs={"X": xs}, outputs={"Out": outs},
                     attrs={"forward_callable_id": register(func),
                            "backward_callable_id": register(backward_func),
                            "backward_skip_vars": skip})
    return out


__all__ = ["sigmoid_cross_entropy_with_logits", "l2_normalize", "npair_loss", "py_func"]
