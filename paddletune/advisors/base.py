"""The Advice model, the rule registry, and advise(): run every rule, rank the advice."""

import re
from dataclasses import dataclass, field, replace
from typing import Callable, Iterable, List, Optional, Tuple

from .device import bounded_by_device
from .ranges import with_range

SEVERITIES = ("high", "medium", "low", "info")  # most important first
CONFIDENCES = ("high", "medium", "low")
_ID = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")


@dataclass(frozen=True)
class Advice:
    """One recommendation, backed by measured figures.

    id            stable kebab-case name (the same problem always gets the same id)
    evidence      a sentence quoting the measured figures; `figures` holds the raw numbers
    change        the exact code line(s), env var or flag to change
    expected_gain what the change should bring, in words ("up to 1.3x steps/s")
    expected_speedup  the same as a factor on steps/s when it can be estimated, else None
    expected_range    (low, high) steps/s factors the measured speedup should fall within
                      (high None: no upper bound known); a rule sets it where its figures
                      bound the gain, else `paddletune advise` states the model's error
                      around expected_speedup (advisors/ranges.py)
    expected_peak_range  (low, high) bytes the changed job's step peak should fall within,
                      around figures["predicted_peak_bytes"] (memory advice; ranges.py)
    blocking      the training is wrong, not slow (NaN/Inf): ranked before any speed advice
    source        the number of its entry in the advice catalogue, docs/advice.md (whose
                  anchor for it is the id: docs/advice.md#<id>)
    """

    id: str
    title: str
    severity: str
    evidence: str
    change: str
    expected_gain: str
    confidence: str
    source: Optional[int] = None
    figures: dict = field(default_factory=dict, hash=False)  # raw numbers behind the evidence
    expected_speedup: Optional[float] = None
    blocking: bool = False
    expected_range: Optional[Tuple[float, Optional[float]]] = None
    expected_peak_range: Optional[Tuple[float, float]] = None

    def __post_init__(self):
        if not _ID.match(self.id):
            raise ValueError(f"advice id must be kebab-case, got {self.id!r}")
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {SEVERITIES}, got {self.severity!r}")
        if self.confidence not in CONFIDENCES:
            raise ValueError(f"confidence must be one of {CONFIDENCES}, got {self.confidence!r}")

    def to_dict(self) -> dict:
        """A JSON-ready dict (the `--json` form), fields in reading order."""
        return {"id": self.id, "title": self.title, "severity": self.severity,
                "confidence": self.confidence, "evidence": self.evidence,
                "change": self.change, "expected_gain": self.expected_gain,
                "expected_speedup": self.expected_speedup,
                "expected_range": (list(self.expected_range)
                                   if self.expected_range is not None else None),
                "expected_peak_range": (list(self.expected_peak_range)
                                        if self.expected_peak_range is not None else None),
                "blocking": self.blocking,
                "source": self.source,
                "figures": dict(self.figures)}


Rule = Callable[..., object]  # profile -> Advice | list[Advice] | None
_RULES: List[Rule] = []


def rule(fn: Rule) -> Rule:
    """Register `fn` as a rule; its docstring's first line names what it checks, with the
    number of its entry in docs/advice.md ("(#13)"): rules are kept in that order (stable;
    rules without a number last), whichever module registers them first."""
    row = _row(fn)
    at = next((i for i, other in enumerate(_RULES) if _row(other) > row), len(_RULES))
    _RULES.insert(at, fn)
    return fn


def _row(fn: Rule) -> int:
    found = re.search(r"#(\d+)", _what(fn))
    return int(found.group(1)) if found else 1 << 30


def rules() -> tuple:
    """The registered rules, in registration order."""
    return tuple(_RULES)


def checks(selected: Optional[Iterable[Rule]] = None) -> List[str]:
    """What each rule checks (its docstring's first line, without the final period)."""
    return [_what(fn) for fn in (_RULES if selected is None else selected)]


def advise(profile, selected: Optional[Iterable[Rule]] = None) -> List[Advice]:
    """Run every rule (or `selected`) on `profile`; the advice ranked, most important first.

    A rule that raises or returns something odd yields an "advisor-error" info advice and
    the other rules still run.
    """
    found: List[Advice] = []
    for fn in _RULES if selected is None else selected:
        found.extend(_run(fn, profile))
    return rank(bounded_by_device(profile, a) for a in found)


def rank(advices: Iterable[Advice]) -> List[Advice]:
    """Blocking problems first, then severity, then the larger expected speedup (unknown
    last), then the number of the entry in docs/advice.md."""
    return sorted(advices, key=lambda a: (not a.blocking, SEVERITIES.index(a.severity),
                                          -(a.expected_speedup or 0.0),
                                          a.source if a.source is not None else 1 << 30))


