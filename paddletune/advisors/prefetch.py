"""docs/advice.md #27: DataLoader workers that keep up on average, yet the loop still waits:
the queue is too shallow for the workers' bursts -> raise prefetch_factor.

The signal is measured: each worker's time per batch (the forked workers' fetch timing) times
the batches they made, against the time the workers had, gives how busy they were. Workers
idle part of the time while the loop found the queue empty had time to make more batches; what
stopped them is the batches they may have outstanding (prefetch_factor per worker). The depth
that covers a burst is the loop's mean wait at an empty pop, in batches of its own work.

Only the waits for a batch still being made count: a pop also waits (beyond the measured
storage hand-over) with the batch due made and queued, reading it from the queue's pipe and
unpickling it, or with the loop's thread taken off its core on a loaded machine; a deeper
queue shortens none of those (helper s27's s01: 286 of 454 pops waited, with the queue 94%
full and the workers busy 3% of the time). How many pops can have waited for a batch still
being made is bounded by the workers' own fetch time (_making_bound)."""

import math
from typing import Optional

from ..profile.figures import LoaderFigures
from .base import Advice, rule
from .facts import declares_knob, enough_steps, main_loader, ms, writer
from .input import MIN_INPUT_S
from .producers import gain_severity

KNOB = "reader.prefetch_factor"
IDLE_BUSY = 0.9  # workers busy under this share of their time had time to make more batches
BURST_WAIT_SHARE = 0.05  # the loop waited at least this share of its step
DEFAULT_PREFETCH = 2  # PyTorch's and Paddle's default prefetch_factor
KEEP_UP = 1.0  # the workers make batches at least this many times as fast as the loop takes
# them when data is free (else they are too few: #2's advice, more workers)
MAX_PREFETCH = 8  # the largest factor advised (each batch outstanding is held in memory)


@rule
def prefetch_depth(profile) -> Optional[Advice]:
    """prefetch depth (#27)

    Fires when a DataLoader's worker processes make batches faster than the loop takes them
    and were idle part of the time, while the loop waited for the batch due: more batches
    outstanding per worker absorb the bursts.
    """
    f = main_loader(profile)
    plan = burst_plan(profile, f) if f is not None else None
    if plan is None:
        return None
    return Advice(
        id="prefetch-factor", source=27,
        title=(f"Raise prefetch_factor to {plan['prefetch_factor']}: the workers keep up, yet "
               f"the batch due is not ready in bursts"),
        severity=gain_severity("medium" if plan["wait_share"] >= 0.2 else "low",
                               plan["speedup"]),
        confidence="medium", evidence=_evidence(f, plan),
        change=(f"{writer(profile).loader(f.config, **_changes(f, plan))}"
                f"\n# {f.config.num_workers} x {plan['prefetch_factor']} batches outstanding:"
                f" each is held in memory until the loop takes it"),
        expected_gain=(f"up to {plan['speedup']:.2f}x steps/s ({ms(plan['cycle_s'])} -> "
                       f"{ms(plan['predicted_cycle_s'])} per step) if the deeper queue "
                       f"covers the bursts; the workers' measured time bounds it"),
        expected_speedup=plan["speedup"], figures=plan)


def burst_plan(profile, f: LoaderFigures) -> Optional[dict]:
    """The figures of #27 when it fires for loader `f` (None otherwise): reader-starved
    leaves this case to it."""
    workers = f.config.num_workers or 0
    s = profile.summary
    if workers < 1 or not declares_knob(profile, KNOB) or not enough_steps(profile) or \
            not s.cycle_s:
        return None
    slowest_s, busy = _worker_load(f, workers)
    # the waits for batches to be made: a deeper queue does not shorten their hand-over
    handover = f.handover_s_per_pop or 0.0
    full_wait_s = f.wait.per_step_s or 0.0
    wait_s = max(full_wait_s - handover * (f.consumer.batches_per_step or 1.0), 0.0)
    share = (f.wait.share or 0.0) * (wait_s / full_wait_s if full_wait_s else 1.0)
    made_total_s = max(f.wait.total_s - handover * f.batches, 0.0)
    per_batch, taken = f.consumer.s_per_batch, f.consumer.rate_per_s
    made = workers / slowest_s if slowest_s else None  # batches go round-robin, in order:
    # the slowest worker sets the pace
    waited = f.wait.waited_pops
    making = _making_bound(f, workers, per_batch) if waited and per_batch else 0
    could = min(waited, max(making, f.empty_pops)) if waited else 0
    if waited:  # (the waits for a batch still being made: their share of the waits)
        part = could / waited
        wait_s, share, made_total_s = wait_s * part, share * part, made_total_s * part
    if busy is None or busy >= IDLE_BUSY or not waited or not per_batch or \
            wait_s < MIN_INPUT_S or share < BURST_WAIT_SHARE or not made or not taken or \
            made < KEEP_UP * taken:
        return None
    prefetch = f.config.prefetch_factor or DEFAULT_PREFETCH
    capacity = f.config.capacity or workers * prefetch
    burst_s = max(made_total_s / could, f.wait.p90_s or 0.0)  # the wait at a burst
    short = math.ceil(burst_s / per_batch)  # batches of the loop's work a burst outlasts
    wanted = min(max(prefetch + 1, math.ceil((capacity + short) / workers)), MAX_PREFETCH)
    if wanted <= prefetch:
        return None
    cycle_s = s.cycle_s.mean
    predicted = min(max(cycle_s - wait_s, cycle_s * busy), cycle_s)  # the busiest worker's
    # own time bounds the step
    return {"workers": workers, "prefetch_factor": wanted, "current_prefetch": prefetch,
            "capacity": capacity, "workers_busy_share": busy, "empty_ratio": f.empty_ratio,
            "pops": f.batches, "empty_pops": f.empty_pops, "waited_pops": waited,
            "making_pops": could, "queue_mean": _queue_mean(f),
            "wait_per_step_s": wait_s, "wait_share": share, "burst_wait_s": burst_s,
            "handover_s_per_pop": handover, "loop_s_per_batch": per_batch,
            "worker_s_per_batch": f.producer.s_per_batch, "slowest_worker_s": slowest_s,
            "batches_short": short,
            "workers_batches_per_s": made, "loop_batches_per_s": taken,
            "cycle_s": cycle_s, "predicted_cycle_s": predicted,
            "speedup": cycle_s / predicted if predicted > 0 else None}


