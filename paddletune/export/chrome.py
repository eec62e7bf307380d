"""A profile as Chrome Trace Event Format JSON (opens in Perfetto and chrome://tracing).

Rows (threads of one process): the steps recorded in full, each with its wait for the batch,
feed, compute and fetch nested inside (in that order; named in the framework's terms) and the
loop's time between steps (outside the runtime) on the row below; the DataLoader passes
that ran between training steps (evaluation, left out of the steps) on their own row; a
long job's
aggregated tail as one slice per window, with counter tracks (steps/s, mean step ms) so the
whole timeline shows; the slowest and sampled tail steps (exemplars) on their own row; op
times (--ops); events as instants. Counter tracks also carry the background samples (and
their windows' means), the DataLoader queues and the memory pool.
"""

import json
import math
import os
import secrets
from collections import namedtuple
from dataclasses import fields as dataclass_fields
from pathlib import Path
from typing import Dict, List, Optional

from ..profile import records as r
from ..profile.codec import event_kind
from ..profile.schema import encode

US = 1e6  # trace timestamps are microseconds since the session start (record "t_s" seconds)
MIB = 1.0 / 2 ** 20

# One sample probe's counter track: `name` is formatted with the sample's fields (so
# "GPU {gpu} util %" is one track per GPU); `series` are (label, field, scale) on that track.
# `probe` is the sample's probe ("system", "nvml", "workers"), as a SampleWindow names it.
# Adding a probe's counters to the timeline is one entry here.
Counter = namedtuple("Counter", "probe name series")
COUNTERS = (
    Counter("system", "CPU % (process)", (("cpu", "cpu_percent", 1.0),)),
    Counter("system", "RSS MiB", (("rss", "rss_bytes", MIB),)),
    Counter("system", "threads", (("threads", "threads", 1.0),)),
    Counter("nvml", "GPU {gpu} util %", (("util", "util_percent", 1.0),)),
    Counter("nvml", "GPU {gpu} memory MiB", (("used", "mem_used_bytes", MIB),
                                             ("this process", "proc_mem_bytes", MIB))),
    Counter("workers", "DataLoader {loader} worker {worker} USS MiB",
            (("uss", "uss_bytes", MIB),)),
)
SAMPLES = {"system": "system", "nvml": "gpu", "workers": "workers"}  # probe -> Profile field
SEGMENTS = ("read", "feed", "compute", "fetch")  # in the order a step does them
EXEMPLAR_ROW = "slowest / sampled steps"
WINDOW_ROW = "steps (aggregated windows)"
EVENT_NAMES = {  # event kind -> how its instant marker is named (default: the kind)
    "exit": lambda e: f"exit {e.status} ({e.reason})",
    "error": lambda e: f"error: {e.exception or e.message}",
}


def to_chrome_trace(profile) -> dict:
    """The trace as a dict ready for json.dump (non-finite numbers are already null)."""
    tracks = _Tracks(_pid(profile))
    events = _steps(profile, tracks) + _evaluation(profile, tracks)
    events += _windows(profile, tracks)
    events += _exemplars(profile, tracks) + _ops(profile, tracks) + _instants(profile, tracks)
    events += _window_counters(profile, tracks.pid) + _counters(profile, tracks.pid)
    events += _reader_counters(profile, tracks.pid) + _memory_counters(profile, tracks.pid)
    trace = {"traceEvents": tracks.metadata(_process_name(profile)) + events,
             "displayTimeUnit": "ms", "otherData": _other_data(profile)}
    return json_safe(trace)


