"""fluid.layers.RNNCell, GRUCell, LSTMCell and rnn (Fluid 1.8's cell API).

A cell maps (step inputs, states) to (step outputs, new states); both may be nested
structures (list, tuple, dict) of variables. rnn(cell, inputs) runs the cell over the time
dimension of its inputs (runtime/layers/time_loop.py: a while loop, so the sequence length
may be unknown when the program is built). GRUCell and LSTMCell wrap
fluid.contrib.layers.BasicGRUUnit and BasicLSTMUnit, with their parameter names
(`GRUCell/BasicGRUUnit_0.w_0` ...)."""

from ..dtypes import convert_dtype
from ..framework import Variable
from .logic import check_variable
from .nn import elementwise_mul
from .tensor import fill_constant_batch_size_like, transpose
from .time_loop import time_loop
from .utils import flatten, map_structure, pack_sequence_as

__all__ = ["RNNCell", "GRUCell", "LSTMCell", "rnn"]

_FLOATS = ("float32", "float64")


def _check_float_dtype(dtype, api):
    name = convert_dtype(dtype).name
    if name not in _FLOATS:
        raise TypeError(f"The data type of 'dtype' in {api} must be {list(_FLOATS)}, but "
                        f"received {name}. ")


def _check_type(value, what, types, api):
    if not isinstance(value, types):
        raise TypeError(f"The type of '{what}' in {api} must be {types}, but received "
                        f"{type(value)}. ")


# --- cells ------------------------------------------------------------------------------------
class RNNCell:
    """Base class of cells: subclasses implement call(inputs, states) -> (outputs,
    new_states), and state_shape (and optionally state_dtype) for get_initial_states."""

    def call(self, inputs, states, **kwargs):
        raise NotImplementedError("RNNCell must implent the call function.")

    def __call__(self, inputs, states, **kwargs):
        return self.call(inputs, states, **kwargs)

    def get_initial_states(self, batch_ref, shape=None, dtype="float32", init_value=0,
                           batch_dim_idx=0):
        """States filled with init_value: one variable per shape of `shape` (default:
        state_shape; a nested structure whose leaves are lists of ints, -1 for the batch size
        put in front when missing), the batch size taken from dimension batch_dim_idx of the
        first variable of batch_ref. dtype: one dtype, or a structure like shape's."""
        if shape is not None:
            _check_type(shape, "shape", (list, tuple), "RNNCell")
        ref = flatten(batch_ref)[0]
        shapes = self.state_shape if shape is None else shape
        try:
            dtypes = self.state_dtype if dtype is None else dtype
        except NotImplementedError:
            dtypes = "float32"
        flat_shapes = _flatten_shapes(shapes)
        flat_dtypes = flatten(dtypes)
        if len(flat_dtypes) == 1:
            flat_dtypes = flat_dtypes * len(flat_shapes)
        for d in flat_dtypes:
            _check_float_dtype(d, "RNNCell")
        states = [fill_constant_batch_size_like(ref, _with_batch_dim(s), d, init_value,
                                                input_dim_idx=batch_dim_idx)
                  for s, d in zip(flat_shapes, flat_dtypes)]
        return _pack_shapes(shapes, states)

    @property
    def state_shape(self):
        raise NotImplementedError("Please add implementaion for `state_shape` in the used cell.")

    @property
    def state_dtype(self):
        raise NotImplementedError("Please add implementaion for `state_dtype` in the used cell.")


def _is_shape(value):
    """A shape (a list or tuple of ints) is a leaf of a structure of shapes."""
    return isinstance(value, (list, tuple)) and all(isinstance(d, int) for d in value)


def _flatten_shapes(shapes):
    """The shapes of a nested structure of shapes, depth first (dict values by sorted key)."""
    if _is_shape(shapes):
        return [list(shapes)]
    items = [shapes[k] for k in sorted(shapes)] if isinstance(shapes, dict) else shapes
    return [s for item in items for s in _flatten_shapes(item)]


def _pack_shapes(shapes, flat):
    """flat arranged like the structure of shapes."""
    leaves = iter(flat)

    def pack(node):
        if _is_shape(node):
            return next(leaves)
        if isinstance(node, dict):
            return {k: pack(node[k]) for k in sorted(node)}
        return type(node)(pack(item) for item in node)

    return pack(shapes)


def _with_batch_dim(shape):
    shape = list(shape)
    return shape if shape and shape[0] == -1 else [-1] + shape


