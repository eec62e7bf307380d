"""The step probe: one `step` record per Executor.run (feed / compute / fetch, and the gap
since the same executor's previous run ended), and one `program` record per compiled program.

The gap is the training loop's time outside the runtime: in a synchronous loop, preparing
the next batch. Its callbacks run on the training thread, so their cost is this probe's
overhead (timed around each callback).

In a job fed by a DataLoader/PyReader each step record also carries `queue`: the queue's fill
as the last batch before the step was popped (the reader_pop event's size). Over a window of
steps, the fill's fall is the batches made before the window began (the queue a short trial
starts with): `paddletune tune` leaves them out of a trial's throughput (tune/trials.py).
"""

import time

from runtime import events

from .base import Probe


class StepProbe(Probe):
    name = "step"
    in_step = True

    def __init__(self, sink, clock):
        super().__init__(sink, clock)
        self._last_end = {}  # executor id -> perf time its last run ended
        self._seen_programs = set()
        self._sticky = {}  # (executor, program) -> the rarely-changing fields last written
        self._subs = []
        self.n_steps = 0  # training (non-startup) steps
        self.last = None
        self._last_fields = {}
        self._queue = None  # the queue's fill at the latest pop, until a step takes it

    def _start(self):
        self._subs = [events.subscribe("step_end", self._on_step),
                      events.subscribe("compile", self._on_compile),
                      events.subscribe("reader_pop", self._on_pop)]

    def _on_pop(self, r):
        if not r.speed_test:  # (a peek in speed-test mode takes nothing from the queue)
            self._queue = r.size

    def _stop(self):
        for sub in self._subs:
            sub.close()
        self._subs = []
        return {"steps": self.n_steps}

    def _on_step(self, r):
        t0 = time.perf_counter()
        prev = self._last_end.get(r.executor_id)
        self._last_end[r.executor_id] = r.t_end
        gap = r.t_begin - prev if prev is not None else None
        if not r.is_startup:
            self.n_steps += 1
        self.last = record = {
            "type": "step", "t": _ns(r.t_begin - self.clock.t0), "program": r.program_id,
            "executor": r.executor_id, "step": r.step, "wall_s": _ns(r.t_end - r.t_begin),
            "feed_s": _ns(r.feed_s), "compute_s": _ns(r.compute_s), "fetch_s": _ns(r.fetch_s),
            "gap_s": None if gap is None else _ns(gap), "batch_size": r.batch_size,
            "feed_bytes": r.feed_bytes, "fetch_bytes": r.fetch_bytes}
        if r.read_s:  # a non-iterable DataLoader's batch was awaited inside the run
            record["read_s"] = _ns(r.read_s)
        if self._queue is not None and not r.is_startup:
            record["queue"], self._queue = self._queue, None
        self._add_changed(record, r)
        self.sink(record)
        self.overhead_s += time.perf_counter() - t0

    def _add_changed(self, record, r):
        """The fields that rarely change, only when they differ from this executor and
        program's previous step (load() carries them forward): keeps fast loops' profiles
        small."""
        fields = {"n_ops": r.n_ops, "fetch": list(r.fetch_names), "feed": list(r.feed_names),
                  "startup": r.is_startup, "place": r.place}
        key = (r.executor_id, r.program_id)
        previous = self._sticky.get(key)
        if previous != fields:
            self._sticky[key] = fields
            record.update(fields if previous is None else
                          {k: v for k, v in fields.items() if previous[k] != v})
        self._last_fields = fields

    def _on_compile(self, r):
        t0 = time.perf_counter()
        if r.program is not None and r.program_id not in self._seen_programs:
            self._seen_programs.add(r.program_id)
            self.sink({"type": "program", "t": self.clock.now(), "program": r.program_id,
                       "compile_s": r.compile_s, "ops": describe_ops(r.program)})
        self.overhead_s += time.perf_counter() - t0

    def snapshot(self):
        last = None if self.last is None else {**self.last, **self._last_fields}
        return {"steps": self.n_steps, "last": last}


# attrs the advisors read (ADVICE.md #8: cuDNN off for global pooling / transposed conv)
ADVICE_ATTRS = ("use_cudnn", "global_pooling", "pooling_type")


def describe_ops(program):
    """The ops of a program's global block as plain dicts (type, role, inputs, outputs, and
    "attrs": those of ADVICE_ATTRS the op has, only when it has any)."""
    return [_describe(op) for op in program.global_block().ops]


def _describe(op):
    out = {"type": op.type, "role": int(op.attrs.get("op_role", 0) or 0),
           "inputs": {k: list(v) for k, v in op.inputs.items()},
           "outputs": {k: list(v) for k, v in op.outputs.items()}}
    attrs = {k: op.attrs[k] for k in ADVICE_ATTRS if k in op.attrs}
    if attrs:
        out["attrs"] = attrs
    return out


def _ns(seconds):
    """Seconds rounded to the nanosecond: the clock's resolution, and a shorter JSON number."""
    return round(seconds, 9)
