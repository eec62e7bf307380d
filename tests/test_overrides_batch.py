"""PADDLETUNE_OVERRIDES' reader.batch_size for loaders fed whole batches by the script
(runtime/overrides.py, runtime/reader/regroup.py): set_sample_list_generator's lists and
set_batch_generator's batches regrouped to the requested size (the same samples, in order,
only grouped differently), drop_last, batches that cannot be regrouped recorded as no effect
with why, worker processes, and the record of the script's own size (`was`); and the tuning
space's batch_size knob for such jobs."""

import json
import subprocess
import sys
from dataclasses import asdict

import numpy as np
import pytest

import runtime as fluid
from runtime import overrides
from runtime.tensor import LoDTensor

from paddletune.profile.figures import DimFigures, ShapeFigures
from paddletune.tune import space as sp
from test_tune import fake_profile


@pytest.fixture
def env(monkeypatch):
    """Set reader.batch_size (None: no override) for one test; forget what was applied."""
    overrides.reset()

    def set_(batch_size):
        if batch_size is None:
            monkeypatch.delenv(overrides.ENV, raising=False)
        else:
            monkeypatch.setenv(overrides.ENV, json.dumps({"reader": {"batch_size": batch_size}}))
    yield set_
    monkeypatch.delenv(overrides.ENV, raising=False)
    overrides.requested()
    overrides.reset()


N = 10  # samples: sample i is x = [i, i], y = [i]


def _loader(x_shape=(None, 2), **kwargs):
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        x = fluid.data("x", list(x_shape))
        y = fluid.data("y", [None, 1], dtype="int64")
        return fluid.io.DataLoader.from_generator(feed_list=[x, y], capacity=4,
                                                  return_list=True, **kwargs)


def _samples():
    for i in range(N):
        yield np.full(2, i, "float32"), np.array([i], "int64")


def _batches(size, n=N):
    """The script's own batches of `size` rows (a final partial one)."""
    def reader():
        for start in range(0, n, size):
            ids = np.arange(start, min(start + size, n))
            yield [np.repeat(ids[:, None], 2, axis=1).astype("float32"),
                   ids[:, None].astype("int64")]
    return reader


def _ids(loader):
    """The samples of one pass, as the ids in each batch (x and y must agree)."""
    out = []
    for x, y in loader():
        assert x.shape[0] == y.shape[0] and (x[:, 0] == y[:, 0]).all()
        out.append(y[:, 0].tolist())
    return out


def _grouped(size, n=N, drop_last=False):
    groups = [list(range(s, min(s + size, n))) for s in range(0, n, size)]
    return [g for g in groups if len(g) == size] if drop_last else groups


def _batch_size_records():
    applied = [a for a in overrides.applied() if a["key"] == "batch_size"]
    skipped = [s for s in overrides.skipped() if s["key"] == "batch_size"]
    return applied, skipped


def _applied(value, was):
    return [{"section": "reader", "key": "batch_size", "value": value, "was": was}]


# --- set_sample_list_generator -----------------------------------------------------------------
@pytest.mark.parametrize("size", [4, 2])
def test_sample_lists_are_regrouped_keeping_the_samples_and_their_order(env, size):
    """A reader not made by paddle.batch itself (here wrapped by buffered): its lists are
    flattened and re-chunked, a final partial one kept; `was` is the first list's size."""
    env(size)
    loader = _loader()
    loader.set_sample_list_generator(fluid.io.buffered(fluid.io.batch(_samples, 3), 2))
    assert loader.config()["batch_size"] == size
    assert _batch_size_records() == ([], [])  # the script's size is known at its first list
    assert _ids(loader) == _grouped(size)
    assert _batch_size_records() == (_applied(size, 3), [])


@pytest.mark.parametrize("drop_last", [True, False])
def test_paddle_batch_is_rebatched_with_its_own_drop_last(env, drop_last):
    """paddle.batch's own reader is re-batched from its samples with its drop_last, and its
    batch_size is `was` at once (also what config() reports without an override)."""
    env(None)
    reader = fluid.io.batch(_samples, 3, drop_last=drop_last)
    plain = _loader()
    plain.set_sample_list_generator(reader)
    assert plain.config()["batch_size"] == 3
    assert _ids(plain) == _grouped(3, drop_last=drop_last)
    env(4)
    loader = _loader()
    loader.set_sample_list_generator(reader)
    assert _batch_size_records() == (_applied(4, 3), [])  # before any batch
    assert loader.config()["batch_size"] == 4
    assert _ids(loader) == _grouped(4, drop_last=drop_last)  # 10 samples: 8 or 10 of them
    assert _batch_size_records() == (_applied(4, 3), [])


