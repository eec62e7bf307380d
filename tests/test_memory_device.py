"""The GPU pool on a fake CuPy (tests/fakecupy.py): Paddle's chunk rule from the FLAGS, the cap,
one cudaMalloc per allocation at fraction 0, steady state, blocks going back through CuPy's
owner, counters, tags, the allocator hook's install/restore, and pool_for per device."""

import threading
import time

import numpy as np
import pytest

import runtime as fluid
from runtime import memory
from runtime.errors import DeviceOutOfMemory
from runtime.exec_memory import Serving, _cap_source
from runtime.memory import device
from runtime.memory.pool import align_up

import fakecupy
from fakecupy import restore_gpu_flags  # noqa: F401  (autouse: the flags back after each test)

MB = fakecupy.MB


@pytest.fixture
def fake(monkeypatch):
    cupy = fakecupy.FakeCupy(devices=2, total_bytes=1000 * MB)
    fakecupy.inject(monkeypatch, cupy)
    return cupy


def _gpu_pool(device_id=0, **flags):
    fluid.set_flags({f"FLAGS_{k}": v for k, v in flags.items()})
    return memory.pool_for(fluid.CUDAPlace(device_id))


def _fraction_of(available, fraction):
    """Paddle's chunk by fraction: of the available bytes less the 5% kept out."""
    return int((available - int(0.05 * available)) * fraction)


# --- Paddle's chunk rule -----------------------------------------------------------------------
def test_fraction_092_first_chunk_then_later_chunks_of_what_is_left(fake):
    pool = _gpu_pool(allocator_strategy="naive_best_fit", fraction_of_gpu_memory_to_use=0.92)
    first = align_up(_fraction_of(1000 * MB, 0.92))
    hook = device.hook_for(pool)
    a = hook(1 * MB)
    assert fake.mallocs == [first]
    b = hook(first - 2 * MB)  # fills the first chunk but for 1 MiB
    assert fake.mallocs == [first]
    c = hook(8 * MB)  # does not fit: a later chunk, sized from what the device has left now
    later = align_up(_fraction_of(1000 * MB - first, 0.92))
    assert fake.mallocs == [first, later] and later > 8 * MB
    d = hook(8 * MB)  # served from the second chunk
    assert fake.mallocs == [first, later]
    assert pool.stats()["system_allocs"] == 2 and pool.reserved == first + later
    del a, b, c, d
    assert pool.allocated == 0 and fake.frees == []  # chunks stay cached under naive_best_fit


def test_a_later_chunk_that_no_longer_fits_the_device_is_a_clear_error(fake):
    fake.used[0] = 500 * MB  # another process holds half the device
    pool = _gpu_pool(allocator_strategy="naive_best_fit", fraction_of_gpu_memory_to_use=0.92)
    hook = device.hook_for(pool)
    first = align_up(_fraction_of(500 * MB, 0.92))
    held = [hook(first - 1 * MB), hook(8 * MB)]  # two chunks: ~8 MiB of the device is left
    later = align_up(_fraction_of(500 * MB - first, 0.92))
    assert fake.mallocs == [first, later] and pool.reserved + 60 * MB < pool.capacity
    with pytest.raises(DeviceOutOfMemory) as err:
        hook(60 * MB)  # below the capacity, but cudaMalloc of a third chunk fails
    assert isinstance(err.value, MemoryError)
    message = str(err.value)
    assert "CUDAPlace(0)" in message and "cudaMalloc itself failed" in message
    assert "FLAGS_allocator_strategy=auto_growth" in message
    assert "FLAGS_fraction_of_gpu_memory_to_use=0.92" in message
    assert err.value.info.system_error and err.value.info.requested == 60 * MB
    assert len(held) == 2 and len(fake.mallocs) == 2


def test_initial_and_reallocate_mb_size_the_chunks(fake):
    pool = _gpu_pool(allocator_strategy="naive_best_fit", initial_gpu_memory_in_mb=100,
                     reallocate_gpu_memory_in_mb=30)
    hook = device.hook_for(pool)
    a = hook(99 * MB)
    assert fake.mallocs == [100 * MB]
    b = hook(5 * MB)  # one MiB left in the first chunk: a chunk of FLAGS_reallocate_gpu_memory_in_mb
    assert fake.mallocs == [100 * MB, 30 * MB]
    c = hook(40 * MB)  # larger than a later chunk but not than the first: a chunk of its size
    assert fake.mallocs == [100 * MB, 30 * MB, 40 * MB]
    d = hook(150 * MB)  # larger than any chunk: a cudaMalloc of its own ...
    assert fake.mallocs[-1] == 150 * MB and len(fake.frees) == 0
    del d  # ... cudaFree'd as soon as it is freed
    assert len(fake.frees) == 1 and pool.reserved == 170 * MB
    assert pool.stats()["chunk_bytes"] == 100 * MB
    del a, b, c