def _run(fn: Rule, profile) -> List[Advice]:
    try:
        result = fn(profile)
        out = [] if result is None else [result] if isinstance(result, Advice) else list(result)
        bad = [a for a in out if not isinstance(a, Advice)]
        if bad:
            raise TypeError(f"returned {type(bad[0]).__name__}, not Advice")
        return out
    except Exception as err:  # one broken rule must not hide the others' advice
        return [_error_advice(fn, err)]


def _error_advice(fn: Rule, err: Exception) -> Advice:
    name = getattr(fn, "__name__", repr(fn))
    return Advice(
        id="advisor-error", title=f"The {name} advisor failed",
        severity="info",
        evidence=f"rule {name} ({_what(fn)}) raised {type(err).__name__}: {err}",
        change="nothing in your job; report this paddletune bug with the profile attached",
        expected_gain="none (this check was skipped; the other advice is unaffected)",
        confidence="high", figures={"rule": name, "error": f"{type(err).__name__}: {err}"})


def _what(fn: Rule) -> str:
    doc = (getattr(fn, "__doc__", None) or "").strip()
    line = doc.splitlines()[0].strip().rstrip(".") if doc else ""
    return line or getattr(fn, "__name__", "?")


# --- the post-pass: what the whole run measured, and advice from a profile cut short ---------
MIN_STEADY_FOR_MEDIUM = 50  # a cut-short profile's advice from fewer steady steps: low at most


@dataclass(frozen=True)
class Extent:
    """How far a profile got: `complete` (an exit record and the summary: the job ended
    normally, whatever its status), its training steps, steady steps and seconds, and why
    it is incomplete (empty when complete)."""

    complete: bool
    steps: int = 0
    steady_steps: int = 0
    seconds: float = 0.0
    why: str = ""

    def sentence(self) -> str:
        """'Incomplete profile: ... after N training steps (M steady) and S s ...'."""
        return (f"Incomplete profile: the job was killed or the profiler crashed ({self.why}) "
                f"after {self.steps} training steps ({self.steady_steps} steady) and "
                f"{self.seconds:.2f} s; the advice below comes from the records written "
                f"before it stopped, its severity and confidence at most "
                f"{self.severity_cap()}.")

    def severity_cap(self) -> Optional[str]:
        """The highest severity (and confidence) advice from this profile may have: None when
        complete, "low" under MIN_STEADY_FOR_MEDIUM steady steps, else "medium"."""
        if self.complete:
            return None
        return "low" if self.steady_steps < MIN_STEADY_FOR_MEDIUM else "medium"


def profile_extent(profile) -> Extent:
    """How far `profile` (a paddletune.profile.Profile) got, and whether it ended normally."""
    s = profile.summary
    why = [] if profile.last_event("exit") is not None else ["no exit record"]
    if not profile.complete:
        why.append("no summary record")
    if profile.truncated:
        why.append("the last line was cut off")
    return Extent(not why, s.n_steps, s.steady_steps, s.duration_s, "; ".join(why))


def run_figures(profile) -> dict:
    """The run's figures every advice is judged against (the report's and `watch`'s: the
    summary's throughput, its step time, the input share), for `--json` readers."""
    s = profile.summary
    tp = s.throughput
    extent = profile_extent(profile)
    return {"steps_per_s": tp.steps_per_s if tp else None,
            "step_time_s": tp.step_time_s if tp else None,
            "input_share": s.input_share, "steady_steps": s.steady_steps,
            "complete": extent.complete, "steps": extent.steps, "seconds": extent.seconds}


def post_pass(advices: Iterable[Advice], profile) -> List[Advice]:
    """The advice of `paddletune advise`, after the rules: each carries the run's figures
    (figures["run"]) and its predicted speedup's range (ranges.with_range); from a profile
    cut short (profile_extent) none is above its extent's cap (Extent.severity_cap), except
    blocking advice (NaN/Inf: wrong whatever the count), and each says so in
    figures["capped_from"]. Ranked."""
    extent = profile_extent(profile)
    run = run_figures(profile)
    cap = extent.severity_cap()
    spread = profile.summary.throughput.spread if profile.summary.throughput else None
    return rank(_capped(with_range(_with_run(a, run), spread), cap) for a in advices)


def _with_run(a: Advice, run: dict) -> Advice:
    return replace(a, figures={**a.figures, "run": run})


def _capped(a: Advice, cap: Optional[str]) -> Advice:
    if cap is None or a.blocking:
        return a
    severity = _lower(a.severity, cap, SEVERITIES)
    confidence = _lower(a.confidence, cap, CONFIDENCES)
    if (severity, confidence) == (a.severity, a.confidence):
        return a
    return replace(a, severity=severity, confidence=confidence, figures={
        **a.figures, "capped_from": {"severity": a.severity, "confidence": a.confidence,
                                     "why": "incomplete profile"}})


def _lower(level: str, cap: str, order: tuple) -> str:
    """`level`, or `cap` where `level` ranks above it (order: most important first)."""
    return order[max(order.index(level), order.index(cap))]