def test_the_override_is_applied_once_not_by_paddle_batch_too(env):
    """paddle.batch outside a loader is the script's own (an eval loop, DataFeeder)."""
    env(4)
    assert [len(b) for b in fluid.io.batch(_samples, 3)()] == [3, 3, 3, 1]
    loader = _loader()
    loader.set_sample_list_generator(fluid.io.batch(_samples, 3))
    assert [len(b) for b in _ids(loader)] == [4, 4, 2]  # regrouped once, not 4-of-4s of 3s


def test_the_scripts_own_size_is_no_effect_and_unchanged(env):
    env(3)
    loader = _loader()
    loader.set_sample_list_generator(fluid.io.batch(_samples, 3))
    assert _ids(loader) == _grouped(3)
    applied, [skipped] = _batch_size_records()
    assert applied == [] and skipped["why"] == "the script's own value is 3 already"


# --- set_batch_generator -----------------------------------------------------------------------
@pytest.mark.parametrize("size", [5, 2, 4])
def test_whole_batches_are_regrouped_along_the_first_axis(env, size):
    env(size)
    loader = _loader()
    loader.set_batch_generator(_batches(3))
    assert loader.config()["batch_size"] == size
    assert _batch_size_records() == ([], [])  # `was` is the first batch's first dimension
    assert _ids(loader) == _grouped(size)
    assert _batch_size_records() == (_applied(size, 3), [])


def test_whole_batches_as_dicts_and_lists_are_regrouped(env):
    env(6)

    def reader():
        for batch in _batches(4)():
            yield {"x": batch[0], "y": batch[1].tolist()}  # a dict, a nested list
    loader = _loader()
    loader.set_batch_generator(reader)
    assert _ids(loader) == _grouped(6)
    assert _batch_size_records() == (_applied(6, 4), [])


def test_ragged_slots_keep_the_scripts_batches_and_say_why(env):
    """Slots with different first dimensions (a per-batch value, not one row per sample)."""
    env(4)

    def reader():
        for x, y in _batches(3)():
            yield [x, y[:1]]
    loader = _loader()
    loader.set_batch_generator(reader)
    assert [len(y) for _, y in loader()] == [1, 1, 1, 1]  # the script's batches
    applied, [skipped] = _batch_size_records()
    assert applied == []
    assert skipped["value"] == 4
    assert "keeps the script's batches (set_batch_generator)" in skipped["why"]
    assert "different first dimensions (x: 3, y: 1)" in skipped["why"]


def test_a_lod_tensor_keeps_the_scripts_batches_and_says_why(env):
    env(4)

    def reader():
        for x, y in _batches(3)():
            t = LoDTensor()
            t.set(x, fluid.CPUPlace())
            t.set_recursive_sequence_lengths([[1, 2]])
            yield [t, y]
    loader = _loader()
    loader.set_batch_generator(reader)
    assert _ids(loader) == _grouped(3)
    applied, [skipped] = _batch_size_records()
    assert applied == [] and "slot 'x' is a LoDTensor with a LoD" in skipped["why"]


def test_a_lod_level_or_a_fixed_first_dimension_is_known_at_once(env):
    env(4)
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        words = fluid.data("words", [None, 1], dtype="int64", lod_level=1)
        lod = fluid.io.DataLoader.from_generator(feed_list=[words], capacity=2)
    lod.set_batch_generator(lambda: iter(()))
    fixed = _loader(x_shape=(3, 2))
    fixed.set_sample_list_generator(fluid.io.batch(_samples, 3))
    applied, skipped = _batch_size_records()
    assert applied == [] and len(skipped) == 2
    assert "'words', a LoD tensor (lod_level=1)" in skipped[0]["why"]
    assert "'x', whose first dimension is fixed (shape [3, 2])" in skipped[1]["why"]
    assert fixed.config()["batch_size"] == 3  # the script's own, untouched


