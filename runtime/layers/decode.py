"""Fluid 1.8's decoding API: dynamic_decode, Decoder, BasicDecoder (with TrainingHelper,
GreedyEmbeddingHelper, SampleEmbeddingHelper) and BeamSearchDecoder; plus the layers they
need: reduce_all, reduce_any, gather_tree, sampling_id, elementwise_floordiv/mod.

dynamic_decode runs decoder.step in a `while` op until every sequence is finished (or after
max_step_num + 1 steps, as Paddle counts). The step's inputs and states are loop variables
(copies of the decoder's initial ones, overwritten each step, as in layers/time_loop.py), so
the loop is differentiable like any other while loop; each step's outputs go to a
LoDTensorArray, stacked after the loop into [time, batch, ...] (transposed to batch-major
unless output_time_major). A finished sequence's length stops growing; with impute_finished
its states stop changing too. Returns (outputs, final_states[, sequence_lengths]).
"""

import collections

import numpy as np

from ..layer_helper import LayerHelper
from ..framework import Variable
from . import nn
from .extra import shape as shape_of
from .fluid18_more import gather_nd, range as range_
from .logic import equal, increment, less_equal, logical_and, logical_not, logical_or
from .loops import While
from .ops import log
from .tensor import (assign, cast, concat, expand, fill_constant,
                     fill_constant_batch_size_like, reshape, stack, topk, transpose, unsqueeze,
                     _reduce, argmax)
from .time_loop import _as_time_table, _stacked, _time_step, _write_step
from .utils import flatten, map_structure, pack_sequence_as

__all__ = ["reduce_all", "reduce_any", "gather_tree", "sampling_id", "elementwise_floordiv",
           "elementwise_mod", "Decoder", "BasicDecoder", "BeamSearchDecoder", "DecodeHelper",
           "TrainingHelper", "GreedyEmbeddingHelper", "SampleEmbeddingHelper",
           "dynamic_decode"]


# --- layers -------------------------------------------------------------------------------------
def reduce_all(input, dim=None, keep_dim=False, name=None):
    """Logical AND of a bool tensor over `dim` (None: every dimension, giving shape [1])."""
    return _reduce("reduce_all", input, dim, keep_dim, name)


def reduce_any(input, dim=None, keep_dim=False, name=None):
    """Logical OR of a bool tensor over `dim` (None: every dimension, giving shape [1])."""
    return _reduce("reduce_any", input, dim, keep_dim, name)


def elementwise_floordiv(x, y, axis=-1, act=None, name=None):
    return nn._elementwise("elementwise_floordiv", x, y, axis, act, name)


def elementwise_mod(x, y, axis=-1, act=None, name=None):
    return nn._elementwise("elementwise_mod", x, y, axis, act, name)


def gather_tree(ids, parents):
    """The full beam-search paths from each step's ids and parent beams ([T, B, beam] both):
    the last step's ids, then each earlier step's id of the beam the path came from."""
    for value, what in ((ids, "ids"), (parents, "parents")):
        if not isinstance(value, Variable):
            raise TypeError(f"gather_tree: {what} must be a Variable, got {type(value)}")
    helper = LayerHelper("gather_tree")
    out = helper.create_variable_for_type_inference(ids.dtype, stop_gradient=True)
    helper.append_op("gather_tree", inputs={"Ids": ids, "Parents": parents},
                     outputs={"Out": out})
    return out


def sampling_id(x, min=0.0, max=1.0, seed=0, dtype="float32"):  # noqa: A002 (Fluid's names)
    """One class index per row of the probabilities x [B, V], drawn with r ~ U(min, max):
    the first j where the running sum of the row exceeds r. The ids are int64 (Paddle writes
    int64 whatever `dtype` says)."""
    helper = LayerHelper("sampling_id")
    out = helper.create_variable_for_type_inference("int64", stop_gradient=True)
    helper.append_op("sampling_id", inputs={"X": x}, outputs={"Out": out},
                     attrs={"min": float(min), "max": float(max), "seed": int(seed)})
    return out


# --- decoders -----------------------------------------------------------------------------------
class Decoder:
    """What dynamic_decode drives: initialize(inits) -> (initial_inputs, initial_states,
    initial_finished); step(time, inputs, states, **kwargs) -> (outputs, next_states,
    next_inputs, finished); optionally finalize(outputs, final_states, sequence_lengths) ->
    (final_outputs, final_states)."""

    def initialize(self, inits):
        raise NotImplementedError

    def step(self, time, inputs, states, **kwargs):
        raise NotImplementedError

    def finalize(self, outputs, final_states, sequence_lengths):
        raise NotImplementedError


