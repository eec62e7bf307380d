"""fluid.metrics (Fluid 1.8): accumulate evaluation results over mini-batches in Python.

Each metric holds its running state in public attributes (those not starting with "_"):
update(...) adds a batch, eval() returns the result so far, reset() zeroes the state
(ints to 0, floats to 0.0, arrays to zeros, anything else to None) and get_config() returns
{"name": ..., "states": a copy of the state}.

  Precision, Recall    binary: preds rounded to 0/1 against labels (tp/fp, tp/fn counts)
  Accuracy             a weighted mean of batch accuracies
  ChunkEvaluator       precision, recall, F1 from chunk_eval's counts
  EditDistance         mean edit distance and the ratio of sequences not matched exactly
  Auc                  ROC AUC from histograms of the positive class's probability
  CompositeMetric      several metrics updated with the same arguments
  DetectionMAP         not a Python metric: builds detection_map ops into the program (the
                       batch mAP and the mAP accumulated since the last reset)
"""

import copy

import numpy as np

from . import layers, unique_name
from .framework import Program, program_guard
from .initializer import Constant
from .layer_helper import LayerHelper

__all__ = ["MetricBase", "CompositeMetric", "Precision", "Recall", "Accuracy",
           "ChunkEvaluator", "EditDistance", "DetectionMAP", "Auc"]


def _is_numpy_(var):
    return isinstance(var, (np.ndarray, np.generic))


def _is_number_(var):
    return isinstance(var, (int, float, np.int64)) or (
        isinstance(var, np.ndarray) and var.shape == (1,))


def _is_number_or_matrix_(var):
    return _is_number_(var) or isinstance(var, np.ndarray)


def _require_numpy(value, what):
    if not _is_numpy_(value):
        raise ValueError(f"The '{what}' must be a numpy ndarray.")


class MetricBase:
    """The base of the Python metrics: a name and the state conventions of the module
    docstring. Subclasses implement update() and eval()."""

    def __init__(self, name):
        self._name = str(name) if name is not None else self.__class__.__name__

    def __str__(self):
        return self._name

    def _states(self):
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_")}

    def reset(self):
        for attr, value in self._states().items():
            if isinstance(value, int):
                setattr(self, attr, 0)
            elif isinstance(value, float):
                setattr(self, attr, 0.0)
            elif isinstance(value, (np.ndarray, np.generic)):
                setattr(self, attr, np.zeros_like(value))
            else:
                setattr(self, attr, None)

    def get_config(self):
        return {"name": self._name, "states": copy.deepcopy(self._states())}

    def update(self, preds, labels):
        raise NotImplementedError("Should not use it directly, please extend it.")

    def eval(self):
        raise NotImplementedError("Should not use it directly, please extend it.")


class CompositeMetric(MetricBase):
    """Several metrics taking the same update() arguments; eval() lists their results."""

    def __init__(self, name=None):
        super().__init__(name)
        self._metrics = []

    def add_metric(self, metric):
        if not isinstance(metric, MetricBase):
            raise ValueError("SubMetric should be inherit from MetricBase.")
        self._metrics.append(metric)

    def update(self, preds, labels):
        for metric in self._metrics:
            metric.update(preds, labels)

    def eval(self):
        return [metric.eval() for metric in self._metrics]


def _binary_pairs(preds, labels):
    """(prediction rounded to 0/1, label) per example."""
    _require_numpy(preds, "preds")
    _require_numpy(labels, "labels")
    rounded = np.rint(preds).astype("int32")
    return [(rounded[i], labels[i]) for i in range(labels.shape[0])]


class Precision(MetricBase):
    """tp / (tp + fp) of binary predictions (probabilities rounded at 0.5); state: tp, fp."""

    def __init__(self, name=None):
        super().__init__(name)
        self.tp = 0
        self.fp = 0

    def update(self, preds, labels):
        for pred, label in _binary_pairs(preds, labels):
            if pred == 1:
                if pred == label:
                    self.tp += 1
                else:
                    self.fp += 1

    def eval(self):
        predicted = self.tp + self.fp
        return float(self.tp) / predicted if predicted != 0 else 0.0