class GRUCell(RNNCell):
    """A GRU step (BasicGRUUnit): call(inputs [B, in], states h [B, hidden]) -> (h_new,
    h_new)."""

    def __init__(self, hidden_size, param_attr=None, bias_attr=None, gate_activation=None,
                 activation=None, dtype="float32", name="GRUCell"):
        _check_type(hidden_size, "hidden_size", int, "GRUCell")
        _check_float_dtype(dtype, "GRUCell")
        from ..contrib.layers.rnn_impl import BasicGRUUnit
        self.hidden_size = hidden_size
        self.gru_unit = BasicGRUUnit(name, hidden_size, param_attr, bias_attr,
                                     gate_activation, activation, dtype)

    def call(self, inputs, states):
        check_variable(inputs, "inputs", "GRUCell", _FLOATS)
        check_variable(states, "states", "GRUCell", _FLOATS)
        new_hidden = self.gru_unit(inputs, states)
        return new_hidden, new_hidden

    @property
    def state_shape(self):
        return [self.hidden_size]


class LSTMCell(RNNCell):
    """An LSTM step (BasicLSTMUnit): call(inputs [B, in], states [h, c] each [B, hidden]) ->
    (h_new, [h_new, c_new])."""

    def __init__(self, hidden_size, param_attr=None, bias_attr=None, gate_activation=None,
                 activation=None, forget_bias=1.0, dtype="float32", name="LSTMCell"):
        _check_type(hidden_size, "hidden_size", int, "LSTMCell")
        _check_float_dtype(dtype, "LSTMCell")
        from ..contrib.layers.rnn_impl import BasicLSTMUnit
        self.hidden_size = hidden_size
        self.lstm_unit = BasicLSTMUnit(name, hidden_size, param_attr, bias_attr,
                                       gate_activation, activation, forget_bias, dtype)

    def call(self, inputs, states):
        check_variable(inputs, "inputs", "LSTMCell", _FLOATS)
        _check_type(states, "states", list, "LSTMCell")
        for k, state in enumerate(states):
            check_variable(state, f"state[{k}]", "LSTMCell", _FLOATS)
        pre_hidden, pre_cell = states
        new_hidden, new_cell = self.lstm_unit(inputs, pre_hidden, pre_cell)
        return new_hidden, [new_hidden, new_cell]

    @property
    def state_shape(self):
        return [[self.hidden_size], [self.hidden_size]]


# --- rnn --------------------------------------------------------------------------------------
def _check_rnn_args(inputs, initial_states, sequence_length):
    """TypeError, as Paddle's rnn, for arguments that are not (structures of) float
    Variables."""
    _check_type(inputs, "inputs", (Variable, list, tuple), "rnn")
    if isinstance(inputs, (list, tuple)):
        for k, x in enumerate(inputs):
            check_variable(x, f"inputs[{k}]", "rnn", _FLOATS)
    _check_type(initial_states, "initial_states", (Variable, list, tuple, type(None)), "rnn")
    if isinstance(initial_states, (list, tuple)):
        for k, state in enumerate(flatten(initial_states)):
            check_variable(state, f"states[{k}]", "rnn", _FLOATS)
    _check_type(sequence_length, "sequence_length", (Variable, type(None)), "rnn")


def _swap_batch_time(x):
    """[B, T, ...] <-> [T, B, ...]."""
    return transpose(x, [1, 0] + list(range(2, len(x.shape))))


def _keep_finished(state, new_state, mask):
    """new_state where mask [B] is 1, state where it is 0 (past a sequence's end)."""
    return elementwise_mul(new_state, mask, axis=0) + elementwise_mul(state, 1.0 - mask, axis=0)


def rnn(cell, inputs, initial_states=None, sequence_length=None, time_major=False,
        is_reverse=False, **kwargs):
    """Run `cell` over the time steps of `inputs` (a structure of [B, T, ...] variables, or
    [T, B, ...] when time_major). initial_states: default cell.get_initial_states;
    sequence_length ([B]) makes each sequence keep its state after its last step; is_reverse
    runs from the last step to the first; kwargs go to cell.call.
    Returns (outputs, final_states): outputs stacked over time like inputs' layout (in the
    inputs' time order also when is_reverse), final_states the states after the last step."""
    _check_rnn_args(inputs, initial_states, sequence_length)
    if initial_states is None:
        initial_states = cell.get_initial_states(batch_ref=inputs,
                                                 batch_dim_idx=1 if time_major else 0)
    for state in flatten(initial_states):
        state.stop_gradient = False
    if not time_major:
        inputs = map_structure(_swap_batch_time, inputs)

    def step(step_inputs, states, mask):
        outputs, new_states = cell.call(step_inputs, states, **kwargs)
        if mask is not None:
            flat = [_keep_finished(s, n, mask)
                    for s, n in zip(flatten(states), flatten(new_states))]
            new_states = pack_sequence_as(new_states, flat)
        return outputs, new_states

    outputs, final_states = time_loop(step, inputs, initial_states, sequence_length,
                                      is_reverse)
    if not time_major:
        outputs = map_structure(_swap_batch_time, outputs)
    return outputs, final_states

