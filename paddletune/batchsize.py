"""Out-of-memory-safe search for the largest batch size that fits (stdlib only)."""

from __future__ import annotations

import math
import re
import time
import traceback
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Callable, NamedTuple

__all__ = [
    "NoBatchSizeFits",
    "SearchResult",
    "Trial",
    "find_max_batch_size",
    "is_oom",
]

# Class names that mean "out of memory" wherever they appear in an exception's MRO:
# torch.cuda.OutOfMemoryError / cupy's OutOfMemoryError, Paddle's and TensorFlow's
# ResourceExhaustedError, the runtime pool's PoolOutOfMemory, NumPy's _ArrayMemoryError.
_OOM_CLASS_NAMES = frozenset({
    "MemoryError", "OutOfMemoryError", "ResourceExhaustedError",
    "PoolOutOfMemory", "_ArrayMemoryError",
})

# Messages as the frameworks print them. "out of memory" covers torch ("CUDA out of
# memory. Tried to allocate ...", "CUDA error: out of memory", "MPS backend out of memory"),
# Paddle ("Out of memory error on GPU 0") and XLA ("Out of memory while trying to allocate").
# cuDNN's CUDNN_STATUS_NOT_SUPPORTED is deliberately absent: it also means a genuinely
# unsupported configuration, and shrinking the batch would hide that.
_OOM_MESSAGE = re.compile(
    r"\bout of memory\b"
    r"|\bCU[A-Z]+_(?:STATUS_)?ALLOC_FAILED\b"           # CUBLAS_STATUS_ALLOC_FAILED, ...
    r"|\bResourceExhaustedError\b"                      # Paddle 1.x EnforceNotMet text
    r"|\bcan(?:not|'t) allocate\b[^\n]{0,60}?\bmemory\b"  # Paddle; torch CPU allocator
    r"|\bnot enough memory: you tried to allocate\b"     # torch CPU allocator (newer)
    r"|\bOOM when allocating\b",                        # TensorFlow
    re.IGNORECASE,
)

# Argument/programming errors never count as OOM, whatever their message says.
_NEVER_OOM = (ValueError, TypeError, LookupError, AttributeError, NameError,
              AssertionError, ImportError, ArithmeticError)


def is_oom(err: BaseException) -> bool:
    """True when ``err`` (or an exception it was explicitly raised ``from``) is out-of-memory."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if _is_oom_one(err):
            return True
        err = err.__cause__
    return False


def _is_oom_one(err: BaseException) -> bool:
    """Check one exception by class name along its MRO, then by message."""
    if isinstance(err, MemoryError):
        return True
    if any(cls.__name__ in _OOM_CLASS_NAMES for cls in type(err).__mro__):
        return True
    if not isinstance(err, Exception) or isinstance(err, _NEVER_OOM):
        return False
    return _OOM_MESSAGE.search(_message(err)) is not None


def _message(err: BaseException) -> str:
    """The exception's text; never raises (a broken __str__ reads as empty)."""
    try:
        return str(err)
    except Exception:  # noqa: BLE001 - a foreign __str__ may raise anything
        return ""


class NoBatchSizeFits(MemoryError):
    """Raised when even batch size 1 runs out of memory.

    A ``MemoryError`` subclass, so ``except MemoryError`` still catches it.
    ``last_oom_message`` holds the last OOM error's text and ``trials`` every attempt.
    """

    def __init__(self, last_oom_message: str, trials: list | None = None):
        self.last_oom_message = last_oom_message
        self.trials = list(trials or [])
        super().__init__(
            "the model does not fit even at batch size 1 "
            f"({len(self.trials)} trials); last out-of-memory error: {last_oom_message}")

    def __reduce__(self):
        return type(self), (self.last_oom_message, self.trials)


class Trial(NamedTuple):
    """One attempt: ``(size, "ok" | "oom", seconds)``."""

    size: int
    outcome: str
    seconds: float


