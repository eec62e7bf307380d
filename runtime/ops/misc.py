"""Small ops: shape (a tensor's dimensions as an int32 tensor), seed (an int32 seed for a
random op: the attr, or a fresh draw when it is 0) and rnn_memory_helper (the identity
StaticRNN's memories pass through; its gradient is zero where none flows in)."""

import numpy as np

from .registry import defop, infer_same_as

shape = defop("shape", inputs=("Input",), outputs=("Out",))


@shape.infer
def _shape_shape(ic):
    ic.set_output("Out", [len(ic.input("Input").shape)], np.dtype("int32"))


@shape.kernel
def _shape(ctx, ins, attrs):
    return {"Out": ctx.xp.asarray(np.asarray(ins["Input"].shape, dtype=np.int32))}


memory_helper = defop("rnn_memory_helper", inputs=("X",), outputs=("Out",),
                      attrs={"dtype": -1})
memory_helper.infer(infer_same_as())


@memory_helper.kernel
def _memory_helper(ctx, ins, attrs):
    return {"Out": ins["X"]}


@memory_helper.grad(uses=("X", "Out"), shape_only=("X", "Out"))
def _memory_helper_grad(ctx, ins, attrs):
    dout, x = ins.get("Out@GRAD"), ins["X"]
    return {"X@GRAD": dout if dout is not None else ctx.xp.zeros(x.shape, x.dtype)}


seed = defop("seed", outputs=("Out",), attrs={"seed": 0}, random=True)


@seed.infer
def _seed_shape(ic):
    ic.set_output("Out", [1], np.dtype("int32"))


@seed.kernel
def _seed(ctx, ins, attrs):
    value = attrs["seed"] or int(ctx.rng.integers(1, 2 ** 31 - 1))
    return {"Out": ctx.xp.asarray(np.array([value], dtype=np.int32))}