def write_chrome_trace(profile, out_path) -> Path:
    """Write the trace to `out_path` (strict JSON) and return the path. It is written to a
    temporary file beside it and renamed into place: a failure leaves no partial trace (and
    an older trace at `out_path` untouched)."""
    out_path = Path(out_path)
    text = json.dumps(to_chrome_trace(profile), separators=(",", ":"), allow_nan=False)
    tmp = out_path.with_name(f".{out_path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, out_path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return out_path


def json_safe(value):
    """`value` with every NaN/Infinity (at any depth) replaced by None; tuples become lists."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


# --- tracks --------------------------------------------------------------------------------------
class _Tracks:
    """Thread ids by row name, in order of first use (which is also their sort order)."""

    def __init__(self, pid: int):
        self.pid = pid
        self.tids: Dict[str, int] = {}

    def tid(self, name: str) -> int:
        return self.tids.setdefault(name, len(self.tids) + 1)

    def metadata(self, process_name: str) -> List[dict]:
        rows = [_meta(self.pid, 0, "process_name", name=process_name),
                _meta(self.pid, 0, "process_sort_index", sort_index=0)]
        for name, tid in self.tids.items():
            rows.append(_meta(self.pid, tid, "thread_name", name=name))
            rows.append(_meta(self.pid, tid, "thread_sort_index", sort_index=tid))
        return rows


def _meta(pid, tid, kind, **args) -> dict:
    return {"ph": "M", "name": kind, "ts": 0, "pid": pid, "tid": tid, "args": args}


def _pid(profile) -> int:
    pid = profile.header.pid
    return pid if isinstance(pid, int) and not isinstance(pid, bool) else 1


def _process_name(profile) -> str:
    command = profile.command
    script = command.script or (command.argv[0] if command.argv else "?")
    return f"paddletune: {Path(str(script)).name or script}"


def _other_data(profile) -> dict:
    h = profile.header
    return {"tool": h.tool, "profile": str(profile.path), "created": h.created,
            "t0_unix": h.t0_unix_s, "command": encode(h.command),
            "complete": profile.complete, "truncated": profile.truncated}


# --- steps ---------------------------------------------------------------------------------------
def _steps(profile, tracks) -> List[dict]:
    """The steps recorded in full, their segments, and the loop's time between them."""
    executors = {s.executor for s in profile.steps}
    suffix = (lambda s: f" (executor {s.executor})") if len(executors) > 1 else (lambda s: "")
    names = _Names(profile)
    out = []
    for s in profile.steps:
        step = _step_event(s, tracks.pid, tracks.tid("steps" + suffix(s)), names)
        if step is None:
            continue
        out.append(step)
        out += _segments(s, step, names)
        gap = _gap_event(s, tracks.pid, tracks.tid(names.between + suffix(s)), names)
        out += [gap] if gap else []
    return out


def _evaluation(profile, tracks) -> List[dict]:
    """Each DataLoader pass that ran between training steps (records.ReaderEnd.eval_s), from
    its start to its end, with the part of it the loop waited for batches."""
    starts, out = {}, []
    for rec in profile.reader:
        if isinstance(rec, r.ReaderStart):
            starts[(rec.loader, rec.pass_no)] = rec.t_s
        elif isinstance(rec, r.ReaderEnd) and rec.eval_s is not None:
            begin = starts.get((rec.loader, rec.pass_no), rec.t_s - rec.eval_s)
            ts, end = _us(begin), _us(rec.t_s)
            if ts is None or end is None:
                continue
            out.append({"ph": "X", "name": f"evaluation (DataLoader#{rec.loader})",
                        "cat": "evaluation", "ts": ts, "dur": max(end - ts, 0.0),
                        "pid": tracks.pid, "tid": tracks.tid("evaluation"),
                        "args": {"batches": rec.batches, "left_out_ms": _ms(rec.eval_s),
                                 "wait_ms": _ms(rec.eval_read_s)}})
    return out


class _Names:
    """What the trace calls a profile's steps and their parts, in its framework's terms: a
    step names its program where the steps ran programs (the embedded runtime, Paddle's
    static graph), not an eager framework's optimizer steps."""

    def __init__(self, profile):
        terms = profile.source.terms
        self.programs = profile.runs_programs
        self.between = "outside runtime" if terms.between == r.Terms.between else \
            terms.between
        self.parts = {"read": terms.read_wait()}
        self.step = terms.step

    def of_step(self, s: r.Step) -> str:
        return f"step {s.step}" + (f" (program {s.program})" if self.programs else "")

    def of_window(self, w) -> str:
        return f"{w.n} steps" + (f" (program {w.program})" if self.programs else "")

    def part(self, name: str) -> str:
        return self.parts.get(name, name)


def _step_event(s: r.Step, pid, tid, names: _Names, cat=None) -> Optional[dict]:
    ts, dur = _us(s.t_s), _us(s.wall_s)
    if ts is None:
        return None
    args = {f"{k}_ms": _ms(getattr(s, f"{k}_s")) for k in ("wall",) + SEGMENTS}
    args.update(batch_size=s.batch_size, startup=bool(s.startup), n_ops=s.n_ops,
                place=s.place, executor=s.executor)
    if s.exemplar is not None:
        args.update(exemplar=s.exemplar, gap_ms=_ms(s.gap_s))
    return {"ph": "X", "name": names.of_step(s),
            "cat": cat or ("startup" if s.startup else "step"), "ts": ts,
            "dur": max(dur or 0.0, 0.0), "pid": pid, "tid": tid, "args": args}


def _segments(s: r.Step, step, names: _Names) -> List[dict]:
    """The wait for the batch, feed, compute, fetch one after another from the step's start,
    clipped to the step."""
    start, end, out = step["ts"], step["ts"] + step["dur"], []
    for name in SEGMENTS:
        length = _us(getattr(s, f"{name}_s"))
        if length is None or length <= 0:
            continue
        seg_end = min(start + length, end)
        if seg_end > start:
            out.append({"ph": "X", "name": names.part(name), "cat": "segment", "ts": start,
                        "dur": seg_end - start, "pid": step["pid"], "tid": step["tid"]})
        start = seg_end
    return out


def _gap_event(s: r.Step, pid, tid, names: _Names) -> Optional[dict]:
    ts, gap = _us(s.t_s), _us(s.gap_s)
    if ts is None or gap is None or gap <= 0:
        return None
    return {"ph": "X", "name": names.between, "cat": "gap", "ts": max(ts - gap, 0.0),
            "dur": min(gap, ts), "pid": pid, "tid": tid,
            "args": {"gap_ms": _ms(s.gap_s), "before_step": s.step}}


def _exemplars(profile, tracks) -> List[dict]:
    """The tail's slowest and sampled steps, in full, on their own row (a step that is both
    is drawn once)."""
    out, seen, names = [], set(), _Names(profile)
    for s in sorted(profile.exemplars, key=lambda s: s.t_s):
        key = (s.executor, s.program, s.step)
        if key in seen:
            continue
        seen.add(key)
        step = _step_event(s, tracks.pid, tracks.tid(EXEMPLAR_ROW), names, cat="exemplar")
        if step is not None:
            out += [step] + _segments(s, step, names)
    return out


# --- the aggregated tail -------------------------------------------------------------------------
def _windows(profile, tracks) -> List[dict]:
    """One slice per window of aggregated steps, spanning its steps."""
    out, names = [], _Names(profile)
    for w in profile.windows:
        ts, end = _us(w.t0_s), _us(w.t_s)
        if ts is None or end is None:
            continue
        args = {"steps": w.n, "program": w.program, "samples": w.samples or None}
        for part in ("wall", "cycle", "compute"):
            args.update(_dist_args(part, w.parts.get(part)))
        out.append({"ph": "X", "name": names.of_window(w), "cat": "window",
                    "ts": ts, "dur": max(end - ts, 0.0), "pid": tracks.pid,
                    "tid": tracks.tid(WINDOW_ROW), "args": args})
    return out


def _dist_args(part: str, d: Optional[r.Dist]) -> dict:
    if d is None or not d.n:
        return {}
    return {f"{part} mean ms": _ms(d.sum / d.n), f"{part} min ms": _ms(d.min),
            f"{part} max ms": _ms(d.max)}


def _window_counters(profile, pid) -> List[dict]:
    """Per window (at its start): steps per second (1 / the mean loop iteration) and the mean
    step time; a track per program when several programs have windows."""
    programs, step = {w.program for w in profile.windows}, profile.source.terms.step
    out = []
    for w in profile.windows:
        ts = _us(w.t0_s)
        wall, cycle = _mean(w.parts.get("wall")), _mean(w.parts.get("cycle"))
        if ts is None or cycle is None:
            continue
        suffix = f" (program {w.program})" if len(programs) > 1 else ""
        out.append({"ph": "C", "name": "steps/s" + suffix, "ts": ts, "pid": pid, "tid": 0,
                    "args": {"steps/s": round(1.0 / cycle, 3) if cycle > 0 else None}})
        means = {step: _ms(wall), "loop iteration": _ms(cycle)}
        out.append({"ph": "C", "name": "mean step ms" + suffix, "ts": ts, "pid": pid,
                    "tid": 0, "args": {k: v for k, v in means.items() if v is not None}})
    return out


def _mean(d: Optional[r.Dist]) -> Optional[float]:
    return d.sum / d.n if d is not None and d.n else None


# --- ops and events ------------------------------------------------------------------------------
def _ops(profile, tracks) -> List[dict]:
    out = []
    for rec in profile.ops:
        for op in rec.ops:
            ts, dur_us = _us(op.t_s), _us(op.dur_s)
            if ts is None:
                continue
            out.append({"ph": "X", "name": op.type, "cat": "op", "ts": ts,
                        "dur": max(dur_us or 0.0, 0.0), "pid": tracks.pid,
                        "tid": tracks.tid("ops"),
                        "args": {"index": op.index, "program": rec.program,
                                 "step": rec.step}})
    return out


def _instants(profile, tracks) -> List[dict]:
    out = []
    for e in profile.events:
        ts = _us(e.t_s)
        if ts is None:
            continue
        kind = event_kind(e)
        name = EVENT_NAMES.get(kind, lambda _e: kind)(e)
        args = {"kind": kind, **{k: v for k, v in encode(e).items() if k != "t_s"}}
        out.append({"ph": "i", "s": "t", "name": name, "cat": "event", "ts": ts,
                    "pid": tracks.pid, "tid": tracks.tid("events"), "args": args})
    return out


# --- counters ------------------------------------------------------------------------------------
def _counters(profile, pid) -> List[dict]:
    """The background samples recorded in full, then each sample window's means at its
    last sample's time."""
    points = {probe: _sample_points(profile, probe) for probe in {c.probe for c in COUNTERS}}
    out = []
    for counter in COUNTERS:
        for t_s, labels, values in points[counter.probe]:
            point = _counter_point(counter, pid, t_s, labels, values)
            out += [point] if point else []
    return out


def _sample_points(profile, probe: str) -> List[tuple]:
    """(t_s, the fields naming the entity, the values) of a probe's samples and windows, in
    time order."""
    points = []
    for sample in getattr(profile, SAMPLES[probe]):
        fields = _fields_of(sample)
        points.append((sample.t_s, fields, fields))
    points += [(w.t_s, _window_labels(w), {k: v.mean for k, v in w.fields.items()})
               for w in profile.sample_windows if w.probe == probe]
    return sorted(points, key=lambda p: p[0])


def _counter_point(counter, pid, t_s, labels, values) -> Optional[dict]:
    ts = _us(t_s)
    args = {label: _finite(values.get(field), scale) for label, field, scale in counter.series}
    args = {k: v for k, v in args.items() if v is not None}
    if ts is None or not args:
        return None
    return {"ph": "C", "name": _counter_name(counter.name, labels), "ts": ts, "pid": pid,
            "tid": 0, "args": args}


def _fields_of(sample) -> dict:
    return {f.name: getattr(sample, f.name) for f in dataclass_fields(sample)}


def _window_labels(w: r.SampleWindow) -> dict:
    """What names a window's entity, as its samples' fields do: a GPU's index, a worker's
    loader, index and pid."""
    key = {"nvml": "gpu", "workers": "pid"}.get(w.probe)
    return {**w.labels, key: w.key} if key else dict(w.labels)


def _reader_counters(profile, pid) -> List[dict]:
    """Per DataLoader: the queue's mean fill and the pops that found it empty, one point per
    reader-probe interval (at its end)."""
    out = []
    for iv in profile.records("reader", r.ReaderInterval):
        ts, n = _us(iv.t_s), sum(iv.occupancy.values())
        if ts is None or not n:
            continue
        fill = sum(size * k for size, k in iv.occupancy.items()) / n
        out.append({"ph": "C", "name": f"DataLoader {iv.loader} queue", "ts": ts,
                    "pid": pid, "tid": 0, "args": {"fill": round(fill, 3),
                                                   "empty pops": iv.empty_pops}})
    return out


def _memory_counters(profile, pid) -> List[dict]:
    """The CPU memory pool's allocated/reserved bytes (MiB) at each training step's end and
    its step peak, one point per memory-probe step record (at the step's start); for the
    aggregated tail, each window's highest step peak (at the window's start)."""
    points = [(m.t_s, {"allocated": m.allocated_bytes, "reserved": m.reserved_bytes,
                       "step peak": m.step_peak_bytes})
              for m in profile.records("memory", r.MemoryStep)]
    points += [(w.t0_s, {"step peak": w.memory.step_peak_bytes})
               for w in profile.windows if w.memory is not None]
    out = []
    for t_s, values in sorted(points, key=lambda p: p[0]):
        ts = _us(t_s)
        args = {k: _finite(v, MIB) for k, v in values.items()}
        if ts is not None:
            out.append({"ph": "C", "name": "memory pool MiB", "ts": ts, "pid": pid, "tid": 0,
                        "args": {k: round(v, 3) for k, v in args.items() if v is not None}})
    return out


def _counter_name(template: str, labels: dict) -> str:
    class Missing(dict):
        def __missing__(self, key):
            return "?"
    return template.format_map(Missing(labels))


# --- numbers -------------------------------------------------------------------------------------
def _finite(value, scale=1.0) -> Optional[float]:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = value * scale
    return value if math.isfinite(value) else None


def _us(seconds) -> Optional[float]:
    """Seconds -> microseconds, rounded to the nanosecond; None when not a finite number."""
    value = _finite(seconds, US)
    return None if value is None else round(value, 3)


def _ms(seconds) -> Optional[float]:
    value = _finite(seconds, 1e3)
    return None if value is None else round(value, 6)
