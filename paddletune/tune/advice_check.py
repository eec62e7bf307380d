"""Each piece of advice `tune` tried, its predicted speedup and range against what the search
measured: the advice's setting's trials over the baseline's, at the longest trial length both
ran (trials of other lengths weigh start-up differently), with that ratio's 95% interval. The
record keeps them ("advice") and `paddletune report` shows them, so every tuning also checks
the advice it started from.

A measurement is outside the range only where its interval is: a lower bound of 1.89x
against 1.79x ± 0.40 measured is not contradicted by these trials (`verdict`).
"""

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from ..advisors.ranges import with_range, within
from . import space as sp
from .compare import Z, mean


@dataclass(frozen=True)
class AdviceCheck:
    """One piece of advice as tune tried it.

    advice      its id
    setting     the setting it proposed (the incumbent then, changed as it says)
    predicted   its expected speedup (None: it predicted none)
    low, high   its range (high None: no upper bound)
    """

    advice: str
    setting: dict
    predicted: Optional[float] = None
    low: Optional[float] = None
    high: Optional[float] = None


def checks(advices, found, settings: Dict[str, dict], spread: Optional[float]
           ) -> List[AdviceCheck]:
    """An AdviceCheck per advice tune races (`found`: [(id, change)]; `settings`: id -> the
    setting raced), its range from the advice (advisors/ranges.py) as `advise` states it."""
    by_id = {a.id: a for a in advices}
    out = []
    for advice_id, _ in found:
        a = by_id.get(advice_id)
        if a is None or advice_id not in settings:
            continue
        predicted = getattr(a, "expected_speedup", None)
        low = high = None
        if predicted is not None:
            low, high = with_range(a, spread).expected_range or (None, None)
        out.append(AdviceCheck(advice_id, settings[advice_id], predicted, low, high))
    return out


def measured(tuner, setting: dict) -> Tuple[Optional[float], Optional[float]]:
    """The setting's samples/s over the baseline's, from their good trials of the longest
    length both ran, and that ratio's 95% interval (Z standard errors, as tune's speedup);
    (None, None) when they share none."""
    mine = _by_steps(tuner, sp.key(setting))
    base = _by_steps(tuner, sp.key({}))
    common = sorted(set(mine) & set(base))
    if not common:
        return None, None
    steps = common[-1]
    ratio = mean(mine[steps]) / mean(base[steps])
    return ratio, ratio * Z * tuner.noise(mine[steps], base[steps])


def verdict(expected_range, got: Optional[float], ci: Optional[float]) -> Optional[str]:
    """'within' (the measurement in the range), 'noise' (outside it, but its interval
    reaches it), 'outside' (its interval too), or None (no range or no measurement)."""
    inside = within(expected_range, got)
    if inside is None or inside:
        return None if inside is None else "within"
    low, high = expected_range
    ci = ci or 0.0
    reaches = got + ci >= low and (high is None or got - ci <= high)
    return "noise" if reaches else "outside"


def rows(tuner) -> List[dict]:
    """The record's "advice": each check with what the search measured (its interval),
    whether that fell within the range, and `verdict`."""
    out = []
    for c in getattr(tuner, "advice_checks", []):
        got, ci = measured(tuner, c.setting)
        said = verdict((c.low, c.high), got, ci)
        out.append({"advice": c.advice, "setting": c.setting, "label": sp.label(c.setting),
                    "predicted": c.predicted, "range": [c.low, c.high],
                    "measured": got, "measured_ci": ci, "verdict": said,
                    "within_range": within((c.low, c.high), got)})
    return out


def _by_steps(tuner, key) -> Dict[int, list]:
    out: Dict[int, list] = {}
    for t in tuner.trials:
        if t.ok and sp.key(t.setting) == key:
            out.setdefault(t.steps, []).append(t)
    return out
