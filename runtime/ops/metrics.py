"""Metric ops (Fluid 1.8's paddle/fluid/operators/metrics and detection_map): auc and
detection_map. Neither has a gradient: they read predictions and update persistable counters.

auc keeps, per prediction bucket, how many positive (StatPos) and negative (StatNeg) examples
have been seen; a prediction p (the last column of Predict) falls in bucket
int(p * num_thresholds). The AUC is the trapezoid area under the ROC curve these histograms
draw, walking the buckets from the highest threshold down.

  slide_steps == 0: the state is [1, num_thresholds + 1] and accumulates every batch (the
                    "global" AUC).
  slide_steps == s > 0: the state is a flat [(s + 1) * B + 1] array (B = num_thresholds + 1):
                    s ring slots of per-batch histograms, then their sum (what the AUC is
                    computed from), then a step counter choosing the ring slot the next batch
                    overwrites (the "batch" AUC over the last s batches).
"""

import numpy as np

from .registry import defop

auc = defop("auc", inputs=("Predict", "Label", "StatPos", "StatNeg"),
            outputs=("AUC", "StatPosOut", "StatNegOut"),
            attrs={"curve": "ROC", "num_thresholds": (2 << 12) - 1, "slide_steps": 1})


def auc_state_shape(num_thresholds, slide_steps):
    """The shape of an auc op's StatPos/StatNeg state (see the module docstring)."""
    buckets = num_thresholds + 1
    if slide_steps:
        return [(1 + slide_steps) * buckets + 1]
    return [1, buckets]


@auc.infer
def _auc_shape(ic):
    predict, label = ic.input("Predict"), ic.input("Label")
    ic.check(len(predict.shape) == 2, f"{ic.describe('Predict')} must be [batch, 1 or 2]")
    ic.check(predict.shape[1] in (1, 2, -1),
             f"only binary classification: {ic.describe('Predict')} must have 1 or 2 columns")
    ic.check(label.dtype.kind in "iu", f"labels must be integers, got {ic.describe('Label')}")
    ic.check(ic.attr("num_thresholds") >= 1, "num_thresholds must be at least 1")
    ic.check(ic.attr("slide_steps") >= 0, "slide_steps must be a natural number")
    ic.set_output("AUC", [1], np.dtype("float64"))
    shape = auc_state_shape(ic.attr("num_thresholds"), ic.attr("slide_steps"))
    for slot in ("StatPosOut", "StatNegOut"):
        ic.set_output(slot, shape, np.dtype("int64"))


def batch_histograms(xp, predict, label, num_thresholds):
    """(positives, negatives) per bucket [num_thresholds + 1] of one batch: the positive
    probability is Predict's last column; labels > 0 count as positive, == 0 as negative,
    < 0 are ignored."""
    if predict.shape[0] != label.shape[0]:
        raise ValueError(f"auc: Predict has {predict.shape[0]} rows but Label has "
                         f"{label.shape[0]}")
    prob = predict[:, -1]
    if prob.size and (bool((prob > 1).any()) or bool((prob < 0).any())):
        raise ValueError("auc: the predict data must be in [0, 1]")
    # the product in Predict's own precision, truncated, as Paddle's kernel computes it
    bins = (prob * prob.dtype.type(num_thresholds)).astype(np.int64)
    label = label.reshape(-1)
    buckets = num_thresholds + 1
    pos = xp.bincount(bins[label > 0], minlength=buckets).astype(np.int64)
    neg = xp.bincount(bins[label == 0], minlength=buckets).astype(np.int64)
    return pos, neg


def area_under_roc(pos, neg):
    """AUC (float64 [1]) from bucket histograms: the trapezoids under the curve of
    (negatives, positives) seen at or above each threshold, walked from the top bucket down,
    over (total positives * total negatives); 0 when either total is 0."""
    pos_desc = pos[::-1].astype(np.float64)
    neg_desc = neg[::-1].astype(np.float64)
    tot_pos = pos_desc.cumsum()
    area = (neg_desc * (2 * tot_pos - pos_desc)).sum() / 2.0
    total_pos, total_neg = pos_desc.sum(), neg_desc.sum()
    if total_pos > 0 and total_neg > 0:
        area = area / total_pos / total_neg
    return area.reshape(1) if hasattr(area, "reshape") else np.array([area])


