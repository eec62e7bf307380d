"""A program's open window of a long job's tail: its steps' figures (moments and a quantile
sketch per part: sketch.DistBuilder) and their memory, scheduler and op records, folded as
they arrive and frozen into a records.StepWindow when the window closes (accumulate.py)."""

from typing import Dict, List, Tuple

from . import records as r
from .sketch import DistBuilder

MAX_FEED_PEAKS = 64
FOLD_STEPS = 256  # steps an open window holds before folding them (add_step)
PARTS = ("wall", "cycle", "feed", "compute", "fetch", "outside", "read", "compute_wait",
         "compute_queued")  # (the last two: the steps that measured them, records.Step)


def window_length_s(t0_s: float) -> float:
    """How long a window opened at `t0_s` lasts: a 256th of the run so far, 1 s to 5 min."""
    return min(max(t0_s / WINDOWS_PER_DOUBLING, WINDOW_MIN_S), WINDOW_MAX_S)


WINDOW_MIN_S, WINDOW_MAX_S = 1.0, 300.0
WINDOWS_PER_DOUBLING = 256  # a window lasts 1/256 of the time since the start


class WindowBuilder:
    """One program's open window: its steps' figures and their per-step records'."""

    def __init__(self, program: int, t0_s: float):
        self.program, self.t0_s, self.t_s = program, t0_s, t0_s
        self.end_s = t0_s + window_length_s(t0_s)
        self.n = self.samples = self.feed_bytes = self.fetch_bytes = 0
        self.batch_sizes: Dict[int, int] = {}
        self.parts = {name: DistBuilder() for name in PARTS}
        self.queue_first = self.queue_last = None
        self.memory = self.sched = None
        self.ops: Dict[Tuple[int, str], list] = {}
        self.op_steps, self.timing = 0, None
        self._pending: List[r.Step] = []  # steps not yet folded (add_step)

    def add_step(self, s: r.Step):
        """Hold the step; its figures are folded FOLD_STEPS at a time (and as the window
        closes), in NumPy: the writer does this for every step of a long job's tail."""
        pending = self._pending
        pending.append(s)
        if len(pending) >= FOLD_STEPS:
            self._fold()

    def _fold(self):
        steps, self._pending = self._pending, []
        if not steps:
            return
        import numpy as np
        columns = dict(zip(r.Step._fields, zip(*steps)))
        self.n += len(steps)
        wall = np.array(columns["wall_s"], dtype=np.float64)
        self.t_s = max(self.t_s, float((np.array(columns["t_s"], dtype=np.float64)
                                        + wall).max()))
        gap = np.array(columns["gap_s"], dtype=np.float64)  # (None: nan)
        gap[~np.isfinite(gap)] = 0.0  # (a first step's: none)
        parts = self.parts
        for name, values in (("wall", wall), ("cycle", wall + gap), ("outside", gap)):
            parts[name].add_many(values)
        for name in ("feed", "compute", "fetch", "read"):
            parts[name].add_many(np.array(columns[f"{name}_s"], dtype=np.float64))
        for name in ("compute_wait", "compute_queued"):
            measured = [v for v in columns[f"{name}_s"] if v is not None]
            if measured:
                parts[name].add_many(np.array(measured, dtype=np.float64))
        sizes = self.batch_sizes
        for size, samples in zip(columns["batch_size"], columns["samples"]):
            self.samples += samples if samples is not None else (size or 0)  # (sample_count)
            if size:
                sizes[size] = sizes.get(size, 0) + 1
        self.feed_bytes += sum(columns["feed_bytes"])
        self.fetch_bytes += sum(columns["fetch_bytes"])
        queues = [q for q in columns["queue"] if q is not None]
        if queues:
            if self.queue_first is None:
                self.queue_first = queues[0]
            self.queue_last = queues[-1]

    def add_memory(self, m: r.MemoryStep):
        if self.memory is None:
            self.memory = _MemoryFold()
        self.memory.add(m)

    def add_sched(self, s: r.SchedStep):
        if self.sched is None:
            self.sched = _SchedFold()
        self.sched.add(s)

    def add_ops(self, o: r.OpsRecord):
        self.op_steps += 1
        self.timing = o.timing
        for op in o.ops:
            row = self.ops.get((op.index, op.type))
            if row is None:
                self.ops[(op.index, op.type)] = [op.dur_s, 1]
            else:
                row[0] += op.dur_s
                row[1] += 1

    def frozen(self) -> r.StepWindow:
        self._fold()
        return r.StepWindow(
            self.t0_s, self.t_s, self.program, self.n, self.samples, dict(self.batch_sizes),
            {name: d.frozen() for name, d in self.parts.items() if d.n},
            self.feed_bytes, self.fetch_bytes, self.queue_first, self.queue_last,
            self.memory.frozen() if self.memory else None,
            self.sched.frozen() if self.sched else None,
            tuple(r.OpTotal(i, t, s, c) for (i, t), (s, c) in sorted(self.ops.items())),
            self.op_steps, self.timing)


