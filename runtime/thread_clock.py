"""The calling thread's own clocks, for the step's record (events.StepRecord.compute_wait_s
and compute_queued_s): its CPU time (time.thread_time), and its time runnable but waiting
for a core (Linux's run_delay, /proc/thread-self/schedstat's second figure; None elsewhere).

A thread's wall time less its CPU time is its time off the CPU: waiting for a core (the
queue), or blocked (the GIL another thread holds, a lock, a device). The two are read
around the ops of each step: about 1 us each (the schedstat file is opened once per thread
and read again in place)."""

import os
import threading
import time
from typing import Optional

cpu_s = time.thread_time  # the calling thread's CPU time

_SCHEDSTAT = "/proc/thread-self/schedstat"  # "<on cpu ns> <waiting on a runqueue ns> <slices>"
_local = threading.local()


class _Stat:
    """One thread's open schedstat file (closed with the thread's local data)."""

    __slots__ = ("fd", "pid")

    def __init__(self):
        self.pid = os.getpid()
        try:
            self.fd = os.open(_SCHEDSTAT, os.O_RDONLY)
        except (OSError, AttributeError):
            self.fd = -1

    def __del__(self):
        if self.fd >= 0:
            try:
                os.close(self.fd)
            except OSError:
                pass
            self.fd = -1


def queued_s() -> Optional[float]:
    """The calling thread's time so far runnable but waiting for a core, in seconds (None:
    not readable here)."""
    stat = getattr(_local, "stat", None)
    if stat is None or stat.pid != os.getpid():  # (a forked child: its own thread's file)
        stat = _local.stat = _Stat()
    if stat.fd < 0:
        return None
    try:
        return int(os.pread(stat.fd, 64, 0).split()[1]) * 1e-9
    except (OSError, ValueError, IndexError, AttributeError):
        stat.__del__()  # (unreadable: not read again)
        return None
