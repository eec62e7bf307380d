"""The batch sizes a tuning race tries: up to the largest batch that fits, found with the
memory model and verified by trials.

The summary's memory model (summary.memory.batch_model, paddletune/profile/memory_model.py;
a trial keeps it as JSON) predicts the largest batch leaving HEADROOM of the capacity free; a
trial verifies it. After each verification trial the (batch, peak) points measured so far are
fitted with a line and the next guess is kept between the largest batch that fitted and the
smallest that did not (out of memory, or too full); bisection when the line says nothing
usable. The ladder is then half the job's batch, its doublings, and that largest batch, less
the sizes that cannot win:
throughput is taken to be single-peaked in the batch size (it rises while a larger batch
uses the machine better, then may fall as a step outgrows a cache), so once the batches
measured so far (the job's own and the verified ones, moments apart) show a batch clearly
slower than the fastest one, nothing beyond it, on its side, can be faster than the fastest.
And a step of a larger batch never takes less time than one of a smaller batch, so a size
between measured ones runs at most its size times the steps/s of the largest measured size
below it: a size whose bound the fastest clearly beats cannot win (a job 4x faster at 160
than at 16 leaves 32 and 64 out: at most 2x and 4x the job's own samples/s).
"""

import dataclasses

from typing import Dict, List, Optional

from ..profile.memory_model import HEADROOM
from . import space as sp

MAX_BATCH_PROBES = 4  # trials to find the largest batch that fits
CLOSE_ENOUGH = 0.05  # a guess within 5% of a batch known to fit is not worth a trial


