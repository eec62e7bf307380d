"""fluid.layers.distributions (Fluid 1.8): Uniform, Normal, Categorical and
MultivariateNormalDiag, whose sample / entropy / log_prob / kl_divergence build ops of the
program. Parameters are floats, lists, NumPy arrays (turned into float32 constants broadcast
to a common shape) or Variables (all of them then; their batch size may be unknown)."""

import math
import warnings

import numpy as np

from ..framework import Variable
from . import nn, ops, tensor
from .logic import less_than

__all__ = ["Uniform", "Normal", "Categorical", "MultivariateNormalDiag"]


def _check_type(value, name, types, api):
    if not isinstance(value, types):
        raise TypeError(f"The type of '{name}' in {api} must be "
                        f"{', '.join(t.__name__ for t in types)}, but received "
                        f"{type(value).__name__}.")


def _check_float_variable(value, name, api):
    if not isinstance(value, Variable) or value.dtype.name not in ("float32", "float64"):
        raise TypeError(f"The type of '{name}' in {api} must be a float32/float64 Variable, "
                        f"but received {type(value).__name__}.")


class Distribution:
    """The interface: sample, entropy, log_prob, kl_divergence."""

    def sample(self, *args, **kwargs):
        raise NotImplementedError

    def entropy(self):
        raise NotImplementedError

    def kl_divergence(self, other):
        raise NotImplementedError

    def log_prob(self, value):
        raise NotImplementedError

    @staticmethod
    def _all_variables(*args):
        """True when the arguments are Variables; mixing them with numbers is a ValueError."""
        kinds = {isinstance(a, Variable) for a in args}
        if len(kinds) > 1:
            raise ValueError("if one argument is Variable, all arguments should be Variable")
        return kinds == {True}

    @staticmethod
    def _constants(*args):
        """The arguments as float32 constant Variables of one broadcast shape."""
        arrays = []
        for arg in args:
            array = np.zeros(1) + arg if isinstance(arg, float) else np.array(arg)
            if array.dtype != np.float32:
                warnings.warn("data type of argument only support float32, your argument will "
                              "be convert to float32.")
                array = array.astype("float32")
            arrays.append(array)
        return tuple(tensor.assign(np.ascontiguousarray(a))
                     for a in np.broadcast_arrays(*arrays))


class _LocScale(Distribution):
    """Shared set-up of Uniform (low, high) and Normal (loc, scale)."""

    def _setup(self, a, b, names, api):
        for value, name in zip((a, b), names):
            _check_type(value, name, (float, np.ndarray, Variable, list), api)
        self.all_arg_is_float = isinstance(a, float) and isinstance(b, float)
        self.batch_size_unknown = self._all_variables(a, b)
        return (a, b) if self.batch_size_unknown else self._constants(a, b)

    def _sample(self, shape, seed, a, b, random_like, random):
        _check_type(shape, "shape", (list,), "sample")
        _check_type(seed, "seed", (int,), "sample")
        batch_shape = list((a + b).shape)
        out_shape = shape + batch_shape
        if self.batch_size_unknown:
            zero = tensor.fill_constant_batch_size_like(a + b, batch_shape + shape, a.dtype, 0.0)
            draws = random_like(zero, seed)
            return tensor.reshape(self._affine(draws, zero, a, b), out_shape)
        draws = random(out_shape, seed)
        out = self._affine(draws, tensor.zeros(out_shape, dtype=a.dtype), a, b)
        return tensor.reshape(out, shape) if self.all_arg_is_float else out


class Uniform(_LocScale):
    """Uniform on [low, high)."""

    def __init__(self, low, high):
        self.low, self.high = self._setup(low, high, ("low", "high"), "Uniform")

    def _affine(self, u, zero, low, high):
        return u * (zero + high - low) + low

    def sample(self, shape, seed=0):
        return self._sample(shape, seed, self.low, self.high,
                            lambda zero, s: _random_like("uniform_random_batch_size_like",
                                                         zero, s, min=0.0, max=1.0),
                            lambda shp, s: tensor_random("uniform_random", shp, s, min=0.0,
                                                         max=1.0))

    def log_prob(self, value):
        _check_float_variable(value, "value", "log_prob")
        inside = tensor.cast(less_than(self.low, value), value.dtype) * \
            tensor.cast(less_than(value, self.high), value.dtype)
        return ops.log(inside) - ops.log(self.high - self.low)

    def entropy(self):
        return ops.log(self.high - self.low)


