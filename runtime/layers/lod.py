"""LoD layers of fluid.layers.control_flow (Fluid 1.8): lod_rank_table, max_sequence_len,
lod_tensor_to_array, array_to_lod_tensor, shrink_memory, reorder_lod_tensor_by_rank,
split_lod_tensor, merge_lod_tensor, and fluid.layers.lod_reset / lod_append. The ops are in
runtime/ops/lod_ops.py; runtime/lod.py describes how LoD travels."""

from ..dtypes import VarType
from ..framework import Variable
from ..layer_helper import LayerHelper

__all__ = ["lod_rank_table", "max_sequence_len", "lod_tensor_to_array", "array_to_lod_tensor",
           "shrink_memory", "reorder_lod_tensor_by_rank", "split_lod_tensor",
           "merge_lod_tensor", "lod_reset", "lod_append"]


def _check(value, what, api, types=(Variable,)):
    """TypeError (Paddle's check_type) unless value is one of `types`; a list must hold
    Variables."""
    if not isinstance(value, types):
        names = ", ".join(t.__name__ for t in types)
        raise TypeError(f"The type of '{what}' in {api} must be {names}, but received "
                        f"{type(value).__name__}.")
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            if not isinstance(item, Variable):
                raise TypeError(f"The type of '{what}[{i}]' in {api} must be Variable, but "
                                f"received {type(item).__name__}.")
        return value[0] if value else None
    return value


def lod_rank_table(x, level=0):
    """The sequences of x's LoD level `level`, longest first (a LOD_RANK_TABLE variable)."""
    x = _check(x, "x", "lod_rank_table", (Variable, list))
    helper = LayerHelper("lod_rank_table")
    table = helper.create_variable(name=helper.name, type=VarType.LOD_RANK_TABLE)
    helper.append_op("lod_rank_table", inputs={"X": x}, outputs={"Out": table},
                     attrs={"level": level})
    return table


def max_sequence_len(rank_table):
    """The length of the longest sequence of the table (int64 [1])."""
    helper = LayerHelper("max_seqence_len")
    out = helper.create_variable_for_type_inference("int64", stop_gradient=True)
    helper.append_op("max_sequence_len", inputs={"RankTable": rank_table},
                     outputs={"Out": out})
    return out


def lod_tensor_to_array(x, table):
    """An array with one entry per time step: entry t holds the t-th element of every
    sequence longer than t, in the table's order."""
    x = _check(x, "x", "lod_tensor_to_array", (Variable, list))
    table = _check(table, "table", "lod_tensor_to_array", (Variable, list))
    helper = LayerHelper("lod_tensor_to_array")
    array = helper.create_variable(name=helper.name, type=VarType.LOD_TENSOR_ARRAY,
                                   dtype=x.dtype)
    helper.append_op("lod_tensor_to_array", inputs={"X": x, "RankTable": table},
                     outputs={"Out": array})
    array.lod_level = max(x.lod_level - 1, 0)
    return array


def array_to_lod_tensor(x, table):
    """The inverse of lod_tensor_to_array: the sequences back in their original order."""
    x = _check(x, "x", "array_to_lod_tensor", (Variable, list))
    table = _check(table, "table", "array_to_lod_tensor", (Variable, list))
    helper = LayerHelper("array_to_lod_tensor")
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op("array_to_lod_tensor", inputs={"X": x, "RankTable": table},
                     outputs={"Out": out})
    out.lod_level = x.lod_level + 1
    return out


def shrink_memory(x, i, table):
    """The rows of x that belong to the sequences still running at step i (x's rows are in
    the table's order)."""
    helper = LayerHelper("shrink_memory")
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op("shrink_rnn_memory", inputs={"X": x, "I": i, "RankTable": table},
                     outputs={"Out": out})
    return out


def reorder_lod_tensor_by_rank(x, rank_table):
    """x's sequences (its rows, without LoD) in the order of the rank table."""
    _check(x, "x", "reorder_lod_tensor_by_rank")
    _check(rank_table, "rank_table", "reorder_lod_tensor_by_rank")
    if rank_table.type != VarType.LOD_RANK_TABLE:
        raise TypeError("The type of rank_table should be LOD_RANK_TABLE.")
    helper = LayerHelper("reorder_lod_tensor_by_rank")
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op("reorder_lod_tensor_by_rank", inputs={"X": x, "RankTable": rank_table},
                     outputs={"Out": out})
    return out


def split_lod_tensor(input, mask, level=0):
    """(sequences of `level` whose mask is true, the others), each keeping its order."""
    _check(input, "input", "split_lod_tensor", (Variable, list, tuple, type(None)))
    _check(mask, "mask", "split_lod_tensor", (Variable, list))
    if isinstance(level, bool) or not isinstance(level, int):
        raise TypeError(f"The type of 'level' in split_lod_tensor must be int, but received "
                        f"{type(level).__name__}.")
    helper = LayerHelper("split_lod_tensor")
    out_true = helper.create_variable_for_type_inference(input.dtype)
    out_false = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op("split_lod_tensor", inputs={"X": input, "Mask": mask},
                     outputs={"OutTrue": out_true, "OutFalse": out_false},
                     attrs={"level": level})
    return out_true, out_false


def merge_lod_tensor(in_true, in_false, x, mask, level=0):
    """The inverse of split_lod_tensor: x's structure filled from in_true and in_false."""
    _check(x, "x", "merge_lod_tensor", (Variable, list, tuple, type(None)))
    _check(mask, "mask", "merge_lod_tensor", (Variable, list))
    _check(in_true, "in_true", "merge_lod_tensor", (Variable, list, tuple, type(None)))
    _check(in_false, "in_false", "merge_lod_tensor", (Variable, list, tuple, type(None)))
    helper = LayerHelper("merge_lod_tensor")
    out = helper.create_variable_for_type_inference(in_true.dtype)
    helper.append_op("merge_lod_tensor",
                     inputs={"X": x, "Mask": mask, "InTrue": in_true, "InFalse": in_false},
                     outputs={"Out": out}, attrs={"level": level})
    return out


def lod_reset(x, y=None, target_lod=None):
    """x with the LoD of y (or y's values as offsets when y has none), or target_lod."""
    _check(x, "x", "lod_reset")
    helper = LayerHelper("lod_reset")
    out = helper.create_variable_for_type_inference(x.dtype)
    if y is not None:
        helper.append_op("lod_reset", inputs={"X": x, "Y": y}, outputs={"Out": out})
    elif target_lod is not None:
        helper.append_op("lod_reset", inputs={"X": x}, outputs={"Out": out},
                         attrs={"target_lod": list(target_lod)})
    else:
        raise ValueError("lod_reset: give y or target_lod")
    return out


def lod_append(x, level):
    """x with one more LoD level (a list of offsets, or a variable holding them)."""
    _check(x, "x", "lod_append")
    helper = LayerHelper("lod_append")
    out = helper.create_variable_for_type_inference(x.dtype)
    inputs = {"X": x}
    attrs = {"append": True}
    if isinstance(level, Variable):
        inputs["Y"] = level
    else:
        attrs["target_lod"] = list(level)
    helper.append_op("lod_reset", inputs=inputs, outputs={"Out": out}, attrs=attrs)
    return out
