"""The speedup `paddletune tune` states at the end and what it rests on (search.py's _final):
the final's interleaved pairs, or, where none ran (the budget ended, Ctrl-C), the search's
own trials, said as such and not confirmed, with the interval of the noise model over all
those trials; on the simulated job of test_tune.py."""

import io

import pytest
from rich.console import Console

from paddletune.render import tune as tune_view
from paddletune.tune import record as rec
from paddletune.tune import search
from paddletune.tune.compare import Z
from paddletune.tune.search import TuneOptions, Tuner
from paddletune.tune.trials import Trial
from test_tune import (NOISY_BASELINE, Clock, FakeRunner, Scripted, job_rate, run_tuner,
                       simulated)

COMMAND = {"script": "train.py", "args": ["--steps", "100000"], "module": False}


class Stalled(Scripted):
    """Scripted, and trial `stall_at` takes `stall_s` longer than it should (the machine
    busy elsewhere): the time the search held back for the final is gone with it."""

    def __init__(self, clock, rate, factors, stall_at, stall_s, interrupt_at=None):
        super().__init__(clock, rate, factors)
        self.stall_at, self.stall_s, self.interrupt_at = stall_at, stall_s, interrupt_at

    def run(self, setting, env, steps, timeout_s, phase, label):
        t = super().run(setting, env, steps, timeout_s, phase, label)
        if self.count == self.stall_at:
            t.wall_s += self.stall_s
            self.clock.now += self.stall_s
        return t


def workers_tuner(monkeypatch, budget_s, stall_at=None, stall_s=0.0, interrupt_at=None,
                  best=()):
    """Only num_workers: three baselines (0.94, 1.0 and 1.06 of 1,000), then one race whose
    num_workers=2 (1.5x; its trials times the factors `best`) wins at the first rung
    (trial #5); then the final."""
    clock = Clock()
    monkeypatch.setattr(search.time, "monotonic", clock.monotonic)
    runner = Stalled(clock, job_rate, {"baseline": NOISY_BASELINE, "num_workers=2": best},
                     stall_at, stall_s, interrupt_at)
    return simulated(runner, budget_s=budget_s, specs=("only=num_workers",)).run()


def rendered(record) -> str:
    console = Console(record=True, width=400, file=io.StringIO())
    tune_view.render_record(record, console)
    return console.export_text()


def speedup_line(text) -> str:
    return next(line for line in text.splitlines() if line.startswith("Speedup:"))


def test_a_speedup_from_the_search_trials_is_said_so_and_not_confirmed(monkeypatch):
    """The race's winning trial (#5) takes 100 s instead of 1.5 s: the budget ends before
    the final pairs. The speedup is stated from the search's trials, over all the good
    trials of each side at the length they share (the baseline's three, not the latest
    one, which read 6% high), with the noise model's interval over them; not confirmed,
    and said so, with what to run."""
    tuner = workers_tuner(monkeypatch, budget_s=108, stall_at=5, stall_s=100.0)
    assert tuner.incumbent == {"num_workers": 2} and tuner.stop_reason.startswith("converged")
    assert not [t for t in tuner.trials if t.phase == "final"]
    final = tuner.final
    assert final["confirmed"] is False
    assert final["baseline_trials"] == [1, 2, 3] and final["best_trials"] == [5]
    assert final["basis"] == "search trials" and final["pairs"] == 0
    assert final["outside_noise"] is True
    assert final["no_pairs"] == "budget" and final["drift"] is None
    base, best = tuner.trials[:3], [tuner.trials[4]]
    assert final["speedup"] == pytest.approx(1.5, rel=0.02)  # (1.5 / 1.06 from the latest)
    assert final["ci"] == pytest.approx(final["speedup"] * Z * tuner.noise(best, base))
    assert final["ci"] < final["speedup"] * Z * tuner.noise(best, base[-1:])

    record = rec.build(tuner, COMMAND, {"budget_s": 108, "objective": "throughput"})
    text = rendered(record)
    line = speedup_line(text)
    assert "interleaved" not in line and "re-measured with" not in line
    assert ("from the search's trials, none re-measured in a final pair: the baseline's 3 "
            "trials of 50 steps at 0:01-0:04 against the best's 1 trial of 50 steps at 1:47, "
            "1 min 43 s later)") in line, line
    assert ("  Not confirmed: the budget ended before the final interleaved pairs (the "
            "search's trials put the gain outside their noise") in text
    assert ("run `paddletune tune` with a larger --budget (this one: 1 min 48 s), or measure "
            "both settings alternately, a few runs each: `paddletune profile --duration 30s "
            "train.py -- --steps 100000` with and without the exports above") in text


def test_an_older_record_of_the_search_trials_is_not_called_interleaved(monkeypatch):
    """Records before `basis` called a speedup from the search's trials "interleaved
    pairs", confirmed: their trials' phase says what it rests on."""
    tuner = workers_tuner(monkeypatch, budget_s=108, stall_at=5, stall_s=100.0)
    record = rec.build(tuner, COMMAND, {"budget_s": 108, "objective": "throughput"})
    for key in ("basis", "no_pairs", "outside_noise"):
        del record["final"][key]
    record["final"].update(confirmed=True, pairs=1, baseline_trials=[3])
    for t in record["trials"]:
        del t["end_s"]
    text = rendered(record)
    assert "interleaved" not in speedup_line(text)
    assert "the baseline's 1 trial of 50 steps against the best's 1 trial of 50 steps)" in \
        speedup_line(text)
    assert "  Not confirmed: the budget ended before the final interleaved pairs" in text


