"""The range a predicted speedup is stated with: where the measured speedup of the change
should fall.

A rule whose figures bound the gain (a lower bound from figures the contention inflated, with
the speed test's upper bound where it ran) sets Advice.expected_range itself. Every other
point prediction gets the model's error around it, widened by how much the run's own speed
moved (Throughput.spread): its card's measured speedup M is expected where the prediction P
is within `error` of it, |P / M - 1| <= error, that is M in [P / (1 + error), P / (1 - error)].

    error = sqrt(MODEL_ERROR[confidence]^2 + 2 * spread^2)

MODEL_ERROR covers every error benchmarks/bench_advice.py recorded for the cards of each
confidence in its three whole runs of 2026-11-28 on the 2-core machine of docs/benchmarks.md
(high: 19 point predictions, -25% to +30%; medium: 6, -12% to +26%; low: none, so wider);
the spread counts twice, once for the run measured and once for the run of the change.
"""

import math
from dataclasses import replace
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:  # base imports this module
    from .base import Advice

MODEL_ERROR = {"high": 0.30, "medium": 0.30, "low": 0.50}  # |predicted / measured - 1|
MAX_ERROR = 0.8  # an error this large or more: the range stops below at P / 1.8


def with_range(a: "Advice", spread: Optional[float]) -> "Advice":
    """`a` with its expected_range: the rule's own, or the model's error around its
    expected_speedup (unchanged without one); figures["range"] says which."""
    if a.expected_speedup is None:
        return a
    if a.expected_range is not None:
        low, high = a.expected_range
        return replace(a, figures={**a.figures, "range": {"basis": "bounds", "low": low,
                                                          "high": high}})
    error = model_error(a.confidence, spread)
    low, high = a.expected_speedup / (1 + error), a.expected_speedup / (1 - error)
    return replace(a, expected_range=(low, high), figures={**a.figures, "range": {
        "basis": "model", "low": low, "high": high, "error": error,
        "model_error": MODEL_ERROR[a.confidence], "run_spread": spread}})


def model_error(confidence: str, spread: Optional[float]) -> float:
    """The relative error a prediction of this confidence is stated with, on a run whose speed
    moved by `spread` (None: not known, counted as nothing)."""
    error = math.sqrt(MODEL_ERROR[confidence] ** 2 + 2 * (spread or 0.0) ** 2)
    return min(error, MAX_ERROR)


def within(expected_range, measured: Optional[float]) -> Optional[bool]:
    """Whether a measured speedup fell in `expected_range` ((low, high or None)); None when
    either is missing."""
    if expected_range is None or measured is None or expected_range[0] is None:
        return None
    low, high = expected_range
    return low <= measured and (high is None or measured <= high)


def range_text(a: "Advice") -> Optional[str]:
    """The card's range line: '1.42-2.13x steps/s (...)', or None without a range."""
    if a.expected_range is None:
        return None
    low, high = a.expected_range
    basis = (a.figures or {}).get("range") or {}
    if basis.get("basis") != "model":
        if high is None:
            return f"{low:.2f}x steps/s or more (a lower bound; no upper bound measured)"
        return f"{low:.2f}x-{high:.2f}x steps/s (the bounds the measured figures set)"
    span = f"{low:.2f}x-{high:.2f}x"
    spread = basis.get("run_spread")
    moved = (f"; this run's speed moved {spread:.1%} between its parts"
             if spread is not None else "")
    return (f"{span} steps/s ({a.confidence}-confidence predictions measured within "
            f"{basis['model_error']:.0%} in benchmarks/bench_advice.py{moved})")
