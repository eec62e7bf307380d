"""layers.linear_chain_crf and layers.crf_decoding (Fluid 1.8), over LoD sequences (ops/crf.py).

linear_chain_crf(input, label) creates the transition parameter [tags + 2, tags] (rows: start
scores, end scores, then tag-to-tag scores) and returns each sequence's negative
log-likelihood [sequences, 1]; crf_decoding(input, param_attr) reuses that parameter (by the
name in param_attr) and returns the Viterbi tags [rows, 1] (with label: 1 where they match).
"""

from ..errors import where
from ..framework import Variable, user_callsite
from ..layer_helper import LayerHelper

__all__ = ["linear_chain_crf", "crf_decoding"]


def _check(input, length, layer):
    if not isinstance(input, Variable):
        raise TypeError(f"{layer}: input must be a Variable, got {type(input).__name__}")
    if length is not None:
        raise NotImplementedError(f"{layer}: the padded layout (length=) is not supported by "
                                  f"this runtime; feed LoD sequences{where(user_callsite())}")
    if len(input.shape) != 2 or input.shape[1] < 0:
        raise ValueError(f"{layer}: input must be [rows, tags] with the tag count known, got "
                         f"{list(input.shape)}{where(user_callsite())}")
    return input.shape[1]


def linear_chain_crf(input, label, param_attr=None, length=None):
    """The negative log-likelihood of `label` (int64 [rows, 1], the input's LoD) under a
    linear-chain CRF with emissions `input` [rows, tags]; one value per sequence."""
    tags = _check(input, length, "linear_chain_crf")
    helper = LayerHelper("linear_chain_crf", param_attr=param_attr)
    transition = helper.create_parameter(helper.param_attr, [tags + 2, tags], input.dtype)
    outs = {k: helper.create_variable_for_type_inference(input.dtype)
            for k in ("Alpha", "EmissionExps", "TransitionExps", "LogLikelihood")}
    helper.append_op("linear_chain_crf",
                     inputs={"Emission": input, "Transition": transition, "Label": label},
                     outputs=outs)
    return outs["LogLikelihood"]


def crf_decoding(input, param_attr, label=None, length=None):
    """The best tagging of each sequence of `input` under the transition parameter named by
    param_attr (that of linear_chain_crf); with `label`, 1 where it matches."""
    _check(input, length, "crf_decoding")
    helper = LayerHelper("crf_decoding", param_attr=param_attr)
    name = getattr(param_attr, "name", None)
    block = helper.main_program.global_block()
    if not name or not block.has_var(name):
        raise ValueError(f"crf_decoding: param_attr must name the transition parameter "
                         f"linear_chain_crf created (got {name!r}){where(user_callsite())}")
    path = helper.create_variable_for_type_inference("int64", stop_gradient=True)
    inputs = {"Emission": input, "Transition": block.var(name)}
    if label is not None:
        inputs["Label"] = label
    helper.append_op("crf_decoding", inputs=inputs, outputs={"ViterbiPath": path})
    return path
