"""What the Executor's leaner step (issue 28, CPU speed) must keep (the fetched loss held by
the static memory plan: test_memory_arena.py): a fetch that raises still comes after the
scope's writes, softmax_with_cross_entropy's gradient reuses its forward's label check only for
the very arrays it checked, and the signal deferral holds a signal back until the outermost
deferral ends, with the handlers put back."""

import os
import signal
import threading

import numpy as np
import pytest

import runtime as fluid
from runtime.memory.signals import DeferSignals
from runtime.ops import loss as loss_ops


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


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread()
                    or not hasattr(signal, "SIGHUP"), reason="main-thread POSIX signals")
def test_a_signal_during_an_executor_step_is_handled_once_the_step_ends():
    """The executor holds the handlers back for its step (signals.hold and deliver): a signal
    arriving while the ops run is handled after the step, by the handler installed before
    it, which is installed again."""
    from runtime.memory import signals
    got, during = [], []

    def handler(signum, frame):
        got.append(signum)

    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.data("x", [None, 4])

        def send(value):
            during.append(signal.getsignal(signal.SIGHUP) is signals._record)
            os.kill(os.getpid(), signal.SIGHUP)
            for _ in range(1000):  # (Python runs handlers between bytecodes)
                pass
            during.append(list(got))
            return np.asarray(value) * 2.0

        out = main.global_block().create_var(name="sent", dtype="float32", shape=[-1, 4])
        fluid.layers.py_func(send, x, out)
    exe = fluid.Executor(fluid.CPUPlace())
    previous = signal.signal(signal.SIGHUP, handler)
    try:
        result = exe.run(main, feed={"x": np.ones((2, 4), np.float32)}, fetch_list=[out])[0]
        assert during == [True, []]  # held back while the ops ran
        assert got == [signal.SIGHUP] and np.array_equal(result, np.full((2, 4), 2.0))
        assert signal.getsignal(signal.SIGHUP) is handler
    finally:
        signal.signal(signal.SIGHUP, previous)
