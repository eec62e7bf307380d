"""Cases for the shape, layout, reduction and selection ops (runtime/ops/tensor.py, reduce.py)."""

import numpy as np

from opcheck import case

R = np.random.default_rng(7)


def f64(*shape):
    return R.uniform(-1.0, 1.0, shape)


def distinct(*shape):
    """Values with no ties (max/min/top_k/arg_* gradients and picks are then unambiguous)."""
    return R.permutation(np.arange(int(np.prod(shape)), dtype=np.float64)).reshape(shape) / 7 - 1


# --- matmul --------------------------------------------------------------------------------------
def _matmul_ref(ins, attrs):
    x, y = ins["X"], ins["Y"]
    a = x.reshape(1, -1) if x.ndim == 1 else x
    b = y.reshape(-1, 1) if y.ndim == 1 else y
    if attrs["transpose_X"]:
        a = np.swapaxes(a, -1, -2)
    if attrs["transpose_Y"]:
        b = np.swapaxes(b, -1, -2)
    out = attrs["alpha"] * np.matmul(a, b)
    if x.ndim == 1 and out.shape[-2] == 1:
        out = out[..., 0, :]
    if y.ndim == 1 and out.shape[-1] == 1:
        out = out[..., 0]
    return {"Out": out.reshape(out.shape or (1,))}


case("matmul", {"X": f64(3, 4), "Y": f64(4, 2)}, reference=_matmul_ref, name="2d")
case("matmul", {"X": f64(4, 3), "Y": f64(2, 4)}, reference=_matmul_ref, name="transposed",
     attrs={"transpose_X": True, "transpose_Y": True, "alpha": 0.5})
case("matmul", {"X": f64(2, 3, 4), "Y": f64(2, 4, 2)}, reference=_matmul_ref, name="batched")
case("matmul", {"X": f64(2, 1, 2, 3), "Y": f64(3, 3, 2)}, reference=_matmul_ref,
     name="broadcast_batch")
case("matmul", {"X": f64(2, 3, 4), "Y": f64(4, 2)}, reference=_matmul_ref, name="batch_by_2d")
case("matmul", {"X": f64(4), "Y": f64(4)}, reference=_matmul_ref, name="vec_vec")
case("matmul", {"X": f64(4), "Y": f64(2, 4, 3)}, reference=_matmul_ref, name="vec_batch")
case("matmul", {"X": f64(3, 4), "Y": f64(4)}, reference=_matmul_ref, name="mat_vec")

# --- reduce_* ------------------------------------------------------------------------------------
_NP_REDUCE = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min, "prod": np.prod}


def _reduce_ref(fn):
    def ref(ins, attrs):
        x = ins["X"]
        axes = tuple(range(x.ndim)) if attrs["reduce_all"] else tuple(
            d % x.ndim for d in attrs["dim"])
        out = fn(x, axis=axes, keepdims=attrs["keep_dim"])
        return {"Out": np.asarray(out).reshape(np.shape(out) or (1,))}
    return ref


for _name, _fn in _NP_REDUCE.items():
    _x = distinct(2, 3, 4) if _name in ("max", "min") else f64(2, 3, 4)
    if _name == "prod":
        _x = R.uniform(0.5, 1.5, (2, 3, 4))
    _ref = _reduce_ref(_fn)
    case(f"reduce_{_name}", {"X": _x}, attrs={"dim": [1]}, reference=_ref, name="dim1")
    case(f"reduce_{_name}", {"X": _x}, attrs={"dim": [0, -1], "keep_dim": True},
         reference=_ref, name="two_dims_keep")
    case(f"reduce_{_name}", {"X": _x}, attrs={"reduce_all": True}, reference=_ref, name="all")
case("reduce_prod", {"X": np.array([[0.5, 0.0, 2.0], [0.0, 0.0, 3.0], [1.5, -2.0, 0.7]])},
     attrs={"dim": [1]}, reference=_reduce_ref(np.prod), name="zeros")
case("reduce_max", {"X": np.array([[1.0, 3.0, 3.0], [2.0, 0.0, 1.0]])}, attrs={"dim": [1]},
     reference=_reduce_ref(np.max), name="ties", check_grad=False)

