"""ParallelExecutor figures of the summary, from the scheduler probe's records
(probes/scheduler.py): threads and places, how busy the threads were, the op concurrency
achieved, the scheduler's own cost per op, the ready queue, the gradient combining share,
stragglers among places, and the local-scope drops.

Per-step figures use the records of the steady steps of the main program (matched by program
and step) and the scheduler part of the windows after them; when none matches (a very short
job), every step record of the main program. Drops are rare (every
num_iteration_per_drop_scope steps), so their share is taken over every training step: total
drop time / total step cycle time.
"""

from typing import Optional

from . import figures as F
from . import records as r


class _Totals:
    """The scheduler figures of step records and windows added up."""

    def __init__(self, rows, windows):
        self.n = len(rows) + sum(w.n for w in windows)
        self.wall = sum(s.wall_s for s in rows) + sum(w.wall_s for w in windows)
        self.ops = sum(s.ops for s in rows) + sum(w.ops for w in windows)
        self.sched = sum(s.sched_s for s in rows) + sum(w.sched_s for w in windows)
        self.ready = sum(s.ready_mean for s in rows) + sum(w.ready_mean_sum for w in windows)
        self.ready_max = max([s.ready_max for s in rows] + [w.ready_max for w in windows])
        self.concurrency = (sum(s.concurrency for s in rows) +
                            sum(w.concurrency_sum for w in windows))
        self.combine = sum(s.combine_s for s in rows) + sum(w.combine_s for w in windows)
        spreads = [(max(s.place_s) - min(s.place_s)) / s.wall_s
                   for s in rows if s.place_s and s.wall_s > 0]
        self.spread_n = len(spreads) + sum(w.spread_n for w in windows)
        self.spread = sum(spreads) + sum(w.spread_sum for w in windows)
        self.busy = [sum(s.busy_s[i] if i < len(s.busy_s) else 0.0 for s in rows) +
                     sum(w.busy_s[i] if i < len(w.busy_s) else 0.0 for w in windows)
                     for i in range(max([len(s.busy_s) for s in rows] +
                                        [len(w.busy_s) for w in windows] + [0]))]


def parallel_figures(profile, steady, main_program) -> Optional[F.ParallelFigures]:
    """The ParallelExecutor's figures (None when no data-parallel step was recorded)."""
    rows = profile.records("sched", r.SchedStep)
    windows = [w.sched for w in profile.windows if w.sched is not None
               and w.program == main_program]
    if not rows and not windows:
        return None
    mine = [s for s in rows if s.program == main_program] or rows
    keys = steady.keys()
    picked = [s for s in mine if (s.program, s.step) in keys]
    tail = [w.sched for w in steady.windows if w.sched is not None]
    scope = "steady" if picked or tail else "all"
    if scope == "all":
        picked = mine
    last = picked[-1] if picked else None
    t = _Totals(picked, tail)
    threads = last.threads if last else tail[-1].threads
    busy = [t.busy[i] / t.wall if t.wall and i < len(t.busy) else None for i in range(threads)]
    share = (lambda x: x / t.wall if t.wall else None)
    return F.ParallelFigures(
        places=last.places if last else tail[-1].places, threads=threads,
        reduce=last.reduce if last else tail[-1].reduce, steps=t.n, scope=scope,
        wall_s=t.wall / t.n, thread_busy=tuple(busy),
        thread_busy_mean=(sum(b for b in busy if b is not None) / threads
                          if threads and t.wall else None),
        concurrency=t.concurrency / t.n, ops_per_step=t.ops / t.n,
        sched_s_per_op=t.sched / t.ops if t.ops else None, sched_share=share(t.sched),
        ready_mean=t.ready / t.n, ready_max=t.ready_max, combine_s=t.combine / t.n,
        combine_share=share(t.combine),
        straggler_share=t.spread / t.spread_n if t.spread_n else None,
        fused=dict((last.fused if last else tail[-1].fused) or {}),
        drop=_drops(profile, main_program, last.drop_every if last else tail[-1].drop_every))


def _drops(profile, main_program, every) -> F.DropFigures:
    drops = [d for d in profile.records("sched", r.SchedDrop) if d.program == main_program]
    cycle = sum(s.cycle_s for s in profile.steps if s.program == main_program
                and not s.startup)
    cycle += sum(w.parts["cycle"].sum for w in profile.windows
                 if w.program == main_program and "cycle" in w.parts)
    spent = sum(d.wall_s for d in drops)
    return F.DropFigures(every, len(drops), spent / len(drops) if drops else None,
                         spent / cycle if cycle else None,
                         max((d.held_bytes for d in drops), default=None),
                         max((d.variables for d in drops), default=None))
