"""What every probe shares: the record sink, the session clock, overhead bookkeeping, and the
background sampling thread of the periodic probes (system, nvml)."""

import threading
import time
from typing import Callable, Optional

Sink = Callable[[dict], None]


class Clock:
    """Seconds since the session began, on the perf_counter clock the runtime's events use."""

    def __init__(self, t0: Optional[float] = None):
        self.t0 = time.perf_counter() if t0 is None else t0

    def rel(self, t_perf: float) -> float:
        return t_perf - self.t0

    def now(self) -> float:
        return time.perf_counter() - self.t0


class Probe:
    """Base class. Subclasses set `name` and implement `_start()`/`_stop()`."""

    name = "probe"
    in_step = False  # True when its cost lands inside the training loop (event callbacks)

    def __init__(self, sink: Sink, clock: Clock):
        self.sink, self.clock = sink, clock
        self.available, self.reason = True, None
        self.overhead_s = 0.0
        self.running = False
        self.stopped = None  # the probe record, once stop() sent it

    def start(self):
        if self.available and not self.running:
            self.running = True
            self._start()
        return self

    def stop(self) -> dict:
        """Stop measuring, send the probe record and return it (once; later calls return it
        again without sending it)."""
        if self.stopped is not None:
            return self.stopped
        result = {}
        if self.running:
            self.running = False
            result = self._stop() or {}
        record = {"type": "probe", "name": self.name, "available": self.available,
                  "reason": self.reason, "overhead_s": self.overhead_s,
                  "in_step": self.in_step, "result": result}
        self.sink(record)
        self.stopped = record
        return record

    def snapshot(self) -> dict:
        return {}

    def _start(self):
        pass

    def _stop(self) -> dict:
        return {}


class SamplingProbe(Probe):
    """A probe that takes `sample()` every `interval_s` on a daemon thread.

    Each sample is sent as {"type": "sample", "probe": name, "t": ..., **fields}; the time
    spent sampling is the probe's overhead (it runs off the training thread, but it shares
    the cores and, in Python, the GIL).
    """

    def __init__(self, sink: Sink, clock: Clock, interval_s: float = 0.5):
        super().__init__(sink, clock)
        self.interval_s = interval_s
        self.n_samples = 0
        self.last: dict = {}
        self._halt = threading.Event()
        self._thread = None

    def sample(self):
        """One measurement: a dict of JSON-able fields (None for what is not available), or
        a list of such dicts (one per device), each sent as its own record with the same t."""
        raise NotImplementedError

    def take(self):
        t0 = time.perf_counter()
        fields = self.sample()
        self.overhead_s += time.perf_counter() - t0
        self.n_samples += 1
        self.last = fields
        t = self.clock.rel(t0)
        for row in (fields if isinstance(fields, list) else [fields]):
            self.sink({"type": "sample", "probe": self.name, "t": t, **row})

    def snapshot(self):
        return self.last

    def _start(self):
        self._halt.clear()
        self._thread = threading.Thread(target=self._loop, name=f"paddletune-{self.name}",
                                        daemon=True)
        self._thread.start()

    def _stop(self):
        self._halt.set()
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
                self.take()
            except Exception as err:  # a broken sampler stops itself, never the job
                self.available, self.reason = False, f"sampling failed: {err}"
                return
            if self._halt.wait(self.interval_s):
                return
