"""The memory probe: the CPU memory pool's figures per training step, the allocation
breakdown at the pool's peak, the first per-op trace of each program, and out-of-memory
details.

It listens to the runtime's memory_step / memory_trace / memory_oom events and to step_end
(emitted right after memory_step by the same Executor.run: it says whether the run was a
startup program and when it began). Host RSS is not sampled here: the system probe's
samples carry it (`rss_bytes`).

Records (type "memory"; `t` seconds on the session clock, bytes and seconds):

  {"what": "step", "t", "program", "step", "allocated", "reserved", "step_peak",
   "phase_peaks" {category: bytes}, "requests", "system_allocs", "system_alloc_s",
   "batch_size", "feed_bytes"}                 one per training (non-startup) run
  {"what": "peak", "t", "program", "step", "peak_allocated", "peak_reserved",
   "by_tag" {category: bytes}}                 whenever the pool's all-time peak rose; the
                                               last one holds the breakdown at the peak
  {"what": "trace", "t", "program", "step", "batch_size", "gc", "inplace",
   "persistable_bytes", "ops", "last_value_use", "inplace_candidates"}   first per program
  {"what": "oom", "t", ...PoolOutOfMemory details}   a pool refused a request
"""

import time

from runtime import events

from .base import Probe

_perf = time.perf_counter


class MemoryProbe(Probe):
    name = "memory"
    in_step = True  # its callbacks run in the training loop

    def __init__(self, sink, clock):
        super().__init__(sink, clock)
        self._subs = []
        self._pending = None  # the memory_step record of the run whose step_end is next
        self._traced = set()  # program ids whose trace was written
        self.last = None  # the latest MemoryStepRecord
        self.peak_allocated = -1
        self.steps = self.startup_runs = self.requests = self.system_allocs = 0
        self.system_alloc_s = 0.0
        self.ooms = []

    def _start(self):
        self._subs = [events.subscribe("memory_step", self._on_memory),
                      events.subscribe("step_end", self._on_step),
                      events.subscribe("memory_trace", self._on_trace),
                      events.subscribe("memory_oom", self._on_oom)]

    def _stop(self):
        for sub in self._subs:
            sub.close()
        self._subs = []
        return self.result()

    def result(self) -> dict:
        r = self.last
        out = {"steps": self.steps, "startup_runs": self.startup_runs,
               "requests": self.requests, "system_allocs": self.system_allocs,
               "system_alloc_s": self.system_alloc_s, "ooms": len(self.ooms),
               "rss": "see the system probe's samples (rss_bytes)"}
        if r is not None:
            out.update(place=r.place, strategy=r.strategy, capacity=r.capacity,
                       peak_allocated=r.peak_allocated, peak_reserved=r.peak_reserved,
                       allocated=r.allocated, reserved=r.reserved,
                       by_tag_at_peak=dict(r.by_tag_at_peak), by_tag=dict(r.by_tag),
                       cached_free=r.cached_free, fragmentation=r.fragmentation,
                       gc=r.gc, inplace=r.inplace)
        return out

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
            self.sink({"type": "memory", "what": "peak", "t": self.clock.rel(t0),
                       "program": r.program_id, "step": r.step,
                       "peak_allocated": r.peak_allocated, "peak_reserved": r.peak_reserved,
                       "by_tag": dict(r.by_tag_at_peak)})
        self.overhead_s += _perf() - t0

    def _on_step(self, s):
        t0 = _perf()
        r, self._pending = self._pending, None
        if r is not None and r.executor_id == s.executor_id and r.program_id == s.program_id:
            if s.is_startup:
                self.startup_runs += 1
            else:
                self.steps += 1
                self.sink({"type": "memory", "what": "step",
                           "t": round(s.t_begin - self.clock.t0, 9),
                           "program": r.program_id, "step": r.step, "allocated": r.allocated,
                           "reserved": r.reserved, "step_peak": r.step_peak,
                           "phase_peaks": r.phase_peaks, "requests": r.requests,
                           "system_allocs": r.system_allocs,
                           "system_alloc_s": round(r.system_alloc_s, 9),
                           "batch_size": r.batch_size, "feed_bytes": s.feed_bytes})
        self.overhead_s += _perf() - t0

    def _on_trace(self, tr):
        t0 = _perf()
        if tr.program_id not in self._traced:
            self._traced.add(tr.program_id)
            self.sink({"type": "memory", "what": "trace", "t": self.clock.rel(t0),
                       "program": tr.program_id, "step": tr.step, "batch_size": tr.batch_size,
                       "gc": tr.gc, "inplace": tr.inplace,
                       "persistable_bytes": tr.persistable_bytes, "ops": tr.ops,
                       "last_value_use": tr.last_value_use,
                       "inplace_candidates": {str(k): list(v) for k, v in
                                              tr.inplace_candidates.items()}})
        self.overhead_s += _perf() - t0

    def _on_oom(self, details):
        t0 = _perf()
        self.ooms.append(details)
        self.sink({"type": "memory", "what": "oom", "t": self.clock.rel(t0), **details})
        self.overhead_s += _perf() - t0
