"""The step probe: one `Step` record per step (feed / compute / fetch, and the gap since the
same executor's previous step ended), and one `Program` record per compiled program.

The gap is the training loop's time outside the framework: in a synchronous loop, preparing
the next batch. Its callbacks run on the training thread, so their cost is this probe's
overhead (timed around each callback); the events it queues through a writer's tap (below)
cost the training thread an append each, which is not timed: its overhead then reads about
nothing (benchmarks/torch_hook_sections.py times the hooks and what they call in place).

When the sink is a profile writer's and the source says which class its step and pop
payloads are (Source.payload_type), the probe subscribes the writer's `tap` to them: the
training thread only queues each event as it is (a deque's append, no Python frame of this
probe's), and the writer turns each into its Step record as it flushes, in the records' order,
off the training thread (where Python runs warm, in a batch: the same bytecodes cost several
times less). Counting the steps and taking the queue's fill happen there too, so `n_steps` and
`last` trail the loop by up to a flush interval (0.5 s; 0.2 s under --live), and stopping
the probe flushes the writer first. Building the records there is the writer's cost, not this
probe's. Any other sink, or another source, gets the Step at once from a callback. In a
process the job forked (no profile is written there) the queue is dropped at each DataLoader
pass's start and end.

In a job fed by a DataLoader each step record also carries `queue`: the queue's fill as the
last batch before the step was popped (the reader_pop or reader_batch event's size). Over a
window of steps, the fill's fall is the batches made before the window began (the queue a
short trial starts with): `paddletune tune` leaves them out of a trial's throughput
(tune/trials.py).

An eager source's step_end may carry `paused_s`: its own work between two steps (an --ops
window's reading), left out of the gap (the ops probe counts it as its overhead); and
`eval_s`: the DataLoader passes that ran between two steps (evaluation), left out of the gap
too (the reader probe's ReaderEnd records say which and how long).
"""

import os
import time
from typing import Optional

from ..profile.deferred import writer_of
from ..profile.records import CudaGraphEvent, Program, ProgramOp, Step
from ..profile.schema import made_in_c
from .base import Probe

_new_step = made_in_c(Step)  # (once a step, on the writer's thread)
STEP_AND_POPS = ("step_end", "reader_pop", "reader_batch")  # (a reader_batch is a pop too)


