"""Loops and arrays of fluid.layers.control_flow: While, while_loop, Switch, and the
LoDTensorArray layers (create_array, array_write, array_read, array_length). Re-exported by
control_flow.py, where Fluid has them."""

from functools import reduce

from ..dtypes import VarType
from ..framework import Variable
from ..layer_helper import LayerHelper
from .control_flow import (BlockGuard, ConditionalBlock, ConditionalBlockGuard, _block_io,
                           check_variable)
from .logic import logical_and, logical_not
from .tensor import assign
from .utils import assert_same_structure, map_structure


# --- arrays ---------------------------------------------------------------------------------------
def create_array(dtype):
    helper = LayerHelper("array")
    return helper.create_variable(name=f"{helper.name}.out", type=VarType.LOD_TENSOR_ARRAY,
                                  dtype=dtype)


def array_write(x, i, array=None):
    """array[i] = x (i: an int64 [1] variable); a new array when none is given."""
    check_variable(i, "i", "array_write", ("int64",))
    check_variable(x, "x", "array_write")
    if array is not None and (not isinstance(array, Variable)
                              or array.type != VarType.LOD_TENSOR_ARRAY):
        raise TypeError("array should be tensor array vairable in array_write Op")
    helper = LayerHelper("array_write")
    if array is None:
        array = helper.create_variable(name=f"{helper.name}.out",
                                       type=VarType.LOD_TENSOR_ARRAY, dtype=x.dtype)
    helper.append_op("write_to_array", inputs={"X": x, "I": i}, outputs={"Out": array})
    return array


def array_read(array, i):
    check_variable(i, "i", "array_read", ("int64",))
    if not isinstance(array, Variable) or array.type != VarType.LOD_TENSOR_ARRAY:
        raise TypeError("array should be tensor array vairable")
    helper = LayerHelper("array_read")
    out = helper.create_variable_for_type_inference(array.dtype)
    helper.append_op("read_from_array", inputs={"X": array, "I": i}, outputs={"Out": out})
    return out


def array_length(array):
    if not isinstance(array, Variable) or array.type != VarType.LOD_TENSOR_ARRAY:
        raise TypeError("array should be tensor array vairable in array_length Op")
    helper = LayerHelper("array_length")
    out = helper.create_variable_for_type_inference("int64", stop_gradient=True)
    helper.append_op("lod_array_length", inputs={"X": array}, outputs={"Out": out})
    return out


# --- while ----------------------------------------------------------------------------------------
class While:
    """`with While(cond).block(): ...` repeats the block while cond (a bool [1] variable, which
    the block must update) holds."""

    BEFORE_WHILE_BLOCK, IN_WHILE_BLOCK, AFTER_WHILE_BLOCK = 0, 1, 2

    def __init__(self, cond, is_test=False, name=None):
        self.helper = LayerHelper("while", name=name)
        self.status = While.BEFORE_WHILE_BLOCK
        if not isinstance(cond, Variable):
            raise TypeError("condition should be a variable")
        if cond.dtype.name != "bool":
            raise TypeError("condition should be a boolean variable")
        if reduce(lambda a, b: a * b, cond.shape or (), 1) != 1:
            raise TypeError(f"condition expected shape as [], but given shape as "
                            f"{list(cond.shape)}.")
        self.cond_var = cond
        self.is_test = is_test

    def block(self):
        return WhileGuard(self)

    def _complete(self):
        program = self.helper.main_program
        body = program.current_block()
        parent = program.block(body.parent_idx)
        reads, written = _block_io(body, exclude=(self.cond_var.name,))
        inputs = [parent._var_recursive(n) for n in reads if body.vars.get(n) is None]
        outs = [parent._find_var_recursive(n) for n in sorted(written | {self.cond_var.name})]
        scopes = parent.create_var(name=self.helper.name + ".step_scopes",
                                   type=VarType.STEP_SCOPES)
        parent.append_op("while", inputs={"X": inputs, "Condition": self.cond_var},
                         outputs={"Out": [v for v in outs if v is not None],
                                  "StepScopes": scopes},
                         attrs={"sub_block": body, "is_test": self.is_test})


