"""Bounding the record stream, whatever the job's length.

An `Accumulator` takes records in the order they happen and decides what is kept:

- the first `head_steps` training steps of each program are kept in full (the warm-up and a
  first picture), with their memory, scheduler and op records; so are startup runs and every
  step of a --speed-test window;
- each later step is folded into its program's open window (records.StepWindow: counts,
  sums, moments and a quantile sketch per part of the step), with its memory, scheduler and
  op records; a window closes `window_length_s` after it opened, so a run of a day writes a
  couple of thousand windows;
- of those later steps, the slowest (SLOWEST per program) and a reservoir sample (RESERVOIR
  per program, Algorithm R) are also written in full, as exemplars;
- a loader's reader intervals after its first HEAD_INTERVALS, and a probe's samples after
  its first HEAD_SAMPLES, are merged per window the same way;
- everything else (programs, events, probe records, pool peaks, traces) is kept as it is:
  there is one of each, or a few.

`add(record)` returns the records to write (the record itself, a closed window, exemplars),
so the writer's file holds exactly what a loader's accumulator keeps; `kept` holds them for
the summary. Fed a file's records (a v1 profile's one-record-per-step stream included), the
same rules bound what the loader keeps.
"""

import heapq
import random
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from . import records as r
from .reader_merge import merge_intervals
from .samples import sample_window
from .windows import WindowBuilder, window_length_s

HEAD_STEPS = 1000  # training steps per program kept in full
HEAD_SAMPLES = 240  # samples per probe and entity kept in full (2 minutes at 0.5 s)
HEAD_INTERVALS = 240  # reader intervals per loader kept in full
SLOWEST = 16  # slowest steps of the tail kept in full, per program
RESERVOIR = 32  # randomly chosen steps of the tail kept in full, per program


@dataclass
class Kept:
    """What an accumulator keeps, by kind, in the order it arrived."""

    header: Optional[r.Header] = None
    steps: List[r.Step] = field(default_factory=list)
    windows: List[r.StepWindow] = field(default_factory=list)
    slow: List[r.Step] = field(default_factory=list)
    sampled: Dict[Tuple[int, int], r.Step] = field(default_factory=dict)
    ops: List[r.OpsRecord] = field(default_factory=list)
    programs: Dict[int, r.Program] = field(default_factory=dict)
    system: List[r.SystemSample] = field(default_factory=list)
    gpu: List[r.GpuSample] = field(default_factory=list)
    workers: List[r.WorkerSample] = field(default_factory=list)
    sample_windows: List[r.SampleWindow] = field(default_factory=list)
    events: list = field(default_factory=list)
    probes: Dict[str, r.ProbeRecord] = field(default_factory=dict)
    reader: list = field(default_factory=list)
    memory: list = field(default_factory=list)
    sched: list = field(default_factory=list)
    summary: object = None  # the summary record read from a file
    last_t_s: float = 0.0