# --- concat / split / stack ----------------------------------------------------------------------
case("concat", {"X": [f64(2, 3), f64(2, 1), f64(2, 2)]}, attrs={"axis": 1},
     reference=lambda i, a: {"Out": np.concatenate(i["X"], axis=1)})
case("concat", {"X": [f64(1, 3), f64(2, 3)]}, attrs={"axis": -2}, name="negative_axis",
     reference=lambda i, a: {"Out": np.concatenate(i["X"], axis=0)})
case("split", {"X": f64(2, 6)}, attrs={"num": 3, "axis": 1},
     reference=lambda i, a: {"Out": np.split(i["X"], 3, axis=1)})
case("split", {"X": f64(5, 2)}, attrs={"sections": [2, -1, 1], "axis": 0}, name="sections",
     reference=lambda i, a: {"Out": np.split(i["X"], [2, 4], axis=0)})
case("stack", {"X": [f64(2, 3), f64(2, 3), f64(2, 3)]}, attrs={"axis": 1},
     reference=lambda i, a: {"Y": np.stack(i["X"], axis=1)})
case("stack", {"X": [f64(2, 3), f64(2, 3)]}, attrs={"axis": -1}, name="last_axis",
     reference=lambda i, a: {"Y": np.stack(i["X"], axis=-1)})


# --- reshape family ------------------------------------------------------------------------------
def _xshape(x):
    return np.zeros((0,) + x.shape)


case("reshape2", {"X": f64(2, 3, 4)}, attrs={"shape": [0, -1]},
     reference=lambda i, a: {"Out": i["X"].reshape(2, 12), "XShape": _xshape(i["X"])})
case("reshape2", {"X": f64(2, 3, 4)}, attrs={"shape": [4, 6]}, name="explicit",
     reference=lambda i, a: {"Out": i["X"].reshape(4, 6)})
case("reshape2", {"X": f64(2, 3, 4)}, attrs={"shape": [-1, 4]}, name="unknown_batch",
     var_shapes={"X": (-1, 3, 4)}, reference=lambda i, a: {"Out": i["X"].reshape(6, 4)})
case("reshape2", {"X": f64(2, 3, 4), "Shape": np.array([3, 8], dtype=np.int32)},
     attrs={"shape": [3, 8]}, name="actual_shape",
     reference=lambda i, a: {"Out": i["X"].reshape(3, 8)})
case("transpose2", {"X": f64(2, 3, 4)}, attrs={"axis": [2, 0, 1]},
     reference=lambda i, a: {"Out": i["X"].transpose(2, 0, 1), "XShape": _xshape(i["X"])})
case("squeeze2", {"X": f64(2, 1, 3, 1)}, attrs={"axes": [1]},
     reference=lambda i, a: {"Out": i["X"].reshape(2, 3, 1)})
case("squeeze2", {"X": f64(2, 1, 3, 1)}, attrs={"axes": []}, name="all",
     reference=lambda i, a: {"Out": i["X"].reshape(2, 3)})
case("squeeze2", {"X": f64(2, 1, 3)}, attrs={"axes": [0, -2]}, name="non_one_kept",
     reference=lambda i, a: {"Out": i["X"].reshape(2, 3)})
case("unsqueeze2", {"X": f64(2, 3)}, attrs={"axes": [0, 2]},
     reference=lambda i, a: {"Out": i["X"].reshape(1, 2, 1, 3)})
case("unsqueeze2", {"X": f64(2, 3)}, attrs={"axes": [-1, 1]}, name="negative",
     reference=lambda i, a: {"Out": i["X"].reshape(2, 1, 3, 1)})
case("flatten2", {"X": f64(2, 3, 4)}, attrs={"axis": 2},
     reference=lambda i, a: {"Out": i["X"].reshape(6, 4)})
case("flatten2", {"X": f64(2, 3, 4)}, attrs={"axis": 0}, name="axis0",
     reference=lambda i, a: {"Out": i["X"].reshape(1, 24)})