def _slide(stat_pos, stat_neg, pos, neg, buckets, steps):
    """Put this batch's histograms in the ring slot the counter names, keeping the sum slot
    equal to the sum of the ring; returns the sum slot's (pos, neg)."""
    slot = int(stat_pos[(steps + 1) * buckets]) % steps
    cur, total = slice(slot * buckets, (slot + 1) * buckets), \
        slice(steps * buckets, (steps + 1) * buckets)
    for stat, batch in ((stat_pos, pos), (stat_neg, neg)):
        stat[total] -= stat[cur]
        stat[cur] = batch
        stat[total] += batch
    return stat_pos[total], stat_neg[total]


@auc.kernel
def _auc(ctx, ins, attrs):
    xp = ctx.xp
    thresholds, steps = attrs["num_thresholds"], attrs["slide_steps"]
    buckets = thresholds + 1
    stat_pos = ins["StatPos"].astype(np.int64).copy()
    stat_neg = ins["StatNeg"].astype(np.int64).copy()
    pos, neg = batch_histograms(xp, ins["Predict"], ins["Label"], thresholds)
    if steps == 0:
        flat_pos, flat_neg = stat_pos.reshape(-1), stat_neg.reshape(-1)
        flat_pos[:buckets] += pos
        flat_neg[:buckets] += neg
        value = area_under_roc(flat_pos[:buckets], flat_neg[:buckets])
    else:
        sum_pos, sum_neg = _slide(stat_pos, stat_neg, pos, neg, buckets, steps)
        value = area_under_roc(sum_pos, sum_neg)
        stat_pos[(steps + 1) * buckets] += 1
        stat_neg[(steps + 1) * buckets] += 1
    return {"AUC": xp.asarray(value, dtype=np.float64), "StatPosOut": stat_pos,
            "StatNegOut": stat_neg}


# --- detection_map ------------------------------------------------------------------------------
# DetectRes [M, 6] rows are (label, score, xmin, ymin, xmax, ymax); Label [N, 5] rows are (label,
# xmin, ymin, xmax, ymax) or [N, 6] (label, difficult, xmin, ymin, xmax, ymax); both carry a
# one-level LoD splitting them by image (no LoD: one image). The accumulated state is
# PosCount int32 [class_num, 1] (ground truths per class) and TruePos/FalsePos [K, 2] rows of
# (score, 0 or 1) whose LoD splits them by class; HasState [1] == 0 ignores the input state.
detection_map = defop(
    "detection_map",
    inputs=("DetectRes", "Label", "HasState?", "PosCount?", "TruePos?", "FalsePos?"),
    outputs=("MAP", "AccumPosCount", "AccumTruePos", "AccumFalsePos"),
    attrs={"class_num": 0, "background_label": 0, "overlap_threshold": 0.5,
           "evaluate_difficult": True, "ap_type": "integral"})


@detection_map.infer
def _detection_map_shape(ic):
    det, label = ic.input("DetectRes"), ic.input("Label")
    ic.check(len(det.shape) == 2 and det.shape[1] in (6, -1),
             f"{ic.describe('DetectRes')} must be [N, 6]")
    ic.check(len(label.shape) == 2 and label.shape[1] in (5, 6, -1),
             f"{ic.describe('Label')} must be [N, 5] or [N, 6]")
    if ic.input("PosCount") is not None:
        ic.check(ic.input("TruePos") is not None and ic.input("FalsePos") is not None,
                 "TruePos and FalsePos must be given with PosCount")
    ic.set_output("MAP", [1], det.dtype)
    ic.set_output("AccumPosCount", [ic.attr("class_num"), 1], np.dtype("int32"))
    ic.set_output("AccumTruePos", [-1, 2], det.dtype, lod_level=1)
    ic.set_output("AccumFalsePos", [-1, 2], det.dtype, lod_level=1)


