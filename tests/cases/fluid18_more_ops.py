"""Cases for runtime/ops/fluid18_more.py: range, gather_nd, similarity_focus,
add_position_encoding. sequence_reverse (LoD input) and tensor_array_to_tensor (an array input)
are checked on whole programs in tests/fluid_compat/test_fluid18_more.py."""

import numpy as np

from opcheck import case

R = np.random.default_rng(1885)

case("range", {"Start": np.array([0], np.int64), "End": np.array([7], np.int64),
               "Step": np.array([2], np.int64)},
     reference=lambda i, a: {"Out": np.arange(0, 7, 2)})
case("range", {"Start": np.array([1.0], np.float32), "End": np.array([-1.0], np.float32),
               "Step": np.array([-0.5], np.float32)},
     reference=lambda i, a: {"Out": np.array([1.0, 0.5, 0.0, -0.5], np.float32)},
     name="float_descending")

_x = R.uniform(-1, 1, (3, 4, 2))
_idx = np.array([[[0, 1], [2, 3]], [[1, 0], [0, 1]]], np.int64)  # two repeats of [0, 1]
case("gather_nd", {"X": _x, "Index": _idx},
     reference=lambda i, a: {"Out": i["X"][i["Index"][..., 0], i["Index"][..., 1]]})
case("gather_nd", {"X": _x, "Index": np.array([[2], [0], [2]], np.int32)},
     reference=lambda i, a: {"Out": i["X"][i["Index"][:, 0]]}, name="rows")


def _focus_ref(x, axis, indexes):
    out = np.zeros_like(x)
    for n in range(x.shape[0]):
        for i in indexes:
            plane = np.take(x[n], i, axis=axis - 1)  # the other two axes, in order
            taken_r, taken_c = set(), set()
            for flat in np.argsort(-plane, axis=None, kind="stable"):
                r, c = np.unravel_index(flat, plane.shape)
                if r in taken_r or c in taken_c:
                    continue
                taken_r.add(r)
                taken_c.add(c)
                where = [n, slice(None), slice(None), slice(None)]
                others = [d for d in (1, 2, 3) if d != axis]
                where[others[0]], where[others[1]] = r, c
                out[tuple(where)] = 1
    return out


_fx = R.permutation(2 * 3 * 4 * 5).reshape(2, 3, 4, 5).astype(np.float64)
for _axis, _indexes in ((1, [0, 2]), (2, [3]), (3, [1, 4])):
    case("similarity_focus", {"X": _fx}, attrs={"axis": _axis, "indexes": _indexes},
         reference=lambda i, a: {"Out": _focus_ref(i["X"], a["axis"], a["indexes"])},
         name=f"axis{_axis}")
# Paddle's own example (test_similarity_focus_op.py, axis 1, index 0)
_paddle_x = np.array([[[[0.8, 0.1], [0.4, 0.5]], [[0.9, 0.7], [0.9, 0.9]],
                       [[0.8, 0.9], [0.1, 0.2]]]])
case("similarity_focus", {"X": _paddle_x}, attrs={"axis": 1, "indexes": [0]},
     reference=lambda i, a: {"Out": np.array([[[[1.0, 0.0], [0.0, 1.0]]] * 3])},
     name="paddle_example")


def _pe_ref(x, alpha, beta):
    _, length, size = x.shape
    half = size // 2
    pos = np.arange(length)[:, None]
    k = np.arange(half)[None, :]
    angle = pos / 10000.0 ** (k / (half - 1)) if half > 1 else pos / 10000.0
    return alpha * x + beta * np.concatenate([np.sin(angle), np.cos(angle)], axis=1)[None]


case("add_position_encoding", {"X": R.uniform(-1, 1, (2, 5, 6))},
     attrs={"alpha": 0.7, "beta": 1.3},
     reference=lambda i, a: {"Out": _pe_ref(i["X"], 0.7, 1.3)})
case("add_position_encoding", {"X": R.uniform(-1, 1, (2, 3, 2))},
     attrs={"alpha": 2.0, "beta": 0.5},
     reference=lambda i, a: {"Out": _pe_ref(i["X"], 2.0, 0.5)}, name="half_size_1")
