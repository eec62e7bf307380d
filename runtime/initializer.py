"""Initializers: each appends one op to the startup program that fills a parameter."""

import numpy as np

from .dtypes import convert_dtype


class Initializer:
    """Base class: `init(var, block)` appends the op that initialises `var` to `block`."""

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


class ConstantInitializer(Initializer):
    def __init__(self, value=0.0, force_cpu=False):
        self.value = float(value)
        self.force_cpu = force_cpu

    def __call__(self, var, block):
        return block.append_op("fill_constant", outputs={"Out": var},
                               attrs={"shape": list(var.shape), "dtype": var.dtype.name,
                                      "value": self.value})


class UniformInitializer(Initializer):
    def __init__(self, low=-1.0, high=1.0, seed=0):
        if low > high:
            raise ValueError(f"UniformInitializer needs low <= high, got {low} > {high}")
        self.low, self.high, self.seed = float(low), float(high), int(seed)

    def __call__(self, var, block):
        return block.append_op("uniform_random", outputs={"Out": var},
                               attrs={"shape": list(var.shape), "dtype": var.dtype.name,
                                      "min": self.low, "max": self.high, "seed": self.seed})


class NormalInitializer(Initializer):
    def __init__(self, loc=0.0, scale=1.0, seed=0):
        self.loc, self.scale, self.seed = float(loc), float(scale), int(seed)

    def __call__(self, var, block):
        return block.append_op("gaussian_random", outputs={"Out": var},
                               attrs={"shape": list(var.shape), "dtype": var.dtype.name,
                                      "mean": self.loc, "std": self.scale, "seed": self.seed})


class TruncatedNormalInitializer(NormalInitializer):
    """Normal values redrawn until within two standard deviations of the mean."""

    def __call__(self, var, block):
        return block.append_op("truncated_gaussian_random", outputs={"Out": var},
                               attrs={"shape": list(var.shape), "dtype": var.dtype.name,
                                      "mean": self.loc, "std": self.scale, "seed": self.seed})


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


class NumpyArrayInitializer(Initializer):
    """Initialise from a given array (shape must match the parameter's)."""

    def __init__(self, value):
        self.value = np.asarray(value)

    def __call__(self, var, block):
        if tuple(self.value.shape) != tuple(var.shape):
            raise ValueError(f"NumpyArrayInitializer for {var.name!r}: array shape "
                             f"{list(self.value.shape)} != parameter shape {list(var.shape)}")
        return block.append_op("assign_value", outputs={"Out": var},
                               attrs={"shape": list(var.shape), "dtype": var.dtype.name,
                                      "values": self.value.astype(convert_dtype(var.dtype))})


Constant = ConstantInitializer
Uniform = UniformInitializer
Normal = NormalInitializer
TruncatedNormal = TruncatedNormalInitializer
Xavier = XavierInitializer
MSRA = MSRAInitializer