def test_final_pairs_are_said_interleaved_and_confirm_the_gain(monkeypatch):
    tuner = workers_tuner(monkeypatch, budget_s=3600)
    final = tuner.final
    assert final["basis"] == "final pairs" and final["pairs"] == 1
    assert final["confirmed"] is True and "no_pairs" not in final
    assert final["baseline_trials"] == [t.index for t in tuner.trials[-2:-1]]
    text = rendered(rec.build(tuner, COMMAND, {"budget_s": 3600, "objective": "throughput"}))
    assert "1 interleaved pair(s) with the baseline re-measured" in speedup_line(text)
    assert "Not confirmed" not in text


def test_ctrl_c_before_the_final_pairs_states_the_search_trials(monkeypatch):
    tuner = workers_tuner(monkeypatch, budget_s=3600, interrupt_at=6)
    assert tuner.status == "interrupted" and len(tuner.trials) == 5
    assert tuner.final["basis"] == "search trials" and tuner.final["confirmed"] is False
    assert tuner.final["no_pairs"] == "interrupted"
    text = rendered(rec.build(tuner, COMMAND, {"budget_s": 3600, "objective": "throughput"}))
    assert "  Not confirmed: the tuning was stopped before the final interleaved pairs" in text


def test_ctrl_c_during_the_final_keeps_its_whole_pairs(monkeypatch):
    """The first pair leaves the gain inside the noise (the best's final trial reads 1,050);
    Ctrl-C during the second: the speedup is the first pair's, interleaved."""
    tuner = workers_tuner(monkeypatch, budget_s=3600, interrupt_at=8,
                          best=[1.0, 0.7])  # its race's trial, then its first final one
    assert tuner.status == "interrupted"
    assert [t.phase for t in tuner.trials[-2:]] == ["final", "final"]
    final = tuner.final
    assert final["basis"] == "final pairs" and final["pairs"] == 1
    assert final["baseline_trials"] == [6] and final["best_trials"] == [7]


def trials_of(steps0, spans):
    """A Tuner holding good trials [(setting, steps, steps/s)], the first rung `steps0`
    steps at the first trial's rate."""
    tuner = Tuner(None, TuneOptions(trial_steps=steps0))
    for i, (setting, steps, rate) in enumerate(spans, 1):
        tuner.trials.append(Trial(i, dict(setting), "", "knob", steps, status="ok",
                                  samples_per_s=1000.0, steps_per_s=rate))
    return tuner


def test_the_search_trials_compared_are_of_the_longest_length_both_ran():
    best = {"num_workers": 2}
    tuner = trials_of(50, [({}, 50, 100), ({}, 50, 100), ({}, 50, 100), (best, 50, 100),
                       ({}, 100, 100), (best, 100, 100), (best, 100, 100)])
    base, mine = tuner.trials[:3] + [tuner.trials[4]], [tuner.trials[3]] + tuner.trials[5:]
    got = tuner.of_one_length(base, mine)
    assert [[t.index for t in side] for side in got] == [[5], [6, 7]]
    # a larger batch's trial sized by an estimated step time measured 0.66 of the first
    # rung's time: no rung shared, all of them (each weighed by the time it measured)
    tuner = trials_of(54, [({}, 54, 108), ({}, 54, 108), ({}, 54, 108), (best, 23, 70)])
    got = tuner.of_one_length(tuner.trials[:3], tuner.trials[3:])
    assert [[t.index for t in side] for side in got] == [[1, 2, 3], [4]]


@pytest.mark.parametrize("budget_s", [12, 14, 16, 18, 20, 22, 24, 26])
def test_the_search_leaves_the_time_of_a_final_pair(monkeypatch, budget_s):
    """Whenever the budget stops the search (trials of 1.5 s), one final pair still runs
    in the time it held back: the speedup is measured by it, within the budget."""
    tuner = run_tuner(monkeypatch, budget_s=budget_s)
    assert tuner.stop_reason == "budget spent"
    assert sum(t.wall_s for t in tuner.trials) <= budget_s
    if tuner.incumbent:
        assert tuner.final["basis"] == "final pairs" and tuner.final["pairs"] >= 1


def test_the_first_trials_cold_start_does_not_plan_the_budget(monkeypatch):
    """The first trial starts cold (11 s where the others start in 1 s: a new bytecode
    cache, the framework read from disk): the trials after it set the start-up the budget
    is planned with. Taken from the first, every trial looked 11.5 s long and the final's
    time 23 s: a 40 s budget ran no race at all."""
    clock = Clock()
    monkeypatch.setattr(search.time, "monotonic", clock.monotonic)

    class Cold(FakeRunner):
        def run(self, setting, env, steps, timeout_s, phase, label, duration_s=None):
            t = super().run(setting, env, steps, timeout_s, phase, label, duration_s)
            if self.count == 1:
                t.wall_s += 10.0
                self.clock.now += 10.0
            return t

    tuner = simulated(Cold(clock, job_rate), budget_s=40).run()
    assert tuner.trials[0].wall_s == pytest.approx(11.5)
    assert tuner.overhead_s == pytest.approx(1.0)
    assert tuner.incumbent.get("num_workers") == 2
    assert tuner.final["basis"] == "final pairs"
    spent = sum(t.wall_s for t in tuner.trials)
    assert 40 - (1.5 + 3.0) < spent <= 40  # stopped where the next trial and the pair don't fit