class DecodeHelper:
    """How BasicDecoder starts, samples and feeds the next step."""

    def initialize(self):
        pass

    def sample(self, time, outputs, states):
        pass

    def next_inputs(self, time, outputs, states, sample_ids):
        pass


class TrainingHelper(DecodeHelper):
    """Teacher forcing: step t reads step t of `inputs` ([B, T, ...], [T, B, ...] when
    time_major); sequence b is finished once t + 1 >= sequence_length[b]; the sample is the
    arg max of the outputs."""

    def __init__(self, inputs, sequence_length, time_major=False):
        self.inputs = inputs
        self.sequence_length = sequence_length
        self.time_major = time_major
        # time-major copies with one more (zero) step, so that step T - 1 can read "step T"
        self._padded = [self._time_major_padded(x) for x in flatten(inputs)]

    def _time_major_padded(self, x):
        steps = x if self.time_major else transpose(x, [1, 0] + list(range(2, len(x.shape))))
        padded = concat([steps, steps[0:1] * 0.0], axis=0)
        return _as_time_table(padded), padded

    def initialize(self):
        finished = equal(self.sequence_length,
                         fill_constant([1], self.sequence_length.dtype, 0))
        first = map_structure(lambda x: x[0] if self.time_major else x[:, 0], self.inputs)
        return first, finished

    def sample(self, time, outputs, states):
        return argmax(outputs, axis=-1)

    def next_inputs(self, time, outputs, states, sample_ids):
        lengths = self.sequence_length
        next_time = cast(time, lengths.dtype) + 1
        finished = less_equal(lengths, next_time)
        step = cast(time, "int64") + 1
        next_inputs = pack_sequence_as(
            self.inputs, [_time_step(table, padded, step) for table, padded in self._padded])
        return finished, next_inputs, states


class GreedyEmbeddingHelper(DecodeHelper):
    """Inference: the next input is embedding_fn of the arg max of the outputs; a sequence is
    finished when it emits end_token."""

    def __init__(self, embedding_fn, start_tokens, end_token):
        self.embedding_fn = embedding_fn
        self.start_tokens = start_tokens
        self.end_token = fill_constant([1], "int64", end_token)

    def initialize(self):
        finished = fill_constant_batch_size_like(self.start_tokens, [-1], "bool", False)
        return self.embedding_fn(self.start_tokens), finished

    def sample(self, time, outputs, states):
        return argmax(outputs, axis=-1)

    def next_inputs(self, time, outputs, states, sample_ids):
        finished = equal(sample_ids, self.end_token)
        return finished, self.embedding_fn(sample_ids), states


class SampleEmbeddingHelper(GreedyEmbeddingHelper):
    """Like GreedyEmbeddingHelper, but the id is drawn from softmax(outputs / temperature)."""

    def __init__(self, embedding_fn, start_tokens, end_token, softmax_temperature=None,
                 seed=None):
        super().__init__(embedding_fn, start_tokens, end_token)
        self.softmax_temperature = (None if softmax_temperature is None else
                                    fill_constant([1], "float32", softmax_temperature))
        self.seed = seed

    def sample(self, time, outputs, states):
        logits = outputs if self.softmax_temperature is None else \
            outputs / self.softmax_temperature
        probs = nn.softmax(logits)
        probs.stop_gradient = True
        return sampling_id(probs, seed=self.seed or 0, dtype=self.start_tokens.dtype)


class BasicDecoder(Decoder):
    """cell (then output_fn) makes the step's outputs; the helper samples ids from them and
    says what the next inputs are and which sequences are finished."""

    OutputWrapper = collections.namedtuple("OutputWrapper", ("cell_outputs", "sample_ids"))

    def __init__(self, cell, helper, output_fn=None):
        self.cell = cell
        self.helper = helper
        self.output_fn = output_fn

    def initialize(self, initial_cell_states):
        inputs, finished = self.helper.initialize()
        return inputs, initial_cell_states, finished

    def step(self, time, inputs, states, **kwargs):
        cell_outputs, cell_states = self.cell(inputs, states, **kwargs)
        if self.output_fn is not None:
            cell_outputs = self.output_fn(cell_outputs)
        sample_ids = self.helper.sample(time=time, outputs=cell_outputs, states=cell_states)
        sample_ids.stop_gradient = True
        finished, next_inputs, next_states = self.helper.next_inputs(
            time=time, outputs=cell_outputs, states=cell_states, sample_ids=sample_ids)
        return self.OutputWrapper(cell_outputs, sample_ids), next_states, next_inputs, finished


