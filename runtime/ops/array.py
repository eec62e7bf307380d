"""LoDTensorArray ops: write_to_array, read_from_array, lod_array_length, and select_input
(what `cond` merges its branches with).

An array variable holds a Python list of arrays (entries never written are None). Writing
makes a new list (the old one may still be read by a recorded loop step), so a value, once
made, never changes. Gradients: the gradient of an array is an array of gradients, None where
nothing flowed; gradient arrays add up entry by entry (the `sum` op).
"""

import numpy as np

from ..dtypes import VarType
from .registry import defop, infer_same_as


def _index(i):
    value = int(i.reshape(-1)[0]) if hasattr(i, "reshape") else int(i)
    if value < 0:
        raise IndexError(f"array index {value} is negative")
    return value


# --- write_to_array: Out[i] = X (Out is the array variable, updated) --------------------------
write = defop("write_to_array", inputs=("X", "I"), outputs=("Out",))
write.control = True  # it reads the array's current value from the step's variables


@write.infer
def _write_shape(ic):
    x = ic.input("X")
    ic.set_output("Out", x.shape, x.dtype, type=VarType.LOD_TENSOR_ARRAY, lod_level=x.lod_level)


@write.kernel
def _write(ctx, ins, attrs):
    current = None
    if ctx.env is not None:
        current = ctx.env[ctx.slots[ctx.op.outputs["Out"][0]]]
    array = list(current) if current is not None else []
    i = _index(ins["I"])
    if i >= len(array):
        array.extend([None] * (i + 1 - len(array)))
    array[i] = ins["X"]
    return {"Out": array}


@write.grad(uses=("X", "I"), inputs=("X",), shape_only=("X",))
def _write_grad(ctx, ins, attrs):
    grads, i, x = ins["Out@GRAD"], _index(ins["I"]), ins["X"]
    g = grads[i] if grads is not None and i < len(grads) else None
    return {"X@GRAD": g if g is not None else ctx.xp.zeros(x.shape, x.dtype)}


# --- read_from_array: Out = X[i] ----------------------------------------------------------------
read = defop("read_from_array", inputs=("X", "I"), outputs=("Out",))


read.infer(infer_same_as())


@read.kernel
def _read(ctx, ins, attrs):
    array, i = ins["X"], _index(ins["I"])
    if array is None or i >= len(array) or array[i] is None:
        size = 0 if array is None else len(array)
        raise IndexError(f"read_from_array: index {i} was never written (the array holds "
                         f"{size} entries)")
    return {"Out": array[i]}


@read.grad(uses=("X", "I"), inputs=("X",))
def _read_grad(ctx, ins, attrs):
    """Adds Out@GRAD into entry i of the array's gradient (one array all reads add into)."""
    array, i, dout = ins["X"], _index(ins["I"]), ins["Out@GRAD"]
    current = None
    if ctx.env is not None:
        current = ctx.env[ctx.slots[ctx.op.outputs["X@GRAD"][0]]]
    grads = list(current) if current is not None else []
    grads.extend([None] * (max(len(array), i + 1) - len(grads)))
    grads[i] = dout if grads[i] is None else grads[i] + dout
    return {"X@GRAD": grads}


read.grad_def.control = True  # it reads the gradient array it adds into


# --- lod_array_length ---------------------------------------------------------------------------
length = defop("lod_array_length", inputs=("X",), outputs=("Out",))


@length.infer
def _length_shape(ic):
    ic.set_output("Out", [1], np.dtype("int64"))


@length.kernel
def _length(ctx, ins, attrs):
    return {"Out": np.array([len(ins["X"] or ())], dtype=np.int64)}


# --- select_output: Out[mask] = X (the other outputs get no value) ------------------------------
select_out = defop("select_output", inputs=("X", "Mask"), outputs=("Out*",))


@select_out.infer
def _select_out_shape(ic):
    x = ic.input("X")
    for k in range(len(ic.op.outputs.get("Out", ()))):
        ic.set_output("Out", x.shape, x.dtype, index=k, lod_level=x.lod_level)


@select_out.kernel
def _select_out(ctx, ins, attrs):
    k, n = _index(ins["Mask"]), len(ctx.op.outputs["Out"])
    if not 0 <= k < n:
        raise IndexError(f"select_output: mask {k} is not in [0, {n})")
    return {"Out": [ins["X"] if j == k else None for j in range(n)]}


@select_out.grad(uses=("Mask",), inputs=("X",))
def _select_out_grad(ctx, ins, attrs):
    return {"X@GRAD": ins["Out@GRAD"][_index(ins["Mask"])]}


# --- select_input: Out = X[mask] ----------------------------------------------------------------
select = defop("select_input", inputs=("X*", "Mask"), outputs=("Out",))


@select.infer
def _select_shape(ic):
    xs = ic.inputs("X")
    ic.set_output("Out", xs[0].shape, xs[0].dtype, lod_level=xs[0].lod_level)


@select.kernel
def _select(ctx, ins, attrs):
    k = _index(ins["Mask"])
    value = ins["X"][k]
    if value is None:
        raise ValueError(f"select_input: input {k} (the branch taken) has no value")
    return {"Out": value}


@select.grad(uses=("X", "Mask"), inputs=("X",), shape_only=("X",))
def _select_grad(ctx, ins, attrs):
    k, xs, dout = _index(ins["Mask"]), ins["X"], ins["Out@GRAD"]
    return {"X@GRAD": [dout if j == k else (ctx.xp.zeros(x.shape, x.dtype) if x is not None
                                            else None)
                       for j, x in enumerate(xs)]}
