"""The ops probe (`--ops`): times every op and sends one `OpsRecord` per step, every op's
(index, type, start, duration), from which the summary ranks op types and single ops.

Subscribing to op_end switches the embedded runtime's executor to its instrumented loop (two
clock reads and an event per op), so this probe costs more than the default ones; its
callback time is its measured overhead.

On a GPU place the runtime times ops with CUDA events (device time, not launch time; see
runtime/gpu_timing.py): such records carry `timing` "cuda_event", and the probe's details say
how the op times were taken ("host" or "cuda_event").

A PyTorch job's ops come from torch.profiler windows (sources/torch/profiler_ops.py): reading a
window happens between two steps, left out of them; the step_end after it carries that time as
`paused_s`, counted here as this probe's overhead. On a GPU those ops carry `timing` "cupti"
(their kernels' device time).
"""

import time

from ..profile.records import OpsRecord, OpTime
from .base import Probe


class OpsProbe(Probe):
    name = "ops"
    in_step = True

    def __init__(self, sink, clock, source=None):
        super().__init__(sink, clock, source)
        self._subs = []
        self._rows = []
        self._key = None  # (program id, step) of the rows being collected
        self._timing = None  # how the collected rows were timed (OpRecord.timing)
        self.timings = set()  # every timing seen
        self.totals = {}  # op type -> [seconds, count], for snapshot()

    def _start(self):
        self._subs = [self.subscribe("op_end", self._on_op),
                      self.subscribe("step_end", self._on_step)]

    def _stop(self):
        for sub in self._subs:
            sub.close()
        self._subs = []
        self._flush()  # a step cut short (error, Ctrl-C) keeps the ops it ran
        return {"op_types": len(self.totals), "timing": "+".join(sorted(self.timings)) or None}

    def _on_op(self, r):
        t0 = time.perf_counter()
        key = (r.program_id, r.step)
        if key != self._key:
            self._flush()
            self._key = key
            self._timing = r.timing
            self.timings.add(r.timing)
        dur = r.t_end - r.t_begin
        self._rows.append(OpTime(r.index, r.type, r.t_begin - self.clock.t0, dur))
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
        self.overhead_s += time.perf_counter() - t0 + getattr(r, "paused_s", 0.0)

    def _flush(self):
        if self._rows:
            program, step = self._key
            self.sink(OpsRecord(program, step, self._timing or "host", tuple(self._rows)))
            self._rows = []
        self._key = None

    def snapshot(self):
        return {t: {"total_s": s, "count": c} for t, (s, c) in self.totals.items()}
