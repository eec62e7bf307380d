"""The rolling-window model of a profile stream: the records of the last `window_s` seconds
(on the profile's own clock), all-time counters, and the panel figures (`state()`).

Records arrive through `add()` in file order, as a Follower reads them; `state(now)` trims
what fell out of the window and computes every panel from what is left (figures.py). The
rolling verdict and advice (`refresh_advice`) run the summary and the advisors on a Profile
assembled from the window's records: the same code as `paddletune report`/`advise`, over
the last `window_s` seconds only.
"""

import time
from collections import Counter, defaultdict, deque
from typing import Optional

from .. import profile as prof
from . import figures

WINDOW_S = 30.0  # the rolling window: breakdown, reader, ops, parallel, advice
HISTORY_POINTS = 240  # throughput history kept: one point per second
_TRIMMED = ("steps", "ops", "reader", "memory", "sched")
STEP_SUMS = figures.STEP_SUMS


class LiveModel:
    def __init__(self, window_s: float = WINDOW_S, path: str = "<live>"):
        self.window_s, self.path = window_s, path
        self.reset()

    def reset(self):
        """Forget everything (the followed file was replaced by a new run)."""
        self.header: Optional[dict] = None
        self.steps, self.ops, self.reader, self.memory, self.sched = (deque() for _ in range(5))
        self.samples = defaultdict(deque)  # probe -> samples in the window
        self.latest = {}  # probe -> its newest sample round [records with the same t]
        self.reader_passes, self.memory_fixed, self.events = [], [], []
        self.programs, self.probes, self.summary = {}, {}, None
        self.step_counts, self.sample_counts = Counter(), Counter()  # program -> all-time
        self.first_step_t = {}  # program -> t of its first training step
        self.history = defaultdict(Counter)  # program -> {second: steps ended in it}
        self.sums = defaultdict(lambda: [0, 0.0, 0.0, 0.0, 0.0, 0.0])  # program -> STEP_SUMS
        self.op_sums = defaultdict(Counter)  # program -> {op type: seconds} in the window
        self.op_steps = Counter()  # program -> ops records in the window
        self.last_t = 0.0
        self.n_records = 0
        self.advice: Optional[dict] = None
        self._sticky = {}

    # --- feeding -------------------------------------------------------------------------------
    def add(self, records):
        for r in records:
            kind = r.get("type")
            if kind == "header" and self.header is not None:
                self.reset()
            self.n_records += 1
            getattr(self, "_add_" + str(kind), self._add_other)(r)
            t = r.get("t")
            if isinstance(t, (int, float)) and t > self.last_t:
                self.last_t = float(t)

    def _add_header(self, r):
        self.header = r

    def _add_step(self, r):
        prof._fill_step(r, self._sticky)
        if r.get("startup"):
            return
        program, end = r.get("program"), r["t"] + (r.get("wall_s") or 0.0)
        self.steps.append(r)
        self._count_step(r, 1)
        self.step_counts[program] += 1
        self.sample_counts[program] += r.get("batch_size") or 0
        self.first_step_t.setdefault(program, r["t"])
        hist = self.history[program]
        hist[int(end)] += 1
        if len(hist) > HISTORY_POINTS:
            del hist[min(hist)]
        self.last_t = max(self.last_t, end)

    def _add_ops(self, r):
        rows = r.get("ops") or []
        r.setdefault("t", rows[0][2] if rows and len(rows[0]) > 2 else self.last_t)
        self.ops.append(r)
        self._count_ops(r, 1)

    def _add_reader(self, r):
        (self.reader if r.get("what") == "interval" else self.reader_passes).append(r)

    def _add_memory(self, r):
        if r.get("what") == "step":
            self.memory.append(r)
        elif r.get("what") == "peak":  # only the newest peak matters
            self.memory_fixed = [m for m in self.memory_fixed if m.get("what") != "peak"] + [r]
        else:  # trace (one per program), oom
            self.memory_fixed.append(r)

    def _add_sched(self, r):
        self.sched.append(r)

    def _add_sample(self, r):
        probe = r.get("probe", "?")
        self.samples[probe].append(r)
        round_ = self.latest.get(probe)
        if round_ and round_[0].get("t") == r.get("t"):
            round_.append(r)
        else:
            self.latest[probe] = [r]

    def _add_event(self, r):
        self.events.append(r)

    def _add_program(self, r):
        self.programs.setdefault(r.get("program"), r)

    def _add_probe(self, r):
        self.probes[r.get("name", "?")] = r

    def _add_summary(self, r):
        self.summary = r

    def _add_other(self, r):
        pass  # a record type of a newer minor version

    # --- time ----------------------------------------------------------------------------------
    @property
    def finished(self) -> bool:
        return self.summary is not None or any(e.get("kind") == "exit" for e in self.events)

    def now(self, live: bool = True) -> float:
        """The profile clock's present: the job's end once finished; while following a live
        writer, the wall clock since its header (never before the newest record)."""
        exits = [e["t"] for e in self.events if e.get("kind") == "exit"]
        if exits:
            return exits[-1]
        if live and self.header and isinstance(self.header.get("t0_unix"), (int, float)):
            return max(time.time() - self.header["t0_unix"], self.last_t)
        return self.last_t

    def trim(self, now: float):
        """Drop the records older than the window (and their share of the running sums)."""
        start = now - self.window_s
        for name in _TRIMMED:
            rows = getattr(self, name)
            while rows and rows[0].get("t", start) < start:
                gone = rows.popleft()
                if name == "steps":
                    self._count_step(gone, -1)
                elif name == "ops":
                    self._count_ops(gone, -1)
        for rows in self.samples.values():
            while rows and rows[0].get("t", start) < start:
                rows.popleft()

    def _count_step(self, r, sign):
        """Add (sign 1) or take away (-1) a step from its program's window sums."""
        sums = self.sums[r.get("program")]
        sums[0] += sign
        if sums[0] <= 0:  # empty: start again from exact zeros
            sums[:] = [0, 0.0, 0.0, 0.0, 0.0, 0.0]
            return
        for i, key in enumerate(STEP_SUMS[1:], 1):
            sums[i] += sign * (r.get(key) or 0.0)

    def _count_ops(self, r, sign):
        program = r.get("program")
        self.op_steps[program] += sign
        sums = self.op_sums[program]
        if self.op_steps[program] <= 0:
            self.op_steps[program] = 0
            sums.clear()
            return
        for op in r.get("ops") or []:
            sums[op[1]] += sign * op[3]

    @property
    def main_program(self):
        return self.step_counts.most_common(1)[0][0] if self.step_counts else None

    # --- figures -------------------------------------------------------------------------------
    def state(self, now: float, **extra) -> dict:
        """Every panel's figures at `now` (profile clock): a plain dict (figures.py)."""
        self.trim(now)
        return figures.state(self, now, **extra)

    def window_profile(self, now: float) -> prof.Profile:
        """A Profile of the window's records (the whole run's memory traces, peaks, reader
        passes and programs, which are written once), for the summary and the advisors."""
        self.trim(now)
        header = dict(self.header or prof.header_record({}, {}, {}, 0.0))
        main = self.main_program
        in_window = sum(1 for s in self.steps if s.get("program") == main)
        if in_window < self.step_counts.get(main, 0):  # the warm-up is long gone
            header["options"] = {**(header.get("options") or {}), "warmup": 0}
        records = [header, *self.programs.values(), *self.steps, *self.ops,
                   *self.reader_passes, *self.reader, *self.memory_fixed, *self.memory,
                   *self.sched, *(r for rows in self.samples.values() for r in rows),
                   *self.events, *({"type": "probe", **p} for p in self.probes.values())]
        return prof.from_records(self.path, records)

    def refresh_advice(self, now: float, top: int = 3) -> dict:
        """The verdict and the top advice over the window (slow: call every few seconds)."""
        t0 = time.perf_counter()
        try:
            from ..advisors import advise
            window = self.window_profile(now)
            advices = [a for a in advise(window) if a.severity != "info"][:top]
            self.advice = {"t": now, "verdict": window.summary.get("verdict"),
                           "advice": [{"severity": a.severity, "title": a.title,
                                       "gain": a.expected_gain} for a in advices],
                           "error": None}
        except Exception as err:  # noqa: BLE001  (the dashboard must go on)
            self.advice = {"t": now, "verdict": None, "advice": [],
                           "error": f"{type(err).__name__}: {err}"}
        self.advice["cost_s"] = time.perf_counter() - t0
        return self.advice
