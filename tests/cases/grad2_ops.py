"""Second-order cases: gradient ops checked as ops. Forward: the first-order gradient against
its formula; gradient: the second-order rule (the grad op's own gradient) against central
finite differences of the first-order kernel."""

import numpy as np

from opcheck import case

R = np.random.default_rng(7)


def f64(*shape, lo=-1.0, hi=1.0):
    return R.uniform(lo, hi, shape)


def _mul_ref(ins, attrs):
    x, y, d = ins["X"], ins["Y"], ins["Out@GRAD"]
    return {"X@GRAD": d * y, "Y@GRAD": d * x}


case("elementwise_mul_grad", {"X": f64(3, 4), "Y": f64(3, 4), "Out@GRAD": f64(3, 4)},
     attrs={"axis": -1}, reference=_mul_ref, name="same")
case("elementwise_mul_grad", {"X": f64(2, 3, 4), "Y": f64(3), "Out@GRAD": f64(2, 3, 4)},
     attrs={"axis": 1}, name="broadcast")
case("elementwise_add_grad", {"X": f64(2, 3, 4), "Y": f64(3), "Out@GRAD": f64(2, 3, 4)},
     attrs={"axis": 1}, grad_inputs=["Out@GRAD"],
     reference=lambda i, a: {"X@GRAD": i["Out@GRAD"],
                             "Y@GRAD": i["Out@GRAD"].sum(axis=(0, 2))})
case("elementwise_sub_grad", {"X": f64(3, 4), "Y": f64(3, 4), "Out@GRAD": f64(3, 4)},
     attrs={"axis": -1}, grad_inputs=["Out@GRAD"],
     reference=lambda i, a: {"X@GRAD": i["Out@GRAD"], "Y@GRAD": -i["Out@GRAD"]})
case("mul_grad", {"X": f64(4, 5), "Y": f64(5, 3), "Out@GRAD": f64(4, 3)},
     attrs={"x_num_col_dims": 1, "y_num_col_dims": 1},
     reference=lambda i, a: {"X@GRAD": i["Out@GRAD"] @ i["Y"].T,
                             "Y@GRAD": i["X"].T @ i["Out@GRAD"]})
case("mul_grad", {"X": f64(2, 3, 2), "Y": f64(2, 3), "Out@GRAD": f64(2, 3, 3)},
     attrs={"x_num_col_dims": 2, "y_num_col_dims": 1}, name="flatten")
case("scale_grad", {"Out@GRAD": f64(3, 4)}, attrs={"scale": 2.5, "bias": 1.0},
     reference=lambda i, a: {"X@GRAD": i["Out@GRAD"] * 2.5})
case("mean_grad", {"X": f64(3, 4), "Out@GRAD": f64(1)}, grad_inputs=["Out@GRAD"],
     reference=lambda i, a: {"X@GRAD": np.full((3, 4), i["Out@GRAD"][0] / 12)})
