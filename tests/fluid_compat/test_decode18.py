"""Fluid 1.8's decoding API (layers.dynamic_decode, BasicDecoder with its helpers,
BeamSearchDecoder, gather_tree) against NumPy re-statements of Paddle 1.8's rules: the loop
runs until every sequence is finished or max_step_num + 1 steps; a sequence's length counts
the steps before it finished (its end token included); a finished beam only extends with the
end token at no cost; the ids are backtracked through the parent beams."""

import numpy as np

import runtime as fluid
from runtime import layers
from runtime.initializer import NumpyArrayInitializer

V, B, START, END = 5, 3, 0, 1
R = np.random.default_rng(7)
WX, WH, EMB = R.normal(0, 1.5, (V, V)), R.normal(0, 1.5, (V, V)), R.normal(0, 1.0, (V, V))


class TanhCell(layers.RNNCell):
    """h' = tanh(x @ WX + h @ WH); the output is h' (used as the logits)."""

    def call(self, inputs, states):
        h = layers.fc([inputs, states], size=V, act="tanh", bias_attr=False,
                      param_attr=[fluid.ParamAttr(initializer=NumpyArrayInitializer(WX)),
                                  fluid.ParamAttr(initializer=NumpyArrayInitializer(WH))])
        return h, h

    @property
    def state_shape(self):
        return [V]


def _embed(ids):
    return fluid.embedding(ids, size=[V, V], dtype="float64",
                           param_attr=fluid.ParamAttr(initializer=NumpyArrayInitializer(EMB)))


def _run(build):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        fetch = build()
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    exe.run(startup, scope=scope)
    return exe.run(main, feed={"h0": np.zeros((B, V))}, fetch_list=fetch, scope=scope)


def _cell(x, h):
    return np.tanh(x @ WX + h @ WH)


def test_greedy_decode_matches_numpy_loop():
    max_step = 4

    def build():
        h0 = fluid.data("h0", [B, V], "float64")
        start = layers.fill_constant_batch_size_like(h0, [-1], "int64", START)
        helper = layers.GreedyEmbeddingHelper(_embed, start, END)
        decoder = layers.BasicDecoder(TanhCell(), helper)
        out, state, lengths = layers.dynamic_decode(decoder, inits=h0, max_step_num=max_step,
                                                    return_length=True)
        return [out.cell_outputs, out.sample_ids, state, lengths]

    logits, ids, state, lengths = _run(build)
    x, h = np.repeat(EMB[[START]], B, 0), np.zeros((B, V))
    finished, count, want_ids, want_logits = np.zeros(B, bool), np.zeros(B, int), [], []
    for _ in range(max_step + 1):
        h = _cell(x, h)
        step_ids = h.argmax(-1)
        count += ~finished
        finished = finished | (step_ids == END)
        want_ids.append(step_ids)
        want_logits.append(h)
        x = EMB[step_ids]
        if finished.all():
            break
    np.testing.assert_array_equal(ids, np.stack(want_ids, 1))  # batch-major [B, T]
    np.testing.assert_allclose(logits, np.stack(want_logits, 1), rtol=1e-10)
    np.testing.assert_allclose(state, h, rtol=1e-10)
    np.testing.assert_array_equal(lengths, count)
    assert lengths.dtype == np.int64