def _host(x):
    return x.get() if hasattr(x, "get") else np.asarray(x)


def _image_offsets(value):
    """The LoD level splitting `value` by image (one image when it has no LoD)."""
    from ..lod import lod_of
    lod = lod_of(value)
    return lod[0] if lod else [0, len(value)]


def _jaccard(a, b):
    """Intersection over union of boxes (xmin, ymin, xmax, ymax); 0 when they don't touch."""
    if b[0] > a[2] or b[2] < a[0] or b[1] > a[3] or b[3] < a[1]:
        return 0.0
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    inter = w * h
    area_a = (a[2] - a[0]) * (a[3] - a[1])
    area_b = (b[2] - b[0]) * (b[3] - b[1])
    return inter / (area_a + area_b - inter)


def _ground_truths(label, offsets):
    """Per image: {class: [(box, difficult)]}."""
    images = []
    for start, end in zip(offsets[:-1], offsets[1:]):
        boxes = {}
        for row in label[start:end]:
            if label.shape[1] == 6:
                box, difficult = tuple(row[2:6]), abs(float(row[1])) >= 1e-6
            else:
                box, difficult = tuple(row[1:5]), False
            boxes.setdefault(int(row[0]), []).append((box, difficult))
        images.append(boxes)
    return images


def _detections(det, offsets):
    """Per image: {class: [(score, box)]}."""
    images = []
    for start, end in zip(offsets[:-1], offsets[1:]):
        boxes = {}
        for row in det[start:end]:
            boxes.setdefault(int(row[0]), []).append((float(row[1]), tuple(row[2:6])))
        images.append(boxes)
    return images


def _count_positives(truths, evaluate_difficult, pos_count):
    for image in truths:
        for cls, boxes in image.items():
            n = len(boxes) if evaluate_difficult else sum(not d for _, d in boxes)
            if n:
                pos_count[cls] = pos_count.get(cls, 0) + n


def _match_image(truths, detections, evaluate_difficult, threshold, true_pos, false_pos):
    """Append (score, hit) to true_pos/false_pos per class for one image's detections: a
    detection hits when its best-overlapping ground truth of its class overlaps more than
    `threshold` and was not already taken by a higher-scoring detection."""
    def record(cls, score, hit):
        true_pos.setdefault(cls, []).append((score, int(hit)))
        false_pos.setdefault(cls, []).append((score, int(not hit)))

    for cls, preds in detections.items():
        gts = truths.get(cls)
        if not gts:
            for score, _ in preds:
                record(cls, score, False)
            continue
        taken = [False] * len(gts)
        for score, box in sorted(preds, key=lambda p: -p[0]):
            clipped = tuple(min(max(v, 0.0), 1.0) for v in box)
            overlaps = [_jaccard(clipped, gt) for gt, _ in gts]
            best = int(np.argmax(overlaps))
            if overlaps[best] <= threshold:
                record(cls, score, False)
            elif evaluate_difficult or not gts[best][1]:
                record(cls, score, not taken[best])
                taken[best] = True


def _average_precision(ap_type, num_pos, tps, fps):
    """AP of one class from its (score, hit) lists ('integral' or VOC2007 '11point')."""
    order = sorted(range(len(tps)), key=lambda i: -tps[i][0])  # stable, highest score first
    tp_sum = np.cumsum([tps[i][1] for i in order])
    fp_sum = np.cumsum([fps[i][1] for i in sorted(range(len(fps)),
                                                 key=lambda i: -fps[i][0])])
    precision = tp_sum / np.maximum(tp_sum + fp_sum, 1)
    recall = tp_sum / num_pos
    if ap_type == "11point":
        return _eleven_point(precision, recall)
    ap, prev = 0.0, 0.0
    for p, r in zip(precision, recall):
        if abs(r - prev) > 1e-6:
            ap += p * abs(r - prev)
        prev = r
    return ap


