"""What every probe shares: the record sink, the session clock, the source it listens to,
overhead bookkeeping, and the background sampling thread of the periodic probes (system,
nvml, workers). Probes send typed records (paddletune/profile/records.py) to the sink."""

import threading
import time
from typing import Callable, Optional

from ..profile.records import ProbeRecord

Sink = Callable[[object], None]


class Clock:
    """Seconds since the session began, on the perf_counter clock the runtime's events use."""

    def __init__(self, t0: Optional[float] = None):
        self.t0 = time.perf_counter() if t0 is None else t0

    def rel(self, t_perf: float) -> float:
        return t_perf - self.t0

    def now(self) -> float:
        return time.perf_counter() - self.t0


class Probe:
    """Base class. Subclasses set `name` and implement `_start()`/`_stop()`; event probes
    subscribe through `source` (paddletune/sources/base.py)."""

    name = "probe"
    in_step = False  # True when its cost lands inside the training loop (event callbacks)

    def __init__(self, sink: Sink, clock: Clock, source=None):
        self.sink, self.clock, self.source = sink, clock, source
        self.available, self.reason = True, None
        self.overhead_s = 0.0
        self.running = False
        self.stopped = None  # the probe record, once stop() sent it

    def start(self):
        if self.available and not self.running:
            self.running = True
            self._start()
        return self

    def stop(self) -> ProbeRecord:
        """Stop measuring, send the probe record and return it (once; later calls return it
        again without sending it)."""
        if self.stopped is not None:
            return self.stopped
        result = {}
        if self.running:
            self.running = False
            result = self._stop() or {}
        record = ProbeRecord(self.name, self.available, self.reason, self.overhead_s,
                             self.in_step, result)
        self.sink(record)
        self.stopped = record
        return record

    def subscribe(self, event: str, fn):
        """Listen to one of the source's events (sources/base.py names them)."""
        return self.source.subscribe(event, fn)

    def may_come(self, event: str) -> bool:
        """Whether the source can send `event` in this process (Source.may_send; a source
        that does not say: it can)."""
        may_send = getattr(self.source, "may_send", None)
        return may_send is None or bool(may_send(event))

    def snapshot(self) -> dict:
        return {}

    def sealed_records(self, timeout_s: float = 0.2) -> list:
        """At once, the job about to be killed (a second Ctrl-C: the session seals the
        profile): the records this probe holds back, for the writer's seal; [] when there
        are none or they stay busy for `timeout_s`. Never sends them itself."""
        return []

    def _start(self):
        pass

    def _stop(self) -> dict:
        return {}


class SamplingProbe(Probe):
    """A probe that takes `sample(t_s)` every `interval_s` on a daemon thread.

    Each sample is a typed record sent to the sink; the CPU time its thread spends sampling
    is the probe's overhead (it runs off the training thread, but it shares the cores and,
    in Python, the GIL). Its wall time is not: a sampler waiting for the GIL the training
    loop holds, or for a core, costs the job nothing meanwhile (a system sample takes about
    0.25 ms of CPU, and over 6 ms of wall time beside a loop that makes its batches in
    Python).
    """

    budget = None  # the share of one core its samples may take: its waits stretch past
    # interval_s to keep within it (None: every interval_s whatever a sample costs)

    def __init__(self, sink: Sink, clock: Clock, interval_s: float = 0.5, source=None):
        super().__init__(sink, clock, source)
        self.interval_s = interval_s
        self.n_samples = 0
        self.last: dict = {}
        self._halt = threading.Event()
        self._wake = threading.Event()  # wake(): sample now
        self._thread = None

    def sample(self, t_s: float):
        """One measurement taken at `t_s`: a typed sample record (None for a field that is not
        available), or a list of them (one per device), each sent as its own record."""
        raise NotImplementedError

    def take(self) -> float:
        """Take one sample now; the CPU seconds it took (its thread's)."""
        c0 = time.thread_time()
        rows = self.sample(self.clock.now())
        took = time.thread_time() - c0
        self.overhead_s += took
        self.n_samples += 1
        self.last = rows
        for row in (rows if isinstance(rows, list) else [rows]):
            self.sink(row)
        return took

    def wait_after(self, took: float) -> float:
        """The wait before the next sample, after one that took `took` seconds: interval_s,
        or longer where the probe's budget needs it (the sample's cost over the budget, less
        the sample itself)."""
        if not self.budget:
            return self.interval_s
        return max(self.interval_s, took / self.budget - took)

    def snapshot(self):
        return self.last

    def _start(self):
        self._halt.clear()
        self._wake.clear()
        self._thread = threading.Thread(target=self._loop, name=f"paddletune-{self.name}",
                                        daemon=True)
        self._thread.start()

    def wake(self):
        """Take the next sample now rather than at the interval's end (from any thread: the
        sampler's own thread takes it)."""
        self._wake.set()

    def _stop(self):
        self._halt.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=max(2.0, 2 * self.interval_s))
        stuck = self._thread is not None and self._thread.is_alive()  # a hung sample()
        if self.available and not stuck:  # a last sample, so even a short job has one
            try:
                self.take()
            except Exception as err:
                self.available, self.reason = False, f"sampling failed: {err}"
        return {"samples": self.n_samples, "interval_s": self.interval_s}

    def _loop(self):
        while True:
            try:
                took = self.take()
            except Exception as err:  # a broken sampler stops itself, never the job
                self.available, self.reason = False, f"sampling failed: {err}"
                return
            self._wake.wait(self.wait_after(took))
            self._wake.clear()
            if self._halt.is_set():
                return
