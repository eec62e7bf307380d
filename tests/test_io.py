"""fluid.io save/load: round trips (per-variable files and a single file), atomic writes, and
the SerializationError messages for every way a load can go wrong."""

import json
import os
import zipfile

import numpy as np
import pytest

import runtime as fluid
import runtime.io as fio
from runtime.errors import SerializationError, UninitializedVariableError

MANIFEST = "__manifest__.json"


def build(hidden=8, classes=3, extra_layer=False):
    """A small classifier trained with Momentum (so it has optimizer state)."""
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 5
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.data("x", [None, 5])
        y = fluid.data("y", [None, 1], dtype="int64")
        h = fluid.layers.fc(x, hidden, act="relu")
        if extra_layer:
            h = fluid.layers.fc(h, hidden, act="relu")
        logits = fluid.layers.fc(h, classes)
        test_program = main.clone(for_test=True)
        loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(logits, y))
        fluid.optimizer.Momentum(0.1, 0.9).minimize(loss)
    return main, startup, test_program, logits, loss


def batch_data():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(6, 5)).astype(np.float32)
    return {"x": x, "y": (np.arange(6) % 3).reshape(-1, 1).astype(np.int64)}


def persistable_values(program, scope):
    return {v.name: np.array(scope.find_var(v.name).value)
            for v in program.global_block().vars.values() if fio.is_persistable(v)}


@pytest.fixture
def trained():
    """(exe, main, test_program, logits, loss, scope) after a few training steps."""
    main, startup, test_program, logits, loss = build()
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    with fluid.scope_guard(scope):
        exe.run(startup)
        for _ in range(3):
            exe.run(main, feed=batch_data(), fetch_list=[loss])
    return exe, main, test_program, logits, loss, scope


def save(trained, dirname, what="persistables", filename=None):
    exe, main, *_, scope = trained
    with fluid.scope_guard(scope):
        getattr(fluid.io, "save_" + what)(exe, str(dirname), main, filename=filename)


# --- round trips -----------------------------------------------------------------------------
@pytest.mark.parametrize("filename", [None, "model.npz"])
def test_round_trip_restores_predictions_and_optimizer_state(trained, tmp_path, filename):
    exe, main, test_program, logits, loss, scope = trained
    save(trained, tmp_path, filename=filename)
    fresh = fluid.Scope()
    with fluid.scope_guard(fresh):  # the startup program never ran in this scope
        fluid.io.load_persistables(exe, tmp_path, main, filename=filename)
    before, after = persistable_values(main, scope), persistable_values(main, fresh)
    assert before.keys() == after.keys() and any("velocity" in n for n in after)
    for name in before:
        np.testing.assert_array_equal(after[name], before[name])
        assert after[name].dtype == before[name].dtype
    feed = batch_data()
    pred = [exe.run(test_program, feed={"x": feed["x"]}, fetch_list=[logits], scope=s)[0]
            for s in (scope, fresh)]
    np.testing.assert_array_equal(pred[0], pred[1])
    steps = [exe.run(main, feed=feed, fetch_list=[loss], scope=s)[0] for s in (scope, fresh)]
    np.testing.assert_array_equal(steps[0], steps[1])  # same velocity -> same update
    for name, value in persistable_values(main, scope).items():
        np.testing.assert_array_equal(persistable_values(main, fresh)[name], value)


def test_directory_layout_is_npy_files_and_a_manifest(trained, tmp_path):
    save(trained, tmp_path)
    main = trained[1]
    names = {v.name for v in main.global_block().vars.values() if fio.is_persistable(v)}
    assert set(os.listdir(tmp_path)) == names | {MANIFEST}
    manifest = json.loads((tmp_path / MANIFEST).read_text())
    assert manifest["format"] == "paddletune-vars" and manifest["version"] == 1
    assert manifest["vars"]["fc_0.w_0"] == {"shape": [5, 8], "dtype": "float32"}
    array = np.load(tmp_path / "fc_0.w_0", allow_pickle=False)  # plain .npy, no pickle
    np.testing.assert_array_equal(array, np.array(trained[5].find_var("fc_0.w_0").value))


def test_single_file_is_an_npz_readable_by_numpy(trained, tmp_path):
    save(trained, tmp_path, filename="all.npz")
    assert os.listdir(tmp_path) == ["all.npz"]
    with np.load(tmp_path / "all.npz", allow_pickle=False) as npz:
        np.testing.assert_array_equal(npz["fc_1.b_0"],
                                      np.array(trained[5].find_var("fc_1.b_0").value))
    with zipfile.ZipFile(tmp_path / "all.npz") as zf:
        assert all(i.compress_type == zipfile.ZIP_STORED for i in zf.infolist())
        assert MANIFEST in zf.namelist()


