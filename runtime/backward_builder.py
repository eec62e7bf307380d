"""The backward pass builder behind append_backward() and gradients() (runtime/backward.py).

For every op on a path from a variable that needs a gradient to the targets, a `<type>_grad`
op is appended (in reverse order). A variable needs a gradient when it is a trainable leaf (a
Parameter, or any variable with stop_gradient=False) or computed from one, and it is not
stop_gradient or in no_grad_set: `stop_gradient=True` on a variable cuts every path through it.
A value consumed by several ops gets one partial gradient per use (`x@GRAD@RENAME@k`), summed
into `x@GRAD` by a `sum` op right after the last partial is produced.

Values, not names: an op writing a variable that already holds a value (an in-place update,
a loop body assigning its loop variable) starts a new version of it, and each version has its
own gradient. The first version on the path gets the usual name `x@GRAD`; later ones
`x@GRAD@V<k>`. So a loop body's gradient with respect to the loop variable it read differs
from the gradient arriving for the value it wrote.

Names: when a gradient name already exists (an earlier backward pass made it) this pass uses
a fresh `unique_name` of it (`x@GRAD_0`), as Paddle does, so a second `fluid.gradients` call
never overwrites the first one's results.

Gradient ops are ops like any other: an op whose gradient op itself has a gradient rule
(`<type>_grad_grad`) can be differentiated again by a later pass (second-order gradients).
Ops with a sub-block (control flow) declare a `grad_maker` that builds their gradient block.
"""

from collections import defaultdict

from . import unique_name
from .dtypes import VarType
from .framework import EMPTY_VAR_NAME, GRAD_SUFFIX, OpRole, Parameter, grad_var_name
from .ops.registry import get_op_def


