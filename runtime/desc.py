"""`.desc` views: Paddle's C++ ProgramDesc/BlockDesc/OpDesc/VarDesc accessors that Fluid code
calls (`op.desc.attr(...)`, `program.desc.num_blocks()`, `var.desc.shape()`), answered from
the runtime's own Program, Block, Operator and Variable objects (no second copy to keep in
sync: a view reads and writes the object it wraps)."""


def _name(name):
    return name.decode() if isinstance(name, bytes) else name


class OpDesc:
    def __init__(self, op):
        self._op = op

    def type(self):
        return self._op.type

    def input(self, slot):
        return self._op.input(slot)

    def output(self, slot):
        return self._op.output(slot)

    def input_names(self):
        return self._op.input_names

    def output_names(self):
        return self._op.output_names

    def input_arg_names(self):
        return self._op.input_arg_names

    def output_arg_names(self):
        return self._op.output_arg_names

    def attr(self, name):
        value = self._op.attrs[name]
        return value.idx if hasattr(value, "ops") and hasattr(value, "parent_idx") else value

    def has_attr(self, name):
        return name in self._op.attrs

    def attr_names(self):
        return self._op.attr_names

    def attr_type(self, name):
        """A code for the attribute's kind (equal for two values of one kind)."""
        value = self._op.attrs[name]
        for code, kind in enumerate((bool, int, float, str, list, tuple, dict)):
            if isinstance(value, kind):
                return code
        return -1

    def infer_shape(self, block=None):
        from .ops.registry import get_op_def
        get_op_def(self._op.type).infer_shapes(self._op)

    def infer_var_type(self, block=None):
        pass

    def set_attr(self, name, value):
        self._op._set_attr(name, value)

    _set_attr = set_attr

    def remove_attr(self, name):
        self._op.attrs.pop(name, None)

    def _rename_input(self, old, new):
        self._op._rename_input(old, new)

    def _rename_output(self, old, new):
        self._op._rename_output(old, new)

    def set_input(self, slot, names):
        self._op.inputs[slot] = list(names)

    def set_output(self, slot, names):
        self._op.outputs[slot] = list(names)

    def set_is_target(self, flag):
        self._op.attrs["_is_target"] = bool(flag)

    def block_attr_id(self, name):
        return self._op.attrs[name].idx


class VarDesc:
    def __init__(self, var):
        self._var = var

    def name(self):
        return self._var.name

    def shape(self):
        return list(self._var.shape or ())

    def set_shape(self, shape):
        self._var.shape = tuple(shape)

    def dtype(self):
        return self._var.dtype

    def type(self):
        return self._var.type

    def lod_level(self):
        return self._var.lod_level

    def persistable(self):
        return self._var.persistable

    def set_persistable(self, flag):
        self._var.persistable = bool(flag)

    def need_check_feed(self):
        return self._var.need_check_feed

    def set_need_check_feed(self, flag):
        self._var.need_check_feed = bool(flag)


class BlockDesc:
    def __init__(self, block):
        self._block = block

    @property
    def id(self):
        return self._block.idx

    @property
    def parent(self):
        return self._block.parent_idx

    def op_size(self):
        return len(self._block.ops)

    def op(self, index):
        return OpDesc(self._block.ops[index])

    def find_var(self, name):
        var = self._block.vars.get(_name(name))
        return VarDesc(var) if var is not None else None

    def find_var_recursive(self, name):
        var = self._block._find_var_recursive(_name(name))
        return VarDesc(var) if var is not None else None

    var = find_var

    def has_var(self, name):
        return _name(name) in self._block.vars

    def all_vars(self):
        return [VarDesc(v) for v in self._block.vars.values()]

    def _remove_op(self, start, end):
        self._block._remove_op(start, end)


class ProgramDesc:
    def __init__(self, program):
        self._program = program

    def num_blocks(self):
        return len(self._program.blocks)

    def block(self, index):
        return BlockDesc(self._program.blocks[index])

    def serialize_to_string(self):
        from .program_io import serialize
        return serialize(self._program)

    def get_feed_target_names(self):
        return list(self._program._feed_targets)

    def get_fetch_target_names(self):
        return list(self._program._fetch_targets)

    def flush(self):
        pass

    def _set_version(self, version=None):
        pass

    def _version(self):
        return 0
