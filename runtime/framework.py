"""The static graph: Program, Block, Variable, Parameter, Operator, and the default programs."""

import contextlib
import copy
import itertools
import os
import sys

from . import unique_name
from .dtypes import VarType, convert_dtype
from .errors import ShapeError, where

GRAD_SUFFIX = "@GRAD"
EMPTY_VAR_NAME = "@EMPTY@"
_RUNTIME_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_program_ids = itertools.count()


def grad_var_name(name):
    return name + GRAD_SUFFIX


class OpRole:
    """The role an op plays in a training program (Paddle's values, usable as bit flags)."""

    Forward = 0
    Backward = 1
    Optimize = 2
    RPC = 4
    Dist = 8
    LRSched = 16
    Loss = 256

    @staticmethod
    def name(role):
        base = role & ~OpRole.Loss
        label = {0: "forward", 1: "backward", 2: "optimize", 16: "lr_sched"}.get(base, "other")
        return label + ("+loss" if role & OpRole.Loss else "")


def user_callsite():
    """(filename, lineno) of the innermost frame outside the runtime package: where the user's
    code called into the runtime. Costs a short frame walk, paid once when a graph is built."""
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not (filename.startswith(_RUNTIME_DIR) or filename.startswith("<frozen")
                or filename.endswith("contextlib.py")):
            return (filename, frame.f_lineno)
        frame = frame.f_back
    return None


class Variable:
    """A named tensor slot in a Block: shape (-1 for unknown/batch dims), dtype, and flags."""

    def __init__(self, block, name=None, shape=None, dtype=None, type=VarType.LOD_TENSOR,
                 lod_level=0, persistable=False, stop_gradient=False, is_data=False,
                 need_check_feed=False, error_clip=None, callsite=None, **_ignored):
        self.block = block
        self.name = name if name is not None else unique_name.generate("_generated_var")
        self.shape = _normalize_shape(shape)
        self.dtype = convert_dtype(dtype) if dtype is not None else None
        self.type = type
        self.lod_level = lod_level
        self.persistable = bool(persistable)
        self.stop_gradient = bool(stop_gradient)
        self.is_data = is_data
        self.need_check_feed = need_check_feed
        self.error_clip = error_clip
        self.callsite = callsite or user_callsite()

    @property
    def program(self):
        return self.block.program

    @property
    def ndim(self):
        return len(self.shape) if self.shape is not None else None

    def _copy_to(self, block):
        """A copy of this variable living in another block (used by Program.clone)."""
        twin = copy.copy(self)
        twin.block = block
        return twin

    def to_string(self, throw_on_error=False, with_details=False):
        kind = "Parameter" if isinstance(self, Parameter) else "Variable"
        dtype = self.dtype.name if self.dtype is not None else "?"
        text = f"{kind}({self.name}: shape={list(self.shape or ())}, dtype={dtype}"
        if self.type != VarType.LOD_TENSOR:
            text += f", type={self.type}"
        if self.persistable:
            text += ", persistable"
        if self.stop_gradient:
            text += ", stop_gradient"
        return text + ")"

    __repr__ = __str__ = lambda self: self.to_string()

    def __hash__(self):
        return id(self)

    def __bool__(self):
        return True


class Parameter(Variable):
    """A persistable, trainable Variable with its optimizer-facing attributes."""

    def __init__(self, block, shape, dtype, name=None, trainable=True, optimize_attr=None,
                 regularizer=None, gradient_clip_attr=None, do_model_average=None,
                 initializer=None, **kwargs):
        if shape is None or any(d is None or d < 0 for d in shape):
            raise ShapeError(f"parameter {name!r} needs a fully known shape, got {shape}"
                             f"{where(kwargs.get('callsite') or user_callsite())}")
        kwargs.setdefault("persistable", True)
        kwargs.setdefault("stop_gradient", not trainable)
        super().__init__(block, name=name, shape=shape, dtype=dtype, **kwargs)
        self.trainable = trainable
        self.optimize_attr = optimize_attr or {"learning_rate": 1.0}
        self.regularizer = regularizer
        self.gradient_clip_attr = gradient_clip_attr
        self.do_model_average = do_model_average
        self.initializer = initializer


