"""ADVICE.md #18: a few very long sequences among short ones: drop, clip or bucket them."""

from typing import Optional

from .base import Advice, rule
from .facts import enough_steps, main_loader, ms

OUTLIER_FACTOR = 2.0  # a varying dim whose max exceeds its p95 this many times has outliers
FOLLOWS_FACTOR = 1.5  # ... that matter when steps on the long batches are this much slower
MEDIUM_SHARE = 0.10  # long batches' share of the compute time: medium (else low)


@rule
def long_sequence_outliers(profile) -> Optional[Advice]:
    """long-sequence outliers (#18)

    Fires when a fed variable's varying dim has max > 2x its p95 and the steps on those
    batches are clearly slower.
    """
    f = main_loader(profile)
    if f is None or not enough_steps(profile):
        return None
    long, outlier = f.get("long_batches"), _outlier_dim(f.get("shapes") or {})
    if not long or outlier is None or (long.get("slowdown") or 0) < FOLLOWS_FACTOR:
        return None
    name, dim = outlier
    saved_s = long["long_steps"] * (long["long_compute_s"] - long["typical_compute_s"])
    cycle_s = profile.summary["cycle_s"]["mean"]
    per_step_s = saved_s / long["steps"]
    speedup = cycle_s / (cycle_s - per_step_s) if cycle_s > per_step_s else None
    return Advice(
        id="long-sequence-outliers", source=18, confidence="medium",
        severity="medium" if long["long_share"] >= MEDIUM_SHARE else "low",
        title=f"A few long batches of {name!r} cost {long['long_share']:.0%} of the compute",
        evidence=_evidence(name, dim, long),
        change=_change(f, name, dim), expected_speedup=speedup,
        expected_gain=(f"up to {speedup:.2f}x steps/s if the long batches cost what the others "
                       f"do ({ms(per_step_s)} less per step on average); it also caps the "
                       f"peak memory a long batch needs" if speedup else "unknown"),
        figures={"feed": name, **dim, **long, "speedup": speedup})


def _outlier_dim(shapes):
    """(feed name, its varying dim's figures) with the largest max / p95 over OUTLIER_FACTOR."""
    found = [(row["max"] / row["p95"], name, row) for name, v in shapes.items()
             for row in v.get("varying") or [] if row["p95"] and
             row["max"] > OUTLIER_FACTOR * row["p95"]]
    if not found:
        return None
    _, name, row = max(found, key=lambda x: x[0])
    return name, row


def _evidence(name, dim, long) -> str:
    return (f"{name!r} dim {dim['dim']} varies from {dim['min']:,} to {dim['max']:,} (p50 "
            f"{dim['p50']:,}, p95 {dim['p95']:,}: the max is {dim['max'] / dim['p95']:.1f}x the "
            f"p95); the {long['long_steps']} of {long['steps']} steps on batches above the "
            f"p95 size took {ms(long['long_compute_s'])} of compute each against "
            f"{ms(long['typical_compute_s'])} for the others ({long['slowdown']:.1f}x), "
            f"{long['long_share']:.0%} of all compute time.")


def _change(f, name, dim) -> str:
    feeds = (f.get("config") or {}).get("feed") or []
    field = feeds.index(name) if name in feeds else 0
    axis = max(dim["dim"] - 1, 0)  # the batch dim is not in a sample
    return "\n".join([
        f"MAX_LEN = {dim['p95']}  # the p95 of {name!r} dim {dim['dim']} measured in this run",
        "def filtered(samples):  # wrap your sample generator",
        "    def gen():",
        "        for sample in samples():",
        f"            if sample[{field}].shape[{axis}] <= MAX_LEN:  # drop; or clip to MAX_LEN",
        "                yield sample",
        "    return gen",
        "# and batch samples of similar length together (sort each shuffle buffer by length)",
        "# so that short samples are not padded to the longest one in their batch"])
