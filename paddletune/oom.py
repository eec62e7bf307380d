"""Whether an exception means out of memory, whichever framework raised it (stdlib only): the
session marks such an error in the profile, so the tuner tells a batch that does not fit
from a crash."""

import re
from typing import Optional

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
    return oom_cause(err) is not None


def oom_cause(err: BaseException) -> Optional[BaseException]:
    """The out-of-memory error itself: ``err``, or the first exception along its explicit
    ``raise ... from`` chain that is out-of-memory (a script's own error wrapping the
    framework's, whose message and type carry the figures); None when there is none."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if _is_oom_one(err):
            return err
        err = err.__cause__
    return None


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