def test_save_params_saves_only_parameters_and_load_params_restores_them(trained, tmp_path):
    exe, main, *_, scope = trained
    save(trained, tmp_path, what="params")
    assert set(os.listdir(tmp_path)) == {"fc_0.w_0", "fc_0.b_0", "fc_1.w_0", "fc_1.b_0",
                                         MANIFEST}
    fresh = fluid.Scope()
    with fluid.scope_guard(fresh):
        fluid.io.load_params(exe, tmp_path, main)
    assert fresh.find_var("fc_0.w_0_velocity_0") is None
    np.testing.assert_array_equal(fresh.find_var("fc_1.w_0").value,
                                  scope.find_var("fc_1.w_0").value)


def test_saving_twice_into_one_directory_merges_the_manifest(trained, tmp_path):
    exe, main, *_, scope = trained
    w = main.global_block().var("fc_0.w_0")
    with fluid.scope_guard(scope):
        fluid.io.save_vars(exe, tmp_path, main, vars=[w])
        fluid.io.save_vars(exe, tmp_path, main, vars=["fc_0.b_0"])
        fluid.io.load_vars(exe, tmp_path, main, vars=[w, "fc_0.b_0"])
    assert set(json.loads((tmp_path / MANIFEST).read_text())["vars"]) == {"fc_0.w_0",
                                                                          "fc_0.b_0"}


def test_defaults_are_the_default_main_program_and_global_scope(tmp_path):
    main, startup, _, _, _ = build()
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    with fluid.program_guard(main, startup), fluid.scope_guard(scope):
        exe.run(startup)
        fluid.io.save_persistables(exe, tmp_path)
        fluid.global_scope().find_var("fc_0.b_0").value = np.full(8, 7, np.float32)
        fluid.io.load_persistables(exe, tmp_path)
    assert not np.any(scope.find_var("fc_0.b_0").value == 7)


def test_predicate_and_variable_kinds(trained, tmp_path):
    exe, main, *_, scope = trained
    block = main.global_block()
    assert fio.is_parameter(block.var("fc_0.w_0"))
    assert not fio.is_parameter(block.var("fc_0.w_0_velocity_0"))
    assert fio.is_persistable(block.var("fc_0.w_0_velocity_0"))
    assert not fio.is_persistable(block.var("x"))
    reader = block.create_var(name="the_reader", type=fluid.core.VarDesc.VarType.READER,
                              persistable=True)
    assert not fio.is_persistable(reader)
    with fluid.scope_guard(scope):
        fluid.io.save_vars(exe, tmp_path, main, predicate=lambda v: v.name.endswith("b_0"))
    assert set(os.listdir(tmp_path)) == {"fc_0.b_0", "fc_1.b_0", MANIFEST}


def test_a_variable_name_that_is_not_a_file_name(tmp_path):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        var = main.global_block().create_var(name="scope/w", shape=[2], dtype="float32",
                                             persistable=True)
    exe, scope = fluid.Executor(), fluid.Scope()
    scope.var("scope/w").value = np.ones(2, np.float32)
    with fluid.scope_guard(scope):
        with pytest.raises(SerializationError, match=r"'scope/w' cannot be a file name.*"
                                                     r"filename="):
            fluid.io.save_vars(exe, tmp_path, main, vars=[var])
        fluid.io.save_vars(exe, tmp_path, main, vars=[var], filename="one.npz")
        fluid.io.load_vars(exe, tmp_path, main, vars=[var], filename="one.npz")


# --- atomic writes ---------------------------------------------------------------------------
def _fail_halfway(f, array):
    f.write(b"\x93NUMPY partial")
    raise OSError("disk full (simulated)")


@pytest.mark.parametrize("filename", [None, "model.npz"])
def test_a_failed_save_leaves_the_previous_files_intact(trained, tmp_path, monkeypatch,
                                                        filename):
    save(trained, tmp_path, filename=filename)
    before = {n: (tmp_path / n).read_bytes() for n in os.listdir(tmp_path)}
    trained[5].find_var("fc_0.w_0").value = np.zeros((5, 8), np.float32)
    monkeypatch.setattr(fio, "_write_npy", _fail_halfway)
    with pytest.raises(OSError, match="disk full"):
        save(trained, tmp_path, filename=filename)
    after = {n: (tmp_path / n).read_bytes() for n in os.listdir(tmp_path)}
    assert after == before  # same files, same bytes, no temporary files left behind
    monkeypatch.undo()
    fresh = fluid.Scope()
    with fluid.scope_guard(fresh):
        fluid.io.load_persistables(trained[0], tmp_path, trained[1], filename=filename)
    assert np.any(fresh.find_var("fc_0.w_0").value != 0)


