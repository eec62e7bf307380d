"""Ops that create values: fill_constant, fill_any_like/fill_zeros_like, assign, assign_value,
and the random initialisers (uniform_random, gaussian_random, truncated_gaussian_random)."""

import functools
import threading

import numpy as np

from ..dtypes import convert_dtype
from .registry import Special, defop, infer_same_as

fill_constant = defop("fill_constant", outputs=("Out",),
                      attrs={"shape": [1], "dtype": "float32", "value": 0.0, "force_cpu": False})


@fill_constant.infer
def _fill_constant_shape(ic):
    ic.set_output("Out", ic.attr("shape"), convert_dtype(ic.attr("dtype")))


@fill_constant.kernel
def _fill_constant(ctx, ins, attrs):
    shape = attrs["shape"]
    if shape and min(shape) < 0:  # (any(d < 0 ...) without a generator's frame per step)
        raise ValueError(f"fill_constant needs a fully known shape, got {list(shape)}")
    out = ctx.xp.empty(shape, dtype=_dtype(attrs["dtype"]))  # empty + fill: a third of full's
    out.fill(attrs["value"])  # time for the [1] loss seed every training step makes
    return {"Out": out}


@fill_constant.specialize
def _fill_constant_special(step, ins):
    shape = step.attrs["shape"]
    if shape and min(shape) < 0:  # (the kernel raises)
        return None
    return Special(["{t0} = {k_empty}({k_shape}, dtype={k_dtype})", "{t0}.fill({k_value})",
                    "{Out} = {t0}"], {"empty": np.empty, "shape": shape,
                                      "dtype": _dtype(step.attrs["dtype"]),
                                      "value": step.attrs["value"]})


@functools.lru_cache(maxsize=64)
def _dtype(spelling):
    return convert_dtype(spelling)


fill_any_like = defop("fill_any_like", inputs=("X",), outputs=("Out",),
                      attrs={"value": 0.0, "dtype": -1})


@fill_any_like.infer
def _fill_any_like_shape(ic):
    x = ic.input("X")
    dtype = x.dtype if ic.attr("dtype") in (-1, None) else convert_dtype(ic.attr("dtype"))
    ic.set_output("Out", x.shape, dtype)


@fill_any_like.kernel
def _fill_any_like(ctx, ins, attrs):
    x = ins["X"]
    dtype = x.dtype if attrs["dtype"] in (-1, None) else convert_dtype(attrs["dtype"])
    return {"Out": ctx.xp.full(x.shape, attrs["value"], dtype=dtype)}


fill_zeros_like = defop("fill_zeros_like", inputs=("X",), outputs=("Out",))
fill_zeros_like.infer(infer_same_as())


@fill_zeros_like.kernel
def _fill_zeros_like(ctx, ins, attrs):
    x = ins["X"]
    if x is None:  # a variable the step left without a value (an untaken branch)
        return {"Out": None}
    if isinstance(x, list):  # a LoDTensorArray: no gradient in any entry yet (None = 0)
        return {"Out": [None] * len(x)}
    return {"Out": ctx.xp.zeros_like(x)}


assign = defop("assign", inputs=("X",), outputs=("Out",))
assign.infer(infer_same_as())


@assign.kernel
def _assign(ctx, ins, attrs):
    x = ins["X"]
    if isinstance(x, list):  # a LoDTensorArray: a new list of the same entries
        return {"Out": list(x)}
    return {"Out": x.copy()}


@assign.grad(uses=())
def _assign_grad(ctx, ins, attrs):
    return {"X@GRAD": ins["Out@GRAD"]}


assign_value = defop("assign_value", outputs=("Out",), attrs={"shape": [], "dtype": "float32"})


@assign_value.infer
def _assign_value_shape(ic):
    ic.set_output("Out", ic.attr("shape"), convert_dtype(ic.attr("dtype")))


def _values_attr(attrs):
    """The values: Fluid 1.8's fp32_values / int32_values, or `values` (other dtypes)."""
    for key in ("fp32_values", "int32_values", "values"):
        if attrs.get(key) is not None:
            return attrs[key]
    raise ValueError("assign_value needs fp32_values, int32_values or values")


@assign_value.kernel
def _assign_value(ctx, ins, attrs):
    values = np.asarray(_values_attr(attrs), dtype=convert_dtype(attrs["dtype"]))
    return {"Out": ctx.xp.asarray(values.reshape(attrs["shape"])).copy()}


# --- random initialisers --------------------------------------------------------------------
def _generator(ctx, attrs):
    """A fixed seed attr gives the same numbers every time (Paddle's semantics); seed 0 draws
    from the executor's generator, itself seeded by Program.random_seed when that is set."""
    seed = attrs.get("seed", 0)
    if not seed:
        return ctx.rng
    # one generator per seed and thread, rewound to the seed's start on each use: making a new
    # one each time would put its small state arrays among the op's outputs in the memory pool
    cache = _SEEDED.__dict__.setdefault("generators", {})
    entry = cache.get(seed)
    if entry is None:
        gen = np.random.default_rng(seed)
        entry = cache[seed] = (gen, gen.bit_generator.state)
    gen, start = entry
    gen.bit_generator.state = start
    return gen


_SEEDED = threading.local()


def _random_op(name, attrs, draw):
    opdef = defop(name, outputs=("Out",), attrs=dict(attrs, shape=[], dtype="float32", seed=0),
                  random=True)

    @opdef.infer
    def _shape(ic):
        ic.set_output("Out", ic.attr("shape"), convert_dtype(ic.attr("dtype")))

    @opdef.kernel
    def _kernel(ctx, ins, attrs):
        shape = [int(d) for d in attrs["shape"]]
        values = draw(_generator(ctx, attrs), shape, attrs)
        return {"Out": ctx.xp.asarray(values.astype(convert_dtype(attrs["dtype"])))}

    return opdef


def _truncated(rng, shape, attrs):
    """Normal values, redrawn until within two standard deviations of the mean."""
    values = rng.standard_normal(shape)
    bad = np.abs(values) > 2.0
    while bad.any():
        values[bad] = rng.standard_normal(int(bad.sum()))
        bad = np.abs(values) > 2.0
    return values * attrs["std"] + attrs["mean"]


_random_op("uniform_random", {"min": -1.0, "max": 1.0},
           lambda rng, shape, a: rng.uniform(a["min"], a["max"], shape))
_random_op("gaussian_random", {"mean": 0.0, "std": 1.0},
           lambda rng, shape, a: rng.normal(a["mean"], a["std"], shape))
_random_op("truncated_gaussian_random", {"mean": 0.0, "std": 1.0}, _truncated)
