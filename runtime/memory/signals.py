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


def hold():
    """Hold back the main thread's SIGINT/SIGTERM/SIGHUP handlers (on other threads, and for
    handlers already held by an outer use, nothing): the ((signum, handler), ...) held, to
    give to `deliver` when the work ends. What `with DeferSignals():` does, without the object
    and the with-statement's calls (the executor holds them every step)."""
    if _get_ident() != _main_ident:
        return ()
    saved = ()
    for signum in _SIGNALS:
        handler = _getsignal(signum)  # (an int: SIG_DFL or SIG_IGN, nothing to hold back)
        if type(handler) is not int and handler is not _record and callable(handler):
            _setsignal(signum, _record)
            saved += ((signum, handler),)
    return saved


def deliver(saved):
    """Put back the handlers `hold` held back, then run them, in order, for the signals
    recorded meanwhile (a handler's exception propagates from here, as it would have during
    the work)."""
    if not saved:
        return
    for signum, handler in saved:
        _setsignal(signum, handler)
    if _CAUGHT:
        handlers = dict(saved)
        caught = _CAUGHT[:]
        _CAUGHT.clear()
        for signum, frame in caught:
            handlers[signum](signum, frame)  # raises, as it would have during the step


class DeferSignals:
    """`with DeferSignals():` the main thread's SIGINT/SIGTERM/SIGHUP handlers are held back
    (`hold`, `deliver`). Nested uses leave the handlers to the outermost (which finds
    `_record` installed)."""

    __slots__ = ("saved",)

    def __enter__(self):
        self.saved = hold()
        return self

    def __exit__(self, *exc):
        deliver(self.saved)
        return False