def test_a_failed_rename_removes_the_temporary_file(trained, tmp_path, monkeypatch):
    def no_replace(src, dst):
        raise PermissionError("read-only (simulated)")
    monkeypatch.setattr(os, "replace", no_replace)
    with pytest.raises(PermissionError):
        save(trained, tmp_path)
    assert os.listdir(tmp_path) == []


# --- errors when saving ----------------------------------------------------------------------
def test_save_before_the_startup_program_ran_says_to_run_it(tmp_path):
    main, *_ = build()
    with fluid.scope_guard(fluid.Scope()):
        with pytest.raises(SerializationError, match=r"cannot save variable 'fc_0.w_0': it has "
                                                     r"no value.*startup program") as err:
            fluid.io.save_persistables(fluid.Executor(), tmp_path, main)
    assert isinstance(err.value, UninitializedVariableError)


def test_main_program_must_be_a_program(tmp_path):
    with pytest.raises(TypeError, match="main_program must be a fluid.Program"):
        fluid.io.save_persistables(fluid.Executor(), tmp_path, main_program="prog")


# --- errors when loading ---------------------------------------------------------------------
def load(trained, dirname, program=None, filename=None, what="persistables", scope=None):
    exe, main = trained[0], trained[1]
    with fluid.scope_guard(scope or fluid.Scope()):
        getattr(fluid.io, "load_" + what)(exe, str(dirname), program or main, filename=filename)


def test_missing_directory(trained, tmp_path):
    with pytest.raises(SerializationError, match=r"directory '.*nowhere' does not exist"):
        load(trained, tmp_path / "nowhere")


def test_missing_single_file_names_it_and_spots_the_other_layout(trained, tmp_path):
    with pytest.raises(SerializationError, match=r"file '.*model.npz' does not exist.*empty"):
        load(trained, tmp_path, filename="model.npz")
    save(trained, tmp_path)
    with pytest.raises(SerializationError, match=r"one file per variable.*load without "
                                                 r"filename="):
        load(trained, tmp_path, filename="model.npz")


def test_single_file_save_loaded_as_a_directory_says_to_pass_filename(trained, tmp_path):
    save(trained, tmp_path, filename="model.npz")
    with pytest.raises(SerializationError, match=r"load with filename='model.npz'"):
        load(trained, tmp_path)


@pytest.mark.parametrize("filename", [None, "model.npz"])
def test_a_variable_with_no_saved_value_lists_close_names(trained, tmp_path, filename):
    save(trained, tmp_path, filename=filename)
    bigger = build(extra_layer=True)[0]  # has fc_2.*, and fc_1.w_0 is [8, 8] now
    with pytest.raises(SerializationError, match=r"4 variable\(s\) of the program have no "
                                                 r"saved value.*'fc_2.w_0' \(closest saved: "
                                                 r"'fc_1.w_0'.*It holds 9 variable\(s\)"):
        load(trained, tmp_path, program=bigger, filename=filename)


def test_loading_persistables_from_a_params_save_suggests_load_params(trained, tmp_path):
    save(trained, tmp_path, what="params")
    with pytest.raises(SerializationError, match=r"velocity.*save_params.*load_params"):
        load(trained, tmp_path)


@pytest.mark.parametrize("filename", [None, "model.npz"])
def test_shape_mismatch_shows_both_shapes(trained, tmp_path, filename):
    save(trained, tmp_path, filename=filename)
    wider = build(hidden=16)[0]
    with pytest.raises(SerializationError, match=r"fc_0.w_0: saved shape \[5, 8\] does not "
                                                 r"match .* shape is \[5, 16\].*layer's size"):
        load(trained, tmp_path, program=wider, filename=filename)


def test_dtype_mismatch_shows_both_dtypes(tmp_path):
    exe = fluid.Executor()

    def program(dtype):
        main = fluid.Program()
        main.global_block().create_var(name="w", shape=[2, 3], dtype=dtype, persistable=True)
        return main
    scope = fluid.Scope()
    scope.var("w").value = np.ones((2, 3), np.float64)
    with fluid.scope_guard(scope):
        fluid.io.save_persistables(exe, tmp_path, program("float64"))
    with fluid.scope_guard(fluid.Scope()):
        with pytest.raises(SerializationError, match=r"saved dtype float64 does not match "
                                                     r"variable 'w'.*float32"):
            fluid.io.load_persistables(exe, tmp_path, program("float32"))