class Builder:
    """Plans and appends the backward ops of one call, into `block` (the targets' block, or
    a gradient sub-block when `ops` is given by a control-flow op's grad_maker)."""

    def __init__(self, block, targets, no_grad, callbacks, force=(), ops=None, names=None,
                 fwd_block=None, replayed=False):
        self.block = block  # where grad ops go
        self.fwd = fwd_block or block  # where the forward ops live
        self.program = block.program
        self.no_grad = set(no_grad)
        self.force = set(force)
        self.callbacks = callbacks or []
        self.seeds = []
        self.reserved = _all_names(self.program)
        self.names = dict(names or {})  # canonical grad name -> the name this pass uses
        self.replayed = replayed  # a while body: its gradient sees each op's recorded values
        if ops is None:
            end = max(self._producer_index(t) for t in targets) + 1
            ops = self.fwd.ops[:end]
        self.ops = ops_on_path(ops, {t.name for t in targets})
        self.requires = self._requires_grad()
        self.arrays = {n for op in self.ops for n in op.input_arg_names + op.output_arg_names
                       if _is_array(self.var(n))}
        self.in_ver, self.out_ver, self.last_ver, self.first_ver = _versions(self.ops,
                                                                              self.arrays)

    # --- planning ------------------------------------------------------------------------
    def _producer_index(self, var):
        for i in range(len(self.fwd.ops) - 1, -1, -1):
            if var.name in self.fwd.ops[i].output_arg_names:
                return i
        return -1

    def var(self, name):
        return self.fwd._find_var_recursive(name) or self.block._find_var_recursive(name)

    def blocked(self, name):
        var = self.var(name)
        if name in self.force:
            return False
        if var is None or name in self.no_grad or var.stop_gradient:
            return True
        if isinstance(var, Parameter) and not var.trainable:
            return True
        return var.dtype is not None and var.dtype.kind != "f"

    def _requires_grad(self):
        """Names of variables that get a gradient: as in Paddle, every variable the ops use
        that is not blocked (stop_gradient, not a float, a frozen parameter). Gradients no op
        reads and nobody fetches are not computed (Plan prunes them)."""
        requires = set()
        for op in self.ops:
            for name in op.input_arg_names + op.output_arg_names:
                if not self.blocked(name):
                    requires.add(name)
        return requires

    def seed(self, target, seed_var):
        self.seeds.append((target, seed_var))

    def key_in(self, op, name):
        return (name, self.in_ver[id(op)].get(name, 0))

    def key_out(self, op, name):
        return (name, self.out_ver[id(op)][name])

    def final_key(self, name):
        return (name, self.last_ver.get(name, 0))

    def has_grad(self, name):
        return (name, self.first_ver.get(name, 0)) in self.ready

    def grad_name(self, name):
        """The gradient variable of `name` (its first version on the path)."""
        key = (name, self.first_ver.get(name, 0))
        return self.names.get(self._canonical(key), self._canonical(key))

    # --- building --------------------------------------------------------------------------
    def build(self):
        self.total = self._plan()
        self.partials = defaultdict(list)
        self.issued = defaultdict(int)  # partial names handed out per value
        self.ready = set()
        self._seeding = set()
        with self.program._role_guard(OpRole.Backward):
            for target, seed in self.seeds:
                self._append_seed(target, seed)
            for op in reversed(self.ops):
                self._append_grad_op(op)

    def _plan(self):
        """How many gradient contributions each value will receive (decides the names)."""
        counts = defaultdict(int)
        ready = {self.final_key(t.name) for t, _ in self.seeds}
        for target, _ in self.seeds:
            counts[self.final_key(target.name)] += 1
        for op in reversed(self.ops):
            opdef = get_op_def(op.type)
            if not self.differentiable(op, opdef, ready):
                continue
            for slot in opdef.diff_inputs:
                for name in op.input(slot):
                    if name in self.requires:
                        key = self.key_in(op, name)
                        counts[key] += 1
                        ready.add(key)
        return counts

    def differentiable(self, op, opdef, ready):
        if opdef.grad_def is None and opdef.grad_maker is None:
            return False
        outs = [self.key_out(op, n) for slot in opdef.diff_outputs for n in op.output(slot)
                if n != EMPTY_VAR_NAME]
        ins = [n for slot in opdef.diff_inputs for n in op.input(slot)]
        return any(k in ready for k in outs) and any(n in self.requires for n in ins)

    def _append_seed(self, target, seed):
        key = self.final_key(target.name)
        self._seeding = {key}
        name = self.partial_name(key)
        self._seeding = set()
        out = self.grad_var(target, name)
        role = OpRole.Backward | OpRole.Loss
        if seed is None and target.shape is not None and all(d > 0 for d in target.shape):
            self.block.append_op("fill_constant", outputs={"Out": out},
                                 attrs={"shape": list(target.shape), "value": 1.0,
                                        "dtype": target.dtype.name, "force_cpu": False,
                                        "op_role": role})  # Paddle's loss seed
        elif seed is None:  # an unknown (batch) dimension: ones shaped like the target
            self.block.append_op("fill_any_like", inputs={"X": target}, outputs={"Out": out},
                                 attrs={"value": 1.0, "op_role": role})
        else:
            self.block.append_op("assign", inputs={"X": seed}, outputs={"Out": out})
        self.contributed(key, name)

    def _append_grad_op(self, op):
        opdef = get_op_def(op.type)
        if not self.differentiable(op, opdef, self.ready):
            return
        if opdef.grad_maker is not None:  # control flow: it builds its own gradient block
            produced = opdef.grad_maker(self, op)
        else:
            produced = self._append_rule(op, opdef)
        for key, gname in produced:
            self.contributed(key, gname)

    def _append_rule(self, op, opdef):
        inputs = {slot: self._kept(op, op.input(slot), self.in_ver)
                  for slot in opdef.grad_uses if slot in op.inputs}
        inputs.update({slot: self._kept(op, op.output(slot), self.out_ver)
                       for slot in opdef.grad_uses if slot in op.outputs})
        for slot in opdef.diff_outputs:
            names = op.output(slot)
            if names:
                inputs[slot + GRAD_SUFFIX] = [self.out_grad(op, n) for n in names]
        outputs, produced = {}, []
        for slot in opdef.diff_inputs:
            grads = []
            for name in op.input(slot):
                if name in self.requires:
                    key = self.key_in(op, name)
                    gname = self.partial_name(key)
                    self.grad_var(self.var(name), gname, opdef, slot, op)
                    grads.append(gname)
                    produced.append((key, gname))
                else:
                    grads.append(EMPTY_VAR_NAME)
            if grads:
                outputs[slot + GRAD_SUFFIX] = grads
        attrs = {k: v for k, v in op.attrs.items() if k != "op_role"}
        gop = self.block.append_op(opdef.grad_def.type, inputs=inputs, outputs=outputs,
                                   attrs=attrs)
        gop.callsite = op.callsite  # errors in the grad op point at the layer
        gop.forward_op = op
        for callback in self.callbacks:
            callback(block=self.block, context={"op": gop})
        return produced

    def _kept(self, op, names, versions):
        """The names a grad op reads op's values under: a value a later forward op overwrites
        (in place) is copied right after `op` (a snapshot), unless a loop records it."""
        if self.replayed:
            return names
        out = []
        for name in names:
            if name == EMPTY_VAR_NAME or versions[id(op)].get(name, 0) == self.last_ver.get(
                    name, 0) or name in self.arrays:
                out.append(name)
                continue
            var = self.var(name)
            snap = self.fwd.create_var(name=unique_name.generate(f"{name}@SNAPSHOT"),
                                       shape=var.shape, dtype=var.dtype, type=var.type,
                                       lod_level=var.lod_level, stop_gradient=True)
            self.fwd._insert_op(self.fwd.ops.index(op) + 1, "assign", inputs={"X": var},
                                outputs={"Out": snap})
            out.append(snap.name)
        return out

    def out_grad(self, op, name):
        """The gradient of op's output `name`, or zeros when the targets do not use it."""
        if name == EMPTY_VAR_NAME:
            return EMPTY_VAR_NAME
        key = self.key_out(op, name)
        if key in self.ready:
            return self.key_grad_name(key)
        var = self.var(name)
        zeros = self.grad_var(var, self.name_for(self._canonical(key)))
        self.block.append_op("fill_zeros_like", inputs={"X": var}, outputs={"Out": zeros})
        self.ready.add(key)
        return zeros.name

    def _canonical(self, key):
        name, version = key
        if version == self.first_ver.get(name, 0):
            return grad_var_name(name)
        return f"{grad_var_name(name)}@V{version}"

    def key_grad_name(self, key):
        return self.name_for(self._canonical(key))

    def name_for(self, canonical):
        """The name this pass gives the gradient variable Paddle would call `canonical`."""
        name = self.names.get(canonical)
        if name is None:
            name = unique_name.generate(canonical) if canonical in self.reserved else canonical
            self.names[canonical] = name
        return name

    def partial_name(self, key):
        """A fresh name for the next gradient contribution to value `key` (two inputs of one
        op may be the same variable: each contribution gets its own name). A LoDTensorArray's
        gradient is one array its contributors add into (an array written in place has one
        gradient, entry by entry), zeros until the first arrives."""
        if key[0] in self.arrays:
            name = self.key_grad_name(key)
            if key not in self.ready and self.issued[key] == 0 and key not in self._seeding:
                var = self.var(key[0])
                self.block.append_op("fill_zeros_like", inputs={"X": var},
                                     outputs={"Out": self.grad_var(var, name)})
            self.issued[key] += 1
            return name
        if self.total[key] <= 1:
            return self.key_grad_name(key)
        k = self.issued[key]
        self.issued[key] += 1
        return self.name_for(f"{self._canonical(key)}@RENAME@{k}")

    def contributed(self, key, gname):
        if key[0] in self.arrays:
            self.ready.add(key)
            return
        self.partials[key].append(gname)
        if len(self.partials[key]) == self.total[key]:
            if self.total[key] > 1:
                var = self.var(key[0])
                parts = [self.block._var_recursive(p) for p in self.partials[key]]
                sparse = all(p.type == VarType.SELECTED_ROWS for p in parts)
                out = self.grad_var(var, self.key_grad_name(key),
                                    sparse_type=VarType.SELECTED_ROWS if sparse else None)
                self.block.append_op("sum", inputs={"X": parts}, outputs={"Out": out})
            self.ready.add(key)

    def grad_var(self, var, gname, opdef=None, slot=None, op=None, sparse_type=None):
        vtype = sparse_type or VarType.LOD_TENSOR
        if opdef is not None and opdef.grad_var_type is not None:
            vtype = opdef.grad_var_type(slot, op.attrs) or VarType.LOD_TENSOR
        if var.type == VarType.LOD_TENSOR_ARRAY:
            vtype = VarType.LOD_TENSOR_ARRAY
        existing = self.block._find_var_recursive(gname)
        if existing is not None:
            existing.type = vtype
            return existing
        return self.block.create_var(name=gname, shape=var.shape, dtype=var.dtype, type=vtype,
                                     lod_level=var.lod_level, callsite=var.callsite)


