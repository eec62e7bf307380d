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
GRAD_VAR_SUFFIX = "@GRAD"
TEMP_VAR_NAME = "@TEMP@"
ZERO_VAR_SUFFIX = "@ZERO"
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


# What an executor's cached plan reads of a variable: changing one changes the program (its
# version), as set_shape or set_persistable on the variable's desc does in Paddle
_UNSET = object()
_PLANNED_FIELDS = frozenset(("shape", "dtype", "type", "lod_level", "persistable",
                             "stop_gradient", "need_check_feed"))


class Variable:
    """A named tensor slot in a Block: shape (-1 for unknown/batch dims), dtype, and flags."""

    def __setattr__(self, name, value):
        if name in _PLANNED_FIELDS:
            fields = self.__dict__
            old = fields.get(name, _UNSET)
            if type(old) is type(value) and old == value:
                return
            object.__setattr__(self, name, value)
            block = fields.get("block")
            if block is not None:
                block.program._bump()
            return
        object.__setattr__(self, name, value)

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
    def desc(self):
        from .desc import VarDesc
        return VarDesc(self)

    @property
    def grad_name(self):
        return self.name + GRAD_SUFFIX

    def _set_info(self, key, value):
        """Attach Python-side information to the variable (Paddle's _set_info)."""
        self.__dict__.setdefault("_info", {})[key] = value

    def _get_info(self, key):
        return self.__dict__.get("_info", {}).get(key)

    @property
    def ndim(self):
        return len(self.shape) if self.shape is not None else None

    def _copy_to(self, block):
        """A copy of this variable living in another block (used by Program.clone)."""
        twin = copy.copy(self)
        twin.block = block
        return twin

    def to_string(self, throw_on_error=False, with_details=False):
        _check_debug_flags(throw_on_error, with_details)
        if throw_on_error and self.dtype is None and self.type in _TENSOR_KINDS:
            # Fluid 1.8: the VarDesc proto lacks its required data_type
            raise ValueError(f"variable {self.name!r} is not initialized: it has no dtype")
        kind = "Parameter" if isinstance(self, Parameter) else "Variable"
        dtype = self.dtype.name if self.dtype is not None else "?"
        text = f"{kind}({self.name}: shape={list(self.shape or ())}, dtype={dtype}"
        if self.type != VarType.LOD_TENSOR:
            text += f", type={self.type}"
        if self.persistable:
            text += ", persistable"
        if self.stop_gradient:
            text += ", stop_gradient"
        text += ")"
        if with_details:
            details = ["stop_gradient", "error_clip"]
            if isinstance(self, Parameter):
                details += ["trainable", "optimize_attr", "regularizer", "gradient_clip_attr",
                            "do_model_average"]
            text += "".join(f"\n  {k}: {getattr(self, k, None)}" for k in details)
        return text

    __repr__ = __str__ = lambda self: self.to_string()

    def __hash__(self):
        return id(self)

    def __bool__(self):
        return True

    def __getitem__(self, item):
        """Fluid 1.8 static-graph indexing (ints, slices, Variables); see layers/indexing.py."""
        from .layers.indexing import getitem
        return getitem(self, item)

    def __iter__(self):  # keep Variables non-iterable although they can be indexed
        raise TypeError(f"Variable {self.name!r} is not iterable; index it instead")


_TENSOR_KINDS = (VarType.LOD_TENSOR, VarType.SELECTED_ROWS, VarType.LOD_TENSOR_ARRAY)


def _check_debug_flags(throw_on_error, with_details):
    """to_string's flags must be bools, as in Fluid 1.8 (AssertionError otherwise, also
    under python -O)."""
    for name, value in (("throw_on_error", throw_on_error), ("with_details", with_details)):
        if not isinstance(value, bool):
            raise AssertionError(f"{name} must be a bool, got {type(value).__name__}")


class Parameter(Variable):
    """A persistable, trainable Variable with its optimizer-facing attributes."""

    def __init__(self, block, shape, dtype, name=None, trainable=True, optimize_attr=None,
                 regularizer=None, gradient_clip_attr=None, do_model_average=None,
                 initializer=None, **kwargs):
        if shape is None or len(shape) == 0 or any(d is None or d < 0 for d in shape):
            raise ShapeError(f"parameter {name!r} needs a fully known shape, got {shape}"
                             f"{where(kwargs.get('callsite') or user_callsite())}")
        if dtype is None:
            raise ValueError(f"parameter {name!r} needs a dtype")
        kwargs.setdefault("persistable", True)
        kwargs.setdefault("stop_gradient", not trainable)
        super().__init__(block, name=name, shape=shape, dtype=dtype, **kwargs)
        self.trainable = trainable
        self.optimize_attr = optimize_attr or {"learning_rate": 1.0}
        self.regularizer = regularizer
        self.gradient_clip_attr = gradient_clip_attr
        self.do_model_average = do_model_average
        self.initializer = initializer


