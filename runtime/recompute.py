"""Backward with recomputation (RecomputeOptimizer, Paddle 1.8): activations between
checkpoints are not kept for the backward pass but computed again just before the gradient
ops that need them, so the executor frees the originals right after the forward pass.

The forward ops are cut at the checkpoints (variables, in program order): segment k holds the
ops after checkpoint k-1 up to the op producing checkpoint k (the first segment starts at the
first op). Ops after the last checkpoint are not recomputed. For each segment, latest first,
its ops (except those producing only checkpoints, and `seed` ops) are copied in front of the
segment's first gradient op with their outputs renamed `<name>.subprog_<i>`, and the
segment's gradient ops read the copies. A dropout gets a `seed` op first, so its recomputed
mask is the one the forward pass drew."""

from . import unique_name
from .backward import append_backward
from .framework import Variable

__all__ = ["append_backward_with_checkpoints"]


def append_backward_with_checkpoints(loss, checkpoints, parameter_list=None, no_grad_set=None,
                                     callbacks=None):
    block = loss.block
    names = [c.name if isinstance(c, Variable) else str(c) for c in checkpoints]
    _seed_dropouts(block)
    n_forward = len(block.ops)
    params_grads = append_backward(loss, parameter_list, no_grad_set, callbacks)
    segments = _segments(block.ops[:n_forward], set(names))
    for index, segment in enumerate(reversed(segments)):
        _recompute(block, segment, set(names), index)
    return params_grads


def _seed_dropouts(block):
    """A seed op before each training dropout that has neither a Seed input nor a fixed seed."""
    for op in list(block.ops):
        if op.type != "dropout" or op.input("Seed") or op.attrs.get("fix_seed") or \
                op.attrs.get("is_test"):
            continue
        seed = block.create_var(name=unique_name.generate("seed"), dtype="int32", shape=[1],
                                stop_gradient=True)
        block._insert_op(block.ops.index(op), "seed", outputs={"Out": seed},
                         attrs={"seed": op.attrs.get("seed", 0)})
        op.inputs["Seed"] = [seed.name]
    block.program._bump()


def _segments(ops, checkpoints):
    """The ops of each segment (a list per checkpoint position, in program order)."""
    positions = set()
    for name in checkpoints:
        producers = [i for i, op in enumerate(ops) if name in op.output_arg_names]
        positions.add(producers[-1] if producers else -1)
    segments, start = [], 0
    for end in sorted(positions):
        segments.append(ops[start:end + 1])
        start = end + 1
    return segments


def _recompute(block, segment, checkpoints, index):
    redo = [op for op in segment if op.type != "seed" and
            not all(n in checkpoints for n in op.output_arg_names)]
    if not redo:
        return
    members = {id(op) for op in segment}
    grads = [i for i, g in enumerate(block.ops) if id(getattr(g, "forward_op", None)) in members]
    if not grads:
        return
    rename = {}
    at = grads[0]
    for op in redo:
        inputs = {slot: [rename.get(n, n) for n in names] for slot, names in op.inputs.items()}
        outputs = {}
        for slot, names in op.outputs.items():
            outputs[slot] = [_copy_var(block, n, index, rename) if n not in checkpoints else n
                             for n in names]
        copy = block._insert_op(at, op.type, inputs=inputs, outputs=outputs,
                                attrs={k: v for k, v in op.attrs.items() if k != "op_role"})
        copy.callsite = op.callsite
        at += 1
    for g in block.ops[at:]:
        if id(getattr(g, "forward_op", None)) in members:
            for slot, names in g.inputs.items():
                g.inputs[slot] = [rename.get(n, n) for n in names]
    block.program._bump()


def _copy_var(block, name, index, rename):
    new = f"{name}.subprog_{index}"
    var = block._var_recursive(name)
    block.create_var(name=new, shape=var.shape, dtype=var.dtype, type=var.type,
                     lod_level=var.lod_level, stop_gradient=var.stop_gradient)
    rename[name] = new
    return new
