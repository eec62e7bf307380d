"""Executor, ParallelExecutor and memory-hook behaviours Paddle 1.8 has (issue 27): bug (b), the
NumPy allocator hook losing an exception; feeds (scalars, shape checks only on fluid.data,
LoD's first dimension unchecked); data parallelism with one place, a persistable feed copied
to every place, fewer rows than places in inference, return_list nesting of the non-iterable
DataLoader's partial last batch group; drop_local_exe_scopes; the dry run."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import runtime as fluid
from runtime.memory import numpy_hook

L = fluid.layers


@pytest.fixture(autouse=True)
def fresh_programs():
    with fluid.program_guard(fluid.Program(), fluid.Program()), fluid.scope_guard(fluid.Scope()):
        yield


# --- bug (b): SystemError / crash when a pool array dies while an exception propagates ----------
@pytest.mark.skipif(not numpy_hook.EXCEPTION_SAFE, reason="no C compiler for the trampoline")
def test_a_pool_array_freed_during_unwinding_keeps_the_exception():
    # the tuple's first element is on the interpreter's stack when the KeyError is raised: it
    # is freed while the exception propagates (the runtime used to lose it: SystemError, or a
    # segmentation fault at exit)
    script = textwrap.dedent("""
        import numpy as np, runtime as fluid
        from runtime import memory
        pool = memory.pool_for(fluid.CPUPlace())
        def batch():
            with memory.serving(pool, "reader"):
                return (np.ones(100000), {}["missing"])
        for _ in range(3):
            try:
                batch()
            except KeyError:
                print("KeyError")
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["KeyError"] * 3 and "SystemError" not in run.stderr


# --- feeds ----------------------------------------------------------------------------------------
def _exe():
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(fluid.default_startup_program())
    return exe


def test_scalar_feeds_become_one_element_tensors():
    x = L.data(name="x", shape=[1], dtype="float32", append_batch_size=False)
    out = _exe().run(feed={"x": 3.5}, fetch_list=[x * 2.0])[0]
    assert out.shape == (1,) and out[0] == 7.0


def test_executor_as_lodtensor_wraps_a_scalar_with_its_dtype():
    from runtime.executor import _as_lodtensor, as_numpy
    tensor = _as_lodtensor(3, fluid.CPUPlace(), "float32")
    assert as_numpy(tensor).tolist() == [3.0] and as_numpy(tensor).dtype == np.float32
    with pytest.raises(RuntimeError, match="convert data to LoDTensor directly"):
        _as_lodtensor([np.zeros(2)], fluid.CPUPlace())


def test_feed_shapes_are_checked_only_for_fluid_data():
    legacy = L.data(name="legacy", shape=[3], dtype="float32")
    strict = fluid.data(name="strict", shape=[None, 3], dtype="float32")
    exe = _exe()
    out = exe.run(feed={"legacy": np.ones((2, 5), "float32"), "strict": np.ones((2, 3),
                                                                               "float32")},
                  fetch_list=[legacy])[0]
    assert out.shape == (2, 5)  # fluid.layers.data: not checked, as in Paddle 1.8
    with pytest.raises(ValueError, match="The fed Variable 'strict' should have dimensions"):
        exe.run(feed={"legacy": np.ones((2, 3), "float32"),
                      "strict": np.ones((2, 4), "float32")}, fetch_list=[strict])


def test_a_lod_feed_has_its_first_dimension_unchecked():
    x = fluid.data(name="x", shape=[2, 3], dtype="float32", lod_level=1)
    t = fluid.LoDTensor()
    t.set(np.ones((5, 3), "float32"))
    t.set_recursive_sequence_lengths([[2, 3]])
    out = _exe().run(feed={"x": t}, fetch_list=[L.sequence_pool(x, "sum")])[0]
    assert out.shape == (2, 3)


# --- data parallelism -----------------------------------------------------------------------------
def _mean_program():
    x = L.data(name="x", shape=[2], dtype="float32")
    y = L.fc(x, size=1, bias_attr=False, param_attr=fluid.ParamAttr(
        initializer=fluid.initializer.Constant(1.0)))
    return x, y


