"""Initializers: each adds the op that fills a parameter to the (startup) block.

As in Fluid 1.8 the op is prepended to the block; a float16 parameter is filled in float32
and cast (a second, appended op); a seed of 0 takes the program's random_seed (so, as in
Paddle, initializers of one program with random_seed set draw from the same seed).
"""

import numpy as np

from . import unique_name
from .dtypes import convert_dtype

_FP32, _FP16 = np.dtype("float32"), np.dtype("float16")


class Initializer:
    """Base class: `init(var, block)` adds the op that initialises `var` to `block`."""

    def __call__(self, var, block):
        raise NotImplementedError

    @staticmethod
    def _fans(var):
        shape = var.shape
        if not shape:
            return 1, 1
        if len(shape) == 1:
            return shape[0], shape[0]
        if len(shape) == 2:
            return shape[0], shape[1]
        receptive = int(np.prod(shape[2:]))
        return shape[1] * receptive, shape[0] * receptive

    @staticmethod
    def _fill(var, block, op_type, attrs):
        """Prepend `op_type` writing var (via a float32 twin and a cast for float16)."""
        out = var
        if var.dtype == _FP16:
            out = block.create_var(name=unique_name.generate(f"{var.name}.cast_fp16"),
                                   shape=var.shape, dtype=_FP32, persistable=False)
        attrs = dict(attrs, shape=list(var.shape), dtype=out.dtype.name)
        op = block._prepend_op(op_type, outputs={"Out": out}, attrs=attrs)
        if out is not var:
            block.append_op("cast", inputs={"X": out}, outputs={"Out": var},
                            attrs={"in_dtype": _FP32.name, "out_dtype": _FP16.name})
        return op


def _seed(seed, block):
    return int(seed) if seed else int(block.program.random_seed)


class ConstantInitializer(Initializer):
    def __init__(self, value=0.0, force_cpu=False):
        self.value = float(value)
        self.force_cpu = force_cpu

    def __call__(self, var, block):
        return self._fill(var, block, "fill_constant",
                          {"value": self.value, "force_cpu": self.force_cpu})


class UniformInitializer(Initializer):
    def __init__(self, low=-1.0, high=1.0, seed=0):
        if low > high:
            raise ValueError(f"UniformInitializer needs low <= high, got {low} > {high}")
        self.low, self.high, self.seed = float(low), float(high), int(seed)

    def __call__(self, var, block):
        return self._fill(var, block, "uniform_random",
                          {"min": self.low, "max": self.high, "seed": _seed(self.seed, block)})


class NormalInitializer(Initializer):
    def __init__(self, loc=0.0, scale=1.0, seed=0):
        self.loc, self.scale, self.seed = float(loc), float(scale), int(seed)

    def __call__(self, var, block):
        return self._fill(var, block, "gaussian_random",
                          {"mean": self.loc, "std": self.scale, "seed": _seed(self.seed, block)})


class TruncatedNormalInitializer(NormalInitializer):
    """Normal values redrawn until within two standard deviations of the mean."""

    def __call__(self, var, block):
        return self._fill(var, block, "truncated_gaussian_random",
                          {"mean": self.loc, "std": self.scale, "seed": _seed(self.seed, block)})


class XavierInitializer(Initializer):
    """Glorot: uniform in +-sqrt(6/(fan_in+fan_out)), or normal with std sqrt(2/(fan_in+fan_out))."""

    def __init__(self, uniform=True, fan_in=None, fan_out=None, seed=0):
        self.uniform, self.fan_in, self.fan_out, self.seed = uniform, fan_in, fan_out, seed

    def __call__(self, var, block):
        f_in, f_out = self._fans(var)
        fan_in = self.fan_in if self.fan_in is not None else f_in
        fan_out = self.fan_out if self.fan_out is not None else f_out
        if self.uniform:
            limit = float(np.sqrt(6.0 / (fan_in + fan_out)))
            return UniformInitializer(-limit, limit, self.seed)(var, block)
        return NormalInitializer(0.0, float(np.sqrt(2.0 / (fan_in + fan_out))), self.seed)(
            var, block)


class MSRAInitializer(Initializer):
    """He/Kaiming: uniform in +-sqrt(6/fan_in), or normal with std sqrt(2/fan_in)."""

    def __init__(self, uniform=True, fan_in=None, seed=0):
        self.uniform, self.fan_in, self.seed = uniform, fan_in, seed

    def __call__(self, var, block):
        fan_in = self.fan_in if self.fan_in is not None else self._fans(var)[0]
        if self.uniform:
            limit = float(np.sqrt(6.0 / fan_in))
            return UniformInitializer(-limit, limit, self.seed)(var, block)
        return NormalInitializer(0.0, float(np.sqrt(2.0 / fan_in)), self.seed)(var, block)


def assign_value_attrs(values):
    """assign_value's attrs for an array: Fluid 1.8's fp32_values / int32_values, or this
    runtime's `values` for the other dtypes."""
    dtype = convert_dtype(values.dtype)
    key = {"float32": "fp32_values", "int32": "int32_values"}.get(dtype.name, "values")
    items = values.ravel().tolist() if key != "values" else values
    return {"shape": list(values.shape), "dtype": dtype.name, key: items}


class NumpyArrayInitializer(Initializer):
    """Initialise from a given array (shape must match the parameter's)."""

    def __init__(self, value):
        self.value = np.asarray(value)

    def __call__(self, var, block):
        if tuple(self.value.shape) != tuple(var.shape):
            raise ValueError(f"NumpyArrayInitializer for {var.name!r}: array shape "
                             f"{list(self.value.shape)} != parameter shape {list(var.shape)}")
        dtype = _FP32 if var.dtype == _FP16 else convert_dtype(var.dtype)
        attrs = assign_value_attrs(self.value.astype(dtype))
        attrs.pop("shape")
        attrs.pop("dtype")
        return self._fill(var, block, "assign_value", attrs)


class BilinearInitializer(Initializer):
    """The bilinear interpolation kernel for a [C, 1, K, K] conv2d_transpose filter (image
    upsampling): weight(x, y) = (1 - |x / f - c|) (1 - |y / f - c|), f = ceil(K / 2),
    c = (2f - 1 - f % 2) / 2f. (Fluid 1.8 under Python 3 computes the row as i / K with true
    division; this uses the row index, the kernel its documentation describes.)"""

    def __call__(self, var, block):
        shape = var.shape
        if len(shape) != 4:
            raise ValueError("the length of shape must be 4.")
        if shape[2] != shape[3]:
            raise ValueError("shape[2] must be equal to shape[3].")
        size = shape[3]
        f = np.ceil(size / 2.0)
        c = (2 * f - 1 - f % 2) / (2.0 * f)
        idx = np.arange(int(np.prod(shape)))
        x, y = idx % size, (idx // size) % size
        weight = ((1 - np.abs(x / f - c)) * (1 - np.abs(y / f - c))).reshape(shape)
        return NumpyArrayInitializer(weight.astype(np.float32))(var, block)


Constant = ConstantInitializer
Uniform = UniformInitializer
Normal = NormalInitializer
TruncatedNormal = TruncatedNormalInitializer
Xavier = XavierInitializer
MSRA = MSRAInitializer
Bilinear = BilinearInitializer
