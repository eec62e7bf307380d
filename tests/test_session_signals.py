"""The session's signal handlers: a signal whose handler runs inside a native callback (the
runtime's NumPy allocator hook, called from C, where a raised exception is dropped) is sent
again a moment later instead of being lost."""

import signal
import sys
import threading
import time
import types

from paddletune import session
from paddletune.sources.fluid import FluidSource
from runtime.memory import numpy_hook


def frame_in(code, below=None):
    """A stand-in frame running `code`, called from `below`."""
    return types.SimpleNamespace(f_code=code, f_back=below)


def test_a_frame_inside_the_allocator_callbacks_is_recognised():
    source = FluidSource()
    here = sys._getframe()
    assert not source.in_native_callback(here)
    callback = frame_in(numpy_hook._free.__code__, here)
    assert source.in_native_callback(frame_in((lambda: 0).__code__, callback))
    assert numpy_hook._malloc.__code__ in numpy_hook.CALLBACK_CODES


def test_a_signal_landing_in_a_callback_is_sent_again():
    got = []
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: got.append(signum))
    try:
        inside = frame_in(numpy_hook._free.__code__)
        assert session._resent(FluidSource(), signal.SIGUSR1, inside)
        deadline = time.monotonic() + 5
        while not got and time.monotonic() < deadline:
            time.sleep(0.01)
        assert got == [signal.SIGUSR1]
        assert not session._resent(FluidSource(), signal.SIGUSR1, sys._getframe())
        assert not [t for t in threading.enumerate() if isinstance(t, threading.Timer)
                    and t.is_alive()]
    finally:
        signal.signal(signal.SIGUSR1, previous)
