"""The GPU pool on a real GPU through CuPy: CuPy arrays served by the pool, real cudaMalloc counts
and times, fraction 0 against 0.92, the cap, and a training run on CUDAPlace(0) served by it.
Skipped (cleanly) where CuPy or a GPU is not usable; tests/test_memory_device.py covers the same
logic on a fake CuPy everywhere."""

import gc

import numpy as np
import pytest

import runtime as fluid
from runtime import backend, memory
from runtime.errors import DeviceOutOfMemory, PoolOutOfMemory

from fakecupy import restore_gpu_flags  # noqa: F401  (autouse: the flags back after each test)

cupy = backend.cupy_status()[0]
pytestmark = pytest.mark.skipif(cupy is None, reason=f"needs CuPy and a GPU: "
                                                     f"{backend.cupy_status()[2]}")

MB = 1 << 20


@pytest.fixture(autouse=True)
def fresh_device():
    """CuPy's own cache and this test's pool chunks given back, so that each test sees the
    device's memory free and the next one does too (earlier tests' garbage collected first,
    so that it is not freed during this test's counts)."""
    gc.collect()
    cupy.get_default_memory_pool().free_all_blocks()
    yield
    gc.collect()
    for pool in memory.pools().values():
        if getattr(pool, "device_id", None) is not None:
            pool.release_cached()
    cupy.get_default_memory_pool().free_all_blocks()


def _pool(**flags):
    fluid.set_flags({f"FLAGS_{k}": v for k, v in flags.items()})
    return memory.pool_for(fluid.CUDAPlace(0))


