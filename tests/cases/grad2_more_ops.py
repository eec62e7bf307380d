"""More second-order cases (see grad2_ops.py): activations, division, the linear shape and
reduction ops, conv2d, conv3d. The gradient op's forward is checked against the first-order
formula; its own gradient against finite differences."""

import numpy as np

from opcheck import case

R = np.random.default_rng(27)


def f64(*shape, lo=-1.0, hi=1.0):
    return R.uniform(lo, hi, shape)


_x = np.array([[-1.5, -0.4, 0.3], [0.8, -0.9, 1.7]])
_d = f64(2, 3)
for _op, _use, _v, _ref in (
        ("relu", "Out", np.maximum(_x, 0.2), lambda v, d: d * (v > 0)),
        ("sigmoid", "Out", f64(2, 3, lo=0.1, hi=0.9), lambda v, d: d * v * (1 - v)),
        ("tanh", "Out", f64(2, 3, lo=-0.9, hi=0.9), lambda v, d: d * (1 - v * v)),
        ("exp", "Out", f64(2, 3, lo=0.5, hi=2.0), lambda v, d: d * v),
        ("sqrt", "Out", f64(2, 3, lo=0.5, hi=2.0), lambda v, d: d * 0.5 / v),
        ("log", "X", f64(2, 3, lo=0.5, hi=2.0), lambda v, d: d / v),
        ("square", "X", _x, lambda v, d: d * 2 * v),
        ("abs", "X", _x, lambda v, d: d * np.sign(v))):
    case(f"{_op}_grad", {_use: _v, "Out@GRAD": _d},
         reference=lambda i, a, use=_use, ref=_ref: {"X@GRAD": ref(i[use], i["Out@GRAD"])})
case("leaky_relu_grad", {"X": _x, "Out@GRAD": _d}, attrs={"alpha": 0.1},
     reference=lambda i, a: {"X@GRAD": np.where(i["X"] > 0, 1.0, 0.1) * i["Out@GRAD"]})
case("elu_grad", {"X": _x, "Out@GRAD": _d}, attrs={"alpha": 0.7},
     reference=lambda i, a: {"X@GRAD": np.where(i["X"] > 0, 1.0, 0.7 * np.exp(i["X"]))
                             * i["Out@GRAD"]})

_y = f64(3, lo=1.0, hi=2.0)
_xd = f64(2, 3, 4)
case("elementwise_div_grad", {"X": _xd, "Y": _y, "Out": _xd / _y.reshape(1, 3, 1),
                              "Out@GRAD": f64(2, 3, 4)},
     attrs={"axis": 1}, grad_inputs=["Y", "Out", "Out@GRAD"],
     reference=lambda i, a: {"X@GRAD": i["Out@GRAD"] / i["Y"].reshape(1, 3, 1)})
for _op, _ins, _attrs in (
        ("reduce_sum_grad", {"X": f64(2, 3), "Out@GRAD": f64(3)},
         {"dim": [0], "keep_dim": False, "reduce_all": False}),
        ("reduce_mean_grad", {"X": f64(2, 3), "Out@GRAD": f64(2)},
         {"dim": [1], "keep_dim": False, "reduce_all": False}),
        ("reshape2_grad", {"XShape": np.zeros((0, 2, 3)), "Out@GRAD": f64(3, 2)},
         {"shape": [3, 2]}),
        ("transpose2_grad", {"Out@GRAD": f64(3, 2)},
         {"axis": [1, 0]}),
        ("slice_grad", {"Input": f64(3, 4), "Out@GRAD": f64(2, 2)},
         {"axes": [0, 1], "starts": [1, 1], "ends": [3, 3], "decrease_axis": [],
          "infer_flags": []}),
        ("expand_grad", {"X": f64(2, 1), "Out@GRAD": f64(2, 3)}, {"expand_times": [1, 3]}),
        ("concat_grad", {"X": [f64(2, 2), f64(2, 3)], "Out@GRAD": f64(2, 5)}, {"axis": 1})):
    case(_op, _ins, attrs=_attrs, grad_inputs=["Out@GRAD"])

_conv = {"strides": [1, 1], "paddings": [1, 1], "dilations": [1, 1], "groups": 1}
case("conv2d_grad", {"Input": f64(2, 2, 4, 4), "Filter": f64(3, 2, 3, 3),
                     "Output@GRAD": f64(2, 3, 4, 4)}, attrs=_conv, rtol=1e-4, atol=1e-7)
case("conv3d_grad", {"Input": f64(1, 2, 3, 3, 2), "Filter": f64(2, 2, 2, 2, 1),
                     "Output@GRAD": f64(1, 2, 4, 2, 4)},
     attrs={"strides": [1, 2, 1], "paddings": [1, 1, 0, 1, 1, 1], "dilations": [1, 1, 1],
            "groups": 1}, rtol=1e-4, atol=1e-7)
