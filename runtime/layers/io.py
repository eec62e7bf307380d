"""Input variables: fluid.data (1.6+) and the legacy fluid.layers.data (1.5)."""

from ..dtypes import VarType
from ..framework import default_main_program, user_callsite


def data(name, shape, dtype="float32", lod_level=0):
    """fluid.data: an input variable with exactly `shape` (None or -1 for any size, usually
    the batch dimension). Fed values are checked against it."""
    return _data_var(name, shape, dtype, lod_level, VarType.LOD_TENSOR, True)


def legacy_data(name, shape, append_batch_size=True, dtype="float32", lod_level=0,
                type=VarType.LOD_TENSOR, stop_gradient=True):
    """fluid.layers.data: `shape` without the batch dimension, which is prepended as -1 unless
    append_batch_size=False or the shape already has a None/-1 dimension."""
    shape = [-1 if d is None else d for d in shape]
    if any(d < 0 for d in shape):
        append_batch_size = False
    if append_batch_size:
        shape = [-1] + shape
    var = _data_var(name, shape, dtype, lod_level, type, False)
    var.stop_gradient = stop_gradient
    return var


def _data_var(name, shape, dtype, lod_level, type, need_check_feed):
    if not isinstance(name, str) or not name:
        raise TypeError(f"data: name must be a non-empty string, got {name!r}")
    if shape is None:
        raise TypeError(f"data {name!r}: shape is required")
    shape = [-1 if d is None else int(d) for d in shape]
    block = default_main_program().global_block()
    if name in block.vars:
        existing = block.vars[name]
        if list(existing.shape) != shape:
            raise ValueError(f"data {name!r} is declared twice with different shapes: "
                             f"{list(existing.shape)} and {shape}")
        return existing
    return block.create_var(name=name, shape=shape, dtype=dtype, type=type, lod_level=lod_level,
                            stop_gradient=True, is_data=True, need_check_feed=need_check_feed,
                            callsite=user_callsite())
