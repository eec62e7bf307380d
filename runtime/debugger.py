"""fluid.debugger (Fluid 1.8): a program as pseudo-code, and a block as a Graphviz graph.

pprint_program_codes(program) gives, for each block, its variables ("Tensor x (tensor(
type=float32, shape=[5, 10]))", "LoDTensor y (level=1, ...)", "SelectedRows ...",
"TensorArray ...") and its ops ("out = mul(X=x, Y=y) [{x_num_col_dims=1,...}]"; fill_constant
as "out = value [shape=...]"), gradient variables and ops left out unless show_backward.
draw_block_graphviz(block, highlights, path) writes a DOT file: parameters, other variables
and ops as nodes, an edge per op input and output; names matching one of the `highlights`
regular expressions drawn in red.
"""

import re

from .dtypes import VarType

__all__ = ["pprint_program_codes", "pprint_block_codes", "repr_var", "repr_op",
           "draw_block_graphviz"]


def _tensor(var):
    dtype = var.dtype.name if var.dtype is not None else "UNK"
    return f"tensor(type={dtype}, shape={list(var.shape or ())})"


def repr_var(var):
    """One line for a variable: its kind, name, LoD level, dtype and shape."""
    if var.type == VarType.SELECTED_ROWS:
        return f"SelectedRows {var.name} ({_tensor(var)})"
    if var.type == VarType.LOD_TENSOR_ARRAY:
        return f"TensorArray {var.name} (level={var.lod_level or 0}, {_tensor(var)})"
    if var.type == VarType.LOD_TENSOR:
        level = var.lod_level or 0
        if level:
            return f"LoDTensor {var.name} (level={level}, {_tensor(var)})"
        return f"Tensor {var.name} ({_tensor(var)})"
    return None


def _args(names):
    names = list(names)
    return names[0] if len(names) == 1 else str(names)


def _attr_value(value):
    return f"block-{value.idx}" if hasattr(value, "ops") and hasattr(value, "idx") else value


def repr_op(op):
    """One line for an op: outputs = type(inputs) [attrs]."""
    outputs = [_args(names) for names in op.outputs.values()]
    attrs = {k: _attr_value(v) for k, v in sorted(op.attrs.items())}
    if op.type == "fill_constant":
        return f"{','.join(outputs)} = {attrs.get('value')} [shape={attrs.get('shape')}]"
    inputs = ", ".join(f"{slot}={_args(names)}" for slot, names in op.inputs.items())
    body = ",".join(f"{k}={v}" for k, v in attrs.items())
    return f"{', '.join(outputs)} = {op.type}({inputs}) [{{{body}}}]"


def _is_backward_op(op):
    if op.type.endswith("_grad"):
        return True
    slots = list(op.inputs.items()) + list(op.outputs.items())
    return any("@GRAD" in slot or any("@GRAD" in n for n in names) for slot, names in slots)


def pprint_block_codes(block, show_backward=False):
    """A block as pseudo-code: its variables, then its ops."""
    variables = [repr_var(v) for name, v in block.vars.items()
                 if show_backward or "@GRAD" not in name]
    ops = [repr_op(op) for op in block.ops if show_backward or not _is_backward_op(op)]
    return (f"// block-{block.idx}  parent-{block.parent_idx}\n// variables\n"
            + "\n".join(v for v in variables if v) + "\n\n// operators\n" + "\n".join(ops)
            + "\n")


def pprint_program_codes(program):
    """Every block of `program` as pseudo-code (pprint_block_codes), one after another."""
    return "\n".join(pprint_block_codes(block) for block in program.blocks)


def _quote(text):
    escaped = str(text).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def draw_block_graphviz(block, highlights=None, path="./temp.dot"):
    """Write `block` as a Graphviz DOT graph to `path` (render it with `dot -Tpdf`)."""
    def marked(name):
        return any(re.match(pattern, name) for pattern in highlights or ())

    lines = ["digraph G {", '  graph [rankdir=TB, label="block-%d"];' % block.idx]
    nodes = {}

    def var_node(name):
        if name not in nodes:
            var = block.vars.get(name)
            nodes[name] = f"var_{len(nodes)}"
            persistable = var is not None and var.persistable
            label = name if not persistable else f"{name}\n{var.type}"
            shape = "box" if persistable else "ellipse"
            color = ", color=red" if marked(name) else ""
            lines.append(f"  {nodes[name]} [label={_quote(label)}, shape={shape}{color}];")
        return nodes[name]

    for name in block.vars:
        var_node(name)
    for k, op in enumerate(block.ops):
        node = f"op_{k}"
        color = ", color=red" if marked(op.type) else ""
        lines.append(f"  {node} [label={_quote(op.type)}, shape=record, style=filled, "
                     f"fillcolor=lightgray{color}];")
        for names in op.inputs.values():
            for name in names:
                lines.append(f"  {var_node(name)} -> {node};")
        for names in op.outputs.values():
            for name in names:
                lines.append(f"  {node} -> {var_node(name)};")
    lines.append("}")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path