def test_the_later_chunk_size_is_computed_once(fake):
    pool = _gpu_pool(allocator_strategy="naive_best_fit", initial_gpu_memory_in_mb=10,
                     fraction_of_gpu_memory_to_use=0.5)
    hook = device.hook_for(pool)
    held = [hook(10 * MB)]
    later = align_up(_fraction_of(1000 * MB - 10 * MB, 0.5))
    held.append(hook(later))  # the whole second chunk
    held.append(hook(1 * MB))  # a third chunk: the same size, though less is free now
    assert fake.mallocs == [10 * MB, later, later]


def test_fraction_0_makes_one_cudamalloc_per_allocation_freed_straight_back(fake):
    pool = _gpu_pool(allocator_strategy="naive_best_fit", fraction_of_gpu_memory_to_use=0.0)
    hook = device.hook_for(pool)
    for step in range(3):
        arrays = [hook(size) for size in (1000, 4096, 3 * MB)]
        assert len(fake.mallocs) == 3 * (step + 1)
        del arrays
        assert len(fake.frees) == 3 * (step + 1) and pool.reserved == 0
    assert fake.mallocs[:3] == [align_up(1000), 4096, 3 * MB]
    stats = pool.stats()
    assert (stats["system_allocs"], stats["system_frees"], stats["requests"]) == (9, 9, 9)


def test_auto_growth_steady_requests_make_no_new_cudamalloc(fake):
    pool = _gpu_pool(allocator_strategy="auto_growth")
    hook = device.hook_for(pool)
    counts = []
    for _ in range(10):
        step = [hook(size) for size in (3 * MB, 256, 5000, 1 * MB, 3 * MB)]
        step.pop(1)  # a temporary dies mid-step
        step.append(hook(700 * 1024))
        del step
        counts.append(len(fake.mallocs))
    assert counts[-1] == counts[2] and counts[0] > 0
    assert pool.allocated == 0 and pool.stats()["requests"] == 60
    pool.check()


# --- the cap and out of memory -----------------------------------------------------------------
@pytest.mark.parametrize("strategy", ["auto_growth", "naive_best_fit"])
def test_gpu_memory_limit_refuses_with_an_error_naming_the_flag(fake, strategy):
    pool = _gpu_pool(allocator_strategy=strategy, gpu_memory_limit_mb=64,
                     gpu_allocator_retry_time=0)
    assert pool.capacity == 64 * MB
    hook = device.hook_for(pool)
    kept = hook(40 * MB)
    mallocs = list(fake.mallocs)
    with pytest.raises(DeviceOutOfMemory, match="FLAGS_gpu_memory_limit_mb") as err:
        hook(40 * MB)
    assert isinstance(err.value, MemoryError) and not err.value.info.system_error
    assert "capacity 64.0 MiB = FLAGS_gpu_memory_limit_mb 64" in str(err.value)
    assert "export FLAGS_gpu_memory_limit_mb=<more>" in str(err.value)
    assert fake.mallocs == mallocs and sum(fake.mallocs) <= 64 * MB
    assert pool.n_oom == 1
    del kept
    assert hook(40 * MB)  # the pool stays usable


def test_naive_best_fit_chunk_under_a_limit_is_a_fraction_of_the_limit(fake):
    pool = _gpu_pool(allocator_strategy="naive_best_fit", gpu_memory_limit_mb=100,
                     fraction_of_gpu_memory_to_use=0.92)
    device.hook_for(pool)(1 * MB)
    assert fake.mallocs == [align_up(_fraction_of(100 * MB, 0.92))]


def test_the_limit_follows_its_flag_without_rebuilding_the_pool(fake):
    pool = _gpu_pool(gpu_memory_limit_mb=64)
    assert _gpu_pool(gpu_memory_limit_mb=0) is pool and pool.capacity == 1000 * MB


