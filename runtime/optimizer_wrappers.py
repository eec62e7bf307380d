"""Optimizer wrappers of Fluid 1.8 (re-exported by runtime.optimizer): LookaheadOptimizer,
RecomputeOptimizer, ModelAverage and ExponentialMovingAverage.

- LookaheadOptimizer(inner, alpha, k): every k steps the slow weights move alpha of the way
  to the fast ones and the fast weights restart from them (ops appended after the inner
  optimizer's; the slow weights start as copies of the initial parameters).
- RecomputeOptimizer(inner): the activations between checkpoints are recomputed before the
  gradient ops that need them (runtime/recompute.py), as Paddle's; same results, and the
  executor frees the forward copies early.
- ModelAverage: apply() swaps in the average of the parameters over every step so far
  (Paddle averages over a sliding window; the window settings are accepted).
- ExponentialMovingAverage(decay): update() appends ema = decay * ema + (1 - decay) * param;
  apply() swaps in ema / (1 - decay^steps) (the bias-corrected average), restore() undoes it;
  thres_steps is accepted but the decay stays fixed.
"""

import contextlib

import numpy as np

from . import unique_name
from .framework import OpRole, default_main_program, default_startup_program
from .initializer import ConstantInitializer
from .scope import global_scope


def _state(program, startup, name, value, shape=(1,), dtype="float32"):
    """A persistable variable of `program` its startup fills with `value`."""
    var = program.global_block().create_var(name=name, shape=list(shape), dtype=dtype,
                                            persistable=True, stop_gradient=True)
    svar = startup.global_block().create_var(name=name, shape=list(shape), dtype=dtype,
                                             persistable=True)
    ConstantInitializer(float(value))(svar, startup.global_block())
    return var


class LookaheadOptimizer:
    def __init__(self, inner_optimizer, alpha=0.5, k=5):
        if inner_optimizer is None:
            raise AssertionError("inner optimizer can not be None")
        if not 0.0 <= alpha <= 1.0:
            raise AssertionError("alpha should be larger or equal to 0.0, and less or equal "
                                 "than 1.0")
        if not (isinstance(k, int) and k > 0):
            raise AssertionError("k should be a positive integer")
        self.inner_optimizer, self.alpha, self.k = inner_optimizer, float(alpha), int(k)
        self.type = "lookahead"

    def minimize(self, loss, startup_program=None):
        result = self.inner_optimizer.minimize(loss, startup_program=startup_program)
        program = loss.block.program
        startup = startup_program or default_startup_program()
        with program._role_guard(OpRole.Optimize):
            self._append_lookahead(program, startup, [p for p, _ in result[1]])
        return result

    def _append_lookahead(self, program, startup, params):
        from .layers import nn, tensor
        block = program.global_block()
        step = _state(program, startup, unique_name.generate("lookahead_step"), 0, dtype="int32")
        block.append_op("increment", inputs={"X": step}, outputs={"Out": step},
                        attrs={"step": 1.0})
        with _guard(program, startup):
            k = tensor.fill_constant([1], "int32", self.k)
            sync = tensor.cast(nn._elementwise("equal", step % k,
                                               tensor.fill_constant([1], "int32", 0)),
                               "float32")
            for param in params:
                slow = _state(program, startup, param.name + "@SLOW", 0, param.shape,
                              param.dtype)
                sblock = startup.global_block()
                sblock.append_op("assign", inputs={"X": sblock.var(param.name)},
                                 outputs={"Out": sblock.var(slow.name)})
                moved = slow + (param - slow) * self.alpha
                tensor.assign(moved * sync + param * (1.0 - sync), param)
                tensor.assign(moved * sync + slow * (1.0 - sync), slow)


@contextlib.contextmanager
def _guard(program, startup):
    from .framework import program_guard
    with program_guard(program, startup):
        yield


