"""Cases for math, fill, activation and loss ops."""

import numpy as np

from opcheck import case

R = np.random.default_rng(42)


def f64(*shape, lo=-1.0, hi=1.0):
    return R.uniform(lo, hi, shape)


def away_from_zero(*shape):
    x = f64(*shape)
    return np.where(np.abs(x) < 0.1, 0.5, x)


# --- elementwise (Fluid's axis broadcasting) -------------------------------------------------
def _ref(fn):
    def ref(ins, attrs):
        x, y = ins["X"], ins["Y"]
        axis = attrs["axis"]
        if axis != -1 and x.ndim > y.ndim:
            y = y.reshape([1] * axis + list(y.shape) + [1] * (x.ndim - axis - y.ndim))
        return {"Out": fn(x, y)}
    return ref


for op, fn in (("add", np.add), ("sub", np.subtract), ("mul", np.multiply),
               ("div", np.divide), ("max", np.maximum), ("min", np.minimum)):
    y_same = f64(3, 4) + (3.0 if op == "div" else 0.0)
    x = f64(3, 4)
    if op in ("max", "min"):
        y_same = x + np.where(R.random((3, 4)) > 0.5, 0.3, -0.3)  # no ties
    case(f"elementwise_{op}", {"X": x, "Y": y_same}, reference=_ref(fn), name="same")
    case(f"elementwise_{op}", {"X": f64(2, 3, 4), "Y": f64(3) + (3.0 if op == "div" else 0)},
         attrs={"axis": 1}, reference=_ref(fn), name="axis1",
         check_grad=op not in ("max", "min"))
    case(f"elementwise_{op}", {"X": f64(2, 3, 4), "Y": f64(4) + (3.0 if op == "div" else 0)},
         reference=_ref(fn), name="trailing", check_grad=op not in ("max", "min"))
case("elementwise_add", {"X": f64(2, 3, 4), "Y": f64(2, 1, 4)}, reference=_ref(np.add),
     name="size1_broadcast")
case("elementwise_add", {"X": f64(5, 3), "Y": f64(3)}, attrs={"axis": 1}, reference=_ref(np.add),
     name="fc_bias")  # Y's gradient: a column sum (a fused kernel on a GPU)
case("elementwise_pow", {"X": f64(3, 4, lo=0.5, hi=2.0), "Y": f64(3, 4, lo=0.5, hi=2.0)},
     reference=_ref(np.power))

# --- mul / scale / sum / mean / sign ----------------------------------------------------------
case("mul", {"X": f64(4, 5), "Y": f64(5, 3)}, reference=lambda i, a: {"Out": i["X"] @ i["Y"]})
case("mul", {"X": f64(2, 3, 2, 2), "Y": f64(4, 3)}, attrs={"x_num_col_dims": 2},
     reference=lambda i, a: {"Out": (i["X"].reshape(6, 4) @ i["Y"]).reshape(2, 3, 3)},
     name="flatten")
case("scale", {"X": f64(3, 4)}, attrs={"scale": 2.5, "bias": 0.5},
     reference=lambda i, a: {"Out": i["X"] * 2.5 + 0.5})
case("scale", {"X": f64(3, 4)}, attrs={"scale": 2.0, "bias": 1.0, "bias_after_scale": False},
     reference=lambda i, a: {"Out": (i["X"] + 1.0) * 2.0}, name="bias_first")
case("sum", {"X": [f64(3, 4), f64(3, 4), f64(3, 4)]},
     reference=lambda i, a: {"Out": sum(i["X"])})
case("mean", {"X": f64(3, 4)}, reference=lambda i, a: {"Out": np.array([i["X"].mean()])})
case("sign", {"X": away_from_zero(3, 4)}, reference=lambda i, a: {"Out": np.sign(i["X"])})

# --- fills ----------------------------------------------------------------------------------
case("fill_constant", {}, attrs={"shape": [2, 3], "dtype": "float32", "value": 1.5},
     reference=lambda i, a: {"Out": np.full((2, 3), 1.5, np.float32)})
case("fill_any_like", {"X": f64(2, 3)}, attrs={"value": 2.0},
     reference=lambda i, a: {"Out": np.full((2, 3), 2.0)})
