"""Hold back Python signal handlers while pool callbacks may run on the main thread.

The pool's NumPy callbacks are Python code called from C: an exception a signal handler raises
inside one (KeyboardInterrupt on Ctrl-C, a SIGTERM handler's exception) cannot propagate and
would be lost. So while the executor runs a step, SIGINT/SIGTERM/SIGHUP handlers only record the
signal; on the way out the original handlers run, in order, in the executor's own frame (a
Ctrl-C during a step takes effect when the step ends). Threads other than the main thread never
run signal handlers, so there this does nothing.
"""

import signal
import threading

try:  # the C functions under `signal`: ~0.4 us a call instead of ~5 (no enum conversion)
    import _signal as _sig
except ImportError:  # another Python implementation
    _sig = signal

_SIGNALS = tuple(int(s) for s in (getattr(signal, "SIGINT", None),
                                  getattr(signal, "SIGTERM", None),
                                  getattr(signal, "SIGHUP", None)) if s is not None)
_main_ident = threading.main_thread().ident
_get_ident, _getsignal, _setsignal = threading.get_ident, _sig.getsignal, _sig.signal


_CAUGHT = []  # (signum, frame) of the signals recorded while held back (main thread only)


def _record(signum, frame):
    """The handler while a step runs: the signal is delivered when the step ends."""
    _CAUGHT.append((signum, frame))


class DeferSignals:
    """`with DeferSignals():` the main thread's SIGINT/SIGTERM/SIGHUP handlers are held back.
    Nested uses leave the handlers to the outermost (which finds `_record` installed)."""

    __slots__ = ("saved",)

    def __enter__(self):
        saved = []
        if _get_ident() == _main_ident:
            for signum in _SIGNALS:
                handler = _getsignal(signum)
                if handler is not _record and callable(handler):
                    _setsignal(signum, _record)
                    saved.append((signum, handler))
        self.saved = saved
        return self

    def __exit__(self, *exc):
        saved = self.saved
        for signum, handler in saved:
            _setsignal(signum, handler)
        if saved and _CAUGHT:
            handlers = dict(saved)
            caught = _CAUGHT[:]
            _CAUGHT.clear()
            for signum, frame in caught:
                handlers[signum](signum, frame)  # raises, as it would have during the step
        return False
