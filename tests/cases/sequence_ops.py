"""Cases for sequence_pool over padded sequences (runtime/ops/sequence.py)."""

import numpy as np

from opcheck import case

R = np.random.default_rng(11)
LENGTHS = np.array([3, 1, 0, 2], dtype=np.int64)


def _padded(*feature_shape):
    """[4, 3, ...] values without ties, with junk on the padding (it must never leak out)."""
    shape = (4, 3) + feature_shape
    x = R.permutation(np.arange(int(np.prod(shape)), dtype=np.float64)).reshape(shape) / 9 - 2
    steps = np.arange(3)[None, :] < LENGTHS[:, None]
    return np.where(steps.reshape(steps.shape + (1,) * len(feature_shape)), x, 100.0)


def _pool_ref(ins, attrs):
    x, lengths = ins["X"], ins["Length"].reshape(-1)
    pooltype, out, index = attrs["pooltype"], [], []
    for row, n in zip(x, lengths):
        seq = row[:n]
        if n == 0:
            out.append(np.full(row.shape[1:], attrs["pad_value"]))
            index.append(np.full(row.shape[1:], -1))
            continue
        out.append({"SUM": lambda: seq.sum(0), "AVERAGE": lambda: seq.mean(0),
                    "SQRT": lambda: seq.sum(0) / np.sqrt(n), "MAX": lambda: seq.max(0),
                    "LAST": lambda: seq[-1], "FIRST": lambda: seq[0]}[pooltype]())
        index.append(seq.argmax(0))
    expected = {"Out": np.stack(out)}
    if pooltype == "MAX":
        expected["MaxIndex"] = np.stack(index).astype(np.int32)
    return expected


for _pooltype in ("SUM", "AVERAGE", "SQRT", "MAX", "LAST", "FIRST"):
    case("sequence_pool", {"X": _padded(2), "Length": LENGTHS},
         attrs={"pooltype": _pooltype, "pad_value": -3.0}, reference=_pool_ref,
         name=_pooltype.lower())
case("sequence_pool", {"X": _padded(2, 2), "Length": LENGTHS.reshape(-1, 1)},
     attrs={"pooltype": "MAX"}, reference=_pool_ref, name="max_4d_length_column")
case("sequence_pool", {"X": _padded(), "Length": LENGTHS}, attrs={"pooltype": "AVERAGE"},
     reference=_pool_ref, name="average_no_features")