class Recall(MetricBase):
    """tp / (tp + fn) of binary predictions (probabilities rounded at 0.5); state: tp, fn."""

    def __init__(self, name=None):
        super().__init__(name)
        self.tp = 0
        self.fn = 0

    def update(self, preds, labels):
        for pred, label in _binary_pairs(preds, labels):
            if label == 1:
                if pred == label:
                    self.tp += 1
                else:
                    self.fn += 1

    def eval(self):
        relevant = self.tp + self.fn
        return float(self.tp) / relevant if relevant != 0 else 0.0


class Accuracy(MetricBase):
    """The mean of batch accuracies weighted by batch size; state: value (sum of
    accuracy * weight) and weight (sum of weights)."""

    def __init__(self, name=None):
        super().__init__(name)
        self.value = 0.0
        self.weight = 0.0

    def update(self, value, weight):
        if not _is_number_or_matrix_(value):
            raise ValueError("The 'value' must be a number(int, float) or a numpy ndarray.")
        if not _is_number_(weight):
            raise ValueError("The 'weight' must be a number(int, float).")
        if weight < 0:
            raise ValueError("The 'weight' can not be negative")
        self.value += value * weight
        self.weight += weight

    def eval(self):
        if self.weight == 0:
            raise ValueError("There is no data in Accuracy Metrics. Please check "
                             "layers.accuracy output has added to Accuracy.")
        return self.value / self.weight


class ChunkEvaluator(MetricBase):
    """Precision, recall and F1 of chunk detection from the counts chunk_eval outputs;
    state: num_infer_chunks, num_label_chunks, num_correct_chunks."""

    def __init__(self, name=None):
        super().__init__(name)
        self.num_infer_chunks = 0
        self.num_label_chunks = 0
        self.num_correct_chunks = 0

    def update(self, num_infer_chunks, num_label_chunks, num_correct_chunks):
        for value, what in ((num_infer_chunks, "num_infer_chunks"),
                            (num_label_chunks, "num_label_chunks"),
                            (num_correct_chunks, "num_correct_chunks")):
            if not _is_number_or_matrix_(value):
                raise ValueError(f"The '{what}' must be a number(int) or a numpy ndarray.")
        self.num_infer_chunks += num_infer_chunks
        self.num_label_chunks += num_label_chunks
        self.num_correct_chunks += num_correct_chunks

    def eval(self):
        precision = float(self.num_correct_chunks) / self.num_infer_chunks \
            if self.num_infer_chunks else 0
        recall = float(self.num_correct_chunks) / self.num_label_chunks \
            if self.num_label_chunks else 0
        f1_score = float(2 * precision * recall) / (precision + recall) \
            if self.num_correct_chunks else 0
        return precision, recall, f1_score


class EditDistance(MetricBase):
    """The mean edit distance per sequence and the ratio of sequences with a non-zero
    distance; state: total_distance, seq_num, instance_error."""

    def __init__(self, name):
        super().__init__(name)
        self.total_distance = 0.0
        self.seq_num = 0
        self.instance_error = 0

    def update(self, distances, seq_num):
        _require_numpy(distances, "distances")
        if not _is_number_(seq_num):
            raise ValueError("The 'seq_num' must be a number(int, float).")
        exact = np.sum(distances == 0)
        self.seq_num += seq_num
        self.instance_error += seq_num - exact
        self.total_distance += np.sum(distances)

    def eval(self):
        if self.seq_num == 0:
            raise ValueError("There is no data in EditDistance Metric. Please check "
                             "layers.edit_distance output has been added to EditDistance.")
        return self.total_distance / self.seq_num, self.instance_error / float(self.seq_num)


