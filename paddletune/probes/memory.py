"""The memory probe: the memory pool's figures per training step, the allocation breakdown at
the pool's peak, the first per-op trace of each program, out-of-memory details, and the pool's
state when the job ended.

It listens to the source's memory_step / memory_trace / memory_oom events and to step_end
(emitted right after memory_step by the same step: it says whether the run was a startup
program and when it began). Host RSS is not sampled here: the system probe's samples carry it.
With a profile writer's sink the per-step MemoryStep is built by the writer as it flushes, in
its place among the records (profile/deferred.py): off the training thread, and out of this
probe's overhead.

Records (paddletune/profile/records.py): MemoryStep per training step, MemoryPeak whenever the
pool's all-time peak rose (the last one holds the breakdown at the peak), MemoryTrace (the
first per program), MemoryOom (a refused request), MemoryPool (at the end).
"""

import time

from ..profile.deferred import deferred, takes_deferred
from ..profile.records import MemoryOom, MemoryPeak, MemoryPool, MemoryStep, MemoryTrace
from ..profile.schema import SchemaError, decode
from .base import Probe

_perf = time.perf_counter
_OOM_BYTES = {"requested": "requested_bytes", "allocated": "allocated_bytes",
              "reserved": "reserved_bytes", "capacity": "capacity_bytes", "peak": "peak_bytes",
              "free": "free_bytes"}


class MemoryProbe(Probe):
    name = "memory"
    in_step = True  # its callbacks run in the training loop

    def __init__(self, sink, clock, source=None):
        super().__init__(sink, clock, source)
        self._subs = []
        self._pending = None  # the memory_step record of the run whose step_end is next
        self._traced = set()  # program ids whose trace was written
        self.last = None  # the latest memory_step payload
        self.peak_allocated = -1
        self.steps = self.startup_runs = self.requests = self.system_allocs = 0
        self.system_alloc_s = 0.0
        self.ooms = []
        self._defer = takes_deferred(sink)  # the sink builds the MemoryStep (_step) later

    def _start(self):
        self._subs = [self.subscribe("memory_step", self._on_memory),
                      self.subscribe("memory_trace", self._on_trace),
                      self.subscribe("memory_oom", self._on_oom)]
        if self.may_come("memory_step"):  # (a step's end pairs with its figures: none on
            # a machine without them, and no callback each step)
            self._subs.append(self.subscribe("step_end", self._on_step))

    def _stop(self):
        for sub in self._subs:
            sub.close()
        self._subs = []
        pool = self.pool()
        if pool is not None:
            self.sink(pool)
        return {"steps": self.steps, "startup_runs": self.startup_runs,
                "requests": self.requests, "ooms": len(self.ooms)}

    def pool(self):
        """The pool's state now (None before the first memory step)."""
        r = self.last
        if r is None:
            return None
        return MemoryPool(
            self.clock.now(), r.place, r.strategy, r.capacity, r.peak_allocated,
            r.peak_reserved, r.allocated, r.reserved, dict(r.by_tag_at_peak), dict(r.by_tag),
            r.cached_free, r.fragmentation, r.gc, r.inplace, self.steps, self.startup_runs,
            self.requests, self.system_allocs, self.system_alloc_s, len(self.ooms),
            getattr(r, "retries", 0))

    def snapshot(self) -> dict:
        r = self.last
        if r is None:
            return {}
        return {"allocated": r.allocated, "reserved": r.reserved, "capacity": r.capacity,
                "peak_allocated": r.peak_allocated, "steps": self.steps}

    # --- event callbacks -------------------------------------------------------------------------
    def _on_memory(self, r):
        t0 = _perf()
        self._pending = r
        self.last = r
        self.requests += r.requests
        self.system_allocs += r.system_allocs
        self.system_alloc_s += r.system_alloc_s
        if r.peak_allocated > self.peak_allocated:
            self.peak_allocated = r.peak_allocated
            self.sink(MemoryPeak(self.clock.rel(t0), r.program_id, r.step, r.peak_allocated,
                                 r.peak_reserved, dict(r.by_tag_at_peak)))
        self.overhead_s += _perf() - t0

    def _on_step(self, s):
        if self._pending is None:  # (no pool figures this step: a PyTorch job on the CPU)
            return
        t0 = _perf()
        r, self._pending = self._pending, None
        if r is not None and r.executor_id == s.executor_id and r.program_id == s.program_id:
            if s.is_startup:
                self.startup_runs += 1
            else:
                self.steps += 1
                if self._defer:
                    self.sink(deferred((self._step, (r, s))))
                else:
                    self.sink(self._step(r, s))
        self.overhead_s += _perf() - t0

    def _step(self, r, s) -> MemoryStep:
        """The MemoryStep of the memory_step payload `r` and its step_end `s`."""
        return MemoryStep(round(s.t_begin - self.clock.t0, 9), r.program_id, r.step, r.allocated,
                          r.reserved, r.step_peak, r.phase_peaks, r.requests, r.system_allocs,
                          round(r.system_alloc_s, 9), r.batch_size, s.feed_bytes)

    def _on_trace(self, tr):
        t0 = _perf()
        if tr.program_id not in self._traced:
            self._traced.add(tr.program_id)
            self.sink(decode(MemoryTrace, {
                "t_s": self.clock.rel(t0), "program": tr.program_id, "step": tr.step,
                "batch_size": tr.batch_size, "gc": tr.gc, "inplace": tr.inplace,
                "persistable_bytes": tr.persistable_bytes, "ops": tr.ops,
                "last_value_use": tr.last_value_use,
                "inplace_candidates": {str(k): [list(p) for p in v]
                                       for k, v in tr.inplace_candidates.items()}}))
        self.overhead_s += _perf() - t0

    def _on_oom(self, details):
        t0 = _perf()
        self.ooms.append(details)
        self.sink(oom_record(self.clock.rel(t0), details))
        self.overhead_s += _perf() - t0


def oom_record(t_s: float, details: dict) -> MemoryOom:
    """A pool's out-of-memory details as a record (a field that does not fit is left out)."""
    fields = {_OOM_BYTES.get(k, k): v for k, v in details.items()}
    fields["largest"] = [list(x) for x in fields.get("largest") or ()]
    try:
        return decode(MemoryOom, {"t_s": t_s, **fields})
    except SchemaError:
        keep = {k: fields[k] for k in ("place", "requested_bytes", "capacity_bytes", "op_type",
                                       "batch_size") if k in fields}
        return decode(MemoryOom, {"t_s": t_s, **keep})
