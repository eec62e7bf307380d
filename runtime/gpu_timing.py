"""Timing on a GPU place, where CuPy launches kernels asynchronously: a host clock read right
after an op times its launch, not its work. Where the executor measures, and how:

- The step: Executor.run synchronises the place's current stream once per step, after the last
  op and before `compute_s` ends (so compute_s and wall_s include the device's work, and the
  fetches that follow are only the device->host copies). Executor.run therefore returns with
  the device idle, as Paddle's Executor does; this is the one synchronisation a step adds, with
  or without subscribers. CPU places are untouched.
- The ops, only while someone subscribes to op_end (the ops probe, `--ops`): a CUDA event is
  recorded on the current stream after each op (and one, the anchor, before the first): an op
  runs from the previous op's event to its own; nothing waits per op. When the ops
  loop ends the last event is waited for, once, and each op's time is read from its two events
  (cudaEventElapsedTime: device time, ~0.5 us resolution). The OpRecords are emitted then, all
  at once, with `timing == "cuda_event"` (on a CPU place: "host", emitted as each op ends).
  t_begin is placed on the perf_counter clock from an anchor event recorded when the loop
  started: the device may still be finishing earlier work then, so the placement is
  approximate, while the durations are the device's. An op that launches nothing costs ~0.
  With FLAGS_check_nan_inf on, each op's check reads a result back (a sync per op) anyway.
- The cost: one cudaEventRecord call per op (events are reused from step to step), one
  cudaEventSynchronize and one cudaEventElapsedTime per op per step (it was two of each: about
  20 us an op on an H100, half of it saved by sharing the events between neighbours);
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
    """CUDA events between the ops of one step's loop; `records()` resolves them once. One
    event per op: an op runs from the event that ended the op before it (the loop's anchor for
    the first) to its own, as nothing else is queued between two ops of the loop."""

    __slots__ = ("cuda", "pool", "used", "marks", "anchor", "last", "t0")

    def __init__(self, xp, pool):
        self.cuda, self.pool, self.used = xp.cuda, pool, 0  # pool: events kept across steps
        self.marks = []  # (plan op, event before, event after)
        self.anchor = self.last = self.mark()
        self.t0 = time.perf_counter()

    def mark(self):
        """Record the next event on the current stream; returns it."""
        if self.used == len(self.pool):
            self.pool.append(self.cuda.Event())
        event = self.pool[self.used]
        self.used += 1
        event.record()
        return event

    def begin(self):
        """The event the next op starts at: the end of the op before it."""
        return self.last

    def done(self, step, before):
        """`step` ran since `before`."""
        self.last = self.mark()
        self.marks.append((step, before, self.last))

    def records(self, program_id, step_no):
        """Wait for the last event, then the ops' OpRecords (device durations, seconds)."""
        marks, self.marks = self.marks, []
        if not marks:
            return []
        marks[-1][2].synchronize()
        elapsed_ms = self.cuda.get_elapsed_time
        out = []
        prev_after, offset_ms = self.anchor, 0.0
        for step, before, after in marks:
            if before is not prev_after:  # not back to back (not the executor's loop)
                offset_ms = elapsed_ms(self.anchor, before)
            dur_ms = elapsed_ms(before, after)
            t_begin = self.t0 + offset_ms * 1e-3
            out.append(OpRecord(program_id, step_no, step.index, step.type, step.role, t_begin,
                                t_begin + dur_ms * 1e-3, CUDA_EVENT))
            prev_after, offset_ms = after, offset_ms + dur_ms
        return out