class StepProbe(Probe):
    name = "step"
    in_step = True

    def __init__(self, sink, clock, source=None):
        super().__init__(sink, clock, source)
        self._last_end = {}  # executor id -> perf time its last run ended (_record's)
        self._seen_programs = set()
        self._subs = []
        self.n_steps = 0  # training (non-startup) steps
        self.last = None  # the latest Step built (queued through a tap: at the writer's flush)
        self._queue = None  # the queue's fill at the latest pop, until a step takes it
        self._writer = None  # the profile writer the steps and pops are queued to (a tap)
        self._owner = None  # the pid that queues to it

    def _start(self):
        tapped = self._tap()
        if tapped is not None:
            tap, events = tapped
            self._subs = [self.subscribe(event, tap) for event in events]
            if self.may_come("reader_state"):
                self._subs.append(self.subscribe("reader_state", self._on_pass))
        else:
            self._subs = [self.subscribe("step_end", self._on_step),
                          self.subscribe("reader_pop", self._from_pop),
                          self.subscribe("reader_batch", self._from_pop)]  # (a pop too)
        self._subs += [self.subscribe("compile", self._on_compile),
                       self.subscribe("cuda_graph", self._on_graph)]

    def _tap(self):
        """(the profile writer's queue for the steps and pops as they come, the events to
        queue there); None where the sink is not a writer's, or the source does not say the
        class of each of those events' payloads that can come (then none is queued: a step
        takes the fill of the pops before it, so the two go one way)."""
        writer = writer_of(self.sink)
        payload_type = getattr(self.source, "payload_type", None)
        if writer is None or payload_type is None:
            return None
        events = [event for event in STEP_AND_POPS if self.may_come(event)]
        kinds = {event: payload_type(event) for event in events}
        if "step_end" not in kinds or None in kinds.values():
            return None
        self._writer, self._owner = writer, os.getpid()
        tap = writer.tap({kind: self._from_step_end if event == "step_end" else self._from_pop
                          for event, kind in kinds.items()})
        return tap, events

    def _on_pass(self, r):
        """A DataLoader pass starts or ends: in a process the job forked, whose profile is
        not written, the writer's queue is dropped (its flush drops it there), so the pops
        queued through the tap do not pile up in a child that reads without training."""
        if os.getpid() != self._owner:
            self._writer.flush()

    def _stop(self):
        for sub in self._subs:
            sub.close()
        self._subs = []
        if self._writer is not None:  # (the steps queued so far counted: n_steps)
            self._writer.flush()
        return {"steps": self.n_steps}

    def _from_pop(self, r):
        """A reader_pop or reader_batch: the queue's fill the next step takes (no record)."""
        if not r.speed_test:  # (a peek in speed-test mode takes nothing from the queue)
            self._queue = r.size

    def _on_step(self, r):
        """A step_end at once (no tap), timed: this runs on the training thread."""
        t0 = time.perf_counter()
        self.sink(self._from_step_end(r))
        self.overhead_s += time.perf_counter() - t0

    def _from_step_end(self, r) -> Step:
        """In the step's order: the count, the queue's fill (which the next pop replaces),
        and the record."""
        queue = None
        if not r.is_startup:
            self.n_steps += 1
            queue, self._queue = self._queue, None
        return self._record(r, queue)

    def _record(self, r, queue) -> Step:
        """The Step record of the step_end event `r` (`queue`: the fill its pop saw). Called
        once per step in the steps' order (at once, or as the writer flushes: one flush at a
        time), so the executor's previous end is its previous step's."""
        prev = self._last_end.get(r.executor_id)
        self._last_end[r.executor_id] = r.t_end
        self.last = step = _new_step((  # (every field, in order: this runs every step)
            r.t_begin - self.clock.t0, r.program_id, r.executor_id, r.step,
            r.t_end - r.t_begin, r.feed_s, r.compute_s, r.fetch_s,
            None if prev is None else (r.t_begin - prev - getattr(r, "paused_s", 0.0)
                                       - getattr(r, "eval_s", 0.0)),
            r.batch_size, r.feed_bytes, r.fetch_bytes, r.read_s, queue, r.n_ops, r.fetch_names,
            r.feed_names, r.is_startup, r.place, None, None, getattr(r, "compute_wait_s", None),
            getattr(r, "compute_queued_s", None), _samples(r)))
        return step

    def _on_compile(self, r):
        t0 = time.perf_counter()
        if r.program is not None and r.program_id not in self._seen_programs:
            self._seen_programs.add(r.program_id)
            self.sink(Program(self.clock.now(), r.program_id, r.compile_s,
                              describe_ops(r.program)))
        self.overhead_s += time.perf_counter() - t0

    def _on_graph(self, r):
        """The embedded runtime captured a GPU program's steps into a CUDA graph, or keeps them
        eager (runtime/cuda_graph.py)."""
        t0 = time.perf_counter()
        feed = ", ".join("x".join(str(d) for d in shape) if shape else "scalar"
                         for shape in r.feed_shapes)
        if r.captured:
            message = (f"program {r.program_id}, feed {feed}: captured into a CUDA graph "
                       f"({r.graph_bytes / 2**20:.1f} MiB); its steps replay with one launch")
        else:
            message = f"program {r.program_id}, feed {feed}: steps run eagerly: {r.reason}"
        self.sink(CudaGraphEvent(self.clock.now(), r.program_id, r.captured, r.graph_bytes,
                                 feed, message))
        self.overhead_s += time.perf_counter() - t0

    def snapshot(self):
        return {"steps": self.n_steps, "last": self.last}


# attrs the advisors read (docs/advice.md #8: cuDNN off for global pooling / transposed conv)
ADVICE_ATTRS = ("use_cudnn", "global_pooling", "pooling_type")


def _samples(r) -> Optional[int]:
    """A step_end's samples where its batches were several (None: its batch_size's)."""
    samples = getattr(r, "samples", None)
    return samples if samples and samples != r.batch_size else None


def describe_ops(program) -> tuple:
    """The ops of a program's global block (type, role, inputs, outputs, and the attrs of
    ADVICE_ATTRS it has)."""
    return tuple(_describe(op) for op in program.global_block().ops)


def _describe(op) -> ProgramOp:
    attrs = {k: _scalar(op.attrs[k]) for k in ADVICE_ATTRS if k in op.attrs}
    return ProgramOp(op.type, int(op.attrs.get("op_role", 0) or 0),
                     {k: tuple(v) for k, v in op.inputs.items()},
                     {k: tuple(v) for k, v in op.outputs.items()}, attrs)


def _scalar(value):
    return value if isinstance(value, (bool, int, float, str)) or value is None else str(value)
