"""A profile as Chrome Trace Event Format JSON (opens in Perfetto and chrome://tracing)."""

import json
import math
from collections import namedtuple
from pathlib import Path
from typing import Dict, List, Optional

US = 1e6  # trace timestamps are microseconds since the session start (record "t" is seconds)
MIB = 1.0 / 2 ** 20

# One sample probe's counter track: `name` is formatted with the sample's fields (so
# "GPU {gpu} util %" is one track per GPU); `series` are (label, field, scale) on that track.
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
SEGMENTS = ("feed", "compute", "fetch")  # in the order Executor.run does them
EVENT_NAMES = {  # event kind -> how its instant marker is named (default: the kind)
    "exit": lambda e: f"exit {e.get('status')} ({e.get('reason')})",
    "error": lambda e: f"error: {e.get('exception') or e.get('message')}",
}


def to_chrome_trace(profile) -> dict:
    """The trace as a dict ready for json.dump (non-finite numbers are already null)."""
    tracks = _Tracks(_pid(profile))
    events = _steps(profile, tracks) + _ops(profile, tracks) + _instants(profile, tracks)
    events += _counters(profile, tracks.pid) + _reader_counters(profile, tracks.pid)
    events += _memory_counters(profile, tracks.pid)
    trace = {"traceEvents": tracks.metadata(_process_name(profile)) + events,
             "displayTimeUnit": "ms", "otherData": _other_data(profile)}
    return json_safe(trace)


def write_chrome_trace(profile, out_path) -> Path:
    """Write the trace to `out_path` (strict JSON) and return the path."""
    out_path = Path(out_path)
    text = json.dumps(to_chrome_trace(profile), separators=(",", ":"), allow_nan=False)
    out_path.write_text(text, encoding="utf-8")
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
    pid = profile.header.get("pid")
    return pid if isinstance(pid, int) and not isinstance(pid, bool) else 1


def _process_name(profile) -> str:
    command = profile.header.get("command") or {}
    if isinstance(command, dict):
        script = command.get("script") or (command.get("argv") or ["?"])[0]
    else:
        script = str(command)
    return f"paddletune: {Path(str(script)).name or script}"


def _other_data(profile) -> dict:
    h = profile.header
    return {"tool": h.get("tool"), "profile": str(profile.path), "created": h.get("created"),
            "t0_unix": h.get("t0_unix"), "command": h.get("command"),
            "complete": profile.complete, "truncated": profile.truncated}


# --- events --------------------------------------------------------------------------------------
def _steps(profile, tracks) -> List[dict]:
    executors = {s.get("executor") for s in profile.steps}
    suffix = (lambda s: f" (executor {s.get('executor')})") if len(executors) > 1 else (
        lambda s: "")
    out = []
    for s in profile.steps:
        step = _step_event(s, tracks.pid, tracks.tid("steps" + suffix(s)))
        if step is None:
            continue
        out.append(step)
        out += _segments(s, step)
        gap = _gap_event(s, tracks.pid, tracks.tid("outside runtime" + suffix(s)))
        out += [gap] if gap else []
    return out


def _step_event(s, pid, tid) -> Optional[dict]:
    ts, dur = _us(s.get("t")), _us(s.get("wall_s"))
    if ts is None:
        return None
    args = {f"{k}_ms": _ms(s.get(f"{k}_s")) for k in ("wall",) + SEGMENTS}
    args.update(batch_size=s.get("batch_size"), startup=bool(s.get("startup")),
                n_ops=s.get("n_ops"), place=s.get("place"), executor=s.get("executor"))
    return {"ph": "X", "name": f"step {s.get('step')} (program {s.get('program')})",
            "cat": "startup" if s.get("startup") else "step", "ts": ts,
            "dur": max(dur or 0.0, 0.0), "pid": pid, "tid": tid, "args": args}


def _segments(s, step) -> List[dict]:
    """feed, compute, fetch one after another from the step's start, clipped to the step."""
    start, end, out = step["ts"], step["ts"] + step["dur"], []
    for name in SEGMENTS:
        length = _us(s.get(f"{name}_s"))
        if length is None or length <= 0:
            continue
        seg_end = min(start + length, end)
        if seg_end > start:
            out.append({"ph": "X", "name": name, "cat": "segment", "ts": start,
                        "dur": seg_end - start, "pid": step["pid"], "tid": step["tid"]})
        start = seg_end
    return out


