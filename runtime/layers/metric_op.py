"""Metric layers of Fluid 1.8 that keep state between runs: auc (fluid.layers.auc) and
detection_map (fluid.layers.detection_map). fluid.layers.accuracy lives in nn.py.

Their counters are persistable global variables initialised to zeros by the startup program;
each run of the main program updates them in place (the op's StatPosOut is its StatPos).
"""

from ..initializer import Constant
from ..layer_helper import LayerHelper
from ..ops.metrics import auc_state_shape
from .logic import check_variable

__all__ = ["auc", "detection_map"]


def _zero_state(helper, dtype, shape):
    """A persistable global variable the startup program fills with zeros."""
    var = helper.create_global_variable(persistable=True, dtype=dtype, shape=shape)
    helper.set_variable_initializer(var, Constant(value=0.0, force_cpu=False))
    return var


def _append_auc(helper, input, label, stat_pos, stat_neg, out, curve, num_thresholds,
                slide_steps):
    helper.append_op("auc",
                     inputs={"Predict": [input], "Label": [label], "StatPos": [stat_pos],
                             "StatNeg": [stat_neg]},
                     outputs={"AUC": [out], "StatPosOut": [stat_pos],
                              "StatNegOut": [stat_neg]},
                     attrs={"curve": curve, "num_thresholds": num_thresholds,
                            "slide_steps": slide_steps})


def auc(input, label, curve="ROC", num_thresholds=2 ** 12 - 1, topk=1, slide_steps=1):
    """Area under the ROC curve of `input` (float [batch, 1 or 2]: the positive class's
    probability is its last column) against `label` (int [batch, 1]).

    Returns (global_auc, batch_auc, [batch_stat_pos, batch_stat_neg, stat_pos, stat_neg]):
    global_auc over every example seen since the states were zeroed, batch_auc over the last
    `slide_steps` batches (0: every batch), and the four persistable int64 histograms behind
    them (see runtime/ops/metrics.py for their layout)."""
    helper = LayerHelper("auc")
    check_variable(input, "input", "auc", ("float32", "float64"))
    check_variable(label, "label", "auc", ("int32", "int64"))
    auc_out = helper.create_variable_for_type_inference(dtype="float64")
    batch_auc_out = helper.create_variable_for_type_inference(dtype="float64")
    batch_shape = auc_state_shape(num_thresholds, slide_steps)
    if not slide_steps:  # Paddle 1.8 declares the flat layout even then
        batch_shape = [(1 + slide_steps) * (num_thresholds + 1) + 1]
    batch_stat_pos = _zero_state(helper, "int64", batch_shape)
    batch_stat_neg = _zero_state(helper, "int64", batch_shape)
    stat_pos = _zero_state(helper, "int64", auc_state_shape(num_thresholds, 0))
    stat_neg = _zero_state(helper, "int64", auc_state_shape(num_thresholds, 0))
    _append_auc(helper, input, label, batch_stat_pos, batch_stat_neg, batch_auc_out, curve,
                num_thresholds, slide_steps)
    _append_auc(helper, input, label, stat_pos, stat_neg, auc_out, curve, num_thresholds, 0)
    return auc_out, batch_auc_out, [batch_stat_pos, batch_stat_neg, stat_pos, stat_neg]


def detection_map(detect_res, label, class_num, background_label=0, overlap_threshold=0.3,
                  evaluate_difficult=True, has_state=None, input_states=None, out_states=None,
                  ap_version="integral"):
    """Mean average precision (float [1]) of detections `detect_res` ([M, 6] rows: label,
    score, xmin, ymin, xmax, ymax; LoD by image) against ground truths `label` ([N, 5] or
    [N, 6], see runtime/ops/metrics.py). With input_states (pos_count, true_pos, false_pos)
    and has_state != 0 the previous counts are accumulated; out_states receive the new ones
    (fresh variables when None)."""
    helper = LayerHelper("detection_map")
    map_out = helper.create_variable_for_type_inference(dtype="float32")
    if out_states is None:
        out_states = [helper.create_variable_for_type_inference(dtype=dtype)
                      for dtype in ("int32", "float32", "float32")]
    states = list(input_states) if input_states is not None else [None, None, None]
    helper.append_op(
        "detection_map",
        inputs={"Label": label, "DetectRes": detect_res, "HasState": has_state,
                "PosCount": states[0], "TruePos": states[1], "FalsePos": states[2]},
        outputs={"MAP": map_out, "AccumPosCount": out_states[0],
                 "AccumTruePos": out_states[1], "AccumFalsePos": out_states[2]},
        attrs={"overlap_threshold": overlap_threshold,
               "evaluate_difficult": evaluate_difficult, "ap_type": ap_version,
               "class_num": class_num})  # Paddle 1.8 drops background_label (op default 0)
    return map_out
