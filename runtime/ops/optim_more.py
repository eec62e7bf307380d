"""More of Fluid 1.8's optimizer update ops: adamax, decayed_adagrad, ftrl, dpsgd, lamb,
lars_momentum (the formulas of their Paddle docs). Updates are in place on the persistable
state, as for the ops of optim.py; gradients are dense (a SelectedRows one is densified)."""

import numpy as np

from ..tensor import SelectedRows
from .optim import _optimizer_op


def _dense(grad):
    return grad.to_dense() if isinstance(grad, SelectedRows) else grad


def _lr(ins):
    return ins["LearningRate"].reshape(())


# --- Adamax: Adam with the infinity norm -----------------------------------------------------------
adamax = _optimizer_op("adamax", ("Moment", "InfNorm"),
                       {"beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8}, extra_inputs=("Beta1Pow",))


@adamax.kernel
def _adamax(ctx, ins, attrs):
    p, g, m, u = ins["Param"], _dense(ins["Grad"]), ins["Moment"], ins["InfNorm"]
    b1, b2, eps = attrs["beta1"], attrs["beta2"], attrs["epsilon"]
    m *= b1
    m += (1 - b1) * g
    ctx.xp.maximum(b2 * u + eps, ctx.xp.abs(g), out=u)
    p -= (_lr(ins) / (1 - ins["Beta1Pow"].reshape(()))) * m / u
    return {"ParamOut": p, "MomentOut": m, "InfNormOut": u}


# --- Decayed Adagrad -----------------------------------------------------------------------------
decayed_adagrad = _optimizer_op("decayed_adagrad", ("Moment",), {"decay": 0.95, "epsilon": 1e-6})


@decayed_adagrad.kernel
def _decayed_adagrad(ctx, ins, attrs):
    p, g, m = ins["Param"], _dense(ins["Grad"]), ins["Moment"]
    m *= attrs["decay"]
    m += (1 - attrs["decay"]) * g * g
    p -= _lr(ins) * g / (ctx.xp.sqrt(m) + attrs["epsilon"])
    return {"ParamOut": p, "MomentOut": m}


# --- FTRL ----------------------------------------------------------------------------------------
ftrl = _optimizer_op("ftrl", ("SquaredAccumulator", "LinearAccumulator"),
                     {"l1": 0.0, "l2": 0.0, "lr_power": -0.5},
                     out_names={"SquaredAccumulator": "SquaredAccumOut",
                                "LinearAccumulator": "LinearAccumOut"})


@ftrl.kernel
def _ftrl(ctx, ins, attrs):
    xp = ctx.xp
    p, g = ins["Param"], _dense(ins["Grad"])
    sq, lin = ins["SquaredAccumulator"], ins["LinearAccumulator"]
    lr, l1, l2, power = _lr(ins), attrs["l1"], attrs["l2"], attrs["lr_power"]
    new = sq + g * g
    if power == -0.5:
        lin += g - (xp.sqrt(new) - xp.sqrt(sq)) / lr * p
        y = xp.sqrt(new) / lr + 2 * l2
    else:
        lin += g - (new ** -power - sq ** -power) / lr * p
        y = new ** -power / lr + 2 * l2
    p[...] = xp.where(xp.abs(lin) > l1, (l1 * xp.sign(lin) - lin) / y, 0.0)
    sq[...] = new
    return {"ParamOut": p, "SquaredAccumOut": sq, "LinearAccumOut": lin}


# --- DP-SGD: clipped gradient plus Gaussian noise ----------------------------------------------
dpsgd = _optimizer_op("dpsgd", (), {"clip": 10.0, "batch_size": 16.0, "sigma": 1.0, "seed": 0})
dpsgd.random = True


@dpsgd.kernel
def _dpsgd(ctx, ins, attrs):
    p, g = ins["Param"], _dense(ins["Grad"])
    norm = float(np.sqrt(float((g * g).sum())))
    scale = norm / attrs["clip"] if norm > attrs["clip"] else 1.0
    rng = np.random.default_rng(attrs["seed"]) if attrs["seed"] else ctx.rng
    noise = float(rng.standard_normal()) * attrs["sigma"]
    p -= _lr(ins) * (g / scale + noise / attrs["batch_size"])
    return {"ParamOut": p}


# --- LAMB: Adam moments, a layer-wise trust ratio ---------------------------------------------------
lamb = _optimizer_op("lamb", ("Moment1", "Moment2"),
                     {"weight_decay": 0.01, "beta1": 0.9, "beta2": 0.999, "epsilon": 1e-6},
                     extra_inputs=("Beta1Pow", "Beta2Pow"))


@lamb.kernel
def _lamb(ctx, ins, attrs):
    xp = ctx.xp
    p, g, m1, m2 = ins["Param"], _dense(ins["Grad"]), ins["Moment1"], ins["Moment2"]
    b1, b2, eps, wd = attrs["beta1"], attrs["beta2"], attrs["epsilon"], attrs["weight_decay"]
    m1 *= b1
    m1 += (1 - b1) * g
    m2 *= b2
    m2 += (1 - b2) * g * g
    m1_hat = m1 / (1 - ins["Beta1Pow"].reshape(()))
    m2_hat = m2 / (1 - ins["Beta2Pow"].reshape(()))
    r = m1_hat / (xp.sqrt(m2_hat) + eps) + wd * p
    p_norm, r_norm = float(xp.sqrt((p * p).sum())), float(xp.sqrt((r * r).sum()))
    ratio = p_norm / r_norm if p_norm > 0 and r_norm > 0 else 1.0
    p -= _lr(ins) * ratio * r
    return {"ParamOut": p, "Moment1Out": m1, "Moment2Out": m2}


# --- LARS momentum ----------------------------------------------------------------------------------
lars = _optimizer_op("lars_momentum", ("Velocity",),
                     {"mu": 0.9, "lars_coeff": 0.001, "lars_weight_decay": 0.0005})


@lars.kernel
def _lars_momentum(ctx, ins, attrs):
    xp = ctx.xp
    p, g, v = ins["Param"], _dense(ins["Grad"]), ins["Velocity"]
    decay = attrs["lars_weight_decay"]
    p_norm, g_norm = float(xp.sqrt((p * p).sum())), float(xp.sqrt((g * g).sum()))
    local = _lr(ins)
    if p_norm > 0 and g_norm > 0:
        local = local * attrs["lars_coeff"] * p_norm / (g_norm + decay * p_norm)
    v *= attrs["mu"]
    v += local * (g + decay * p)
    p -= v
    return {"ParamOut": p, "VelocityOut": v}
