"""Python's garbage collector, timed on one thread: what a DataLoader fetch spent collecting.

A full collection scans every object the interpreter tracks. After `torch.compile` that is
some 400,000 objects and 200-480 ms on a 2-core machine, and a collection runs on the thread
whose allocation set it off: most often the loop's batch fetch, its most allocating part
(building and collating the samples). Timed as the fetch's, the pause read as DataLoader
wait (a helper's torch.compile job: one 268 ms "wait" at its third batch, 42% input share
against 24% without it). The hooks subtract the collections inside a fetch from its wait, so
the pause counts in the step's own time.

`GcClock.watching` is the thread to time (None: none); `total_s` only grows. One Python call
per collection, which the interpreter runs every few hundred allocations.
"""

import gc
import threading
import time
from typing import Callable, List, Optional

_ident = threading.get_ident
_perf = time.perf_counter


class GcClock:
    def __init__(self):
        self.watching: Optional[int] = None
        self.total_s = 0.0
        self._start: Optional[float] = None

    def install(self) -> List[Callable[[], None]]:
        """Start timing; returns the undo."""
        gc.callbacks.append(self._callback)
        return [self._remove]

    def _remove(self):
        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)

    def _callback(self, phase: str, info: dict):
        if _ident() != self.watching:
            return
        if phase == "start":
            self._start = _perf()
        elif self._start is not None:
            self.total_s += _perf() - self._start
            self._start = None
