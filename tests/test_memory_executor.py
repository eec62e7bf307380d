"""The pool through the executor on the CPU: GC and inplace keep results bitwise equal, the
pool really serves the run, strategies, out-of-memory (RELIABILITY case 14), fetches, signals."""

import gc
import math
import os
import signal
import threading
import time

import numpy as np
import pytest

import runtime as fluid
from runtime import events
from runtime import memory as rmem
from runtime.errors import PoolOutOfMemory

pytestmark = pytest.mark.skipif(not rmem.numpy_hook.AVAILABLE,
                                reason="NumPy allocation hook unavailable")

FLAG_NAMES = ["FLAGS_eager_delete_tensor_gb", "FLAGS_allocator_strategy",
              "FLAGS_fraction_of_cpu_memory_to_use", "FLAGS_initial_cpu_memory_in_mb",
              "FLAGS_cpu_memory_limit_mb"]


@pytest.fixture(autouse=True)
def restore_flags():
    saved = fluid.get_flags(FLAG_NAMES)
    try:
        yield
    finally:
        fluid.set_flags(saved)


def _pool():
    return rmem.pool_for(fluid.CPUPlace())


def _mlp(width=16, features=6, optimizer="momentum"):
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 2
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.data("x", [None, features])
        y = fluid.data("y", [None, 1], dtype="int64")
        h1 = fluid.layers.fc(x, width, act="relu")
        h = fluid.layers.fc(h1, width, act="tanh")
        logits = fluid.layers.fc(h, 3)
        loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(logits, y))
        if optimizer == "adam":
            fluid.optimizer.Adam(0.01).minimize(loss)
        else:
            fluid.optimizer.Momentum(0.1, 0.9).minimize(loss)
    return main, startup, loss, h1


def _cnn():
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 3
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.data("x", [None, 1, 8, 8])
        y = fluid.data("y", [None, 1], dtype="int64")
        c = fluid.layers.conv2d(x, num_filters=4, filter_size=3, padding=1)
        c = fluid.layers.batch_norm(c, act="relu")
        p = fluid.layers.pool2d(c, pool_size=2, pool_stride=2, pool_type="max")
        logits = fluid.layers.fc(p, 3)
        loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(logits, y))
        fluid.optimizer.Momentum(0.05, 0.9).minimize(loss)
    return main, startup, loss, c


def _feed(batch, features=6, seed=0, image=False):
    rng = np.random.default_rng(seed)
    shape = (batch, 1, 8, 8) if image else (batch, features)
    return {"x": rng.normal(size=shape).astype(np.float32),
            "y": rng.integers(0, 3, (batch, 1))}


def _runnable(main, compiled):
    if not compiled:
        return main
    bs = fluid.BuildStrategy()
    bs.enable_inplace, bs.memory_optimize = True, False
    return fluid.CompiledProgram(main, build_strategy=bs)


def _train(build, gc_gb, compiled, steps=8, image=False, fetch_hidden=False):
    fluid.set_flags({"FLAGS_eager_delete_tensor_gb": gc_gb})
    main, startup, loss, hidden = build()
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    runnable = _runnable(main, compiled)
    feed = _feed(16, image=image)
    fetch = [loss, hidden] if fetch_hidden else [loss]
    out = [exe.run(runnable, feed=feed, fetch_list=fetch, scope=scope) for _ in range(steps)]
    return out, exe, main


GC_MODES = (-1.0, 0.0, 1e-6)


@pytest.mark.parametrize("build,image", [(_mlp, False), (_cnn, True)], ids=["mlp", "cnn"])
def test_gc_and_inplace_never_change_results(build, image):
    runs = {}
    for gc_gb in GC_MODES:
        for compiled in (False, True):
            out, exe, main = _train(build, gc_gb, compiled, image=image)
            runs[gc_gb, compiled] = np.array([o[0] for o in out])
            plan = next(p for p in exe._plans.values() if p.program is main)
            assert plan.gc == (gc_gb >= 0) and plan.inplace_enabled == compiled
    reference = runs[-1.0, False]
    assert np.all(np.isfinite(reference)) and reference[-1] != reference[0]  # it trains
    for key, losses in runs.items():
        np.testing.assert_array_equal(losses, reference, err_msg=str(key))


def _param_bytes(main, scope):
    return sum(rmem.align_up(np.asarray(scope.find_var(p.name).get_tensor()).nbytes)
               for p in main.global_block().all_parameters())