class Auc(MetricBase):
    """ROC AUC of binary predictions: preds [batch, 2] (column 1: the positive class's
    probability), labels [batch, 1]. Each prediction is counted in bucket
    int(p * num_thresholds) of _stat_pos or _stat_neg; eval() is the trapezoid area under the
    curve those histograms draw, over (positives * negatives). Only curve='ROC' is
    computed."""

    def __init__(self, name, curve="ROC", num_thresholds=4095):
        super().__init__(name=name)
        self._curve = curve
        self._num_thresholds = num_thresholds
        self._stat_pos = [0] * (num_thresholds + 1)
        self._stat_neg = [0] * (num_thresholds + 1)

    def update(self, preds, labels):
        _require_numpy(labels, "labels")
        _require_numpy(preds, "predictions")
        for i, label in enumerate(labels):
            bucket = int(preds[i, 1] * self._num_thresholds)
            assert bucket <= self._num_thresholds
            if label:
                self._stat_pos[bucket] += 1.0
            else:
                self._stat_neg[bucket] += 1.0

    @staticmethod
    def trapezoid_area(x1, x2, y1, y2):
        return abs(x1 - x2) * (y1 + y2) / 2.0

    def eval(self):
        tot_pos = tot_neg = area = 0.0
        for idx in range(self._num_thresholds, -1, -1):
            prev_pos, prev_neg = tot_pos, tot_neg
            tot_pos += self._stat_pos[idx]
            tot_neg += self._stat_neg[idx]
            area += self.trapezoid_area(tot_neg, prev_neg, tot_pos, prev_pos)
        return area / tot_pos / tot_neg if tot_pos > 0.0 and tot_neg > 0.0 else 0.0


class DetectionMAP:
    """Builds two detection_map ops into the current program: the mAP of the batch
    (cur_map) and the mAP accumulated over batches (accum_map) in persistable states
    (positive count, true and false positives) that `has_state` (int32 [1]: 0 after reset(),
    set to 1 by every run) tells the op to read. Inputs as in fluid.layers.detection_map;
    gt_label [N, 1], gt_box [N, 4], gt_difficult [N, 1] or None."""

    def __init__(self, input, gt_label, gt_box, gt_difficult=None, class_num=None,
                 background_label=0, overlap_threshold=0.5, evaluate_difficult=True,
                 ap_version="integral"):
        self.helper = LayerHelper("map_eval")
        gt_label = layers.cast(x=gt_label, dtype=gt_box.dtype)
        if gt_difficult:
            gt_difficult = layers.cast(x=gt_difficult, dtype=gt_box.dtype)
            label = layers.concat([gt_label, gt_difficult, gt_box], axis=1)
        else:
            label = layers.concat([gt_label, gt_box], axis=1)
        options = dict(overlap_threshold=overlap_threshold,
                       evaluate_difficult=evaluate_difficult, ap_version=ap_version)
        self.cur_map = layers.detection_map(input, label, class_num, background_label,
                                            **options)
        states = [self._create_state("accum_pos_count", "int32", None, [class_num or 0, 1]),
                  self._create_state("accum_true_pos", "float32", None, [0, 2]),
                  self._create_state("accum_false_pos", "float32", None, [0, 2])]
        self.has_state = self._create_state("has_state", "int32", [1])
        self.helper.set_variable_initializer(self.has_state, initializer=Constant(value=0))
        self.accum_map = layers.detection_map(input, label, class_num, background_label,
                                              has_state=self.has_state, input_states=states,
                                              out_states=states, **options)
        layers.fill_constant(shape=self.has_state.shape, value=1, dtype=self.has_state.dtype,
                             out=self.has_state)

    def _create_state(self, suffix, dtype, shape, empty_shape=None):
        """A persistable variable named after this metric. With empty_shape, the startup
        program gives it zeros of that shape (Paddle's executor creates such states empty;
        this runtime's reads a persistable only once something wrote it)."""
        state = self.helper.create_variable(
            name="_".join([unique_name.generate(self.helper.name), suffix]),
            persistable=True, dtype=dtype, shape=shape)
        if empty_shape is not None:
            startup = self.helper.startup_program.global_block()
            held = startup.create_var(name=state.name, dtype=dtype, shape=empty_shape,
                                      persistable=True)
            Constant(value=0)(held, startup)
        return state

    def get_map_var(self):
        """(mAP of the current batch, mAP accumulated since the last reset)."""
        return self.cur_map, self.accum_map

    def reset(self, executor, reset_program=None):
        """Run a program (reset_program, or a new one) setting has_state to 0, so the next
        run starts the accumulation afresh."""
        if reset_program is None:
            reset_program = Program()
        with program_guard(main_program=reset_program):
            var = self.has_state
            clone = reset_program.current_block().create_var(
                name=var.name, shape=var.shape, dtype=var.dtype, type=var.type,
                lod_level=var.lod_level, persistable=var.persistable)
            layers.fill_constant(shape=clone.shape, value=0, dtype=clone.dtype, out=clone)
        executor.run(reset_program)

