"""The report's Parallel section: the ParallelExecutor's threads and places, thread busy time,
op concurrency, the scheduler's own cost, gradient combining, stragglers, scope drops and
fusions (summary_parallel.py). Absent for jobs that never ran one."""

from typing import Optional

from rich.table import Table

from ..advisors.facts import cpu_facts
from .fmt import NA, finite, label_table, ms, nbytes, pct


def parallel_section(profile, s) -> Optional[Table]:
    p = s.get("parallel")
    if not p:
        return None
    table = label_table(f"Parallel: ParallelExecutor · {p['places']} place(s) · "
                        f"{p['threads']} thread(s) · {p['reduce']}",
                        "threads busy", _busy(p))
    rows = [("cpu threads", _cpu_threads(profile, p)),
            ("concurrency", _concurrency(p)), ("scheduler", _scheduler(p)),
            ("combine", _combine(p)), ("stragglers", _stragglers(p)),
            ("drop scope", _drop(p.get("drop") or {})), ("fused", _fused(p.get("fused")))]
    for label, value in rows:
        if value:
            table.add_row(label, value)
    return table


def _busy(p) -> str:
    per = " ".join(pct(b, 0) for b in p.get("thread_busy") or [] if finite(b))
    return (f"mean {pct(p.get('thread_busy_mean'), 0)} of the step inside ops"
            + (f" (per thread: {per})" if per else ""))


def _cpu_threads(profile, p) -> str:
    """Executor threads x BLAS threads against the usable cores."""
    cpu = cpu_facts(profile)
    blas, cores = cpu["blas_threads"], cpu["cores"]
    if not blas or not cores:
        return ""
    total = p["threads"] * blas
    verdict = "oversubscribed" if total > cores else "fits"
    return (f"{p['threads']} executor x {blas} BLAS = {total} on {cores} usable cores "
            f"({verdict})")


def _concurrency(p) -> str:
    return (f"{p['concurrency']:.2f} ops at a time on average (1.00 = one after another); "
            f"ready queue mean {p['ready_mean']:.1f}, max {p['ready_max']}")


def _scheduler(p) -> str:
    per_op = p.get("sched_s_per_op")
    if not finite(per_op):
        return ""
    return (f"{per_op * 1e6:.1f} µs per op, {p['ops_per_step']:.0f} ops per step "
            f"({pct(p.get('sched_share'))} of the step, thread time)")


def _combine(p) -> str:
    if p["places"] < 2:
        return ""
    return (f"gradient {'all-reduce' if p['reduce'] == 'AllReduce' else 'reduce + broadcast'} "
            f"{ms(p['combine_s'])} ms per step ({pct(p.get('combine_share'))} of the step)")


def _stragglers(p) -> str:
    share = p.get("straggler_share")
    if p["places"] < 2 or not finite(share):
        return ""
    return f"the places finish {pct(share)} of the step apart on average"


def _drop(d) -> str:
    if not d.get("every"):
        return ""
    if not d.get("count"):
        return f"every {d['every']} steps; no drop during the profile"
    held = f", holding up to {nbytes(d['held_bytes_max'])}" if d.get("held_bytes_max") else ""
    return (f"every {d['every']} steps: {d['count']} drop(s), {ms(d['wall_s_mean'])} ms each "
            f"({pct(d.get('share'), 2)} of the time){held}")


def _fused(fused) -> str:
    parts = [f"{name} replaced {n} ops" for name, n in sorted((fused or {}).items()) if n]
    return " · ".join(parts) if parts else (NA if fused is None else "")