class Normal(_LocScale):
    """Normal with mean loc and standard deviation scale."""

    def __init__(self, loc, scale):
        self.loc, self.scale = self._setup(loc, scale, ("loc", "scale"), "Normal")

    def _affine(self, z, zero, loc, scale):
        return z * (zero + scale) + loc

    def sample(self, shape, seed=0):
        return self._sample(shape, seed, self.loc, self.scale,
                            lambda zero, s: _random_like("gaussian_random_batch_size_like",
                                                         zero, s, mean=0.0, std=1.0),
                            lambda shp, s: tensor_random("gaussian_random", shp, s, mean=0.0,
                                                         std=1.0))

    def entropy(self):
        batch_shape = list((self.loc + self.scale).shape)
        zero = tensor.fill_constant_batch_size_like(self.loc + self.scale, batch_shape,
                                                    self.loc.dtype, 0.0)
        return 0.5 + 0.5 * math.log(2 * math.pi) + ops.log(self.scale + zero)

    def log_prob(self, value):
        _check_float_variable(value, "value", "log_prob")
        var = self.scale * self.scale
        return -1.0 * ((value - self.loc) * (value - self.loc)) / (2.0 * var) - \
            ops.log(self.scale) - math.log(math.sqrt(2.0 * math.pi))

    def kl_divergence(self, other):
        _check_type(other, "other", (Normal,), "kl_divergence")
        ratio = self.scale / other.scale
        ratio = ratio * ratio
        t1 = (self.loc - other.loc) / other.scale
        return 0.5 * (ratio + t1 * t1 - 1.0 - ops.log(ratio))


class Categorical(Distribution):
    """Categorical over the last axis of unnormalised logits."""

    def __init__(self, logits):
        _check_type(logits, "logits", (np.ndarray, Variable, list), "Categorical")
        self.logits = logits if self._all_variables(logits) else self._constants(logits)[0]

    @staticmethod
    def _normalised(logits):
        """(logits shifted by their max, exp of them, their sum), per row."""
        shifted = logits - tensor.reduce_max(logits, dim=-1, keep_dim=True)
        e = ops.exp(shifted)
        return shifted, e, tensor.reduce_sum(e, dim=-1, keep_dim=True)

    def kl_divergence(self, other):
        _check_type(other, "other", (Categorical,), "kl_divergence")
        a, e_a, z_a = self._normalised(self.logits)
        b, _, z_b = self._normalised(other.logits)
        prob = e_a / z_a
        return tensor.reduce_sum(prob * (a - ops.log(z_a) - b + ops.log(z_b)), dim=-1,
                                 keep_dim=True)

    def entropy(self):
        a, e_a, z_a = self._normalised(self.logits)
        return -1.0 * tensor.reduce_sum((e_a / z_a) * (a - ops.log(z_a)), dim=-1,
                                        keep_dim=True)


class MultivariateNormalDiag(Distribution):
    """Multivariate normal with mean loc and a diagonal covariance matrix scale [k, k]."""

    def __init__(self, loc, scale):
        _check_type(loc, "loc", (np.ndarray, Variable, list), "MultivariateNormalDiag")
        _check_type(scale, "scale", (np.ndarray, Variable, list), "MultivariateNormalDiag")
        self.loc, self.scale = (loc, scale) if self._all_variables(loc, scale) else \
            self._constants(loc, scale)

    def _eye(self, k):
        return tensor.assign(np.eye(k, dtype=np.dtype(self.loc.dtype.name)))

    def _det(self, value):
        """Product of the diagonal (off-diagonal entries replaced by 1)."""
        k = value.shape[0]
        return tensor.reduce_prod(value + (1.0 - self._eye(k)))

    def _inv(self, value):
        """The inverse of a diagonal matrix: its diagonal to the power -1 (others: power 1)."""
        k = value.shape[0]
        return nn.elementwise_pow(value, 1.0 - 2.0 * self._eye(k))

    def entropy(self):
        k = self.scale.shape[0]
        return 0.5 * (k * (1.0 + math.log(2 * math.pi)) + ops.log(self._det(self.scale)))

    def kl_divergence(self, other):
        _check_type(other, "other", (MultivariateNormalDiag,), "kl_divergence")
        trace = tensor.reduce_sum(self._inv(other.scale) * self.scale)
        diff = other.loc - self.loc
        quad = tensor.matmul(tensor.matmul(diff, self._inv(other.scale)), diff)
        k = self.scale.shape[0]
        log_ratio = ops.log(self._det(other.scale)) - ops.log(self._det(self.scale))
        return 0.5 * (trace + quad - k + log_ratio)


def _random_like(op_type, like, seed, **attrs):
    from ..layer_helper import LayerHelper
    helper = LayerHelper(op_type)
    out = helper.create_variable_for_type_inference(like.dtype)
    helper.append_op(op_type, inputs={"Input": like}, outputs={"Out": out},
                     attrs=dict(attrs, shape=list(like.shape), dtype=like.dtype.name,
                                seed=int(seed), input_dim_idx=0, output_dim_idx=0))
    return out


def tensor_random(op_type, shape, seed, **attrs):
    from .extra import gaussian_random, uniform_random
    if op_type == "uniform_random":
        return uniform_random(shape, seed=seed, **attrs)
    return gaussian_random(shape, seed=seed, **attrs)
