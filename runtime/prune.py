"""Program pruning (Program._prune / _prune_with_input) and the inference rewrite
(Program._inference_optimize), as save_inference_model and Executor.run(use_prune=True) use them.

Pruning keeps the ops of the global block that the targets need, in order, and stops at fed
variables (what computes them is not needed); variables no kept op uses are dropped, so the
pruned program's persistables are what inference needs (no optimizer state). Sub-blocks of
kept control-flow ops are kept whole.
"""

from .framework import Operator, Variable

_READER_OPS = ("read", "create_py_reader", "create_double_buffer_reader")


def prune(program, feeded_var_names, targets):
    """A pruned copy of `program`: targets are Variables, names or Operators."""
    feeded = _names_of(feeded_var_names, "feeded_var_names")
    wanted, target_ops = set(), []
    for target in targets if isinstance(targets, (list, tuple)) else [targets]:
        if isinstance(target, Operator):
            target_ops.append(target)
        elif isinstance(target, Variable):
            wanted.add(target.name)
        elif isinstance(target, str):
            wanted.add(target)
        else:
            raise ValueError(f"All targets of Program._prune_with_input() can only be Variable "
                             f"or Operator, but received {type(target)}.")
    twin = program.clone()
    block = twin.global_block()
    keep = _needed_ops(block.ops, wanted, feeded,
                       {program.global_block().ops.index(op) for op in target_ops
                        if op.block is program.global_block()})
    block.ops = [op for i, op in enumerate(block.ops) if i in keep]
    used = set(wanted) | feeded
    for op in block.ops:
        used.update(op.input_arg_names)
        used.update(op.output_arg_names)
    block.vars = {n: v for n, v in block.vars.items() if n in used}
    for v in block.vars.values():
        if v.name in feeded:
            v.is_data = True
    twin._bump()
    return twin


def _needed_ops(ops, wanted, feeded, forced):
    """Indices of the ops that compute `wanted` (plus the `forced` ones), not looking past
    fed variables."""
    wanted = set(wanted)
    keep = set()
    for i in range(len(ops) - 1, -1, -1):
        op = ops[i]
        outs = [n for n in op.output_arg_names if n not in feeded]
        if i in forced or any(n in wanted for n in outs):
            keep.add(i)
            wanted.update(n for n in op.input_arg_names if n not in feeded)
            wanted.update(_sub_block_reads(op))
    return keep


def _sub_block_reads(op):
    block = op.attrs.get("sub_block")
    names = set()
    if block is not None and hasattr(block, "ops"):
        for inner in block.ops:
            names.update(inner.input_arg_names)
            names.update(_sub_block_reads(inner))
    return names


def inference_optimize(program, prune_read_op=True):
    """A copy whose ops run in inference mode (is_test=True), without reader ops."""
    twin = program.clone(for_test=True)
    if prune_read_op:
        for block in twin.blocks:
            block.ops = [op for op in block.ops if op.type not in _READER_OPS]
    for block in twin.blocks:
        for op in block.ops:
            if "is_test" in op.attrs:
                op.attrs["is_test"] = True
    twin._bump()
    return twin


def _names_of(items, what):
    if items is None:
        return set()
    if isinstance(items, str):
        return {items}
    names = set()
    for item in items:
        if isinstance(item, Variable):
            names.add(item.name)
        elif isinstance(item, str):
            names.add(item)
        else:
            raise ValueError(f"All feeded_var_names of Program._prune_with_input() can only be "
                             f"str, but received {type(item)}.")
    return names
