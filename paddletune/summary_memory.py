"""Memory figures of the summary: the CPU memory pool's peaks against its capacity, the peak
by category, the peak of each phase, the underlying (system) allocations per steady step and
their share of the step, fragmentation, an out-of-memory error's figures, and the
(batch size, step peak) and (bytes fed, step peak) points seen.

They come from the memory probe's records (probes/memory.py) and its probe record. Per-step
figures use the memory samples of the steady steps (matched by program and step); when none
matches (a very short job), every training step's (`scope` says which). Phases map to the
ops' memory categories: forward = activations, backward = gradients, optimizer = optimizer
(temporaries of the update ops).
"""

from typing import Optional, Sequence

from .memory_model import HEADROOM, batch_fit, fit, fixed_bytes, simulate

PHASES = (("forward", "activations"), ("backward", "gradients"), ("optimizer", "optimizer"))
MAX_FEED_POINTS = 64
CATEGORIES = ("parameters", "optimizer_state", "activations", "gradients", "optimizer", "reader",
              "other")


def memory_figures(profile, steady: Sequence[dict], cycle_s: Optional[float]) -> Optional[dict]:
    """The memory summary (None when the memory probe wrote nothing and left no result).
    `steady`: the steady step records; `cycle_s`: their mean cycle (run + gap), seconds."""
    result = (profile.probes.get("memory") or {}).get("result") or {}
    records = profile.memory
    steps = [r for r in records if r.get("what") == "step"]
    peaks = [r for r in records if r.get("what") == "peak"]
    ooms = [r for r in records if r.get("what") == "oom"]
    if not (steps or peaks or ooms or result.get("capacity")):
        return None
    last_peak = peaks[-1] if peaks else {}
    last_oom = ooms[-1] if ooms else {}
    picked, scope = _steady(steps, steady)
    capacity = result.get("capacity") or (ooms[-1].get("capacity") if ooms else None)
    peak_alloc = _first(result.get("peak_allocated"), last_peak.get("peak_allocated"))
    peak_res = _first(result.get("peak_reserved"), last_peak.get("peak_reserved"))
    by_tag = result.get("by_tag_at_peak") or last_peak.get("by_tag") or {}
    out = {"place": result.get("place"), "strategy": result.get("strategy"),
            "capacity_bytes": capacity, "peak_allocated_bytes": peak_alloc,
            "peak_reserved_bytes": peak_res,
            "peak_allocated_share": _ratio(peak_alloc, capacity),
            "peak_reserved_share": _ratio(peak_res, capacity),
            "reserved_per_allocated": _ratio(peak_res, peak_alloc),
            "by_category_at_peak": {c: by_tag.get(c, 0) for c in CATEGORIES},
            "phase_peaks_bytes": _phases(picked),
            "step_peak_bytes": max((r.get("step_peak") or 0 for r in picked), default=None),
            "scope": scope, "steps": len(picked),
            **_allocs(picked, cycle_s),
            "fragmentation": result.get("fragmentation"),
            "cached_free_bytes": result.get("cached_free"),
            "gc": _first(result.get("gc"), last_oom.get("gc")),
            "inplace": _first(result.get("inplace"), last_oom.get("inplace")),
            "oom": _oom(ooms[-1]) if ooms else None, "ooms": len(ooms),
            "batch_points": batch_points(steps), "feed_points": feed_points(steps),
            "at_step_peak": None, "batch_model": None, "feed_model": None,
            "traced_programs": sorted(
                {r.get("program") for r in records if r.get("what") == "trace"}, key=str)}
    out["at_step_peak"] = at_step_peak(records, steady)
    out["batch_model"] = batch_model(out)
    out["feed_model"] = feed_model(out)
    return out


def batch_model(m: dict) -> Optional[dict]:
    """The memory model over the batch points (memory_model.fit), with the largest batch that
    leaves HEADROOM of the capacity free and its predicted step peak; None without a model."""
    model = batch_fit(m)
    if model is None:
        return None
    largest = model.largest(m["capacity_bytes"]) if m.get("capacity_bytes") else None
    return {**model.to_dict(), "headroom": HEADROOM, "largest_batch": largest,
            "largest_batch_peak_bytes": model.peak(largest) if largest else None}


