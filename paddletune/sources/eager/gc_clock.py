"""Python's garbage collector, timed on the training thread: the pauses it makes there, and
what a DataLoader fetch spent collecting.

A full collection scans every object the interpreter tracks. After `torch.compile` that is
some 400,000 objects and 200-480 ms on a 2-core machine, and a collection runs on the thread
whose allocation set it off: most often the loop's batch fetch, its most allocating part
(building and collating the samples). Timed as the fetch's, the pause read as DataLoader
wait (a helper's torch.compile job: one 268 ms "wait" at its third batch, 42% input share
against 24% without it). The hooks subtract the collections inside a fetch from its wait, so
the pause counts in the step's own time, and send each pause of PAUSE_S or more as a
`gc_pause` event (records.GcPauseEvent) from the step hook, outside the collector.

The clock also counts the objects the collector tracks (`len(gc.get_objects())`, a
`gc_heap` event: records.GcHeapEvent) at the first training step's end and at the step ends
after the 1st, 2nd, 4th... full collection, at most MAX_HEAP_READS times: how much of what a
full collection scans existed before the loop, which `gc.freeze()` there takes out of every
scan (advisors/collector.py). A count walks the heap (20-130 ms for 0.3-1.2 million
objects, and a list of that many pointers for the while): its time is left out of the
next step (StepTimer.pause) and of the hooks' own time. No count is taken while --ops times
a window (its pauses are the ops probe's overhead) or the speed test runs (its window's CPU
per step sizes the workers), nor once the counts took MAX_HEAP_READ_S.

`GcClock.watching` is the thread to time: the one that installed the clock, then the one that
steps the optimizer (the step hooks say so after each step; a DataLoader read on a prefetch
thread is not the training thread). `total_s` only grows. One Python call per collection,
which the interpreter runs every few hundred allocations.
"""

import gc
import threading
import time
from typing import Callable, List, NamedTuple, Optional

_ident = threading.get_ident
_perf = time.perf_counter

PAUSE_S = 0.005  # a collection this long on the training thread is a pause worth a record
MAX_PAUSES = 2000  # pauses recorded in one run at most (the rest are counted: `dropped`)
MAX_HEAP_READS = 12  # heap counts a run at most: the first step's, then after full
# collections 1, 2, 4, ... 1,024
MAX_HEAP_READ_S = 1.0  # and no more once they took this long in all (a count walks the
# heap and lists it: about 20 ms and 8 MiB a million objects, 2-core VM)


class GcPause(NamedTuple):
    """One collection of PAUSE_S or more on the watched thread (perf_counter seconds)."""

    t: float
    pause_s: float
    generation: int
    collected: int
    more: int = 0  # the last one sent: pauses past MAX_PAUSES, pause_s their total time


class GcHeap(NamedTuple):
    """The tracked objects counted at `t` (perf_counter), in `read_s`, after `full` full
    collections on the watched thread."""

    t: float
    objects: int
    read_s: float
    full: int


class GcClock:
    def __init__(self):
        self.watching: Optional[int] = None
        self.total_s = 0.0
        self.pending: List[GcPause] = []  # pauses not sent yet
        self.recorded = 0
        self.dropped = 0  # pauses past MAX_PAUSES
        self.dropped_s = 0.0  # their time
        self._start: Optional[float] = None
        self.full = 0  # full collections on the watched thread
        self.heap_reads = 0
        self._count_heap = True  # at the next step's end (the first: the loop's heap)
        self.heap_read_s = 0.0  # the counts' time so far

    def install(self) -> List[Callable[[], None]]:
        """Start timing the installing thread (the script's, until a step says otherwise:
        `stepped`); returns the undo."""
        self.watching = _ident()
        gc.callbacks.append(self._callback)
        return [self._remove]

    def stepped(self, bus, timer=None, may_count: bool = True) -> float:
        """A training step ended on this thread (the step hooks): it is the one to time, and
        the pauses so far go out as `gc_pause` events, outside the collector; the heap is
        counted where due and `may_count` (no --ops window, no speed test), its time left
        out of the next step (`timer`'s pause). Returns that time (0.0: none counted)."""
        self.watching = _ident()
        if self.pending:
            send_pauses(self, bus)
        if self._count_heap and may_count and self.heap_read_s < MAX_HEAP_READ_S and \
                bus.listening("gc_heap"):
            return self._send_heap(bus, timer)
        return 0.0

    def _send_heap(self, bus, timer) -> float:
        self._count_heap = False
        self.heap_reads += 1
        t0 = _perf()
        objects = len(gc.get_objects())
        read_s = _perf() - t0
        bus.emit("gc_heap", GcHeap(t0, objects, read_s, self.full))
        now = _perf()
        taken_s = now - t0
        self.heap_read_s += taken_s
        if timer is not None:  # the next step starts once the count is done: from the last
            # step's end, the hooks' work before the count too (StepTimer.pause's contract)
            last_end = timer.last_end
            timer.pause(max(now - last_end, taken_s) if last_end is not None else taken_s)
        return taken_s

    def drain(self) -> List[GcPause]:
        """The pauses not sent yet, now taken."""
        out, self.pending = self.pending, []
        return out

    def _remove(self):
        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)

    def _callback(self, phase: str, info: dict):
        if _ident() != self.watching:
            return
        if phase == "start":
            self._start = _perf()
            return
        if self._start is None:
            return
        pause_s = _perf() - self._start
        self.total_s += pause_s
        if info.get("generation") == 2:
            self.full += 1
            full = self.full
            if full & (full - 1) == 0 and self.heap_reads < MAX_HEAP_READS:
                self._count_heap = True  # (after the 1st, 2nd, 4th... full collection)
        if pause_s >= PAUSE_S:
            if self.recorded < MAX_PAUSES:
                self.recorded += 1
                self.pending.append(GcPause(self._start, pause_s, info.get("generation", -1),
                                            info.get("collected", 0)))
            else:
                self.dropped += 1
                self.dropped_s += pause_s
        self._start = None


def send_pauses(clock: GcClock, bus) -> None:
    """The clock's pending pauses, each as a `gc_pause` event on `bus` (a GcPause)."""
    for pause in clock.drain():
        bus.emit("gc_pause", pause)


def send_last_pauses(clock: GcClock, bus) -> None:
    """As the hooks are removed: the pending pauses, then those past MAX_PAUSES as one
    GcPause that counts them (`more`)."""
    send_pauses(clock, bus)
    if clock.dropped:
        bus.emit("gc_pause", GcPause(_perf(), clock.dropped_s, -1, 0, more=clock.dropped))
        clock.dropped, clock.dropped_s = 0, 0.0
