"""The search behind `paddletune tune`: advice first, then the batch size, then one knob at a
time, each choice a race by successive halving; a gain counts only outside the noise.

1. Baseline: the job as it is (a trial with no setting), three times: their spread is the
   first estimate of the noise. Its profile gives the space and the advisors' advice.
2. Races. A race pits challengers (settings) against the incumbent (the best setting so far):
   rung 0 runs each for `steps` steps (fewer where a setting's steps are slower than the
   job's own, a larger batch: about the same time; lengths.py), later rungs the better
   half (at least one) for twice as many, and the incumbent runs again in every rung, so
   the decision compares trials taken moments apart (machine drift cancels; the
   incumbent's trial from the rung just before counts as such, and so do the baseline's
   repeats just before the first race: the mean of three is steadier than one). At the
   last rung the best challenger (its step-weighted mean over the race) replaces the
   incumbent when its gain clears `min_gain` and Z standard errors;
   a gain between PROMISING and Z standard errors gets up to `extra_pairs` more pairs of
   trials (incumbent, challenger) at that length before it is judged (a real gain of 10-20%
   on a noisy job is otherwise lost to one unlucky trial).
   A shorter rung decides already when the gain clears EARLY times that bar and the best
   clearly beats the others that would run the next rung: a longer trial would not change
   the choice (a trial's throughput leaves out the batches its reader's queue held before
   its steps, so short trials do not read fast: trials.py), and a mis-configured job's
   first fixes are such gains.
   A trial's error is the spread between repeated trials of a setting (pooled over
   settings, scaled by 1/sqrt of the time measured), else its own batch-means interval.
   A challenger clearly worse at a rung leaves the race early; one that crashes, hangs or
   runs out of memory is recorded and never tried again; one whose override changed
   nothing is "no effect", and so are the knobs its reason code covers (a strategy section
   without a CompiledProgram, no-compiled-program; without data parallelism,
   not-data-parallel, all but enable_inplace and memory_optimize).
3. Order: the advisors' proposals (each, and all together), and where one that changed
   several knobs won, each of them set back alone against it (a member the advice got
   wrong leaves); the batch size (the memory
   model's largest safe batch, verified by a trial, then a ladder of sizes up to it);
   then each knob in turn, for up to `max_rounds` rounds, ending early when a round changes
   nothing (the remaining gains are inside the noise); a knob is raced again in a later
   round only when other knobs changed since, and without the values prune.py leaves out
   (shorter queues; those that lost by more than the changes since gained).
4. Final: baseline and best alternate, first at the first rung's length when the gain seen
   so far is plain from one such pair (else at the longest), then at the longest (up to
   `final_pairs` pairs) only while the pairs so far leave the gain inside the noise; their
   ratio is the speedup reported (and the baseline's drift since the start), confirmed
   when they put the gain outside the noise. Where no pair ran (the budget ended, Ctrl-C,
   their trials failed), the speedup is stated from the search's own trials, as such, and
   not confirmed.
The budget is wall-clock: a trial that would not finish in what is left is not started, and
the search leaves the time of one final pair at the first rung's length (a search stopped
by the budget had nothing left for the pairs, and stated its speedup from its own trials).
"""

import math
import time
from dataclasses import dataclass
from typing import Callable, List, Optional

from runtime.overrides import SINGLE_PLACE_BUILD

from ..profile import load
from . import advice_check, prune
from . import space as sp
from .batch import batch_ladder, unimodal_prune
from .compare import FINAL_PAIRS, SEARCH_TRIALS, Z, Comparisons, mean, speedup
from .lengths import MIN_STEPS, SLOWER, TrialLengths
from .proposals import proposals
from .trials import NO_COMPILED_PROGRAM, NOT_DATA_PARALLEL, Trial

LR_NOTE = ("Batch size changes the optimisation, not only the speed: scale the learning rate "
           "with it (linear scaling: lr x new/old, with a warm-up) and check convergence; "
           "--keep-batch-size leaves it alone.")