@pytest.mark.parametrize("optimizer,state_per_weight", [("momentum", 1), ("adam", 2)])
def test_pool_serves_startup_parameters_and_state(optimizer, state_per_weight):
    pool = _pool()
    gc.collect()
    before = dict(pool.by_tag)
    main, startup, loss, _ = _mlp(optimizer=optimizer)
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    params = main.global_block().all_parameters()
    expected = sum(rmem.align_up(int(np.prod(p.shape)) * 4) for p in params)
    assert expected == _param_bytes(main, scope)
    grown = {k: v - before.get(k, 0) for k, v in pool.by_tag.items()}
    assert grown["parameters"] == expected
    # the parameters' buffers themselves are pool blocks
    for p in params:
        value = scope.find_var(p.name).value
        assert isinstance(value, np.ndarray) and value.base is None
        assert pool.owns(value.__array_interface__["data"][0])
    # Momentum: one velocity per weight; Adam: two moments (+ scalars: lr, beta pows)
    block = main.global_block()
    names = {p.name for p in params}
    state_vars = [v for v in block.vars.values() if v.persistable and v.name not in names
                  and v.name not in ("x", "y")]
    state = sum(rmem.align_up(scope.find_var(v.name).value.nbytes) for v in state_vars)
    assert grown["optimizer_state"] == state
    moments = [v for v in state_vars if scope.find_var(v.name).value.size > 1]
    assert sum(rmem.align_up(scope.find_var(v.name).value.nbytes) for v in moments) \
        == state_per_weight * expected
    del scope, value, exe
    gc.collect()
    assert pool.by_tag.get("parameters", 0) == before.get("parameters", 0)


def _step_records(gc_gb, steps=3, compiled=False):
    records = []
    sub = events.subscribe("memory_step", records.append)
    try:
        _train(_mlp, gc_gb, compiled, steps=steps)
    finally:
        sub.close()
    return [r for r in records if r.batch_size == 16]


def test_memory_step_records_and_gc_lowers_the_peak():
    on = _step_records(0.0)
    off = _step_records(-1.0)
    assert len(on) == len(off) == 3
    for rec in on + off:
        assert rec.step_peak >= rec.allocated
        assert rec.phase_peaks and set(rec.phase_peaks) <= {"activations", "gradients",
                                                            "optimizer"}
        assert rec.step_peak == max(rec.phase_peaks.values())
        assert rec.requests > 0 and rec.place == "CPUPlace"
        assert rec.peak_allocated >= rec.step_peak
    assert on[-1].gc and not off[-1].gc
    assert on[-1].step_peak < off[-1].step_peak


def test_naive_best_fit_without_chunks_allocates_per_request_and_auto_growth_reuses():
    fluid.set_flags({"FLAGS_allocator_strategy": "naive_best_fit",
                     "FLAGS_fraction_of_cpu_memory_to_use": 0.0})
    naive = _step_records(0.0)
    assert naive[0].strategy == "naive_best_fit" and _pool().chunk_bytes == 0
    for rec in naive:
        assert rec.requests > 0 and rec.system_allocs == rec.requests
    fluid.set_flags({"FLAGS_allocator_strategy": "auto_growth"})
    growth = _step_records(0.0, steps=5)
    assert growth[0].strategy == "auto_growth"
    for rec in growth[2:]:
        assert rec.requests > 0 and rec.system_allocs == 0


# --- RELIABILITY case 14 ------------------------------------------------------------------------
WIDE = dict(width=256, features=64)


def _wide_setup():
    main, startup, loss, _ = _mlp(**WIDE)
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    return main, loss, exe, scope


def _cap_above_current(extra_mb):
    """A FLAGS_cpu_memory_limit_mb a few MiB above what the live arrays of the process's pool
    hold now (not its reserved bytes: their chunk slack depends on the order the startup
    program allocated in, and could push the cap over a MiB boundary)."""
    pool = _pool()
    gc.collect()
    pool.release_cached()
    limit = math.ceil(pool.allocated / rmem.MB) + extra_mb
    fluid.set_flags({"FLAGS_cpu_memory_limit_mb": limit})
    return limit


def test_pool_oom_reports_and_recovers():
    main, loss, exe, scope = _wide_setup()
    exe.run(main, feed=_feed(64, 64), fetch_list=[loss], scope=scope)  # a step that fits
    limit = _cap_above_current(3)
    pool = _pool()
    baseline = pool.allocated
    big = 2048  # a 2048 x 256 float32 activation is 2 MiB: the second one does not fit
    with pytest.raises(MemoryError) as info:
        exe.run(main, feed=_feed(big, 64), fetch_list=[loss], scope=scope)
    err = info.value
    assert isinstance(err, fluid.core.MemoryError) and isinstance(err, PoolOutOfMemory)
    assert isinstance(err, fluid.core.ResourceExhaustedError)
    msg = str(err)
    assert err.op_type and f"op {err.op_type} " in msg
    assert "asked for" in msg and "Ways out" in msg
    assert f"FLAGS_cpu_memory_limit_mb {limit}" in msg
    assert err.capacity == limit * rmem.MB and f"capacity {limit:.1f} MiB" in msg
    assert err.requested > err.free
    assert err.free == max(0, err.capacity - err.reserved) + pool.last_oom.cached_free
    assert err.reserved <= err.capacity < err.reserved + err.requested
    assert err.allocated <= err.reserved and err.peak >= err.allocated
    assert err.batch_size == big
    assert err.fit_batch_size is not None and 0 < err.fit_batch_size < big
    assert f"the largest that fits is about {err.fit_batch_size}" in msg \
        or f"the largest that fits is at most {err.fit_batch_size}" in msg
    assert msg.count("decrease the batch size") == 1
    # the step's temporaries went back at once, even while the error (and its traceback
    # through the executor's frames) is still held
    assert pool.allocated == baseline
    del err, info
    gc.collect()
    assert pool.allocated == baseline
    pool.check()
    # a smaller batch runs under the same cap, in the same process and executor
    exe.run(main, feed=_feed(64, 64), fetch_list=[loss], scope=scope)
    assert pool.allocated == baseline
    # with the cap lifted, the big batch trains
    fluid.set_flags({"FLAGS_cpu_memory_limit_mb": 0})
    (value,) = exe.run(main, feed=_feed(big, 64), fetch_list=[loss], scope=scope)
    assert np.isfinite(value).all()


