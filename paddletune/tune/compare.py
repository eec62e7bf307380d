"""How `paddletune tune` compares settings (search.py's Tuner inherits them): a setting's
score over its trials, whether one beats another outside the noise, the noise itself (the
spread between a setting's repeated trials, shrunk towards the spread pooled over settings,
else a trial's batch-means interval), and the speedup stated at the end."""

import math
from typing import List, Optional, Tuple

from ..profile.memory_model import HEADROOM
from . import space as sp
from .trials import Trial

DEFAULT_CI_SHARE = 0.05  # a trial without an interval counts as +-5%
MIN_DOF = 2  # repeats needed before their spread is the noise
PRIOR_DOF = 2  # a setting's own spread is shrunk towards the pooled one as if by this many
MIN_SD = 0.005  # a trial's relative error is never taken below 0.5%
Z = 2.0  # standard errors a gain must clear (about 95%)
FINAL_PAIRS = "final pairs"  # a speedup measured by the final's interleaved pairs
SEARCH_TRIALS = "search trials"  # ... by the search's own trials (no final pair ran)
NOISIER = 2.0  # the best setting's repeats varying this many times more than the others' get a note


class Comparisons:
    """Needs `options` (objective, floor, min_gain), `trials` and `steps0` (the shortest
    trials' length) on the object."""

    # --- comparisons --------------------------------------------------------------------------
    def score(self, t) -> float:
        return self.score_of([t])

    def score_of(self, runs) -> float:
        """The objective over a setting's trials (their step-weighted mean samples/s, or
        minus the peak memory when it keeps the throughput floor)."""
        runs = [t for t in runs if t.ok]
        if not runs:
            return -math.inf
        rate = mean(runs)
        if self.options.objective == "memory":
            floor = self.options.floor * self.first_baseline().samples_per_s
            peaks = [t.peak_bytes for t in runs if t.peak_bytes is not None]
            return -float(max(peaks)) if rate >= floor and peaks else -math.inf
        return rate

    def better(self, c, i) -> bool:
        """Trials `c` beat trials `i` by more than min_gain and by more than the noise
        (Z standard errors of the difference)."""
        if self.options.objective == "memory":
            sc, si = self.score_of(c), self.score_of(i)
            return sc > -math.inf and -sc < -si * (1 - self.options.min_gain)
        gain = mean(c) / mean(i) - 1
        return gain > self.options.min_gain and gain > Z * self.noise(c, i)

    def clearly_worse(self, c, i) -> bool:
        if self.options.objective == "memory":
            sc, si = self.score_of(c), self.score_of(i)
            return sc == -math.inf or -sc > -si * 1.02
        return 1 - mean(c) / mean(i) > Z * self.noise(c, i)

    def noise(self, c, i) -> float:
        """Relative standard error of mean(c)/mean(i) - 1. One trial's error is the spread
        between repeated trials of the same setting and length seen so far (pooled over
        settings: the machine's and the job's noise), else its batch-means interval."""
        return math.hypot(self.mean_sd(c), self.mean_sd(i))

    def mean_sd(self, runs) -> float:
        """Relative standard error of the mean over trials `runs` (each trial's, trial_sd)."""
        return math.sqrt(sum(self.trial_sd(t) ** 2 for t in runs)) / len(runs)

    def trial_sd(self, t) -> float:
        """A trial's relative standard error: the spread between repeated trials (scaled to
        its length: the machine's and the job's noise, what a trial's mean really varies
        by), else its own batch-means interval (which a job with bursts longer than a block
        overstates). Settings differ in noise (a GIL-bound reader thread varies far more from
        trial to trial than worker processes), so a setting's own repeats count, shrunk
        towards the spread pooled over all settings as if that were PRIOR_DOF more repeats."""
        groups = self._replicates()
        pooled = _pooled_sd(groups.values())
        if pooled is not None:
            ss, dof = groups.get(sp.key(t.setting), (0.0, 0))
            own = math.sqrt((ss + PRIOR_DOF * pooled ** 2) / (dof + PRIOR_DOF))
            return max(own, MIN_SD) / math.sqrt(self.span(t))
        if t.se is not None:
            return t.se / t.samples_per_s
        return (_ci(t) / t.samples_per_s) / 1.96  # the default share is a normal 95% width

    def span(self, t) -> float:
        """How long trial t measured, in first rungs of the job's own steps (steps0 of them,
        the calibrated time): a trial's noise shrinks with the time it measures, not with its
        steps (a larger batch's steps are longer). Steps when the rates are unknown."""
        return _span(t, self.first_baseline(), self.steps0)

    def _replicate_sd(self) -> Optional[float]:
        """The relative sd of one trial of the first rung's time, pooled over every (setting,
        length) measured more than once (deviations scaled by sqrt(span))."""
        return _pooled_sd(self._replicates().values())

    def _replicates(self) -> dict:
        """{setting key: (sum of squared relative deviations, degrees of freedom)} over the
        setting's (setting, length) groups measured more than once, the deviations of
        each group from its mean scaled to a trial of the first rung's time. A length is a
        rung's time (span 1, 2, ...): trials of a larger batch run fewer steps for it
        (lengths.py), and their steps vary a little with the rate they were sized by."""
        base, groups = self.first_baseline(), {}
        for t in self.trials:
            if t.ok and not t.no_effect:  # one group per rung: trials of about one time
                span = _span(t, base, self.steps0)
                groups.setdefault((sp.key(t.setting), _rung(span)), []).append(
                    (t.samples_per_s, span))
        out = {}
        for (setting, _), runs in groups.items():
            if len(runs) > 1:
                values = [v for v, _ in runs]
                mean = sum(values) / len(values)
                span = sum(s for _, s in runs) / len(runs)
                ss, dof = out.get(setting, (0.0, 0))
                out[setting] = (ss + sum((v / mean - 1) ** 2 for v in values) * span,
                                dof + len(values) - 1)
        return out

    def of_one_length(self, a, b) -> Tuple[List[Trial], List[Trial]]:
        """Trials `a` and `b` (two settings' good trials) of the longest length both ran: the
        rung of their measured time, as _replicates groups repeats (a trial's start-up, its
        warm-up and a job's bursts weigh differently at different lengths, so a rung's
        trials are compared with its own). Where they share no rung, all of them: a trial
        sized by an estimated step time can measure well off its rung's time (a larger
        batch's 23 steps in 1.0 s where the job's own 54 took 1.5 s), and each trial's error
        is scaled by the time it measured (trial_sd) either way."""
        base = self.first_baseline()

        def rung(t):
            return _rung(_span(t, base, self.steps0))

        shared = {rung(t) for t in a} & {rung(t) for t in b}
        if not shared:
            return list(a), list(b)
        longest = max(shared)
        return [t for t in a if rung(t) == longest], [t for t in b if rung(t) == longest]

    def noise_note(self) -> Optional[str]:
        """A note when the best setting's repeated trials varied NOISIER times more than the
        other settings' repeats (a large batch fed by a GIL-bound thread: its run-to-run
        spread shows only once it is repeated, and the races before judged settings like
        it by the pooled spread): what the races chose between such settings is less sure
        than their intervals said."""
        if not self.incumbent:
            return None
        key, groups = sp.key(self.incumbent), self._replicates()
        ss, dof = groups.get(key, (0.0, 0))
        others = _pooled_sd(g for k, g in groups.items() if k != key)
        if not dof or others is None:
            return None
        own = math.sqrt(ss / dof)
        if own < NOISIER * others:
            return None
        runs = sum(1 for t in self.trials if t.ok and sp.key(t.setting) == key)
        return (f"the best setting's trials varied by ±{own:.1%} from one to the next (sd over "
                f"its {runs}), {own / others:.1f}x the ±{others:.1%} of the other settings' "
                f"repeats: between settings as noisy as it, differences below about "
                f"{Z * math.sqrt(2) * own:.0%} are inside that noise, so what the races chose "
                f"among them is not established (the speedup over the baseline is measured "
                f"by the final pairs)")

    def fits(self, t) -> bool:
        """Its peak leaves HEADROOM of the memory capacity free (unknown: fits)."""
        if not t.peak_bytes or not t.capacity_bytes:
            return True
        return t.peak_bytes <= (1 - HEADROOM) * t.capacity_bytes

    def latest(self, setting) -> Optional[Trial]:
        """The most recent successful trial of `setting` at its longest length."""
        k = sp.key(setting)
        done = [t for t in self.trials if sp.key(t.setting) == k and t.ok]
        return max(done, key=lambda t: (t.steps, t.index)) if done else None

    def first_baseline(self) -> Optional[Trial]:
        """The first good baseline of the calibrated length (trials of other lengths are not
        comparable: start-up and bursts weigh differently), else the first good one."""
        good = [t for t in self.trials if not t.setting and t.ok]
        return next((t for t in good if t.steps == self.steps0), good[0] if good else None)