def _log_softmax(z):
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def test_beam_search_matches_numpy_beam_search():
    beam, max_step = 3, 5

    def build():
        h0 = fluid.data("h0", [B, V], "float64")
        decoder = layers.BeamSearchDecoder(TanhCell(), START, END, beam, embedding_fn=_embed)
        out, state = layers.dynamic_decode(decoder, inits=h0, max_step_num=max_step,
                                           is_test=True)
        return [out, state.lengths, state.finished]

    ids, lengths, finished_out = _run(build)
    h = np.zeros((B, beam, V))
    log_probs = np.tile([0.0] + [-1e9] * (beam - 1), (B, 1))
    finished, count = np.zeros((B, beam), bool), np.zeros((B, beam), int)
    tokens = np.full((B, beam), START)
    steps, parents = [], []
    rows = np.arange(B)[:, None]
    noend = np.full(V, -1e9)
    noend[END] = 0.0
    for _ in range(max_step + 1):
        h_new = _cell(EMB[tokens], h)
        logp = np.where(finished[..., None], noend, _log_softmax(h_new))
        total = (logp + log_probs[..., None]).reshape(B, beam * V)
        top = np.argsort(-total, axis=1, kind="stable")[:, :beam]
        parent, tokens = top // V, top % V
        log_probs = total[rows, top]
        h = h_new[rows, parent]
        finished, count = finished[rows, parent], count[rows, parent]
        count = count + ~finished
        finished = finished | (tokens == END)
        steps.append(tokens)
        parents.append(parent)
        if finished.all():
            break
    # gather_tree, written out: follow each final beam back through its parents
    paths = np.empty((len(steps), B, beam), int)
    for b in range(B):
        for k in range(beam):
            at = k
            for t in range(len(steps) - 1, -1, -1):
                paths[t, b, k] = steps[t][b, at]
                at = parents[t][b, at]
    np.testing.assert_array_equal(ids, paths.transpose(1, 0, 2))  # [B, T, beam]
    np.testing.assert_array_equal(lengths, count)
    np.testing.assert_array_equal(finished_out, finished)


def test_tile_beam_merge_with_batch_repeats_each_entry():
    x = np.arange(12, dtype="float32").reshape(2, 3, 2)

    def build():
        xv = fluid.data("x", [2, -1, 2], "float32")
        return [layers.BeamSearchDecoder.tile_beam_merge_with_batch(xv, 3)]

    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        fetch = build()
    out, = fluid.Executor(fluid.CPUPlace()).run(main, feed={"x": x}, fetch_list=fetch)
    np.testing.assert_array_equal(out, np.repeat(x, 3, axis=0))


def test_training_helper_feeds_targets_and_is_differentiable():
    from opcheck import check_program_gradient
    trg = R.normal(0, 1, (B, 4, V))
    trg_len = np.array([4, 2, 1], "int64")

    def build():
        h0 = fluid.data("h0", [B, V], "float64")
        h0.stop_gradient = False
        x = fluid.data("x", [B, 4, V], "float64")
        x.stop_gradient = False
        length = fluid.data("len", [B], "int64")
        helper = layers.TrainingHelper(x, length)
        out, _ = layers.dynamic_decode(layers.BasicDecoder(TanhCell(), helper), inits=h0,
                                       impute_finished=True)
        return layers.reduce_sum(out.cell_outputs * out.cell_outputs), out.cell_outputs

    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        _, outputs = build()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    h0 = R.normal(0, 1, (B, V))
    got, = exe.run(main, feed={"h0": h0, "x": trg, "len": trg_len}, fetch_list=[outputs])
    # teacher forcing: step t reads x[:, t]; it runs until the longest sequence ends; with
    # impute_finished a finished sequence (length <= t) keeps its state, its outputs go on
    h, want = h0, []
    for t in range(4):
        out = _cell(trg[:, t], h)
        h = np.where((trg_len <= t)[:, None], h, out)
        want.append(out)
    np.testing.assert_allclose(got, np.stack(want, 1), rtol=1e-10)
    check_program_gradient(lambda: build()[0],
                           {"h0": h0, "x": trg, "len": trg_len}, ["h0", "x"])


def test_cross_entropy_labels_without_trailing_one():
    """Fluid 1.8's cross_entropy2 takes hard labels of rank(X) - 1 (the policy-gradient loss
    of a decoder: probs [B, T, V], sampled ids [B, T]); the loss is then shaped [B, T]."""
    probs = R.dirichlet(np.ones(V), size=(2, 3))
    ids = R.integers(0, V, (2, 3))

    def build():
        p = fluid.data("p", [2, 3, V], "float64")
        label = fluid.data("ids", [2, 3], "int64")
        return [layers.cross_entropy(p, label)]

    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        fetch = build()
    loss, = fluid.Executor(fluid.CPUPlace()).run(main, feed={"p": probs, "ids": ids},
                                                 fetch_list=fetch)
    assert loss.shape == (2, 3)
    np.testing.assert_allclose(loss, -np.log(np.take_along_axis(probs, ids[..., None], -1))[..., 0])