def _arrays(pool, n, nbytes, tag="activations"):
    """n float32 CuPy arrays of nbytes each, allocated with the pool serving, written to."""
    with memory.serving(pool, tag):
        arrays = [cupy.full(nbytes // 4, i, dtype=cupy.float32) for i in range(n)]
    cupy.cuda.Device(0).synchronize()
    return arrays


def test_cupy_arrays_are_served_by_the_pool_and_go_back_to_it():
    pool = _pool(allocator_strategy="auto_growth")
    before = pool.stats()
    arrays = _arrays(pool, 4, 1 * MB)
    assert all(pool.owns(a.data.ptr) for a in arrays)  # (a loop variable would keep one alive)
    assert pool.allocated - before["allocated"] == 4 * MB
    assert pool.by_tag["activations"] >= 4 * MB
    assert [float(a[-1]) for a in arrays] == [0.0, 1.0, 2.0, 3.0]  # the memory really works
    del arrays
    gc.collect()
    assert pool.allocated == before["allocated"]
    outside = cupy.ones(1000)  # not serving: CuPy's own pool
    assert not pool.owns(outside.data.ptr)


def test_real_cudamalloc_count_and_time_are_counted():
    pool = _pool(allocator_strategy="naive_best_fit", fraction_of_gpu_memory_to_use=0.0)
    before = pool.stats()
    arrays = _arrays(pool, 5, 2 * MB)
    stats = pool.stats()
    assert stats["system_allocs"] - before["system_allocs"] == 5
    assert stats["system_alloc_s"] > before["system_alloc_s"]
    del arrays
    gc.collect()
    assert pool.stats()["system_frees"] - before["system_frees"] == 5


def test_fraction_0_makes_a_cudamalloc_per_array_and_092_one_chunk():
    n = 50
    pool = _pool(allocator_strategy="naive_best_fit", fraction_of_gpu_memory_to_use=0.0)
    start = pool.n_system_allocs
    arrays = _arrays(pool, n, 1 * MB)
    direct = pool.n_system_allocs - start
    del arrays
    gc.collect()
    assert pool.reserved == 0  # each went straight back
    pool = _pool(fraction_of_gpu_memory_to_use=0.92)  # a new pool: its first chunk is ~87% free
    free_before = cupy.cuda.runtime.memGetInfo()[0]
    start = pool.n_system_allocs
    arrays = _arrays(pool, n, 1 * MB)
    chunked = pool.n_system_allocs - start
    assert (direct, chunked) == (n, 1)
    assert pool.reserved == pytest.approx(0.92 * 0.95 * free_before, rel=0.02)
    del arrays


def test_initial_and_reallocate_mb_size_real_chunks():
    pool = _pool(allocator_strategy="naive_best_fit", initial_gpu_memory_in_mb=64,
                 reallocate_gpu_memory_in_mb=16)
    arrays = _arrays(pool, 1, 60 * MB) + _arrays(pool, 1, 8 * MB)
    assert sorted(pool._chunks.values()) == [16 * MB, 64 * MB]
    del arrays


def test_steady_steps_make_no_new_cudamalloc():
    pool = _pool(allocator_strategy="auto_growth")
    counts = []
    for _ in range(6):
        with memory.serving(pool, "activations"):
            x = cupy.random.rand(256, 512, dtype=cupy.float32)
            y = (x @ x.T).sum(axis=1)
            z = cupy.tanh(y) * 2
            float(z.sum())
        del x, y, z
        counts.append(pool.n_system_allocs)
    assert counts[-1] == counts[2]


def test_gpu_memory_limit_refuses_with_the_flag_in_the_message():
    pool = _pool(allocator_strategy="auto_growth", gpu_memory_limit_mb=32,
                 gpu_allocator_retry_time=0)
    keep = _arrays(pool, 1, 24 * MB)
    with pytest.raises(DeviceOutOfMemory, match="FLAGS_gpu_memory_limit_mb") as err:
        _arrays(pool, 1, 24 * MB)
    assert isinstance(err.value, MemoryError) and pool.reserved <= 32 * MB
    del keep


# --- through the executor ----------------------------------------------------------------------
def _mlp():
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 2
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.data("x", [None, 64])
        y = fluid.data("y", [None, 1], dtype="int64")
        h = fluid.layers.fc(x, 256, act="relu")
        logits = fluid.layers.fc(h, 10)
        loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(logits, y))
        fluid.optimizer.Momentum(0.1, 0.9).minimize(loss)
    return main, startup, loss


def _batch(n, seed=0):
    rng = np.random.RandomState(seed)
    return {"x": rng.rand(n, 64).astype("float32"), "y": rng.randint(0, 10, (n, 1))}


def test_a_training_run_on_the_gpu_is_served_by_the_device_pool():
    pool = _pool(allocator_strategy="auto_growth")
    main, startup, loss = _mlp()
    exe = fluid.Executor(fluid.CUDAPlace(0))
    scope = fluid.Scope()
    exe.run(startup, scope=scope)
    assert pool.by_tag.get("parameters", 0) >= (64 * 256 + 256 * 10) * 4
    allocs = []
    for step in range(6):
        out, = exe.run(main, feed=_batch(32, step), fetch_list=[loss], scope=scope)
        assert np.isfinite(out).all()
        allocs.append(pool.n_system_allocs)
    assert allocs[-1] == allocs[2]  # settled: no cudaMalloc per step
    assert pool.stats()["requests"] > 0 and pool.stats()["system_alloc_s"] > 0
    weight = scope.find_var(main.global_block().all_parameters()[0].name).value
    assert pool.owns(weight.data.ptr)


def test_out_of_memory_in_a_gpu_run_names_the_op_and_the_flag():
    main, startup, loss = _mlp()
    exe = fluid.Executor(fluid.CUDAPlace(0))
    scope = fluid.Scope()
    _pool(allocator_strategy="auto_growth", gpu_memory_limit_mb=64, gpu_allocator_retry_time=0)
    exe.run(startup, scope=scope)
    with pytest.raises(PoolOutOfMemory) as err:
        exe.run(main, feed=_batch(200000), fetch_list=[loss], scope=scope)
    message = str(err.value)
    assert "CUDAPlace(0)" in message and "FLAGS_gpu_memory_limit_mb" in message
    fluid.set_flags({"FLAGS_gpu_memory_limit_mb": 0})
    out, = exe.run(main, feed=_batch(32), fetch_list=[loss], scope=scope)  # usable afterwards
    assert np.isfinite(out).all()


# --- CuPy corners the fake cannot vouch for ----------------------------------------------------
def test_zero_size_arrays_are_served_and_the_name_reads_as_bytes():
    """CuPy asks its allocator for 0 bytes for an empty array; the pool serves it (a minimal
    block) and gives it back. getDeviceProperties' name is bytes (bench_runtime decodes it)."""
    pool = _pool(allocator_strategy="auto_growth")
    before = pool.allocated
    with memory.serving(pool, "activations"):
        empty = cupy.empty((0, 4), dtype=cupy.float32)
        total = float(cupy.ones(3, dtype=cupy.float32).sum())
    assert empty.size == 0 and total == 3.0
    del empty
    gc.collect()
    assert pool.allocated == before
    assert isinstance(cupy.cuda.runtime.getDeviceProperties(0)["name"], bytes)


def test_gpu_op_times_come_from_cuda_events():
    from runtime import events
    main, startup, loss = _mlp()
    exe = fluid.Executor(fluid.CUDAPlace(0))
    scope = fluid.Scope()
    exe.run(startup, scope=scope)
    records = []
    with events.subscribe("op_end", records.append):
        exe.run(main, feed=_batch(64), fetch_list=[loss], scope=scope)
    assert len(records) == len(main.global_block().ops)
    assert all(r.timing == "cuda_event" and r.t_end >= r.t_begin for r in records)
    assert sum(r.dur_s for r in records) > 0


def test_the_double_buffer_moves_batches_through_pinned_memory_to_the_device():
    from runtime.reader.blocking_queue import BlockingQueue, QueueClosed
    from runtime.reader.stages import Batch, DeviceStage
    host = BlockingQueue(8)
    for i in range(4):
        host.push(Batch([np.full((256, 8), i, np.float32), np.arange(256, dtype=np.int64)], i,
                        None, 0.0))
    host.close()
    stage = DeviceStage(host, fluid.CUDAPlace(0))
    out = []
    while True:
        try:
            batch, _ = stage.queue.pop(timeout=30)
        except QueueClosed:
            break
        out.append(batch)
    stage.close()
    assert [b.index for b in out] == [0, 1, 2, 3] and stage.copies == 4
    for i, batch in enumerate(out):
        x, y = batch.arrays
        assert isinstance(x, cupy.ndarray) and x.dtype == np.float32 and x.shape == (256, 8)
        assert float(x.sum()) == i * 256 * 8
        assert np.array_equal(cupy.asnumpy(y), np.arange(256))
    assert len(stage.staging) == 2  # one pinned buffer per array of a batch, reused
