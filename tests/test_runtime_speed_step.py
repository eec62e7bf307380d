"""What the Executor's leaner step (issue 28, CPU speed) must keep: the fetched values are
copied out inside the step and the fetched temporaries are then held by the static memory plan
(a steady step asks the pool for its arena only), a fetch that raises still comes after the
scope's writes, softmax_with_cross_entropy's gradient reuses its forward's label check only for
the very arrays it checked, and the signal deferral holds a signal back until the outermost
deferral ends, with the handlers put back."""

import os
import signal
import threading

import numpy as np
import pytest

import runtime as fluid
from runtime import memory as rmem
from runtime.memory import arena
from runtime.memory.signals import DeferSignals
from runtime.ops import loss as loss_ops

FLAG_NAMES = ["FLAGS_static_memory_plan"]


@pytest.fixture(autouse=True)
def restore_flags():
    saved = fluid.get_flags(FLAG_NAMES)
    try:
        yield
    finally:
        fluid.set_flags(saved)


def _mlp():
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 7
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.data("x", [None, 6])
        y = fluid.data("y", [None, 1], dtype="int64")
        h = fluid.layers.fc(x, 16, act="relu")
        logits = fluid.layers.fc(h, 3)
        loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(logits, y))
        fluid.optimizer.Momentum(0.05, 0.9).minimize(loss)
    return main, startup, loss


def _train(planned, steps=6):
    fluid.set_flags({"FLAGS_static_memory_plan": planned})
    main, startup, loss = _mlp()
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    rng = np.random.default_rng(3)
    pool = rmem.pool_for(fluid.CPUPlace())
    losses, requests = [], []
    for _ in range(steps):
        feed = {"x": rng.standard_normal((8, 6)).astype(np.float32),
                "y": rng.integers(0, 3, (8, 1)).astype(np.int64)}
        before = pool.n_requests
        losses.append(exe.run(main, feed=feed, fetch_list=[loss], scope=scope)[0])
        requests.append(pool.n_requests - before)
    return losses, requests


@pytest.mark.skipif(not arena.available(), reason="compiled allocator entry points unavailable")
def test_a_steady_step_asks_the_pool_for_its_arena_only_and_fetches_the_same_values():
    plain, _ = _train(False)
    planned, requests = _train(True)
    for a, b in zip(plain, planned):
        assert np.array_equal(a, b)
        assert not rmem.numpy_hook.pooled(b)  # the caller's copy, not the pool's
    assert all(count == 1 for count in requests[2:]), requests  # the fetched loss is planned


def test_a_fetch_that_raises_comes_after_the_scopes_writes():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [None, 2], lod_level=1)
        total = fluid.layers.create_global_var([1], 0.0, "float32", persistable=True,
                                               name="total")
        fluid.layers.assign(fluid.layers.reduce_sum(x, keep_dim=False), total)
        doubled = fluid.layers.scale(x, 2.0)
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    fed = fluid.create_lod_tensor(np.ones((3, 2), np.float32), [[1, 2]], fluid.CPUPlace())
    with pytest.raises(RuntimeError, match="LoD"):  # a fetched LoD needs return_numpy=False
        exe.run(main, feed={"x": fed}, fetch_list=[doubled], scope=scope)
    assert np.asarray(scope.find_var("total").value).reshape(-1).tolist() == [6.0]


def test_the_gradient_checks_labels_the_forward_did_not_see():
    softmax = np.full((2, 3), 1 / 3, np.float32)
    checked, fresh = np.array([[0], [2]]), np.array([[0], [2]])
    loss_ops._remember_plain(softmax, checked)
    assert loss_ops._seen_plain(softmax, checked)
    assert not loss_ops._seen_plain(softmax, fresh)  # equal values, another array
    assert not loss_ops._seen_plain(softmax.copy(), checked)


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread()
                    or not hasattr(signal, "SIGHUP"), reason="main-thread POSIX signals")
def test_nested_deferral_delivers_a_signal_once_the_outermost_ends():
    got = []

    def handler(signum, frame):
        got.append(signum)

    previous = signal.signal(signal.SIGHUP, handler)
    try:
        with DeferSignals():
            with DeferSignals():
                os.kill(os.getpid(), signal.SIGHUP)
                for _ in range(1000):  # (Python runs handlers between bytecodes)
                    pass
            assert got == []
        assert got == [signal.SIGHUP]
        assert signal.getsignal(signal.SIGHUP) is handler
    finally:
        signal.signal(signal.SIGHUP, previous)
