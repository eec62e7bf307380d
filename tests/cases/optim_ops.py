"""Cases for optimizer update ops (dense and row-sparse gradients), clipping and decay ops,
and embedding lookups."""

import numpy as np

from opcheck import case
from runtime.tensor import SelectedRows

R = np.random.default_rng(7)


def f64(*shape):
    return R.uniform(-1, 1, shape)


P, G = f64(5, 3), f64(5, 3)
LR = np.array([0.1])
ROWS = np.array([3, 0, 3], dtype=np.int64)  # row 3 twice: duplicates must add up
SG_VALUES = f64(3, 3)
SPARSE = SelectedRows(ROWS, SG_VALUES, 5)


def dense_of(g):
    return g.to_dense() if isinstance(g, SelectedRows) else g


# --- sgd -------------------------------------------------------------------------------------
for name, grad in (("dense", G), ("sparse", SPARSE)):
    case("sgd", {"Param": P, "Grad": grad, "LearningRate": LR}, name=name,
         reference=lambda i, a: {"ParamOut": i["Param"] - i["LearningRate"] * dense_of(i["Grad"])})


# --- momentum --------------------------------------------------------------------------------
def _momentum_ref(i, a):
    g, v, lr, mu = dense_of(i["Grad"]), i["Velocity"], i["LearningRate"], a["mu"]
    v_out = mu * v + g
    p_out = i["Param"] - (lr * (g + mu * v_out) if a["use_nesterov"] else lr * v_out)
    return {"ParamOut": p_out, "VelocityOut": v_out}


for name, grad in (("dense", G), ("sparse", SPARSE)):
    for nesterov in (False, True):
        case("momentum", {"Param": P, "Grad": grad, "Velocity": f64(5, 3), "LearningRate": LR},
             attrs={"mu": 0.9, "use_nesterov": nesterov}, reference=_momentum_ref,
             name=f"{name}{'_nesterov' if nesterov else ''}")


# --- adam ------------------------------------------------------------------------------------
def _adam_ref(i, a, lazy=False):
    b1, b2, eps = a["beta1"], a["beta2"], a["epsilon"]
    g = dense_of(i["Grad"])
    m1, m2, p = i["Moment1"].copy(), i["Moment2"].copy(), i["Param"].copy()
    b1p, b2p, lr = i["Beta1Pow"], i["Beta2Pow"], i["LearningRate"]
    lr_t = lr * np.sqrt(1 - b2p) / (1 - b1p)
    rows = np.unique(i["Grad"].ids) if lazy else slice(None)
    m1[rows] = b1 * m1[rows] + (1 - b1) * g[rows]
    m2[rows] = b2 * m2[rows] + (1 - b2) * g[rows] ** 2
    p[rows] = p[rows] - lr_t * m1[rows] / (np.sqrt(m2[rows]) + eps)  # Paddle 1.8's epsilon
    return {"ParamOut": p, "Moment1Out": m1, "Moment2Out": m2, "Beta1PowOut": b1p * b1,
            "Beta2PowOut": b2p * b2}


def _adam_inputs(grad):
    return {"Param": P, "Grad": grad, "LearningRate": LR, "Moment1": f64(5, 3),
            "Moment2": np.abs(f64(5, 3)), "Beta1Pow": np.array([0.9 ** 3]),
            "Beta2Pow": np.array([0.999 ** 3])}


case("adam", _adam_inputs(G), reference=_adam_ref, name="dense")
case("adam", _adam_inputs(SPARSE), reference=_adam_ref, name="sparse")
case("adam", _adam_inputs(SPARSE), attrs={"lazy_mode": True}, name="sparse_lazy",
     reference=lambda i, a: _adam_ref(i, a, lazy=True))


# --- adagrad / adadelta / rmsprop --------------------------------------------------------------
def _adagrad_ref(i, a):
    g = dense_of(i["Grad"])
    m = i["Moment"] + g * g
    touched = np.zeros(P.shape[0], bool)
    if isinstance(i["Grad"], SelectedRows):
        touched[i["Grad"].ids] = True
        m = np.where(touched[:, None], m, i["Moment"])
    else:
        touched[:] = True
    step = i["LearningRate"] * g / (np.sqrt(m) + a["epsilon"])
    return {"ParamOut": i["Param"] - np.where(touched[:, None], step, 0), "MomentOut": m}


for name, grad in (("dense", G), ("sparse", SPARSE)):
    case("adagrad", {"Param": P, "Grad": grad, "Moment": np.abs(f64(5, 3)),
                     "LearningRate": LR}, reference=_adagrad_ref, name=name)


