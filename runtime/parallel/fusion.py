"""The kernels behind BuildStrategy.fuse_elewise_add_act_ops: an elementwise_add followed by
its activation, and the activation's gradient followed by elementwise_add_grad, each run as
one pass over memory where a fused CPU kernel serves them (a bias along the trailing
dimensions, relu, float32/float64: runtime/ops/cpu_kernels.py), and as the two ops one after
the other otherwise. Either way the values are bit for bit the unfused ops': the fused loops
do the same operations in the same order.

Forward: relu(X + Y) is written straight into the activation's output (X's buffer where the
plan lets the add reuse it); the sum itself is never made, so this applies only where nothing
but the activation reads it (`sum_is_internal`). Backward: dOut * (Out > 0) and its sums over
the rows (the bias's gradient) come out of one pass; X's gradient is that same array, as the
unfused elementwise_add_grad gives it.
"""

from ..ops import cpu_kernels
from ..plan import exclusive

_FUSED_FORWARD = {"relu"}
_FUSED_BACKWARD = {"relu_grad"}


def sum_is_internal(plan, add, act):
    """True when the add's output is read by the activation alone: not by another op, not
    fetched, not a persistable variable (then the fused forward need not make it)."""
    name = add.op.outputs["Out"][0]
    slot = plan.slot_of[name]
    if slot in plan.fetch_slots or name in plan.reads or name in plan.writes:
        return False
    readers = [s for s in plan.steps if name in s.op.input_arg_names]
    return readers == [act]


class AddActivation:
    """elementwise_add then its activation (the forward half of the fusion)."""

    def __init__(self, add, act, internal):
        self.steps = (add, act)
        self.add, self.act = add, act
        ins = dict(add.ins1)
        self.x_slot, self.y_slot = ins["X"], ins["Y"]
        self.sum_slot = dict(add.outs1)["Out"]
        self.out_slot = dict(act.outs1)["Out"]
        self.add_reuses_x = any(o == "Out" and i == self.x_slot for o, i in add.inplace)
        self.fused = (act.type in _FUSED_FORWARD and internal
                      and add.attrs.get("axis", -1) in (-1, _trailing_axis(add)))

    def __call__(self, env, run_op):
        if self.fused:
            buf = env[self.x_slot] if self.add_reuses_x and exclusive(env[self.x_slot]) else None
            out = cpu_kernels.bias_relu(env[self.x_slot], env[self.y_slot], buf)
            if out is not None:
                env[self.out_slot] = out
                env[self.sum_slot] = None  # (never made: only the activation reads it)
                return
        run_op(self.add, env)
        run_op(self.act, env)


class ActivationGradAddGrad:
    """The activation's gradient then elementwise_add_grad (the backward half)."""

    def __init__(self, act_grad, add_grad):
        self.steps = (act_grad, add_grad)
        self.act_grad, self.add_grad = act_grad, add_grad
        ins, outs = dict(act_grad.ins1), dict(act_grad.outs1)
        self.out_slot, self.dout_slot = ins.get("Out"), ins.get("Out@GRAD")
        self.dsum_slot = outs.get("X@GRAD")
        add_ins, add_outs = dict(add_grad.ins1), dict(add_grad.outs1)
        self.x_slot, self.y_slot = add_ins.get("X"), add_ins.get("Y")
        self.dx_slot, self.dy_slot = add_outs.get("X@GRAD"), add_outs.get("Y@GRAD")
        self.reuses_dout = any(o == "X@GRAD" and i == self.dout_slot
                               for o, i in act_grad.inplace)
        self.fused = (act_grad.type in _FUSED_BACKWARD
                      and None not in (self.out_slot, self.dout_slot, self.dsum_slot,
                                       self.x_slot, self.y_slot, self.dx_slot, self.dy_slot)
                      and add_ins.get("Out@GRAD") == self.dsum_slot
                      and add_grad.attrs.get("axis", -1) in (-1, _trailing_axis(add_grad)))

    def __call__(self, env, run_op):
        if self.fused and env[self.x_slot].shape == env[self.dout_slot].shape:
            buf = (env[self.dout_slot] if self.reuses_dout and exclusive(env[self.dout_slot])
                   else None)
            found = cpu_kernels.relu_grad_bias(env[self.out_slot], env[self.dout_slot],
                                               env[self.y_slot].shape, buf)
            if found is not None:
                dx, dy = found
                env[self.dsum_slot] = env[self.dx_slot] = dx
                env[self.dy_slot] = dy
                return
        run_op(self.act_grad, env)
        run_op(self.add_grad, env)


def _trailing_axis(step):
    """The `axis` attribute that adds Y along X's trailing dimensions, from the program's
    variable shapes (-2 when they are unknown: no fused kernel)."""
    block = step.op.block
    names = step.op.inputs
    x, y = block._find_var_recursive(names["X"][0]), block._find_var_recursive(names["Y"][0])
    if x is None or y is None or x.shape is None or y.shape is None:
        return -2
    return len(x.shape) - len(y.shape)