def _span(t, base, steps0) -> float:
    """Comparisons.span, given the first baseline `base` (looked up once by callers that
    take the span of many trials)."""
    if base is not None and base.steps_per_s and t.steps_per_s:
        return (t.steps / t.steps_per_s) / (steps0 / base.steps_per_s)
    return t.steps / steps0


def _rung(span) -> int:
    """The rung of a trial that measured `span` (in first rungs' time): 0 for the first
    rung's length, 1 for twice it, ... (the nearest in log2)."""
    return round(math.log2(max(span, 1e-9)))


def _pooled_sd(groups) -> Optional[float]:
    """sqrt(sum ss / sum dof) over (ss, dof) groups; None below MIN_DOF."""
    groups = list(groups)
    ss, dof = sum(g[0] for g in groups), sum(g[1] for g in groups)
    return max(math.sqrt(ss / dof), MIN_SD) if dof >= MIN_DOF else None


def _ci(t) -> float:
    return t.ci if t.ci is not None else DEFAULT_CI_SHARE * (t.samples_per_s or 0.0)


def mean(runs) -> float:
    """Step-weighted mean samples/s of `runs`."""
    steps = sum(t.steps for t in runs)
    return sum(t.samples_per_s * t.steps for t in runs) / steps


def speedup(tuner, base: List[Trial], best: List[Trial], basis: str = FINAL_PAIRS) -> dict:
    """best / baseline samples/s over their trials `best` and `base`, and its 95% interval:
    Z standard errors of the noise model over those trials (noise: each trial's error from
    the spread between repeated trials, scaled by the time it measured). `basis`:
    FINAL_PAIRS, trials taken alternately at the end (`pairs` of them; `drift`, the
    baseline's since its first measurement), or SEARCH_TRIALS, the search's own trials when
    no final pair ran (no pairs, no drift: the baseline's trials are mostly the first ones)."""
    b, w = mean(base), mean(best)
    first = tuner.first_baseline()
    ratio = w / b
    paired = basis == FINAL_PAIRS
    return {"baseline_samples_per_s": b, "best_samples_per_s": w, "speedup": ratio,
            "ci": ratio * Z * tuner.noise(best, base), "basis": basis,
            "pairs": min(len(base), len(best)) if paired else 0,
            "baseline_trials": [t.index for t in base], "best_trials": [t.index for t in best],
            "peak_bytes": best[-1].peak_bytes, "baseline_peak_bytes": base[-1].peak_bytes,
            "drift": (b / first.samples_per_s - 1) if paired and first and first.samples_per_s
            else None}