class Operator:
    """One op in a block: type, named input/output slots holding variable names, attributes."""

    def __init__(self, block, type, inputs, outputs, attrs, callsite=None):
        self.block = block
        self.type = type
        self.inputs = inputs  # slot -> [names]
        self.outputs = outputs
        self.attrs = attrs
        self.callsite = callsite or user_callsite()

    def input(self, slot):
        return list(self.inputs.get(slot, ()))

    def output(self, slot):
        return list(self.outputs.get(slot, ()))

    @property
    def input_names(self):
        return list(self.inputs)

    @property
    def output_names(self):
        return list(self.outputs)

    @property
    def input_arg_names(self):
        return [n for names in self.inputs.values() for n in names if n != EMPTY_VAR_NAME]

    @property
    def output_arg_names(self):
        return [n for names in self.outputs.values() for n in names if n != EMPTY_VAR_NAME]

    def attr(self, name):
        return self.attrs[name]

    def has_attr(self, name):
        return name in self.attrs

    def _set_attr(self, name, value):
        self.attrs[name] = value
        self.block.program._bump()

    def all_attrs(self):
        return dict(self.attrs)

    @property
    def role(self):
        return self.attrs.get("op_role", OpRole.Forward)

    @property
    def idx(self):
        return self.block.ops.index(self)

    def where(self):
        return where(self.callsite)

    def to_string(self, throw_on_error=False):
        def slots(d):
            return ", ".join(f"{k}={v}" for k, v in d.items())
        attrs = ", ".join(f"{k}={v!r}" for k, v in sorted(self.attrs.items()) if k != "op_role")
        return f"{{{slots(self.outputs)}}} = {self.type}(inputs={{{slots(self.inputs)}}}, {attrs})"

    __repr__ = __str__ = lambda self: self.to_string()


class Block:
    """An ordered list of ops plus the variables they use. Programs here have one block."""

    def __init__(self, program, idx, parent_idx=-1):
        self.program = program
        self.idx = idx
        self.parent_idx = parent_idx
        self.vars = {}
        self.ops = []

    # --- variables -------------------------------------------------------------------------
    def var(self, name):
        if not isinstance(name, str):
            raise TypeError(f"var() expects a variable name, got {type(name).__name__}")
        try:
            return self.vars[name]
        except KeyError:
            raise ValueError(f"variable {name!r} is not in block {self.idx}"
                             f"{_suggest(name, self.vars)}") from None

    def has_var(self, name):
        return name in self.vars

    def _find_var_recursive(self, name):
        return self.vars.get(name)

    def create_var(self, *args, **kwargs):
        name = kwargs.get("name")
        if name is not None and name in self.vars:
            return self.vars[name]
        var = Variable(self, *args, **kwargs)
        self.vars[var.name] = var
        self.program._bump()
        return var

    def create_parameter(self, *args, **kwargs):
        param = Parameter(self, *args, **kwargs)
        self.vars[param.name] = param
        self.program._bump()
        return param

    def all_parameters(self):
        return [v for v in self.vars.values() if isinstance(v, Parameter)]

    iter_parameters = all_parameters

    def _rename_var(self, old, new):
        var = self.vars.pop(old)
        var.name = new
        self.vars[new] = var
        for op in self.ops:
            for slots in (op.inputs, op.outputs):
                for key, names in slots.items():
                    slots[key] = [new if n == old else n for n in names]
        self.program._bump()
        return var

    def _remove_var(self, name):
        self.vars.pop(name, None)
        self.program._bump()

    # --- ops -------------------------------------------------------------------------------
    def append_op(self, type, inputs=None, outputs=None, attrs=None, stop_gradient=False):
        op = self._make_op(type, inputs, outputs, attrs)
        self.ops.append(op)
        self.program._bump()
        return op

    def _insert_op(self, index, type, inputs=None, outputs=None, attrs=None):
        op = self._make_op(type, inputs, outputs, attrs)
        self.ops.insert(index, op)
        self.program._bump()
        return op

    def _prepend_op(self, *args, **kwargs):
        return self._insert_op(0, *args, **kwargs)

    def _remove_op(self, index):
        del self.ops[index]
        self.program._bump()

    def _make_op(self, type, inputs, outputs, attrs):
        from .ops.registry import get_op_def  # the registry imports framework

        opdef = get_op_def(type)
        ins = {slot: self._names(value) for slot, value in (inputs or {}).items()}
        outs = {slot: self._names(value) for slot, value in (outputs or {}).items()}
        full_attrs = dict(opdef.attrs)
        full_attrs.update(attrs or {})
        full_attrs.setdefault("op_role", self.program._current_role)
        op = Operator(self, type, ins, outs, full_attrs)
        opdef.check_slots(op)
        opdef.infer_shapes(op)
        return op

    def _names(self, value):
        if value is None:
            return []
        items = value if isinstance(value, (list, tuple)) else [value]
        names = []
        for item in items:
            if isinstance(item, Variable):
                if item.name not in self.vars:  # a variable of another program with this name
                    self.vars[item.name] = item._copy_to(self)
                names.append(item.name)
            elif isinstance(item, str):
                names.append(item)
            else:
                raise TypeError(f"op inputs/outputs must be Variables or names, got {item!r}")
        return names

    def __repr__(self):
        return self.to_string()

    def to_string(self, throw_on_error=False, with_details=False):
        lines = [f"block {self.idx} {{"]
        lines += ["  " + v.to_string() for v in self.vars.values()]
        lines += ["  " + op.to_string() for op in self.ops]
        return "\n".join(lines + ["}"])