def test_retry_waits_for_another_thread_to_free(fake):
    pool = _gpu_pool(gpu_memory_limit_mb=10, gpu_allocator_retry_time=5000)
    hook = device.hook_for(pool)
    held = [hook(8 * MB)]

    def free_later():
        time.sleep(0.05)
        held.clear()

    thread = threading.Thread(target=free_later)
    t0 = time.monotonic()
    thread.start()
    block = hook(8 * MB)  # refused at first; served once the other thread freed its block
    waited = time.monotonic() - t0
    thread.join()
    assert block.ptr and 0.04 < waited < 4 and pool.allocated == 8 * MB


def test_retry_gives_up_after_the_retry_time(fake):
    pool = _gpu_pool(gpu_memory_limit_mb=10, gpu_allocator_retry_time=100)
    hook = device.hook_for(pool)
    kept = hook(8 * MB)
    idle = threading.Thread(target=time.sleep, args=(0.5,))  # a second thread: worth waiting
    idle.start()
    t0 = time.monotonic()
    with pytest.raises(DeviceOutOfMemory):
        hook(8 * MB)
    assert 0.09 < time.monotonic() - t0 < 0.45
    idle.join()
    del kept


# --- the hook: owners, tags, counters, install/restore -----------------------------------------
def test_a_block_goes_back_when_cupy_drops_the_memory(fake):
    pool = _gpu_pool(allocator_strategy="auto_growth")
    pointer = device.hook_for(pool)(1000)
    assert isinstance(pointer, fakecupy.MemoryPointer) and pointer.mem.size == 1000
    assert pointer.mem.device_id == 0 and pool.owns(pointer.ptr)
    assert pool.allocated == align_up(1000)
    view = fakecupy.MemoryPointer(pointer.mem, 512)  # a view keeps the memory alive
    del pointer
    assert pool.allocated == align_up(1000)
    del view
    assert pool.allocated == 0 and pool.stats()["frees"] == 1


def test_cudamalloc_count_and_time_are_counted(monkeypatch):
    cupy = fakecupy.FakeCupy(malloc_delay_s=0.002)
    fakecupy.inject(monkeypatch, cupy)
    pool = _gpu_pool(allocator_strategy="auto_growth")
    held = [device.hook_for(pool)(size * MB) for size in (1, 2, 3)]
    stats = pool.stats()
    assert stats["system_allocs"] == len(cupy.mallocs) == 3
    assert stats["system_alloc_s"] >= 0.006
    assert stats["reserved"] == sum(cupy.mallocs) == 6 * MB
    del held


def test_the_current_tag_is_attributed_as_on_the_cpu(fake):
    pool = _gpu_pool(allocator_strategy="auto_growth")
    with memory.serving(pool, "activations"):
        a = fake.cuda.alloc(1 * MB)
        pool.tag = "gradients"  # what the executor does between op segments
        b = fake.cuda.alloc(2 * MB)
    with memory.tagged(pool, "reader"):
        c = fake.cuda.alloc(4 * MB)
    assert pool.by_tag == {"activations": 1 * MB, "gradients": 2 * MB, "reader": 4 * MB}
    assert pool.tag == "other"
    del a, b, c
    assert sum(pool.by_tag.values()) == 0


def test_install_and_restore_cupys_allocator_in_this_thread_only(fake):
    pool = _gpu_pool()
    before = fake.cuda.get_allocator()
    seen = []
    with memory.serving(pool, "activations"):
        assert fake.cuda.get_allocator() is device.hook_for(pool)
        other = threading.Thread(target=lambda: seen.append(fake.cuda.get_allocator()))
        other.start()
        other.join()
    assert fake.cuda.get_allocator() is before and seen == [before]
    outside = fake.cuda.alloc(1 * MB)  # CuPy's own allocation again: not the pool's
    assert not pool.owns(outside.ptr) and pool.allocated == 0


def test_executor_serving_installs_the_hook_for_a_device_pool(fake):
    pool = _gpu_pool()
    mem = Serving(pool)
    mem.begin()
    try:
        mem.phase("parameters")
        block = fake.cuda.alloc(3 * MB)
        mem.phase_done("parameters")
    finally:
        mem.end()
    assert pool.by_tag["parameters"] == 3 * MB and mem.phase_peaks == {"parameters": 3 * MB}
    assert fake.cuda.get_allocator() is not device.hook_for(pool)
    del block


