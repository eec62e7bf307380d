"""Reverse-mode autodiff on the program: append_backward() and gradients().

For every op on a path from a variable that needs a gradient to the loss, a `<type>_grad` op is
appended (in reverse order). A variable needs a gradient when it is a trainable leaf (a
Parameter, or any variable with stop_gradient=False) or computed from one, and it is not
stop_gradient or in no_grad_set: `stop_gradient=True` on a variable cuts every path through it.
A variable consumed by several ops gets one partial gradient per use (`x@GRAD@RENAME@k`),
summed into `x@GRAD` by a `sum` op right after the last partial is produced.
"""

from collections import defaultdict

from .dtypes import VarType
from .errors import ShapeError, where
from .framework import EMPTY_VAR_NAME, GRAD_SUFFIX, OpRole, Parameter, Variable, grad_var_name
from .ops.registry import get_op_def


def append_backward(loss, parameter_list=None, no_grad_set=None, callbacks=None,
                    checkpoints=None):
    """Append the gradient ops of `loss`; returns [(parameter, gradient)] for the trainable
    parameters (or those in parameter_list) that the loss depends on."""
    if not isinstance(loss, Variable):
        raise TypeError(f"append_backward needs the loss Variable, got {type(loss).__name__}")
    block = loss.block.program.global_block()
    builder = _Builder(block, [loss], _names(no_grad_set), callbacks)
    builder.seed(loss, None)
    builder.build()
    params = _param_names(block, parameter_list)
    return [(block.var(p), block.var(grad_var_name(p))) for p in params
            if grad_var_name(p) in block.vars and builder.has_grad(p)]


def gradients(targets, inputs, target_gradients=None, no_grad_set=None):
    """d(sum of targets)/d(inputs) as variables (None where an input does not affect the
    targets). Unlike Paddle, an input listed here gets its gradient even if it has
    stop_gradient=True (asking for it is explicit enough)."""
    targets = _as_list(targets)
    inputs = _as_list(inputs)
    seeds = _as_list(target_gradients) if target_gradients is not None else [None] * len(targets)
    if len(seeds) != len(targets):
        raise ValueError(f"gradients(): {len(targets)} targets but {len(seeds)} target_gradients")
    block = targets[0].block.program.global_block()
    builder = _Builder(block, targets, _names(no_grad_set), None,
                       force={v.name for v in inputs})
    for target, seed in zip(targets, seeds):
        builder.seed(target, seed)
    builder.build()
    return [block.var(grad_var_name(v.name)) if builder.has_grad(v.name) else None
            for v in inputs]


calc_gradient = gradients