def _gap_event(s, pid, tid) -> Optional[dict]:
    ts, gap = _us(s.get("t")), _us(s.get("gap_s"))
    if ts is None or gap is None or gap <= 0:
        return None
    return {"ph": "X", "name": "outside runtime", "cat": "gap", "ts": max(ts - gap, 0.0),
            "dur": min(gap, ts), "pid": pid, "tid": tid,
            "args": {"gap_ms": _ms(s.get("gap_s")), "before_step": s.get("step")}}


def _ops(profile, tracks) -> List[dict]:
    out = []
    for rec in profile.ops:
        for row in rec.get("ops") or []:
            if not isinstance(row, (list, tuple)) or len(row) < 4:
                continue
            index, op_type, t, dur = row[:4]
            ts, dur_us = _us(t), _us(dur)
            if ts is None:
                continue
            out.append({"ph": "X", "name": str(op_type), "cat": "op", "ts": ts,
                        "dur": max(dur_us or 0.0, 0.0), "pid": tracks.pid,
                        "tid": tracks.tid("ops"),
                        "args": {"index": index, "program": rec.get("program"),
                                 "step": rec.get("step")}})
    return out


def _instants(profile, tracks) -> List[dict]:
    out = []
    for e in profile.events:
        ts = _us(e.get("t"))
        if ts is None:
            continue
        kind = str(e.get("kind"))
        name = EVENT_NAMES.get(kind, lambda _e: kind)(e)
        args = {k: v for k, v in e.items() if k not in ("type", "t")}
        out.append({"ph": "i", "s": "t", "name": name, "cat": "event", "ts": ts,
                    "pid": tracks.pid, "tid": tracks.tid("events"), "args": args})
    return out


def _counters(profile, pid) -> List[dict]:
    out = []
    for counter in COUNTERS:
        for sample in profile.samples.get(counter.probe, ()):
            ts = _us(sample.get("t"))
            args = {label: _finite(sample.get(field), scale)
                    for label, field, scale in counter.series}
            args = {k: v for k, v in args.items() if v is not None}
            if ts is not None and args:
                out.append({"ph": "C", "name": _counter_name(counter.name, sample), "ts": ts,
                            "pid": pid, "tid": 0, "args": args})
    return out


def _reader_counters(profile, pid) -> List[dict]:
    """Per DataLoader: the queue's mean fill and the pops that found it empty, one point per
    reader-probe interval (at its end)."""
    out = []
    for r in getattr(profile, "reader", ()):
        sizes, ts = r.get("occupancy") or {}, _us(r.get("t"))
        n = sum(sizes.values())
        if r.get("what") != "interval" or ts is None or not n:
            continue
        fill = sum(int(size) * k for size, k in sizes.items()) / n
        out.append({"ph": "C", "name": f"DataLoader {r.get('loader')} queue", "ts": ts,
                    "pid": pid, "tid": 0, "args": {"fill": round(fill, 3),
                                                   "empty pops": r.get("empty_pops") or 0}})
    return out


def _memory_counters(profile, pid) -> List[dict]:
    """The CPU memory pool's allocated/reserved bytes (MiB) at each training step's end and
    its step peak, one point per memory-probe step record (at the step's start)."""
    out = []
    for r in getattr(profile, "memory", ()):
        ts = _us(r.get("t"))
        if r.get("what") != "step" or ts is None:
            continue
        args = {label: _finite(r.get(field), MIB) for label, field in (
            ("allocated", "allocated"), ("reserved", "reserved"), ("step peak", "step_peak"))}
        out.append({"ph": "C", "name": "memory pool MiB", "ts": ts, "pid": pid, "tid": 0,
                    "args": {k: round(v, 3) for k, v in args.items() if v is not None}})
    return out


def _counter_name(template: str, sample: dict) -> str:
    class Missing(dict):
        def __missing__(self, key):
            return "?"
    return template.format_map(Missing(sample))


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