class RecomputeOptimizer:
    def __init__(self, optimizer):
        self._optimizer = optimizer
        self._checkpoints = None
        self.type = getattr(optimizer, "type", "")

    def _set_checkpoints(self, checkpoints):
        if not isinstance(checkpoints, list):
            raise AssertionError("_checkpoints should be a list of Variable or a list of String")
        self._checkpoints = checkpoints

    def load(self, stat_dict):
        raise NotImplementedError("load function is not supported by Recompute Optimizer for now")

    def backward(self, loss, startup_program=None, parameter_list=None, no_grad_set=None,
                 callbacks=None):
        """append_backward with the activations between checkpoints recomputed
        (runtime/recompute.py)."""
        if self._checkpoints is None:
            raise AssertionError("You should call _set_checkpoints first")
        from .recompute import append_backward_with_checkpoints
        params = parameter_list if parameter_list is not None else \
            getattr(self._optimizer, "_parameter_list", None)
        return append_backward_with_checkpoints(loss, self._checkpoints, params, no_grad_set,
                                                callbacks)

    def apply_gradients(self, params_grads):
        return self._optimizer.apply_gradients(params_grads)

    def apply_optimize(self, loss, startup_program, params_grads):
        return self._optimizer.apply_optimize(loss, startup_program, params_grads)

    def minimize(self, loss, startup_program=None, parameter_list=None, no_grad_set=None,
                 grad_clip=None):
        if self._checkpoints is None:
            raise AssertionError("You should call _set_checkpoints first")
        if grad_clip is not None:
            self._optimizer._grad_clip = grad_clip
        params_grads = self.backward(loss, startup_program, parameter_list, no_grad_set)
        optimize_ops = self.apply_optimize(loss, startup_program, params_grads)
        return optimize_ops, params_grads


class _Averager:
    """Swaps parameters for values computed from scope state, and back."""

    def __init__(self):
        self._params = [p for p in default_main_program().global_block().all_parameters()
                        if p.trainable]
        self._backup = {}

    def _averaged(self, name):
        raise NotImplementedError

    @contextlib.contextmanager
    def apply(self, executor=None, need_restore=True):
        scope = global_scope()
        for param in self._params:
            holder = scope.find_var(param.name)
            self._backup[param.name] = np.array(holder.value, copy=True)
            holder.value = self._averaged(param.name).astype(holder.value.dtype)
        try:
            yield
        finally:
            if need_restore:
                self.restore(executor)

    def restore(self, executor=None):
        scope = global_scope()
        for name, value in self._backup.items():
            scope.find_var(name).value = value
        self._backup = {}


class ExponentialMovingAverage(_Averager):
    def __init__(self, decay=0.999, thres_steps=None, name=None):
        super().__init__()
        self._decay = float(decay)
        self._name = name or "ema"
        self._ema = {}
        self._steps = None

    def update(self):
        program, startup = default_main_program(), default_startup_program()
        block = program.global_block()
        with program._role_guard(OpRole.Optimize):
            self._steps = _state(program, startup, unique_name.generate(self._name + "_steps"),
                                 0, dtype="int64")
            block.append_op("increment", inputs={"X": self._steps},
                            outputs={"Out": self._steps}, attrs={"step": 1.0})
            for param in self._params:
                ema = _state(program, startup, f"{param.name}.{self._name}", 0.0, param.shape,
                             param.dtype)
                part = block.create_var(name=unique_name.generate(f"{ema.name}.part"),
                                        shape=param.shape, dtype=param.dtype)
                block.append_op("scale", inputs={"X": param}, outputs={"Out": part},
                                attrs={"scale": 1.0 - self._decay})
                block.append_op("scale", inputs={"X": ema}, outputs={"Out": ema},
                                attrs={"scale": self._decay})
                block.append_op("elementwise_add", inputs={"X": ema, "Y": part},
                                outputs={"Out": ema})
                self._ema[param.name] = ema.name

    def _averaged(self, name):
        scope = global_scope()
        steps = int(np.asarray(scope.find_var(self._steps.name).value).reshape(-1)[0])
        ema = np.asarray(scope.find_var(self._ema[name]).value)
        return ema / (1.0 - self._decay ** steps) if steps else ema


class ModelAverage(_Averager):
    def __init__(self, average_window_rate, min_average_window=10000,
                 max_average_window=10000, regularization=None, name=None):
        super().__init__()
        self.average_window = average_window_rate
        self.min_average_window, self.max_average_window = (min_average_window,
                                                             max_average_window)
        program, startup = default_main_program(), default_startup_program()
        block = program.global_block()
        self._count = _state(program, startup, unique_name.generate("model_average_count"), 0)
        self._sums = {}
        with program._role_guard(OpRole.Optimize):
            block.append_op("increment", inputs={"X": self._count},
                            outputs={"Out": self._count}, attrs={"step": 1.0})
            for param in self._params:
                total = _state(program, startup, param.name + ".model_average_sum", 0.0,
                               param.shape, param.dtype)
                block.append_op("elementwise_add", inputs={"X": total, "Y": param},
                                outputs={"Out": total})
                self._sums[param.name] = total.name

    def _averaged(self, name):
        scope = global_scope()
        count = float(np.asarray(scope.find_var(self._count.name).value).reshape(-1)[0])
        total = np.asarray(scope.find_var(self._sums[name]).value)
        return total / max(count, 1.0)