def test_one_place_in_with_data_parallel_is_accepted():
    x, y = _mean_program()
    compiled = fluid.CompiledProgram(fluid.default_main_program()).with_data_parallel(
        places=[fluid.CPUPlace()])
    out = _exe().run(compiled, feed={"x": np.ones((3, 2), "float32")}, fetch_list=[y])[0]
    np.testing.assert_allclose(out, np.full((3, 1), 2.0))


def test_inference_on_fewer_rows_than_places_runs_on_fewer_places(monkeypatch):
    monkeypatch.setenv("CPU_NUM", "4")
    x, y = _mean_program()
    compiled = fluid.CompiledProgram(fluid.default_main_program()).with_data_parallel()
    out = _exe().run(compiled, feed={"x": np.ones((3, 2), "float32")}, fetch_list=[y])[0]
    assert out.shape == (3, 1)


def test_a_persistable_feed_is_copied_to_every_place(monkeypatch):
    monkeypatch.setenv("CPU_NUM", "2")
    x = L.data(name="x", shape=[2], dtype="float32")
    scale = L.create_global_var(shape=[1], value=1.0, dtype="float32", persistable=True,
                                name="scale")
    y = L.elementwise_mul(x, scale)
    compiled = fluid.CompiledProgram(fluid.default_main_program()).with_data_parallel()
    out = _exe().run(compiled, feed={"x": np.ones((4, 2), "float32"),
                                     "scale": np.array([3.0], "float32")}, fetch_list=[y])[0]
    np.testing.assert_allclose(out, np.full((4, 2), 3.0))  # not split: every place has 3.0


def test_parallel_executor_drop_local_exe_scopes_spelling(monkeypatch):
    monkeypatch.setenv("CPU_NUM", "2")
    x, y = _mean_program()
    loss = L.mean(y)
    fluid.optimizer.SGD(0.1).minimize(loss)
    _exe()
    pe = fluid.ParallelExecutor(use_cuda=False, loss_name=loss.name)
    assert pe._need_create_local_exe_scopes()
    pe.run(feed={"x": np.ones((4, 2), "float32")}, fetch_list=[loss.name])
    assert not pe._need_create_local_exe_scopes()
    pe.drop_local_exe_scopes()
    assert pe._need_create_local_exe_scopes()
    pe.drop_local_exec_scopes()  # the spelling this runtime had first stays an alias


def test_dry_run_executes_no_op(monkeypatch):
    monkeypatch.setenv("CPU_NUM", "2")
    x, y = _mean_program()
    strategy = fluid.ExecutionStrategy()
    strategy._dry_run = True
    compiled = fluid.CompiledProgram(fluid.default_main_program()).with_data_parallel(
        exec_strategy=strategy)
    assert _exe().run(compiled) == []  # not even the missing feed is noticed


def test_non_iterable_loader_with_partial_last_group_for_inference(monkeypatch):
    # 4 places, drop_last=False, 5 batches: the last run gets one batch on one place, then
    # EOF (Paddle 1.8); the runtime used to fail on the partial group
    monkeypatch.setenv("CPU_NUM", "4")
    x = fluid.data(name="x", shape=[None, 2], dtype="float32")
    y = x * 2.0
    loader = fluid.io.DataLoader.from_generator(feed_list=[x], capacity=8, iterable=False,
                                                drop_last=False)
    loader.set_batch_generator(lambda: ([np.full((2, 2), i, "float32")] for i in range(5)),
                               places=fluid.cpu_places())
    compiled = fluid.CompiledProgram(fluid.default_main_program()).with_data_parallel()
    exe = _exe()
    rows = []
    loader.start()
    with pytest.raises(fluid.core.EOFException):
        while True:
            rows.append(exe.run(compiled, fetch_list=[y])[0].shape[0])
    loader.reset()
    assert rows == [8, 2]
