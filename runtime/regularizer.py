"""Weight decay: L2Decay adds coeff * param to the gradient, L1Decay adds coeff * sign(param)."""

from .framework import OpRole
from .dtypes import VarType


class WeightDecayRegularizer:
    kind = ""

    def __init__(self, regularization_coeff=0.0):
        if regularization_coeff < 0:
            raise ValueError(f"{type(self).__name__} needs a coefficient >= 0, "
                             f"got {regularization_coeff}")
        self._regularization_coeff = float(regularization_coeff)

    def __call__(self, param, grad, block):
        """Append the ops that add the decay term to `grad`; returns the regularised grad."""
        coeff = self._regularization_coeff
        if grad.type == VarType.SELECTED_ROWS:  # decay only the rows the batch touched
            out = block.create_var(name=grad.name, dtype=grad.dtype, shape=grad.shape,
                                   type=VarType.SELECTED_ROWS)
            block.append_op("sparse_weight_decay", inputs={"Grad": grad, "Param": param},
                            outputs={"Out": out}, attrs={"coeff": coeff, "kind": self.kind})
            return out
        decay = block.create_var(name=param.name + "@DECAY", dtype=param.dtype, shape=param.shape)
        if self.kind == "l1":
            sign = block.create_var(name=param.name + "@SIGN", dtype=param.dtype,
                                    shape=param.shape)
            block.append_op("sign", inputs={"X": param}, outputs={"Out": sign})
            param = sign
        block.append_op("scale", inputs={"X": param}, outputs={"Out": decay},
                        attrs={"scale": coeff})
        block.append_op("sum", inputs={"X": [grad, decay]}, outputs={"Out": grad})
        return grad

    def __repr__(self):
        return f"{type(self).__name__}(regularization_coeff={self._regularization_coeff})"


class L2DecayRegularizer(WeightDecayRegularizer):
    kind = "l2"


class L1DecayRegularizer(WeightDecayRegularizer):
    kind = "l1"


L2Decay = L2DecayRegularizer
L1Decay = L1DecayRegularizer


def append_regularization_ops(params_grads, regularization=None):
    """Each parameter's own regularizer (ParamAttr) wins over the optimizer's."""
    result = []
    for param, grad in params_grads:
        reg = getattr(param, "regularizer", None) or regularization
        if grad is None or reg is None:
            result.append((param, grad))
            continue
        block = grad.block
        with block.program._role_guard(OpRole.Optimize):
            result.append((param, reg(param, grad, block)))
    return result
