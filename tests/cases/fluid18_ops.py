"""Cases for the ops added for Fluid 1.8 fidelity (issue 27): argsort, cross_entropy2, pow,
elu, shape, clip with tensor bounds, comparisons, logical ops, increment, floordiv/mod,
select_input. LoDTensorArray and control-flow ops run sub-blocks or read the step's
variables: tests/fluid_compat/test_control_flow.py checks them, gradients included, on whole
programs (opcheck.check_program_gradient)."""

import numpy as np

from opcheck import case

R = np.random.default_rng(18)


def f64(*shape, lo=-1.0, hi=1.0):
    return R.uniform(lo, hi, shape)


def _argsort_ref(descending):
    def ref(ins, attrs):
        x, axis = ins["X"], attrs["axis"]
        order = np.argsort(x, axis=axis, kind="quicksort")
        if descending:
            order = np.flip(order, axis=axis)
        return {"Out": np.take_along_axis(x, order, axis=axis), "Indices": order}
    return ref


case("argsort", {"X": f64(3, 5)}, attrs={"axis": -1}, reference=_argsort_ref(False))
case("argsort", {"X": f64(4, 2, 3)}, attrs={"axis": 0, "descending": True},
     reference=_argsort_ref(True), name="descending_axis0")

_probs = R.uniform(0.1, 1.0, (4, 3))
_probs /= _probs.sum(axis=1, keepdims=True)
_labels = np.array([[0], [2], [1], [2]], dtype=np.int64)
case("cross_entropy2", {"X": _probs, "Label": _labels},
     reference=lambda i, a: {"Y": -np.log(np.take_along_axis(i["X"], i["Label"], 1)),
                             "MatchX": np.take_along_axis(i["X"], i["Label"], 1)})

case("pow", {"X": f64(3, 4, lo=0.5, hi=2.0)}, attrs={"factor": 2.5},
     reference=lambda i, a: {"Out": i["X"] ** 2.5})
case("pow", {"X": f64(3, 4, lo=0.5, hi=2.0), "FactorTensor": np.array([3.0])},
     grad_inputs=["X"], reference=lambda i, a: {"Out": i["X"] ** 3.0}, name="factor_tensor")
case("elu", {"X": np.array([[-2.0, -0.5, 0.3], [1.5, -1.0, 2.0]])}, attrs={"alpha": 0.7},
     reference=lambda i, a: {"Out": np.where(i["X"] > 0, i["X"], 0.7 * np.expm1(i["X"]))})
case("shape", {"Input": f64(2, 3, 4)}, reference=lambda i, a: {"Out": np.array([2, 3, 4])})
case("clip", {"X": f64(3, 4), "Min": np.array([-0.3]), "Max": np.array([0.4])},
     grad_inputs=["X"], reference=lambda i, a: {"Out": np.clip(i["X"], -0.3, 0.4)},
     name="tensor_bounds")

_a, _b = f64(3, 4), f64(3, 4)
for _name, _fn in (("less_than", np.less), ("less_equal", np.less_equal),
                   ("greater_than", np.greater), ("greater_equal", np.greater_equal),
                   ("equal", np.equal), ("not_equal", np.not_equal)):
    case(_name, {"X": _a, "Y": _b}, reference=lambda i, a, fn=_fn: {"Out": fn(i["X"], i["Y"])})
case("equal", {"X": np.array([1, 2, 3], np.int64), "Y": np.array([2], np.int64)},
     reference=lambda i, a: {"Out": np.array([False, True, False])}, name="broadcast")
_p, _q = R.random((2, 3)) > 0.5, R.random((2, 3)) > 0.5
for _name, _fn in (("logical_and", np.logical_and), ("logical_or", np.logical_or),
                   ("logical_xor", np.logical_xor)):
    case(_name, {"X": _p, "Y": _q}, reference=lambda i, a, fn=_fn: {"Out": fn(i["X"], i["Y"])})
case("logical_not", {"X": _p}, reference=lambda i, a: {"Out": ~i["X"]})
case("increment", {"X": np.array([3], np.int64)}, attrs={"step": 2.0},
     reference=lambda i, a: {"Out": np.array([5])})
