"""fluid.contrib.layers.rnn_impl (Fluid 1.8): GRU and LSTM written with basic ops.

BasicGRUUnit / BasicLSTMUnit compute one step; basic_gru / basic_lstm run stacks of them over
a sequence (several layers, optionally both directions, optionally masked by the sequences'
lengths). Everything is matmul, elementwise, sigmoid/tanh, split and concat, so gradients come
from those ops; the time loop is runtime/layers/time_loop.py.

Gate layouts, as in Paddle (the tests and saved models rely on them):
  GRU:  gate weight [input+hidden, 2*hidden] gives r | u; candidate weight [input+hidden,
        hidden] is applied to [x, r*h]; h_new = u*h + (1-u)*tanh(candidate).
  LSTM: weight [input+hidden, 4*hidden] gives i | j | f | o;
        c_new = c*sigmoid(f + forget_bias) + sigmoid(i)*tanh(j); h_new = tanh(c_new)*sigmoid(o).
Parameters are named `<name_scope>/BasicGRUUnit_<k>.w_0` etc. (w_0, w_1, b_0, b_1 for the GRU's
gate and candidate weights and biases; w_0, b_0 for the LSTM).

Difference from Paddle 1.8.5: its BasicLSTMUnit ignores gate_activation and activation (it
always uses sigmoid and tanh); here they are honoured (their defaults are the same)."""

import copy

from ... import layers, unique_name
from ...layer_helper import LayerHelper
from ...param_attr import ParamAttr
from ...layers.time_loop import time_loop

__all__ = ["BasicGRUUnit", "basic_gru", "BasicLSTMUnit", "basic_lstm"]


# --- units ------------------------------------------------------------------------------------
class _Unit:
    """A static-graph stand-in for Paddle's dygraph Layer: a unique full name under
    name_scope, parameters created on the first call (when the input size is known)."""

    def __init__(self, name_scope, hidden_size, param_attr, bias_attr, gate_activation,
                 activation, dtype):
        self._full_name = unique_name.generate(f"{name_scope}/{type(self).__name__}")
        self._helper = LayerHelper(type(self).__name__, name=self._full_name)
        self._name = name_scope
        self._hidden_size = hidden_size
        self._param_attr = param_attr
        self._bias_attr = bias_attr
        self._gate_activation = gate_activation or layers.sigmoid
        self._activation = activation or layers.tanh
        self._dtype = dtype
        self._built = False

    def full_name(self):
        return self._full_name

    def __call__(self, *inputs):
        if not self._built:
            input_size = int(inputs[0].shape[-1])
            if input_size <= 0:
                raise ValueError(f"{type(self).__name__}: the input's last dimension must be "
                                 f"known, got shape {list(inputs[0].shape)}")
            self._build_once(input_size)
            self._built = True
        return self.forward(*inputs)

    def _parameter(self, attr, shape, is_bias=False):
        return self._helper.create_parameter(attr=attr, shape=shape, dtype=self._dtype,
                                             is_bias=is_bias)


def _suffixed(attr, suffix):
    """attr with `suffix` added to its name, or attr itself when it names nothing."""
    if attr is None or attr is False:
        return attr
    attr = ParamAttr._to_attr(attr)
    if attr.name is None:
        return attr
    attr = copy.deepcopy(attr)
    attr.name += suffix
    return attr


class BasicGRUUnit(_Unit):
    """One GRU step: new_hidden = unit(input [B, in], pre_hidden [B, hidden])."""

    def __init__(self, name_scope, hidden_size, param_attr=None, bias_attr=None,
                 gate_activation=None, activation=None, dtype="float32"):
        super().__init__(name_scope, hidden_size, param_attr, bias_attr, gate_activation,
                         activation, dtype)

    def _build_once(self, input_size):
        rows, hidden = input_size + self._hidden_size, self._hidden_size
        self._gate_weight = self._parameter(_suffixed(self._param_attr, "_gate"),
                                            [rows, 2 * hidden])
        self._candidate_weight = self._parameter(_suffixed(self._param_attr, "_candidate"),
                                                 [rows, hidden])
        self._gate_bias = self._parameter(_suffixed(self._bias_attr, "_gate"), [2 * hidden],
                                          is_bias=True)
        self._candidate_bias = self._parameter(_suffixed(self._bias_attr, "_candidate"),
                                               [hidden], is_bias=True)

    def forward(self, input, pre_hidden):
        gates = layers.matmul(layers.concat([input, pre_hidden], 1), self._gate_weight)
        gates = self._gate_activation(layers.elementwise_add(gates, self._gate_bias))
        reset, update = layers.split(gates, num_or_sections=2, dim=1)
        candidate = layers.matmul(layers.concat([input, reset * pre_hidden], 1),
                                  self._candidate_weight)
        candidate = self._activation(layers.elementwise_add(candidate, self._candidate_bias))
        return update * pre_hidden + (1.0 - update) * candidate