class BeamSearchDecoder(Decoder):
    """Beam search over a cell whose outputs (after output_fn) are logits [*, V]: each batch
    entry keeps beam_size hypotheses, scored by their summed log-probabilities; a finished
    hypothesis only extends with end_token at no cost. Step outputs: (scores, predicted_ids,
    parent_ids) [B, beam]; finalize backtracks the ids through the parents (gather_tree)."""

    OutputWrapper = collections.namedtuple("OutputWrapper",
                                           ("scores", "predicted_ids", "parent_ids"))
    StateWrapper = collections.namedtuple("StateWrapper",
                                          ("cell_states", "log_probs", "finished", "lengths"))
    kinf = 1e9

    def __init__(self, cell, start_token, end_token, beam_size, embedding_fn=None,
                 output_fn=None):
        self.cell = cell
        self.embedding_fn = embedding_fn
        self.output_fn = output_fn
        self.start_token = start_token
        self.end_token = end_token
        self.beam_size = beam_size

    @staticmethod
    def tile_beam_merge_with_batch(x, beam_size):
        """x [B, ...] -> [B * beam_size, ...], each entry repeated beam_size times in a row."""
        if not isinstance(x, Variable):
            raise TypeError(f"BeamSearchDecoder.tile_beam_merge_with_batch: x must be a "
                            f"Variable, got {type(x)}")
        rank = len(x.shape) + 1
        x = expand(unsqueeze(x, [1]), [1, beam_size] + [1] * (rank - 2))
        # batch and beam moved last, merged there (the other dims, maybe unknown, kept by 0)
        x = transpose(x, list(range(2, rank)) + [0, 1])
        x = reshape(x, [0] * (rank - 2) + [-1])
        return transpose(x, [rank - 2] + list(range(rank - 2)))

    def _split_batch_beams(self, x):
        return reshape(x, [-1, self.beam_size] + list(x.shape[1:]))

    def _merge_batch_beams(self, x):
        return reshape(x, [-1] + list(x.shape[2:]))

    def _expand_to_beam_size(self, x):
        return expand(unsqueeze(x, [1]), [1, self.beam_size] + [1] * (len(x.shape) - 1))

    def _gather(self, x, indices):
        """x[b, indices[b, k]] for each batch entry b and beam k."""
        rows = range_(0, self.batch_size, 1, indices.dtype)
        rows = expand(unsqueeze(rows, [1]), [1, self.beam_size])
        coordinates = stack([rows, indices], axis=2)
        coordinates.stop_gradient = True
        return gather_nd(x, coordinates)

    def initialize(self, initial_cell_states):
        state = flatten(initial_cell_states)[0]
        self.batch_size = shape_of(state)[0]
        self.end_token_tensor = fill_constant([1], "int64", self.end_token)
        cell_states = map_structure(self._expand_to_beam_size, initial_cell_states)
        ids = fill_constant_batch_size_like(state, [-1, self.beam_size], "int64",
                                            self.start_token)
        first_beam = np.array([[0.0] + [-self.kinf] * (self.beam_size - 1)], "float32")
        log_probs = nn.elementwise_add(
            fill_constant_batch_size_like(state, [-1, self.beam_size], "float32", 0.0),
            assign(first_beam))
        finished = fill_constant_batch_size_like(state, [-1, self.beam_size], "bool", False)
        lengths = fill_constant_batch_size_like(state, [-1, self.beam_size], "int64", 0)
        inputs = self.embedding_fn(ids) if self.embedding_fn else ids
        return inputs, self.StateWrapper(cell_states, log_probs, finished, lengths), finished

    def _mask_probs(self, log_probs, finished):
        """A finished hypothesis may only emit end_token, at log-probability 0."""
        vocab = log_probs.shape[-1]
        noend = np.full([vocab], -self.kinf, "float32")
        noend[self.end_token] = 0.0
        done = cast(finished, log_probs.dtype)
        kept = nn.elementwise_mul(log_probs, 1.0 - done, axis=0)
        return kept + nn.elementwise_mul(expand(unsqueeze(done, [2]), [1, 1, vocab]),
                                         assign(noend), axis=-1)

    def _beam_search_step(self, logits, next_cell_states, beam_state):
        vocab = logits.shape[-1]
        vocab_tensor = fill_constant([1], "int64", vocab)
        step_log_probs = self._mask_probs(log(nn.softmax(logits)), beam_state.finished)
        log_probs = nn.elementwise_add(step_log_probs, beam_state.log_probs, axis=0)
        flat = reshape(log_probs, [-1, self.beam_size * vocab])
        scores, indices = topk(flat, k=self.beam_size)
        beams = elementwise_floordiv(indices, vocab_tensor)
        tokens = elementwise_mod(indices, vocab_tensor)
        next_log_probs = self._gather(flat, indices)
        next_cell_states = map_structure(lambda x: self._gather(x, beams), next_cell_states)
        finished = self._gather(beam_state.finished, beams)
        lengths = self._gather(beam_state.lengths, beams)
        lengths = lengths + cast(logical_not(finished), lengths.dtype)
        finished = logical_or(finished, equal(tokens, self.end_token_tensor))
        return (self.OutputWrapper(scores, tokens, beams),
                self.StateWrapper(next_cell_states, next_log_probs, finished, lengths))

    def step(self, time, inputs, states, **kwargs):
        inputs = map_structure(self._merge_batch_beams, inputs)
        cell_states = map_structure(self._merge_batch_beams, states.cell_states)
        cell_outputs, next_cell_states = self.cell(inputs, cell_states, **kwargs)
        cell_outputs = map_structure(self._split_batch_beams, cell_outputs)
        next_cell_states = map_structure(self._split_batch_beams, next_cell_states)
        if self.output_fn is not None:
            cell_outputs = self.output_fn(cell_outputs)
        output, state = self._beam_search_step(cell_outputs, next_cell_states, states)
        ids = output.predicted_ids
        ids.stop_gradient = True
        next_inputs = self.embedding_fn(ids) if self.embedding_fn else ids
        return output, state, next_inputs, state.finished

    def finalize(self, outputs, final_states, sequence_lengths):
        return gather_tree(outputs.predicted_ids, outputs.parent_ids), final_states


