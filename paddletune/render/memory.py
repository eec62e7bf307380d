"""The report's Memory section: the CPU memory pool's peaks against its capacity, the peak by
category and by phase, the underlying allocations per step, fragmentation, and an
out-of-memory error's figures (the summary's typed MemoryFigures)."""

from typing import Optional

from rich.text import Text

from ..profile.figures import MemoryFigures, ModelFigures, StepPeak
from ..profile.memory_model import FAR, far_beyond
from ..profile.records import MemoryOom
from .fmt import NA, add_rows, finite, label_table, ms, nbytes, num, pct

CATEGORY_NAMES = (("parameters", "parameters"), ("optimizer_state", "optimizer state"),
                  ("activations", "activations"), ("gradients", "gradients"),
                  ("optimizer", "optimizer temporaries"), ("reader", "reader batches"),
                  ("other", "other"))
PHASES = ("forward", "backward", "optimizer")
UNLIMITED = 1 << 60  # a capacity this large means no limit


def memory_section(profile, s):
    """The Memory section, or a line saying why there are no memory figures."""
    m = s.memory
    if m is None and profile.source.framework != "fluid":
        return Text(f"Memory: no allocator figures ({profile.source.framework} on the CPU "
                    f"exposes none; the host memory is under System, and on a GPU its "
                    f"allocator's figures come here)", style="dim")
    if m is None:
        return Text("Memory: no figures (the memory probe saw no run on a CPU place; GPU "
                    "places have no pool here, and older profiles have no memory records)",
                    style="dim")
    table = label_table(f"Memory: {m.place or 'CPU'} pool · {m.strategy or NA} · capacity "
                        f"{_capacity(m.capacity_bytes)}",
                        "peak allocated", _peak(m, m.peak_allocated_bytes))
    add_rows(table, [
        ("peak reserved", _reserved(m)), ("at the peak", _categories(m)),
        ("phase peaks", _phases(m)), ("step peak", _step_peak(m)),
        ("held at peak", _held(m.at_step_peak)),
        ("system allocs", _allocs(m)), ("fragmentation", _fragmentation(m)),
        ("alloc retries", _retries(m)),
        ("GC / inplace", _settings(m)), ("host RSS", _rss(s)),
        ("batch sizes", _points(m)), ("batch model", _model(m.batch_model)),
        ("by bytes fed", _feed_model(m.feed_model)), ("out of memory", _oom(m.oom))])
    return table


def _capacity(n) -> str:
    return "unlimited" if finite(n) and n >= UNLIMITED else nbytes(n)


def _share(part, m: MemoryFigures) -> str:
    cap = m.capacity_bytes
    if not finite(part) or not finite(cap) or cap >= UNLIMITED:
        return ""
    share = part / cap
    return f" ({'<0.1%' if 0 < share < 0.001 else pct(share)} of capacity)"


def _peak(m: MemoryFigures, n) -> str:
    return f"{nbytes(n)}{_share(n, m)}" if finite(n) else NA


def _reserved(m: MemoryFigures) -> str:
    ratio = m.reserved_per_allocated
    extra = f"; {ratio:.2f}x the allocated peak" if finite(ratio) else ""
    return _peak(m, m.peak_reserved_bytes) + extra


def _categories(m: MemoryFigures) -> str:
    by = m.by_category_at_peak
    parts = [f"{name} {nbytes(getattr(by, key))}" for key, name in CATEGORY_NAMES
             if getattr(by, key)]
    return " · ".join(parts)


def _phases(m: MemoryFigures) -> str:
    p = m.phase_peaks
    parts = [f"{phase} {nbytes(getattr(p, f'{phase}_bytes'))}" for phase in PHASES
             if finite(getattr(p, f"{phase}_bytes"))]
    return " · ".join(parts) + " (allocated, highest per phase)" if parts else ""


def _step_peak(m: MemoryFigures) -> str:
    if not finite(m.step_peak_bytes):
        return ""
    scope = "steady steps" if m.scope == "steady" else "all steps"
    return f"{nbytes(m.step_peak_bytes)} at most within one step ({m.steps} {scope})"