class BasicLSTMUnit(_Unit):
    """One LSTM step: new_hidden, new_cell = unit(input [B, in], pre_hidden, pre_cell)."""

    def __init__(self, name_scope, hidden_size, param_attr=None, bias_attr=None,
                 gate_activation=None, activation=None, forget_bias=1.0, dtype="float32"):
        super().__init__(name_scope, hidden_size, param_attr, bias_attr, gate_activation,
                         activation, dtype)
        self._forget_bias = layers.fill_constant([1], dtype=dtype, value=forget_bias)
        self._forget_bias.stop_gradient = False

    def _build_once(self, input_size):
        rows, hidden = input_size + self._hidden_size, self._hidden_size
        self._weight = self._parameter(self._param_attr, [rows, 4 * hidden])
        self._bias = self._parameter(self._bias_attr, [4 * hidden], is_bias=True)

    def forward(self, input, pre_hidden, pre_cell):
        gates = layers.matmul(layers.concat([input, pre_hidden], 1), self._weight)
        gates = layers.elementwise_add(gates, self._bias)
        i, j, f, o = layers.split(gates, num_or_sections=4, dim=-1)
        forget = self._gate_activation(layers.elementwise_add(f, self._forget_bias))
        new_cell = layers.elementwise_add(
            layers.elementwise_mul(pre_cell, forget),
            layers.elementwise_mul(self._gate_activation(i), self._activation(j)))
        new_hidden = self._activation(new_cell) * self._gate_activation(o)
        return new_hidden, new_cell


# --- multi-layer, bidirectional RNNs ------------------------------------------------------------
def _units(make, name, num_layers, param_attr, bias_attr, reverse):
    """The units of the layers of one direction: <name>_layers_<k> (forward) or
    <name>_reverse_layers_<k>, their named attributes suffixed _fw_w_<k> / _bw_b_<k> ..."""
    tag, direction = ("_reverse_layers_", "bw") if reverse else ("_layers_", "fw")
    return [make(f"{name}{tag}{k}", _suffixed(param_attr, f"_{direction}_w_{k}"),
                 _suffixed(bias_attr, f"_{direction}_b_{k}")) for k in range(num_layers)]


def _keep_finished(pre, new, mask):
    """new where mask [B] is 1, pre where it is 0 (rows past a sequence's end keep their
    state)."""
    return (layers.elementwise_mul(new, mask, axis=0)
            + layers.elementwise_mul(pre, 1.0 - mask, axis=0))


def _initial_states(init, num_layers, num_dirs, direction, hidden_size, batch_ref):
    """Per layer, the [B, hidden] initial value of one state for one direction: a slice of
    init ([num_layers*num_dirs, B, hidden]) or zeros shaped after batch_ref ([T, B, ...])."""
    if init is None:
        return [layers.fill_constant_batch_size_like(batch_ref, [-1, hidden_size],
                                                     batch_ref.dtype, 0.0, input_dim_idx=1)
                for _ in range(num_layers)]
    init = layers.reshape(init, [num_layers, num_dirs, -1, hidden_size])
    return [layers.reshape(layers.slice(init, axes=[0, 1], starts=[k, direction],
                                        ends=[k + 1, direction + 1]), [-1, hidden_size])
            for k in range(num_layers)]


def _run_stack(units, rnn_input, states, sequence_length, is_reverse, dropout):
    """Run one direction's stack of units over rnn_input [T, B, in]. states: per layer, the
    list of the unit's state values (hidden, or hidden and cell). Returns the top layer's
    outputs [T, B, hidden] (after dropout, as Paddle's) and the final states per layer."""

    def step(x, layer_states, mask):
        new_states = []
        for unit, pre in zip(units, layer_states):
            new = unit(x, *pre)
            new = list(new) if isinstance(new, (list, tuple)) else [new]
            if mask is not None:
                new = [_keep_finished(p, n, mask) for p, n in zip(pre, new)]
            new_states.append(new)
            x = dropout(new[0])
        return x, new_states

    return time_loop(step, rnn_input, states, sequence_length, is_reverse)