from .block import Block, Operator  # noqa: E402  (block.py imports Variable from here)


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
        self._appending_grad_times = 0  # fluid.gradients calls (names of later grads differ)
        self._feed_targets, self._fetch_targets = [], []  # an inference model's (io.py)

    def _bump(self):
        self._version += 1

    @property
    def random_seed(self):
        return self._seed

    @random_seed.setter
    def random_seed(self, seed):
        if not isinstance(seed, int):
            raise ValueError(f"Program.random_seed must be an int, got {type(seed).__name__}")
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

    @property
    def desc(self):
        from .desc import ProgramDesc
        return ProgramDesc(self)

    @staticmethod
    def parse_from_string(binary_str):
        """A Program from the bytes Program.desc.serialize_to_string() gave."""
        from .program_io import parse
        return parse(binary_str)

    def _version(self):
        return 0

    def _sync_with_cpp(self):
        pass

    def _copy_dist_param_info_from(self, other):
        if not isinstance(other, Program):
            raise TypeError(f"_copy_dist_param_info_from should be invoked with Program, got "
                            f"{type(other).__name__}")

    def _copy_param_info_from(self, other):
        """Make this program's variables that are parameters of `other` parameters again,
        with other's attributes (a cloned or parsed program's)."""
        if not isinstance(other, Program):
            raise TypeError(f"_copy_param_info_from should be invoked with Program, got "
                            f"{type(other).__name__}")
        block = self.global_block()
        for param in other.global_block().all_parameters():
            var = block.vars.get(param.name)
            if var is None or isinstance(var, Parameter):
                continue
            twin = Parameter(block, shape=param.shape, dtype=param.dtype, name=param.name,
                             trainable=param.trainable, optimize_attr=param.optimize_attr,
                             regularizer=param.regularizer,
                             gradient_clip_attr=param.gradient_clip_attr,
                             do_model_average=param.do_model_average, callsite=var.callsite)
            block.vars[param.name] = twin

    def _create_block(self, parent_idx=None):
        """A new block, child of `parent_idx` (default: the current block), made current."""
        parent = self.current_block_idx if parent_idx is None else parent_idx
        block = Block(self, len(self.blocks), parent)
        self.blocks.append(block)
        self.current_block_idx = block.idx
        self._bump()
        return block

    def _rollback(self):
        """Make the current block's parent current again (a sub-block is finished)."""
        self.current_block_idx = self.current_block().parent_idx

    def clone(self, for_test=False):
        """A copy sharing nothing mutable. for_test=True switches ops with `is_test` (dropout,
        batch_norm) to inference behaviour; like Paddle it keeps backward/optimizer ops, so clone
        before calling minimize()."""
        twin = Program()
        twin._seed = self._seed
        twin._is_test = for_test
        twin._appending_grad_times = self._appending_grad_times
        twin._feed_targets = list(self._feed_targets)
        twin._fetch_targets = list(self._fetch_targets)
        twin.blocks = [Block(twin, b.idx, b.parent_idx) for b in self.blocks]
        for block, new_block in zip(self.blocks, twin.blocks):
            new_block.forward_block_idx = block.forward_block_idx
            new_block.vars = {name: var._copy_to(new_block) for name, var in block.vars.items()}
            for op in block.ops:
                attrs = {k: twin.blocks[v.idx] if isinstance(v, Block) else v
                         for k, v in op.attrs.items()}
                if for_test and "is_test" in attrs:
                    attrs["is_test"] = True
                new_block.ops.append(Operator(new_block, op.type, _copy_slots(op.inputs),
                                              _copy_slots(op.outputs), attrs, op.callsite))
        return twin

    def _prune(self, targets):
        """A copy keeping only the ops the targets (Variables, names or Operators) need."""
        from .prune import prune
        return prune(self, [], targets)

    def _prune_with_input(self, feeded_var_names, targets):
        """Like _prune, also cutting what computes the fed variables (they are given)."""
        from .prune import prune
        return prune(self, feeded_var_names, targets)

    def _inference_optimize(self, prune_read_op=True):
        """A copy for inference: is_test set on every op that has it, reader ops dropped."""
        from .prune import inference_optimize
        return inference_optimize(self, prune_read_op)

    def to_string(self, throw_on_error=False, with_details=False):
        _check_debug_flags(throw_on_error, with_details)
        return "\n".join(b.to_string(throw_on_error, with_details) for b in self.blocks)

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


def _get_var(name, program=None):
    """Fluid 1.8's helper: the variable `name` of `program`'s global block (default: the
    default main program)."""
    return (program or default_main_program()).global_block().var(name)


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


class NameScope:
    """A node of the name-scope tree: a prefix used twice under one parent gets _1, _2 ..."""

    def __init__(self, name="", parent=None):
        self.name, self.parent, self.children = name, parent, {}

    def child(self, prefix):
        used = self.children.setdefault(prefix, [])
        node = NameScope(prefix if not used else f"{prefix}_{len(used)}", self)
        used.append(node)
        return node

    def path(self):
        names, node = [], self
        while node.parent is not None:
            names.append(node.name)
            node = node.parent
        return "/" + "".join(n + "/" for n in reversed(names))


_name_scope = NameScope()


@contextlib.contextmanager
def name_scope(prefix=None):
    """Ops built inside get the attr op_namescope = '/outer/inner/' (Paddle's graph labels)."""
    global _name_scope
    if not prefix:
        raise ValueError("name_scope: the prefix must be a non-empty string")
    _name_scope = _name_scope.child(prefix)
    try:
        yield
    finally:
        _name_scope = _name_scope.parent


def _full_name_scope():
    return _name_scope.path()


def in_dygraph_mode():
    return False
