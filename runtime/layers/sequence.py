"""Sequence layers on padded data: sequence_pool(input [N, T, ...], pool_type, length=[N]).

Fluid 1.x pools LoD tensors (sequences packed end to end with offsets). This runtime has no
LoD: sequences are padded to a common length T and their real lengths are passed as `length`.
"""

from ..errors import ShapeError, where
from ..framework import user_callsite
from ..layer_helper import LayerHelper
from ..ops.sequence import POOL_TYPES


def sequence_pool(input, pool_type, is_test=False, pad_value=0.0, length=None):
    """Pool each padded sequence over time: input [N, T, D...] with int64 `length` ([N] or
    [N, 1]) gives [N, D...]. pool_type: sum, average, sqrt, max, last or first (any case).
    Only the first length[i] steps of row i count; rows of length 0 give pad_value."""
    if length is None:
        raise ShapeError(
            "sequence_pool: LoD tensors are not supported by this runtime. Pad the sequences "
            "to one length T, feed them as [batch, T, ...] and pass their real lengths as an "
            "int64 [batch] variable: sequence_pool(x, pool_type, length=lengths)"
            f"{where(user_callsite())}")
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
    helper.append_op("sequence_pool", inputs={"X": input, "Length": length}, outputs=outputs,
                     attrs={"pooltype": pooltype, "is_test": is_test,
                            "pad_value": float(pad_value)})
    return out


__all__ = ["sequence_pool"]
