"""The scheduler probe: the ParallelExecutor's figures per step (a data-parallel
CompiledProgram or fluid.ParallelExecutor) and its local-scope drops.

It listens to the source's sched_step and drop_scope events and sends SchedStep and SchedDrop
records (paddletune/profile/records.py; runtime/events.py's SchedStepRecord and
DropScopeRecord say what each figure measures).
"""

import time

from ..profile.records import SchedDrop, SchedStep
from .base import Probe

_perf = time.perf_counter


class SchedulerProbe(Probe):
    name = "scheduler"
    in_step = True  # its callbacks run in the training loop

    def __init__(self, sink, clock, source=None):
        super().__init__(sink, clock, source)
        self._subs = []
        self.steps = self.drops = 0
        self.last = None

    def _start(self):
        self._subs = [self.subscribe("sched_step", self._on_step),
                      self.subscribe("drop_scope", self._on_drop)]

    def _stop(self):
        for sub in self._subs:
            sub.close()
        self._subs = []
        r = self.last
        out = {"steps": self.steps, "drops": self.drops}
        if r is not None:
            out.update(places=r.num_places, threads=r.num_threads, reduce=r.reduce_strategy,
                       drop_every=r.num_iteration_per_drop_scope, fused=dict(r.fused or {}))
        return out

    def snapshot(self) -> dict:
        r = self.last
        if r is None:
            return {}
        return {"threads": r.num_threads, "places": r.num_places,
                "concurrency": r.concurrency, "ready_mean": r.ready_mean}

    def _on_step(self, r):
        t0 = _perf()
        self.last = r
        self.steps += 1
        self.sink(SchedStep(
            self.clock.rel(t0), r.executor_id, r.program_id, r.step, r.num_places,
            r.num_threads, r.reduce_strategy, r.wall_s, tuple(round(b, 9) for b in r.busy_s),
            r.ops_run, r.sched_s, r.ready_max, r.ready_mean, r.concurrency, r.combine_s,
            tuple(round(p, 9) for p in r.place_s), r.num_iteration_per_drop_scope,
            r.dropped, dict(r.fused or {})))
        self.overhead_s += _perf() - t0

    def _on_drop(self, d):
        t0 = _perf()
        self.drops += 1
        self.sink(SchedDrop(self.clock.rel(d.t), d.executor_id, d.program_id, d.step, d.wall_s,
                            d.held_bytes, d.variables))
        self.overhead_s += _perf() - t0
