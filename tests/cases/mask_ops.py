"""Cases for the ops behind Variable.__getitem__ and sequence_mask (runtime/ops/indexing_ops.py):
strided_slice (attr and tensor bounds, negative steps, decrease_axis) and sequence_mask."""

import numpy as np

from opcheck import case

R = np.random.default_rng(185)
_x = R.uniform(-1, 1, (4, 5, 6))


def _ss(name, attrs, index, tensors=None):
    full = {"axes": [], "starts": [], "ends": [], "strides": [], "decrease_axis": [],
            "infer_flags": [1] * len(attrs["axes"])}
    full.update(attrs)
    ins = {"Input": _x}
    ins.update(tensors or {})
    case("strided_slice", ins, attrs=full, name=name, grad_inputs=["Input"],
         reference=lambda i, a, ix=index: {"Out": i["Input"][ix]})


_ss("step2", {"axes": [1, 2], "starts": [0, 1], "ends": [5, 6], "strides": [2, 3]},
    (slice(None), slice(0, 5, 2), slice(1, 6, 3)))
_ss("negative_step", {"axes": [0, 2], "starts": [-1, 4], "ends": [-1, 0], "strides": [-1, -2]},
    (slice(None, None, -1), slice(None), slice(4, 0, -2)))
_ss("decrease", {"axes": [0, 1], "starts": [2, 0], "ends": [3, 5], "strides": [1, 2],
                 "decrease_axis": [0]}, (2, slice(0, 5, 2)))
_ss("tensor_bounds", {"axes": [1, 2], "starts": [-1, 1], "ends": [0, 100], "strides": [1, 1],
                      "decrease_axis": [1], "infer_flags": [-1, -1]},
    (slice(None), -1, slice(1, None)),
    {"StartsTensorList": [np.array([-1], np.int64), np.array([1], np.int32)],
     "EndsTensorList": [np.array([0], np.int64), np.array([100], np.int32)]})

_lens = np.array([[2, 0, 5], [1, 3, 4]], np.int64)
case("sequence_mask", {"X": _lens}, attrs={"maxlen": 6, "out_dtype": "float32"},
     check_grad=False, name="maxlen",
     reference=lambda i, a: {"Y": (np.arange(6) < i["X"][..., None]).astype(np.float32)})
case("sequence_mask", {"X": _lens}, attrs={"maxlen": -1, "out_dtype": "int64"},
     check_grad=False, name="max_of_x", var_shapes={},
     reference=lambda i, a: {"Y": (np.arange(5) < i["X"][..., None]).astype(np.int64)})
case("sequence_mask", {"X": np.array([3, 1], np.int32), "MaxLenTensor": np.array([4], np.int32)},
     attrs={"out_dtype": "int32"}, check_grad=False, name="maxlen_tensor",
     reference=lambda i, a: {"Y": (np.arange(4) < i["X"][:, None]).astype(np.int32)})