class _MemoryFold:
    def __init__(self):
        self.n = self.peak = self.requests = self.allocs = 0
        self.alloc_s = 0.0
        self.phases: Dict[str, int] = {}
        self.batch: Dict[int, int] = {}
        self.feed: Dict[int, int] = {}

    def add(self, m: r.MemoryStep):
        self.n += 1
        self.peak = max(self.peak, m.step_peak_bytes)
        self.requests += m.requests
        self.allocs += m.system_allocs
        self.alloc_s += m.system_alloc_s
        for tag, b in m.phase_peaks.items():
            self.phases[tag] = max(self.phases.get(tag, 0), b)
        _raise(self.batch, m.batch_size, m.step_peak_bytes)
        _raise(self.feed, m.feed_bytes, m.step_peak_bytes)

    def frozen(self) -> r.MemoryWindow:
        return r.MemoryWindow(self.n, self.peak, dict(self.phases), self.requests,
                              self.allocs, self.alloc_s, dict(self.batch),
                              dict(spread(sorted(self.feed.items()), MAX_FEED_PEAKS)))


class _SchedFold:
    def __init__(self):
        self.n = self.ops = self.ready_max = self.spread_n = 0
        self.wall_s = self.sched_s = self.ready_mean_sum = self.concurrency_sum = 0.0
        self.combine_s = self.spread_sum = 0.0
        self.busy_s: List[float] = []
        self.last = None

    def add(self, s: r.SchedStep):
        self.n += 1
        self.wall_s += s.wall_s
        self.ops += s.ops
        self.sched_s += s.sched_s
        self.ready_mean_sum += s.ready_mean
        self.ready_max = max(self.ready_max, s.ready_max)
        self.concurrency_sum += s.concurrency
        self.combine_s += s.combine_s
        if s.place_s and s.wall_s > 0:
            self.spread_sum += (max(s.place_s) - min(s.place_s)) / s.wall_s
            self.spread_n += 1
        for i, b in enumerate(s.busy_s):
            if i < len(self.busy_s):
                self.busy_s[i] += b
            else:
                self.busy_s.append(b)
        self.last = s

    def frozen(self) -> r.SchedWindow:
        last = self.last
        return r.SchedWindow(self.n, self.wall_s, tuple(self.busy_s), self.ops, self.sched_s,
                             self.ready_mean_sum, self.ready_max, self.concurrency_sum,
                             self.combine_s, self.spread_sum, self.spread_n, last.places,
                             last.threads, last.reduce, last.drop_every, dict(last.fused))


def _raise(peaks: dict, key, value):
    if key and value > peaks.get(key, -1):
        peaks[key] = value


def spread(points: list, most: int) -> list:
    """At most `most` of `points`, evenly spread, the first and last kept."""
    if len(points) <= most:
        return points
    last = len(points) - 1
    return [points[round(i * last / (most - 1))] for i in range(most)]
