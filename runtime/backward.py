"""Reverse-mode autodiff on the program: append_backward(), gradients() / calc_gradient(), and
the helpers Fluid 1.8 exposes from fluid.backward (op paths, no-grad sets, name suffixes).

The ops are appended by runtime/backward_builder.py (how names are chosen, why a second call
never overwrites the first one's gradients, second-order gradients). Argument checks raise
TypeError as Paddle's do.
"""

from .backward_builder import Builder
from .framework import GRAD_SUFFIX, Variable
from .ops.registry import REGISTRY


def append_backward(loss, parameter_list=None, no_grad_set=None, callbacks=None,
                    checkpoints=None):
    """Append the gradient ops of `loss`; returns [(parameter, gradient)] for the trainable
    parameters (or those in parameter_list) that the loss depends on."""
    _check_type(loss, "loss", Variable, "fluid.backward.append_backward")
    if parameter_list is not None:
        _check_type(parameter_list, "parameter_list", (list, tuple, set),
                    "fluid.backward.append_backward")
        for item in parameter_list:
            _check_type(item, "parameter_list's item", (Variable, str),
                        "fluid.backward.append_backward")
    if callbacks is not None:
        _check_type(callbacks, "callbacks", (list, tuple), "fluid.backward.append_backward")
        for callback in callbacks:
            if not callable(callback):
                raise TypeError(f"append_backward: callbacks hold callables, got {callback!r}")
    block = loss.block  # the global block, or the sub-block the loss is computed in
    program = block.program
    builder = Builder(block, [loss], _get_no_grad_set_name(no_grad_set), callbacks)
    builder.seed(loss, None)
    builder.build()
    program._appending_grad_times += 1
    out = []
    for name in _param_names(program.global_block(), parameter_list):
        grad = block._find_var_recursive(builder.grad_name(name))
        if builder.has_grad(name) and grad is not None:
            out.append((block._var_recursive(name), grad))
    return out


def calc_gradient(targets, inputs, target_gradients=None, no_grad_set=None):
    """d(sum of targets)/d(inputs): a Variable for one input, else a list (None where an
    input does not affect the targets). Unlike Paddle, an input listed here gets its gradient
    even if it has stop_gradient=True (asking for it is explicit enough)."""
    targets = _as_list(targets)
    inputs = _as_list(inputs)
    seeds = _as_list(target_gradients) or [None] * len(targets)
    if len(seeds) != len(targets):
        raise ValueError(f"gradients(): {len(targets)} targets but {len(seeds)} target_gradients")
    for target, seed in zip(targets, seeds):
        if seed is not None and tuple(seed.shape) != tuple(target.shape):
            raise ValueError(f"the shapes of target {target.name!r} {list(target.shape)} and "
                             f"its gradient {seed.name!r} {list(seed.shape)} differ")
    block = targets[0].block.program.global_block()
    builder = Builder(block, targets, _get_no_grad_set_name(no_grad_set), None,
                      force={v.name for v in inputs})
    for target, seed in zip(targets, seeds):
        builder.seed(target, seed)
    builder.build()
    block.program._appending_grad_times += 1
    grads = [block.var(builder.grad_name(v.name)) if builder.has_grad(v.name) else None
             for v in inputs]
    return grads[0] if len(grads) == 1 else grads


def gradients(targets, inputs, target_gradients=None, no_grad_set=None):
    """fluid.gradients: like calc_gradient, always a list."""
    _check_type(targets, "targets", (Variable, list, tuple), "fluid.backward.gradients")
    _check_type(inputs, "inputs", (Variable, list, tuple), "fluid.backward.gradients")
    _check_type(target_gradients, "target_gradients", (Variable, list, tuple, type(None)),
                "fluid.backward.gradients")
    for item in _as_list(targets) + _as_list(inputs) + _as_list(target_gradients):
        if item is not None:
            _check_type(item, "an item of targets/inputs/target_gradients", Variable,
                        "fluid.backward.gradients")
    grads = calc_gradient(targets, inputs, target_gradients, no_grad_set)
    return grads if isinstance(grads, list) else [grads]


