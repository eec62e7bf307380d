"""Cases for the decoding ops: reduce_all, reduce_any, gather_tree, sampling_id (none has a
gradient). gather_tree's reference follows each final beam back through its parents one
element at a time; sampling_id's rows are one-hot, so every draw of r in [0, 1) picks the
hot class (Paddle's rule: the first j where r - X[0] - ... - X[j] < 0)."""

import itertools

import numpy as np

from opcheck import case

R = np.random.default_rng(41)

_bools = R.uniform(size=(3, 4, 2)) > 0.3
_bools[1] = True
for _op, _fn in (("reduce_all", np.all), ("reduce_any", np.any)):
    for _dim, _keep, _all in (([1], False, False), ([0, 2], True, False), ([0], False, True)):
        case(_op, {"X": _bools}, attrs={"dim": _dim, "keep_dim": _keep, "reduce_all": _all},
             reference=lambda ins, a, fn=_fn: {"Out": np.asarray(fn(
                 ins["X"], axis=None if a["reduce_all"] else tuple(a["dim"]),
                 keepdims=a["keep_dim"])).reshape(
                     [1] if a["reduce_all"] else
                     [d if i not in a["dim"] else 1 for i, d in enumerate(ins["X"].shape)
                      if a["keep_dim"] or i not in a["dim"]])},
             check_grad=False, name=f"dim{_dim}_keep{_keep}_all{_all}")


def _gather_tree_ref(ins, attrs):
    ids, parents = ins["Ids"], ins["Parents"]
    steps, batch, beam = ids.shape
    out = np.empty_like(ids)
    for b, k in itertools.product(range(batch), range(beam)):
        at = k
        for t in range(steps - 1, -1, -1):
            out[t, b, k] = ids[t, b, at]
            at = parents[t, b, at]
    return {"Out": out}


case("gather_tree", {"Ids": R.integers(0, 9, (4, 2, 3)), "Parents": R.integers(0, 3, (4, 2, 3))},
     reference=_gather_tree_ref, check_grad=False)
case("gather_tree", {"Ids": R.integers(0, 9, (1, 3, 2)), "Parents": R.integers(0, 2, (1, 3, 2))},
     reference=_gather_tree_ref, check_grad=False, name="one_step")

_hot = np.eye(5)[[3, 0, 4, 4]]
case("sampling_id", {"X": _hot}, attrs={"min": 0.0, "max": 1.0, "seed": 5},
     reference=lambda ins, a: {"Out": ins["X"].argmax(1).astype(np.int64)}, check_grad=False)
