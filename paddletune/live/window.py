"""The rolling-window model of a profile stream: the typed records of the last `window_s`
seconds (on the profile's own clock), all-time counters, and the panel figures (`state()`).

Records arrive through `add()` in file order, as a Follower reads them; `state(now)` trims
what fell out of the window and computes every panel from what is left (figures.py). The
rolling verdict and advice (`refresh_advice`) run the summary and the advisors on a Profile
assembled from the window's records: the same code as `paddletune report`/`advise`, over
the last `window_s` seconds only.

A long job's steps after each program's first `head_steps` come only as StepWindows (and
its later samples and reader intervals as windows too), written as each window closes:
about once a second early on, once every few minutes after a day. Once the stream is
`windowed` (a window arrived, or a program ran its head), the window is widened by
`lag_s(now)` (a window's length at `now`, plus the writer's flush), so that it always holds
the newest windows, and a quiet spell between two windows is not a stall; a program's rate is
measured up to its `horizon`, where its steps are known up to.
"""

import time
from collections import Counter, defaultdict, deque
from dataclasses import replace
from typing import NamedTuple, Optional

from .. import profile as prof
from ..profile import records as r
from ..profile.accumulate import HEAD_STEPS, window_length_s
from ..profile.codec import event_kind
from ..profile.figures import Summary
from . import figures
from .state import AdviceLine, LiveAdvice, LiveState
from .tally import OpSums, StepSums, add_to_history, entity_of, sample_of_window

WINDOW_S = 30.0  # the rolling window: breakdown, reader, ops, parallel, advice
FLUSH_SLACK_S = 1.0  # a closed window reaches the file within the writer's flush interval
NO_FOLDING = 1 << 62  # head_steps for the window's Profile: every step it holds kept whole
_TRIMMED = ("steps", "windows", "ops", "reader", "memory", "sched", "sample_windows")


class TimedOps(NamedTuple):
    """An ops record with the time its first op began (ops records carry no time)."""

    t_s: float
    record: r.OpsRecord