_ints = np.array([[7, -7, 9], [4, -5, 11]], np.int64)
case("elementwise_floordiv", {"X": _ints, "Y": np.array([2, 3, -4], np.int64)},
     reference=lambda i, a: {"Out": i["X"] // i["Y"]})
case("elementwise_mod", {"X": _ints, "Y": np.array([2, 3, -4], np.int64)},
     reference=lambda i, a: {"Out": i["X"] % i["Y"]})
case("select_input", {"X": [f64(2, 3), f64(2, 3)], "Mask": np.array([1], np.int32)},
     reference=lambda i, a: {"Out": i["X"][1]})

# unary ops of activation_more (floor/ceil/round: zero gradient; points kept off the jumps)
_steps = np.array([[-1.7, -0.2, 0.3], [1.2, 2.6, -2.3]])
for _name in ("floor", "ceil", "round"):
    case(_name, {"X": _steps}, reference=lambda i, a, fn=getattr(np, _name): {"Out": fn(i["X"])})
_pos = f64(3, 4, lo=0.5, hi=2.0)
for _name, _fn in (("cos", np.cos), ("sin", np.sin)):
    case(_name, {"X": f64(3, 4, lo=-3, hi=3)}, reference=lambda i, a, fn=_fn: {"Out": fn(i["X"])})
case("reciprocal", {"X": _pos}, reference=lambda i, a: {"Out": 1 / i["X"]})
case("rsqrt", {"X": _pos}, reference=lambda i, a: {"Out": 1 / np.sqrt(i["X"])})
case("softplus", {"X": f64(3, 4, lo=-4, hi=4)},
     reference=lambda i, a: {"Out": np.log1p(np.exp(i["X"]))})
case("softsign", {"X": f64(3, 4, lo=-3, hi=3)},
     reference=lambda i, a: {"Out": i["X"] / (1 + np.abs(i["X"]))})
case("relu6", {"X": np.array([[-1.0, 0.5, 3.0], [5.5, 6.5, 8.0]])}, attrs={"threshold": 6.0},
     reference=lambda i, a: {"Out": np.clip(i["X"], 0, 6)})
case("logsigmoid", {"X": f64(3, 4, lo=-4, hi=4)},
     reference=lambda i, a: {"Out": -np.log1p(np.exp(-i["X"]))})
case("hard_sigmoid", {"X": np.array([[-4.0, -1.0, 0.2], [1.3, 2.0, 3.5]])},
     attrs={"slope": 0.2, "offset": 0.5},
     reference=lambda i, a: {"Out": np.clip(0.2 * i["X"] + 0.5, 0, 1)})
case("swish", {"X": f64(3, 4, lo=-3, hi=3)}, attrs={"beta": 1.5},
     reference=lambda i, a: {"Out": i["X"] / (1 + np.exp(-1.5 * i["X"]))})

# sigmoid_cross_entropy_with_logits: labels in [0, 1], one entry ignored (-100)
_sce_label = R.uniform(0, 1, (3, 4))
_sce_label[1, 2] = -100


def _sce_ref(normalize):
    def ref(i, a):
        x, z = i["X"], i["Label"]
        loss = np.maximum(x, 0) - x * z + np.log1p(np.exp(-np.abs(x)))
        keep = z != -100
        loss = loss * keep
        return {"Out": loss / keep.sum() if normalize else loss}
    return ref


case("sigmoid_cross_entropy_with_logits", {"X": f64(3, 4, lo=-3, hi=3), "Label": _sce_label},
     grad_inputs=["X"], reference=_sce_ref(False))
case("sigmoid_cross_entropy_with_logits", {"X": f64(3, 4, lo=-3, hi=3), "Label": _sce_label},
     attrs={"normalize": True}, grad_inputs=["X"], reference=_sce_ref(True), name="normalize")

# rnn_memory_helper: the identity (its gradient passes Out@GRAD through)
case("rnn_memory_helper", {"X": f64(2, 3)}, reference=lambda i, a: {"Out": i["X"]})

# seed: the attr when set (a fresh draw when 0 cannot have a reference)
case("seed", {}, attrs={"seed": 123}, reference=lambda i, a: {"Out": np.array([123])})

# random values shaped like the batch of Input (the dimension 0 of a [5, 2] input here)
for _name in ("uniform_random_batch_size_like", "gaussian_random_batch_size_like"):
    case(_name, {"Input": f64(5, 2)}, attrs={"shape": [-1, 3], "dtype": "float32", "seed": 7})
