"""The report's Memory section: the CPU memory pool's peaks against its capacity, the peak by
category and by phase, the underlying allocations per step, fragmentation, and an
out-of-memory error's figures."""

from rich.text import Text

from .fmt import NA, finite, label_table, ms, nbytes, num, pct

CATEGORY_NAMES = (("parameters", "parameters"), ("optimizer_state", "optimizer state"),
                  ("activations", "activations"), ("gradients", "gradients"),
                  ("optimizer", "optimizer temporaries"), ("reader", "reader batches"),
                  ("other", "other"))


def memory_section(profile, s):
    """The Memory section, or a line saying why there are no memory figures."""
    m = s.get("memory")
    if not m:
        return Text("Memory: no figures (the memory probe saw no run on a CPU place; GPU "
                    "places have no pool here, and older profiles have no memory records)",
                    style="dim")
    strategy = m.get("strategy") or NA
    table = label_table(f"Memory: {m.get('place') or 'CPU'} pool · {strategy} · capacity "
                        f"{_capacity(m.get('capacity_bytes'))}",
                        "peak allocated", _peak(m, "allocated"))
    rows = [("peak reserved", _reserved(m)), ("at the peak", _categories(m)),
            ("phase peaks", _phases(m)), ("step peak", _step_peak(m)),
            ("held at peak", _held(m.get("at_step_peak"))),
            ("system allocs", _allocs(m)), ("fragmentation", _fragmentation(m)),
            ("GC / inplace", _settings(m)), ("host RSS", _rss(s)),
            ("batch sizes", _points(m)), ("batch model", _model(m.get("batch_model"))),
            ("by bytes fed", _feed_model(m.get("feed_model"))),
            ("out of memory", _oom(m.get("oom")))]
    for label, value in rows:
        if value:
            table.add_row(label, value)
    return table


def _capacity(n) -> str:
    return "unlimited" if finite(n) and n >= 1 << 60 else nbytes(n)


def _share(part, m) -> str:
    cap = m.get("capacity_bytes")
    if not finite(part) or not finite(cap) or cap >= 1 << 60:
        return ""
    share = part / cap
    return f" ({'<0.1%' if 0 < share < 0.001 else pct(share)} of capacity)"


def _peak(m, what) -> str:
    n = m.get(f"peak_{what}_bytes")
    return f"{nbytes(n)}{_share(n, m)}" if finite(n) else NA


def _reserved(m) -> str:
    ratio = m.get("reserved_per_allocated")
    extra = f"; {ratio:.2f}x the allocated peak" if finite(ratio) else ""
    return _peak(m, "reserved") + extra


def _categories(m) -> str:
    by = m.get("by_category_at_peak") or {}
    parts = [f"{name} {nbytes(by[key])}" for key, name in CATEGORY_NAMES if by.get(key)]
    return " · ".join(parts)


def _phases(m) -> str:
    p = m.get("phase_peaks_bytes") or {}
    parts = [f"{phase} {nbytes(p[phase])}" for phase in ("forward", "backward", "optimizer")
             if finite(p.get(phase))]
    return " · ".join(parts) + " (allocated, highest per phase)" if parts else ""


def _step_peak(m) -> str:
    n = m.get("step_peak_bytes")
    if not finite(n):
        return ""
    scope = "steady steps" if m.get("scope") == "steady" else "all steps"
    return f"{nbytes(n)} at most within one step ({m.get('steps')} {scope})"


def _held(p) -> str:
    if not p or not p.get("op"):
        return ""
    live = ", ".join(f"{name} {nbytes(n)}" for name, n in p["largest_live"][:4])
    return (f"during op {p['op']['type']} (#{p['op']['index']}) of the traced step: "
            + (f"largest temporaries {live}" if live else "no temporaries"))


def _allocs(m) -> str:
    per = m.get("system_allocs_per_step")
    if not finite(per):
        return ""
    time_s = m.get("system_alloc_s_per_step") or 0.0
    share = m.get("system_alloc_share")
    of = f", {pct(share)} of the step" if finite(share) else ""
    took = f"{ms(time_s)} ms" if time_s >= 1e-3 else f"{time_s * 1e6:.1f} µs"
    return (f"{per:.1f} underlying allocations per step ({took}{of}) for "
            f"{num(m.get('requests_per_step'))} pool requests")


def _fragmentation(m) -> str:
    f = m.get("fragmentation")
    if not finite(f):
        return ""
    return (f"{pct(f, 0)} (cached free {nbytes(m.get('cached_free_bytes'))}; 0% = one free "
            f"block)")


def _settings(m) -> str:
    if m.get("gc") is None:
        return ""
    return f"GC {'on' if m['gc'] else 'off'} · inplace {'on' if m.get('inplace') else 'off'}"


def _rss(s) -> str:
    rss = ((s.get("samples") or {}).get("system") or {}).get("rss_bytes") or {}
    if not finite(rss.get("max")):
        return ""
    return f"peak {nbytes(rss['max'])} (the process, system probe)"


def _points(m) -> str:
    points = m.get("batch_points") or []
    shown = [f"{b} → {nbytes(p)}" for b, p in points[:6]]
    more = f" (+{len(points) - 6} more)" if len(points) > 6 else ""
    return ", ".join(shown) + more + " (step peak by batch size)" if shown else ""


def _model(b) -> str:
    if not b:
        return ""
    how = ("fitted to the batch sizes above" if b["how"].startswith("fit") else
           "parameters, gradients and optimizer state fixed, one batch size measured")
    largest = (f"; largest batch leaving {pct(b['headroom'])} free: {b['largest_batch']} "
               f"(peak ~{nbytes(b['largest_batch_peak_bytes'])})" if b.get("largest_batch")
               else "")
    return (f"step peak ≈ {nbytes(b['fixed_bytes'])} + {nbytes(b['per_unit_bytes'])} per "
            f"sample ({how}){largest}")


def _feed_model(f) -> str:
    if not f:
        return ""
    return (f"step peak ≈ {nbytes(f['fixed_bytes'])} + {f['per_unit_bytes']:.2f} bytes per "
            f"byte fed ({len(f['points'])} sizes fed; the sequence lengths vary)")


def _oom(o) -> str:
    if not o:
        return ""
    op = f"op {o.get('op_type')} (#{o.get('op_index')})" if o.get("op_type") else "a step"
    fit = (f"; a batch of about {o['fit_batch_size']} would fit"
           if o.get("fit_batch_size") else "")
    return (f"{op} asked for {nbytes(o.get('requested'))} with {nbytes(o.get('free'))} left "
            f"(allocated {nbytes(o.get('allocated'))}, capacity {nbytes(o.get('capacity'))}, "
            f"batch {o.get('batch_size') or NA}){fit}")