BASELINE_REPEATS = 3  # the baseline's first measurements: the first estimate of the noise
CALIBRATION_S = 1.5  # the first baseline's steps after its first: the first rung's length
MAX_STEPS = 2000  # the first rung's length at most (at least: lengths.MIN_STEPS)
EARLY = 2.0  # a shorter rung decides when the gain clears this many times the bar
PROMISING = 1.0  # standard errors: a gain worth more pairs of trials at the last rung
STRATEGY_SECTIONS = ("exec_strategy", "build_strategy")


class TuneError(Exception):
    """The tuning cannot start (the baseline run failed)."""


def _baseline_failed(baseline) -> str:
    """Why the tuning cannot start: the job as it is failed. Out of memory, the advice on its
    profile says which batch size fits (tune tunes from the job's own settings, and never
    runs a setting the job itself has not been seen to run)."""
    why = f"the baseline run failed ({baseline.status}): {baseline.message}; see {baseline.log}"
    if baseline.status == "oom" and baseline.profile:
        why += (f". The job's own settings do not fit in memory: `paddletune advise "
                f"{baseline.profile}` gives the largest batch that fits (and what else frees "
                f"memory); set it, then tune again")
    return why


class BudgetSpent(Exception):
    """The next trial would not finish within the budget (the search's: less the final's
    time)."""


@dataclass
class TuneOptions:
    budget_s: float = 300.0
    objective: str = "throughput"  # throughput | memory
    floor: float = 0.95  # memory objective: keep at least this share of the baseline samples/s
    trial_steps: Optional[int] = None  # rung-0 steps [default: about 1.5 s of steps]
    rungs: int = 2
    trial_timeout_s: Optional[float] = None
    max_batch_size: Optional[int] = None
    keep_batch_size: bool = False
    specs: tuple = ()
    min_gain: float = 0.02
    max_rounds: int = 2
    final_pairs: int = 2
    extra_pairs: int = 2  # more pairs for a promising gain left inside the noise


class NullProgress:
    def __getattr__(self, name):
        return lambda *args, **kwargs: None


