"""The report's Parallel section: the ParallelExecutor's threads and places, thread busy time,
op concurrency, the scheduler's own cost, gradient combining, stragglers, scope drops and
fusions (the summary's typed ParallelFigures). Absent for jobs that never ran one."""

from typing import Optional

from rich.table import Table

from ..profile.figures import DropFigures, ParallelFigures
from .fmt import add_rows, finite, label_table, ms, nbytes, pct


def parallel_section(profile, s) -> Optional[Table]:
    p = s.parallel
    if p is None:
        return None
    table = label_table(f"Parallel: ParallelExecutor · {p.places} place(s) · "
                        f"{p.threads} thread(s) · {p.reduce}",
                        "threads busy", _busy(p))
    add_rows(table, [("cpu threads", _cpu_threads(profile, s, p)),
                     ("concurrency", _concurrency(p)), ("scheduler", _scheduler(p)),
                     ("combine", _combine(p)), ("stragglers", _stragglers(p)),
                     ("drop scope", _drop(p.drop)), ("fused", _fused(p.fused))])
    return table


def _busy(p: ParallelFigures) -> str:
    per = " ".join(pct(b, 0) for b in p.thread_busy if finite(b))
    return (f"mean {pct(p.thread_busy_mean, 0)} of the step inside ops"
            + (f" (per thread: {per})" if per else ""))


def _cpu_threads(profile, s, p: ParallelFigures) -> str:
    """Executor threads x BLAS threads (the last sampled count, else the header's) against
    the usable cores."""
    sampled = s.system.blas_threads if s.system is not None else None
    blas = int(sampled.last) if sampled is not None else profile.env.numpy.blas_threads
    cores = profile.env.cpu.cores
    if not blas or not cores:
        return ""
    total = p.threads * blas
    verdict = "oversubscribed" if total > cores else "fits"
    return (f"{p.threads} executor x {blas} BLAS = {total} on {cores} usable cores "
            f"({verdict})")


def _concurrency(p: ParallelFigures) -> str:
    return (f"{p.concurrency:.2f} ops at a time on average (1.00 = one after another); "
            f"ready queue mean {p.ready_mean:.1f}, max {p.ready_max}")


def _scheduler(p: ParallelFigures) -> str:
    if not finite(p.sched_s_per_op):
        return ""
    return (f"{p.sched_s_per_op * 1e6:.1f} µs per op, {p.ops_per_step:.0f} ops per step "
            f"({pct(p.sched_share)} of the step, thread time)")


def _combine(p: ParallelFigures) -> str:
    if p.places < 2:
        return ""
    return (f"gradient {'all-reduce' if p.reduce == 'AllReduce' else 'reduce + broadcast'} "
            f"{ms(p.combine_s)} ms per step ({pct(p.combine_share)} of the step)")


def _stragglers(p: ParallelFigures) -> str:
    if p.places < 2 or not finite(p.straggler_share):
        return ""
    return f"the places finish {pct(p.straggler_share)} of the step apart on average"


def _drop(d: DropFigures) -> str:
    if not d.every:
        return ""
    if not d.count:
        return f"every {d.every} steps; no drop during the profile"
    held = f", holding up to {nbytes(d.held_bytes_max)}" if d.held_bytes_max else ""
    around = (f", the steps around each {ms(d.step_excess_s)} ms slower"
              if d.step_excess_s is not None else "")
    return (f"every {d.every} steps: {d.count} drop(s), {ms(d.wall_s_mean)} ms each{around} "
            f"({pct(d.share, 2)} of the time){held}")


def _fused(fused) -> str:
    parts = [f"{name} replaced {n} ops" for name, n in sorted(fused.items()) if n]
    return " · ".join(parts) if parts else ""
