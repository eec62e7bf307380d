"""Optimizer update ops (sgd, momentum, adam, adagrad, adadelta, rmsprop) and the gradient
clipping/decay ops they work with. Updates happen in place on the persistable state, whose
`...Out` outputs must name the same variables as the inputs. Gradients may be SelectedRows
(from `embedding(is_sparse=True)`): those update only the rows present, except where the
algorithm itself touches every row (momentum's velocity decay, non-lazy Adam's moments)."""

import numpy as np

from ..dtypes import VarType
from ..tensor import SelectedRows
from . import cpu_kernels, fused
from .registry import Special, defop, infer_same_as


def _check_inplace(pairs):
    def infer(ic):
        for src, dst in pairs:
            if ic.op.inputs.get(src) != ic.op.outputs.get(dst):
                ic.fail(f"{dst} must name the same variable as {src} (updated in place): "
                        f"{ic.op.outputs.get(dst)} vs {ic.op.inputs.get(src)}")
    return infer


def _optimizer_op(name, state, attrs, extra_inputs=(), out_names=None):
    """Declare an optimizer op with Param/Grad/LearningRate, `state` slots updated in place
    (written as `<slot>Out`, or as out_names[slot])."""
    out_names = out_names or {}
    inputs = ("Param", "Grad", "LearningRate") + tuple(state) + tuple(extra_inputs)
    outputs = ("ParamOut",) + tuple(out_names.get(s, s + "Out") for s in state)
    opdef = defop(name, inputs=inputs, outputs=outputs, attrs=attrs)
    pairs = [("Param", "ParamOut")] + [(s, out_names.get(s, s + "Out")) for s in state]
    opdef.infer(_check_inplace(pairs))
    return opdef


def _merged(grad):
    return grad.merged() if isinstance(grad, SelectedRows) else grad


def _fused_dense(ctx, *arrays):
    """The fused CUDA kernels when they serve these arrays (a dense gradient), else None."""
    kernels = fused.kernels(ctx.xp)
    if kernels is None or isinstance(arrays[0], SelectedRows) or not fused.takes(*arrays):
        return None
    return kernels


# --- SGD ---------------------------------------------------------------------------------------
sgd = _optimizer_op("sgd", (), {})


@sgd.kernel
def _sgd(ctx, ins, attrs):
    p, g, lr = ins["Param"], _merged(ins["Grad"]), ins["LearningRate"]
    kernels = _fused_dense(ctx, g, p)
    if kernels is not None:
        kernels.sgd(g, lr, p)
    elif isinstance(g, SelectedRows):
        p[g.ids] -= lr * g.value
    elif not cpu_kernels.sgd(p, g, lr):
        p -= lr * g
    return {"ParamOut": p}


# --- Momentum (optionally Nesterov) ----------------------------------------------------------
momentum = _optimizer_op("momentum", ("Velocity",), {"mu": 0.9, "use_nesterov": False})


@momentum.kernel
def _momentum(ctx, ins, attrs):
    p, g, v, lr = ins["Param"], ins["Grad"], ins["Velocity"], ins["LearningRate"]
    mu = attrs["mu"]
    if ctx.xp is np and type(g) is np.ndarray:  # a dense NumPy gradient (CPU): the same steps
        # as below, minus the checks that cannot apply (no CUDA kernels, no SelectedRows)
        if g.size < cpu_kernels.SMALL:  # NumPy's calls, given NumPy scalars of the types
            # NumPy makes of the operands (the same results, less work per call): mu as a
            # scalar of the velocity's type (cpu_kernels.typed), a one-element learning rate
            # as its element (a scalar of its dtype promotes as the [1] array does)
            typed_mu = cpu_kernels.TYPED.get((mu, v.dtype)) if type(mu) is float else None
            if type(lr) is np.ndarray and lr.shape == (1,):
                lr = lr[0]
            _dense_momentum(p, v, g, lr, cpu_kernels.typed(mu, v.dtype) if typed_mu is None
                            else typed_mu, attrs["use_nesterov"])
        elif not cpu_kernels.momentum(p, v, g, lr, mu, attrs["use_nesterov"]):
            _dense_momentum(p, v, g, lr, mu, attrs["use_nesterov"])
        return {"ParamOut": p, "VelocityOut": v}
    g = _merged(g)
    kernels = _fused_dense(ctx, g, p, v)
    if kernels is not None:
        update = kernels.nesterov if attrs["use_nesterov"] else kernels.momentum
        update(g, lr, mu, p, v)
        return {"ParamOut": p, "VelocityOut": v}
    if (not isinstance(g, SelectedRows)
            and cpu_kernels.momentum(p, v, g, lr, mu, attrs["use_nesterov"])):
        return {"ParamOut": p, "VelocityOut": v}
    if isinstance(g, SelectedRows):  # every row's velocity decays; only present rows get g
        v *= mu
        v[g.ids] += g.value
        if attrs["use_nesterov"]:
            p -= lr * mu * v
            p[g.ids] -= lr * g.value
        else:
            p -= lr * v
    else:
        _dense_momentum(p, v, g, lr, mu, attrs["use_nesterov"])
    return {"ParamOut": p, "VelocityOut": v}