class WhileGuard(BlockGuard):
    def __init__(self, while_op):
        if not isinstance(while_op, While):
            raise TypeError("WhileGuard takes a while op")
        super().__init__(while_op.helper.main_program)
        self.while_op = while_op

    def __enter__(self):
        self.while_op.status = While.IN_WHILE_BLOCK
        return super().__enter__()

    def __exit__(self, exc_type, exc_val, exc_tb):
        if exc_type is not None:
            return super().__exit__(exc_type, exc_val, exc_tb)
        self.while_op.status = While.AFTER_WHILE_BLOCK
        self.while_op._complete()
        return super().__exit__(exc_type, exc_val, exc_tb)


def while_loop(cond, body, loop_vars, is_test=False, name=None):
    """loop_vars = body(*loop_vars) while cond(*loop_vars) holds; returns loop_vars (the
    variables now hold the final values)."""
    if not callable(cond):
        raise TypeError("cond in while_loop should be callable")
    if not callable(body):
        raise TypeError("body in while_loop should be callable")
    if not isinstance(loop_vars, (list, tuple)):
        raise TypeError("loop_vars in while_loop should be a list or tuple")
    if not loop_vars:
        raise ValueError("loop_vars in while_loop should not be empty")
    pre_cond = cond(*loop_vars)
    if not isinstance(pre_cond, Variable):
        raise TypeError("cond in while_loop should return a variable")
    if pre_cond.dtype.name != "bool":
        raise TypeError("cond in while_loop should return a boolean variable")
    if reduce(lambda a, b: a * b, pre_cond.shape, 1) != 1:
        raise TypeError(f"the shape of the variable returned by cond should be [],but given "
                        f"shape as {list(pre_cond.shape)}.")
    loop = While(pre_cond, is_test, name)
    with loop.block():
        outputs = body(*map_structure(lambda v: v, list(loop_vars)))
        if not isinstance(outputs, (list, tuple)):
            outputs = [outputs]
        try:
            assert_same_structure(list(outputs), list(loop_vars), check_types=False)
        except ValueError as err:
            raise ValueError(f"body in while_loop should return the same arity (length and "
                             f"structure) as loop_vars: {err}") from None
        now_cond = cond(*outputs)
        map_structure(assign, list(outputs), list(loop_vars))
        assign(now_cond, pre_cond)
    return loop_vars


# --- switch ---------------------------------------------------------------------------------------
class Switch:
    """with Switch() as s: with s.case(c1): ...; with s.case(c2): ...; with s.default(): ..."""

    def __init__(self, name=None):
        self.helper = LayerHelper("switch", name=name)
        self.inside_scope = False
        self.pre_not_conditions = []

    def case(self, condition):
        if not self.inside_scope:
            raise ValueError("case should be called inside with")
        check_variable(condition, "condition", "the member function case of "
                       "fluid.layers.Switch", ("bool",))
        if not self.pre_not_conditions:
            block = ConditionalBlock([condition], is_scalar_condition=True)
            self.pre_not_conditions.append(logical_not(x=condition))
        else:
            previous = self.pre_not_conditions[-1]
            self.pre_not_conditions.append(logical_and(x=previous, y=logical_not(x=condition)))
            block = ConditionalBlock([logical_and(x=previous, y=condition)],
                                     is_scalar_condition=True)
        return ConditionalBlockGuard(block)

    def default(self):
        if not self.pre_not_conditions:
            raise ValueError("there should be at least one condition")
        block = ConditionalBlock([self.pre_not_conditions[-1]], is_scalar_condition=True)
        return ConditionalBlockGuard(block)

    def __enter__(self):
        self.inside_scope = True
        return self

    def __exit__(self, exc_type, exc_val, exc_tb):
        self.inside_scope = False
        return exc_type is None
