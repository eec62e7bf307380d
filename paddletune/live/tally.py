"""The live model's running figures, kept as records arrive and leave the window: a program's
step-part sums and op-time sums (steps recorded in full and StepWindows alike), its
steps-per-second history, a window's overlap with a span, and a SampleWindow read as the
probe's own sample (its fields' last values)."""

from collections import Counter
from typing import Optional

from ..profile import records as r
from ..profile.samples import FIELDS

SAMPLE_CLASSES = {cls.WHAT: cls for cls in r.SAMPLES}
HISTORY_POINTS = 240  # throughput history kept: one point per second


class StepSums:
    """A program's steps in the window: how many, and their read, feed, compute, fetch and
    outside (gap) seconds summed; of the compute, the training thread's time off its CPU
    and waiting for a core (`off_cpu`, `queued`: over the steps that measured them)."""

    __slots__ = ("n", "read_s", "feed_s", "compute_s", "fetch_s", "gap_s", "off_cpu",
                 "queued")

    def __init__(self):
        self.clear()

    def clear(self):
        self.n = 0
        self.read_s = self.feed_s = self.compute_s = self.fetch_s = self.gap_s = 0.0
        self.off_cpu, self.queued = MeasuredSum(), MeasuredSum()

    def add_step(self, s: r.Step, sign: int):
        self._add(sign, 1, s.read_s, s.feed_s, s.compute_s, s.fetch_s, s.gap_s or 0.0)
        if self.n:
            self.off_cpu.add(sign, 1, s.compute_wait_s)
            self.queued.add(sign, 1, s.compute_queued_s)

    def add_window(self, w: r.StepWindow, sign: int):
        self._add(sign, w.n, *(part_sum(w, name)
                               for name in ("read", "feed", "compute", "fetch", "outside")))
        if self.n:
            for sums, name in ((self.off_cpu, "compute_wait"), (self.queued, "compute_queued")):
                part = w.parts.get(name)
                if part is not None:
                    sums.add(sign, part.n, part.sum)

    def _add(self, sign, n, read, feed, compute, fetch, gap):
        self.n += sign * n
        if self.n <= 0:  # empty: start again from exact zeros
            self.clear()
            return
        self.read_s += sign * read
        self.feed_s += sign * feed
        self.compute_s += sign * compute
        self.fetch_s += sign * fetch
        self.gap_s += sign * gap

    def mean(self, name: str) -> float:
        """Mean seconds per step of one part ("read_s", "gap_s", ...), never negative."""
        return max(getattr(self, name) / self.n, 0.0) if self.n else 0.0


class MeasuredSum:
    """A part only some steps measured (records.Step.compute_wait_s): their count and sum."""

    __slots__ = ("n", "sum_s")

    def __init__(self):
        self.n, self.sum_s = 0, 0.0

    def add(self, sign: int, n: int, seconds: Optional[float]):
        if seconds is None or not n:
            return
        self.n += sign * n
        self.sum_s = self.sum_s + sign * seconds if self.n > 0 else 0.0
        self.n = max(self.n, 0)

    def mean(self) -> Optional[float]:
        """Mean seconds per measuring step, never negative; None: none measured it."""
        return max(self.sum_s / self.n, 0.0) if self.n else None


def part_sum(w: r.StepWindow, name: str) -> float:
    return w.parts[name].sum if name in w.parts else 0.0


class OpSums:
    """A program's op times in the window: steps timed, and {op type: seconds}."""

    __slots__ = ("steps", "by_type")

    def __init__(self):
        self.steps, self.by_type = 0, Counter()

    def add_ops(self, o: r.OpsRecord, sign: int):
        if self._count(1, sign):
            for op in o.ops:
                self.by_type[op.type] += sign * op.dur_s

    def add_window(self, w: r.StepWindow, sign: int):
        if self._count(w.op_steps, sign):
            for op in w.ops:
                self.by_type[op.type] += sign * op.total_s

    def _count(self, steps: int, sign: int) -> bool:
        self.steps += sign * steps
        if self.steps <= 0:
            self.steps = 0
            self.by_type.clear()
            return False
        return True


def add_to_history(hist: Counter, t0_s: float, t_s: float, n: float):
    """Count `n` steps run over [t0_s, t_s] into {second: steps}, in proportion to each
    second's share of the span (all in t_s's second when it has no length)."""
    if t_s <= t0_s:
        hist[int(t_s)] += n
    else:
        second = int(t0_s)
        while second < t_s:
            hist[second] += n * (min(t_s, second + 1) - max(t0_s, second)) / (t_s - t0_s)
            second += 1
    while len(hist) > HISTORY_POINTS:
        del hist[min(hist)]


def overlap_share(t0_s: float, t_s: float, start: float, end: float) -> float:
    """The share of [t0_s, t_s] inside [start, end] (for no length: 1 inside, else 0)."""
    if t_s <= t0_s:
        return 1.0 if start < t_s <= end else 0.0
    return max(min(t_s, end) - max(t0_s, start), 0.0) / (t_s - t0_s)


def entity_of(sample) -> Optional[int]:
    """The sampled entity: a GPU's index, a worker's pid (None: the machine)."""
    if isinstance(sample, r.GpuSample):
        return sample.gpu
    if isinstance(sample, r.WorkerSample):
        return sample.pid
    return None


def sample_of_window(w: r.SampleWindow):
    """The window as its probe's sample at its end: each field's last value (None when the
    probe is unknown or the window lacks a field the sample requires)."""
    if w.probe not in SAMPLE_CLASSES:
        return None
    cls = SAMPLE_CLASSES[w.probe]
    known = set(FIELDS[w.probe])
    values = {name: stats.last for name, stats in w.fields.items() if name in known}
    if w.probe == "nvml":
        values["gpu"] = w.key
    elif w.probe == "workers":
        values.update(pid=w.key, **w.labels)
    try:
        return cls(t_s=w.t_s, **values)
    except TypeError:
        return None