def _worker_load(f: LoaderFigures, workers: int):
    """(the slowest worker's time per batch, the busiest worker's share of the span: its
    time per batch times its batches); (None, None) when not measured. Without per-worker
    figures, the producers' mean."""
    rows = [w for w in f.workers if w.worker >= 0 and w.s_per_batch and w.batches]
    if not f.span_s:
        return None, None
    if rows:
        return (max(w.s_per_batch for w in rows),
                max(w.s_per_batch * w.batches for w in rows) / f.span_s)
    per_batch = f.producer.s_per_batch
    if not per_batch or not f.pushes:
        return None, None
    return per_batch, per_batch * f.pushes / (workers * f.span_s)


def _making_bound(f: LoaderFigures, workers: int, per_batch: float) -> int:
    """At most how many pops can have waited for a batch still being made. The batch due at
    a pop was asked for as the pop `capacity` pops before it returned: the loop did that many
    batches of its own work (per_batch each) since. The pop waits for it to be made only if
    its worker spent all that time on its own queue of batches; each worker holds
    prefetch_factor of those windows at once, so they add up to at most prefetch_factor
    times its time fetching: such pops number at most the workers' fetch time, spread over
    them, over the loop's time per batch. Plus the batches each pass asks for at its start
    (capacity a pass), whose windows are shorter."""
    rows = [w for w in f.workers if w.worker >= 0 and w.s_per_batch and w.batches]
    fetch_s = (sum(w.s_per_batch * w.batches for w in rows) if rows
               else (f.producer.s_per_batch or 0.0) * f.pushes)
    capacity = f.config.capacity or workers * (f.config.prefetch_factor or DEFAULT_PREFETCH)
    return int(fetch_s / workers / per_batch) + capacity * max(f.passes, 1)


def _queue_mean(f: LoaderFigures) -> Optional[float]:
    return f.occupancy.mean if f.occupancy is not None else None


def _held(plan: dict) -> str:
    """', while the queue held 1.3 batches on average' where it was not empty (PyTorch
    delivers batches in order: later ones wait behind the one due)."""
    mean = plan["queue_mean"]
    return (f" while the queue held {mean:.1f} batches on average (later batches wait "
            f"behind the one due)" if mean and mean >= 0.5 else "")


def _handover_left_out(plan: dict) -> str:
    handover = plan.get("handover_s_per_pop")
    return (f" (the {ms(handover)} hand-over of each batch from its worker left out: a "
            f"deeper queue does not shorten it)" if handover else "")


def _changes(f: LoaderFigures, plan: dict) -> dict:
    """The deeper queue alone: the script's persistent_workers kept (the writer would add
    persistent_workers=True, whose gain, the workers' start at each pass, is
    worker-start-per-pass's to state, not this card's; None: not written)."""
    return {"prefetch_factor": plan["prefetch_factor"],
            "persistent_workers": True if f.config.persistent_workers else None}


def _making(plan: dict) -> str:
    """Where fewer of the waits can have been for a batch still being made than waited:
    how many, and that the figures after it are theirs."""
    could, waited = plan["making_pops"], plan["waited_pops"]
    if could >= waited:
        return ""
    return (f"; of those, at most {could:,} can have waited for a batch still being made (the "
            f"workers' fetch time covers no more windows of {plan['capacity']} batches of the "
            f"loop's work), the rest waited with it made: the figures below are the "
            f"{could:,}'s")


def _evidence(f: LoaderFigures, plan: dict) -> str:
    empty = plan["empty_pops"]
    return (f"{f.name or 'the DataLoader'}'s {plan['workers']} worker process"
            f"{'es' * (plan['workers'] > 1)} took {ms(plan['worker_s_per_batch'])} per batch "
            f"(the slowest {ms(plan['slowest_worker_s'])}): "
            f"{plan['workers_batches_per_s']:,.0f} batches/s in turn against the "
            f"{plan['loop_batches_per_s']:,.0f} the loop takes when data is free, the busiest "
            f"busy {plan['workers_busy_share']:.0%} of the time: they keep up on average; "
            f"yet with {plan['capacity']} batches outstanding (prefetch_factor "
            f"{plan['current_prefetch']} x {plan['workers']}) the loop waited at least 1 ms "
            f"for the batch due at {plan['waited_pops']:,} of {plan['pops']:,} pops "
            f"({empty:,} found the queue empty){_held(plan)}{_making(plan)}: waits of "
            f"{ms(plan['burst_wait_s'])} (p90, or their mean), {plan['wait_share']:.0%} of its "
            f"{ms(plan['cycle_s'])} step{_handover_left_out(plan)}. A burst outlasts "
            f"{plan['batches_short']} batch(es) of the loop's {ms(plan['loop_s_per_batch'])} "
            f"work; idle workers had the time to make them, but no more batches outstanding.")