# --- cast / slice / expand / fill_constant_batch_size_like ---------------------------------------
case("cast", {"X": f64(3, 4)}, attrs={"in_dtype": "float64", "out_dtype": "float32"},
     reference=lambda i, a: {"Out": i["X"].astype(np.float32)}, check_grad=False)
case("cast", {"X": f64(3, 4)}, attrs={"in_dtype": "float64", "out_dtype": "float64"},
     reference=lambda i, a: {"Out": i["X"]}, name="same")
case("cast", {"X": np.array([[1.7, -2.2], [0.2, 3.9]])}, name="to_int",
     attrs={"in_dtype": "float64", "out_dtype": "int64"},
     reference=lambda i, a: {"Out": np.array([[1, -2], [0, 3]])}, check_grad=False)
case("slice", {"Input": f64(3, 4, 5)}, attrs={"axes": [0, 2], "starts": [1, -3], "ends": [3, 100]},
     reference=lambda i, a: {"Out": i["Input"][1:3, :, -3:]})
case("slice", {"Input": f64(3, 4)}, attrs={"axes": [1], "starts": [2], "ends": [3],
                                           "decrease_axis": [1]}, name="decrease",
     reference=lambda i, a: {"Out": i["Input"][:, 2]})
case("expand", {"X": f64(2, 1, 3)}, attrs={"expand_times": [1, 3, 2]},
     reference=lambda i, a: {"Out": np.tile(i["X"], (1, 3, 2))})
case("fill_constant_batch_size_like", {"Input": f64(5, 2)},
     attrs={"shape": [-1, 3], "dtype": "float32", "value": 2.0},
     reference=lambda i, a: {"Out": np.full((5, 3), 2.0, np.float32)})

# --- arg_max / arg_min / top_k / one_hot / accuracy ----------------------------------------------
case("arg_max", {"X": distinct(3, 4)}, attrs={"axis": 1},
     reference=lambda i, a: {"Out": i["X"].argmax(1)})
case("arg_max", {"X": distinct(3, 4)}, attrs={"axis": 0, "keepdims": True}, name="keepdims",
     reference=lambda i, a: {"Out": i["X"].argmax(0)[None]})
case("arg_min", {"X": distinct(3, 4)}, attrs={"axis": -1},
     reference=lambda i, a: {"Out": i["X"].argmin(1)})
case("top_k", {"X": distinct(3, 5)}, attrs={"k": 2},
     reference=lambda i, a: {"Out": -np.sort(-i["X"], 1)[:, :2],
                             "Indices": np.argsort(-i["X"], 1)[:, :2]})
case("top_k", {"X": distinct(2, 2, 4)}, attrs={"k": 3}, name="3d",
     reference=lambda i, a: {"Out": -np.sort(-i["X"], -1)[..., :3]})
case("top_k", {"X": distinct(2, 3, 5)}, attrs={"k": 1}, name="k1_3d",  # argmax's path
     reference=lambda i, a: {"Out": i["X"].max(-1, keepdims=True),
                             "Indices": i["X"].argmax(-1)[..., None]})
_ids = np.array([[0], [3], [1], [3]], dtype=np.int64)
case("one_hot", {"X": _ids}, attrs={"depth": 4},
     reference=lambda i, a: {"Out": np.eye(4, dtype=np.float32)[i["X"][:, 0]]})
case("one_hot", {"X": np.array([[0], [5], [2]])}, attrs={"depth": 4, "allow_out_of_range": True},
     name="out_of_range_allowed",
     reference=lambda i, a: {"Out": np.array([[1, 0, 0, 0], [0, 0, 0, 0], [0, 0, 1, 0]],
                                             np.float32)})
_topk_idx = np.array([[2, 0], [1, 3], [0, 1]], dtype=np.int64)
case("accuracy", {"Out": f64(3, 2), "Indices": _topk_idx,
                  "Label": np.array([[0], [2], [0]], dtype=np.int64)},
     reference=lambda i, a: {"Accuracy": np.array([2 / 3], np.float32),
                             "Correct": np.array([2], np.int32),
                             "Total": np.array([3], np.int32)})