class Accumulator:
    def __init__(self, head_steps: Optional[int] = None, seed: int = 0):
        self.kept = Kept()
        self.head_steps = head_steps
        self._speed_test = None  # "baseline" / "ceiling" while a speed-test window runs
        self._windows: Dict[int, "WindowBuilder"] = {}  # program -> its open window
        self._tail: Dict[int, "_TailExemplars"] = {}
        self._intervals: Dict[int, int] = defaultdict(int)  # loader -> intervals seen
        self._pending_intervals: Dict[tuple, list] = {}  # (loader, pass, speed_test) -> open
        self._samples: Dict[tuple, int] = defaultdict(int)  # (probe, key) -> samples seen
        self._pending_samples: Dict[tuple, list] = {}
        self._random = random.Random(seed)

    # --- the stream ------------------------------------------------------------------------------
    def add(self, record) -> list:
        """Keep or fold `record`; the records to write, in order."""
        handler = _HANDLERS.get(type(record))
        out = handler(self, record) if handler else self._keep_other(record)
        t = getattr(record, "t_s", None)
        if isinstance(t, float) and t > self.kept.last_t_s:
            self.kept.last_t_s = t
        return out

    def tick(self, now_s: float) -> list:
        """Close the windows whose time is up (the writer calls it as it flushes)."""
        out = []
        for program, w in list(self._windows.items()):
            if now_s >= w.end_s:
                out.append(self._close_window(program))
        out += self._close_intervals(lambda key, rows: now_s >= _interval_end(rows))
        out += self._close_samples(lambda key, rows: now_s >= _sample_end(rows))
        return out

    def close(self) -> list:
        """Close every open window (the job ended)."""
        out = [self._close_window(p) for p in list(self._windows)]
        out += self._close_intervals(lambda key, rows: True)
        out += self._close_samples(lambda key, rows: True)
        return out

    # --- steps -----------------------------------------------------------------------------------
    def _header(self, h: r.Header) -> list:
        self.kept.header = h
        if self.head_steps is None:
            self.head_steps = h.options.head_steps or HEAD_STEPS
        return [h]

    def _full(self, step_no: int) -> bool:
        return step_no < (self.head_steps or HEAD_STEPS) or self._speed_test is not None

    def _step(self, s: r.Step) -> list:
        if s.exemplar is not None:  # a file's exemplar: already counted in its window
            return self._keep_exemplar(s)
        if s.startup or self._full(s.step):
            self.kept.steps.append(s)
            return [s]
        return self._tail_step(s)

    def _tail_step(self, s: r.Step) -> list:
        """A step of the tail (every step of a long job but its first thousand): folded into
        its program's window and looked at as an exemplar (_TailExemplars' rules, written
        out: this runs for every step); the records to write."""
        program = s.program
        w = self._windows.get(program)
        if w is None or s.t_s >= w.end_s:
            out = self._roll(program, s.t_s)
            w = self._windows[program]
        else:
            out = []
        w.add_step(s)
        tail = self._tail.get(program)
        if tail is None:
            tail = self._tail[program] = _TailExemplars()
        heap = tail.heap
        gap = s.gap_s
        cycle = s.wall_s + gap if gap else s.wall_s  # (s.cycle_s)
        if len(heap) < SLOWEST:
            heapq.heappush(heap, cycle)
            out.append(self._keep_exemplar(s._replace(exemplar="slow"))[0])
        elif cycle > heap[0]:
            heapq.heapreplace(heap, cycle)
            out.append(self._keep_exemplar(s._replace(exemplar="slow"))[0])
        seen = tail.seen = tail.seen + 1
        if seen <= RESERVOIR:
            out.append(self._keep_exemplar(s._replace(exemplar="sample", slot=seen - 1))[0])
        else:
            j = int(self._random.random() * seen)  # (Algorithm R)
            if j < RESERVOIR:
                out.append(self._keep_exemplar(s._replace(exemplar="sample", slot=j))[0])
        return out

    def _roll(self, program: int, t_s: float) -> list:
        """Open `program`'s window for a record at `t_s`, closing the old one if its time
        is up; the closed window to write, if any."""
        w = self._windows.get(program)
        if w is not None and t_s < w.end_s:
            return []
        out = [self._close_window(program)] if w is not None else []
        self._windows[program] = WindowBuilder(program, t_s)
        return out

    def _close_window(self, program: int) -> r.StepWindow:
        window = self._windows.pop(program).frozen()
        self.kept.windows.append(window)
        return window

    def _keep_exemplar(self, s: r.Step) -> list:
        if s.exemplar == "slow":
            self.kept.slow.append(s)
        else:
            self.kept.sampled[(s.program, s.slot or 0)] = s
        return [s]

    def _window(self, w: r.StepWindow) -> list:
        self.kept.windows.append(w)
        return [w]

    def _per_step(self, record, add) -> list:
        """A memory, scheduler or ops record of a step: kept with a full step, else folded
        into its program's window."""
        if self._full(record.step):
            getattr(self.kept, _FAMILY[type(record)]).append(record)
            return [record]
        out = self._roll(record.program, getattr(record, "t_s", self.kept.last_t_s))
        add(self._windows[record.program], record)
        return out

    def _memory_step(self, m: r.MemoryStep) -> list:
        return self._per_step(m, WindowBuilder.add_memory)

    def _sched_step(self, s: r.SchedStep) -> list:
        return self._per_step(s, WindowBuilder.add_sched)

    def _ops(self, o: r.OpsRecord) -> list:
        return self._per_step(o, WindowBuilder.add_ops)

    # --- reader intervals and samples -------------------------------------------------------------
    def _interval(self, iv: r.ReaderInterval) -> list:
        self._intervals[iv.loader] += 1
        if self._intervals[iv.loader] <= HEAD_INTERVALS:
            self.kept.reader.append(iv)
            return [iv]
        key = (iv.loader, iv.pass_no, iv.speed_test)
        out = self._close_intervals(lambda k, rows: k[0] == iv.loader and
                                    (k != key or iv.t0_s >= _interval_end(rows)))
        self._pending_intervals.setdefault(key, []).append(iv)
        return out

    def _reader_state(self, record) -> list:
        out = self._close_intervals(lambda k, rows: k[0] == record.loader)
        self.kept.reader.append(record)
        return out + [record]

    def _close_intervals(self, due) -> list:
        out = []
        for key, rows in list(self._pending_intervals.items()):
            if due(key, rows):
                merged = merge_intervals(self._pending_intervals.pop(key))
                self.kept.reader.append(merged)
                out.append(merged)
        return out

    def _sample(self, sample) -> list:
        probe = type(sample).WHAT
        key = (probe, _entity(sample))
        self._samples[key] += 1
        if self._samples[key] <= HEAD_SAMPLES:
            getattr(self.kept, _FAMILY[type(sample)]).append(sample)
            return [sample]
        out = self._close_samples(lambda k, rows: k == key and sample.t_s >= _sample_end(rows))
        self._pending_samples.setdefault(key, []).append(sample)
        return out

    def _sample_window(self, w: r.SampleWindow) -> list:
        self.kept.sample_windows.append(w)
        return [w]

    def _close_samples(self, due) -> list:
        out = []
        for key, rows in list(self._pending_samples.items()):
            if due(key, rows):
                window = sample_window(self._pending_samples.pop(key))
                self.kept.sample_windows.append(window)
                out.append(window)
        return out

    # --- the rest --------------------------------------------------------------------------------
    def _event(self, e) -> list:
        if isinstance(e, r.SpeedTestEvent):
            self._speed_test = None if e.phase == "done" else e.phase
        self.kept.events.append(e)
        return [e]

    def _program(self, p: r.Program) -> list:
        self.kept.programs.setdefault(p.program, p)
        return [p]

    def _probe(self, p: r.ProbeRecord) -> list:
        self.kept.probes[p.name] = p
        return [p]

    def _keep_other(self, record) -> list:
        family = _FAMILY.get(type(record))
        if family is not None:
            getattr(self.kept, family).append(record)
        elif getattr(record, "KIND", None) == "summary":
            self.kept.summary = record
        return [record]


