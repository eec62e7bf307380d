"""Sequence layers: sequence_pool, sequence_last_step, sequence_first_step.

sequence_pool takes Fluid 1.x's LoD tensors (sequences packed end to end, runtime/lod.py) or,
with `length=`, sequences padded to a common length T ([N, T, ...]) and their real lengths.
"""

from ..errors import where
from ..framework import user_callsite
from ..layer_helper import LayerHelper
from ..ops.sequence import POOL_TYPES


def sequence_pool(input, pool_type, is_test=False, pad_value=0.0, length=None):
    """Pool each sequence: a LoD input gives one row per sequence of its last LoD level; a
    padded input [N, T, D...] with int64 `length` ([N] or [N, 1]) gives [N, D...], only the
    first length[i] steps of row i counting. pool_type: sum, average, sqrt, max, last or first
    (any case). Empty sequences give pad_value."""
    pooltype = str(pool_type).upper()
    if pooltype not in POOL_TYPES:
        raise ValueError(f"sequence_pool: pool_type={pool_type!r} must be one of "
                         f"{', '.join(t.lower() for t in POOL_TYPES)}{where(user_callsite())}")
    helper = LayerHelper("sequence_pool")
    out = helper.create_variable_for_type_inference(input.dtype)
    outputs = {"Out": out}
    if pooltype == "MAX":
        outputs["MaxIndex"] = helper.create_variable_for_type_inference("int32",
                                                                        stop_gradient=True)
    inputs = {"X": input} if length is None else {"X": input, "Length": length}
    helper.append_op("sequence_pool", inputs=inputs, outputs=outputs,
                     attrs={"pooltype": pooltype, "is_test": is_test,
                            "pad_value": float(pad_value)})
    return out


def sequence_last_step(input):
    """The last step of each sequence (sequence_pool 'last')."""
    return sequence_pool(input, "last")


def sequence_first_step(input):
    """The first step of each sequence (sequence_pool 'first')."""
    return sequence_pool(input, "first")


__all__ = ["sequence_pool", "sequence_last_step", "sequence_first_step"]
