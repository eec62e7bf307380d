"""The system probe: process CPU, memory, threads, context switches and machine load (psutil)."""

import os
import threading
import time

import psutil

from ..profile.records import SystemSample
from .base import Clock, SamplingProbe, Sink

# The kernel counts a process's CPU time in clock ticks (10 ms at USER_HZ=100): two readings
# closer than this would turn one tick into hundreds of percent (a job that dies at import
# gave 870% of 200%), so such a pair measures no rate; the earlier reading is kept for the
# next sample. 5 ticks; what the rounding can still add is cut at the usable cores.
MIN_RATE_INTERVAL_S = 0.05


def usable_cores():
    """The cores this process may run on (its affinity), else the machine's; None: unknown."""
    return safe(lambda: len(os.sched_getaffinity(0))) or safe(psutil.cpu_count)


def process_percent(cpu_s_per_s, cores):
    """A process's CPU rate as a percentage (100 = one core busy), never above its usable
    `cores` x 100%: the threads cannot run on more cores than that, and what a reading
    shows beyond it is the clock tick's rounding (MIN_RATE_INTERVAL_S)."""
    if cpu_s_per_s is None:
        return None
    percent = max(100.0 * cpu_s_per_s, 0.0)
    return round(min(percent, 100.0 * cores) if cores else percent, 1)


def safe(fn, *args):
    """fn(*args), or None when the OS does not report it (any error: psutil, OS, missing API)."""
    try:
        return fn(*args)
    except Exception:
        return None


def busy_total_s(times):
    """(busy, total) seconds of a psutil cpu_times() tuple, with psutil's own definitions.

    Linux counts guest time inside user/nice, so it is not added twice; iowait is idle.
    """
    total_s = sum(times) - getattr(times, "guest", 0.0) - getattr(times, "guest_nice", 0.0)
    return total_s - times.idle - getattr(times, "iowait", 0.0), total_s


def busy_percent(before, after):
    """Share of CPU time spent busy between two cpu_times() tuples (psutil.cpu_percent's)."""
    busy0, total0 = busy_total_s(before)
    busy1, total1 = busy_total_s(after)
    if total1 - total0 <= 0:  # no clock tick between the readings: nothing measured
        return None
    return round(min(max(100.0 * (busy1 - busy0) / (total1 - total0), 0.0), 100.0), 1)


def field_percent(before, after, name):
    """Share of CPU time in one field (steal, iowait) between two cpu_times() tuples; None
    where this OS has no such field (psutil.cpu_times_percent's definition)."""
    if not hasattr(after, name) or not hasattr(before, name):
        return None
    total_s = busy_total_s(after)[1] - busy_total_s(before)[1]
    if total_s <= 0:
        return None
    return round(min(max(100.0 * (getattr(after, name) - getattr(before, name)) / total_s,
                         0.0), 100.0), 1)


def per_core_percent(before, after):
    """busy_percent of each core (None when the core count changed: CPU hotplug)."""
    if len(before) != len(after):
        return None
    return [busy_percent(b, a) for b, a in zip(before, after)]


def _process_counters(proc):
    """This process's cumulative counters in one read of /proc (psutil's oneshot)."""
    with proc.oneshot():
        cpu = safe(proc.cpu_times)
        ctx = safe(proc.num_ctx_switches)
        return {"cpu_s": None if cpu is None else cpu.user + cpu.system,
                "ctx": None if ctx is None else (ctx.voluntary, ctx.involuntary),
                "rss_bytes": safe(lambda: proc.memory_info().rss),
                "threads": safe(proc.num_threads)}


def _rate(now, prev, elapsed_s):
    """Per-second change of a cumulative counter (None without both readings)."""
    if now is None or prev is None or elapsed_s <= 0:
        return None
    return (now - prev) / elapsed_s


def _ctx_rates(before, after, elapsed_s):
    """(all, involuntary) context switches per second from two (voluntary, involuntary)."""
    if before is None or after is None or elapsed_s <= 0:
        return None, None
    return (round(_rate(sum(after), sum(before), elapsed_s), 1),
            round(_rate(after[1], before[1], elapsed_s), 1))