def test_shapes_changing_mid_pass_take_the_override_back(env):
    """Padded batches whose length differs: regrouping stops at the first batch it cannot
    join, every sample still comes, and the override is no effect, not applied."""
    env(4)

    def reader():
        for k, (x, y) in enumerate(_batches(3)()):
            yield [np.repeat(x, 1 + (k >= 2), axis=1), y]  # x: 2 columns, then 4
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        x = fluid.data("x", [None, None])
        y = fluid.data("y", [None, 1], dtype="int64")
        loader = fluid.io.DataLoader.from_generator(feed_list=[x, y], capacity=4,
                                                    return_list=True)
    loader.set_batch_generator(reader)
    assert [y[:, 0].tolist() for _, y in loader()] == [[0, 1, 2, 3], [4, 5], [6, 7, 8], [9]]
    applied, [skipped] = _batch_size_records()
    assert applied == []
    assert "keeps the script's batches from batch 2 on" in skipped["why"]
    assert "slot 'x' is float32 [4] per row where the batches before were float32 [2]" in \
        skipped["why"]


# --- worker processes ----------------------------------------------------------------------------
def _sharded_batches(size):
    """A batch generator that shards itself: worker i makes batches i, i + n, ..."""
    whole = _batches(size)

    def reader():
        info = fluid.io.get_worker_info()
        me, n = (info.id, info.num_workers) if info is not None else (0, 1)
        for k, batch in enumerate(whole()):
            if k % n == me:
                yield batch
    return reader


def _sharded_samples():
    info = fluid.io.get_worker_info()
    me, n = (info.id, info.num_workers) if info is not None else (0, 1)
    for k, sample in enumerate(_samples()):
        if k % n == me:
            yield sample


@pytest.mark.parametrize("kind, groups, was", [
    # worker 0 makes batches [0 1] [4 5] [8 9], worker 1 [2 3] [6 7]
    ("batch", [[0, 1, 4, 5], [2, 3, 6, 7], [8, 9]], 2),
    # worker 0 has samples 0 2 4 6 8 in lists of 3, worker 1 samples 1 3 5 7 9
    ("sample_list", [[0, 2, 4, 6], [1, 3, 5, 7], [8], [9]], 3)])
def test_worker_processes_regroup_and_the_trainer_records_was(env, kind, groups, was):
    """With num_workers=2 each worker regroups its own share of a generator that shards
    itself (as it batches a sharded sample generator): the same samples, each batch from one
    worker, taken in turn; the records made in the workers reach the trainer."""
    env(4)
    loader = _loader(num_workers=2)
    if kind == "batch":
        loader.set_batch_generator(_sharded_batches(2))
    else:
        loader.set_sample_list_generator(fluid.io.buffered(fluid.io.batch(_sharded_samples, 3),
                                                           2))
    assert _ids(loader) == groups
    assert sorted(sum(groups, [])) == list(range(N))
    assert _batch_size_records() == (_applied(4, was), [])
    assert _ids(loader) == groups  # a second pass (new workers) is the same, recorded once
    assert _batch_size_records() == (_applied(4, was), [])


def test_unsharded_worker_generators_keep_the_single_process_grouping(env):
    """A generator that does not shard itself runs whole in every worker, which keeps one
    regrouped batch in N: exactly the single-process order."""
    env(4)
    loader = _loader(num_workers=2)
    loader.set_batch_generator(_batches(3))
    with pytest.warns(RuntimeWarning, match="does not shard itself"):
        assert _ids(loader) == _grouped(4)
    assert _batch_size_records() == (_applied(4, 3), [])


def test_worker_processes_report_no_effect_too(env):
    env(4)

    def reader():
        info = fluid.io.get_worker_info()
        for k, (x, y) in enumerate(_batches(3)()):
            if k % info.num_workers == info.id:
                yield [x, y[:1]]
    loader = _loader(num_workers=2)
    loader.set_batch_generator(reader)
    assert len(list(loader())) == 4
    applied, [skipped] = _batch_size_records()
    assert applied == [] and "different first dimensions" in skipped["why"]


