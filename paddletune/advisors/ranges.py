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

A predicted step peak (figures["predicted_peak_bytes"], memory advice) gets its range the same
way, from the error of what it was computed by (figures["peak_basis"], PEAK_ERROR). The
changed jobs' measured peaks, in tests/test_advisors_memory.py (each rule's change run for
real) and bench_advice's gc-off job, 2026-11-28:

    replay      the traced step replayed with the change (#15 GC, #16 inplace): +0.0% and
                +1.6% in the tests, +3.3% in bench_advice; stated within 10%
    measured    the other steps' own measured peak (#18 long batches): +0.0%; 10%
    fit         the batch model fitted to two or more measured batch sizes (#17): +0.0%; its
                largest miss on its own points, at least 10%
    accounting  the optimizer state's bytes taken off the peak (#19): +0.0% twice; 10%
    one point   the batch model through one measured batch with its fixed part given: an
                extrapolation nothing checked; 30%

As for a speedup, |P / M - 1| <= error: the measured peak M in [P / (1 + error),
P / (1 - error)], bytes (Advice.expected_peak_range); a fitted model's own error
(MemoryModel.error) is the same measure.
"""

import math
from dataclasses import replace
from typing import TYPE_CHECKING, Optional

from .facts import human_bytes

if TYPE_CHECKING:  # base imports this module
    from .base import Advice

MODEL_ERROR = {"high": 0.30, "medium": 0.30, "low": 0.50}  # |predicted / measured - 1|
MAX_ERROR = 0.8  # an error this large or more: the range stops below at P / 1.8
PEAK_ERROR = {"replay": 0.10, "measured": 0.10, "fit": 0.10, "accounting": 0.10,
              "one point": 0.30}  # |predicted peak / measured peak - 1|


def with_range(a: "Advice", spread: Optional[float]) -> "Advice":
    """`a` with its expected_range: the rule's own, or the model's error around its
    expected_speedup (unchanged without one); figures["range"] says which. A predicted step
    peak gets its expected_peak_range (with_peak_range)."""
    a = with_peak_range(a)
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


def with_peak_range(a: "Advice") -> "Advice":
    """`a` with the range of its predicted step peak (figures["predicted_peak_bytes"]) from
    the error of its basis (PEAK_ERROR); unchanged without a predicted peak or a known basis."""
    figures = a.figures or {}
    predicted, basis = figures.get("predicted_peak_bytes"), figures.get("peak_basis")
    if not predicted or basis not in PEAK_ERROR or a.expected_peak_range is not None:
        return a
    error = PEAK_ERROR[basis]
    if basis == "fit":
        error = max(error, float((figures.get("model") or {}).get("max_error") or 0.0))
    error = min(error, MAX_ERROR)
    low, high = predicted / (1 + error), predicted / (1 - error)
    return replace(a, expected_peak_range=(low, high), figures={**figures, "peak_range": {
        "basis": basis, "low_bytes": low, "high_bytes": high, "error": error}})


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
    """The card's range line for its speedup: '1.42x-2.13x steps/s (...)', or None without
    one (a predicted peak's: peak_range_text)."""
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


_PEAK_WORDS = {"replay": "a replayed step", "measured": "the other steps' measured peak",
               "fit": "the batch model fitted to the measured peaks",
               "one point": "the batch model through one measured batch",
               "accounting": "the optimizer state's bytes taken off the peak"}


def peak_range_text(a: "Advice") -> Optional[str]:
    """The card's range line for its step peak: 'step peak 13.6 MiB-16.7 MiB (a replayed
    step, within 10%: ...)', or None without one."""
    if a.expected_peak_range is None:
        return None
    low, high = a.expected_peak_range
    basis = (a.figures or {}).get("peak_range") or {}
    kind = basis.get("basis")
    return (f"step peak {human_bytes(low)}-{human_bytes(high)} "
            f"({_PEAK_WORDS.get(kind, kind)}, within {basis.get('error', 0.0):.0%}: "
            f"docs/advice.md#predicted-gains-and-their-range)")
