"""Cases for the metric ops (runtime/ops/metrics.py): auc and detection_map. Neither has a
gradient. detection_map's cases here are single-image (no LoD: opcheck deep-copies its inputs,
which drops a LoD); tests/fluid_compat/test_metrics18.py runs it on fed multi-image
LoDTensors."""

import numpy as np

from opcheck import case

R = np.random.default_rng(8)


# --- auc ------------------------------------------------------------------------------------
def _auc_loop(pos, neg):
    """AUC from bucket histograms, walked bucket by bucket from the top as Paddle's kernel
    does."""
    tot_pos = tot_neg = area = 0.0
    for idx in range(len(pos) - 1, -1, -1):
        prev_pos, prev_neg = tot_pos, tot_neg
        tot_pos += pos[idx]
        tot_neg += neg[idx]
        area += abs(tot_neg - prev_neg) * (tot_pos + prev_pos) / 2.0
    return area / tot_pos / tot_neg if tot_pos > 0 and tot_neg > 0 else area


def _auc_ref(ins, attrs):
    thresholds, steps = attrs["num_thresholds"], attrs["slide_steps"]
    buckets = thresholds + 1
    stat_pos, stat_neg = ins["StatPos"].copy(), ins["StatNeg"].copy()
    batch_pos, batch_neg = np.zeros(buckets, np.int64), np.zeros(buckets, np.int64)
    for row, label in zip(ins["Predict"], ins["Label"].reshape(-1)):
        b = int(row[-1] * thresholds)
        if label > 0:
            batch_pos[b] += 1
        elif label == 0:
            batch_neg[b] += 1
    if steps == 0:
        stat_pos[0, :] += batch_pos
        stat_neg[0, :] += batch_neg
        return {"AUC": np.array([_auc_loop(stat_pos[0], stat_neg[0])]),
                "StatPosOut": stat_pos, "StatNegOut": stat_neg}
    slot = int(stat_pos[-1]) % steps
    for stat, batch in ((stat_pos, batch_pos), (stat_neg, batch_neg)):
        ring = stat[:-1].reshape(steps + 1, buckets)  # a view: slots, then their sum
        ring[slot] = batch
        ring[steps] = ring[:steps].sum(axis=0)
        stat[-1] += 1
    total = slice(steps * buckets, (steps + 1) * buckets)
    return {"AUC": np.array([_auc_loop(stat_pos[total], stat_neg[total])]),
            "StatPosOut": stat_pos, "StatNegOut": stat_neg}


def _auc_inputs(batch, width, thresholds, steps, seed_state=False, label_dtype=np.int64):
    predict = R.uniform(0, 1, (batch, width))
    label = R.integers(0, 2, (batch, 1)).astype(label_dtype)
    buckets = thresholds + 1
    if steps == 0:
        pos = np.zeros((1, buckets), np.int64)
        neg = np.zeros((1, buckets), np.int64)
        if seed_state:
            pos[0] = R.integers(0, 3, buckets)
            neg[0] = R.integers(0, 3, buckets)
    else:
        pos = np.zeros((steps + 1) * buckets + 1, np.int64)
        neg = np.zeros_like(pos)
        if seed_state:  # consistent ring: random slots, their sum, a step counter
            for stat in (pos, neg):
                ring = stat[:-1].reshape(steps + 1, buckets)
                ring[:steps] = R.integers(0, 3, (steps, buckets))
                ring[steps] = ring[:steps].sum(axis=0)
                stat[-1] = 5
    return {"Predict": predict, "Label": label, "StatPos": pos, "StatNeg": neg}


case("auc", _auc_inputs(12, 2, 10, 0), attrs={"num_thresholds": 10, "slide_steps": 0},
     reference=_auc_ref, name="global_fresh")
case("auc", _auc_inputs(12, 2, 10, 0, seed_state=True),
     attrs={"num_thresholds": 10, "slide_steps": 0}, reference=_auc_ref,
     name="global_accumulates")
case("auc", _auc_inputs(9, 1, 7, 0, label_dtype=np.int32),
     attrs={"num_thresholds": 7, "slide_steps": 0}, reference=_auc_ref,
     name="one_column_int32_label")