def test_batches_bisected_under_the_cap_in_one_process():
    """Out-of-memory errors under the cap leave the executor and pool usable: a bisection
    over batch sizes in one process finds the largest that runs."""
    main, loss, exe, scope = _wide_setup()
    _cap_above_current(3)
    feeds = {}

    def fits(size):
        feed = feeds.get(size) or feeds.setdefault(size, _feed(size, 64))
        try:
            exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
            return True
        except MemoryError:
            gc.collect()
            return False

    assert fits(64)
    good, bad, ooms = 64, 1 << 15, 0
    while bad - good > 1:
        mid = (good + bad) // 2
        if fits(mid):
            good = mid
        else:
            bad, ooms = mid, ooms + 1
    assert 64 <= good < 1 << 15 and ooms > 0
    assert fits(good) and not fits(good + 1)
    gc.collect()
    _pool().check()


# --- fetches ------------------------------------------------------------------------------------
def test_fetches_are_correct_and_never_overwritten():
    ref, _, _ = _train(_mlp, -1.0, False, steps=5, fetch_hidden=True)
    got, _, _ = _train(_mlp, 0.0, True, steps=5, fetch_hidden=True)
    batched, _, _ = _train(_mlp, 1e-6, True, steps=5, fetch_hidden=True)
    snapshots = [[a.copy() for a in step] for step in got]
    for r, g, b in zip(ref, got, batched):
        for x, y, z in zip(r, g, b):
            np.testing.assert_array_equal(x, y)
            np.testing.assert_array_equal(x, z)
    assert (got[0][1] > 0).any() and (got[0][1] == 0).any()  # relu output, not a stand-in
    # the arrays fetched at step 0 were not written into by the later steps
    for step, snap in zip(got, snapshots):
        for a, s in zip(step, snap):
            np.testing.assert_array_equal(a, s)
    assert not np.array_equal(got[0][0], got[-1][0])
    hidden = [step[1] for step in got]
    ptrs = {h.__array_interface__["data"][0] for h in hidden}
    assert len(ptrs) == len(hidden)  # each fetch its own buffer while all are alive


# --- signals ------------------------------------------------------------------------------------
@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(),
                    reason="signals are delivered to the main thread")
def test_sigint_during_training_raises_keyboard_interrupt():
    main, startup, loss, _ = _mlp()
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    feed = _feed(16)
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
    steps = 0
    t0 = time.monotonic()
    try:
        timer.start()
        with pytest.raises(KeyboardInterrupt):
            while time.monotonic() - t0 < 10:
                exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
                steps += 1
        elapsed = time.monotonic() - t0
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, old)
    assert elapsed < 3 and steps > 0
    assert signal.getsignal(signal.SIGINT) is old  # the executor put the handler back
    # the executor and the pool still work afterwards
    exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
    _pool().check()


def test_refusal_inside_a_scalar_ufunc_is_still_pool_out_of_memory():
    """NumPy 2.x returns NULL without setting MemoryError when the allocator refuses the
    output of a ufunc with a scalar operand (`x - 1`): Python raises SystemError. The executor
    must still report the pool's out-of-memory, not an op failure."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [None, 256])
        y = fluid.layers.scale(x, scale=2.0, bias=1.0)
    exe = fluid.Executor(fluid.CPUPlace())
    xv = np.ones((4096, 256), np.float32)  # 4 MiB output
    limit = _cap_above_current(1)
    with pytest.raises(MemoryError) as info:
        exe.run(main, feed={"x": xv}, fetch_list=[y])
    err = info.value
    assert isinstance(err, PoolOutOfMemory) and err.op_type == "scale"
    assert f"FLAGS_cpu_memory_limit_mb {limit}" in str(err)
    del err, info
    fluid.set_flags({"FLAGS_cpu_memory_limit_mb": 0})
    (got,) = exe.run(main, feed={"x": xv}, fetch_list=[y])
    np.testing.assert_array_equal(got, np.full_like(xv, 3.0))
