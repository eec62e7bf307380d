"""ParamAttr: how a layer's parameter is named, initialised, regularised and trained."""

from .initializer import Initializer
from .regularizer import WeightDecayRegularizer


class ParamAttr:
    def __init__(self, name=None, initializer=None, learning_rate=1.0, regularizer=None,
                 trainable=True, gradient_clip=None, do_model_average=False):
        if name is not None and not isinstance(name, str):
            raise TypeError(f"ParamAttr name must be a string, got {type(name).__name__}")
        self.name = name
        self.initializer = initializer
        self.learning_rate = learning_rate
        self.regularizer = regularizer
        self.trainable = trainable
        self.gradient_clip = gradient_clip
        self.do_model_average = do_model_average

    @staticmethod
    def _to_attr(arg):
        """Normalise what layers accept as param_attr/bias_attr (None, str, Initializer,
        regularizer, ParamAttr, False for 'no parameter', or a list of these)."""
        if arg is None or arg is True:  # True: a parameter with the defaults (Paddle 1.8)
            return ParamAttr()
        if isinstance(arg, (list, tuple)):
            return [ParamAttr._to_attr(a) for a in arg]
        if isinstance(arg, ParamAttr):
            return arg
        if isinstance(arg, str):
            return ParamAttr(name=arg)
        if isinstance(arg, Initializer):
            return ParamAttr(initializer=arg)
        if isinstance(arg, WeightDecayRegularizer):
            return ParamAttr(regularizer=arg)
        if arg is False:
            return False
        raise TypeError(f"cannot use {arg!r} as a ParamAttr")

    def _to_kwargs(self):
        return {"name": self.name, "trainable": self.trainable,
                "optimize_attr": {"learning_rate": self.learning_rate},
                "regularizer": self.regularizer, "gradient_clip_attr": self.gradient_clip,
                "do_model_average": self.do_model_average}


class WeightNormParamAttr(ParamAttr):
    """A parameter reparameterised as w = g * v / ||v|| (runtime/weight_norm.py): the layer
    gets w, computed from the parameters `<name>_g` and `<name>_v`. dim: the axis g keeps
    (the norm is taken over the others); None takes the norm over the whole tensor.
    params_with_weight_norm lists every w so created, as in Paddle."""

    params_with_weight_norm = []

    def __init__(self, dim=None, name=None, initializer=None, learning_rate=1.0,
                 regularizer=None, trainable=True, gradient_clip=None, do_model_average=False):
        super().__init__(name=name, initializer=initializer, learning_rate=learning_rate,
                         regularizer=regularizer, trainable=trainable,
                         gradient_clip=gradient_clip, do_model_average=do_model_average)
        self.dim = dim
