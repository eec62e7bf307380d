"""docs/advice.md #22: large fetches every step: fetch the loss, the rest every N steps."""

from collections import Counter
from typing import List, Optional

from ..sources.code import CodeWriter
from .base import Advice, rule
from .facts import enough_steps, human_bytes, loss_name, main_ops, main_steps, ms, py_name, writer

MEDIUM_SHARE = 0.05  # fetch share of the step cycle: medium
HIGH_SHARE = 0.15  # ... high
LARGE_BYTES = 1 << 20  # fetched bytes per step that count as large ...
VISIBLE_SHARE = 0.02  # ... when their fetch also takes at least this share (low)
EVERY = 100  # fetch the other variables every EVERY steps
SMALL_BYTES = 64 << 10  # fetched bytes per step a CPU copies in microseconds


@rule
def large_fetch(profile) -> Optional[Advice]:
    """fetch cost (#22)

    Time and bytes copied out of the runtime each step.
    """
    if not enough_steps(profile):
        return None
    s = profile.summary
    share, fetch_s = s.shares.fetch, s.breakdown_s.fetch_s
    nbytes = (s.throughput.fetch_bytes_per_step if s.throughput is not None else 0) or 0
    severity = _severity(share, nbytes)
    if severity is None or _not_the_copy(profile, nbytes):
        return None
    fetched = fetched_names(profile)
    cycle_s = s.cycle_s.mean
    saved_s = fetch_s * (1 - 1 / EVERY)
    speedup = cycle_s / (cycle_s - saved_s) if cycle_s > saved_s else None
    return Advice(
        id="large-fetch", source=22, severity=severity,
        title=f"Fetching costs {share:.0%} of each step",
        evidence=(f"fetching {', '.join(map(repr, fetched)) or 'the fetch list'} takes "
                  f"{ms(fetch_s)} per step, {share:.1%} of the {ms(cycle_s)} step, and "
                  f"copies {human_bytes(nbytes)} out of the runtime per step "
                  f"({s.steady_steps} steady steps)."),
        change=_change(writer(profile), fetched, loss_name(main_ops(profile))),
        expected_gain=(f"up to {speedup:.2f}x steps/s ({ms(saved_s)} less per step) "
                       f"fetching the rest every {EVERY} steps" if speedup else "unknown"),
        expected_speedup=speedup,
        confidence="high" if len(fetched) > 1 else "medium",
        figures={"fetch_share": share, "fetch_s": fetch_s, "fetch_bytes_per_step": nbytes,
                 "fetched": fetched, "cycle_s": cycle_s, "every": EVERY})


def _not_the_copy(profile, nbytes: float) -> bool:
    """On CPU places a fetch is a copy: under SMALL_BYTES per step it takes microseconds, so a
    slow fetch phase is spent on something else (the ParallelExecutor drops its local scopes
    there, event subscribers run there). On a GPU even the loss's 4 bytes wait for the
    device to finish the step (a host sync), which fetching less often does save."""
    places = {s.place or "CPUPlace" for s in main_steps(profile)}
    on_cpu = bool(places) and all(p.startswith("CPU") for p in places)
    return on_cpu and nbytes < SMALL_BYTES


def _severity(share: float, nbytes: float) -> Optional[str]:
    if share >= HIGH_SHARE:
        return "high"
    if share >= MEDIUM_SHARE:
        return "medium"
    if nbytes >= LARGE_BYTES and share >= VISIBLE_SHARE:
        return "low"
    return None


def fetched_names(profile) -> List[str]:
    """The fetch list most training steps of the main program used."""
    lists = Counter(tuple(r.fetch or ()) for r in main_steps(profile))
    return list(lists.most_common(1)[0][0]) if lists else []


def _change(code: CodeWriter, fetched: List[str], loss: Optional[str]) -> str:
    keep = loss if loss in fetched else (fetched[0] if fetched else None)
    keep_py = keep if keep and keep.isidentifier() else "loss"
    others = [n for n in fetched if n != keep]
    rest = [keep_py] + [py_name(n) for n in others]
    renamed = [f"{p} is {n!r}" for p, n in zip(rest, [keep] + others) if n and p != n]
    notes = [f"# {', '.join(renamed)}"] if renamed else []
    return "\n".join([code.fetch_every(keep_py, rest[1:], EVERY), *notes])