@momentum.specialize
def _momentum_special(step, ins):
    p, g, v, lr = ins["Param"], ins["Grad"], ins["Velocity"], ins["LearningRate"]
    if not (type(p) is np.ndarray and type(g) is np.ndarray and type(v) is np.ndarray
            and type(lr) is np.ndarray):
        return None
    mu, nesterov = step.attrs["mu"], step.attrs["use_nesterov"]
    outs = [f"{{{out}}} = {{{slot}}}" for out, slot in (("ParamOut", "Param"),
                                                        ("VelocityOut", "Velocity"))
            if step.op.outputs[out] != step.op.inputs[slot]]
    if g.size >= cpu_kernels.SMALL:  # (the compiled loop, or NumPy's calls)
        call = "({Param}, {Velocity}, {Grad}, {LearningRate}, {k_mu}, {k_nesterov})"
        return Special([f"if not {{k_fused}}{call}:", f"    {{k_numpy}}{call}"] + outs,
                       {"fused": cpu_kernels.momentum, "numpy": _dense_momentum, "mu": mu,
                        "nesterov": nesterov}, aliasing=True, in_place=True)
    # the small path's NumPy calls (see _momentum): mu as a scalar of the velocity's type, a
    # one-element learning rate as its element
    # (lr * v as the ufunc's call: a NumPy scalar's own multiply only hands it over)
    lr_code = "{LearningRate}[0]" if lr.shape == (1,) else "{LearningRate}"
    typed_mu = cpu_kernels.typed(mu, v.dtype)
    update = (f"{{Param}} -= {{k_multiply}}({lr_code}, {{Grad}} + {{k_mu}} * {{Velocity}})"
              if nesterov else f"{{Param}} -= {{k_multiply}}({lr_code}, {{Velocity}})")
    return Special(["{Velocity} *= {k_mu}", "{Velocity} += {Grad}", update] + outs,
                   {"mu": typed_mu, "multiply": np.multiply}, aliasing=True, in_place=True)


def _dense_momentum(p, v, g, lr, mu, nesterov):
    """The momentum update of a dense gradient, in place, in NumPy's (or CuPy's) calls."""
    v *= mu
    v += g
    if nesterov:
        p -= lr * (g + mu * v)
    else:
        p -= lr * v


