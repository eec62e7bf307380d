"""Optimizers: minimize() = append_backward + clipping + regularization + one update op per
parameter. Optimizer state (velocities, moments, ...) lives in persistable variables created
in the startup program, so its memory is visible like any other tensor's."""

import warnings

from . import unique_name
from .backward import append_backward
from .clip import GradientClipBase, append_gradient_clip_ops
from .framework import OpRole, Variable, default_startup_program
from .initializer import ConstantInitializer
from .regularizer import append_regularization_ops


class Optimizer:
    """Base class. Subclasses set `type` and implement `_create_accumulators` and
    `_append_optimize_op`."""

    type = ""

    def __init__(self, learning_rate, parameter_list=None, regularization=None, grad_clip=None,
                 name=None):
        if not isinstance(learning_rate, (int, float, Variable)) or isinstance(learning_rate, bool):
            raise TypeError(f"learning_rate must be a float or a Variable, got {learning_rate!r}")
        if grad_clip is not None and not isinstance(grad_clip, GradientClipBase):
            raise TypeError(f"grad_clip must be a GradientClip* object, got {grad_clip!r}")
        self._learning_rate = learning_rate
        self._parameter_list = parameter_list
        self.regularization = regularization
        self._grad_clip = grad_clip
        self._name = name
        self._accumulators = {}  # acc name -> {param name: var}
        self._lr_vars = {}  # program uid -> lr variable
        self.helper = None
        self._startup = None  # None: the default startup program at the time

    # --- learning rate ---------------------------------------------------------------------
    def _create_global_learning_rate(self, program):
        if program._uid in self._lr_vars:
            return
        if isinstance(self._learning_rate, Variable):
            self._lr_vars[program._uid] = self._learning_rate
            return
        name = unique_name.generate("learning_rate")
        lr = program.global_block().create_var(name=name, shape=[1], dtype="float32",
                                               persistable=True)
        startup = self._startup_block()
        slr = startup.create_var(name=name, shape=[1], dtype="float32", persistable=True)
        ConstantInitializer(float(self._learning_rate))(slr, startup)
        self._lr_vars[program._uid] = lr

    def _startup_block(self):
        return (self._startup or default_startup_program()).global_block()

    def _global_learning_rate(self, program):
        return self._lr_vars.get(program._uid)

    def _param_lr(self, param):
        """The global rate, scaled by the parameter's ParamAttr(learning_rate=...)."""
        lr = self._global_learning_rate(param.block.program)
        factor = param.optimize_attr.get("learning_rate", 1.0)
        if factor == 1.0:
            return lr
        block = param.block
        scaled = block.create_var(name=unique_name.generate(f"{param.name}_lr"), shape=[1],
                                  dtype=lr.dtype)
        block.append_op("scale", inputs={"X": lr}, outputs={"Out": scaled},
                        attrs={"scale": float(factor)})
        return scaled

    # --- accumulators ----------------------------------------------------------------------
    def _add_accumulator(self, name, param, dtype=None, fill_value=0.0, shape=None):
        per_param = self._accumulators.setdefault(name, {})
        if param.name in per_param:
            raise ValueError(f"accumulator {name!r} already exists for {param.name!r}")
        shape = list(param.shape) if shape is None else list(shape)
        dtype = dtype or param.dtype
        var_name = unique_name.generate(f"{param.name}_{name}")
        var = param.block.program.global_block().create_var(
            name=var_name, shape=shape, dtype=dtype, persistable=True)
        startup = self._startup_block()
        svar = startup.create_var(name=var_name, shape=shape, dtype=dtype, persistable=True)
        ConstantInitializer(float(fill_value))(svar, startup)
        per_param[param.name] = var
        return var

    def _get_accumulator(self, name, param):
        try:
            return self._accumulators[name][param.name]
        except KeyError:
            raise KeyError(f"no accumulator {name!r} for parameter {param.name!r}") from None

    def _create_accumulators(self, block, parameters):
        pass

    def _append_optimize_op(self, block, param_and_grad):
        raise NotImplementedError

    # --- the pipeline ----------------------------------------------------------------------
    def backward(self, loss, startup_program=None, parameter_list=None, no_grad_set=None,
                 callbacks=None):
        params = parameter_list if parameter_list is not None else self._parameter_list
        return append_backward(loss, params, no_grad_set, callbacks)

    def apply_gradients(self, params_grads):
        params_grads = sorted(params_grads, key=lambda pg: pg[0].name)
        params_grads = append_gradient_clip_ops(params_grads, self._grad_clip)
        params_grads = append_regularization_ops(params_grads, self.regularization)
        return self._create_optimization_pass(params_grads)

    def apply_optimize(self, loss, startup_program, params_grads):
        self._startup = startup_program or default_startup_program()
        return self.apply_gradients(params_grads)

    def minimize(self, loss, startup_program=None, parameter_list=None, no_grad_set=None,
                 grad_clip=None):
        """Append backward, clipping, regularization and update ops for `loss`.
        Returns (optimize_ops, params_grads)."""
        if not isinstance(loss, Variable):
            raise TypeError(f"minimize needs the loss Variable, got {type(loss).__name__}")
        if grad_clip is not None:
            self._grad_clip = grad_clip
        self._startup = startup_program or default_startup_program()
        params_grads = self.backward(loss, startup_program, parameter_list, no_grad_set)
        if not params_grads:  # Paddle 1.8 adds nothing and says nothing; say it at least
            warnings.warn(f"minimize({loss.name!r}): no trainable parameter affects the loss "
                          f"(are all parameters stop_gradient/trainable=False?); no update "
                          f"ops were added", RuntimeWarning, stacklevel=2)
            return [], []
        optimize_ops = self.apply_optimize(loss, startup_program, params_grads)
        return optimize_ops, params_grads

    def _create_optimization_pass(self, params_grads):
        pairs = [(p, g) for p, g in params_grads if g is not None and p.trainable]
        if not pairs:
            return []
        block = pairs[0][0].block.program.global_block()
        program = block.program
        start = len(block.ops)
        with program._role_guard(OpRole.Optimize):
            # as in Paddle: accumulators, then the learning rate (its init op, prepended to
            # the startup program last, comes first there)
            self._create_accumulators(block, [p for p, _ in pairs])
            self._create_global_learning_rate(program)
            for pg in pairs:
                self._append_optimize_op(block, pg)
            self._finish_update(block, pairs)
        return block.ops[start:]  # every op of the pass (learning-rate scales included)

    def _finish_update(self, block, params_grads):
        pass


