"""The ops probe (`--ops`): times every op and sends one `ops` record per Executor.run,
[[index, type, t, dur_s], ...], from which the summary ranks op types and single ops.

Subscribing to op_end switches the executor to its instrumented loop (two clock reads and an
event per op), so this probe costs more than the default ones; its callback time is its
measured overhead.
"""

import time

from runtime import events

from .base import Probe


class OpsProbe(Probe):
    name = "ops"
    in_step = True

    def __init__(self, sink, clock):
        super().__init__(sink, clock)
        self._subs = []
        self._rows = []
        self._key = None  # (program id, step) of the rows being collected
        self.totals = {}  # op type -> [seconds, count], for snapshot()

    def _start(self):
        self._subs = [events.subscribe("op_end", self._on_op),
                      events.subscribe("step_end", self._on_step)]

    def _stop(self):
        for sub in self._subs:
            sub.close()
        self._subs = []
        self._flush()  # a step cut short (error, Ctrl-C) keeps the ops it ran
        return {"op_types": len(self.totals)}

    def _on_op(self, r):
        t0 = time.perf_counter()
        key = (r.program_id, r.step)
        if key != self._key:
            self._flush()
            self._key = key
        dur = r.t_end - r.t_begin
        self._rows.append([r.index, r.type, r.t_begin - self.clock.t0, dur])
        total = self.totals.get(r.type)
        if total is None:
            self.totals[r.type] = [dur, 1]
        else:
            total[0] += dur
            total[1] += 1
        self.overhead_s += time.perf_counter() - t0

    def _on_step(self, r):
        t0 = time.perf_counter()
        self._flush()
        self.overhead_s += time.perf_counter() - t0

    def _flush(self):
        if self._rows:
            program, step = self._key
            self.sink({"type": "ops", "program": program, "step": step, "ops": self._rows})
            self._rows = []
        self._key = None

    def snapshot(self):
        return {t: {"total_s": s, "count": c} for t, (s, c) in self.totals.items()}
