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


class DeferSignals:
    __slots__ = ("saved", "caught")

    def __enter__(self):
        self.saved, self.caught = (), []
        if _get_ident() != _main_ident:
            return self
        saved, record = [], None
        for signum in _SIGNALS:
            handler = _getsignal(signum)
            if callable(handler) and not isinstance(getattr(handler, "__self__", None),
                                                    DeferSignals):
                if record is None:
                    record = self._record
                _setsignal(signum, record)
                saved.append((signum, handler))
        self.saved = saved
        return self

    def _record(self, signum, frame):
        self.caught.append((signum, frame))

    def __exit__(self, *exc):
        for signum, handler in self.saved:
            _setsignal(signum, handler)
        if self.caught:
            handlers = dict(self.saved)
            for signum, frame in self.caught:
                handlers[signum](signum, frame)  # raises, as it would have during the step
        return False