class SGDOptimizer(Optimizer):
    """param -= lr * grad"""

    type = "sgd"

    def _append_optimize_op(self, block, pg):
        param, grad = pg
        return block.append_op("sgd", inputs={"Param": param, "Grad": grad,
                                              "LearningRate": self._param_lr(param)},
                               outputs={"ParamOut": param})


class MomentumOptimizer(Optimizer):
    """velocity = mu * velocity + grad; param -= lr * velocity (or the Nesterov form)."""

    type = "momentum"
    _velocity_acc_str = "velocity"

    def __init__(self, learning_rate, momentum, use_nesterov=False, parameter_list=None,
                 regularization=None, grad_clip=None, name=None):
        super().__init__(learning_rate, parameter_list, regularization, grad_clip, name)
        self._momentum = float(momentum)
        self._use_nesterov = bool(use_nesterov)

    def _create_accumulators(self, block, parameters):
        for p in parameters:
            self._add_accumulator("velocity", p)

    def _append_optimize_op(self, block, pg):
        param, grad = pg
        v = self._get_accumulator("velocity", param)
        return block.append_op(
            "momentum",
            inputs={"Param": param, "Grad": grad, "Velocity": v,
                    "LearningRate": self._param_lr(param)},
            outputs={"ParamOut": param, "VelocityOut": v},
            attrs={"mu": self._momentum, "use_nesterov": self._use_nesterov})


class AdamOptimizer(Optimizer):
    """Adam with bias correction; lazy_mode=True updates only the rows of sparse gradients."""

    type = "adam"
    _moment1_acc_str, _moment2_acc_str = "moment1", "moment2"
    _beta1_pow_acc_str, _beta2_pow_acc_str = "beta1_pow_acc", "beta2_pow_acc"

    def __init__(self, learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8,
                 parameter_list=None, regularization=None, grad_clip=None, name=None,
                 lazy_mode=False):
        super().__init__(learning_rate, parameter_list, regularization, grad_clip, name)
        self._beta1, self._beta2, self._epsilon = float(beta1), float(beta2), float(epsilon)
        self._lazy_mode = bool(lazy_mode)

    def _create_accumulators(self, block, parameters):
        for p in parameters:
            self._add_accumulator("moment1", p)
            self._add_accumulator("moment2", p)
            self._add_accumulator("beta1_pow_acc", p, fill_value=self._beta1, shape=[1])
            self._add_accumulator("beta2_pow_acc", p, fill_value=self._beta2, shape=[1])

    def _append_optimize_op(self, block, pg):
        param, grad = pg
        acc = {k: self._get_accumulator(a, param) for k, a in (
            ("Moment1", "moment1"), ("Moment2", "moment2"), ("Beta1Pow", "beta1_pow_acc"),
            ("Beta2Pow", "beta2_pow_acc"))}
        return block.append_op(
            "adam",
            inputs=dict(acc, Param=param, Grad=grad, LearningRate=self._param_lr(param)),
            outputs=dict({k + "Out": v for k, v in acc.items()}, ParamOut=param),
            attrs={"beta1": self._beta1, "beta2": self._beta2, "epsilon": self._epsilon,
                   "lazy_mode": self._lazy_mode})


