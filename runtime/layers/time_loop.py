"""The loop behind fluid.layers.rnn and fluid.contrib.layers.basic_gru / basic_lstm: one step
function applied along the first (time) dimension of time-major inputs.

Paddle runs these RNNs in a `recurrent` op (StaticRNN), which knows the sequence length only
when it runs. Here the loop is a `while` op built from existing ops, so the length may be
unknown (-1) when the program is built and gradients come from the ops' own gradient rules:

  * step t of an input x [T, B, ...] is a row of x viewed as a table [T, B*...], looked up
    with lookup_table_v2 at the index t (a [1] int64 variable);
  * each step output is written to a LoDTensorArray at its time index t (so a reversed run
    still fills it in time order), and stacked once after the loop into [T, B, ...];
  * the states are loop variables: copies of the initial states, overwritten every step.
"""

import contextlib

from ..layer_helper import LayerHelper
from .extra import shape as shape_of
from .logic import greater_than, increment, less_than
from .fluid18_more import tensor_array_to_tensor
from .loops import While, array_write, create_array
from .tensor import assign, cast, fill_constant, reshape, slice as slice_
from .utils import assert_same_structure, flatten, pack_sequence_as

__all__ = ["time_loop"]


def time_loop(step, inputs, initial_states, sequence_length=None, is_reverse=False):
    """Run `step` over time-major `inputs` (a nested structure of [T, B, ...] variables).

    step(step_inputs, states, step_mask) -> (outputs, new_states): step_inputs is `inputs`
    at one time step ([B, ...] each), states has the structure of initial_states, step_mask
    is a [B] float mask (1 where t < sequence_length[b]) or None without sequence_length;
    new_states must have the structure of states.

    Returns (outputs, final_states): outputs like the step's outputs, each stacked over time
    ([T, B, ...], in the inputs' time order also when is_reverse), final_states the states
    after the last step."""
    flat_inputs = flatten(inputs)
    ref = flat_inputs[0]
    program = LayerHelper("time_loop").main_program
    length = cast(slice_(shape_of(ref), axes=[0], starts=[0], ends=[1]), "int64")
    tables = [_as_time_table(x) for x in flat_inputs]
    states = [assign(s) for s in flatten(initial_states)]
    lengths = None
    if sequence_length is not None:
        lengths = cast(sequence_length, states[0].dtype if states else "float32")
        lengths.stop_gradient = True
    i = fill_constant([1], "int64", 0)
    last = length - 1 if is_reverse else None
    cond = less_than(i, length)
    loop = While(cond)
    with loop.block():
        t = last - i if is_reverse else i
        step_inputs = pack_sequence_as(
            inputs, [_time_step(table, x, t) for table, x in zip(tables, flat_inputs)])
        step_mask = None if lengths is None else _step_mask(lengths, t)
        outputs, new_states = step(step_inputs, pack_sequence_as(initial_states, states),
                                   step_mask)
        assert_same_structure(initial_states, new_states, check_types=False)
        arrays = [_write_step(program, o, t) for o in flatten(outputs)]
        for state, new_state in zip(states, flatten(new_states)):
            assign(new_state, state)
        increment(i)
        less_than(i, length, cond=cond)
    stacked = [_stacked(array, out) for array, out in zip(arrays, flatten(outputs))]
    return (pack_sequence_as(outputs, stacked),
            pack_sequence_as(initial_states, states))


def _as_time_table(x):
    """x [T, B, ...] viewed as a 2-D table [T, B*...] whose row t is step t."""
    return reshape(x, [0, -1])


def _time_step(table, x, t):
    """Row t of the time table of x, shaped like one step of x ([B, ...])."""
    helper = LayerHelper("time_step")
    row = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op("lookup_table_v2", inputs={"W": table, "Ids": t}, outputs={"Out": row})
    trailing = [int(d) for d in x.shape[2:]]
    if any(d < 0 for d in trailing):
        raise ValueError(f"rnn: the input {x.name} has the shape {list(x.shape)}; its "
                         f"dimensions after time and batch must be known")
    return reshape(row, [-1] + trailing)


def _step_mask(lengths, t):
    """[B] float mask of step t: 1 where t < lengths[b], else 0."""
    return cast(greater_than(lengths, cast(t, lengths.dtype)), lengths.dtype)


def _write_step(program, out, t):
    """The array (created before the loop) that gets step output `out` ([B, ...]) at index t."""
    with _in_parent_block(program):
        array = create_array(out.dtype)
    array_write(out, t, array)
    return array


def _stacked(array, out):
    """The array's entries stacked over time: [T, B, ...] like the step output `out`."""
    value, _ = tensor_array_to_tensor(array, axis=0, use_stack=True)
    value.shape = (-1,) + tuple(out.shape)
    return value


@contextlib.contextmanager
def _in_parent_block(program):
    """Append ops to the parent of the current block (before the loop op) for a while."""
    body = program.current_block_idx
    program.current_block_idx = program.current_block().parent_idx
    try:
        yield
    finally:
        program.current_block_idx = body