def _is_array(var):
    return var is not None and var.type == VarType.LOD_TENSOR_ARRAY


def _versions(ops, unversioned=()):
    """For each op the version of each input it reads and output it writes (a write of a
    variable already read or written starts a new version; not for `unversioned` names), and
    each name's first and last version."""
    current, first = {}, {}
    in_ver, out_ver = {}, {}
    for op in ops:
        reads = {}
        for name in op.input_arg_names:
            reads[name] = current.setdefault(name, 0)
            first.setdefault(name, reads[name])
        writes = {}
        for name in op.output_arg_names:
            version = current[name] + 1 if name in current and name not in unversioned else 0
            writes[name] = current[name] = version
            first.setdefault(name, version)
        in_ver[id(op)], out_ver[id(op)] = reads, writes
    return in_ver, out_ver, current, first


def ops_on_path(ops, wanted):
    """Forward ops whose outputs (transitively) reach a target."""
    wanted = set(wanted)
    path = []
    for op in reversed(ops):
        if any(n in wanted for n in op.output_arg_names):
            path.append(op)
            wanted.update(op.input_arg_names)
            wanted.update(sub_block_reads(op))
    path.reverse()
    return path


def sub_block_reads(op):
    """Names the sub-block(s) of a control-flow op read (none for other ops)."""
    block = op.attrs.get("sub_block")
    if block is None or not hasattr(block, "ops"):
        return ()
    names = set()
    for inner in block.ops:
        names.update(inner.input_arg_names)
        names.update(sub_block_reads(inner))
    return names


def _all_names(program):
    return {name for block in program.blocks for name in block.vars}