def _adadelta_ref(i, a):
    rho, eps, g = a["rho"], a["epsilon"], dense_of(i["Grad"])
    g2 = rho * i["AvgSquaredGrad"] + (1 - rho) * g * g
    update = -np.sqrt((i["AvgSquaredUpdate"] + eps) / (g2 + eps)) * g
    u2 = rho * i["AvgSquaredUpdate"] + (1 - rho) * update * update
    return {"ParamOut": i["Param"] + i["LearningRate"] * update, "AvgSquaredGradOut": g2,
            "AvgSquaredUpdateOut": u2}


case("adadelta", {"Param": P, "Grad": G, "AvgSquaredGrad": np.abs(f64(5, 3)),
                  "AvgSquaredUpdate": np.abs(f64(5, 3)), "LearningRate": np.array([1.0])},
     reference=_adadelta_ref)


def _rmsprop_ref(i, a):
    rho, eps, g = a["decay"], a["epsilon"], dense_of(i["Grad"])
    ms = rho * i["MeanSquare"] + (1 - rho) * g * g
    mg = rho * i["MeanGrad"] + (1 - rho) * g if a["centered"] else i["MeanGrad"]
    denom = np.sqrt(ms - mg * mg + eps) if a["centered"] else np.sqrt(ms + eps)
    mom = a["momentum"] * i["Moment"] + i["LearningRate"] * g / denom
    return {"ParamOut": i["Param"] - mom, "MomentOut": mom, "MeanSquareOut": ms,
            "MeanGradOut": mg}


for centered in (False, True):
    case("rmsprop", {"Param": P, "Grad": G, "Moment": f64(5, 3),
                     "MeanSquare": np.abs(f64(5, 3)) + 1, "MeanGrad": 0.1 * f64(5, 3),
                     "LearningRate": LR},
         attrs={"momentum": 0.5, "centered": centered}, reference=_rmsprop_ref,
         name="centered" if centered else "plain")

# --- clipping and decay ----------------------------------------------------------------------
X = f64(4, 3) * 2
case("clip", {"X": np.where(np.abs(np.abs(X) - 1) < 0.05, 0.5, X)}, attrs={"min": -1.0, "max": 1.0},
     reference=lambda i, a: {"Out": np.clip(i["X"], -1, 1)})
case("clip", {"X": SPARSE}, attrs={"min": -0.5, "max": 0.5}, check_grad=False, name="sparse",
     reference=lambda i, a: {"Out": np.clip(dense_of(i["X"].merged()), -0.5, 0.5)})


def _clip_norm_ref(i, a):
    x = dense_of(i["X"])
    norm = np.sqrt((x * x).sum())
    return {"Out": x * a["max_norm"] / norm if norm > a["max_norm"] else x}


case("clip_by_norm", {"X": f64(4, 3)}, attrs={"max_norm": 0.5}, reference=_clip_norm_ref)
case("clip_by_norm", {"X": f64(4, 3)}, attrs={"max_norm": 100.0}, reference=_clip_norm_ref,
     name="below")
case("squared_l2_norm", {"X": f64(4, 3)},
     reference=lambda i, a: {"Out": np.array([(i["X"] ** 2).sum()])})
case("squared_l2_norm", {"X": SPARSE}, check_grad=False, name="sparse",
     reference=lambda i, a: {"Out": np.array([(dense_of(i["X"]) ** 2).sum()])})
case("merge_selected_rows", {"X": SPARSE},
     reference=lambda i, a: {"Out": dense_of(i["X"])})
for kind, term in (("l2", lambda p: p), ("l1", np.sign)):
    case("sparse_weight_decay", {"Grad": SPARSE, "Param": P}, attrs={"coeff": 0.1, "kind": kind},
         name=kind, reference=lambda i, a, term=term: {"Out": np.where(
             np.isin(np.arange(5), ROWS)[:, None], dense_of(i["Grad"]) + 0.1 * term(i["Param"]),
             0.0)})

# --- embedding lookups -----------------------------------------------------------------------
W = f64(6, 3)
IDS = np.array([[1], [4], [1], [0]], dtype=np.int64)
for sparse in (False, True):
    case("lookup_table", {"W": W, "Ids": IDS}, attrs={"is_sparse": sparse},
         name="sparse" if sparse else "dense", reference=lambda i, a: {"Out": i["W"][[1, 4, 1, 0]]})
case("lookup_table", {"W": W, "Ids": IDS}, attrs={"padding_idx": 1}, name="padding",
     reference=lambda i, a: {"Out": np.where(IDS == 1, 0.0, i["W"][IDS[:, 0]])})
case("lookup_table_v2", {"W": W, "Ids": np.array([[1, 2, 1, 5], [0, 0, 3, 4]])},
     reference=lambda i, a: {"Out": i["W"][i["Ids"]]})
case("lookup_table_v2", {"W": W, "Ids": np.array([[1, 2, 1, 5], [0, 0, 3, 4]])},
     attrs={"is_sparse": True}, name="sparse", reference=lambda i, a: {"Out": i["W"][i["Ids"]]})
