"""ParallelExecutor figures of the summary, from the scheduler probe's records
(probes/scheduler.py): threads and places, how busy the threads were, the op concurrency
achieved, the scheduler's own cost per op, the ready queue, the gradient combining share,
stragglers among places, and the local-scope drops.

Per-step figures use the records of the steady steps of the main program (matched by program
and step); when none matches (a very short job), every step record of the main program. Drops
are rare (every num_iteration_per_drop_scope steps), so their share is taken over every
training step: total drop time / total step cycle time.
"""

from typing import Optional, Sequence


def parallel_figures(profile, steady: Sequence[dict], main_program) -> Optional[dict]:
    """The "parallel" summary entry (None when no ParallelExecutor step was recorded)."""
    rows = [r for r in profile.sched if r.get("what") == "step"]
    if not rows:
        return None
    mine = [r for r in rows if r.get("program") == main_program] or rows
    keys = {(s.get("program"), s.get("step")) for s in steady}
    picked = [r for r in mine if (r.get("program"), r.get("step")) in keys]
    scope = "steady" if picked else "all"
    picked = picked or mine
    last = picked[-1]
    n = len(picked)
    wall = sum(r["wall_s"] for r in picked)
    threads = last["threads"]
    ops = sum(r["ops"] for r in picked)
    busy_per_thread = [sum((r["busy_s"][i] if i < len(r["busy_s"]) else 0.0) for r in picked)
                       / wall if wall else None for i in range(threads)]
    spread = [(max(r["place_s"]) - min(r["place_s"])) / r["wall_s"]
              for r in picked if r.get("place_s") and r["wall_s"] > 0]
    return {"places": last["places"], "threads": threads, "reduce": last["reduce"],
            "steps": n, "scope": scope,
            "wall_s": wall / n,
            "thread_busy": busy_per_thread,
            "thread_busy_mean": (sum(b for b in busy_per_thread if b is not None) / threads
                                 if threads and wall else None),
            "concurrency": sum(r["concurrency"] for r in picked) / n,
            "ops_per_step": ops / n,
            "sched_s_per_op": sum(r["sched_s"] for r in picked) / ops if ops else None,
            "sched_share": sum(r["sched_s"] for r in picked) / wall if wall else None,
            "ready_mean": sum(r["ready_mean"] for r in picked) / n,
            "ready_max": max(r["ready_max"] for r in picked),
            "combine_s": sum(r["combine_s"] for r in picked) / n,
            "combine_share": sum(r["combine_s"] for r in picked) / wall if wall else None,
            "straggler_share": sum(spread) / len(spread) if spread else None,
            "fused": dict(last.get("fused") or {}),
            "drop": _drops(profile, main_program, last.get("drop_every"))}


def _drops(profile, main_program, every) -> dict:
    drops = [r for r in profile.sched if r.get("what") == "drop"
             and r.get("program") in (main_program, None)]
    cycle = sum(s["wall_s"] + (s.get("gap_s") or 0.0) for s in profile.steps
                if s.get("program") == main_program and not s.get("startup"))
    spent = sum(d["wall_s"] for d in drops)
    return {"every": every, "count": len(drops),
            "wall_s_mean": spent / len(drops) if drops else None,
            "share": spent / cycle if cycle else None,
            "held_bytes_max": max((d["held_bytes"] for d in drops), default=None),
            "variables_max": max((d["variables"] for d in drops), default=None)}
