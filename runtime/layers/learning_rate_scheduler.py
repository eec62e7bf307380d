"""Learning-rate decay layers of Fluid 1.8 (static graph): each builds, in the main program, ops
that compute the rate from a step counter, so the rate is a Variable to pass to an optimizer.

The counter is the persistable int64 `@LR_DECAY_COUNTER@`, set to begin-1 by the startup program
and incremented by an op put at the front of the main program (so the first run sees `begin`,
0 by default; noam_decay counts from 1), as Paddle's `autoincreased_step_counter` does."""

import math

from ..framework import OpRole, Variable, default_main_program
from ..initializer import ConstantInitializer
from ..layer_helper import LayerHelper
from . import nn, ops, tensor
from .loops import Switch

LR_COUNTER = "@LR_DECAY_COUNTER@"


def autoincreased_step_counter(counter_name=None, begin=1, step=1):
    """An int64 [1] counter, persistable, that is `begin` on the first run of the main program
    and grows by `step` on every run after."""
    helper = LayerHelper("global_step_counter")
    name = counter_name or "@STEP_COUNTER@"
    block = helper.main_program.global_block()
    if block.has_var(name):
        return block.var(name)
    counter = helper.create_global_variable(name=name, dtype="int64", shape=[1],
                                            persistable=True, stop_gradient=True)
    helper.set_variable_initializer(counter, ConstantInitializer(float(begin - 1), True))
    block._prepend_op(type="increment", inputs={"X": [counter]}, outputs={"Out": [counter]},
                      attrs={"step": float(step)})
    counter.stop_gradient = True
    return counter


def _decay_step_counter(begin=0):
    counter = autoincreased_step_counter(counter_name=LR_COUNTER, begin=begin, step=1)
    return tensor.cast(counter, "float32")


def _lr_ops():
    return default_main_program()._role_guard(OpRole.LRSched)


def _steps(decay_steps, staircase):
    step = _decay_step_counter()
    ratio = step / float(decay_steps)
    return ops.floor(ratio) if staircase else ratio


def noam_decay(d_model, warmup_steps, learning_rate=1.0):
    """lr * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5), the step counting from 1."""
    with _lr_ops():
        step = _decay_step_counter(1)
        a = step ** -0.5
        b = (warmup_steps ** -1.5) * step
        return learning_rate * (d_model ** -0.5) * nn.elementwise_min(a, b)


def exponential_decay(learning_rate, decay_steps, decay_rate, staircase=False):
    """lr * decay_rate ^ (step / decay_steps) (the exponent floored when staircase)."""
    with _lr_ops():
        return learning_rate * (decay_rate ** _steps(decay_steps, staircase))


def natural_exp_decay(learning_rate, decay_steps, decay_rate, staircase=False):
    """lr * exp(-decay_rate * step / decay_steps)."""
    with _lr_ops():
        return learning_rate * ops.exp(-1 * decay_rate * _steps(decay_steps, staircase))


def inverse_time_decay(learning_rate, decay_steps, decay_rate, staircase=False):
    """lr / (1 + decay_rate * step / decay_steps)."""
    with _lr_ops():
        return learning_rate / (1 + decay_rate * _steps(decay_steps, staircase))


def polynomial_decay(learning_rate, decay_steps, end_learning_rate=0.0001, power=1.0,
                     cycle=False):
    """(lr - end) * (1 - step / decay_steps) ^ power + end, the step capped at decay_steps; with
    cycle the period grows to the next multiple of decay_steps instead."""
    with _lr_ops():
        step = _decay_step_counter()
        if cycle:
            periods = ops.ceil(step / float(decay_steps))
            zero = tensor.fill_constant(shape=[1], dtype="float32", value=0.0)
            one = tensor.fill_constant(shape=[1], dtype="float32", value=1.0)
            with Switch() as switch:
                with switch.case(step == zero):
                    tensor.assign(one, periods)
            decay_steps = decay_steps * periods
        else:
            limit = tensor.fill_constant(shape=[1], dtype="float32", value=float(decay_steps))
            step = nn.elementwise_min(step, limit)
        return (learning_rate - end_learning_rate) * (
            (1 - step / decay_steps) ** power) + end_learning_rate


def piecewise_decay(boundaries, values):
    """values[i] while step < boundaries[i]; values[-1] after the last boundary."""
    if len(values) - len(boundaries) != 1:
        raise ValueError("piecewise_decay needs len(values) == len(boundaries) + 1")
    with _lr_ops():
        step = _decay_step_counter()
        lr = tensor.create_global_var(shape=[1], value=0.0, dtype="float32", persistable=True,
                                      name="learning_rate")
        with Switch() as switch:
            for boundary, value in zip(boundaries, values):
                bound = tensor.fill_constant(shape=[1], dtype="float32", value=float(boundary))
                with switch.case(step < bound):
                    tensor.fill_constant(shape=[1], dtype="float32", value=float(value), out=lr)
            with switch.default():
                tensor.fill_constant(shape=[1], dtype="float32", value=float(values[-1]), out=lr)
        return lr


def cosine_decay(learning_rate, step_each_epoch, epochs):
    """lr * 0.5 * (cos(epoch * pi / epochs) + 1), epoch = floor(step / step_each_epoch)."""
    with _lr_ops():
        step = _decay_step_counter()
        epoch = ops.floor(step / step_each_epoch)
        return learning_rate * 0.5 * (ops.cos(epoch * math.pi / epochs) + 1)


def linear_lr_warmup(learning_rate, warmup_steps, start_lr, end_lr):
    """start_lr + (end_lr - start_lr) * step / warmup_steps for the first warmup_steps steps,
    then learning_rate (a float or a Variable, e.g. another decay's result)."""
    dtype = learning_rate.dtype if isinstance(learning_rate, Variable) else "float32"
    span = float(end_lr) - float(start_lr)
    with _lr_ops():
        lr = tensor.create_global_var(shape=[1], value=0.0, dtype=dtype, persistable=True,
                                      name="learning_rate_warmup")
        step = _decay_step_counter()
        with Switch() as switch:
            with switch.case(step < float(warmup_steps)):
                tensor.assign(start_lr + span * (step / float(warmup_steps)), lr)
            with switch.default():
                if not isinstance(learning_rate, Variable):
                    learning_rate = tensor.fill_constant(shape=[1], dtype=dtype,
                                                         value=float(learning_rate))
                tensor.assign(learning_rate, lr)
        return lr


__all__ = ["exponential_decay", "natural_exp_decay", "inverse_time_decay", "polynomial_decay",
           "piecewise_decay", "noam_decay", "cosine_decay", "linear_lr_warmup",
           "autoincreased_step_counter"]