class _Builder:
    """Plans and appends the backward ops for one call."""

    def __init__(self, block, targets, no_grad, callbacks, force=()):
        self.block = block
        self.program = block.program
        self.no_grad = set(no_grad)
        self.force = set(force)
        self.callbacks = callbacks or []
        self.seeds = []
        end = max(self._producer_index(t) for t in targets) + 1
        self.ops = self._ops_on_path(block.ops[:end], {t.name for t in targets})
        self.requires = self._requires_grad()

    # --- planning ------------------------------------------------------------------------
    def _producer_index(self, var):
        for i in range(len(self.block.ops) - 1, -1, -1):
            if var.name in self.block.ops[i].output_arg_names:
                return i
        return -1

    @staticmethod
    def _ops_on_path(ops, wanted):
        """Forward ops whose outputs (transitively) reach a target."""
        wanted = set(wanted)
        path = []
        for op in reversed(ops):
            if any(n in wanted for n in op.output_arg_names):
                path.append(op)
                wanted.update(op.input_arg_names)
        path.reverse()
        return path

    def _blocked(self, name):
        var = self.block.vars.get(name)
        if name in self.force:
            return False
        if var is None or name in self.no_grad or var.stop_gradient:
            return True
        if isinstance(var, Parameter) and not var.trainable:
            return True
        return var.dtype is not None and var.dtype.kind != "f"

    def _requires_grad(self):
        """Names of variables that need a gradient: trainable leaves and what they feed."""
        produced = {n for op in self.ops for n in op.output_arg_names}
        requires = set()
        for op in self.ops:
            for name in op.input_arg_names:
                if name not in produced and not self._blocked(name):
                    requires.add(name)
            opdef = get_op_def(op.type)
            sources = [n for slot in opdef.diff_inputs for n in op.input(slot)]
            if any(n in requires for n in sources):
                for slot in opdef.diff_outputs:
                    requires.update(n for n in op.output(slot) if not self._blocked(n))
        return requires

    def seed(self, target, seed_var):
        self.seeds.append((target, seed_var))

    def has_grad(self, name):
        return name in self.ready

    # --- building --------------------------------------------------------------------------
    def build(self):
        plan = self._plan()
        self.total = plan
        self.partials = defaultdict(list)
        self.ready = set()
        with self.program._role_guard(OpRole.Backward):
            for target, seed in self.seeds:
                self._append_seed(target, seed)
            for op in reversed(self.ops):
                self._append_grad_op(op)

    def _plan(self):
        """How many gradient contributions each variable will receive (decides the names)."""
        counts = defaultdict(int)
        ready = {t.name for t, _ in self.seeds}
        for target, _ in self.seeds:
            counts[target.name] += 1
        for op in reversed(self.ops):
            opdef = get_op_def(op.type)
            if not self._differentiable(op, opdef, ready):
                continue
            for slot in opdef.diff_inputs:
                for name in op.input(slot):
                    if name in self.requires:
                        counts[name] += 1
                        ready.add(name)
        return counts

    def _differentiable(self, op, opdef, ready):
        if opdef.grad_def is None:
            return False
        outs = [n for slot in opdef.diff_outputs for n in op.output(slot)]
        ins = [n for slot in opdef.diff_inputs for n in op.input(slot)]
        return any(n in ready for n in outs) and any(n in self.requires for n in ins)

    def _append_seed(self, target, seed):
        name = self._partial_name(target.name)
        out = self._grad_var(target, name)
        if seed is None:
            self.block.append_op("fill_any_like", inputs={"X": target}, outputs={"Out": out},
                                 attrs={"value": 1.0, "op_role": OpRole.Backward | OpRole.Loss})
        else:
            self.block.append_op("assign", inputs={"X": seed}, outputs={"Out": out})
        self._contributed(target.name, name)

    def _append_grad_op(self, op):
        opdef = get_op_def(op.type)
        if not self._differentiable(op, opdef, self.ready):
            return
        inputs = {slot: op.input(slot) for slot in opdef.grad_uses if slot in op.inputs}
        inputs.update({slot: op.output(slot) for slot in opdef.grad_uses if slot in op.outputs})
        for slot in opdef.diff_outputs:
            names = op.output(slot)
            if names:
                inputs[slot + GRAD_SUFFIX] = [self._out_grad(n) for n in names]
        outputs, produced = {}, []
        for slot in opdef.diff_inputs:
            grads = []
            for name in op.input(slot):
                if name in self.requires:
                    gname = self._partial_name(name)
                    self._grad_var(self.block.var(name), gname, opdef, slot, op)
                    grads.append(gname)
                    produced.append((name, gname))
                else:
                    grads.append(EMPTY_VAR_NAME)
            if grads:
                outputs[slot + GRAD_SUFFIX] = grads
        attrs = {k: v for k, v in op.attrs.items() if k != "op_role"}
        gop = self.block.append_op(opdef.grad_def.type, inputs=inputs, outputs=outputs,
                                   attrs=attrs)
        gop.callsite = op.callsite  # errors in the grad op point at the layer
        gop.forward_op = op
        for name, gname in produced:
            self._contributed(name, gname)
        for callback in self.callbacks:
            callback(block=self.block, context={"op": gop})

    def _out_grad(self, name):
        """The gradient of forward output `name`, or zeros when the loss does not use it."""
        gname = grad_var_name(name)
        if name in self.ready:
            return gname
        var = self.block.var(name)
        zeros = self._grad_var(var, gname)
        self.block.append_op("fill_zeros_like", inputs={"X": var}, outputs={"Out": zeros})
        self.ready.add(name)
        return gname

    def _partial_name(self, name):
        if self.total[name] <= 1:
            return grad_var_name(name)
        return f"{grad_var_name(name)}@RENAME@{len(self.partials[name])}"

    def _contributed(self, name, gname):
        self.partials[name].append(gname)
        if len(self.partials[name]) == self.total[name]:
            if self.total[name] > 1:
                var = self.block.var(name)
                parts = [self.block.var(p) for p in self.partials[name]]
                sparse = all(p.type == VarType.SELECTED_ROWS for p in parts)
                out = self._grad_var(var, grad_var_name(name),
                                     sparse_type=VarType.SELECTED_ROWS if sparse else None)
                self.block.append_op("sum", inputs={"X": parts}, outputs={"Out": out})
            self.ready.add(name)

    def _grad_var(self, var, gname, opdef=None, slot=None, op=None, sparse_type=None):
        vtype = sparse_type or VarType.LOD_TENSOR
        if opdef is not None and opdef.grad_var_type is not None:
            vtype = opdef.grad_var_type(slot, op.attrs) or VarType.LOD_TENSOR
        if var.shape is None:
            raise ShapeError(f"cannot differentiate through {var.name!r}: its shape is unknown"
                             f"{where(var.callsite)}")
        existing = self.block.vars.get(gname)
        if existing is not None:
            existing.type = vtype
            return existing
        return self.block.create_var(name=gname, shape=var.shape, dtype=var.dtype, type=vtype,
                                     lod_level=var.lod_level, callsite=var.callsite)


def _names(items):
    if not items:
        return set()
    return {v.name if isinstance(v, Variable) else v for v in items}


def _as_list(value):
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _param_names(block, parameter_list):
    if parameter_list is None:
        return [p.name for p in block.all_parameters() if p.trainable]
    return [p.name if isinstance(p, Variable) else p for p in parameter_list]