def _eleven_point(precision, recall):
    """VOC2007 AP: the mean over recall levels 0, 0.1, ..., 1 of the best precision reached
    at or beyond that recall, scanned from the top level down as Paddle 1.8 does (a level
    whose scan reaches the first detection does not hand its best on to the next)."""
    best = [0.0] * 11
    start = len(precision) - 1
    for j in range(10, -1, -1):
        for i in range(start, -1, -1):
            if recall[i] < j / 10.0:
                start = i
                if j > 0:
                    best[j - 1] = best[j]
                break
            best[j] = max(best[j], precision[i])
    return sum(b / 11 for b in reversed(best))


def _mean_ap(ap_type, pos_count, true_pos, false_pos, background_label):
    """The mean AP over classes with ground truths (a class never detected counts as 0).
    Paddle 1.8 compares the class's positive count, not its label, with background_label;
    kept as is."""
    total, count = 0.0, 0
    for cls in sorted(pos_count):
        num_pos = pos_count[cls]
        if num_pos == background_label:
            continue
        count += 1
        if cls in true_pos:
            total += _average_precision(ap_type, num_pos, true_pos[cls], false_pos[cls])
    return total / count if count else 0.0


def _read_state(ins, class_num):
    """(pos_count, true_pos, false_pos) dicts from the input state (empty unless HasState)."""
    has = ins.get("HasState")
    if ins.get("PosCount") is None or has is None or not int(_host(has).reshape(-1)[0]):
        return {}, {}, {}
    from ..lod import lod_of
    counts = _host(ins["PosCount"]).reshape(-1)
    pos_count = {i: int(counts[i]) for i in range(class_num)}

    def by_class(value):
        rows, table = _host(value), {}
        offsets = lod_of(value)[0] if lod_of(value) else [0, len(rows)]
        for cls, (start, end) in enumerate(zip(offsets[:-1], offsets[1:])):
            for score, flag in rows[start:end]:
                table.setdefault(cls, []).append((float(score), int(flag)))
        return table
    return pos_count, by_class(ins["TruePos"]), by_class(ins["FalsePos"])


def _write_state(table, class_num, dtype):
    """[K, 2] rows (score, flag) grouped by class 0..class_num-1, with a LoD by class."""
    from ..lod import with_lod
    rows, offsets = [], [0]
    for cls in range(class_num):
        rows.extend(table.get(cls, ()))
        offsets.append(len(rows))
    return with_lod(np.array(rows, dtype=dtype).reshape(-1, 2), [offsets])


@detection_map.kernel
def _detection_map(ctx, ins, attrs):
    det_in, label_in = ins["DetectRes"], ins["Label"]
    det, label = _host(det_in), _host(label_in)
    det_off, label_off = _image_offsets(det_in), _image_offsets(label_in)
    if len(det_off) != len(label_off):
        raise ValueError("detection_map: Label and DetectRes must hold the same number of "
                         "images")
    class_num, evaluate_difficult = attrs["class_num"], attrs["evaluate_difficult"]
    pos_count, true_pos, false_pos = _read_state(ins, class_num)
    truths = _ground_truths(label, label_off)
    _count_positives(truths, evaluate_difficult, pos_count)
    for image_truths, image_dets in zip(truths, _detections(det, det_off)):
        _match_image(image_truths, image_dets, evaluate_difficult,
                     attrs["overlap_threshold"], true_pos, false_pos)
    value = _mean_ap(attrs["ap_type"], pos_count, true_pos, false_pos,
                     attrs["background_label"])
    counts = np.array([pos_count.get(i, 0) for i in range(class_num)], np.int32)
    outputs = {"MAP": np.array([value], dtype=det.dtype),
               "AccumPosCount": counts.reshape(class_num, 1),
               "AccumTruePos": _write_state(true_pos, class_num, det.dtype),
               "AccumFalsePos": _write_state(false_pos, class_num, det.dtype)}
    # computed on the host, as by Paddle's CPU-only kernel; on a GPU place the outputs go
    # back to the device (on the CPU the arrays stay as they are: the states keep their LoD)
    if ctx.xp is np:
        return outputs
    return {slot: ctx.xp.asarray(value) for slot, value in outputs.items()}
