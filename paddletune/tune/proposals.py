"""The advisors' advice as settings to try first: they know where the bottleneck is.

`proposals(advices, space)` maps each advice whose change is a knob of the space to a partial
setting ({knob: value}); advice that needs a code change (e.g. a DataLoader for a synchronous
loop) is returned as a note instead. A knob whose values were given with --space keeps to them:
an advised value outside them is not tried (a note says so).
"""

from typing import List, Tuple

from ..advisors.producers import advised_threads
from .space import GIVEN

CODE_ONLY = {"input-bound": "move the data preparation into a DataLoader (code change)",
             "unfused-softmax-cross-entropy": "use softmax_with_cross_entropy (code change)",
             "large-fetch": "fetch less often (code change)",
             "optimizer-memory": "a lighter optimizer (code change)",
             "evaluation-input": "give the evaluation DataLoader workers (code change; its "
                                 "passes are left out of the steps a trial measures)"}


def proposals(advices, space) -> Tuple[List[Tuple[str, dict]], List[str]]:
    """([(advice id, {knob: value})...], [notes on advice tune cannot apply])."""
    found, notes = [], []
    for advice in advices:
        change = _change(advice.id, advice.figures or {})
        change = {k: v for k, v in change.items() if k in space.knobs and v is not None}
        change, outside = _within_given(change, space)
        notes += [f"advice {advice.id}: {name}={value!r} is outside --space {name}="
                  f"{','.join(map(str, space.knobs[name].values))}; not tried"
                  for name, value in outside.items()]
        if change:
            found.append((advice.id, change))
        elif advice.id in CODE_ONLY:
            notes.append(f"advice {advice.id}: {CODE_ONLY[advice.id]}; not tried")
    return found, notes


def _within_given(change: dict, space) -> Tuple[dict, dict]:
    """(the part of `change` the space allows, the values outside what --space gave)."""
    inside, outside = {}, {}
    for name, value in change.items():
        knob = space.knobs[name]
        given = knob.why == GIVEN
        (outside if given and value not in knob.values else inside)[name] = value
    return inside, outside


def _change(advice_id, f) -> dict:
    if advice_id in ("reader-starved", "reader-thread-gil"):
        if f.get("keep_in_loop"):  # the advice is to make batches cheaper, not workers
            return {}
        out = {"num_workers": f.get("workers"), "capacity": f.get("suggested_capacity")}
        workers = max(f.get("workers") or 0, f.get("current_workers") or 0, 1)
        fewer = advised_threads(f.get("blas_threads"), f.get("cores"),
                                f.get("worker_busy_cores") or float(workers),
                                f.get("trainer_cores"), True)
        if fewer is not None:  # as the advice's note (producers.blas_note)
            out["blas_threads"] = fewer
        return out
    if advice_id == "worker-hand-over":
        if f.get("suggested_strategy"):
            return {"sharing_strategy": f["suggested_strategy"]}
        return {"num_workers": f.get("suggested_workers")}
    if advice_id == "worker-start-per-pass":  # (an evaluation loader's: not in the steps)
        return {} if f.get("evaluation") else {
            "persistent_workers": f.get("suggested_persistent_workers")}
    if advice_id == "double-buffer-off":
        return {"use_double_buffer": True}
    if advice_id == "num-threads":
        return {"num_threads": f.get("suggested_threads")}
    if advice_id == "drop-scope":
        return {"num_iteration_per_drop_scope": f.get("suggested_every")}
    if advice_id == "parallel-fusions":
        return {name: True for name in (f.get("fusions") or {})}
    if advice_id in ("cpu-oversubscribed", "cpu-contended", "cpu-underused", "cpu-steal"):
        return {"blas_threads": f.get("suggested_blas_threads")}
    if advice_id == "gc-off":
        return {"FLAGS_eager_delete_tensor_gb": 0.0}
    if advice_id == "underlying-allocations":
        return {"FLAGS_allocator_strategy": "auto_growth"}
    if advice_id == "batch-size-memory":
        return {"batch_size": f.get("largest_safe_batch")}
    if advice_id == "cudnn-benchmark":  # (the knob of the job's framework is in the space)
        return {"cudnn_benchmark": True, "FLAGS_cudnn_exhaustive_search": True}
    if advice_id == "tf32-matmul":
        return {"matmul_allow_tf32": True}
    if advice_id == "cpu-autocast-slow":
        return {"cpu_autocast": False}
    if advice_id == "cuda-allocator-config":
        return {"PYTORCH_CUDA_ALLOC_CONF": f.get("suggested_conf")}
    return {}
