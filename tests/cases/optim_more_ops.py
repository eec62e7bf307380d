"""Cases for the optimizer update ops added for Fluid 1.8 (ops/optim_more.py), each against
the update formula of Paddle's op documentation."""

import numpy as np

from opcheck import case

R = np.random.default_rng(11)


def f64(*shape):
    return R.uniform(-1, 1, shape)


P, G, LR = f64(4, 3), f64(4, 3), np.array([0.05])


def _adamax_ref(i, a):
    m = a["beta1"] * i["Moment"] + (1 - a["beta1"]) * i["Grad"]
    u = np.maximum(a["beta2"] * i["InfNorm"] + a["epsilon"], np.abs(i["Grad"]))
    p = i["Param"] - i["LearningRate"] / (1 - i["Beta1Pow"]) * m / u
    return {"ParamOut": p, "MomentOut": m, "InfNormOut": u}


case("adamax", {"Param": P, "Grad": G, "LearningRate": LR, "Moment": f64(4, 3),
                "InfNorm": np.abs(f64(4, 3)), "Beta1Pow": np.array([0.9 ** 2])},
     attrs={"beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8}, reference=_adamax_ref)


def _decayed_ref(i, a):
    m = a["decay"] * i["Moment"] + (1 - a["decay"]) * i["Grad"] ** 2
    return {"ParamOut": i["Param"] - i["LearningRate"] * i["Grad"] / (np.sqrt(m) + a["epsilon"]),
            "MomentOut": m}


case("decayed_adagrad", {"Param": P, "Grad": G, "LearningRate": LR,
                         "Moment": np.abs(f64(4, 3))},
     attrs={"decay": 0.95, "epsilon": 1e-6}, reference=_decayed_ref)


def _ftrl_ref(i, a):
    g, sq, lin, p, lr = (i["Grad"], i["SquaredAccumulator"], i["LinearAccumulator"],
                         i["Param"], i["LearningRate"])
    new = sq + g * g
    lin = lin + g - (np.sqrt(new) - np.sqrt(sq)) / lr * p
    y = np.sqrt(new) / lr + 2 * a["l2"]
    p = np.where(np.abs(lin) > a["l1"], (a["l1"] * np.sign(lin) - lin) / y, 0.0)
    return {"ParamOut": p, "SquaredAccumOut": new, "LinearAccumOut": lin}


case("ftrl", {"Param": P, "Grad": G, "LearningRate": LR,
              "SquaredAccumulator": np.abs(f64(4, 3)) + 0.1, "LinearAccumulator": f64(4, 3)},
     attrs={"l1": 0.1, "l2": 0.2, "lr_power": -0.5}, reference=_ftrl_ref,
     out_to_in={"SquaredAccumOut": "SquaredAccumulator",
                "LinearAccumOut": "LinearAccumulator"})


def _dpsgd_ref(i, a):
    norm = np.sqrt((i["Grad"] ** 2).sum())
    scale = norm / a["clip"] if norm > a["clip"] else 1.0
    return {"ParamOut": i["Param"] - i["LearningRate"] * i["Grad"] / scale}


case("dpsgd", {"Param": P, "Grad": G * 5, "LearningRate": LR},
     attrs={"clip": 1.0, "batch_size": 16.0, "sigma": 0.0, "seed": 0}, reference=_dpsgd_ref)


def _lamb_ref(i, a):
    b1, b2, eps, wd = a["beta1"], a["beta2"], a["epsilon"], a["weight_decay"]
    m1 = b1 * i["Moment1"] + (1 - b1) * i["Grad"]
    m2 = b2 * i["Moment2"] + (1 - b2) * i["Grad"] ** 2
    r = (m1 / (1 - i["Beta1Pow"])) / (np.sqrt(m2 / (1 - i["Beta2Pow"])) + eps) + wd * i["Param"]
    ratio = np.linalg.norm(i["Param"]) / np.linalg.norm(r)
    return {"ParamOut": i["Param"] - i["LearningRate"] * ratio * r, "Moment1Out": m1,
            "Moment2Out": m2}


case("lamb", {"Param": P, "Grad": G, "LearningRate": LR, "Moment1": f64(4, 3),
              "Moment2": np.abs(f64(4, 3)), "Beta1Pow": np.array([0.81]),
              "Beta2Pow": np.array([0.998])},
     attrs={"beta1": 0.9, "beta2": 0.999, "epsilon": 1e-6, "weight_decay": 0.01},
     reference=_lamb_ref)


def _lars_ref(i, a):
    p, g, decay = i["Param"], i["Grad"], a["lars_weight_decay"]
    local = i["LearningRate"] * a["lars_coeff"] * np.linalg.norm(p) / (
        np.linalg.norm(g) + decay * np.linalg.norm(p))
    v = a["mu"] * i["Velocity"] + local * (g + decay * p)
    return {"ParamOut": p - v, "VelocityOut": v}


case("lars_momentum", {"Param": P, "Grad": G, "LearningRate": LR, "Velocity": f64(4, 3)},
     attrs={"mu": 0.9, "lars_coeff": 0.001, "lars_weight_decay": 0.0005}, reference=_lars_ref)