def at_step_peak(records, steady) -> Optional[dict]:
    """Where the traced step of the main program peaked: {"program", "step", "op" {index,
    type}, "largest_live" [[temporary, bytes], ...]} (None without a trace)."""
    programs = [s.get("program") for s in steady]
    traces = [r for r in records if r.get("what") == "trace"]
    trace = next((r for r in traces if r.get("program") in programs[:1]), None) or \
        (traces[0] if traces else None)
    if trace is None:
        return None
    replay = simulate(trace, trace["gc"], trace["inplace"])
    return {"program": trace["program"], "step": trace["step"], "op": replay["peak_op"],
            "largest_live": replay["largest_live"]}


def feed_model(m: dict) -> Optional[dict]:
    """Peak against the bytes fed per step, where they vary more than the batch size does
    (sequences of varying length): memory_model.fit over the feed points."""
    feeds, batches = m.get("feed_points") or [], m.get("batch_points") or []
    if len(feeds) <= max(len(batches), 1):
        return None
    model = fit(feeds, fixed_bytes(m), unit="feed byte")
    return model.to_dict() if model else None


def _steady(steps, steady):
    keys = {(s.get("program"), s.get("step")) for s in steady}
    picked = [r for r in steps if (r.get("program"), r.get("step")) in keys]
    return (picked, "steady") if picked else (list(steps), "all")


def _phases(rows) -> dict:
    out = {}
    for phase, tag in PHASES:
        values = [(r.get("phase_peaks") or {}).get(tag) for r in rows]
        values = [v for v in values if v is not None]
        out[phase] = max(values) if values else None
    return out


def _allocs(rows, cycle_s) -> dict:
    """Underlying allocations and pool requests per step, and the allocations' time share."""
    n = len(rows)
    if not n:
        return {"system_allocs_per_step": None, "system_alloc_s_per_step": None,
                "system_alloc_share": None, "requests_per_step": None}
    per_s = sum(r.get("system_alloc_s") or 0.0 for r in rows) / n
    return {"system_allocs_per_step": sum(r.get("system_allocs") or 0 for r in rows) / n,
            "system_alloc_s_per_step": per_s,
            "system_alloc_share": per_s / cycle_s if cycle_s else None,
            "requests_per_step": sum(r.get("requests") or 0 for r in rows) / n}


def _oom(r) -> dict:
    keys = ("t", "place", "requested", "allocated", "reserved", "capacity", "peak", "free",
            "op_type", "op_index", "batch_size", "fit_batch_size", "by_tag", "largest",
            "phase", "gc", "inplace")
    return {k: r.get(k) for k in keys}


def batch_points(steps) -> list:
    """[[batch_size, highest step_peak seen at that batch size], ...] by batch size."""
    best = {}
    for r in steps:
        b, peak = r.get("batch_size"), r.get("step_peak")
        if b is not None and peak is not None and peak > best.get(b, -1):
            best[b] = peak
    return [[b, p] for b, p in sorted(best.items())]


def feed_points(steps, most: int = MAX_FEED_POINTS) -> list:
    """[[bytes fed, highest step_peak seen with that many bytes fed], ...] by bytes fed: at
    most `most` of them (evenly spread, the smallest and largest kept)."""
    best = {}
    for r in steps:
        b, peak = r.get("feed_bytes"), r.get("step_peak")
        if b and peak is not None and peak > best.get(b, -1):
            best[b] = peak
    points = [[b, p] for b, p in sorted(best.items())]
    if len(points) <= most:
        return points
    last = len(points) - 1
    return [points[round(i * last / (most - 1))] for i in range(most)]


def _ratio(a, b):
    return a / b if a is not None and b else None


def _first(*values):
    return next((v for v in values if v is not None), None)
