"""Host-to-device copies (feed) and host syncs (fetch) timed in the training loop, by wrapping
a framework's tensor methods: a copy method called on a host tensor whose result is on the
device counts as feed; a sync method (a value, a list, a host copy of a device tensor: each
waits for the device's queued work) called on a device tensor counts as fetch. Imports no
framework: each source says what its tensors are (TensorKind)."""

import time
from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Tuple

_perf = time.perf_counter
_INHERITED = object()  # a method the class inherits (undone by deleting the wrapper)


@dataclass(frozen=True)
class TensorKind:
    """A framework's tensor class and how to read one."""

    cls: type
    on_device: Callable[[Any], bool]  # whether a tensor lives on the GPU
    nbytes: Callable[[Any], int]
    copies: Tuple[str, ...]  # methods that copy a host tensor to the device ("to", "cuda")
    syncs: Tuple[str, ...]  # methods that wait for a device tensor ("item", "numpy", ...)


def time_copies_and_syncs(kind: TensorKind, timer,
                          copy_queued: Optional[Callable[[Callable, tuple, dict], None]] = None
                          ) -> List[Callable[[], None]]:
    """Wrap `kind`'s copy and sync methods to report to `timer` (feed / fetch: seconds,
    bytes); `copy_queued(method, args, kwargs)` is called just before a copy method runs on
    a host tensor (what it copies to is the callback's to read, when it needs to).
    Returns the undo functions."""
    undo = []
    cls, on_device, nbytes = kind.cls, kind.on_device, kind.nbytes

    def patch(name, make):
        own = cls.__dict__.get(name, _INHERITED)
        setattr(cls, name, make(getattr(cls, name)))
        undo.append(lambda: delattr(cls, name) if own is _INHERITED else
                    setattr(cls, name, own))

    def copy(original):
        def wrapper(self, *args, **kwargs):
            if on_device(self):
                return original(self, *args, **kwargs)
            if copy_queued is not None:
                copy_queued(original, args, kwargs)
            t0 = _perf()
            out = original(self, *args, **kwargs)
            if out is not self and on_device(out):
                timer.feed(_perf() - t0, nbytes(out))
            return out
        return wrapper

    def sync(original):
        def wrapper(self, *args, **kwargs):
            if not on_device(self):
                return original(self, *args, **kwargs)
            t0 = _perf()
            out = original(self, *args, **kwargs)
            timer.fetch(_perf() - t0, nbytes(self))
            return out
        return wrapper

    for name in kind.copies:
        patch(name, copy)
    for name in kind.syncs:
        patch(name, sync)
    return undo
