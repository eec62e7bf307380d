"""Memory figures of the summary: the memory pool's peaks against its capacity, the peak by
category, the peak of each phase, the underlying (system) allocations per steady step and
their share of the step, fragmentation, an out-of-memory error's figures, and the
(batch size, step peak) and (bytes fed, step peak) points seen.

They come from the memory probe's records (probes/memory.py): per-step figures from the
memory records of the steady steps (matched by program and step) and the memory part of the
windows after them; when none matches (a very short job), from every training step's
(`scope` says which). Only the main program's steps count (the one the steady steps
belong to): an eval program run at another batch size would otherwise mix its peaks into
the training program's batch model. Phases map to the ops' memory categories: forward = activations,
backward = gradients, optimizer = optimizer (temporaries of the update ops).
"""

from collections import Counter
from dataclasses import replace
from typing import Optional

from . import figures as F
from . import records as r
from .windows import MAX_FEED_PEAKS, spread
from .memory_model import HEADROOM, batch_fit, fit, fixed_bytes, simulate

PHASES = (("forward", "activations"), ("backward", "gradients"), ("optimizer", "optimizer"))
CATEGORIES = tuple(f for f in F.ByCategory.__dataclass_fields__)


def memory_figures(profile, steady, cycle_s: Optional[float]) -> Optional[F.MemoryFigures]:
    """The memory summary (None when the memory probe wrote nothing). `steady`: the steady
    steps (summarize.Steady); `cycle_s`: their mean cycle (run + gap), seconds."""
    all_steps = profile.records("memory", r.MemoryStep)
    main = main_program(all_steps, steady)
    steps = [m for m in all_steps if m.program == main]
    peaks = profile.records("memory", r.MemoryPeak)
    ooms = profile.records("memory", r.MemoryOom)
    pools = profile.records("memory", r.MemoryPool)
    windows = [w.memory for w in profile.windows if w.memory is not None and w.program == main]
    pool = pools[-1] if pools else None
    if not (steps or peaks or ooms or windows or (pool and pool.capacity_bytes)):
        return None
    picked, scope = _steady(steps, steady)
    tail = [w.memory for w in steady.windows if w.memory is not None]
    last_peak, last_oom = (peaks[-1] if peaks else None), (ooms[-1] if ooms else None)
    capacity = _first(pool and pool.capacity_bytes, last_oom and last_oom.capacity_bytes)
    peak_alloc = _first(pool and pool.peak_allocated_bytes,
                        last_peak and last_peak.peak_allocated_bytes)
    peak_res = _first(pool and pool.peak_reserved_bytes,
                      last_peak and last_peak.peak_reserved_bytes)
    by_tag = (pool.by_tag_at_peak if pool and pool.by_tag_at_peak else
              last_peak.by_tag if last_peak else {})
    m = F.MemoryFigures(
        place=_first(pool and pool.place, last_oom and last_oom.place),
        strategy=pool.strategy if pool else None, capacity_bytes=capacity,
        peak_allocated_bytes=peak_alloc, peak_reserved_bytes=peak_res,
        peak_allocated_share=_ratio(peak_alloc, capacity),
        peak_reserved_share=_ratio(peak_res, capacity),
        reserved_per_allocated=_ratio(peak_res, peak_alloc),
        by_category_at_peak=F.ByCategory(**{c: by_tag.get(c, 0) for c in CATEGORIES}),
        phase_peaks=_phases(picked, tail),
        step_peak_bytes=max([m.step_peak_bytes for m in picked] +
                            [w.step_peak_bytes for w in tail], default=None),
        scope=scope, steps=len(picked) + sum(w.n for w in tail),
        **_allocs(picked, tail, cycle_s),
        fragmentation=pool.fragmentation if pool else None,
        cached_free_bytes=pool.cached_free_bytes if pool else None,
        gc=_first(pool and pool.gc, last_oom and last_oom.gc),
        inplace=_first(pool and pool.inplace, last_oom and last_oom.inplace),
        oom=last_oom, ooms=len(ooms), alloc_retries=pool.retries if pool else 0,
        batch_points=batch_points(steps, windows), feed_points=feed_points(steps, windows),
        at_step_peak=at_step_peak(profile, steady),
        traced_programs=tuple(sorted({t.program for t in profile.records("memory",
                                                                          r.MemoryTrace)})))
    return _with_models(m)


def _with_models(m: F.MemoryFigures) -> F.MemoryFigures:
    """`m` with its batch and feed models (memory_model.fit over its points)."""
    return replace(m, batch_model=batch_model(m), feed_model=feed_model(m))