class _TailExemplars:
    """One program's slowest tail steps (by cycle) and its reservoir's fill (read and updated
    by Accumulator._step: a tail step is kept as "slow" when its cycle is among the SLOWEST
    largest so far, and drawn for the reservoir by Algorithm R: the n-th tail step takes slot
    n - 1 while n <= RESERVOIR, then slot j = int(random() * n) when j < RESERVOIR, uniform
    on [0, n) at a third of randrange's cost)."""

    def __init__(self):
        self.heap: List[float] = []  # the SLOWEST largest cycles so far (a min-heap)
        self.seen = 0


def _interval_end(rows) -> float:
    return rows[0].t0_s + window_length_s(rows[0].t0_s)


def _sample_end(rows) -> float:
    return rows[0].t_s + window_length_s(rows[0].t_s)


def _entity(sample) -> Optional[int]:
    """The sampled entity: a GPU's index, a worker's pid (None: the machine)."""
    if isinstance(sample, r.GpuSample):
        return sample.gpu
    if isinstance(sample, r.WorkerSample):
        return sample.pid
    return None


_FAMILY = {r.OpsRecord: "ops", r.MemoryStep: "memory", r.MemoryPeak: "memory",
           r.MemoryTrace: "memory", r.MemoryOom: "memory", r.MemoryPool: "memory",
           r.SchedStep: "sched", r.SchedDrop: "sched", r.SystemSample: "system",
           r.GpuSample: "gpu", r.WorkerSample: "workers"}
_HANDLERS = {r.Header: Accumulator._header, r.Step: Accumulator._step,
             r.StepWindow: Accumulator._window, r.MemoryStep: Accumulator._memory_step,
             r.SchedStep: Accumulator._sched_step, r.OpsRecord: Accumulator._ops,
             r.ReaderInterval: Accumulator._interval, r.ReaderStart: Accumulator._reader_state,
             r.ReaderEnd: Accumulator._reader_state, r.SystemSample: Accumulator._sample,
             r.GpuSample: Accumulator._sample, r.WorkerSample: Accumulator._sample,
             r.SampleWindow: Accumulator._sample_window, r.Program: Accumulator._program,
             r.ProbeRecord: Accumulator._probe}
_HANDLERS.update({cls: Accumulator._event for cls in r.EVENTS})