def _held(p: Optional[StepPeak]) -> str:
    if p is None or p.op is None:
        return ""
    live = ", ".join(f"{name} {nbytes(n)}" for name, n in p.largest_live[:4])
    return (f"during op {p.op.type} (#{p.op.index}) of the traced step: "
            + (f"largest temporaries {live}" if live else "no temporaries"))


def _allocs(m: MemoryFigures) -> str:
    per = m.system_allocs_per_step
    if not finite(per):
        return ""
    if m.caching_allocator:
        return (f"{per:.1f} cudaMalloc calls per step (counted, not timed) for "
                f"{num(m.requests_per_step)} allocator requests")
    time_s = m.system_alloc_s_per_step or 0.0
    share = m.system_alloc_share
    of = f", {pct(share)} of the step" if finite(share) else ""
    took = f"{ms(time_s)} ms" if time_s >= 1e-3 else f"{time_s * 1e6:.1f} µs"
    return (f"{per:.1f} underlying allocations per step ({took}{of}) for "
            f"{num(m.requests_per_step)} pool requests")


def _fragmentation(m: MemoryFigures) -> str:
    if not finite(m.fragmentation):
        return ""
    if m.caching_allocator:
        return (f"{pct(m.fragmentation, 0)} of the reserved memory in inactive split blocks "
                f"(cached free {nbytes(m.cached_free_bytes)})")
    return (f"{pct(m.fragmentation, 0)} (cached free {nbytes(m.cached_free_bytes)}; 0% = one "
            f"free block)")


def _retries(m: MemoryFigures) -> str:
    if not m.alloc_retries:
        return ""
    return (f"{m.alloc_retries} (a cudaMalloc failed: the allocator freed its cached blocks, "
            f"synchronising the device, and tried again)")


def _settings(m: MemoryFigures) -> str:
    if m.gc is None:
        return ""
    return f"GC {'on' if m.gc else 'off'} · inplace {'on' if m.inplace else 'off'}"


def _rss(s) -> str:
    rss = s.system.rss_bytes if s.system is not None else None
    if rss is None or not finite(rss.max):
        return ""
    return f"peak {nbytes(rss.max)} (the process, system probe)"


def _points(m: MemoryFigures) -> str:
    points = m.batch_points
    shown = [f"{b} → {nbytes(p)}" for b, p in points[:6]]
    more = f" (+{len(points) - 6} more)" if len(points) > 6 else ""
    return ", ".join(shown) + more + " (step peak by batch size)" if shown else ""


def _model(b: Optional[ModelFigures]) -> str:
    if b is None:
        return ""
    how = ("fitted to the batch sizes above" if b.how.startswith("fit") else
           "parameters and optimizer state fixed, the rest scaled from the phase peaks at "
           "the one batch size measured")
    measured = max((x for x, _ in b.points), default=None)
    largest = (f"; largest batch leaving {pct(b.headroom)} free: {b.largest_batch} "
               f"(peak ~{nbytes(b.largest_batch_peak_bytes)})" if b.largest_batch else "")
    if far_beyond(b.largest_batch, measured):
        largest = (f"; memory is not the limit: the batch could grow over {FAR}x (to "
                   f"{b.largest_batch} with {pct(b.headroom)} free), but throughput stops "
                   f"growing long before that")
    return (f"step peak ≈ {nbytes(b.fixed_bytes)} + {nbytes(b.per_unit_bytes)} per "
            f"sample ({how}){largest}")


def _feed_model(f: Optional[ModelFigures]) -> str:
    if f is None:
        return ""
    return (f"step peak ≈ {nbytes(f.fixed_bytes)} + {f.per_unit_bytes:.2f} bytes per "
            f"byte fed ({len(f.points)} sizes fed; the sequence lengths vary)")


def _oom(o: Optional[MemoryOom]) -> str:
    if o is None:
        return ""
    op = f"op {o.op_type} (#{o.op_index})" if o.op_type else "a step"
    fit = f"; a batch of about {o.fit_batch_size} would fit" if o.fit_batch_size else ""
    return (f"{op} asked for {nbytes(o.requested_bytes)} with {nbytes(o.free_bytes)} left "
            f"(allocated {nbytes(o.allocated_bytes)}, capacity {nbytes(o.capacity_bytes)}, "
            f"batch {o.batch_size or NA}){fit}")
