"""docs/advice.md #10-#12 for the ParallelExecutor (a data-parallel
CompiledProgram or fluid.ParallelExecutor), from the scheduler probe's figures
(profile/parallel_figures.py):

- #10 BuildStrategy fusions: many optimizer updates, gradient all-reduces or
  elementwise_add + activation pairs, each one op the scheduler dispatches: the fusion flags,
  with the op count after;
- #11 num_threads: ops ran about one at a time although there were several threads (a small or
  sequential model): 1 thread; more threads than cores: as many as the ops overlapped, at most
  the cores; or ops waited in the ready queue while every thread was busy: more threads, at
  most the cores the BLAS threads leave;
- #12 num_iteration_per_drop_scope: dropping the local scopes costs a visible share of the
  time: a larger value, with the share after and the memory held meanwhile;
and the CPU part of #21, Reduce instead of AllReduce, in threads.py.
"""

import math
from typing import Optional, Sequence

from ..profile.figures import ParallelFigures
from ..profile.records import ProgramOp
from .base import Advice, rule
from .facts import (OPTIMIZER_NAMES, cpu_facts, enough_steps, human_bytes, is_forward,
                    main_ops, names, op_types_share, writer)

SERIAL = 1.25  # #11: concurrency below this with several threads: ops ran one at a time
BUSY = 0.8  # #11: threads busy at least this share of the step ...
WAITING = 1.0  # ... with at least this many ops waiting on average: more threads help
SCHED_MEDIUM = 0.10  # #11: scheduler thread time share of the step for a medium severity
DROP_SHARE = 0.01  # #12: drop time share of the training time that is worth a change
DROP_TARGET = 0.002  # #12: the share the suggested value aims at
DROP_HIGH = 0.20  # #12: from this share of the time the drops are the job's main cost
MIN_FUSED_OPS = 4  # #10: a fusion is worth it from this many ops it would merge
FUSABLE_OPTIMIZERS = ("sgd", "momentum", "adam")  # fuse_all_optimizer_ops supports these
ACTIVATIONS = ("relu", "sigmoid", "tanh", "scale", "gelu", "leaky_relu")


def parallel_summary(profile) -> Optional[ParallelFigures]:
    """The ParallelExecutor's figures, None without them or without enough steady steps."""
    p = profile.summary.parallel
    return p if p is not None and enough_steps(profile) else None


# --- #10 ----------------------------------------------------------------------------------------
@rule
def parallel_fusions(profile) -> Optional[Advice]:
    """BuildStrategy fusions (#10)

    Many optimizer, all-reduce or elementwise_add + activation ops that a fusion pass merges.
    """
    p = parallel_summary(profile)
    if p is None:
        return None
    ops, fused, places = main_ops(profile), p.fused, p.places
    found = []  # (flag, ops per step now, ops per step after, why)
    updates = [op for op in ops if op.type in OPTIMIZER_NAMES]
    kinds = {op.type for op in updates}
    if "fuse_all_optimizer_ops" not in fused and len(updates) >= MIN_FUSED_OPS \
            and kinds <= set(FUSABLE_OPTIMIZERS):
        runs = places if p.reduce == "AllReduce" else 1
        found.append(("fuse_all_optimizer_ops", len(updates) * runs, len(kinds) * runs,
                      f"{len(updates)} {'/'.join(sorted(kinds))} updates"))
    grads = [n for op in updates for n in op.inputs.get("Grad", ())]
    if "fuse_all_reduce_ops" not in fused and places > 1 and len(grads) >= MIN_FUSED_OPS:
        # one group per layer (the name before the first "."), the default grouping of
        # FLAGS_fuse_parameter_memory_size / FLAGS_fuse_parameter_groups_size
        layers = len({g.split(".", 1)[0] for g in grads})
        if layers < len(grads):
            found.append(("fuse_all_reduce_ops", len(grads), layers,
                          f"{len(grads)} gradient {p.reduce.lower()} ops in {layers} "
                          f"layer(s)"))
    pairs = _add_act_pairs(ops)
    if "fuse_elewise_add_act_ops" not in fused and pairs >= MIN_FUSED_OPS // 2:
        found.append(("fuse_elewise_add_act_ops", 4 * pairs * places, 2 * pairs * places,
                      f"{pairs} elementwise_add + activation pair(s), forward and backward"))
    if not found:
        return None
    saved = sum(now - after for _, now, after, _ in found)
    per_op = p.sched_s_per_op or 0.0
    share = op_types_share(profile, list(kinds) + ["elementwise_add", *ACTIVATIONS])
    return Advice(
        id="parallel-fusions", source=10, severity="low", confidence="medium",
        title=f"Fuse {len(found)} kind(s) of small ops: {saved} fewer ops per step",
        evidence=("; ".join(f"{why}: {now} ops per step" for _, now, _, why in found)
                  + f". Each op costs the scheduler {per_op * 1e6:.1f} µs besides its kernel"
                  + (f"; these ops take {share:.1%} of the op time" if share is not None
                     else "") + "."),
        change=writer(profile).build_strategy({flag: True for flag, *_ in found}),
        expected_gain=(f"{p.ops_per_step:.0f} -> ~{p.ops_per_step - saved:.0f} ops per "
                       f"step (about {saved * per_op * 1e3:.2f} ms of scheduling less per "
                       f"step, and fewer kernel launches)"),
        figures={"fusions": {flag: {"ops_now": now, "ops_after": after}
                             for flag, now, after, _ in found},
                 "ops_per_step": p.ops_per_step,
                 "predicted_ops_per_step": p.ops_per_step - saved,
                 "sched_s_per_op": per_op})


