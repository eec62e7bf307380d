"""layers.dynamic_lstm (Fluid 1.8): an LSTM over LoD sequences, one `lstm` op (ops/lstm.py).

The input is already projected to the 4 gates ([rows, 4 * hidden], e.g. by an fc without
bias); the layer adds the recurrent weight `lstm_N.w_0` [hidden, 4 * hidden] and the bias
`lstm_N.b_0` [1, 4 * hidden] ([1, 7 * hidden] with peepholes: the gate biases, then the
peephole weights). Returns (hidden, cell), both [rows, hidden] with the input's LoD.
"""

from ..errors import where
from ..framework import Variable, user_callsite
from ..layer_helper import LayerHelper

__all__ = ["dynamic_lstm"]

_ACTIVATIONS = ("sigmoid", "tanh", "relu", "identity")


def dynamic_lstm(input, size, h_0=None, c_0=None, param_attr=None, bias_attr=None,
                 use_peepholes=True, is_reverse=False, gate_activation="sigmoid",
                 cell_activation="tanh", candidate_activation="tanh", dtype="float32",
                 name=None):
    """LSTM over the sequences of `input` ([rows, size], lod_level >= 1); size is 4 * hidden.
    h_0 / c_0: initial states [sequences, hidden] (zeros when None; give both or neither)."""
    if not isinstance(input, Variable):
        raise TypeError(f"dynamic_lstm: input must be a Variable, got {type(input).__name__}")
    if size % 4:
        raise ValueError(f"dynamic_lstm: size={size} must be 4 * hidden size"
                         f"{where(user_callsite())}")
    if (h_0 is None) != (c_0 is None):
        raise ValueError(f"dynamic_lstm: give both h_0 and c_0, or neither"
                         f"{where(user_callsite())}")
    for what, act in (("gate_activation", gate_activation), ("cell_activation", cell_activation),
                      ("candidate_activation", candidate_activation)):
        if act not in _ACTIVATIONS:
            raise ValueError(f"dynamic_lstm: {what}={act!r} must be one of {_ACTIVATIONS}")
    helper = LayerHelper("lstm", param_attr=param_attr, bias_attr=bias_attr, name=name)
    hidden_size = size // 4
    weight = helper.create_parameter(helper.param_attr, [hidden_size, size], dtype)
    bias_width = 7 * hidden_size if use_peepholes else size
    bias = helper.create_parameter(helper.bias_attr, [1, bias_width], dtype, is_bias=True)
    outs = {k: helper.create_variable_for_type_inference(dtype)
            for k in ("Hidden", "Cell", "BatchGate", "BatchCellPreAct")}
    inputs = {"Input": input, "Weight": weight, "Bias": bias}
    if h_0 is not None:
        inputs.update(H0=h_0, C0=c_0)
    helper.append_op("lstm", inputs=inputs, outputs=outs,
                     attrs={"use_peepholes": use_peepholes, "is_reverse": is_reverse,
                            "gate_activation": gate_activation,
                            "cell_activation": cell_activation,
                            "candidate_activation": candidate_activation})
    return outs["Hidden"], outs["Cell"]