class SystemProbe(SamplingProbe):
    """One sample per interval: process CPU % (100 = one core busy), RSS, threads, context
    switches/s, machine CPU % (total, per core, steal, iowait), load, available memory and
    the BLAS thread count (the source's: NumPy's for the embedded runtime).

    Rates compare with the previous sample, so the first sample's rates are None (and so
    are those of a sample taken less than MIN_RATE_INTERVAL_S after it); `threads`
    counts the job's threads (OS threads: BLAS's too), not this probe's own sampling thread,
    the same whether the sample is taken by that thread or, the last one, as the probe stops. The machine-wide figures come from
    psutil.cpu_times() deltas kept by this probe (the formulas of psutil.cpu_percent and
    cpu_times_percent) rather than psutil's module-level state, which other callers in the
    job would disturb; one read serves total, steal and iowait.
    """

    name = "system"

    def __init__(self, sink: Sink, clock: Clock, interval_s: float = 0.5, source=None):
        super().__init__(sink, clock, interval_s, source)
        self._proc = safe(psutil.Process)
        self._cores = usable_cores()
        self._prev = None
        self._prev_cpu = None  # (perf_counter, the process's CPU seconds) of the rate's start

    def sample(self, t_s) -> SystemSample:
        now = self._read()
        prev, self._prev = self._prev, now
        threads = now["proc"]["threads"]
        if threads is not None and threading.current_thread() is self._thread:
            threads -= 1  # the job's threads: not this probe's own sampling thread
        fields = {"rss_bytes": now["proc"]["rss_bytes"], "threads": threads,
                  "load1": safe(lambda: os.getloadavg()[0]),
                  "mem_available_bytes": safe(lambda: psutil.virtual_memory().available),
                  "blas_threads": safe(self._blas_threads)}
        fields.update(self._rates(prev, now))
        return SystemSample(t_s, **fields)

    def _blas_threads(self):
        """The BLAS threads the source reports (None without a source: unknown)."""
        return self.source.blas_threads() if self.source is not None else None

    def _read(self) -> dict:
        proc = {"cpu_s": None, "ctx": None, "rss_bytes": None, "threads": None}
        if self._proc is not None:
            proc = safe(_process_counters, self._proc) or proc
        return {"t": time.perf_counter(), "proc": proc, "cpu": safe(psutil.cpu_times),
                "cores": safe(psutil.cpu_times, True)}

    def _process_rate(self, now):
        """The process's CPU seconds per second since the reading that starts the rate (the
        previous one, unless that was under MIN_RATE_INTERVAL_S before it: then the one
        before, kept); None until a reading that far apart."""
        start = self._prev_cpu
        reading = (now["t"], now["proc"]["cpu_s"])
        if start is None or start[1] is None:
            self._prev_cpu = reading
            return None
        if now["t"] - start[0] < MIN_RATE_INTERVAL_S:
            return None  # too close: a clock tick would read as hundreds of percent
        self._prev_cpu = reading
        return _rate(reading[1], start[1], now["t"] - start[0])

    def _rates(self, prev, now) -> dict:
        """The fields that need a previous sample (None on the first)."""
        if prev is None:
            self._process_rate(now)  # the first reading starts the process's rate
            return dict.fromkeys(("cpu_percent", "cpu_total_percent", "per_core_percent",
                                  "ctx_switches_per_s", "ctx_involuntary_per_s",
                                  "steal_percent", "iowait_percent"))
        elapsed_s = now["t"] - prev["t"]
        cpu_s = self._process_rate(now)
        ctx_per_s, involuntary_per_s = _ctx_rates(prev["proc"]["ctx"], now["proc"]["ctx"],
                                                  elapsed_s)
        c0, c1 = prev["cpu"], now["cpu"]  # None (a TypeError, caught) when not reported
        return {"cpu_percent": process_percent(cpu_s, self._cores),
                "cpu_total_percent": safe(busy_percent, c0, c1),
                "per_core_percent": safe(per_core_percent, prev["cores"], now["cores"]),
                "ctx_switches_per_s": ctx_per_s, "ctx_involuntary_per_s": involuntary_per_s,
                "steal_percent": safe(field_percent, c0, c1, "steal"),
                "iowait_percent": safe(field_percent, c0, c1, "iowait")}