class Program:
    """A static graph: blocks of ops and variables, built by layers and run by an Executor."""

    def __init__(self):
        self.blocks = [Block(self, 0)]
        self.current_block_idx = 0
        self._seed = 0
        self._version = 0  # bumped on every change: executors cache compiled plans by it
        self._uid = next(_program_ids)
        self._current_role = OpRole.Forward
        self._is_test = False
        self._py_readers = []  # non-iterable DataLoaders: Executor.run pops their batches

    def _bump(self):
        self._version += 1

    @property
    def random_seed(self):
        return self._seed

    @random_seed.setter
    def random_seed(self, seed):
        if not isinstance(seed, int):
            raise TypeError(f"Program.random_seed must be an int, got {type(seed).__name__}")
        self._seed = seed
        self._bump()

    @property
    def num_blocks(self):
        return len(self.blocks)

    def global_block(self):
        return self.blocks[0]

    def current_block(self):
        return self.blocks[self.current_block_idx]

    def block(self, index):
        return self.blocks[index]

    def list_vars(self):
        for block in self.blocks:
            yield from block.vars.values()

    def all_parameters(self):
        return [p for block in self.blocks for p in block.all_parameters()]

    @contextlib.contextmanager
    def _role_guard(self, role):
        old, self._current_role = self._current_role, role
        try:
            yield
        finally:
            self._current_role = old

    def clone(self, for_test=False):
        """A copy sharing nothing mutable. for_test=True switches ops with `is_test` (dropout,
        batch_norm) to inference behaviour; like Paddle it keeps backward/optimizer ops, so clone
        before calling minimize()."""
        twin = Program()
        twin._seed = self._seed
        twin._is_test = for_test
        twin.blocks = []
        for block in self.blocks:
            new_block = Block(twin, block.idx, block.parent_idx)
            new_block.vars = {name: var._copy_to(new_block) for name, var in block.vars.items()}
            for op in block.ops:
                attrs = dict(op.attrs)
                if for_test and "is_test" in attrs:
                    attrs["is_test"] = True
                new_block.ops.append(Operator(new_block, op.type, _copy_slots(op.inputs),
                                              _copy_slots(op.outputs), attrs, op.callsite))
            twin.blocks.append(new_block)
        return twin

    def to_string(self, throw_on_error=False, with_details=False):
        return "\n".join(b.to_string() for b in self.blocks)

    __str__ = to_string

    def __repr__(self):
        block = self.global_block()
        return f"<Program #{self._uid}: {len(block.ops)} ops, {len(block.vars)} vars>"


def _copy_slots(slots):
    return {k: list(v) for k, v in slots.items()}


def _normalize_shape(shape):
    if shape is None:
        return None
    if isinstance(shape, int):
        shape = [shape]
    return tuple(-1 if d is None else int(d) for d in shape)


def _suggest(name, names):
    import difflib

    close = difflib.get_close_matches(name, list(names), n=3)
    return f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""


# --- default programs ----------------------------------------------------------------------
_main_program = Program()
_startup_program = Program()


def default_main_program():
    return _main_program


def default_startup_program():
    return _startup_program


def switch_main_program(program):
    global _main_program
    old, _main_program = _main_program, program
    return old


def switch_startup_program(program):
    global _startup_program
    old, _startup_program = _startup_program, program
    return old


@contextlib.contextmanager
def program_guard(main_program, startup_program=None):
    """Layers built inside the block go to main_program (and their initializers to
    startup_program)."""
    for what, prog in (("main_program", main_program), ("startup_program", startup_program)):
        if prog is not None and not isinstance(prog, Program):
            raise TypeError(f"program_guard: {what} must be a fluid.Program, "
                            f"got {type(prog).__name__}")
    old_main = switch_main_program(main_program)
    old_startup = switch_startup_program(startup_program) if startup_program is not None else None
    try:
        yield
    finally:
        switch_main_program(old_main)
        if startup_program is not None:
            switch_startup_program(old_startup)


@contextlib.contextmanager
def name_scope(prefix=None):
    """Accepted for compatibility; Paddle uses it only to label graph visualisations."""
    yield


def in_dygraph_mode():
    return False
