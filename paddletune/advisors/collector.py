"""docs/advice.md #32: full garbage collections inside the training loop.

What is measured (sources/eager/gc_clock.py, PyTorch and Paddle 3 jobs): each collection of
Python's garbage collector of 5 ms or more on the training thread (records.GcPauseEvent),
and the objects the collector tracks (records.GcHeapEvent) at the first step's end and
after full collections. A full collection scans every tracked object; a job whose setup
(torch, a compiled model, a dataset held as Python objects) left most of them pays for
scanning that setup again at every one.

`gc.collect(); gc.freeze()` just before the loop moves what exists then into a permanent
generation no collection scans. A helper measured it on four jobs (Python 3.11, 2-core VM,
2026-11-30, collector CPU time, three or more interleaved runs each): full-collection time
5,063 -> 44 ms (an L-BFGS job, 36 full collections), 190 -> 8 ms and 294 -> 57 ms (setup
heaps of 0.9 and 0.3 million objects), 207 -> 25 ms (torch.compile's one in its first step).
The full collections came 3-19 times as often, each scanning only the objects made since.
The time saved was predicted, at or below what was measured in all four, by the
full-collection time times the share of the latest count already there at the first step's
end (heap_loop / heap_last): a loop that keeps growing Python state (a per-step history of
metrics) keeps paying for what it added.
"""

from typing import Optional

from .base import Advice, rule
from .facts import ms

MIN_FULL = 2  # full collections inside the steady steps (one may be a one-off)
LOW_SHARE, MEDIUM_SHARE, HIGH_SHARE = 0.02, 0.05, 0.15  # of the steps' time, in them


@rule
def gc_full_collections(profile) -> Optional[Advice]:
    """full garbage collections in the loop (#32)

    Fires when full collections of Python's garbage collector inside the steady steps took
    at least 2% of their time, two or more of them.
    """
    g = profile.summary.gc
    if g is None or g.full < MIN_FULL or not g.share or not g.pause_s:
        return None
    share = g.share * g.full_s / g.pause_s  # (the full collections' share of the steps)
    if share < LOW_SHARE:
        return None
    kept = _setup_share(g)
    speedup = 1 / (1 - share * kept) if kept is not None else None
    figures = {"full_collections": g.full, "full_s": g.full_s, "full_share": share,
               "max_pause_s": g.max_s, "heap_loop": g.heap_loop, "heap_last": g.heap_last,
               "setup_share": kept}
    return Advice(
        id="gc-full-collections", source=32,
        title=f"Full garbage collections take {share:.1%} of the steps",
        severity="high" if share >= HIGH_SHARE else "medium" if share >= MEDIUM_SHARE
        else "low",
        confidence="medium", evidence=_evidence(g, share, kept), change=CHANGE,
        expected_gain=_gain(speedup, share, kept), expected_speedup=speedup, figures=figures)


def _setup_share(g) -> Optional[float]:
    """The share of what a full collection scans that already existed at the first step's
    end: what freezing there takes out of every scan (None: the heap not counted)."""
    if not g.heap_loop or not g.heap_last:
        return None
    return min(g.heap_loop / g.heap_last, 1.0)


def _evidence(g, share: float, kept: Optional[float]) -> str:
    longest = f"; the longest {ms(g.max_s)}" if g.max_s else ""
    text = (f"{g.full} full collections of Python's garbage collector ran inside the steady "
            f"steps: {g.full_s:.2f} s, {share:.1%} of their time{longest}. Each scans every "
            f"object the interpreter tracks, and holds the GIL while it does")
    if kept is None:
        return text + "."
    return (text + f": {g.heap_last:,} at the latest count, {kept:.0%} of them "
            f"({g.heap_loop:,}) there already at the first step's end.")


def _gain(speedup: Optional[float], share: float, kept: Optional[float]) -> str:
    risks = ("; full collections then come more often, each scanning only the objects made "
             "since. Objects frozen are never freed: freeze after the setup, not after "
             "replacing the model or its data")
    if speedup is None:
        return (f"up to {1 / (1 - share):.2f}x steps/s if the full collections' time went "
                f"(the heap was not counted, so how much of it the setup left is unknown)"
                + risks)
    own = 1 - kept
    whose = (f", less the {own:.0%} of their scans the loop's own objects make"
             if own >= 0.005 else ", whose scans were of objects there before the loop")
    return (f"up to {speedup:.2f}x steps/s: the {share:.1%} of the steps' time in full "
            f"collections{whose}" + risks)


CHANGE = "\n".join([
    "import gc",
    "# after building the model, optimizer and DataLoaders, just before the training loop:",
    "gc.collect()  # free the setup's garbage first: what is frozen is never freed",
    "gc.freeze()  # what exists now is never scanned again",
])
