"""The scheduler probe: the ParallelExecutor's figures per step (a data-parallel
CompiledProgram or fluid.ParallelExecutor) and its local-scope drops.

It listens to the runtime's sched_step and drop_scope events. Records (type "sched"; `t`
seconds on the session clock when the record was taken, durations in seconds):

  {"what": "step", "t", "executor", "program", "step", "places", "threads", "reduce",
   "wall_s", "busy_s" [per thread], "ops", "sched_s", "ready_max", "ready_mean",
   "concurrency", "combine_s", "place_s" [per place], "drop_every", "dropped", "fused"}
  {"what": "drop", "t", "executor", "program", "step", "wall_s", "held_bytes", "variables"}

(see runtime/events.py SchedStepRecord / DropScopeRecord for what each figure measures).
"""

import time

from runtime import events

from .base import Probe

_perf = time.perf_counter


class SchedulerProbe(Probe):
    name = "scheduler"
    in_step = True  # its callbacks run in the training loop

    def __init__(self, sink, clock):
        super().__init__(sink, clock)
        self._subs = []
        self.steps = self.drops = 0
        self.last = None

    def _start(self):
        self._subs = [events.subscribe("sched_step", self._on_step),
                      events.subscribe("drop_scope", self._on_drop)]

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
        self.sink({"type": "sched", "what": "step", "t": self.clock.rel(t0),
                   "executor": r.executor_id, "program": r.program_id, "step": r.step,
                   "places": r.num_places, "threads": r.num_threads,
                   "reduce": r.reduce_strategy, "wall_s": r.wall_s,
                   "busy_s": [round(b, 9) for b in r.busy_s], "ops": r.ops_run,
                   "sched_s": r.sched_s, "ready_max": r.ready_max,
                   "ready_mean": r.ready_mean, "concurrency": r.concurrency,
                   "combine_s": r.combine_s, "place_s": [round(p, 9) for p in r.place_s],
                   "drop_every": r.num_iteration_per_drop_scope, "dropped": r.dropped,
                   "fused": dict(r.fused or {})})
        self.overhead_s += _perf() - t0

    def _on_drop(self, d):
        t0 = _perf()
        self.drops += 1
        self.sink({"type": "sched", "what": "drop", "t": self.clock.rel(d.t),
                   "executor": d.executor_id, "program": d.program_id, "step": d.step,
                   "wall_s": d.wall_s, "held_bytes": d.held_bytes, "variables": d.variables})
        self.overhead_s += _perf() - t0