def test_init_allocated_mem_fills_new_blocks_with_0xef(fake):
    pool = _gpu_pool(init_allocated_mem=True)
    block = device.hook_for(pool)(1000)
    assert fake.memsets == [(block.ptr, 0xEF, 1000)]
    fluid.set_flags({"FLAGS_init_allocated_mem": False})
    device.hook_for(memory.pool_for(fluid.CUDAPlace(0)))(1000)
    assert len(fake.memsets) == 1


# --- pool_for ----------------------------------------------------------------------------------
def test_pool_for_gives_one_pool_per_device_on_that_device(fake):
    first, second = _gpu_pool(0), _gpu_pool(1)
    assert first is not second and first is _gpu_pool(0)
    assert (first.name, second.name) == ("CUDAPlace(0)", "CUDAPlace(1)")
    held = device.hook_for(second)(5 * MB)
    assert fake.used == [0, 5 * MB] and held.mem.device_id == 1
    assert memory.pools()["CUDAPlace(1)"] is second
    assert memory.pool_for(fluid.CPUPlace()) is not first


def test_pool_is_rebuilt_when_its_flags_change_and_the_old_one_gives_idle_chunks_back(fake):
    old = _gpu_pool(allocator_strategy="auto_growth")
    hook = device.hook_for(old)
    kept, idle = hook(1 * MB), hook(2 * MB)
    del idle
    new = _gpu_pool(allocator_strategy="naive_best_fit", initial_gpu_memory_in_mb=10)
    assert new is not old and new.strategy == "naive_best_fit"
    assert len(fake.frees) == 1 and old.reserved == 1 * MB
    del kept  # a block of the old pool still goes back to it
    assert old.allocated == 0
    assert _gpu_pool(initial_gpu_memory_in_mb=20) is not new
    assert _gpu_pool(gpu_memory_limit_mb=500).capacity == 500 * MB


def test_no_gpu_pool_without_cupy(monkeypatch):
    monkeypatch.setattr(memory, "_pools", {})
    monkeypatch.setattr(device.backend, "cupy_status", lambda: (None, 0, "CuPy is not installed"))

    class FakePlace:
        def is_gpu_place(self):
            return True

        def get_device_id(self):
            return 0

    assert memory.pool_for(FakePlace()) is None


def test_the_executors_oom_message_names_the_gpu_cap(fake):
    fluid.set_flags({"FLAGS_gpu_memory_limit_mb": 64})
    assert _cap_source(fluid.CUDAPlace(0)) == " = FLAGS_gpu_memory_limit_mb 64"
    assert _cap_source(fluid.CPUPlace()) == ""


def test_a_gpu_run_feeds_into_the_device_pool_with_the_places_device_current(fake):
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        fluid.data("x", [None, 4])
    exe = fluid.Executor(fluid.CUDAPlace(1))
    assert exe.xp is fake
    del fake.devices_entered[:]
    assert exe.run(main, feed={"x": np.ones((8, 4), "float32")}, fetch_list=[]) == []
    pool = memory.pool_for(fluid.CUDAPlace(1))
    assert fake.devices_entered[0] == 1 and fake.used == [0, 128]
    assert pool.by_tag == {"reader": 0} and pool.stats()["requests"] == 1  # freed after the step
    assert fake.cuda.get_allocator() is not device.hook_for(pool)


def test_a_reentrant_request_goes_to_cudamalloc_and_a_refusal_there_is_a_clear_error(fake):
    """CuPy asking while the pool is mid-operation in this thread (a finaliser): the block is a
    cudaMalloc of its own, cudaFree'd when CuPy lets go; when cudaMalloc refuses, the error says
    so (the pool itself refused nothing, so it has no figures to give)."""
    pool = _gpu_pool(allocator_strategy="auto_growth")
    hook = device.hook_for(pool)
    pool._busy = True
    try:
        ptr = hook(1 * MB)
        assert fake.mallocs == [align_up(1 * MB)] and not pool.owns(ptr.ptr)
        del ptr
        assert len(fake.frees) == 1
        with pytest.raises(DeviceOutOfMemory, match="cudaMalloc .* failed"):
            hook(2000 * MB)
    finally:
        pool._busy = False