# --- Adam ----------------------------------------------------------------------------------------
adam = _optimizer_op("adam", ("Moment1", "Moment2", "Beta1Pow", "Beta2Pow"),
                     {"beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8, "lazy_mode": False})


@adam.kernel
def _adam(ctx, ins, attrs):
    xp = ctx.xp
    p, g, lr = ins["Param"], _merged(ins["Grad"]), ins["LearningRate"]
    m1, m2, b1p, b2p = ins["Moment1"], ins["Moment2"], ins["Beta1Pow"], ins["Beta2Pow"]
    b1, b2, eps = attrs["beta1"], attrs["beta2"], attrs["epsilon"]
    kernels = None if attrs["lazy_mode"] else _fused_dense(ctx, g, p, m1, m2, b1p, b2p)
    if kernels is not None:
        kernels.adam(g, lr, b1p, b2p, b1, b2, eps, p, m1, m2)
        b1p *= b1
        b2p *= b2
        return {"ParamOut": p, "Moment1Out": m1, "Moment2Out": m2, "Beta1PowOut": b1p,
                "Beta2PowOut": b2p}
    lr_t = lr * xp.sqrt(1 - b2p) / (1 - b1p)
    eps_t = eps  # Paddle 1.8: epsilon added to sqrt(m2) as is
    if isinstance(g, SelectedRows) and attrs["lazy_mode"]:  # only the rows in this batch
        rows, gv = g.ids, g.value
        m1[rows] = b1 * m1[rows] + (1 - b1) * gv
        m2[rows] = b2 * m2[rows] + (1 - b2) * gv * gv
        p[rows] -= lr_t * m1[rows] / (xp.sqrt(m2[rows]) + eps_t)
    else:
        m1 *= b1
        m2 *= b2
        if isinstance(g, SelectedRows):  # absent rows have gradient 0
            m1[g.ids] += (1 - b1) * g.value
            m2[g.ids] += (1 - b2) * g.value * g.value
        else:
            m1 += (1 - b1) * g
            m2 += (1 - b2) * (g * g)
        p -= lr_t * m1 / (xp.sqrt(m2) + eps_t)
    b1p *= b1
    b2p *= b2
    return {"ParamOut": p, "Moment1Out": m1, "Moment2Out": m2, "Beta1PowOut": b1p,
            "Beta2PowOut": b2p}


# --- Adagrad -------------------------------------------------------------------------------
adagrad = _optimizer_op("adagrad", ("Moment",), {"epsilon": 1e-6})


@adagrad.kernel
def _adagrad(ctx, ins, attrs):
    xp = ctx.xp
    p, g, m, lr = ins["Param"], _merged(ins["Grad"]), ins["Moment"], ins["LearningRate"]
    eps = attrs["epsilon"]
    if isinstance(g, SelectedRows):
        m[g.ids] += g.value * g.value
        p[g.ids] -= lr * g.value / (xp.sqrt(m[g.ids]) + eps)
    else:
        m += g * g
        p -= lr * g / (xp.sqrt(m) + eps)
    return {"ParamOut": p, "MomentOut": m}


# --- Adadelta ------------------------------------------------------------------------------
adadelta = _optimizer_op("adadelta", ("AvgSquaredGrad", "AvgSquaredUpdate"),
                         {"rho": 0.95, "epsilon": 1e-6})


@adadelta.kernel
def _adadelta(ctx, ins, attrs):
    """Zeiler's update scaled by the learning rate (Paddle 1.x ignored the learning rate here;
    pass learning_rate=1.0 to reproduce that)."""
    xp = ctx.xp
    p, g, lr = ins["Param"], ins["Grad"], ins["LearningRate"]
    if isinstance(g, SelectedRows):
        g = g.to_dense()
    g2, u2 = ins["AvgSquaredGrad"], ins["AvgSquaredUpdate"]
    rho, eps = attrs["rho"], attrs["epsilon"]
    g2 *= rho
    g2 += (1 - rho) * g * g
    update = -xp.sqrt((u2 + eps) / (g2 + eps)) * g
    u2 *= rho
    u2 += (1 - rho) * update * update
    p += lr * update
    return {"ParamOut": p, "AvgSquaredGradOut": g2, "AvgSquaredUpdateOut": u2}


# --- RMSProp -------------------------------------------------------------------------------
rmsprop = _optimizer_op("rmsprop", ("Moment", "MeanSquare", "MeanGrad"),
                        {"decay": 0.95, "epsilon": 1e-6, "momentum": 0.0, "centered": False})


@rmsprop.kernel
def _rmsprop(ctx, ins, attrs):
    xp = ctx.xp
    p, g, lr = ins["Param"], ins["Grad"], ins["LearningRate"]
    if isinstance(g, SelectedRows):
        g = g.to_dense()
    mom, ms, mg = ins["Moment"], ins["MeanSquare"], ins["MeanGrad"]
    rho, eps = attrs["decay"], attrs["epsilon"]
    ms *= rho
    ms += (1 - rho) * g * g
    if attrs["centered"]:
        mg *= rho
        mg += (1 - rho) * g
        denom = xp.sqrt(ms - mg * mg + eps)
    else:
        denom = xp.sqrt(ms + eps)
    mom *= attrs["momentum"]
    mom += lr * g / denom
    p -= mom
    return {"ParamOut": p, "MomentOut": mom, "MeanSquareOut": ms, "MeanGradOut": mg}


# --- gradient clipping and decay helpers ------------------------------------------------------
clip = defop("clip", inputs=("X", "Min?", "Max?"), outputs=("Out",),
             attrs={"min": -1.0, "max": 1.0})
clip.infer(infer_same_as())


def _bounds(ins, attrs):
    """(min, max): the Min/Max tensors when given (Fluid 1.8's clamp), else the attrs."""
    lo, hi = ins.get("Min"), ins.get("Max")
    return (attrs["min"] if lo is None else lo.reshape(-1)[0],
            attrs["max"] if hi is None else hi.reshape(-1)[0])


@clip.kernel
def _clip(ctx, ins, attrs):
    x = _merged(ins["X"])
    lo, hi = _bounds(ins, attrs)
    if isinstance(x, SelectedRows):
        return {"Out": SelectedRows(x.ids, ctx.xp.clip(x.value, lo, hi), x.full_height)}
    return {"Out": ctx.xp.clip(x, lo, hi).astype(x.dtype, copy=False)}


@clip.grad(uses=("X", "Min", "Max"), inputs=("X",))
def _clip_grad(ctx, ins, attrs):
    x, dout = ins["X"], ins["Out@GRAD"]
    lo, hi = _bounds(ins, attrs)
    return {"X@GRAD": dout * ((x > lo) & (x < hi))}


clip_by_norm = defop("clip_by_norm", inputs=("X",), outputs=("Out",), attrs={"max_norm": 1.0})
clip_by_norm.infer(infer_same_as())


@clip_by_norm.kernel
def _clip_by_norm(ctx, ins, attrs):
    x = _merged(ins["X"])
    values = x.value if isinstance(x, SelectedRows) else x
    norm = ctx.xp.sqrt((values * values).sum())
    factor = ctx.xp.where(norm > attrs["max_norm"], attrs["max_norm"] / norm, 1.0)
    scaled = (values * factor).astype(values.dtype, copy=False)
    if isinstance(x, SelectedRows):
        return {"Out": SelectedRows(x.ids, scaled, x.full_height)}
    return {"Out": scaled}


squared_l2_norm = defop("squared_l2_norm", inputs=("X",), outputs=("Out",))


@squared_l2_norm.infer
def _sq_norm_shape(ic):
    ic.set_output("Out", [1], ic.input("X").dtype)


@squared_l2_norm.kernel
def _sq_norm(ctx, ins, attrs):
    x = _merged(ins["X"])
    values = x.value if isinstance(x, SelectedRows) else x
    return {"Out": (values * values).sum(dtype=values.dtype).reshape(1)}


@squared_l2_norm.grad(uses=("X",))
def _sq_norm_grad(ctx, ins, attrs):
    return {"X@GRAD": 2 * ins["X"] * ins["Out@GRAD"].reshape(())}


merge_selected_rows = defop("merge_selected_rows", inputs=("X",), outputs=("Out",))
merge_selected_rows.infer(infer_same_as())


@merge_selected_rows.kernel
def _merge_rows(ctx, ins, attrs):
    return {"Out": _merged(ins["X"])}


sparse_weight_decay = defop("sparse_weight_decay", inputs=("Grad", "Param"), outputs=("Out",),
                            attrs={"coeff": 0.0, "kind": "l2"})


@sparse_weight_decay.infer
def _swd_shape(ic):
    g = ic.input("Grad")
    ic.set_output("Out", g.shape, g.dtype, type=VarType.SELECTED_ROWS)


@sparse_weight_decay.kernel
def _sparse_weight_decay(ctx, ins, attrs):
    """Add the decay term to the rows the sparse gradient touches (each row once)."""
    g, p = _merged(ins["Grad"]), ins["Param"]
    rows = p[g.ids]
    term = rows if attrs["kind"] == "l2" else ctx.xp.sign(rows)
    return {"Out": SelectedRows(g.ids, g.value + attrs["coeff"] * term, g.full_height)}