# --- the loop -----------------------------------------------------------------------------------
def _keep_if_finished(state, new_state, finished):
    """state where finished [B] is true, else new_state (bool states compared as floats)."""
    dtype = state.dtype
    if dtype.name == "bool":
        state, new_state = cast(state, "float32"), cast(new_state, "float32")
    mask = cast(finished, state.dtype)
    mask.stop_gradient = True
    kept = nn.elementwise_mul(state, mask, axis=0) + \
        nn.elementwise_mul(new_state, 1.0 - mask, axis=0)
    return cast(kept, dtype) if dtype.name == "bool" else kept


def _copy(x):
    out = assign(x)
    out.stop_gradient = x.stop_gradient
    return out


def dynamic_decode(decoder, inits=None, max_step_num=None, output_time_major=False,
                   impute_finished=False, is_test=False, return_length=False, **kwargs):
    """Decode with `decoder` until all sequences finish, or max_step_num + 1 steps at most;
    kwargs go to decoder.step. Returns (outputs, final_states), with sequence_lengths [B]
    (int64) after them when return_length. outputs: the step outputs stacked over time,
    batch-major unless output_time_major (after decoder.finalize when it has one)."""
    initial_inputs, initial_states, initial_finished = decoder.initialize(inits)
    program = LayerHelper("dynamic_decode").main_program
    inputs = [_copy(x) for x in flatten(initial_inputs)]
    states = [_copy(x) for x in flatten(initial_states)]
    finished = assign(initial_finished)
    finished.stop_gradient = True
    lengths = cast(cast(initial_finished, "int64") * 0, "int64")
    lengths.stop_gradient = True
    step = fill_constant([1], "int64", 0)
    limit = None if max_step_num is None else fill_constant([1], "int64", max_step_num)
    cond = logical_not(reduce_all(initial_finished))
    loop = While(cond, is_test=is_test)
    with loop.block():
        state_struct = pack_sequence_as(initial_states, states)
        outputs, next_states, next_inputs, next_finished = decoder.step(
            step, pack_sequence_as(initial_inputs, inputs), state_struct, **kwargs)
        next_finished = logical_or(next_finished, finished)
        next_lengths = nn.elementwise_add(lengths, cast(logical_not(finished), "int64"))
        if impute_finished:
            next_states = map_structure(lambda s, n: _keep_if_finished(s, n, finished),
                                        state_struct, next_states)
        arrays = [_write_step(program, o, step) for o in flatten(outputs)]
        increment(step)
        assign(next_finished, finished)
        assign(next_lengths, lengths)
        for new, var in zip(flatten(next_inputs), inputs):
            assign(new, var)
        for new, var in zip(flatten(next_states), states):
            assign(new, var)
        going = logical_not(reduce_all(finished))
        if limit is None:
            assign(going, cond)
        else:
            logical_and(going, less_equal(step, limit), out=cond)
    final_outputs = pack_sequence_as(
        outputs, [_stacked(a, o) for a, o in zip(arrays, flatten(outputs))])
    final_states = pack_sequence_as(initial_states, states)
    try:
        final_outputs, final_states = decoder.finalize(final_outputs, final_states, lengths)
    except NotImplementedError:
        pass
    if not output_time_major:
        final_outputs = map_structure(
            lambda x: transpose(x, [1, 0] + list(range(2, len(x.shape)))), final_outputs)
    return (final_outputs, final_states, lengths) if return_length else \
        (final_outputs, final_states)