# --- Fluid's helper functions ------------------------------------------------------------------
def _append_grad_suffix_(name):
    return name + GRAD_SUFFIX


def _strip_grad_suffix_(name):
    """'x@GRAD' -> 'x', 'x@GRAD@RENAME@block0@1' -> 'x'."""
    pos = name.find(GRAD_SUFFIX)
    return name[:pos] if pos != -1 else name


def _as_list(value):
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _get_stop_gradients_(program):
    """{block index: {'<name>@GRAD' for every stop_gradient variable of that block}}."""
    return {block.idx: {_append_grad_suffix_(v.name) for v in block.vars.values()
                        if v.stop_gradient}
            for block in program.blocks}


def _get_no_grad_set_name(no_grad_set):
    """The names in no_grad_set (a set/list/tuple of Variables or names), checked."""
    if no_grad_set is None:
        return set()
    if not isinstance(no_grad_set, (set, list, tuple)):
        raise TypeError(f"The type of no_grad_set should be set or list or tuple, but "
                        f"received {type(no_grad_set)}")
    names = set()
    for item in no_grad_set:
        if isinstance(item, Variable):
            names.add(item.name)
        elif isinstance(item, str):
            names.add(item)
        else:
            raise TypeError(f"The type of no_grad_set's member must be paddle.fluid.Variable "
                            f"or str, but received {type(item)}.")
    return names


def _has_grad_maker(op_type):
    opdef = REGISTRY.get(op_type)
    return opdef is not None and (opdef.grad_def is not None or opdef.grad_maker is not None)


def _find_op_path_(block, outputs, inputs, no_grad_set):
    """The ops of `block` on a differentiable path from `inputs` (all, when empty) to
    `outputs`, in program order. Adds to no_grad_set the stop_gradient inputs of the path not
    reached from `inputs`."""
    no_grad_set = set() if no_grad_set is None else no_grad_set
    reached = {v.name for v in inputs}
    keep = [True] * len(block.ops)
    if inputs:
        for i, op in enumerate(block.ops):
            if _has_grad_maker(op.type) and reached.intersection(op.input_arg_names):
                reached.update(n for n in op.output_arg_names if n not in no_grad_set)
            else:
                keep[i] = False
    wanted = {v.name for v in outputs}
    for i in range(len(block.ops) - 1, -1, -1):
        op = block.ops[i]
        if _has_grad_maker(op.type) and wanted.intersection(op.output_arg_names):
            wanted.update(n for n in op.input_arg_names if n not in no_grad_set)
        else:
            keep[i] = False
    path = [op for i, op in enumerate(block.ops) if keep[i]]
    if inputs:
        for op in path:
            for name in op.input_arg_names:
                if name not in reached and block._var_recursive(name).stop_gradient:
                    no_grad_set.add(name)
    return path


def _find_no_grad_vars(block, op_path, targets, no_grad_set):
    """Outputs of the path's ops that nothing downstream uses (and are not stop_gradient):
    their gradients are zeros."""
    used = {v.name for v in targets}
    unused = set()
    for op in reversed(op_path):
        if "sub_block" not in op.attrs:
            for name in op.output_arg_names:
                if (name not in used and name not in op.input_arg_names
                        and not block._var_recursive(name).stop_gradient):
                    unused.add(name)
        used.update(n for n in op.input_arg_names if n not in no_grad_set)
    return unused


# --- checks ------------------------------------------------------------------------------------
def _check_type(value, what, types, api):
    if not isinstance(value, types):
        names = types.__name__ if isinstance(types, type) else \
            ", ".join(t.__name__ for t in types)
        raise TypeError(f"The type of '{what}' in {api} must be {names}, but received "
                        f"{type(value).__name__}.")


def _param_names(block, parameter_list):
    if parameter_list is None:
        return [p.name for p in block.all_parameters() if p.trainable]
    return [p.name if isinstance(p, Variable) else p for p in parameter_list]


__all__ = ["append_backward", "gradients", "calc_gradient"]
