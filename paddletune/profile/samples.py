"""Background samples aggregated: a probe's samples of one entity over a window
(records.SampleWindow), and the figures of a field over samples and windows alike."""

import math
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from . import records as r
from .figures import SampleStats
from .schema import Bytes, Count, Id, Number, Percent, Seconds, record_fields

_NUMBERS = {Bytes, Count, Number, Percent, Seconds, float, int}
_IDENTITY = {"t_s", "gpu", "loader", "pass_no", "worker", "pid"}


def numeric_fields(cls) -> Tuple[str, ...]:
    """The fields of a sample class that hold one number each (what a window aggregates)."""
    out = []
    for f in record_fields(cls):
        inner = [a for a in getattr(f.annotation, "__args__", (f.annotation,))
                 if a is not type(None)]
        if f.name not in _IDENTITY and len(inner) == 1 and inner[0] in _NUMBERS:
            out.append(f.name)
    return tuple(out)


FIELDS = {cls.WHAT: numeric_fields(cls) for cls in r.SAMPLES}
LABELS = {"workers": ("loader", "pass_no", "worker")}


def sample_window(rows: Sequence) -> r.SampleWindow:
    """The window of one probe's samples of one entity (in time order)."""
    probe = type(rows[0]).WHAT
    fields = {}
    for name in FIELDS[probe]:
        values = [getattr(row, name) for row in rows]
        values = [v for v in values if v is not None]
        if values:
            fields[name] = r.Stats(len(values), sum(values) / len(values), min(values),
                                   max(values), values[0], values[-1])
    labels = {k: getattr(rows[0], k) for k in LABELS.get(probe, ())}
    reasons, reported = {}, 0
    for row in rows:
        throttle = getattr(row, "throttle", None)
        if throttle is not None:
            reported += 1
            for name in throttle:
                reasons[name] = reasons.get(name, 0) + 1
    key = getattr(rows[0], "gpu", None) if probe == "nvml" else getattr(rows[0], "pid", None)
    return r.SampleWindow(rows[0].t_s, rows[-1].t_s, probe, len(rows), key, fields, labels,
                          reasons, reported)


class StatsBuilder:
    """A field's figures over raw samples and windows, in time order."""

    __slots__ = ("n", "total", "lo", "hi", "last")

    def __init__(self):
        self.n, self.total, self.lo, self.hi, self.last = 0, 0.0, math.inf, -math.inf, None

    def add(self, value):
        if value is None or isinstance(value, bool):
            return
        self.n += 1
        self.total += value
        self.lo, self.hi, self.last = min(self.lo, value), max(self.hi, value), value

    def add_stats(self, s: r.Stats):
        self.n += s.n
        self.total += s.mean * s.n
        self.lo, self.hi, self.last = min(self.lo, s.min), max(self.hi, s.max), s.last

    def frozen(self) -> Optional[SampleStats]:
        if not self.n:
            return None
        return SampleStats(self.total / self.n, self.lo, self.hi, self.last, self.n)


def field_stats(samples: Iterable, windows: Iterable[r.SampleWindow],
                names: Sequence[str]) -> Dict[str, Optional[SampleStats]]:
    """{field: its figures} over raw `samples` then `windows` (one entity)."""
    builders = {name: StatsBuilder() for name in names}
    for row in samples:
        for name, b in builders.items():
            b.add(getattr(row, name))
    for w in windows:
        for name, b in builders.items():
            stats = w.fields.get(name)
            if stats is not None:
                b.add_stats(stats)
    return {name: b.frozen() for name, b in builders.items()}


def throttle_shares(samples: Iterable, windows: Iterable[r.SampleWindow]) -> Optional[dict]:
    """{reason: share of the samples listing it}, most common first ({} when never); None
    when no sample reported reasons."""
    counts: Dict[str, int] = {}
    reported = 0
    for row in samples:
        if row.throttle is not None:
            reported += 1
            for name in row.throttle:
                counts[name] = counts.get(name, 0) + 1
    for w in windows:
        reported += w.reasons_n
        for name, n in w.reasons.items():
            counts[name] = counts.get(name, 0) + n
    if not reported:
        return None
    return {name: n / reported for name, n in sorted(counts.items(), key=lambda kv: -kv[1])}


def entity_windows(windows: Iterable[r.SampleWindow], probe: str) -> Dict[Optional[Id], List]:
    """A probe's windows by entity (GPU index, worker pid)."""
    out: Dict[Optional[Id], List] = {}
    for w in windows:
        if w.probe == probe:
            out.setdefault(w.key, []).append(w)
    return out