class AdagradOptimizer(Optimizer):
    type = "adagrad"
    _moment_acc_str = "moment"

    def __init__(self, learning_rate, epsilon=1e-6, parameter_list=None, regularization=None,
                 grad_clip=None, name=None, initial_accumulator_value=0.0):
        super().__init__(learning_rate, parameter_list, regularization, grad_clip, name)
        self._epsilon = float(epsilon)
        self._initial = float(initial_accumulator_value)

    def _create_accumulators(self, block, parameters):
        for p in parameters:
            self._add_accumulator("moment", p, fill_value=self._initial)

    def _append_optimize_op(self, block, pg):
        param, grad = pg
        m = self._get_accumulator("moment", param)
        return block.append_op(
            "adagrad",
            inputs={"Param": param, "Grad": grad, "Moment": m,
                    "LearningRate": self._param_lr(param)},
            outputs={"ParamOut": param, "MomentOut": m}, attrs={"epsilon": self._epsilon})


class AdadeltaOptimizer(Optimizer):
    """Adadelta: two accumulators the size of each parameter (plus a transient update), which
    is why the playbook calls it memory-hungry next to Momentum."""

    type = "adadelta"
    _avg_squared_grad_acc_str, _avg_squared_update_acc_str = ("_avg_squared_grad",
                                                              "_avg_squared_update")

    def __init__(self, learning_rate, epsilon=1e-6, rho=0.95, parameter_list=None,
                 regularization=None, grad_clip=None, name=None):
        super().__init__(learning_rate, parameter_list, regularization, grad_clip, name)
        self._epsilon, self._rho = float(epsilon), float(rho)

    def _create_accumulators(self, block, parameters):
        for p in parameters:
            self._add_accumulator("_avg_squared_grad", p)
            self._add_accumulator("_avg_squared_update", p)

    def _append_optimize_op(self, block, pg):
        param, grad = pg
        g2 = self._get_accumulator("_avg_squared_grad", param)
        u2 = self._get_accumulator("_avg_squared_update", param)
        return block.append_op(
            "adadelta",
            inputs={"Param": param, "Grad": grad, "AvgSquaredGrad": g2, "AvgSquaredUpdate": u2,
                    "LearningRate": self._param_lr(param)},
            outputs={"ParamOut": param, "AvgSquaredGradOut": g2, "AvgSquaredUpdateOut": u2},
            attrs={"epsilon": self._epsilon, "rho": self._rho})


class RMSPropOptimizer(Optimizer):
    type = "rmsprop"
    _momentum_acc_str, _mean_square_acc_str, _mean_grad_acc_str = ("momentum", "mean_square",
                                                                    "mean_grad")

    def __init__(self, learning_rate, rho=0.95, epsilon=1e-6, momentum=0.0, centered=False,
                 parameter_list=None, regularization=None, grad_clip=None, name=None):
        super().__init__(learning_rate, parameter_list, regularization, grad_clip, name)
        self._rho, self._epsilon = float(rho), float(epsilon)
        self._momentum, self._centered = float(momentum), bool(centered)

    def _create_accumulators(self, block, parameters):
        for p in parameters:
            self._add_accumulator("momentum", p)
            self._add_accumulator("mean_square", p)
            self._add_accumulator("mean_grad", p)

    def _append_optimize_op(self, block, pg):
        param, grad = pg
        acc = {"Moment": self._get_accumulator("momentum", param),
               "MeanSquare": self._get_accumulator("mean_square", param),
               "MeanGrad": self._get_accumulator("mean_grad", param)}
        return block.append_op(
            "rmsprop",
            inputs=dict(acc, Param=param, Grad=grad, LearningRate=self._param_lr(param)),
            outputs=dict({k + "Out": v for k, v in acc.items()}, ParamOut=param),
            attrs={"decay": self._rho, "epsilon": self._epsilon, "momentum": self._momentum,
                   "centered": self._centered})


SGD = SGDOptimizer
Momentum = MomentumOptimizer
Adam = AdamOptimizer
Adagrad = AdagradOptimizer
Adadelta = AdadeltaOptimizer
RMSProp = RMSPropOptimizer


from .optimizer_more import (Adamax, AdamaxOptimizer, DecayedAdagrad,  # noqa: E402,F401
                             DecayedAdagradOptimizer, Dpsgd, DpsgdOptimizer,
                             ExponentialMovingAverage, Ftrl, FtrlOptimizer, Lamb,
                             LambOptimizer, LarsMomentum, LarsMomentumOptimizer,
                             LookaheadOptimizer, ModelAverage, RecomputeOptimizer)
