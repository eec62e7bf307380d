"""How long `paddletune tune`'s trials run (search.py's Tuner inherits this): a rung's length
is counted in the job's own steps (steps0 of them at the first rung, the calibrated time), and
a setting whose steps are slower (a larger batch) runs as many as take about that time, so that
every trial of a rung measures alike and the knob races after a larger batch cost no more than
before it. A trial's noise scales with the time it measured (compare.py's span), and its
throughput leaves out the batches its reader's queue held before its steps (trials.py), so a
shorter trial neither looks steadier nor reads fast."""

from typing import Optional

MIN_STEPS = 20  # no trial is shorter
SLOWER = 1.1  # a setting whose steps take this much longer than the job's own runs fewer


class TrialLengths:
    """Needs `options.trial_steps`, `steps0`, `space`, `trials`, and Comparisons'
    `first_baseline` and `latest` on the object."""

    def steps_for(self, setting, steps) -> int:
        """A trial of `setting` in a rung of `steps` (counted in the job's own steps): where
        its steps are SLOWER than the job's own (a larger batch), as many as take about the
        time of `steps` of the job's own, MIN_STEPS at least; never more than `steps`; as
        given with --trial-steps. (A trial's throughput leaves out the queue it starts with,
        so shorter trials do not favour larger queues: trials.py.)"""
        slower = self.slower(setting)
        if self.options.trial_steps is not None or slower is None:
            return steps
        if slower <= SLOWER:  # (the job's own steps, give or take their noise)
            return steps
        return max(MIN_STEPS, min(steps, round(steps / slower)))

    def slower(self, setting) -> Optional[float]:
        """How many times the job's own step a step of `setting` takes (_per_step_s against
        the first baseline's); None when unknown."""
        base = self.first_baseline()
        per_step = self._per_step_s(setting)
        if base is None or not base.steps_per_s or per_step is None:
            return None
        return per_step * base.steps_per_s

    def rung_s(self) -> Optional[float]:
        """Seconds the first rung's steps of the job's own take (the calibrated time); None
        with --trial-steps or before the calibration."""
        base = self.first_baseline()
        if self.options.trial_steps is not None or base is None or not base.steps_per_s:
            return None
        return self.steps0 / base.steps_per_s

    def long_enough(self, t, setting, steps) -> bool:
        """Trial t (of `setting`, measured moments ago) can stand for one of a rung of
        `steps`: about as long as steps_for asks, or longer."""
        return t.steps * SLOWER >= self.steps_for(setting, steps)

    def _per_step_s(self, setting) -> Optional[float]:
        """Seconds a step of `setting` takes: its latest trial's; else, by its batch size
        (what sets a step's time), interpolated between the nearest batch sizes measured;
        None when unknown."""
        t = self.latest(setting)
        if t is not None and t.steps_per_s:
            return 1.0 / t.steps_per_s
        knob = self.space.knobs.get("batch_size") if self.space else None
        if knob is None:
            return None
        batch = setting.get("batch_size", knob.current)
        known = {}  # batch size -> seconds a step, the latest trial's
        for t in self.trials:
            if t.ok and t.steps_per_s:
                known[t.setting.get("batch_size", knob.current)] = 1.0 / t.steps_per_s
        lower = max((b for b in known if b <= batch), default=None)
        upper = min((b for b in known if b >= batch), default=None)
        if lower is None or upper is None:
            return None
        if lower == upper:
            return known[lower]
        w = (batch - lower) / (upper - lower)
        return known[lower] * (1 - w) + known[upper] * w