# --- the profile ---------------------------------------------------------------------------------
BATCH_JOB = '''
import numpy as np
import runtime as fluid
main, startup = fluid.Program(), fluid.Program()
with fluid.program_guard(main, startup):
    x = fluid.data("x", [None, 2])
    loss = fluid.layers.mean(fluid.layers.fc(x, 1))
    fluid.optimizer.SGD(0.1).minimize(loss)
    loader = fluid.io.DataLoader.from_generator(feed_list=[x], capacity=2,
                                                num_workers=WORKERS)
def batches():
    for i in range(32):
        yield [np.full((6, 2), i, "float32")]
loader.set_batch_generator(batches)
exe = fluid.Executor(fluid.CPUPlace())
exe.run(startup)
for data in loader():
    exe.run(main, feed=data, fetch_list=[loss])
'''


@pytest.mark.parametrize("workers", [0, 2])
def test_profile_records_was_from_the_first_batch(tmp_path, workers):
    from paddletune.profile import load
    import os
    script = tmp_path / "job.py"
    script.write_text(f"WORKERS = {workers}\n" + BATCH_JOB)
    out = tmp_path / "p.jsonl"
    value = '{"reader":{"batch_size":16}}'
    plain = {k: v for k, v in os.environ.items() if k != overrides.ENV}
    run = subprocess.run([sys.executable, "-m", "paddletune", "profile", "--quiet", "-o",
                          str(out), str(script)], env={**plain, overrides.ENV: value},
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    profile = load(out)
    [event] = profile.events_of("overrides")
    assert [asdict(a) for a in event.applied] == _applied(16, 6)
    assert event.skipped == ()
    assert "batch_size=16 (was 6)" in event.message
    assert profile.summary.throughput.batch_size == 16


# --- the tuning space ----------------------------------------------------------------------------
def _profile(source, batch=None, shapes=None):
    return fake_profile(source=source, batch=batch, shapes=shapes, blas="OpenBLAS", flags={})


def _shape(*dims, varying=()):
    return ShapeFigures(batches=10, rank_varies=False, shape=tuple(dims),
                        varying=tuple(DimFigures(**row) for row in varying))


def test_space_tunes_the_batch_size_of_sample_list_jobs():
    space = sp.build_space(_profile("sample_list", batch=32))  # paddle.batch's own size
    knob = space.knobs["batch_size"]
    assert knob.current == 32 and "regroups the script's lists" in knob.why
    code = sp.code_lines({"batch_size": 64}, space)
    assert code == ["paddle.batch(reader, batch_size=64)  # was 32; scale the learning rate "
                    "too"]
    seen = sp.build_space(_profile("sample_list", shapes={"x": _shape(
        None, 2, varying=[{"dim": 0, "min": 4, "p50": 16, "p95": 16, "max": 16}])}))
    assert seen.knobs["batch_size"].current == 16  # the batches seen (a final partial one)
    unseen = sp.build_space(_profile("sample_list"))
    assert "batch_size" not in unseen
    assert any("set_sample_list_generator" in n and "shows no batch" in n
               for n in unseen.notes)


def test_space_tunes_the_batch_size_of_batch_jobs_whose_batches_regroup():
    space = sp.build_space(_profile("batch", shapes={"x": _shape(8, 2), "y": _shape(8, 1)}))
    assert space.knobs["batch_size"].current == 8
    assert "regroups the script's batches" in space.knobs["batch_size"].why
    assert sp.code_lines({"batch_size": 16}, space)[0].startswith(
        "yield batches of 16 from the batch generator")
    for shapes, why in [
            ({"x": _shape(8, 2), "y": _shape(1)}, "different first dimensions"),
            ({"x": _shape(8, None, varying=[{"dim": 1, "min": 3, "p50": 5, "p95": 9,
                                            "max": 9}])}, "changes shape from batch"),
            ({"x": _shape()}, "no fixed rank with a first axis"),
            (None, "no shapes of its batches")]:
        space = sp.build_space(_profile("batch", batch=8, shapes=shapes))
        assert "batch_size" not in space
        [note] = [n for n in space.notes if n.startswith("batch size not tunable")]
        assert "set_batch_generator" in note and why in note