case("fill_zeros_like", {"X": f64(2, 3)}, reference=lambda i, a: {"Out": np.zeros((2, 3))})
case("assign", {"X": f64(2, 3)}, reference=lambda i, a: {"Out": i["X"]})
case("assign_value", {}, attrs={"shape": [2, 2], "dtype": "float64",
                                "values": np.arange(4.0)},
     reference=lambda i, a: {"Out": np.arange(4.0).reshape(2, 2)})
for name in ("uniform_random", "gaussian_random", "truncated_gaussian_random"):
    case(name, {}, attrs={"shape": [3, 4], "dtype": "float32", "seed": 7})

# --- activations ----------------------------------------------------------------------------
def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


for op, fn, x in (
        ("relu", lambda x: np.maximum(x, 0), away_from_zero(3, 4)),
        ("sigmoid", _sigmoid, f64(3, 4, lo=-4, hi=4)),
        ("tanh", np.tanh, f64(3, 4)),
        ("exp", np.exp, f64(3, 4)),
        ("log", np.log, f64(3, 4, lo=0.5, hi=2)),
        ("sqrt", np.sqrt, f64(3, 4, lo=0.5, hi=2)),
        ("square", np.square, f64(3, 4)),
        ("abs", np.abs, away_from_zero(3, 4))):
    case(op, {"X": x}, reference=lambda i, a, fn=fn: {"Out": fn(i["X"])})
case("leaky_relu", {"X": away_from_zero(3, 4)}, attrs={"alpha": 0.1},
     reference=lambda i, a: {"Out": np.where(i["X"] > 0, i["X"], 0.1 * i["X"])})
case("sigmoid", {"X": np.array([[-800.0, 800.0, 0.0]])}, check_grad=False, name="extreme",
     reference=lambda i, a: {"Out": np.array([[0.0, 1.0, 0.5]])})


def _softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


case("softmax", {"X": f64(3, 5)}, reference=lambda i, a: {"Out": _softmax(i["X"])})
case("softmax", {"X": f64(2, 3, 4)}, attrs={"axis": 1}, name="axis1",
     reference=lambda i, a: {"Out": _softmax(i["X"], 1)})

# --- losses -----------------------------------------------------------------------------------
labels = np.array([[0], [3], [2], [1]], dtype=np.int64)
probs = _softmax(f64(4, 5))
case("cross_entropy", {"X": probs, "Label": labels},
     reference=lambda i, a: {"Y": -np.log(np.take_along_axis(i["X"], i["Label"], 1))})
soft = _softmax(f64(4, 5))
case("cross_entropy", {"X": probs, "Label": soft}, attrs={"soft_label": True}, name="soft",
     reference=lambda i, a: {"Y": -(i["Label"] * np.log(i["X"])).sum(1, keepdims=True)})
case("cross_entropy", {"X": probs, "Label": np.array([[0], [-1], [2], [1]])},
     attrs={"ignore_index": -1}, name="ignore",
     reference=lambda i, a: {"Y": np.where(
         i["Label"] == -1, 0.0,
         -np.log(np.take_along_axis(i["X"], np.maximum(i["Label"], 0), 1)))})


def _swce_ref(i, a):
    logits, label = i["Logits"], i["Label"]
    sm = _softmax(logits)
    if a["soft_label"]:
        loss = -(label * np.log(sm)).sum(-1, keepdims=True)
    else:
        loss = -np.log(np.take_along_axis(sm, np.maximum(label, 0), -1))
        loss = np.where(label == a["ignore_index"], 0.0, loss)
    return {"Softmax": sm, "Loss": loss}


logits = f64(4, 5, lo=-3, hi=3)
case("softmax_with_cross_entropy", {"Logits": logits, "Label": labels}, reference=_swce_ref)
case("softmax_with_cross_entropy", {"Logits": logits, "Label": soft},
     attrs={"soft_label": True}, reference=_swce_ref, name="soft")
case("softmax_with_cross_entropy", {"Logits": logits, "Label": np.array([[0], [-100], [2], [1]])},
     reference=_swce_ref, name="ignore")
# an ignore_index that is also a valid class: those rows must still be ignored
case("softmax_with_cross_entropy", {"Logits": logits, "Label": labels},
     attrs={"ignore_index": 3}, reference=_swce_ref, name="ignore_a_class")
case("softmax_with_cross_entropy",
     {"Logits": np.array([[1000.0, 0.0, -1000.0]]), "Label": np.array([[2]])},
     reference=lambda i, a: {"Loss": np.array([[2000.0]])}, check_grad=False, name="stable")