def _add_act_pairs(ops: Sequence[ProgramOp]) -> int:
    """Forward elementwise_add ops whose output only an activation op reads."""
    readers = {}
    for op in ops:
        for name in names(op.inputs):
            readers.setdefault(name, []).append(op.type)
    count = 0
    for op in ops:
        if op.type == "elementwise_add" and is_forward(op):
            out = names(op.outputs)
            kinds = readers.get(out[0], []) if out else []
            count += bool(kinds) and all(k in ACTIVATIONS for k in kinds)
    return count


# --- #11 ----------------------------------------------------------------------------------------
@rule
def num_threads(profile) -> Optional[Advice]:
    """ParallelExecutor threads (#11)

    ExecutionStrategy.num_threads from the op concurrency the scheduler achieved.
    """
    p = parallel_summary(profile)
    if p is None:
        return None
    threads, conc, ready = p.threads, p.concurrency, p.ready_mean
    cpu = cpu_facts(profile)
    code = writer(profile)
    seen = (f"with {threads} thread(s), ops ran {conc:.2f} at a time on average (the ready "
            f"queue held {ready:.1f} ops on average, {p.ready_max} at most); the threads "
            f"were inside ops {p.thread_busy_mean or 0.0:.0%} of the step")
    per_op = p.sched_s_per_op
    if per_op:
        seen += (f"; the scheduler itself took {per_op * 1e6:.1f} µs per op "
                 f"({p.sched_share or 0.0:.1%} of the step in thread time)")
    if threads > 1 and conc < SERIAL:
        return Advice(
            id="num-threads", source=11,
            severity="medium" if (p.sched_share or 0) >= SCHED_MEDIUM else "low",
            confidence="high",
            title=f"Ops run one at a time: use num_threads=1, not {threads}",
            evidence=(f"{seen}. The graph gives the threads nothing to do side by side (a "
                      f"small or sequential model): the extra threads only hand ops over."),
            change=code.exec_strategy({"num_threads": 1}),
            expected_gain=("the same ops without hand-offs between threads: faster or equal "
                           "(check with a second profile); "
                           f"{threads - 1} thread(s) fewer competing with BLAS for the cores"),
            figures={"threads": threads, "concurrency": conc, "ready_mean": ready,
                     "suggested_threads": 1, "sched_s_per_op": per_op})
    cores = cpu.cores or 1
    if threads > cores:
        fewer = min(cores, max(1, math.ceil(conc)))
        return Advice(
            id="num-threads", source=11, severity="low", confidence="medium",
            title=f"{threads} threads on {cores} cores: use num_threads={fewer}",
            evidence=(f"{seen}. More executor threads than the {cores} usable cores only "
                      f"take turns on them (and each op's BLAS threads add to that)."),
            change=code.exec_strategy({"num_threads": fewer}),
            expected_gain="fewer threads preempting one another: faster or equal (check "
                          "with a second profile)",
            figures={"threads": threads, "concurrency": conc, "ready_mean": ready,
                     "suggested_threads": fewer, "usable_cores": cores})
    cap = max(1, cores // max(1, cpu.blas_threads or 1))
    if ready >= WAITING and (p.thread_busy_mean or 0) >= BUSY and threads < cap:
        more = min(cap, threads + math.ceil(ready))
        return Advice(
            id="num-threads", source=11, severity="medium", confidence="medium",
            title=f"Ops wait for a thread: use num_threads={more}",
            evidence=(f"{seen}: ops were ready with every thread busy. {cpu.cores} usable "
                      f"cores with {cpu.blas_threads or '?'} BLAS thread(s) each leave room "
                      f"for {cap} executor threads."),
            change=code.exec_strategy({"num_threads": more}),
            expected_gain=f"the waiting ops run at once: faster (up to {more / threads:.1f}x "
                          f"on the ops that wait)",
            figures={"threads": threads, "concurrency": conc, "ready_mean": ready,
                     "suggested_threads": more, "thread_cap": cap})
    return None


# --- #12 ----------------------------------------------------------------------------------------
@rule
def drop_scope_cost(profile) -> Optional[Advice]:
    """scope drop cost (#12)

    Dropping the local scopes every num_iteration_per_drop_scope steps costs DROP_SHARE of the
    training time or more: a drop's own time, or the extra time of the steps around it where
    that is larger (profile/parallel_figures.py).
    """
    p = parallel_summary(profile)
    if p is None:
        return None
    d = p.drop
    share, every = d.share, d.every
    if not d.count or share is None or not every or share < DROP_SHARE:
        return None
    new = _nice(every * share / DROP_TARGET)
    after = share * every / new
    speedup = 1 / (1 - share + after)
    held = d.held_bytes_max or 0
    return Advice(
        id="drop-scope", source=12, confidence="high",
        severity=("high" if share >= DROP_HIGH else
                  "medium" if share >= 5 * DROP_SHARE else "low"),
        title=f"Dropping the local scopes costs {share:.1%}: drop every {new} steps",
        evidence=(f"num_iteration_per_drop_scope is {every}: {d.count} drop(s) "
                  f"{_drop_cost(d)} took {share:.1%} of the training time; each drop freed up "
                  f"to {human_bytes(held)} the local scopes held."),
        change=writer(profile).exec_strategy({"num_iteration_per_drop_scope": new}),
        expected_gain=(f"drops {share:.1%} -> ~{after:.2%} of the time: up to {speedup:.2f}x "
                       f"steps/s; the local scopes keep holding up to {human_bytes(held)} "
                       f"between drops"),
        expected_speedup=speedup,
        figures={"every": every, "suggested_every": new, "drop_share": share,
                 "predicted_drop_share": after, "held_bytes": held,
                 "drop_s": d.wall_s_mean, "step_excess_s": d.step_excess_s})


def _drop_cost(d) -> str:
    """What a drop costs, in words: its own time, or the steps around it where they show more."""
    own = (d.wall_s_mean or 0.0) * 1e3
    if d.step_excess_s is not None and d.cost_s_mean == d.step_excess_s:
        return (f"(each {own:.2f} ms itself, but the step that drops and the next one take "
                f"{d.step_excess_s * 1e3:.2f} ms more than two steps without a drop: the "
                f"synchronisation, the frees and the variables made again)")
    return f"of {own:.2f} ms each (a synchronisation of every thread and the frees)"


def _nice(n: float) -> int:
    """n rounded up to 1, 2 or 5 x a power of ten (at least 2)."""
    n = max(n, 2.0)
    base = 10 ** math.floor(math.log10(n))
    return int(next(m * base for m in (1, 2, 5, 10) if m * base >= n))