def _stack_finals(finals, hidden_size):
    """[num_layers, B, hidden] from the layers' final [B, hidden] values."""
    return layers.reshape(layers.concat(finals, axis=0), [len(finals), -1, hidden_size])


def _basic_rnn(make, inits, input, hidden_size, num_layers, sequence_length, dropout,
               bidirectional, batch_first, param_attr, bias_attr, name):
    """Shared by basic_gru and basic_lstm. inits: the user's initial value (or None) of each
    state kind. Returns the outputs and, per state kind, the final values
    [num_layers*num_dirs, B, hidden]."""
    if batch_first:
        input = layers.transpose(input, [1, 0, 2])
    num_dirs = 2 if bidirectional else 1
    outputs, finals = [], []
    for direction in range(num_dirs):
        units = _units(make, name, num_layers, param_attr, bias_attr, reverse=direction == 1)
        per_kind = [_initial_states(init, num_layers, num_dirs, direction, hidden_size, input)
                    for init in inits]
        states = [list(layer) for layer in zip(*per_kind)]
        out, last = _run_stack(units, input, states, sequence_length, direction == 1, dropout)
        outputs.append(out)
        finals.append([_stack_finals([layer[k] for layer in last], hidden_size)
                       for k in range(len(inits))])
    rnn_out = outputs[0] if num_dirs == 1 else layers.concat(outputs, axis=2)
    if num_dirs == 2:  # [num_layers, 2, B, hidden] flattened to [num_layers*2, B, hidden]
        finals = [[layers.reshape(layers.concat([fw, bw], axis=1),
                                  [num_layers * 2, -1, hidden_size])
                   for fw, bw in zip(*finals)]]
    if batch_first:
        rnn_out = layers.transpose(rnn_out, [1, 0, 2])
    return rnn_out, finals[0]


def _dropout_fn(dropout_prob, **kwargs):
    if dropout_prob is None or dropout_prob <= 0.0:
        return lambda x: x
    return lambda x: layers.dropout(x, dropout_prob=dropout_prob, **kwargs)


def basic_gru(input, init_hidden, hidden_size, num_layers=1, sequence_length=None,
              dropout_prob=0.0, bidirectional=False, batch_first=True, param_attr=None,
              bias_attr=None, gate_activation=None, activation=None, dtype="float32",
              name="basic_gru"):
    """A GRU of num_layers layers over input ([B, T, in] when batch_first, else [T, B, in]).
    init_hidden: None (zeros) or [num_layers*num_dirs, B, hidden]; sequence_length: None or
    [B] lengths (later steps keep the state). Returns rnn_out ([B, T, hidden*num_dirs] or
    time-major) and last_hidden [num_layers*num_dirs, B, hidden]."""

    def make(scope, p_attr, b_attr):
        return BasicGRUUnit(scope, hidden_size, p_attr, b_attr, gate_activation, activation,
                            dtype)

    rnn_out, (last_hidden,) = _basic_rnn(
        make, [init_hidden], input, hidden_size, num_layers, sequence_length,
        _dropout_fn(dropout_prob), bidirectional, batch_first, param_attr, bias_attr, name)
    return rnn_out, last_hidden


def basic_lstm(input, init_hidden, init_cell, hidden_size, num_layers=1, sequence_length=None,
               dropout_prob=0.0, bidirectional=False, batch_first=True, param_attr=None,
               bias_attr=None, gate_activation=None, activation=None, forget_bias=1.0,
               dtype="float32", name="basic_lstm"):
    """An LSTM of num_layers layers over input ([B, T, in] when batch_first, else
    [T, B, in]). init_hidden / init_cell: None (zeros) or [num_layers*num_dirs, B, hidden];
    sequence_length: None or [B] lengths. Returns rnn_out, last_hidden and last_cell (the
    last two [num_layers*num_dirs, B, hidden])."""

    def make(scope, p_attr, b_attr):
        return BasicLSTMUnit(scope, hidden_size, param_attr=p_attr, bias_attr=b_attr,
                             gate_activation=gate_activation, activation=activation,
                             forget_bias=forget_bias, dtype=dtype)

    rnn_out, (last_hidden, last_cell) = _basic_rnn(
        make, [init_hidden, init_cell], input, hidden_size, num_layers, sequence_length,
        _dropout_fn(dropout_prob, dropout_implementation="upscale_in_train"), bidirectional,
        batch_first, param_attr, bias_attr, name)
    return rnn_out, last_hidden, last_cell
