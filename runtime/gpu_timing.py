"""Timing on a GPU place, where CuPy launches kernels asynchronously: a host clock read right
after an op times its launch, not its work. Where the executor measures, and how:

- The step: Executor.run synchronises the place's current stream once per step, after the last
  op and before `compute_s` ends (so compute_s and wall_s include the device's work, and the
  fetches that follow are only the device->host copies). Executor.run therefore returns with
  the device idle, as Paddle's Executor does; this is the one synchronisation a step adds, with
  or without subscribers. CPU places are untouched.
- The ops, only while someone subscribes to op_end (the ops probe, `--ops`): a CUDA event is
  recorded on the current stream before and after each op; nothing waits per op. When the ops
  loop ends the last event is waited for, once, and each op's time is read from its two events
  (cudaEventElapsedTime: device time, ~0.5 us resolution). The OpRecords are emitted then, all
  at once, with `timing == "cuda_event"` (on a CPU place: "host", emitted as each op ends).
  t_begin is placed on the perf_counter clock from an anchor event recorded when the loop
  started: the device may still be finishing earlier work then, so the placement is
  approximate, while the durations are the device's. An op that launches nothing costs ~0.
  With FLAGS_check_nan_inf on, each op's check reads a result back (a sync per op) anyway.
- The cost: two cudaEventRecord calls per op (events are reused from step to step), one
  cudaEventSynchronize and 2 x ops cudaEventElapsedTime per step;
  `benchmarks/bench_runtime.py --place gpu` measures it as `op_events_us_per_step`.
"""

import time

from .events import OpRecord

HOST = "host"
CUDA_EVENT = "cuda_event"


def sync_stream(xp):
    """Wait until the current stream of the current device has done its work."""
    xp.cuda.get_current_stream().synchronize()


class OpEvents:
    """CUDA events around each op of one step's loop; `records()` resolves them once."""

    __slots__ = ("cuda", "pool", "used", "marks", "anchor", "t0")

    def __init__(self, xp, pool):
        self.cuda, self.pool, self.used = xp.cuda, pool, 0  # pool: events kept across steps
        self.marks = []  # (plan op, event before, event after)
        self.anchor = self.mark()
        self.t0 = time.perf_counter()

    def mark(self):
        """Record the next event on the current stream; returns it."""
        if self.used == len(self.pool):
            self.pool.append(self.cuda.Event())
        event = self.pool[self.used]
        self.used += 1
        event.record()
        return event

    def done(self, step, before):
        """`step` ran since `before` was marked."""
        self.marks.append((step, before, self.mark()))

    def records(self, program_id, step_no):
        """Wait for the last event, then the ops' OpRecords (device durations, seconds)."""
        marks, self.marks = self.marks, []
        if not marks:
            return []
        marks[-1][2].synchronize()
        elapsed_ms = self.cuda.get_elapsed_time
        out = []
        for step, before, after in marks:
            t_begin = self.t0 + elapsed_ms(self.anchor, before) * 1e-3
            out.append(OpRecord(program_id, step_no, step.index, step.type, step.role, t_begin,
                                t_begin + elapsed_ms(before, after) * 1e-3, CUDA_EVENT))
        return out
