"""fluid.layers.IfElse (Fluid 1.8): a row-wise if/else over a batch.

    ie = IfElse(cond)                  # cond: bool [batch, 1], one flag per row (LoD level 0
    with ie.true_block():              # sequence, when the inputs have a LoD)
        x_t = ie.input(x)              # the rows of x whose flag is true
        ie.output(f(x_t))
    with ie.false_block():
        x_f = ie.input(x)              # the other rows
        ie.output(g(x_f))
    out, = ie()                        # f's rows and g's rows put back in x's row order

ie.input(x) appends a split_lod_tensor op to the enclosing block (once per x, shared by both
branches); each branch is a conditional_block (it runs when cond is non-empty) whose outputs
are assigned to variables of the enclosing block; ie() merges each pair of branch outputs with
merge_lod_tensor. Gradients flow through all three ops.
"""

from .. import unique_name
from ..framework import Variable
from ..layer_helper import LayerHelper
from .control_flow import ConditionalBlock
from .lod import merge_lod_tensor
from .tensor import assign

__all__ = ["IfElse"]


def _check_type(value, what, types, api):
    if not isinstance(value, types):
        raise TypeError(f"The type of '{what}' in {api} must be {types}, but received "
                        f"{type(value)}. ")


class IfElseBlockGuard:
    """`with ie.true_block():` / `with ie.false_block():`: builds one branch's sub-block."""

    def __init__(self, is_true, ifelse):
        if not isinstance(ifelse, IfElse):
            raise TypeError("ifelse must be an instance of IfElse class")
        if ifelse.status != IfElse.OUT_IF_ELSE_BLOCKS:
            raise ValueError("You cannot invoke IfElse.block() inside a block")
        self.is_true = is_true
        self.ie = ifelse
        block = ifelse.conditional_true_block if is_true else ifelse.conditional_false_block
        self.cond_block = block.block()

    def __enter__(self):
        self.ie.status = (IfElse.IN_IF_ELSE_TRUE_BLOCKS if self.is_true
                          else IfElse.IN_IF_ELSE_FALSE_BLOCKS)
        self.cond_block.__enter__()

    def __exit__(self, exc_type, exc_val, exc_tb):
        self.cond_block.__exit__(exc_type, exc_val, exc_tb)
        if exc_type is not None:
            return False
        if not self.ie.output_table[1 if self.is_true else 0]:
            raise ValueError("Must set output inside block")
        self.ie.status = IfElse.OUT_IF_ELSE_BLOCKS
        return False


class IfElse:
    """Row-wise if/else (see the module docstring). Holds the condition, the split inputs by
    id of the original variable (input_table: id -> (true rows, false rows)) and each
    branch's outputs in the enclosing block (output_table: (false outputs, true outputs))."""

    OUT_IF_ELSE_BLOCKS = 0
    IN_IF_ELSE_TRUE_BLOCKS = 1
    IN_IF_ELSE_FALSE_BLOCKS = 2

    def __init__(self, cond, name=None):
        _check_type(cond, "cond", Variable, "fluid.layers.IfElse")
        _check_type(name, "name", (str, type(None)), "fluid.layers.IfElse")
        self.helper = LayerHelper("ifelse", name=name)
        self.cond = cond
        self.input_table = {}
        self.status = IfElse.OUT_IF_ELSE_BLOCKS
        self.conditional_true_block = ConditionalBlock(inputs=[self.cond])
        self.conditional_false_block = ConditionalBlock(inputs=[self.cond])
        self.output_table = ([], [])

    def _parent_block(self):
        program = self.helper.main_program
        return program.block(program.current_block().parent_idx)

    def _new_parent_var(self, key, dtype):
        return self._parent_block().create_var(
            name=unique_name.generate_with_ignorable_key(key), dtype=dtype)

    def input(self, x):
        """The rows of x belonging to the branch being built."""
        if self.status == IfElse.OUT_IF_ELSE_BLOCKS:
            raise ValueError("input must in true/false blocks")
        if id(x) not in self.input_table:
            out_true = self._new_parent_var("ifelse_input" + self.helper.name, x.dtype)
            out_false = self._new_parent_var("ifelse_input" + self.helper.name, x.dtype)
            self._parent_block().append_op(
                "split_lod_tensor", inputs={"X": x, "Mask": self.cond},
                outputs={"OutTrue": out_true, "OutFalse": out_false}, attrs={"level": 0})
            self.input_table[id(x)] = (out_true, out_false)
        out_true, out_false = self.input_table[id(x)]
        return out_true if self.status == IfElse.IN_IF_ELSE_TRUE_BLOCKS else out_false

    def true_block(self):
        return IfElseBlockGuard(True, self)

    def false_block(self):
        return IfElseBlockGuard(False, self)

    def output(self, *outs):
        """Record the branch's results: each is copied to a variable of the enclosing
        block."""
        if self.status == self.OUT_IF_ELSE_BLOCKS:
            raise ValueError("output can only be invoked in the sub-block")
        table = self.output_table[1 if self.status == self.IN_IF_ELSE_TRUE_BLOCKS else 0]
        for out in outs:
            _check_type(out, "each output", Variable, "fluid.layers.IfElse.output")
            outside = self._new_parent_var(self.helper.name + "_output", out.dtype)
            table.append(outside)
            assign(input=out, output=outside)

    def __call__(self):
        """The merged outputs (a list); a single branch's outputs when only one was built."""
        if self.status != self.OUT_IF_ELSE_BLOCKS:
            raise ValueError("IfElse::__call__ must be out of sub-block")
        false_outs, true_outs = self.output_table
        if not false_outs and not true_outs:
            raise ValueError("Must invoke true_block/false_block before __call__")
        if false_outs and true_outs and len(false_outs) != len(true_outs):
            raise ValueError("The output side must be same")
        if not false_outs or not true_outs:
            return false_outs or true_outs
        return [merge_lod_tensor(in_true=t, in_false=f, mask=self.cond, x=self.cond, level=0)
                for f, t in zip(false_outs, true_outs)]
