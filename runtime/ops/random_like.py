"""uniform_random_batch_size_like / gaussian_random_batch_size_like: random values of `shape`
whose output_dim_idx dimension is Input's input_dim_idx dimension (the batch size, known only
at run time). Seeds as the other random ops (runtime/ops/fill.py)."""

from ..dtypes import convert_dtype
from .fill import _generator
from .registry import defop


def _like_shape(shape, input_shape, attrs):
    shape = [int(d) for d in shape]
    shape[attrs["output_dim_idx"]] = input_shape[attrs["input_dim_idx"]]
    return shape


def _random_like(name, attrs, draw):
    opdef = defop(name, inputs=("Input",), outputs=("Out",), random=True,
                  attrs=dict(attrs, shape=[], dtype="float32", seed=0, input_dim_idx=0,
                             output_dim_idx=0))

    @opdef.infer
    def _shape(ic):
        ic.set_output("Out", _like_shape(ic.attr("shape"), ic.input("Input").shape, ic.attrs),
                      convert_dtype(ic.attr("dtype")))

    @opdef.kernel
    def _kernel(ctx, ins, attrs):
        shape = _like_shape(attrs["shape"], ins["Input"].shape, attrs)
        values = draw(_generator(ctx, attrs), shape, attrs)
        return {"Out": ctx.xp.asarray(values.astype(convert_dtype(attrs["dtype"])))}

    return opdef


_random_like("uniform_random_batch_size_like", {"min": -1.0, "max": 1.0},
             lambda rng, shape, a: rng.uniform(a["min"], a["max"], shape))
_random_like("gaussian_random_batch_size_like", {"mean": 0.0, "std": 1.0},
             lambda rng, shape, a: rng.normal(a["mean"], a["std"], shape))
