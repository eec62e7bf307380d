"""ParallelExecutor figures of the summary, from the scheduler probe's records
(probes/scheduler.py): threads and places, how busy the threads were, the op concurrency
achieved, the scheduler's own cost per op, the ready queue, the gradient combining share,
stragglers among places, and the local-scope drops.

Per-step figures use the records of the steady steps of the main program (matched by program
and step) and the scheduler part of the windows after them; when none matches (a very short
job), every step record of the main program. Drops are rare (every
num_iteration_per_drop_scope steps), so their share is taken over every training step: total
drop cost / total step cycle time. A drop's cost is its own time, or, where the steady steps
recorded in full show more, the extra time of the step that drops and the step after it (the
local scopes' variables made again) over two steps without a drop: what a drop's
synchronisation, its frees and the re-allocation cost the loop, whoever is timed.
"""

import math
import statistics
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
        drop=_drops(profile, main_program, last.drop_every if last else tail[-1].drop_every,
                    keys))


MIN_DROP_PAIRS = 3  # drops whose step and next step are steady and recorded in full
MIN_PLAIN_STEPS = 5  # steady steps away from any drop
EXCESS_Z = 2.0  # the excess counts when at least this many standard errors above zero


def _drops(profile, main_program, every, steady_keys) -> F.DropFigures:
    drops = [d for d in profile.records("sched", r.SchedDrop) if d.program == main_program]
    cycle = sum(s.cycle_s for s in profile.steps if s.program == main_program
                and not s.startup)
    cycle += sum(w.parts["cycle"].sum for w in profile.windows
                 if w.program == main_program and "cycle" in w.parts)
    own = sum(d.wall_s for d in drops) / len(drops) if drops else None
    excess = _drop_excess(profile, main_program, drops, steady_keys)
    cost = max(own, excess) if own is not None and excess is not None else own
    return F.DropFigures(every, len(drops), own,
                         cost * len(drops) / cycle if cycle and cost is not None else None,
                         max((d.held_bytes for d in drops), default=None),
                         max((d.variables for d in drops), default=None),
                         step_excess_s=excess, cost_s_mean=cost)


def _drop_excess(profile, main_program, drops, steady_keys) -> Optional[float]:
    """The extra time a drop adds to the loop, measured on the steady steps recorded in full:
    the mean cycle of (the step that drops + the next one) minus twice the mean cycle of a
    step with no drop in it or just before it. None with fewer than MIN_DROP_PAIRS such pairs
    or MIN_PLAIN_STEPS plain steps, or when the excess is within EXCESS_Z standard errors of
    nothing (noise)."""
    cycles = {s.step: s.cycle_s for s in profile.steps
              if s.program == main_program and (s.program, s.step) in steady_keys}
    dropped = {d.step for d in drops}
    pairs = [cycles[k] + cycles[k + 1] for k in dropped if k in cycles and k + 1 in cycles]
    plain = [c for k, c in cycles.items() if k not in dropped and k - 1 not in dropped]
    if len(pairs) < MIN_DROP_PAIRS or len(plain) < MIN_PLAIN_STEPS:
        return None
    excess = statistics.fmean(pairs) - 2 * statistics.fmean(plain)
    error = math.sqrt(statistics.variance(pairs) / len(pairs) +
                      4 * statistics.variance(plain) / len(plain))
    return excess if excess > EXCESS_Z * error else None