class Tuner(Comparisons, TrialLengths):
    def __init__(self, runner, options: TuneOptions, progress=None,
                 on_trial: Optional[Callable] = None):
        self.runner, self.options = runner, options
        self.progress = progress or NullProgress()
        self.on_trial = on_trial or (lambda tuner: None)
        self.trials: List[Trial] = []
        self.space: Optional[sp.Space] = None
        self.incumbent: dict = {}
        self.notes: List[str] = []
        self.failed = {}  # setting key -> status
        self.dead_sections = set()  # strategy sections no code applies
        self.dead_knobs = set()  # knobs that change nothing in this job
        self.status = "running"
        self.stop_reason = None
        self.final = None  # compare.speedup's, with "confirmed" (_state_speedup)
        self.final_pairs = {"baseline": [], "best": []}  # the final's good trials so far
        self.t0 = time.monotonic()
        self.last_rung = set()  # indices of the trials of the latest rung of any race
        self.race_runs = {}  # the latest race's trials: setting key -> its trials
        self.race_alive = set()  # the keys of the challengers still in the running race
        self.advice_checks = []  # advice_check.AdviceCheck per piece of advice raced
        self.losses = prune.Losses()  # values each knob's race found clearly slower
        self.steps0 = options.trial_steps or MIN_STEPS
        self.per_step_s = None
        self.overhead_s = 2.0  # a trial's start-up (_calibrate, then _warm_startup)
        self.warm_startup_s = None  # the longest of the trials' after the first
        self.load_profile = load  # seams for tests: the baseline's profile and its advice
        self.advise = _advise

    # --- the whole search --------------------------------------------------------------------
    def run(self):
        try:
            try:
                self._search()
                self.stop_reason = self.stop_reason or "converged"
            except BudgetSpent:  # the final's time is left: _final_reserve_s
                self.stop_reason = "budget spent"
            self._final()
            self.status = "complete"
            note = self.noise_note()
            if note:
                self.notes.append(note)
        except (TuneError, sp.SpaceError) as err:  # the record says why, then the CLI does
            self.status, self.stop_reason = "failed", str(err)
            raise
        except KeyboardInterrupt as err:
            self.status = "interrupted"
            self.stop_reason = f"interrupted ({str(err) or 'Ctrl-C'})"
            if self.final_pairs["baseline"] and self.final_pairs["best"]:
                self._state_speedup(self.final_pairs["baseline"], self.final_pairs["best"])
            else:
                self._final_from_history("interrupted")
        return self

    def _search(self):
        """The baseline and its repeats, the space, then the races (advice, the batch size,
        the knobs); BudgetSpent when the next trial would not leave the final's time."""
        sp.check_specs(self.options.specs)  # before the first trial
        baseline = self._first_baseline()
        if not baseline.ok:
            raise TuneError(_baseline_failed(baseline))
        self._calibrate(baseline)
        # the baseline's spread at the calibrated length: the noise, from the start
        repeats = BASELINE_REPEATS - (baseline.steps == self.steps0)
        for _ in range(repeats):
            self.trial({}, self.steps0, "baseline")
        profile = self.load_profile(baseline.profile)
        self.space = sp.build_space(profile, self.options.keep_batch_size,
                                    self.options.max_batch_size, self.options.specs)
        self.notes += self.space.notes
        self.progress.space(self)
        self._advice(profile)
        if "batch_size" in self.space.knobs:
            self._batch()
        self._coordinates()

    def _first_baseline(self) -> Trial:
        """The job as it is, first: CALIBRATION_S of steps after the first one (without
        --trial-steps), and MIN_STEPS steps at least (a slow job's 1.5 s holds a handful of
        steps: too few to measure), whose step count becomes the first rung's length, so
        that it is the first of the baseline's repeats too. Where tune's cut still left too
        few steady steps (a long warm-up), twice as many steps again."""
        if self.options.trial_steps is not None:
            return self.trial({}, self.steps0, "baseline", check_budget=False)
        t = self.trial({}, MAX_STEPS, "baseline", check_budget=False,
                       duration_s=CALIBRATION_S)
        if t.status == "no-steps":  # too few steady steps to measure
            longer = 2 * t.steps if t.exit_reason == "step_limit" else 0
            t = self.trial({}, max(MIN_STEPS, longer), "baseline", check_budget=False)
        return t

    def _calibrate(self, baseline):
        """Per-step time and start-up cost from the baseline; the rung-0 length. A step
        takes its steady time (1 / steps_per_s); the rest of the trial's wall time (the
        interpreter and the framework starting, the script's setup, its warm-up steps, a
        validation pass) is each trial's start-up. Without a steady rate, its whole run
        over its steps. The first trial starts cold (a new bytecode cache, the framework's
        files read from disk for the first time: 15 s against 5 s for the next ones of a
        PyTorch job), so its start-up stands only until a later trial's: _warm_startup."""
        steps = max(baseline.steps, 1)
        if baseline.steps_per_s:
            self.per_step_s = 1.0 / baseline.steps_per_s
            self.overhead_s = max(baseline.wall_s - steps * self.per_step_s, 0.2)
        else:
            self.per_step_s = (baseline.run_s or baseline.wall_s) / steps
            self.overhead_s = max(baseline.wall_s - (baseline.run_s or 0.0), 0.2)
        if self.options.trial_steps is None:
            self.steps0 = max(baseline.steps, MIN_STEPS)

    # --- phases ------------------------------------------------------------------------------
    def _advice(self, profile):
        advices = self.advise(profile)
        found, notes = proposals(advices, self.space)
        self.notes += notes
        challengers = [(sp.merged(self.incumbent, change, self.space), f"advice:{aid}")
                       for aid, change in found]
        tp = profile.summary.throughput
        self.advice_checks = advice_check.checks(
            advices, found, {aid: setting for (setting, _), (aid, _) in zip(challengers, found)},
            tp.spread if tp is not None else None)
        if len(found) > 1:
            together = {}
            for _, change in found:
                together.update(change)
            challengers.append((sp.merged(self.incumbent, together, self.space),
                                "advice:all"))
        before = dict(self.incumbent)
        if self.race(challengers):
            self._ablate(before)

    def _ablate(self, before: dict):
        """Advice that changed several knobs at once won: each of them set back alone races
        the whole change, so that a member the advice got wrong leaves (its OMP_NUM_THREADS=1
        beside the workers it advises, where the compute needed the threads: 18% slower
        than the workers alone on a helper's job). A member set back that lost stays out of
        its knob's own race while no change since gained more (prune.Losses). Again, while
        one left and two or more remain changed."""
        while True:
            changed = [n for n in {**before, **self.incumbent}
                       if self.incumbent.get(n) != before.get(n)]
            if len(changed) < 2:
                return
            kept = sp.key(self.incumbent)
            back = {name: sp.merged(_set_back(self.incumbent, before, name), {}, self.space)
                    for name in changed}  # (one that is `before` again lost already)
            back = {name: s for name, s in back.items() if sp.key(s) != sp.key(before)}
            if self.race([(setting, f"ablate:{name}") for name, setting in back.items()]):
                continue
            runs = self.race_runs
            if kept in runs and self.options.objective == "throughput":
                for name, setting in back.items():
                    if sp.key(setting) in runs:
                        self.losses.record(self, name, {k: runs[k] for k in
                                                        (kept, sp.key(setting))}, kept)
            return

    def _batch(self):
        """The ladder's race; the trials that verified batch sizes just now (and the
        incumbent's just before them) are its first rung's, not run again."""
        self.notes.append(LR_NOTE)
        start = len(self.trials)
        ladder = batch_ladder(self)
        verified = self.trials[start:]
        if start and verified:
            self.last_rung = {self.trials[start - 1].index} | {t.index for t in verified}
        knob = self.space.knobs["batch_size"]
        if self.options.objective == "throughput" and knob.why != sp.GIVEN:
            ladder = unimodal_prune(self, ladder, self._batch_points(verified))
        self.race([(sp.merged(self.incumbent, {"batch_size": b}, self.space), "batch")
                   for b in ladder], measured={sp.key(t.setting): t for t in verified})

    def _batch_points(self, verified) -> dict:
        """{batch size: [trial]}: the incumbent's trial just before the verification trials
        and those that fitted, all of the first rung's length."""
        knob = self.space.knobs["batch_size"]
        mine = self._incumbent_run(self.steps0, 0, run=False)
        points = {self.incumbent.get("batch_size", knob.current): [mine]} if mine else {}
        for t in verified:
            if t.ok and self.fits(t) and self.long_enough(t, t.setting, self.steps0):
                points[t.setting["batch_size"]] = [t]
        return points

    def _coordinates(self):
        raced = {}  # knob -> the other knobs' values it was last raced with
        for round_ in range(self.options.max_rounds):
            changed = False
            for name, knob in list(self.space.knobs.items()):
                if name == "batch_size" or self._dead({name: None}) or \
                        prune.idle_knob(self, name):
                    continue
                context = sp.key({k: v for k, v in self.incumbent.items() if k != name})
                if raced.get(name) == context:
                    continue  # nothing else changed since: the same race again
                raced[name] = context
                now = self.incumbent.get(name, knob.current)
                challengers = [(sp.merged(self.incumbent, {name: v}, self.space),
                                f"knob:{name}") for v in prune.candidates(self, name, now)]
                changed |= self.race(challengers)
                if self.race_runs and self.options.objective == "throughput":
                    self.losses.record(self, name, self.race_runs, sp.key(self.incumbent))
            if not changed:
                self.stop_reason = (f"converged: round {round_ + 1} found no gain outside "
                                    f"the noise")
                return
        self.stop_reason = f"{self.options.max_rounds} rounds done"

    def _final(self):
        """Baseline and best, alternating: the speedup. The first pair at the first rung's
        length when the gain so far is plain from it (_short_final), any more at the longest
        length, only while the pairs so far leave the gain inside the noise. The search left
        the time of one pair at the first rung's length (_final_reserve_s). Without a pair
        (a trial took longer than expected and the budget ended first, or their trials
        failed), the speedup is stated from the search's own trials, not confirmed."""
        if not self.incumbent:
            return
        longest = self.steps0 * 2 ** (self.options.rungs - 1)
        first = self.steps0 if self._short_final() or not self._pair_fits(longest) else longest
        pairs = self.final_pairs = {"baseline": [], "best": []}
        why = "failed"  # no pair: the final's trials failed, unless the budget ended first
        try:
            for n in range(self.options.final_pairs):
                steps = first if n == 0 else longest
                for which, setting in (("baseline", {}), ("best", self.incumbent)):
                    t = self.trial(setting, self.steps_for(setting, steps), "final")
                    if t.ok:
                        pairs[which].append(t)
                if self._settled(pairs["best"], pairs["baseline"]):
                    break
        except BudgetSpent:
            why = "budget"
        if pairs["baseline"] and pairs["best"]:
            self._state_speedup(pairs["baseline"], pairs["best"])
        else:
            self._final_from_history(why)

    def _short_final(self) -> bool:
        """Whether the final's first pair runs at the first rung's length: the gain seen so
        far (the best's trials against the baseline's) clears EARLY times the bar that one
        pair of that length must clear, so that such a pair would settle it (a mis-configured
        job's large gain). Otherwise a short pair would likely leave the gain inside the
        noise and a longer pair follow: the first is the longer one (a trial's start-up and
        exit weigh the same at either length: a PyTorch trial's are about 5 s against 1.5 s
        of steps at the first rung). The memory objective, and a search that has not measured
        its noise, keep the short pair."""
        if self.options.objective == "memory" or self._replicate_sd() is None:
            return True
        best = [t for t in self.trials if t.ok and sp.key(t.setting) == sp.key(self.incumbent)]
        base = [t for t in self.trials if t.ok and not t.setting]
        if not best or not base:
            return True
        gain = mean(best) / mean(base) - 1
        # one trial of each at the first rung's length: their errors at span 1
        pair = math.hypot(*(self.trial_sd(runs[-1]) * math.sqrt(self.span(runs[-1]))
                            for runs in (best, base)))
        return gain > EARLY * max(self.options.min_gain, Z * pair)

    def _pair_fits(self, steps) -> bool:
        """Two trials of `steps` would finish within the budget (else a shorter pair may)."""
        return 2 * self._expected_s(steps) <= self.remaining_s()

    def _final_from_history(self, why: str):
        """No final pair ran (`why`: "budget", the budget ended first; "interrupted";
        "failed", their trials failed): the speedup from the search's own trials, stated as
        such and never confirmed: they were not taken alternately (the baseline's mostly at
        the start, the best's later), and a setting's trials in the race it won read high,
        chosen as that race's highest. Over all the good trials of the baseline and of the
        best of the longest length both ran (of_one_length), rather than the latest one of
        each: the noise model's interval over them (noise: each trial's error from the
        spread between repeated trials, scaled by the time it measured) is what the search
        measured, where the latest pair stated one trial's noise each and left out the
        other trials' values."""
        if not self.incumbent:  # nothing beat the job's own settings: no speedup to state
            return
        base = [t for t in self.trials if t.ok and not t.setting]
        best = [t for t in self.trials if t.ok and sp.key(t.setting) == sp.key(self.incumbent)]
        if base and best:
            self._state_speedup(*self.of_one_length(base, best), basis=SEARCH_TRIALS,
                                no_pairs=why)

    def _state_speedup(self, base, best, basis=FINAL_PAIRS, no_pairs=None):
        """The speedup, and whether it is confirmed: only by final pairs that put the gain
        outside the noise (the throughput objective: the memory objective's gain is the
        peak, not the speed). `outside_noise`: whether these trials put it outside the
        noise (Z standard errors, as the races decide); from the search's trials that does
        not confirm it (`no_pairs` says why no pair ran)."""
        self.final = speedup(self, base, best, basis)
        throughput = self.options.objective == "throughput"
        outside = self.better(best, base) if throughput else None
        self.final["outside_noise"] = outside
        self.final["confirmed"] = (outside if basis == FINAL_PAIRS else False) if throughput \
            else None
        if basis != FINAL_PAIRS:
            self.final["no_pairs"] = no_pairs

    # --- a race --------------------------------------------------------------------------------
    def race(self, challengers, measured=None) -> bool:
        """Successive halving of `challengers` [(setting, phase)] against the incumbent;
        True when one of them became the incumbent. `measured`: {setting key: trial} taken
        moments ago at the first rung's length, used there instead of a new trial. While it
        runs, `race_alive` holds the keys of the challengers still in it (the budget or
        Ctrl-C stopping it leaves them there: the record says whose race did not finish)."""
        won = self._race(challengers, measured)
        self.race_alive = set()
        return won

    def _race(self, challengers, measured=None) -> bool:
        pool, seen = [], {sp.key(self.incumbent)}
        runs = self.race_runs = {}  # setting key -> its trials in this race (prune.Losses)
        for setting, phase in challengers:
            k = sp.key(setting)
            if k not in seen and k not in self.failed and not self._dead(setting):
                seen.add(k)
                pool.append((setting, phase))
        if not pool:
            return False
        steps = self.steps0
        behind = False  # the incumbent far behind every challenger left: it sits out
        for rung in range(self.options.rungs):
            self.race_alive = {sp.key(setting) for setting, _ in pool}
            last = rung == self.options.rungs - 1
            mine = runs.setdefault(sp.key(self.incumbent), [])
            rung_trials = set()
            now = []  # the incumbent's trials of this rung
            if not behind:
                now = self._incumbent_trials(self.steps_for(self.incumbent, steps), rung)
                if not now[-1].ok:
                    return False
                mine.extend(now)
                rung_trials.update(t.index for t in now)
            ref = now if not behind else mine  # what a challenger is dropped against
            alive = []
            for setting, phase in pool:
                if self._dead(setting):
                    continue
                t = (measured or {}).get(sp.key(setting)) if rung == 0 else None
                if t is None or not self.long_enough(t, setting, steps):
                    t = self.trial(setting, self.steps_for(setting, steps), phase,
                                   scale=self._scale(setting))
                rung_trials.add(t.index)
                if self._usable(t, setting):
                    runs.setdefault(sp.key(setting), []).append(t)
                    if not self._drop([t], ref, last=last):
                        alive.append((setting, phase))
            self.last_rung = rung_trials
            if not alive:
                return False
            alive.sort(key=lambda a: -self.score_of(runs[sp.key(a[0])]))
            best = runs[sp.key(alive[0][0])]
            pool = alive[:max(1, len(alive) // 2)]  # the next rung's
            if last or self._decisive(best, mine, [runs[sp.key(s)] for s, _ in pool[1:]]):
                if not self.better(best, mine) and not (
                        last and self._more_pairs(alive[0], steps, best, mine)):
                    return False
                self.progress.accepted(self, best[-1], mine[-1])
                self.losses.gains.append(mean(best) / mean(mine))
                self.incumbent = alive[0][0]
                return True
            # a longer rung only has to tell the challengers apart when the slowest of
            # them is far ahead of the incumbent already
            behind = all(self._far_ahead(runs[sp.key(s)], mine) for s, _ in pool)
            steps *= 2
        return False

    def _more_pairs(self, challenger, steps, best, mine) -> bool:
        """A promising gain left inside the noise at the last rung (more than min_gain and
        than PROMISING standard errors, fewer than Z): up to EXTRA_PAIRS more pairs of
        trials, the incumbent then the challenger, until it clears the bar or stops looking
        promising. `best` and `mine` (their trials in this race) grow in place; True when
        the challenger is better now."""
        setting, phase = challenger
        for _ in range(self.options.extra_pairs):
            if self.options.objective == "memory" or not self._promising(best, mine):
                return False
            inc = self.trial(self.incumbent, self.steps_for(self.incumbent, steps), "incumbent")
            t = self.trial(setting, self.steps_for(setting, steps), phase,
                           scale=self._scale(setting))
            if not (inc.ok and self._usable(t, setting)):
                return False
            mine.append(inc)
            best.append(t)
            if self.better(best, mine):
                return True
        return False

    def _promising(self, best, mine) -> bool:
        gain = mean(best) / mean(mine) - 1
        return gain > self.options.min_gain and gain > PROMISING * self.noise(best, mine)

    def _decisive(self, best, mine, others) -> bool:
        """Before the last rung: `best` beats the incumbent by EARLY times the bar of
        `better` (once the noise is known from repeats) and each of the `others` that would
        run the next rung with it by the bar itself, so a longer rung would not change the
        choice."""
        return self._far_ahead(best, mine) and all(self.better(best, other)
                                                   for other in others)

    def _far_ahead(self, c, i) -> bool:
        """`c` beats `i` by EARLY times the bar of `better`, once the noise is known from
        repeats (throughput objective)."""
        if self.options.objective == "memory" or self._replicate_sd() is None:
            return False
        gain = mean(c) / mean(i) - 1
        return gain > EARLY * max(self.options.min_gain, Z * self.noise(c, i))

    def _settled(self, best, base) -> bool:
        """The final pairs so far put the gain outside the noise (throughput objective)."""
        return (self.options.objective != "memory" and bool(best) and bool(base)
                and self.better(best, base))

    def _drop(self, c, i, last) -> bool:
        """Leave the race: clearly worse; or, before the last rung and once the noise is
        known from repeats, not even better than the incumbent (a real gain of min_gain
        rarely measures below it: its rung-1 trials are saved)."""
        if self.clearly_worse(c, i):
            return True
        if last or self.options.objective == "memory" or self._replicate_sd() is None:
            return False
        return mean(c) <= mean(i)

    def _incumbent_trials(self, steps, rung) -> List[Trial]:
        """The incumbent's trials for a rung of `steps` (_incumbent_run's); at a race's first
        rung, when the last trial is the incumbent's, every one of its trials of that length
        or longer run back to back up to it (the baseline's repeats before the first race:
        taken moments ago like the last, and their mean is steadier than the last alone)."""
        inc = self._incumbent_run(steps, rung)
        if rung or not inc.ok or inc is not self.trials[-1]:
            return [inc]
        streak = []
        for t in reversed(self.trials):
            if not (t.ok and t.steps >= steps and sp.key(t.setting) == sp.key(inc.setting)):
                break
            streak.append(t)
        return streak[::-1]

    def _incumbent_run(self, steps, rung, run=True) -> Optional[Trial]:
        """The incumbent at `steps`: at a race's first rung, its trial of that length or
        longer from the rung just before (any race's) or the last trial, when there is one
        (measured moments ago: no need to run it again), else a new trial (None with
        `run` false)."""
        if rung == 0 and self.trials:
            recent = self.last_rung | {self.trials[-1].index}
            mine = sp.key(self.incumbent)
            for t in reversed(self.trials):
                if t.index in recent and t.ok and t.steps >= steps and \
                        sp.key(t.setting) == mine:
                    return t
        if not run:
            return None
        return self.trial(self.incumbent, steps, "incumbent" if self.incumbent
                          else "baseline")

    def _usable(self, t, setting) -> bool:
        if t.status != "ok":
            self.failed[sp.key(setting)] = t.status
            return False
        if t.no_effect:
            self.failed[sp.key(setting)] = "no effect"
            self._kill(t.no_effect)
            return False
        if not self.fits(t):
            self.failed[sp.key(setting)] = "memory"
            return False
        return t.ok

    def _kill(self, no_effect):
        """Skip the knobs that a no-effect reason covers beyond the setting itself, by its
        code (trials.IdleOverride; never its words): a whole strategy section when the job
        runs no CompiledProgram; without data parallelism, every field but those a
        single-place program uses (runtime/overrides.py); an environment variable the
        script undoes (trials._env_threads), all its values."""
        for idle in no_effect:
            if idle.section == "env":  # (a variable the script undoes: every value of it)
                self.dead_knobs.update(k.name for k in self.space.knobs.values()
                                       if k.section == "env" and k.key == idle.key)
                continue
            if idle.section not in STRATEGY_SECTIONS:
                continue
            if idle.code == NO_COMPILED_PROGRAM:
                self.dead_sections.add(idle.section)
            elif idle.code == NOT_DATA_PARALLEL:
                self.dead_knobs.update(
                    k.name for k in self.space.knobs.values() if k.section == idle.section
                    and not (idle.section == "build_strategy" and k.key in SINGLE_PLACE_BUILD))

    def _dead(self, setting) -> bool:
        return any(n in self.dead_knobs or self.space.knobs[n].section in self.dead_sections
                   for n in setting if n in self.space.knobs)

    def _scale(self, setting) -> float:
        """How much longer the trial's steps of `setting` may take, all together, than as
        many of the job's own: 1 where steps_for shortens the trial by their measured or
        interpolated time already (it runs as long as the job's own steps would); else by
        its batch size."""
        slower = self.slower(setting)
        if slower is not None:
            shortened = self.options.trial_steps is None and slower > SLOWER
            return 1.0 if shortened else max(1.0, slower)
        knob = self.space.knobs.get("batch_size") if self.space else None
        if knob is None or "batch_size" not in setting or not knob.current:
            return 1.0  # (the job's own batch size unknown: no allowance)
        return max(1.0, setting["batch_size"] / knob.current)

    # --- trials ---------------------------------------------------------------------------------
    def trial(self, setting, steps, phase, scale=1.0, check_budget=True,
              duration_s=None) -> Trial:
        expected = self._expected_s(steps, scale)
        racing = self.space is not None and phase != "final"
        held = self._final_reserve_s() if racing else 0.0
        if check_budget and expected > self.remaining_s() - held:
            raise BudgetSpent()
        timeout = self.options.trial_timeout_s or (
            max(30.0, 5 * expected) if self.per_step_s is not None  # calibrated
            else max(120.0, self.options.budget_s / 2))  # the first baseline: unknown cost
        label = sp.label(setting)
        self.progress.trial_started(self, label, phase, steps)
        env = sp.to_env(setting, self.space) if setting else {}
        limit = {"duration_s": duration_s} if duration_s is not None else {}
        t = self.runner.run(setting, env, steps, timeout, phase, label, **limit)
        t.end_s = self.elapsed_s()
        self.trials.append(t)
        self._warm_startup(t)
        self.progress.trial_done(self, t)
        self.on_trial(self)
        return t

    def _warm_startup(self, t):
        """Each trial's start-up, once calibrated, as the trials after the first measure it:
        the longest of theirs (a setting with more worker processes starts slower), not the
        first trial's cold start, which made every trial look three times as long as it
        was, left the end of the budget unused and the final's time held back too long."""
        if self.per_step_s is None or t is self.trials[0] or not t.ok or \
                not t.steps_per_s or t.wall_s is None:
            return
        startup = max(t.wall_s - t.steps / t.steps_per_s, 0.2)
        self.warm_startup_s = max(self.warm_startup_s or 0.0, startup)
        self.overhead_s = self.warm_startup_s

    def _final_reserve_s(self) -> float:
        """The time the search leaves for the final: one pair (baseline, best) at the first
        rung's length, the least that measures the speedup by interleaved trials (_final
        runs a short pair when a long one does not fit). Held back from the first race on
        (any race may end with a new best); not from the baseline's repeats before it, which
        choose nothing and, after a cold first trial, measure the start-up it is planned
        with (_warm_startup)."""
        return 2 * self._expected_s(self.steps0)

    def _expected_s(self, steps, scale=1.0) -> float:
        """How long a trial of `steps` is expected to take, start-up included (`scale`: how
        much longer its steps may be than the job's own)."""
        return self.overhead_s + (self.per_step_s or 0.05) * steps * scale

    def remaining_s(self) -> float:
        return self.options.budget_s - (time.monotonic() - self.t0)

    def elapsed_s(self) -> float:
        return time.monotonic() - self.t0


def _set_back(setting: dict, before: dict, name: str) -> dict:
    """`setting` with knob `name` as it was in `before` (absent there: the job's own)."""
    out = dict(setting)
    if name in before:
        out[name] = before[name]
    else:
        out.pop(name, None)
    return out


def _advise(profile):
    from ..advisors import advise
    return advise(profile)