@dataclass
class SearchResult:
    """Outcome of :func:`find_max_batch_size`."""

    best: int
    first_failure: int | None
    trials: list = field(default_factory=list)

    def headroom(self, fraction: float) -> int:
        """Leave memory headroom: the largest size <= ``best * (1 - fraction)``, at least 1."""
        if not 0 <= fraction < 1:
            raise ValueError(f"headroom fraction must be in [0, 1), got {fraction!r}")
        exact = self.best * (1 - Fraction(str(fraction)))  # str: 0.1 means 1/10
        return max(1, math.floor(exact))


def find_max_batch_size(
    trial: Callable[[int], object],
    start: int = 1,
    max_size: int | None = None,
    *,
    on_oom: Callable[[BaseException], object] | None = None,
    cleanup: Callable[[], object] | None = None,
) -> SearchResult:
    """Largest batch size for which ``trial(size)`` does not raise an OOM error.

    Doubles from ``start`` until the first OOM (or ``max_size``), then binary-searches
    between the last success and the first failure (memory use is assumed monotonic in
    the size). If ``start`` itself OOMs, halves until a size fits, then searches upward.
    After each OOM, ``on_oom(err)`` gets the error, its frames are released, then
    ``cleanup()`` runs (e.g. ``gc.collect()``). Non-OOM exceptions propagate unchanged.
    Raises :class:`NoBatchSizeFits` when even size 1 runs out of memory.
    """
    _validate(trial, start, max_size)
    search = _Search(trial, on_oom, cleanup)
    lo, hi = search.bracket(start, max_size)
    while hi is not None and hi - lo > 1:
        mid = (lo + hi) // 2
        if search.fits(mid):
            lo = mid
        else:
            hi = mid
    return SearchResult(best=lo, first_failure=hi, trials=search.trials)


def _validate(trial, start, max_size) -> None:
    """Reject a non-callable trial and sizes that are not ints with 1 <= start <= max_size."""
    if not callable(trial):
        raise TypeError(f"trial must be callable, got {type(trial).__name__}")
    for name, value in (("start", start), ("max_size", max_size)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise TypeError(f"{name} must be an int, got {value!r}")
    if start < 1:
        raise ValueError(f"start must be >= 1, got {start}")
    if max_size is not None and max_size < start:
        raise ValueError(f"max_size must be >= start ({start}), got {max_size}")


class _Search:
    """Runs trials, records them, and turns OOM errors into ``False``."""

    def __init__(self, trial, on_oom, cleanup):
        self.trial, self.on_oom, self.cleanup = trial, on_oom, cleanup
        self.trials: list = []
        self.last_oom_message = ""

    def bracket(self, start: int, max_size: int | None) -> tuple:
        """``(lo, hi)``: lo fits, hi is the smallest failure seen (None: max_size fits)."""
        if self.fits(start):
            lo = start
            while max_size is None or lo < max_size:
                size = lo * 2 if max_size is None else min(lo * 2, max_size)
                if not self.fits(size):
                    return lo, size
                lo = size
            return lo, None
        hi = start
        while hi > 1:
            if self.fits(hi // 2):
                return hi // 2, hi
            hi //= 2
        raise NoBatchSizeFits(self.last_oom_message, self.trials)

    def fits(self, size: int) -> bool:
        """Run one trial; True if it fit, False on OOM; anything else propagates."""
        t0_s = time.perf_counter()
        try:
            self.trial(size)
        except BaseException as err:
            if not is_oom(err):
                raise
            self._record(size, "oom", t0_s)
            self.last_oom_message = f"{type(err).__name__}: {_message(err)}"[:500]
            if self.on_oom is not None:
                self.on_oom(err)
            _release(err)
            del err  # (the except clause would too) - drop it before cleanup()
        else:
            self._record(size, "ok", t0_s)
            return True
        if self.cleanup is not None:
            self.cleanup()
        return False

    def _record(self, size: int, outcome: str, t0_s: float) -> None:
        """Append one Trial timed from ``t0_s``."""
        self.trials.append(Trial(size, outcome, time.perf_counter() - t0_s))


def _release(err: BaseException) -> None:
    """Clear the locals of the frames an OOM error (and its chain) holds: they hold big arrays."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if err.__traceback__ is not None:
            traceback.clear_frames(err.__traceback__)
            err.__traceback__ = None
        err = err.__cause__ or err.__context__
