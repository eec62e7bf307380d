"""Weight normalisation (Salimans & Kingma, 2016) for parameters declared with a
WeightNormParamAttr, laid out as Paddle 1.8 does.

A weight w of shape S named `<name>` is not a parameter itself: two parameters are created,
  `<name>_v`  shape S, initialised with the attr's initializer (the direction), and
  `<name>_g`  shape [1] * len(S), except S[dim] along `dim` (the magnitude),
and the main program computes `w = v * g / ||v||`, the norm taken over every axis but `dim`
(over all axes when dim is None). The startup program initialises g to ||v|| of the freshly
initialised v, so that w starts out equal to v, i.e. distributed like the initializer says.
"""

from . import unique_name


def norm_axes(ndim, dim):
    """The axes ||v|| reduces over: all of them, or all but `dim`."""
    return [a for a in range(ndim) if dim is None or a != dim]


def magnitude_shape(shape, dim):
    """Shape of the g parameter: ones, with shape[dim] kept along dim."""
    g_shape = [1] * len(shape)
    if dim is not None:
        g_shape[dim] = shape[dim]
    return g_shape


def _tmp(block, prefix, what, dtype):
    return block.create_var(name=unique_name.generate_with_ignorable_key(f"{prefix}.{what}"),
                            dtype=dtype, persistable=False)


def _append_norm(block, prefix, v, dim, dtype, out=None):
    """Append ops computing ||v|| over norm_axes (kept as size-1 axes) to block: abs, square,
    reduce_sum, square root. Returns the variable holding it (out when given)."""
    abs_v = _tmp(block, prefix, "weight_norm_abs", dtype)
    block.append_op("abs", inputs={"X": v}, outputs={"Out": abs_v})
    squares = _tmp(block, prefix, "weight_norm_pow", dtype)
    block.append_op("pow", inputs={"X": abs_v}, outputs={"Out": squares},
                    attrs={"factor": 2.0})
    total = _tmp(block, prefix, "weight_norm_sum", dtype)
    block.append_op("reduce_sum", inputs={"X": squares}, outputs={"Out": total},
                    attrs={"dim": norm_axes(len(v.shape), dim), "keep_dim": True,
                           "reduce_all": dim is None})
    out = out if out is not None else _tmp(block, prefix, "weight_norm_norm", dtype)
    block.append_op("pow", inputs={"X": total}, outputs={"Out": out}, attrs={"factor": 0.5})
    return out


def _renamed(attr, suffix):
    """attr's parameter kwargs, for the `<name><suffix>` parameter."""
    kwargs = attr._to_kwargs()
    kwargs["name"] = attr.name + suffix
    return kwargs


def create_weight_normalized(helper, attr, shape, dtype, initializer):
    """Create `<attr.name>_g` and `<attr.name>_v` (their initialisation in the startup
    program) and return the main-program variable w = v * g / ||v||. attr.name must be set."""
    dim = attr.dim
    if dim is not None and not -len(shape) <= dim < len(shape):
        raise ValueError(f"WeightNormParamAttr: dim={dim} is out of range for a parameter of "
                         f"shape {list(shape)}")
    if dim is not None and dim < 0:
        dim += len(shape)
    g_shape = magnitude_shape(shape, dim)
    g_kwargs, v_kwargs = _renamed(attr, "_g"), _renamed(attr, "_v")

    startup = helper.startup_program.global_block()
    if v_kwargs["name"] not in startup.vars:
        v_init = startup.create_parameter(shape=shape, dtype=dtype, initializer=initializer,
                                          **v_kwargs)
        g_init = startup.create_parameter(shape=g_shape, dtype=dtype, **g_kwargs)
        _append_norm(startup, helper.name, v_init, dim, dtype, out=g_init)

    main = helper.main_program.global_block()
    g = main.create_parameter(shape=g_shape, dtype=dtype, **g_kwargs)
    v = main.create_parameter(shape=shape, dtype=dtype, **v_kwargs)
    return _apply(helper, g, v, dim, dtype)


def _apply(helper, g, v, dim, dtype):
    """w = v * (g / ||v||), appended to the current block of the main program."""
    block = helper.main_program.current_block()
    norm = _append_norm(block, helper.name, v, dim, dtype)
    ratio = _tmp(block, helper.name, "weight_norm_scale", dtype)
    block.append_op("elementwise_div", inputs={"X": g, "Y": norm}, outputs={"Out": ratio},
                    attrs={"axis": -1})
    flat = _tmp(block, helper.name, "weight_norm_reshape", dtype)
    length = 1 if dim is None else v.shape[dim]
    block.append_op("reshape2", inputs={"X": ratio},
                    outputs={"Out": flat, "XShape": _tmp(block, helper.name, "xshape", dtype)},
                    attrs={"shape": [length]})
    w = _tmp(block, helper.name, "weight_norm_w", dtype)
    block.append_op("elementwise_mul", inputs={"X": v, "Y": flat}, outputs={"Out": w},
                    attrs={"axis": -1 if dim is None else dim})
    return w