class LiveModel:
    def __init__(self, window_s: float = WINDOW_S, path: str = "<live>"):
        self.window_s, self.path = window_s, path
        self.reset()

    def reset(self):
        """Forget everything (the followed file was replaced by a new run)."""
        self.header: Optional[r.Header] = None
        self.steps, self.windows, self.ops = deque(), deque(), deque()
        self.reader, self.memory, self.sched = deque(), deque(), deque()
        self.samples = defaultdict(deque)  # probe -> raw samples in the window
        self.sample_windows = deque()  # SampleWindows in the window
        self.latest = defaultdict(dict)  # probe -> {entity: its newest sample}
        self.reader_passes, self.memory_fixed, self.events = [], [], []
        self.programs, self.probes, self.summary = {}, {}, None
        self.step_counts, self.sample_counts = Counter(), Counter()  # program -> all-time
        self.first_step_t = {}  # program -> t of its first training step
        self.last_step_end = {}  # program -> the end of its newest step (or window)
        self.last_interval = {}  # loader -> its newest ReaderInterval
        self.open_passes = {}  # (loader, pass) -> the ReaderStart of a pass not ended
        self.training_loaders = set()  # loaders a pass of which ran out with steps in it
        self.loader_names = {}  # loader -> its name (DataLoader#0)
        self.data_end = {}  # program -> its steps' known end, once they come as windows
        self.history = defaultdict(Counter)  # program -> {second: steps run in it}
        self.sums = defaultdict(StepSums)  # program -> its steps in the window
        self.op_sums = defaultdict(OpSums)  # program -> its op times in the window
        self.windowed = False  # steps or samples came as windows: a long job's tail
        self.last_t = 0.0
        self.n_records = 0
        self.advice: Optional[LiveAdvice] = None

    # --- feeding -------------------------------------------------------------------------------
    def add(self, records):
        for record in records:
            if isinstance(record, r.Header) and self.header is not None:
                self.reset()
            self.n_records += 1
            handler = _HANDLERS.get(type(record))
            if handler is not None:  # the summary, or a record only the advice reads
                handler(self, record)
            t = getattr(record, "t_s", None)
            if isinstance(t, (int, float)) and t > self.last_t:
                self.last_t = float(t)

    def _add_header(self, h: r.Header):
        self.header = h

    def _add_step(self, s: r.Step):
        if s.startup or s.exemplar is not None:  # an exemplar is counted in its window
            return
        program, end = s.program, s.end_s
        self.steps.append(s)
        self.sums[program].add_step(s, 1)
        self.step_counts[program] += 1
        self.sample_counts[program] += s.sample_count
        self.first_step_t.setdefault(program, s.t_s)
        if program in self.data_end or s.step + 1 >= self.head_steps:
            self.windowed = True  # the next steps of the program come as windows
            self.data_end[program] = max(end, self.data_end.pop(program, end))
        add_to_history(self.history[program], end, end, 1)
        self.last_step_end[program] = max(end, self.last_step_end.get(program, end))
        self.last_t = max(self.last_t, end)

    def _add_window(self, w: r.StepWindow):
        program = w.program
        self.windowed = True
        self.windows.append(w)
        self._count_window(w, 1)
        self.step_counts[program] += w.n
        self.sample_counts[program] += w.samples
        self.first_step_t.setdefault(program, w.t0_s)
        self.data_end[program] = max(w.t_s, self.data_end.pop(program, w.t_s))
        add_to_history(self.history[program], w.t0_s, w.t_s, w.n)
        self.last_step_end[program] = max(w.t_s, self.last_step_end.get(program, w.t_s))

    def _add_ops(self, o: r.OpsRecord):
        self.ops.append(TimedOps(o.ops[0].t_s if o.ops else self.last_t, o))
        self.op_sums[o.program].add_ops(o, 1)

    def _add_reader_interval(self, iv: r.ReaderInterval):
        self.reader.append(iv)
        newest = self.last_interval.get(iv.loader)
        if newest is None or iv.t_s >= newest.t_s:
            self.last_interval[iv.loader] = iv

    def _add_reader_pass(self, record):
        self.reader_passes.append(record)
        key = (record.loader, record.pass_no)
        if isinstance(record, r.ReaderEnd):
            self.open_passes.pop(key, None)
            if record.what == "end" and record.eval_s is None:  # (steps ran in it)
                self.training_loaders.add(record.loader)
            return
        self.open_passes[key] = record
        if record.config.name:
            self.loader_names[record.loader] = record.config.name

    def _add_memory_step(self, m: r.MemoryStep):
        self.memory.append(m)

    def _add_memory_peak(self, peak: r.MemoryPeak):  # only the newest peak matters
        self.memory_fixed = [m for m in self.memory_fixed if not isinstance(m, r.MemoryPeak)]
        self.memory_fixed.append(peak)

    def _add_memory_other(self, record):  # trace (one per program), oom, the pool's state
        self.memory_fixed.append(record)

    def _add_sched(self, record):
        self.sched.append(record)

    def _add_sample(self, sample):
        probe = type(sample).WHAT
        self.samples[probe].append(sample)
        self.latest[probe][entity_of(sample)] = sample

    def _add_sample_window(self, w: r.SampleWindow):
        self.windowed = True
        self.sample_windows.append(w)
        sample = sample_of_window(w)
        if sample is not None:
            self.latest[w.probe][w.key] = sample

    def _add_event(self, e):
        self.events.append(e)

    def _add_program(self, p: r.Program):
        self.programs.setdefault(p.program, p)

    def _add_probe(self, p: r.ProbeRecord):
        self.probes[p.name] = p

    def _add_summary(self, s: Summary):
        self.summary = s

    # --- time ----------------------------------------------------------------------------------
    @property
    def finished(self) -> bool:
        return self.summary is not None or self.exit is not None

    @property
    def exit(self) -> Optional[r.ExitEvent]:
        """The job's exit record, once read."""
        exits = [e for e in self.events if isinstance(e, r.ExitEvent)]
        return exits[-1] if exits else None

    def now(self, live: bool = True) -> float:
        """The profile clock's present: the job's end once finished; while following a live
        writer, the wall clock since its header (never before the newest record)."""
        if self.exit is not None:
            return self.exit.t_s
        if live and self.header is not None and self.header.t0_unix_s is not None:
            return max(time.time() - self.header.t0_unix_s, self.last_t)
        return self.last_t

    def lag_s(self, now: float) -> float:
        """How far behind `now` a windowed stream's newest records may be: a window's length
        at `now` and the writer's flush (0 while everything comes record by record)."""
        return window_length_s(now) + FLUSH_SLACK_S if self.windowed else 0.0

    @property
    def head_steps(self) -> int:
        """Steps per program the writer records in full before folding the rest."""
        return (self.header.options.head_steps if self.header is not None else 0) or HEAD_STEPS

    def horizon(self, program, now: float) -> float:
        """Where `program`'s steps are known up to: `now`, or, once they come as windows, the
        end of its newest window (or of its last step recorded in full), no earlier than a
        window's length before `now` (so a stall still shows)."""
        if program not in self.data_end:
            return now
        return min(now, max(self.data_end[program], now - self.lag_s(now)))

    def trim(self, now: float):
        """Drop the records older than the window (and their share of the running sums)."""
        cutoff = now - self.window_s - self.lag_s(now)
        for name in _TRIMMED:
            rows = getattr(self, name)
            while rows and rows[0].t_s < cutoff:
                gone = rows.popleft()
                if name == "steps":
                    self.sums[gone.program].add_step(gone, -1)
                elif name == "windows":
                    self._count_window(gone, -1)
                elif name == "ops":
                    self.op_sums[gone.record.program].add_ops(gone.record, -1)
        for rows in self.samples.values():
            while rows and rows[0].t_s < cutoff:
                rows.popleft()

    def _count_window(self, w: r.StepWindow, sign: int):
        self.sums[w.program].add_window(w, sign)
        self.op_sums[w.program].add_window(w, sign)

    def open_pass(self) -> Optional[r.ReaderStart]:
        """The latest-started reader pass that has not ended (None: none runs)."""
        return max(self.open_passes.values(), key=lambda s: s.t_s, default=None)

    def evaluating(self, since: float) -> Optional[r.ReaderStart]:
        """The open pass begun after `since` (the last step's end) of a loader none of
        whose passes ran out with steps in it: an evaluation loop running (None: none). (A
        training loader's first pass runs across the steps; a pass of it begun after them
        follows one that ended with steps in it. The records' order between the steps and
        the passes does not matter.)"""
        start = self.open_pass()
        if start is None or start.t_s < since or start.loader in self.training_loaders:
            return None
        return start

    def loader_name(self, loader) -> str:
        """A loader's name from its passes' config (DataLoader#0), else its id."""
        return self.loader_names.get(loader) or f"loader {loader}"

    @property
    def main_program(self):
        return self.step_counts.most_common(1)[0][0] if self.step_counts else None

    def events_of(self, kind: str) -> list:
        """The events of one kind ("device_time", "speed_test", ...), in order (as
        Profile.events_of)."""
        return [e for e in self.events if event_kind(e) == kind]

    def current(self, probe: str) -> list:
        """A probe's newest sample of each entity still sampled (within a sampling interval,
        or a window's length, of its newest), by entity."""
        newest = self.latest[probe]
        if not newest:
            return []
        t = max(s.t_s for s in newest.values())
        interval = self.header.options.interval_s if self.header is not None else 0.0
        slack = max(interval, self.lag_s(t))
        return [newest[k] for k in sorted(newest, key=lambda k: (k is not None, k or 0))
                if newest[k].t_s >= t - slack]

    # --- figures -------------------------------------------------------------------------------
    def state(self, now: float, **extra) -> LiveState:
        """Every panel's figures at `now` (profile clock) (figures.py)."""
        self.trim(now)
        return figures.state(self, now, **extra)

    def window_profile(self, now: float) -> prof.Profile:
        """A Profile of the window's records (the whole run's memory traces, peaks, reader
        passes and programs, which are written once), for the summary and the advisors."""
        self.trim(now)
        header = self.header or prof.header_record({}, {}, {}, 0.0)
        main = self.main_program
        in_window = (sum(1 for s in self.steps if s.program == main)
                     + sum(w.n for w in self.windows if w.program == main))
        if in_window < self.step_counts[main]:  # the warm-up is long gone
            header = replace(header, options=replace(header.options, warmup=0))
        records = [header, *self.programs.values(), *self.steps, *self.windows,
                   *(o.record for o in self.ops), *self.reader_passes, *self.reader,
                   *self.memory_fixed, *self.memory, *self.sched,
                   *(s for rows in self.samples.values() for s in rows), *self.sample_windows,
                   *self.events, *self.probes.values()]
        return prof.from_records(self.path, records, head_steps=NO_FOLDING)

    def refresh_advice(self, now: float, top: int = 3) -> LiveAdvice:
        """The verdict and the top advice over the window (slow: call every few seconds)."""
        t0 = time.perf_counter()
        try:
            from ..advisors import advise
            window = self.window_profile(now)
            advices = [a for a in advise(window) if a.severity != "info"][:top]
            advice = LiveAdvice(now, window.summary.verdict,
                                tuple(AdviceLine(a.severity, a.title, a.expected_gain)
                                      for a in advices))
        except Exception as err:  # noqa: BLE001  (the dashboard must go on)
            advice = LiveAdvice(now, error=f"{type(err).__name__}: {err}")
        self.advice = replace(advice, cost_s=time.perf_counter() - t0)
        return self.advice


_HANDLERS = {r.Header: LiveModel._add_header, r.Step: LiveModel._add_step,
             r.StepWindow: LiveModel._add_window, r.OpsRecord: LiveModel._add_ops,
             r.ReaderInterval: LiveModel._add_reader_interval,
             r.ReaderStart: LiveModel._add_reader_pass, r.ReaderEnd: LiveModel._add_reader_pass,
             r.MemoryStep: LiveModel._add_memory_step, r.MemoryPeak: LiveModel._add_memory_peak,
             r.MemoryTrace: LiveModel._add_memory_other, r.MemoryOom: LiveModel._add_memory_other,
             r.MemoryPool: LiveModel._add_memory_other, r.SchedStep: LiveModel._add_sched,
             r.SchedDrop: LiveModel._add_sched, r.SampleWindow: LiveModel._add_sample_window,
             r.Program: LiveModel._add_program, r.ProbeRecord: LiveModel._add_probe,
             Summary: LiveModel._add_summary}
_HANDLERS.update({cls: LiveModel._add_sample for cls in r.SAMPLES})
_HANDLERS.update({cls: LiveModel._add_event for cls in r.EVENTS})
