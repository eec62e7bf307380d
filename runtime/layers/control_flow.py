"""Control flow (Fluid 1.8's fluid.layers.control_flow): cond, case, switch_case, while_loop,
While, Switch, ConditionalBlock, and the LoDTensorArray layers (create_array, array_write,
array_read, array_length).

A branch or loop body is built in a sub-block of the program; a `conditional_block` or `while`
op in the enclosing block runs it. Its inputs are the enclosing variables the sub-block reads,
its outputs those it writes. cond builds each branch's results in the enclosing block and
picks the taken branch's with select_input.
"""

from functools import partial

from ..dtypes import VarType
from ..framework import Variable
from ..layer_helper import LayerHelper
from .logic import (check_variable, equal, greater_equal, greater_than, increment,  # noqa: F401
                    less_equal, less_than, logical_and, logical_not, logical_or, logical_xor,
                    not_equal)
from .tensor import assign, cast, fill_constant
from .utils import assert_same_structure, map_structure


class BlockGuard:
    """`with`: ops appended inside go to a new sub-block of the current block."""

    def __init__(self, program):
        self.program = program

    def __enter__(self):
        self.program._create_block()

    def __exit__(self, exc_type, exc_val, exc_tb):
        self.program._rollback()
        return False


def _block_io(block, exclude=()):
    """(names read before being written in `block`, names written there)."""
    written, reads = set(exclude), []
    for op in block.ops:
        for name in op.input_arg_names:
            if name not in written and name not in reads:
                reads.append(name)
        written.update(op.output_arg_names)
    return reads, written - set(exclude)


# --- conditional blocks ---------------------------------------------------------------------------
class ConditionalBlock:
    """Runs the ops built in `with cb.block():` when `inputs` hold (is_scalar_condition: the
    one bool input is True; otherwise: every input is non-empty)."""

    def __init__(self, inputs, is_scalar_condition=False, name=None):
        for item in inputs:
            check_variable(item, "input", "ConditionalBlock")
        self.inputs = list(inputs)
        self.is_scalar_condition = is_scalar_condition
        self.helper = LayerHelper("conditional_block", name=name)

    def block(self):
        return ConditionalBlockGuard(self)

    def complete(self):
        program = self.helper.main_program
        inside = program.current_block()
        parent = program.block(inside.parent_idx)
        reads, written = _block_io(inside)
        params = [parent._var_recursive(n) for n in reads
                  if inside.vars.get(n) is None]
        outs = [parent._find_var_recursive(n) for n in sorted(written)]
        scope = parent.create_var(name=self.helper.name + ".scope", type=VarType.STEP_SCOPES)
        parent.append_op("conditional_block",
                         inputs={"Cond": self.inputs, "Input": params},
                         outputs={"Out": [v for v in outs if v is not None], "Scope": scope},
                         attrs={"sub_block": inside,
                                "is_scalar_condition": self.is_scalar_condition})


class ConditionalBlockGuard(BlockGuard):
    def __init__(self, block):
        super().__init__(block.helper.main_program)
        self.block = block

    def __exit__(self, exc_type, exc_val, exc_tb):
        if exc_type is None:
            self.block.complete()
        return super().__exit__(exc_type, exc_val, exc_tb)


def copy_var_to_parent_block(var, helper):
    """A variable of the enclosing block receiving `var` (assigned inside the sub-block)."""
    if var is None:
        return None
    program = helper.main_program
    parent = program.block(program.current_block().parent_idx)
    out = parent.create_var(name=helper.name + f".out_{len(parent.vars)}", dtype=var.dtype,
                            shape=var.shape, type=var.type, lod_level=var.lod_level)
    assign(var, out)
    return out


def select_input(inputs, mask):
    """inputs[mask] (mask: an int32 [1] variable)."""
    if not isinstance(inputs, (list, tuple)):
        raise TypeError("The type of 'inputs' in select_input must be list or tuple")
    for item in inputs:
        check_variable(item, "input", "select_input")
    check_variable(mask, "mask", "select_input", ("int32",))
    helper = LayerHelper("select_input")
    first = inputs[0]
    out = helper.create_variable(name=helper.name + ".out", dtype=first.dtype,
                                 shape=first.shape, type=first.type)
    helper.append_op("select_input", inputs={"X": list(inputs), "Mask": mask},
                     outputs={"Out": out})
    return out


def select_output(input, outputs, mask):
    """outputs[mask] = input (mask: an int32 [1] variable)."""
    check_variable(input, "input", "select_output")
    check_variable(mask, "mask", "select_output", ("int32",))
    if not isinstance(outputs, (list, tuple)):
        raise TypeError("The type of 'outputs' in select_output must be list or tuple")
    helper = LayerHelper("select_output")
    helper.append_op("select_output", inputs={"X": input, "Mask": mask},
                     outputs={"Out": list(outputs)})
    return outputs


def cond(pred, true_fn=None, false_fn=None, name=None):
    """true_fn() if pred (a bool [1] variable) else false_fn(); both build their ops in a
    sub-block and return the same structure of variables (or both None)."""
    check_variable(pred, "pred", "fluid.layers.cond", ("bool",))
    if name is not None and not isinstance(name, str):
        raise TypeError(f"The type of 'name' in fluid.layers.cond must be str, but received "
                        f"{type(name)}.")
    helper = LayerHelper("cond", name=name)
    copy = partial(copy_var_to_parent_block, helper=helper)
    true_out = _branch(true_fn, "true_fn", [pred], copy)
    false_out = _branch(false_fn, "false_fn", [logical_not(pred)], copy) \
        if false_fn is not None else None
    if true_out is None and false_out is None:
        return None
    if true_out is None or false_out is None:
        which = "None while false_fn returns non-None" if true_out is None else \
            "non-None while false_fn returns None"
        raise ValueError(f"Incompatible return values of true_fn and false_fn in cond: "
                         f"true_fn returns {which}")
    try:
        assert_same_structure(true_out, false_out, check_types=False)
    except ValueError as err:
        raise ValueError(f"Incompatible return values of true_fn and false_fn in cond: "
                         f"{err}") from None
    mask = cast(pred, "int32")
    return map_structure(lambda f, t: select_input([f, t], mask), false_out, true_out)


