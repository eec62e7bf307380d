"""docs/advice.md #18: a few very long sequences among short ones: drop, clip or bucket them. Two
rules: the long batches' compute time (from the reader's per-batch shapes), and the memory
peak they set (from the memory probe's bytes fed and peak per step)."""

from dataclasses import asdict
from typing import Dict, Optional, Tuple

from ..profile.figures import DimFigures, LoaderFigures, LongBatches, ShapeFigures
from ..profile.records import MemoryStep
from ..sources.code import CodeWriter
from .base import Advice, rule
from .facts import enough_steps, human_bytes, main_loader, ms, writer
from .memory import memory_summary, pressure, pressure_prefix

OUTLIER_FACTOR = 2.0  # a varying dim whose max exceeds its p95 this many times has outliers
FOLLOWS_FACTOR = 1.5  # ... that matter when steps on the long batches are this much slower
MEMORY_FACTOR = 1.3  # long batches set the peak when it is this much above the others'
MIN_MEMORY_STEPS = 20  # steps with memory figures the memory rule needs
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
    long, outlier = f.long_batches, _outlier_dim(f.shapes)
    if long is None or outlier is None or (long.slowdown or 0) < FOLLOWS_FACTOR:
        return None
    name, dim = outlier
    cycle_s = profile.summary.cycle_s.mean
    per_step_s = _excess_per_step(profile, long)
    speedup = cycle_s / (cycle_s - per_step_s) if cycle_s > per_step_s else None
    share = long.long_share or 0.0
    return Advice(
        id="long-sequence-outliers", source=18, confidence="medium",
        severity="medium" if share >= MEDIUM_SHARE else "low",
        title=f"A few long batches of {name!r} cost {share:.0%} of the compute",
        evidence=_evidence(name, dim, long),
        change=_change(writer(profile), f, name, dim), expected_speedup=speedup,
        expected_gain=(f"up to {speedup:.2f}x steps/s if the long batches cost what the others "
                       f"do ({ms(per_step_s)} less per step on average); it also caps the "
                       f"peak memory a long batch needs" if speedup else "unknown"),
        figures={"feed": name, **asdict(dim), **asdict(long), "speedup": speedup})


def _excess_per_step(profile, long: LongBatches) -> float:
    """What the long batches add to the mean step's compute: from the per-size costs the
    reader probe keeps, or, when more, the steady steps' mean compute less the typical
    batch's (every steady step: the costs cover fewer, and a long step more or less in them
    swings the figure by a fifth; bench_advice's long-sequences job: 1.14 against 1.34 ms)."""
    sampled_s = long.long_steps * (long.long_compute_s - long.typical_compute_s) / long.steps
    breakdown = profile.summary.breakdown_s
    whole_run_s = breakdown.compute_s - long.typical_compute_s if breakdown else 0.0
    return max(sampled_s, whole_run_s, 0.0)


def _outlier_dim(shapes: Dict[str, ShapeFigures]) -> Optional[Tuple[str, DimFigures]]:
    """(feed name, its varying dim's figures) with the largest max / p95 over OUTLIER_FACTOR."""
    found = [(row.max / row.p95, name, row) for name, v in shapes.items()
             for row in v.varying if row.p95 and row.max > OUTLIER_FACTOR * row.p95]
    if not found:
        return None
    _, name, row = max(found, key=lambda x: x[0])
    return name, row


def _evidence(name: str, dim: DimFigures, long: LongBatches) -> str:
    return (f"{name!r} dim {dim.dim} varies from {dim.min:,} to {dim.max:,} (p50 "
            f"{dim.p50:,}, p95 {dim.p95:,}: the max is {dim.max / dim.p95:.1f}x the "
            f"p95); the {long.long_steps} of {long.steps} steps on batches above the "
            f"p95 size took {ms(long.long_compute_s)} of compute each against "
            f"{ms(long.typical_compute_s)} for the others ({long.slowdown:.1f}x), "
            f"{long.long_share or 0.0:.0%} of all compute time.")


def _change(code: CodeWriter, f: LoaderFigures, name: str, dim: DimFigures) -> str:
    feeds = list(f.config.feed)
    field = feeds.index(name) if name in feeds else 0
    axis = max(dim.dim - 1, 0)  # the batch dim is not in a sample
    return "\n".join([
        code.constant("MAX_LEN", dim.p95, f"the p95 of {name!r} dim {dim.dim} measured in "
                                          f"this run"),
        code.sample_filter(field, axis),
        "# and batch samples of similar length together (sort each shuffle buffer by length)",
        "# so that short samples are not padded to the longest one in their batch"])


@rule
def long_batch_memory(profile) -> Optional[Advice]:
    """long batches set the memory peak (#18)

    A few steps fed more than OUTLIER_FACTOR x the p95 bytes peak MEMORY_FACTOR x above
    every other step: dropping or clipping them brings the peak down to the others'.
    """
    m = memory_summary(profile)
    if m is None:
        return None
    steps = [r for r in profile.records("memory", MemoryStep)
             if r.feed_bytes and r.step_peak_bytes]
    if len(steps) < MIN_MEMORY_STEPS:
        return None
    fed = sorted(r.feed_bytes for r in steps)
    p95 = fed[int(0.95 * (len(fed) - 1))]
    long = [r for r in steps if r.feed_bytes > OUTLIER_FACTOR * p95]
    rest = [r for r in steps if r.feed_bytes <= p95]
    if not long or not rest:
        return None
    peak_long = max(r.step_peak_bytes for r in long)
    peak_rest = max(r.step_peak_bytes for r in rest)
    if peak_long < MEMORY_FACTOR * peak_rest:
        return None
    worst = max(long, key=lambda r: r.step_peak_bytes)
    code = writer(profile)
    why = pressure_prefix(m)
    return Advice(
        id="long-batch-memory", source=18, severity="high" if pressure(m) else "low",
        confidence="high",
        title=(f"{len(long)} long batches set the memory peak: {human_bytes(peak_long)} "
               f"against {human_bytes(peak_rest)}"),
        evidence=(f"{why}{len(long)} of {len(steps)} steps were fed more than "
                  f"{OUTLIER_FACTOR:g}x the p95 of {human_bytes(p95)} per step (up to "
                  f"{human_bytes(worst.feed_bytes)}); their step peak reached "
                  f"{human_bytes(peak_long)} while every step fed at most the p95 peaked at "
                  f"{human_bytes(peak_rest)}."),
        change="\n".join([
            "# drop (or clip) the samples that make these batches long, in the sample "
            "generator,",
            "# and batch samples of similar length together so short ones are not padded",
            code.constant("MAX_LEN", "...", "e.g. the p95 length of your data"),
            code.reader_filter(0)]),
        expected_gain=(f"step peak {human_bytes(peak_long)} -> ~{human_bytes(peak_rest)} "
                       f"(the measured peak of the other steps)"),
        figures={"p95_feed_bytes": p95, "long_steps": len(long), "steps": len(steps),
                 "peak_long_bytes": peak_long, "predicted_peak_bytes": peak_rest,
                 "peak_basis": "measured",
                 "max_feed_bytes": worst.feed_bytes, "pressure": pressure(m)})
