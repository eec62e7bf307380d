"""More of Fluid 1.8's optimizers (re-exported by runtime.optimizer): Adamax, Dpsgd,
DecayedAdagrad, Ftrl, Lamb, LarsMomentum, and the wrappers LookaheadOptimizer,
RecomputeOptimizer, ModelAverage and ExponentialMovingAverage.

RecomputeOptimizer accepts checkpoints but does not recompute: its program is the wrapped
optimizer's (the same results, the memory of a plain backward pass). ModelAverage averages the
parameters over every step since training started (Paddle's sliding windows are not kept).
"""

from .optimizer import Optimizer


class AdamaxOptimizer(Optimizer):
    """Adam with the infinity norm; beta1's power is updated by a scale op after each step."""

    type = "adamax"
    _moment_acc_str, _inf_norm_acc_str, _beta1_pow_acc_str = "moment", "inf_norm", "beta1_pow_acc"

    def __init__(self, learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8,
                 parameter_list=None, regularization=None, grad_clip=None, name=None):
        super().__init__(learning_rate, parameter_list, regularization, grad_clip, name)
        self._beta1, self._beta2, self._epsilon = float(beta1), float(beta2), float(epsilon)

    def _create_accumulators(self, block, parameters):
        for p in parameters:
            self._add_accumulator(self._moment_acc_str, p)
            self._add_accumulator(self._inf_norm_acc_str, p)
            self._add_accumulator(self._beta1_pow_acc_str, p, fill_value=self._beta1, shape=[1])

    def _append_optimize_op(self, block, pg):
        param, grad = pg
        m = self._get_accumulator(self._moment_acc_str, param)
        u = self._get_accumulator(self._inf_norm_acc_str, param)
        b1p = self._get_accumulator(self._beta1_pow_acc_str, param)
        return block.append_op(
            "adamax", inputs={"Param": param, "Grad": grad, "LearningRate": self._param_lr(param),
                              "Moment": m, "InfNorm": u, "Beta1Pow": b1p},
            outputs={"ParamOut": param, "MomentOut": m, "InfNormOut": u},
            attrs={"beta1": self._beta1, "beta2": self._beta2, "epsilon": self._epsilon})

    def _finish_update(self, block, params_grads):
        for param, _ in params_grads:
            b1p = self._get_accumulator(self._beta1_pow_acc_str, param)
            block.append_op("scale", inputs={"X": b1p}, outputs={"Out": b1p},
                            attrs={"scale": self._beta1})


class DpsgdOptimizer(Optimizer):
    """Differentially private SGD: the gradient clipped to norm `clip`, plus Gaussian noise
    of scale sigma / batch_size."""

    type = "dpsgd"

    def __init__(self, learning_rate=0.001, clip=0.9, batch_size=0.999, sigma=1e-8):
        super().__init__(learning_rate)
        self._clip, self._batch_size, self._sigma = float(clip), float(batch_size), float(sigma)
        self._seed = None

    def _append_optimize_op(self, block, pg):
        param, grad = pg
        if self._seed is None:
            self._seed = 0
        return block.append_op(
            "dpsgd", inputs={"Param": param, "Grad": grad, "LearningRate": self._param_lr(param)},
            outputs={"ParamOut": param},
            attrs={"clip": self._clip, "batch_size": self._batch_size, "sigma": self._sigma,
                   "seed": self._seed})


class DecayedAdagradOptimizer(Optimizer):
    type = "decayed_adagrad"
    _moment_acc_str = "moment"

    def __init__(self, learning_rate, decay=0.95, epsilon=1e-6, parameter_list=None,
                 regularization=None, grad_clip=None, name=None):
        super().__init__(learning_rate, parameter_list, regularization, grad_clip, name)
        self._decay, self._epsilon = float(decay), float(epsilon)

    def _create_accumulators(self, block, parameters):
        for p in parameters:
            self._add_accumulator(self._moment_acc_str, p)

    def _append_optimize_op(self, block, pg):
        param, grad = pg
        m = self._get_accumulator(self._moment_acc_str, param)
        return block.append_op(
            "decayed_adagrad", inputs={"Param": param, "Grad": grad, "Moment": m,
                                       "LearningRate": self._param_lr(param)},
            outputs={"ParamOut": param, "MomentOut": m},
            attrs={"decay": self._decay, "epsilon": self._epsilon})


class FtrlOptimizer(Optimizer):
    type = "ftrl"
    _squared_acc_str, _linear_acc_str = "squared", "linear"

    def __init__(self, learning_rate, l1=0.0, l2=0.0, lr_power=-0.5, parameter_list=None,
                 regularization=None, grad_clip=None, name=None):
        super().__init__(learning_rate, parameter_list, regularization, grad_clip, name)
        self._l1, self._l2, self._lr_power = float(l1), float(l2), float(lr_power)

    def _create_accumulators(self, block, parameters):
        for p in parameters:
            self._add_accumulator(self._squared_acc_str, p)
            self._add_accumulator(self._linear_acc_str, p)

    def _append_optimize_op(self, block, pg):
        param, grad = pg
        sq = self._get_accumulator(self._squared_acc_str, param)
        lin = self._get_accumulator(self._linear_acc_str, param)
        return block.append_op(
            "ftrl", inputs={"Param": param, "Grad": grad, "SquaredAccumulator": sq,
                            "LinearAccumulator": lin, "LearningRate": self._param_lr(param)},
            outputs={"ParamOut": param, "SquaredAccumOut": sq, "LinearAccumOut": lin},
            attrs={"l1": self._l1, "l2": self._l2, "lr_power": self._lr_power})