def batch_ladder(tuner) -> List[int]:
    """The batch sizes to race against the job's own: the --space values when given, else
    own/2, own x 2^k and the verified largest."""
    knob = tuner.space.knobs["batch_size"]
    own = knob.current
    if knob.why == sp.GIVEN:
        return [v for v in knob.values if v != own]
    top = largest_batch(tuner, own)
    ladder = sorted({own // 2, *doublings(own, top), top} - {0, own}) if top else []
    if own >= 2 and own // 2 not in ladder:
        ladder.insert(0, own // 2)
    return ladder


def unimodal_prune(tuner, ladder, points: Dict[int, list]) -> List[int]:
    """`ladder` less the batch sizes that cannot beat the fastest of `points` ({batch: its
    trials}, measured moments apart) if throughput is single-peaked in the batch size: those
    beyond a measured batch that the fastest clearly beats (`tuner.better`), on that batch's
    side. A note says which were left out and why."""
    if not points:
        return ladder
    best = max(points, key=lambda b: tuner.score_of(points[b]))
    slower = [b for b in points if b != best and tuner.better(points[best], points[b])]
    lo = max((b for b in slower if b < best), default=None)
    hi = min((b for b in slower if b > best), default=None)
    kept = [b for b in ladder if (lo is None or b >= lo) and (hi is None or b <= hi)]
    left = sorted(set(ladder) - set(kept))
    if left:
        rate = {b: tuner.score_of(runs) for b, runs in points.items()}
        why = " and ".join(f"{rate[best] / rate[b] - 1:.0%} faster than {b}"
                           for b in (lo, hi) if b is not None)
        tuner.notes.append(f"batch sizes {', '.join(map(str, left))} not tried: {best} ran "
                           f"{why}, and throughput is taken to be single-peaked in the batch "
                           f"size")
    return step_time_prune(tuner, kept, points, best)


def step_time_prune(tuner, ladder, points: Dict[int, list], best: int) -> List[int]:
    """`ladder` less the sizes above a measured one whose bound (the size times the steps/s
    of the largest measured size below it: a larger batch's step takes no less time) the
    fastest of `points`, `best`, clearly beats. A note says which were left out and why."""
    kept, left = [], []
    for b in ladder:
        below = max((m for m in points if m < b and _rated(points[m])), default=None)
        if b in points or below is None:
            kept.append(b)
            continue
        bound = [dataclasses.replace(t, samples_per_s=t.steps_per_s * b) for t in points[below]]
        if tuner.better(points[best], bound):
            left.append((b, below, tuner.score_of(bound)))
        else:
            kept.append(b)
    if left:
        sizes = ", ".join(str(b) for b, _, _ in left)
        bounds = ", ".join(f"{b} at most {rate:,.0f}" for b, _, rate in left)
        tuner.notes.append(
            f"batch sizes {sizes} not tried: their steps take no less time than those of the "
            f"smaller size measured below each, so their samples/s are bounded ({bounds}), "
            f"clearly below the {tuner.score_of(points[best]):,.0f} of {best}")
    return kept


def _rated(runs) -> bool:
    return bool(runs) and all(t.ok and t.steps_per_s for t in runs)


def largest_batch(tuner, own) -> Optional[int]:
    """The largest batch (at most the cap) verified to run within the memory headroom, or
    None when nothing above `own` does."""
    cap = tuner.options.max_batch_size or own * sp.DEFAULT_MAX_BATCH_FACTOR
    latest = tuner.latest(tuner.incumbent)
    largest = _model_largest(latest)
    guess = min(largest, cap) if largest else cap
    tuner.notes.append(f"memory model: largest batch with {HEADROOM:.0%} headroom "
                       f"{largest if largest else 'unknown'} (cap {cap})")
    good, bad = own, None
    points = [(own, latest.peak_bytes)] if latest and latest.peak_bytes else []
    capacity = latest.capacity_bytes if latest else None
    for _ in range(MAX_BATCH_PROBES):
        if guess is None or guess <= good or (bad is not None and guess >= bad):
            break
        setting = sp.merged(tuner.incumbent, {"batch_size": guess}, tuner.space)
        # steps0 steps, or the calibrated time where a larger batch's steps take longer:
        # the trial is also the ladder race's first-rung trial of this size
        t = tuner.trial(setting, tuner.steps0, "batch:verify", scale=guess / own,
                        duration_s=tuner.rung_s())
        if t.ok and tuner.fits(t):
            good = guess
            points.append((guess, t.peak_bytes))
        elif t.status in ("oom", "ok"):  # out of memory, or too full
            bad = guess
            tuner.failed[sp.key(setting)] = t.status if not t.ok else "too full"
        else:  # crashed, timed out: not a matter of memory, and nothing to bisect
            tuner.failed[sp.key(setting)] = t.status
            tuner.notes.append(f"batch {guess} {t.status} (not out of memory): "
                               f"{t.message or 'no message'}; see {t.log}. Larger batches "
                               f"were not tried")
            break
        guess = next_batch(points, capacity, good, bad, cap)
    return good if good > own else None


def next_batch(points, capacity, good, bad, cap) -> Optional[int]:
    """The next batch to verify: the fitted line's largest safe batch, kept strictly
    between `good` (fitted) and `bad` (did not; None: none yet) and at most `cap`; the
    midpoint when the line says nothing usable (or more than a batch that did not fit);
    None when the gap is too small or the line's largest is `good` or less."""
    upper = min(bad if bad is not None else cap + 1, cap + 1)
    if upper - good <= max(1, CLOSE_ENOUGH * good):
        return None
    guess = line_largest([p for p in points if p[1]], capacity) if capacity else None
    if guess is not None and guess <= good:
        return None  # the line's largest safe batch is one known to fit: nothing above it
    if guess is None or not guess < upper:  # (a line that puts it past one that did not fit
        # is wrong: bisect)
        guess = (good + upper) // 2 if bad is not None else min(cap, good * 2)
    if guess - good <= CLOSE_ENOUGH * good:
        return None
    return guess if good < guess < upper else None


def line_largest(points, capacity) -> Optional[int]:
    """The largest batch whose peak, on the least-squares line through the measured (batch,
    peak) points, leaves HEADROOM of `capacity` free; None without two distinct batches."""
    xs = [x for x, _ in points]
    if len(set(xs)) < 2:
        return None
    n = len(points)
    mx, mp = sum(xs) / n, sum(p for _, p in points) / n
    slope = sum((x - mx) * (p - mp) for x, p in points) / sum((x - mx) ** 2 for x in xs)
    if slope <= 0:
        return None
    return int(((1 - HEADROOM) * capacity - (mp - slope * mx)) // slope)


def doublings(own, top) -> List[int]:
    out, b = [], own * 2
    while b < top:
        out.append(b)
        b *= 2
    return out


def _model_largest(trial) -> Optional[int]:
    """The largest batch the memory model of `trial`'s profile predicts to leave the headroom
    free (figures.ModelFigures.largest_batch, kept as JSON by the trial), None without one."""
    if trial is None or not trial.batch_model:
        return None
    return trial.batch_model.get("largest_batch")
