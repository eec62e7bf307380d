"""LayerHelper: what every layer function needs to create parameters, temporaries and ops."""

import copy

from . import unique_name
from .dtypes import convert_dtype
from .errors import ShapeError, where
from .framework import Variable, default_main_program, default_startup_program, user_callsite
from .initializer import ConstantInitializer, XavierInitializer
from .param_attr import ParamAttr, WeightNormParamAttr
from .weight_norm import create_weight_normalized


class LayerHelper:
    def __init__(self, layer_type, **kwargs):
        self.layer_type = layer_type
        self.kwargs = kwargs
        name = kwargs.get("name")
        self.name = name if name is not None else unique_name.generate(layer_type)

    @property
    def main_program(self):
        return default_main_program()

    @property
    def startup_program(self):
        return default_startup_program()

    def append_op(self, *args, **kwargs):
        return self.main_program.current_block().append_op(*args, **kwargs)

    # --- inputs ----------------------------------------------------------------------------
    def multiple_input(self, name="input"):
        value = self.kwargs.get(name, [])
        items = list(value) if isinstance(value, (list, tuple)) else [value]
        for item in items:
            if not isinstance(item, Variable):
                raise TypeError(f"{self.layer_type}: {name} must be a Variable (or a list of "
                                f"them), got {type(item).__name__}")
        return items

    def input(self, name="input"):
        items = self.multiple_input(name)
        if len(items) != 1:
            raise TypeError(f"{self.layer_type}: {name} must be one Variable, got {len(items)}")
        return items[0]

    def input_dtype(self, name="input"):
        dtypes = {v.dtype for v in self.multiple_input(name)}
        if len(dtypes) > 1:
            raise TypeError(f"{self.layer_type}: all inputs must share one dtype, got "
                            f"{sorted(d.name for d in dtypes)}")
        return dtypes.pop()

    @property
    def param_attr(self):
        return ParamAttr._to_attr(self.kwargs.get("param_attr"))

    @property
    def bias_attr(self):
        return ParamAttr._to_attr(self.kwargs.get("bias_attr"))

    def multiple_param_attr(self, length):
        attr = self.param_attr
        if isinstance(attr, ParamAttr):
            attr = [attr]
        if len(attr) != 1 and len(attr) != length:
            raise ValueError(f"{self.layer_type}: {len(attr)} param_attrs for {length} inputs")
        if len(attr) == 1 and length != 1:
            import copy
            attr = [attr[0]] + [copy.deepcopy(attr[0]) for _ in range(length - 1)]
            if attr[0].name is not None:
                raise ValueError(f"{self.layer_type}: one named param_attr cannot serve "
                                 f"{length} inputs; pass a list of ParamAttrs")
        return attr

    def iter_inputs_and_params(self, input_param_name="input"):
        inputs = self.multiple_input(input_param_name)
        return zip(inputs, self.multiple_param_attr(len(inputs)))

    # --- variables -------------------------------------------------------------------------
    def create_parameter(self, attr, shape, dtype, is_bias=False, default_initializer=None,
                         stop_gradient=False):
        """A parameter in the main program plus its initialiser in the startup program. A
        parameter name used twice (ParamAttr(name='shared')) returns the same parameter."""
        if attr is False:
            return None
        attr = ParamAttr._to_attr(attr)
        dtype = convert_dtype(dtype)
        shape = [int(d) for d in shape]
        if any(d <= 0 for d in shape):
            raise ShapeError(f"{self.layer_type}: parameter shape {shape} must be positive; an "
                             f"input with an unknown (-1) non-batch dimension is the usual cause"
                             f"{where(user_callsite())}")
        name = attr.name or unique_name.generate(f"{self.name}.{'b' if is_bias else 'w'}")
        initializer = attr.initializer or default_initializer or (
            ConstantInitializer(0.0) if is_bias else XavierInitializer())
        if isinstance(attr, WeightNormParamAttr):
            attr = copy.copy(attr)
            attr.name = name
            param = create_weight_normalized(self, attr, shape, dtype, initializer)
            WeightNormParamAttr.params_with_weight_norm.append(param)
            return param
        main_block = self.main_program.global_block()
        existing = main_block.vars.get(name)
        if existing is not None:
            if list(existing.shape) != shape or existing.dtype != dtype:
                raise ShapeError(f"parameter {name!r} is shared, but this layer needs shape "
                                 f"{shape} {dtype.name} and it was created with "
                                 f"{list(existing.shape)} {existing.dtype.name}"
                                 f"{where(existing.callsite)}{where(user_callsite())}")
            return existing
        kwargs = attr._to_kwargs()
        kwargs["name"] = name
        startup_block = self.startup_program.global_block()
        if name not in startup_block.vars:  # the startup block gets its init op
            startup_block.create_parameter(shape=shape, dtype=dtype, initializer=initializer,
                                           **kwargs)
        param = main_block.create_parameter(shape=shape, dtype=dtype, **kwargs)
        param.initializer = initializer
        if stop_gradient:
            param.stop_gradient = True
        return param

    def create_variable_for_type_inference(self, dtype, stop_gradient=False):
        return self.main_program.current_block().create_var(
            name=unique_name.generate_with_ignorable_key(f"{self.name}.tmp"),
            dtype=dtype, persistable=False, stop_gradient=stop_gradient)

    create_tmp_variable = create_variable_for_type_inference

    def create_variable(self, **kwargs):
        return self.main_program.current_block().create_var(**kwargs)

    def create_global_variable(self, persistable=False, **kwargs):
        return self.main_program.global_block().create_var(persistable=persistable, **kwargs)

    def set_variable_initializer(self, var, initializer):
        startup_block = self.startup_program.global_block()
        svar = startup_block.create_var(name=var.name, type=var.type, dtype=var.dtype,
                                        shape=var.shape, persistable=True)
        initializer(svar, startup_block)

    # --- common tails of layers ------------------------------------------------------------
    def append_bias_op(self, input_var, dim_start=1, dim_end=None):
        """input + bias, the bias shaped like input.shape[dim_start:dim_end]."""
        size = list(input_var.shape[dim_start:dim_end])
        bias_attr = self.bias_attr
        if bias_attr is False:
            return input_var
        bias = self.create_parameter(bias_attr, size, input_var.dtype, is_bias=True)
        out = self.create_variable_for_type_inference(input_var.dtype)
        self.append_op("elementwise_add", inputs={"X": input_var, "Y": bias},
                       outputs={"Out": out}, attrs={"axis": dim_start})
        return out

    def append_activation(self, input_var):
        act = self.kwargs.get("act")
        if act is None:
            return input_var
        if isinstance(act, str):
            act = {"type": act}
        act = dict(act)
        act_type = act.pop("type")
        act.pop("use_cudnn", None)
        out = self.create_variable_for_type_inference(input_var.dtype)
        self.append_op(act_type, inputs={"X": input_var}, outputs={"Out": out}, attrs=act)
        return out