class LambOptimizer(AdamaxOptimizer):
    """LAMB: Adam's moments scaled per layer by ||param|| / ||update||."""

    type = "lamb"
    _moment1_acc_str, _moment2_acc_str = "moment1", "moment2"
    _beta1_pow_acc_str, _beta2_pow_acc_str = "beta1_pow_acc", "beta2_pow_acc"

    def __init__(self, learning_rate=0.001, lamb_weight_decay=0.01, beta1=0.9, beta2=0.999,
                 epsilon=1e-6, parameter_list=None, regularization=None, grad_clip=None,
                 exclude_from_weight_decay_fn=None, name=None):
        super().__init__(learning_rate, beta1, beta2, epsilon, parameter_list, regularization,
                         grad_clip, name)
        self._weight_decay = float(lamb_weight_decay)
        self._exclude = exclude_from_weight_decay_fn

    def _create_accumulators(self, block, parameters):
        for p in parameters:
            self._add_accumulator(self._moment1_acc_str, p)
            self._add_accumulator(self._moment2_acc_str, p)
            self._add_accumulator(self._beta1_pow_acc_str, p, fill_value=self._beta1, shape=[1])
            self._add_accumulator(self._beta2_pow_acc_str, p, fill_value=self._beta2, shape=[1])

    def _append_optimize_op(self, block, pg):
        param, grad = pg
        acc = {slot: self._get_accumulator(name, param) for slot, name in (
            ("Moment1", self._moment1_acc_str), ("Moment2", self._moment2_acc_str),
            ("Beta1Pow", self._beta1_pow_acc_str), ("Beta2Pow", self._beta2_pow_acc_str))}
        decay = 0.0 if self._exclude is not None and self._exclude(param) else self._weight_decay
        return block.append_op(
            "lamb", inputs=dict(acc, Param=param, Grad=grad, LearningRate=self._param_lr(param)),
            outputs={"ParamOut": param, "Moment1Out": acc["Moment1"],
                     "Moment2Out": acc["Moment2"]},
            attrs={"beta1": self._beta1, "beta2": self._beta2, "epsilon": self._epsilon,
                   "weight_decay": decay})

    def _finish_update(self, block, params_grads):
        for param, _ in params_grads:
            for name, beta in ((self._beta1_pow_acc_str, self._beta1),
                               (self._beta2_pow_acc_str, self._beta2)):
                acc = self._get_accumulator(name, param)
                block.append_op("scale", inputs={"X": acc}, outputs={"Out": acc},
                                attrs={"scale": beta})


class LarsMomentumOptimizer(Optimizer):
    type = "lars_momentum"
    _velocity_acc_str = "velocity"

    def __init__(self, learning_rate, momentum, lars_coeff=0.001, lars_weight_decay=0.0005,
                 parameter_list=None, regularization=None, grad_clip=None, name=None):
        super().__init__(learning_rate, parameter_list, regularization, grad_clip, name)
        self._momentum, self._lars_coeff = float(momentum), float(lars_coeff)
        self._lars_weight_decay = float(lars_weight_decay)

    def _create_accumulators(self, block, parameters):
        for p in parameters:
            self._add_accumulator(self._velocity_acc_str, p)

    def _append_optimize_op(self, block, pg):
        param, grad = pg
        v = self._get_accumulator(self._velocity_acc_str, param)
        return block.append_op(
            "lars_momentum", inputs={"Param": param, "Grad": grad, "Velocity": v,
                                     "LearningRate": self._param_lr(param)},
            outputs={"ParamOut": param, "VelocityOut": v},
            attrs={"mu": self._momentum, "lars_coeff": self._lars_coeff,
                   "lars_weight_decay": self._lars_weight_decay})


from .optimizer_wrappers import (ExponentialMovingAverage, LookaheadOptimizer,  # noqa: E402
                                 ModelAverage, RecomputeOptimizer)

Adamax = AdamaxOptimizer
Dpsgd = DpsgdOptimizer
DecayedAdagrad = DecayedAdagradOptimizer
Ftrl = FtrlOptimizer
Lamb = LambOptimizer
LarsMomentum = LarsMomentumOptimizer

__all__ = ["Adamax", "AdamaxOptimizer", "Dpsgd", "DpsgdOptimizer", "DecayedAdagrad",
           "DecayedAdagradOptimizer", "Ftrl", "FtrlOptimizer", "Lamb", "LambOptimizer",
           "LarsMomentum", "LarsMomentumOptimizer", "LookaheadOptimizer", "RecomputeOptimizer",
           "ModelAverage", "ExponentialMovingAverage"]