case("auc", _auc_inputs(10, 2, 10, 1), attrs={"num_thresholds": 10, "slide_steps": 1},
     reference=_auc_ref, name="batch_fresh")
case("auc", _auc_inputs(10, 2, 6, 3, seed_state=True),
     attrs={"num_thresholds": 6, "slide_steps": 3}, reference=_auc_ref,
     name="slide3_ring")
case("auc", {"Predict": np.array([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4], [0.3, 0.7]]),
             "Label": np.array([[0], [1], [0], [1]], np.int64),
             "StatPos": np.zeros((1, 11), np.int64), "StatNeg": np.zeros((1, 11), np.int64)},
     attrs={"num_thresholds": 10, "slide_steps": 0},
     reference=lambda i, a: {"AUC": np.array([1.0])}, name="perfect_separation")
case("auc", {"Predict": np.array([[0.5, 0.5], [0.5, 0.5]]),
             "Label": np.array([[1], [0]], np.int64),
             "StatPos": np.zeros((1, 11), np.int64), "StatNeg": np.zeros((1, 11), np.int64)},
     attrs={"num_thresholds": 10, "slide_steps": 0},
     reference=lambda i, a: {"AUC": np.array([0.5])}, name="tie_is_half")


# --- detection_map ----------------------------------------------------------------------------
# One image: class 1 is found (0.9) then found again (0.8, a duplicate: a false positive);
# class 2 is missed (0.7, no overlap) then found (0.6). AP(1) = 1, AP(2) = 0.5.
_GT = np.array([[1, .1, .1, .3, .3], [2, .5, .5, .8, .8]])
_DET = np.array([[1, .9, .1, .1, .3, .3], [1, .8, .1, .1, .3, .3], [2, .7, 0, 0, .1, .1],
                 [2, .6, .5, .5, .8, .8]])
_TP = np.array([[.9, 1], [.8, 0], [.7, 0], [.6, 1]])
_FP = np.array([[.9, 0], [.8, 1], [.7, 1], [.6, 0]])
_ATTRS = {"class_num": 3, "overlap_threshold": 0.5}
_STATE = {"PosCount": np.array([[1], [0], [0]], np.int32),
          "TruePos": np.array([[.3, 1.]]), "FalsePos": np.array([[.3, 0.]])}

for ap in ("integral", "11point"):
    case("detection_map", {"DetectRes": _DET, "Label": _GT}, attrs=dict(_ATTRS, ap_type=ap),
         reference=lambda i, a: {"MAP": np.array([0.75]),
                                 "AccumPosCount": np.array([[0], [1], [1]], np.int32),
                                 "AccumTruePos": _TP, "AccumFalsePos": _FP},
         name=ap)
# the state says class 0 (no LoD: all its rows are class 0's) had one ground truth, found
case("detection_map", dict({"DetectRes": _DET, "Label": _GT,
                            "HasState": np.array([1], np.int32)}, **_STATE),
     attrs=_ATTRS, reference=lambda i, a: {
         "MAP": np.array([2.5 / 3]), "AccumPosCount": np.array([[1], [1], [1]], np.int32),
         "AccumTruePos": np.vstack([[.3, 1], _TP]), "AccumFalsePos": np.vstack([[.3, 0], _FP])},
     name="with_state")
case("detection_map", dict({"DetectRes": _DET, "Label": _GT,
                            "HasState": np.array([0], np.int32)}, **_STATE),
     attrs=_ATTRS, reference=lambda i, a: {"MAP": np.array([0.75])}, name="state_ignored")
# 6-column labels: the class-2 ground truth is difficult; not evaluating difficult ones drops
# it from the positives and the detection matching it from the counts
_GT6 = np.array([[1, 0, .1, .1, .3, .3], [2, 1, .5, .5, .8, .8]])
case("detection_map", {"DetectRes": _DET, "Label": _GT6},
     attrs=dict(_ATTRS, evaluate_difficult=False),
     reference=lambda i, a: {"MAP": np.array([1.0]),
                             "AccumPosCount": np.array([[0], [1], [0]], np.int32),
                             "AccumTruePos": _TP[:3], "AccumFalsePos": _FP[:3]},
     name="difficult_skipped")