def batch_model(m: F.MemoryFigures) -> Optional[F.ModelFigures]:
    """The memory model over the batch points, with the largest batch that leaves HEADROOM
    of the capacity free and its predicted step peak; None without a model."""
    model = batch_fit(m)
    if model is None:
        return None
    largest = model.largest(m.capacity_bytes) if m.capacity_bytes else None
    return model.figures(headroom=HEADROOM, largest_batch=largest,
                         largest_batch_peak_bytes=model.peak(largest) if largest else None)


def feed_model(m: F.MemoryFigures) -> Optional[F.ModelFigures]:
    """Peak against the bytes fed per step, where they vary more than the batch size does
    (sequences of varying length): memory_model.fit over the feed points."""
    if len(m.feed_points) <= max(len(m.batch_points), 1):
        return None
    model = fit(m.feed_points, fixed_bytes(m), unit="feed byte")
    return model.figures() if model else None


def at_step_peak(profile, steady) -> Optional[F.StepPeak]:
    """Where the traced step of the main program peaked (None without a trace)."""
    programs = [s.program for s in steady.steps[:1]] + [w.program for w in steady.windows[:1]]
    traces = profile.records("memory", r.MemoryTrace)
    trace = next((t for t in traces if t.program in programs[:1]), None) or \
        (traces[0] if traces else None)
    if trace is None:
        return None
    replay = simulate(trace, trace.gc, trace.inplace)
    op = replay["peak_op"]
    return F.StepPeak(trace.program, trace.step, F.PeakOp(op["index"], op["type"]) if op else None,
                      tuple((n, b) for n, b in replay["largest_live"]))


def main_program(steps, steady) -> Optional[int]:
    """The program whose memory figures count: the steady steps' (the summary's main
    program), else the one with the most memory steps."""
    first = steady.steps[:1] or steady.windows[:1]
    if first:
        return first[0].program
    counts = Counter(m.program for m in steps)
    return counts.most_common(1)[0][0] if counts else None


def _steady(steps, steady):
    keys = steady.keys()
    picked = [m for m in steps if (m.program, m.step) in keys]
    if picked or steady.windows:
        return picked, "steady"
    return list(steps), "all"


def _phases(rows, tail) -> F.PhasePeaks:
    out = {}
    for phase, tag in PHASES:
        values = [m.phase_peaks[tag] for m in rows if tag in m.phase_peaks]
        values += [w.phase_peaks[tag] for w in tail if tag in w.phase_peaks]
        out[f"{phase}_bytes"] = max(values) if values else None
    return F.PhasePeaks(**out)


def _allocs(rows, tail, cycle_s) -> dict:
    """Underlying allocations and pool requests per step, and the allocations' time share."""
    n = len(rows) + sum(w.n for w in tail)
    requests = sum(m.requests for m in rows) + sum(w.requests for w in tail)
    allocs = sum(m.system_allocs for m in rows) + sum(w.system_allocs for w in tail)
    if not n or not (requests or allocs):  # none counted: unknown, not none made (Paddle's
        return {}  # GPU allocator counts neither; PyTorch's reads them every 50th step)
    per_s = (sum(m.system_alloc_s for m in rows) + sum(w.system_alloc_s for w in tail)) / n
    return {"system_allocs_per_step": allocs / n, "system_alloc_s_per_step": per_s,
            "system_alloc_share": per_s / cycle_s if cycle_s else None,
            "requests_per_step": requests / n}


def batch_points(steps, windows=()) -> tuple:
    """((batch_size, highest step peak seen at that batch size), ...) by batch size."""
    return tuple(sorted(_highest(steps, "batch_size", windows, "batch_peaks").items()))


def feed_points(steps, windows=(), most: int = MAX_FEED_PEAKS) -> tuple:
    """((bytes fed, highest step peak seen with that many bytes fed), ...) by bytes fed: at
    most `most` of them (evenly spread, the smallest and largest kept)."""
    return tuple(spread(sorted(_highest(steps, "feed_bytes", windows, "feed_peaks").items()),
                        most))


def _highest(steps, key, windows, peaks) -> dict:
    """{a step's `key`: the highest step peak seen with it} over memory steps and the
    windows' `peaks` tables."""
    best = {}
    for m in steps:
        _raise(best, getattr(m, key), m.step_peak_bytes)
    for w in windows:
        for k, peak in getattr(w, peaks).items():
            _raise(best, k, peak)
    return best


def _raise(best, key, peak):
    if key and peak > best.get(key, -1):
        best[key] = peak


def _ratio(a, b):
    return a / b if a is not None and b else None


def _first(*values):
    return next((v for v in values if v is not None), None)