def _branch(fn, what, condition, copy):
    if fn is None:
        return None
    if not callable(fn):
        raise TypeError(f"The {what} in cond must be callable, but received "
                        f"{type(fn).__name__}")
    block = ConditionalBlock(condition, is_scalar_condition=True)
    with block.block():
        out = fn()
        return map_structure(copy, out) if out is not None else None


def _error_message(what, arg_name, op_name, right_value, error_value):
    return (f"{what} of '{arg_name}' in {op_name} must be {right_value}, but received: "
            f"{error_value}.")


def case(pred_fn_pairs, default=None, name=None):
    """The fn of the first (pred, fn) pair whose pred holds; else default() (or the last
    pair's fn when default is None)."""
    if not isinstance(pred_fn_pairs, (list, tuple)):
        raise TypeError(_error_message("The type", "pred_fn_pairs", "case", "list or tuple",
                                       type(pred_fn_pairs)))
    for pair in pred_fn_pairs:
        if not isinstance(pair, tuple):
            raise TypeError(_error_message("The elements' type", "pred_fn_pairs", "case",
                                           tuple, type(pair)))
        if len(pair) != 2:
            raise TypeError(_error_message("The tuple's size", "pred_fn_pairs", "case", "2",
                                           f"{len(pair)}-tuple"))
        pred, fn = pair
        if not isinstance(pred, Variable):
            raise TypeError(_error_message("The pred's type", "pred_fn_pairs", "case",
                                           "boolean Variable", type(pred)))
        if not callable(fn):
            raise TypeError(f"The fn for {pred.name} of pred_fn_pairs in Op(case) must be "
                            f"callable.")
    pairs = list(pred_fn_pairs)
    if default is None:
        default = pairs.pop()[1]
    elif not callable(default):
        raise TypeError("The default in Op(case) must be callable.")
    chain = default
    for pred, fn in reversed(pairs):
        chain = partial(cond, pred=pred, true_fn=fn, false_fn=chain)
    return chain()


def switch_case(branch_index, branch_fns, default=None, name=None):
    """The fn whose key equals branch_index (an integer [1] variable); else default() (or the
    fn with the largest key when default is None)."""
    check_variable(branch_index, "branch_index", "switch_case", ("uint8", "int32", "int64"))
    if branch_index.dtype.name != "int64":
        branch_index = cast(branch_index, "int64")
    if not isinstance(branch_fns, (list, tuple, dict)):
        raise TypeError(_error_message("The type", "branch_fns", "switch_case",
                                       "dict, list or tuple", type(branch_fns)))
    fns = list(branch_fns.items()) if isinstance(branch_fns, dict) else list(branch_fns)
    if all(callable(fn) for fn in fns):
        fns = list(enumerate(fns))
    keys = []
    for pair in fns:
        if not isinstance(pair, tuple):
            raise TypeError(_error_message("The elements' type", "branch_fns", "switch_case",
                                           tuple, type(branch_fns)))
        if len(pair) != 2:
            raise TypeError(_error_message("The tuple's size", "branch_fns", "switch_case",
                                           "2", f"{len(pair)}-tuple"))
        key, fn = pair
        if not isinstance(key, int):
            raise TypeError(_error_message("The key's type", "branch_fns", "switch_case", int,
                                           type(key)))
        if key in keys:
            raise ValueError(f"The key in 'branch_fns' must be unique, but '{key}' appears "
                             f"more than once.")
        keys.append(key)
        if not callable(fn):
            raise TypeError(_error_message(f"The type of function for key {key}", "branch_fns",
                                           "switch_case", "callable", type(fn)))
    fns = sorted(fns, key=lambda pair: pair[0])
    if default is None:
        default = fns.pop()[1]
    elif not callable(default):
        raise TypeError("The default in Op(case) must be callable.")
    chain = default
    for key, fn in fns:
        pred = equal(branch_index, fill_constant(shape=[1], dtype="int64", value=key))
        chain = partial(cond, pred=pred, true_fn=fn, false_fn=chain)
    return chain()


from .loops import (Switch, While, WhileGuard, array_length, array_read,  # noqa: E402
                    array_write, create_array, while_loop)
from .lod import (array_to_lod_tensor, lod_rank_table, lod_tensor_to_array,  # noqa: E402
                  max_sequence_len, merge_lod_tensor, reorder_lod_tensor_by_rank,
                  shrink_memory, split_lod_tensor)

__all__ = ["ConditionalBlock", "cond", "case", "switch_case", "select_input", "select_output",
           "While",
           "while_loop", "Switch", "create_array", "array_write", "array_read",
           "array_length", "less_than", "less_equal", "greater_than", "greater_equal",
           "equal", "not_equal", "logical_and", "logical_or", "logical_xor", "logical_not",
           "increment", "WhileGuard", "lod_rank_table", "max_sequence_len",
           "lod_tensor_to_array", "array_to_lod_tensor", "shrink_memory",
           "reorder_lod_tensor_by_rank", "split_lod_tensor", "merge_lod_tensor"]