def test_a_failed_load_changes_nothing_in_the_scope(trained, tmp_path):
    save(trained, tmp_path)
    np.save(tmp_path / "zzz", np.zeros(1))  # unrelated files are ignored
    wider = build(hidden=16)[0]
    scope = fluid.Scope()
    with pytest.raises(SerializationError):
        load(trained, tmp_path, program=wider, scope=scope)
    assert all(scope.find_var(n) is None or scope.find_var(n).value is None
               for n in persistable_values(trained[1], trained[5]))


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty", "trailing"])
def test_a_corrupt_npy_file_is_named(trained, tmp_path, damage):
    save(trained, tmp_path)
    path = tmp_path / "fc_1.w_0"
    data = path.read_bytes()
    path.write_bytes({"truncate": data[:len(data) - 7], "garbage": b"not an array at all",
                      "empty": b"", "trailing": data + b"xx"}[damage])
    with pytest.raises(SerializationError, match=r"fc_1.w_0' .*(corrupt|truncated).*save it "
                                                 r"again"):
        load(trained, tmp_path)


def test_a_file_swapped_from_another_save_disagrees_with_the_manifest(trained, tmp_path):
    save(trained, tmp_path)
    np.save(tmp_path / "fc_1.b_0.npy", np.zeros(4, np.float32))
    os.replace(tmp_path / "fc_1.b_0.npy", tmp_path / "fc_1.b_0")
    with pytest.raises(SerializationError, match=r"fc_1.b_0.*holds float32\[4\] but the "
                                                 r"manifest says float32\[3\]"):
        load(trained, tmp_path)


@pytest.mark.parametrize("text, message", [
    ("{not json", "is not valid JSON"),
    ('{"format": "something-else", "vars": {}}', "is not a paddletune-vars manifest"),
    ('{"format": "paddletune-vars", "version": 9, "vars": {}}', "format version 9"),
])
def test_a_bad_manifest_is_named(trained, tmp_path, text, message):
    save(trained, tmp_path)
    (tmp_path / MANIFEST).write_text(text)
    with pytest.raises(SerializationError, match=rf"__manifest__.json.*{message}"):
        load(trained, tmp_path)


def test_a_directory_without_manifest_still_loads(trained, tmp_path):
    save(trained, tmp_path)
    os.remove(tmp_path / MANIFEST)
    load(trained, tmp_path)


@pytest.mark.parametrize("damage", ["garbage", "truncate"])
def test_a_corrupt_single_file_is_named(trained, tmp_path, damage):
    save(trained, tmp_path, filename="model.npz")
    path = tmp_path / "model.npz"
    data = path.read_bytes()
    path.write_bytes(b"PK garbage" if damage == "garbage" else data[:len(data) // 2])
    with pytest.raises(SerializationError, match=r"model.npz' is not a readable variables "
                                                 r"file.*save it again"):
        load(trained, tmp_path, filename="model.npz")


def test_a_zip_member_with_bad_bytes_is_named(trained, tmp_path):
    save(trained, tmp_path, filename="model.npz")
    path = tmp_path / "model.npz"
    data = bytearray(path.read_bytes())
    start = data.index(b"fc_0.w_0.npy") + len("fc_0.w_0.npy") + 200  # inside the array bytes
    data[start:start + 4] = b"\xff\xff\xff\xff"
    path.write_bytes(bytes(data))
    with pytest.raises(SerializationError, match=r"model.npz.*(corrupt|CRC)"):
        load(trained, tmp_path, filename="model.npz")


def test_a_zip_that_is_not_ours_is_named(trained, tmp_path):
    np.savez(tmp_path / "other.npz", a=np.ones(2))
    with pytest.raises(SerializationError, match=r"other.npz' has no __manifest__.json"):
        load(trained, tmp_path, filename="other.npz")


def test_loading_onto_a_gpu_executor_gives_device_arrays(trained, tmp_path):
    cupy = pytest.importorskip("cupy")
    if not fluid.is_compiled_with_cuda():
        pytest.skip("no GPU")
    save(trained, tmp_path)
    exe = fluid.Executor(fluid.CUDAPlace(0))
    scope = fluid.Scope()
    with fluid.scope_guard(scope):
        fluid.io.load_persistables(exe, tmp_path, trained[1])
        assert isinstance(scope.find_var("fc_0.w_0").value, cupy.ndarray)
        exe.run(trained[1], feed=batch_data(), fetch_list=[trained[4]])
        fluid.io.save_persistables(exe, tmp_path / "again", trained[1])
    np.testing.assert_array_equal(np.load(tmp_path / "again" / "fc_1.w_0"),
                                  scope.find_var("fc_1.w_0").value.get())
