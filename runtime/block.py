"""Operators and Blocks of a Program (re-exported by runtime.framework).

Block 0 is the global block; control-flow layers (cond, while_loop, ...) build sub-blocks whose
`parent_idx` points at the block they were created in. A sub-block sees its ancestors'
variables (`_var_recursive`); a variable created in it is local to it. Ops holding a sub-block
keep the Block object in their `sub_block` attr (Paddle's BLOCK attr).
"""

from .dtypes import VarType
from .errors import where
from . import framework
from .framework import EMPTY_VAR_NAME, Parameter, Variable, user_callsite


class Operator:
    """One op in a block: type, named input/output slots holding variable names, attributes."""

    def __init__(self, block, type, inputs, outputs, attrs, callsite=None):
        self.block = block
        self.type = type
        self.inputs = inputs  # slot -> [names]
        self.outputs = outputs
        self.attrs = attrs
        self.callsite = callsite or user_callsite()

    @property
    def desc(self):
        from .desc import OpDesc
        return OpDesc(self)

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

    @property
    def attr_names(self):
        return [k for k in self.attrs if not k.startswith("_")]

    def attr(self, name):
        return self.attrs[name]

    def has_attr(self, name):
        return name in self.attrs

    def _block_attr(self, name):
        return self.attrs[name]

    def _block_attr_id(self, name):
        return self.attrs[name].idx

    def _set_attr(self, name, value):
        self.attrs[name] = value
        self.block.program._bump()

    def _rename_input(self, old, new):
        _rename_in(self.inputs, old, new)
        self.block.program._bump()

    def _rename_output(self, old, new):
        _rename_in(self.outputs, old, new)
        self.block.program._bump()

    def all_attrs(self):
        return dict(self.attrs)

    @property
    def role(self):
        return self.attrs.get("op_role", 0)

    @property
    def idx(self):
        return self.block.ops.index(self)

    def where(self):
        return where(self.callsite)

    def to_string(self, throw_on_error=False):
        def slots(d):
            return ", ".join(f"{k}={v}" for k, v in d.items())
        attrs = ", ".join(f"{k}={_attr_text(v)}" for k, v in sorted(self.attrs.items())
                          if k != "op_role")
        return f"{{{slots(self.outputs)}}} = {self.type}(inputs={{{slots(self.inputs)}}}, {attrs})"

    __repr__ = __str__ = lambda self: self.to_string()


def _attr_text(value):
    return f"block[{value.idx}]" if isinstance(value, Block) else repr(value)


def _rename_in(slots, old, new):
    for key, names in slots.items():
        slots[key] = [new if n == old else n for n in names]


class Block:
    """An ordered list of ops plus the variables they create."""

    def __init__(self, program, idx, parent_idx=-1):
        self.program = program
        self.idx = idx
        self.parent_idx = parent_idx
        self.forward_block_idx = -1
        self.vars = {}
        self.ops = []

    @property
    def parent(self):
        return self.program.blocks[self.parent_idx] if self.parent_idx >= 0 else None

    @property
    def desc(self):
        from .desc import BlockDesc
        return BlockDesc(self)

    # --- variables -------------------------------------------------------------------------
    def var(self, name):
        if not isinstance(name, str):
            raise TypeError(f"var() expects a variable name, got {type(name).__name__}")
        try:
            return self.vars[name]
        except KeyError:
            raise ValueError(f"variable {name!r} is not in block {self.idx}"
                             f"{framework._suggest(name, self.vars)}") from None

    def has_var(self, name):
        return name in self.vars

    def _find_var_recursive(self, name):
        """This block's variable, or an ancestor's; a gradient block also sees its forward
        block's (and that block's ancestors')."""
        var = self.vars.get(name)
        if var is not None:
            return var
        pending, seen = [self], {self.idx}
        while pending:
            block = pending.pop(0)
            var = block.vars.get(name)
            if var is not None:
                return var
            for idx in (block.parent_idx, block.forward_block_idx):
                if idx >= 0 and idx not in seen:
                    seen.add(idx)
                    pending.append(self.program.blocks[idx])
        return None

    def _var_recursive(self, name):
        var = self._find_var_recursive(name)
        if var is None:
            raise ValueError(f"variable {name!r} is not in block {self.idx} or its ancestors"
                             f"{framework._suggest(name, self.vars)}")
        return var

    def create_var(self, *args, **kwargs):
        name = kwargs.get("name")
        if name is not None and name in self.vars:
            return self.vars[name]
        var = Variable(self, *args, **kwargs)
        self.vars[var.name] = var
        self.program._bump()
        return var

    def create_parameter(self, *args, **kwargs):
        """A Parameter in the global block. With `initializer=`, the op initialising it is
        appended to this block, unless an op of the global block already writes it."""
        global_block = self.program.global_block()
        param = Parameter(global_block, *args, **kwargs)
        global_block.vars[param.name] = param
        initializer = kwargs.get("initializer")
        if initializer is not None:
            writers = [op for op in global_block.ops if param.name in op.output_arg_names]
            if len(writers) > 1:
                raise RuntimeError(f"parameter {param.name!r} is initialised by several ops: "
                                   f"{[op.type for op in writers]}")
            if not writers:
                initializer(param, self)
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
            _rename_in(op.inputs, old, new)
            _rename_in(op.outputs, old, new)
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

    def _remove_op(self, index, end=None):
        del self.ops[index:(index + 1 if end is None else end)]
        self.program._bump()

    def _make_op(self, type, inputs, outputs, attrs):
        from .ops.registry import get_op_def  # the registry imports framework

        opdef = get_op_def(type)
        ins = {slot: self._names(value) for slot, value in (inputs or {}).items()}
        outs = {slot: self._names(value) for slot, value in (outputs or {}).items()}
        full_attrs = dict(opdef.attrs)
        full_attrs.update(attrs or {})
        full_attrs.setdefault("op_role", self.program._current_role)
        full_attrs.setdefault("op_namescope", framework._full_name_scope())
        op = Operator(self, type, ins, outs, full_attrs)
        opdef.check_slots(op)
        opdef.infer_shapes(op)
        self._share_lod_level(op)
        return op

    def _share_lod_level(self, op):
        """Compile-time ShareLoD: outputs of lod_level 0 take their main input's lod_level (the
        run-time rule of runtime/lod.py)."""
        from .lod import LOD_OPS, NO_SHARE
        if op.type in LOD_OPS or op.type in NO_SHARE:
            return
        level = 0
        for names in op.inputs.values():
            var = self._find_var_recursive(names[0]) if names else None
            if var is not None and var.lod_level and var.type == VarType.LOD_TENSOR:
                level = var.lod_level
                break
        if not level:
            return
        for names in op.outputs.values():
            for name in names:
                var = self._find_var_recursive(name)
                if var is not None and not var.lod_level and not var.persistable and \
                        var.type == VarType.LOD_TENSOR:
                    var.lod_level = level

    def _names(self, value):
        if value is None:
            return []
        items = value if isinstance(value, (list, tuple)) else [value]
        names = []
        for item in items:
            if isinstance(item, Variable):
                if self._find_var_recursive(item.name) is None:  # a variable of another program
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
        from .framework import _check_debug_flags
        _check_debug_flags(throw_on_error, with_details)
        lines = [f"block {self.idx} (parent {self.parent_idx}) {{"]
        lines += ["  " + v.to_string(throw_on_error, with_details).replace("\n", "\n  ")
                  for v in self.vars.values()]
        lines += ["  " + op.to_string() for op in self.ops]
        return "\n".join(lines + ["}"])
