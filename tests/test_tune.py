"""`paddletune tune` without subprocesses: the space and its --space specs, settings as env
vars and code, the throughput interval, the search against a simulated job (known optimum,
failing trials, no-effect knobs, the budget, Ctrl-C), the record and its rendering."""

import io
import json
import random
import re
from dataclasses import replace
from types import SimpleNamespace

import pytest
from rich.console import Console
from typer.testing import CliRunner

from paddletune.cli import app
from paddletune.profile import figures as F
from paddletune.profile import records as R
from paddletune.profile.model import Profile
from paddletune.render import tune as tune_view
from paddletune.tune import parse_duration, record as rec, search, space as sp
from paddletune.tune.search import TuneOptions, Tuner
from paddletune.tune import trials
from paddletune.tune.trials import IdleOverride, Trial, throughput_ci


def loader_figures(config, shapes=None):
    """A main loader's figures of 100 batches (what the space reads: config and shapes)."""
    return F.LoaderFigures(
        loader=0, name=config.name, config=config, passes=1, scope="steady", span_s=1.0,
        batches=100, pushes=100, peeks=0, empty_pops=0, empty_ratio=0.0, wait=F.WaitFigures(),
        occupancy=None, timeline=(), producer=F.ProducerFigures(producers=1), workers=(),
        consumer=F.ConsumerFigures(), swings=0, oscillating=False, shapes=shapes or {})


def fake_profile(source="sample", batch=32, workers=0, capacity=2, cores=2, shapes=None,
                 blas="OpenBLAS 0.3", flags=None):
    """A baseline profile with what the space is built from: one DataLoader (`source`
    None: none), the cores, NumPy's BLAS and the FLAGS."""
    config = R.LoaderConfig(name="DataLoader#0", num_workers=workers, capacity=capacity,
                            use_double_buffer=True, source=source, batch_size=batch)
    reader = (F.ReaderFigures(loaders=(loader_figures(config, shapes),), main=0)
              if source is not None else None)
    env = R.Env(cpu=R.CpuInfo(usable_cores=cores),
                numpy=R.NumpyInfo(blas=blas, blas_threads=2),
                flags={"FLAGS_eager_delete_tensor_gb": 0.0} if flags is None else flags)
    return Profile(path="baseline.jsonl", header=R.Header(schema=2, env=env),
                   summary=F.Summary(reader=reader))


def parallel_figures(threads, every):
    """A data-parallel job's ParallelExecutor figures (what the space reads: threads, drop)."""
    return F.ParallelFigures(
        places=2, threads=threads, reduce="AllReduce", steps=10, scope="steady", wall_s=0.01,
        thread_busy=(), thread_busy_mean=None, concurrency=1.0, ops_per_step=10.0,
        sched_s_per_op=None, sched_share=None, ready_mean=1.0, ready_max=1, combine_s=0.0,
        combine_share=None, straggler_share=None, drop=F.DropFigures(every=every))


def step(wall_s, gap_s=0.0, batch_size=10, queue=None, i=0):
    """A training step record as a trial's profile holds it."""
    return R.Step(t_s=0.01 * i, program=1, executor=1, step=i, wall_s=wall_s, feed_s=0.0,
                  compute_s=wall_s, fetch_s=0.0, gap_s=gap_s, batch_size=batch_size,
                  queue=queue)


# --- space -------------------------------------------------------------------------------------
def test_space_from_a_profile():
    space = sp.build_space(fake_profile())
    assert list(space.knobs) == [
        "num_workers", "capacity", "use_double_buffer", "batch_size",
        "FLAGS_eager_delete_tensor_gb", "FLAGS_allocator_strategy", "blas_threads",
        "num_threads", "num_iteration_per_drop_scope", "fuse_all_optimizer_ops",
        "fuse_elewise_add_act_ops"]
    assert space.knobs["num_workers"].values == (0, 1, 2)
    assert space.knobs["capacity"].values == (2, 4, 8, 16, 64)
    assert space.knobs["blas_threads"].key == "OPENBLAS_NUM_THREADS"


def test_space_starts_from_the_jobs_own_execution_strategy():
    """The knobs' current values are the job's own, as its data-parallel steps ran (else
    Paddle's defaults): a job set to drop its scopes every step gets 100 and 10 tried."""
    profile = fake_profile()
    space = sp.build_space(profile)
    assert space.knobs["num_threads"].current == 0
    assert space.knobs["num_iteration_per_drop_scope"].current == 100
    profile = replace(profile, summary=replace(profile.summary,
                                               parallel=parallel_figures(threads=1, every=1)))
    space = sp.build_space(profile)
    drop = space.knobs["num_iteration_per_drop_scope"]
    assert drop.current == 1 and drop.values == (1, 100, 10)
    assert space.knobs["num_threads"].current == 1
    assert space.knobs["num_threads"].values == (1, 2)


def test_space_batch_size_needs_a_sample_generator_and_not_keep():
    assert "batch_size" not in sp.build_space(fake_profile(), keep_batch_size=True)
    space = sp.build_space(fake_profile(source="batch"))
    assert "batch_size" not in space
    assert any("set_batch_generator" in n for n in space.notes)


def test_space_without_a_loader_has_no_reader_knobs():
    profile = fake_profile(source=None)
    space = sp.build_space(profile)
    assert "num_workers" not in space and "FLAGS_allocator_strategy" in space


def test_space_specs_restrict_and_extend():
    space = sp.build_space(fake_profile(), specs=[
        "-build_strategy", "-blas_threads", "capacity=8,32", "FLAGS_check_nan_inf=false",
        "exec_strategy.num_iteration_per_run=1,2"])
    assert "fuse_all_optimizer_ops" not in space and "blas_threads" not in space
    assert space.knobs["capacity"].values == (2, 8, 32)  # the job's own value stays first
    assert space.knobs["FLAGS_check_nan_inf"].values == (False,)
    assert space.knobs["num_iteration_per_run"].section == "exec_strategy"
    only = sp.build_space(fake_profile(), specs=["only=num_workers,capacity"])
    assert list(only.knobs) == ["num_workers", "capacity"]
    # SECTION.KEY names the knob the space already has: its current value stays
    qualified = sp.build_space(fake_profile(), specs=["reader.capacity=8"])
    assert qualified.knobs["capacity"].values == (2, 8)


@pytest.mark.parametrize("spec, message", [
    ("-nothing", "no knob or section 'nothing'"),
    ("capacity", "write NAME=V1,V2"),
    ("bogus=1", "unknown knob 'bogus'"),
    ("only=capacity,nope", "no knob nope"),
    ("capacity=0,4", "reader.capacity takes"),
    ("exec_strategy.num_threads=two", "exec_strategy.num_threads takes"),
])
def test_bad_space_specs(spec, message):
    if "takes" in message:  # values of override fields: refused before any trial
        with pytest.raises(sp.SpaceError, match=message):
            sp.check_specs([spec])
    with pytest.raises(sp.SpaceError, match=message):
        sp.build_space(fake_profile(), specs=[spec])


def test_setting_as_env_exports_and_code():
    space = sp.build_space(fake_profile())
    setting = sp.merged({}, {"num_workers": 2, "capacity": 16, "batch_size": 64,
                             "FLAGS_eager_delete_tensor_gb": -1.0, "blas_threads": 1,
                             "num_threads": 1, "fuse_all_optimizer_ops": True}, space)
    env = sp.to_env(setting, space)
    assert json.loads(env["PADDLETUNE_OVERRIDES"]) == {
        "reader": {"num_workers": 2, "capacity": 16, "batch_size": 64},
        "exec_strategy": {"num_threads": 1},
        "build_strategy": {"fuse_all_optimizer_ops": True}}
    assert env["FLAGS_eager_delete_tensor_gb"] == "-1.0" and env["OPENBLAS_NUM_THREADS"] == "1"
    assert "export OPENBLAS_NUM_THREADS=1" in sp.exports(setting, space)
    code = sp.code_lines(setting, space)
    assert code[0] == "fluid.io.DataLoader.from_generator(..., num_workers=2, capacity=16)"
    assert "exec_strategy.num_threads = 1" in code
    assert "build_strategy.fuse_all_optimizer_ops = True" in code
    assert any("batch_size=64" in line and "learning rate" in line for line in code)
    assert sp.label(setting).startswith("num_workers=2 capacity=16 batch_size=64")
    assert sp.merged(setting, {"num_workers": 0}, space).get("num_workers") is None


def test_parse_value_and_duration():
    assert [sp.parse_value(v) for v in ("2", "0.5", "True", "none", "auto_growth")] == \
        [2, 0.5, True, None, "auto_growth"]
    assert [parse_duration(v) for v in ("90", "90s", "5m", "1.5h")] == [90, 90, 300, 5400]
    with pytest.raises(ValueError, match="90s, 5m or 1h"):
        parse_duration("soon")


def test_throughput_interval_by_batch_means():
    steps = [step(0.01, 0.0, 10, i=i) for i in range(40)]
    rate, ci = throughput_ci(steps)
    assert rate == pytest.approx(1000) and ci == pytest.approx(0, abs=1e-9)
    rng = random.Random(1)
    noisy = [step(0.01 * rng.uniform(0.8, 1.2), None, 10, i=i) for i in range(400)]
    rate, ci = throughput_ci(noisy)
    assert 950 < rate < 1050 and 0 < ci < 0.05 * rate
    assert throughput_ci(steps[:4])[1] is None  # too few steps for an interval


def test_batches_made_before_a_trial_are_not_its_throughput():
    """A producer-bound trial starts with a full queue (filled while the job set up) and
    drains it: its pops came faster than the producer can make batches. The fall of the
    queue's fill over the steps is left out; a queue that fills up is not added."""
    steady = [step(0.01, 0.0, 10, queue=max(16 - i, 0), i=i) for i in range(40)]
    rate, _ = throughput_ci(steady)
    assert rate == pytest.approx((40 - 16) * 10 / 0.4)  # 24 batches made in 0.4 s
    rising = [s._replace(queue=min(i, 16)) for i, s in enumerate(steady)]
    assert throughput_ci(rising)[0] == pytest.approx(1000)
    no_reader = [s._replace(queue=None) for s in steady]
    assert throughput_ci(no_reader)[0] == pytest.approx(1000)
    _, blocks = trials._block_rates(steady)  # the blocks drain too: each is corrected
    assert blocks[0] < 1000 and blocks[-1] == pytest.approx(1000)


# --- the search on a simulated job ---------------------------------------------------------------
class Clock:
    def __init__(self):
        self.now = 0.0

    def monotonic(self):
        return self.now


class FakeRunner:
    """A job whose samples/s is `rate(setting)` +-1% noise; trials take simulated time."""

    def __init__(self, clock, rate, interrupt_at=None, no_effect=("exec_strategy",
                                                                   "build_strategy"),
                 why=("no-compiled-program", "the job ran no CompiledProgram")):
        self.clock, self.rate, self.count = clock, rate, 0
        self.interrupt_at, self.no_effect, self.why = interrupt_at, no_effect, why
        self.rng = random.Random(0)

    def run(self, setting, env, steps, timeout_s, phase, label, duration_s=None):
        self.count += 1
        if self.count == self.interrupt_at:
            raise KeyboardInterrupt
        if duration_s is not None:  # steps of 0.01 s: those ending within duration_s
            steps = min(steps, 1 + int(duration_s / 0.01 + 1e-9))
        t = Trial(self.count, dict(setting), label, phase, steps)
        t.run_s = steps * 0.01
        t.wall_s = t.run_s + 1.0
        self.clock.now += t.wall_s
        value = self.rate(setting)
        if isinstance(value, str):
            t.status, t.message = value, f"simulated {value}"
            return t
        t.status, t.steps_per_s = "ok", 100.0
        t.samples_per_s = value * (1 + self.rng.uniform(-0.01, 0.01))
        t.ci, t.peak_bytes, t.capacity_bytes = 0.02 * value, 1000, None
        requested = json.loads(env.get("PADDLETUNE_OVERRIDES", "{}"))
        t.no_effect = [IdleOverride(s, k, *(self.why(k) if callable(self.why) else self.why))
                       for s in self.no_effect for k in requested.get(s, {})
                       if not callable(self.why) or self.why(k) is not None]
        return t


def job_rate(setting):
    """Best: num_workers=2 and capacity >= 16 (1.8x); capacity=8 hangs, naive_best_fit runs
    out of memory."""
    if setting.get("capacity") == 8:
        return "timeout"
    if setting.get("FLAGS_allocator_strategy") == "naive_best_fit":
        return "oom"
    workers = setting.get("num_workers", 0)
    rate = 1000.0 * {0: 1.0, 1: 1.2, 2: 1.5}[workers]
    if workers == 2 and setting.get("capacity", 2) >= 16:
        rate *= 1.2
    return rate


def run_tuner(monkeypatch, rate=job_rate, budget_s=3600, interrupt_at=None, **options):
    clock = Clock()
    monkeypatch.setattr(search.time, "monotonic", clock.monotonic)
    runner = FakeRunner(clock, rate, interrupt_at)
    return simulated(runner, budget_s=budget_s, **options).run()


def simulated(runner, **options):
    """A Tuner of the simulated job (fake_profile's space, no advice): trials of 50 and 100
    steps, the batch size kept unless `options` say otherwise."""
    tuner = Tuner(runner, TuneOptions(**{"trial_steps": 50, "keep_batch_size": True,
                                         **options}))
    tuner.load_profile = lambda path: fake_profile()
    tuner.advise = lambda profile: []
    return tuner


def test_search_finds_the_known_optimum_despite_failures(monkeypatch):
    tuner = run_tuner(monkeypatch)
    assert tuner.status == "complete" and tuner.stop_reason.startswith("converged")
    assert tuner.incumbent["num_workers"] == 2 and tuner.incumbent["capacity"] >= 16
    failed = {t.status for t in tuner.trials if "capacity=8" in t.label} | {
        t.status for t in tuner.trials if "naive_best_fit" in t.label}
    assert failed == {"timeout", "oom"}  # and the search went on past them
    assert tuner.final["speedup"] == pytest.approx(1.8, rel=0.05)
    assert tuner.final["pairs"] == 1  # one pair puts a 1.8x gain far outside the noise
    assert tuner.final["confirmed"] is True
    # gains of 1.5x and 1.2x decide at the short rung (capacity 16 and 64 are alike, but the
    # longer rung would run only the better of them: it could not change the choice)
    assert {t.steps for t in tuner.trials
            if t.phase in ("knob:num_workers", "knob:capacity")} == {50}
    # strategies without a CompiledProgram: one trial says "no effect", the section is skipped
    no_effect = [t for t in tuner.trials if t.no_effect]
    assert len(no_effect) == 2  # one exec_strategy knob, one build_strategy knob
    assert tuner.dead_sections == {"exec_strategy", "build_strategy"}


def test_without_data_parallel_only_the_fusions_are_skipped(monkeypatch):
    """A single-place CompiledProgram: a fusion has no effect, so the other fusions and the
    ExecutionStrategy are not tried, but enable_inplace (which a single place uses) is."""
    clock = Clock()
    monkeypatch.setattr(search.time, "monotonic", clock.monotonic)
    runner = FakeRunner(
        clock, lambda s: 1000.0 * (1.3 if s.get("enable_inplace") else 1.0),
        why=lambda key: None if key == "enable_inplace" else (
            "not-data-parallel",
            "the program runs without with_data_parallel, so no data-parallel graph uses it"))
    runner.no_effect = ("exec_strategy", "build_strategy")
    tuner = Tuner(runner, TuneOptions(
        trial_steps=50, keep_batch_size=True,
        specs=("only=num_threads,fuse_all_optimizer_ops,fuse_elewise_add_act_ops",
               "build_strategy.enable_inplace=true")))
    tuner.load_profile = lambda path: fake_profile()
    tuner.advise = lambda profile: []
    tuner.run()
    assert tuner.incumbent == {"enable_inplace": True}
    assert len([t for t in tuner.trials if t.no_effect]) == 2  # one per section, then skipped
    assert tuner.dead_knobs == {"num_threads", "fuse_all_optimizer_ops",
                                "fuse_elewise_add_act_ops"} and not tuner.dead_sections


def _knobs_killed(monkeypatch, why):
    """The dead sections and knobs after tuning the strategy knobs of a job whose strategy
    overrides change nothing for `why(key)` ((code, words), None: it has an effect)."""
    clock = Clock()
    monkeypatch.setattr(search.time, "monotonic", clock.monotonic)
    runner = FakeRunner(clock, lambda s: 1000.0, why=why)
    tuner = Tuner(runner, TuneOptions(
        trial_steps=50, keep_batch_size=True,
        specs=("only=num_threads,fuse_all_optimizer_ops,fuse_elewise_add_act_ops",
               "build_strategy.enable_inplace=true")))
    tuner.load_profile = lambda path: fake_profile()
    tuner.advise = lambda profile: []
    tuner.run()
    return tuner.dead_sections, tuner.dead_knobs


def test_the_tuner_acts_on_reason_codes_not_on_their_words(monkeypatch):
    """Rewording a no-effect reason changes nothing the tuner does: a not-data-parallel code
    whose words say nothing of data parallelism still kills every strategy knob but
    enable_inplace; no-compiled-program in other words kills the sections; and words that
    name "no CompiledProgram" or "with_data_parallel" under another code kill nothing."""
    plain = "this override did nothing in this job"
    reworded = _knobs_killed(monkeypatch, lambda key: None if key == "enable_inplace" else
                             ("not-data-parallel", plain))
    assert reworded == (set(), {"num_threads", "fuse_all_optimizer_ops",
                                "fuse_elewise_add_act_ops"})
    sections = _knobs_killed(monkeypatch, lambda key: ("no-compiled-program", plain))
    assert sections == ({"exec_strategy", "build_strategy"}, set())
    misleading = _knobs_killed(monkeypatch, lambda key: (
        "same-value", "no CompiledProgram; runs without with_data_parallel"))
    assert misleading == (set(), set())


def test_a_trials_no_effect_carries_the_events_codes_and_the_fallbacks():
    """trials._overrides: the overrides event's NoEffect entries keep their code and words;
    a requested key no event mentions gets no-loader (reader) or no-compiled-program
    (strategies); applied ones are not "no effect"."""
    event = R.OverridesEvent(
        t_s=1.0, applied=(R.AppliedOverride("reader", "capacity", 16, 2),),
        skipped=(R.NoEffect("exec_strategy", "num_threads", 1, "not-data-parallel",
                            "reworded: nothing to do with it"),))
    profile = replace(fake_profile(), events=(event,))
    requested = {"reader": {"capacity": 16, "num_workers": 2},
                 "exec_strategy": {"num_threads": 1}, "build_strategy": {"enable_inplace": True}}
    trial = Trial(1, {}, "", "knob", 50)
    trials._overrides(trial, profile, {"PADDLETUNE_OVERRIDES": json.dumps(requested)})
    assert trial.applied == [{"section": "reader", "key": "capacity", "value": 16, "was": 2}]
    assert [(i.section, i.key, i.code) for i in trial.no_effect] == [
        ("reader", "num_workers", "no-loader"),
        ("exec_strategy", "num_threads", "not-data-parallel"),
        ("build_strategy", "enable_inplace", "no-compiled-program")]
    assert trial.no_effect[1].why == "reworded: nothing to do with it"
    assert "exec_strategy.num_threads: reworded" in trial.no_effect_text
    from runtime.overrides import NO_EFFECT_CODES
    assert {i.code for i in trial.no_effect} <= set(NO_EFFECT_CODES)


def test_gains_inside_the_noise_are_not_taken(monkeypatch):
    tuner = run_tuner(monkeypatch, rate=lambda s: 1000.0 * (1.01 if s.get("capacity") == 64
                                                            else 1.0))
    # the job's own settings stay; no speedup of a setting against itself is stated
    assert tuner.incumbent == {} and tuner.final is None


def test_a_small_gain_is_decided_at_the_longer_rung(monkeypatch):
    """+3% with 1% noise: inside EARLY times the bar at the short rung, so the longer rung
    decides; the incumbent's trial of the rung just before is reused, not run again."""
    tuner = run_tuner(monkeypatch, rate=lambda s: 1000.0 * (1.03 if s.get("capacity") == 64
                                                            else 1.0),
                      specs=("only=capacity",))
    assert tuner.incumbent == {"capacity": 64}
    long_runs = [t for t in tuner.trials if t.steps == 100 and t.phase != "final"]
    assert {t.label for t in long_runs} >= {"baseline", "capacity=64"}
    accepted_at = max(t.index for t in long_runs)
    assert all(t.index <= accepted_at for t in tuner.trials if t.phase == "knob:capacity")
    # 3 baselines, one race of 4 challengers, its longer rung (the incumbent and the better
    # half), one final pair: the first baseline is not run again at the first rung
    assert [t.phase for t in tuner.trials].count("baseline") == 3 + 1


def test_final_takes_a_second_pair_when_the_first_is_inside_the_noise(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(search.time, "monotonic", clock.monotonic)

    class Runner(FakeRunner):
        finals = 0

        def run(self, setting, env, steps, timeout_s, phase, label):
            t = super().run(setting, env, steps, timeout_s, phase, label)
            if phase == "final" and setting:
                self.finals += 1
                if self.finals == 1:  # a bad moment for the best setting's first final
                    t.samples_per_s = 1000.0
            return t

    tuner = simulated(Runner(clock, job_rate), specs=("only=num_workers",)).run()
    assert tuner.incumbent == {"num_workers": 2} and tuner.final["pairs"] == 2
    # the first pair at the first rung's length, the second at the longest
    assert [t.steps for t in tuner.trials if t.phase == "final"] == [50, 50, 100, 100]


class Scripted(FakeRunner):
    """Each setting's trials read `rate x` the next of its scripted factors (then 1.0): a
    noisy machine whose bad moments fall where the test wants them."""

    def __init__(self, clock, rate, factors):
        super().__init__(clock, rate)
        self.factors = {k: list(v) for k, v in factors.items()}

    def run(self, setting, env, steps, timeout_s, phase, label):
        t = super().run(setting, env, steps, timeout_s, phase, label)
        queue = self.factors.get(label, [])
        t.samples_per_s = self.rate(setting) * (queue.pop(0) if queue else 1.0)
        return t


def scripted_tuner(monkeypatch, rate, factors):
    clock = Clock()
    monkeypatch.setattr(search.time, "monotonic", clock.monotonic)
    return simulated(Scripted(clock, rate, factors), specs=("only=capacity",)).run()


NOISY_BASELINE = [0.94, 1.0, 1.06]  # the first three baselines: trials vary by 6%


def rate_64(gain):
    return lambda s: {64: 1000.0 * gain}.get(s.get("capacity"), 950.0 if s else 1000.0)


def test_the_first_race_weighs_the_challengers_against_all_three_baselines(monkeypatch):
    """+32% on a job whose baselines read 0.94, 1.0 and 1.06: against the last baseline alone
    (+25%) a short trial would not decide it, against the three taken moments ago it does
    (twice the bar, with their mean's smaller error): no longer rung."""
    tuner = scripted_tuner(monkeypatch, rate_64(1.32), {"baseline": NOISY_BASELINE})
    assert tuner.incumbent == {"capacity": 64}
    assert [t.index for t in tuner.race_runs[sp.key({})]] == [1, 2, 3]
    assert not [t for t in tuner.trials if t.steps == 100 and t.phase != "final"]


def test_a_promising_gain_inside_the_noise_gets_more_pairs(monkeypatch):
    """+15% on a job whose trials vary by 6%; the challenger's longer trial has a bad moment
    (-8%): inside the noise at the last rung (against the three baselines and the
    incumbent's longer trial), but promising, so another pair (incumbent, challenger) at
    that length decides it."""
    tuner = scripted_tuner(monkeypatch, rate_64(1.15),
                           {"baseline": NOISY_BASELINE, "capacity=64": [1.0, 0.92]})
    assert tuner.incumbent == {"capacity": 64}
    longer = [t.label for t in tuner.trials if t.steps == 100 and t.phase != "final"]
    assert longer == ["baseline", "capacity=64"] * 2  # the last rung, then one more pair


def test_the_final_pair_is_long_unless_a_short_one_would_settle_the_gain(monkeypatch):
    """+15% against trials that vary by 6%: one pair at the first rung's length would likely
    leave it inside the noise (a longer pair would follow), so the final's first pair runs at
    the longest length; +50% against 1% is plain from a short pair."""
    noisy = scripted_tuner(monkeypatch, rate_64(1.15),
                           {"baseline": NOISY_BASELINE, "capacity=64": [1.0, 0.96]})
    assert noisy.incumbent == {"capacity": 64}
    assert [t.steps for t in noisy.trials if t.phase == "final"] == [100, 100]
    assert noisy.final["pairs"] == 1 and noisy.final["confirmed"] is True
    # a budget left for a short pair (two trials of 1 s + 0.5 s) but not for a long one
    noisy.options.budget_s = noisy.elapsed_s() + 3.5
    before = len(noisy.trials)
    noisy._final()
    assert [t.steps for t in noisy.trials[before:]] == [50, 50]
    quiet = scripted_tuner(monkeypatch, rate_64(1.5),
                           {"baseline": [0.99, 1.0, 1.01]})
    assert quiet.incumbent == {"capacity": 64}
    assert [t.steps for t in quiet.trials if t.phase == "final"] == [50, 50]
    assert quiet.final["pairs"] == 1 and quiet.final["confirmed"] is True


def test_more_pairs_stop_at_extra_pairs(monkeypatch):
    """+8% against 6% noise (the machine stays as noisy) stays promising but inside it:
    the extra pairs run (up to extra_pairs), then the job's own setting stays."""
    tuner = scripted_tuner(monkeypatch, rate_64(1.08),
                           {"baseline": NOISY_BASELINE + [1.06, 1.06, 0.94],
                            "capacity=64": [1.06, 0.98, 0.97, 1.0]})
    assert tuner.incumbent == {}
    longer = [t.label for t in tuner.trials if t.steps == 100]
    assert longer == ["baseline", "capacity=64"] * (1 + tuner.options.extra_pairs)


def test_a_gain_that_does_not_look_promising_gets_no_more_pairs(monkeypatch):
    tuner = scripted_tuner(monkeypatch, rate_64(1.0),
                           {"baseline": NOISY_BASELINE, "capacity=64": [1.1]})
    assert tuner.incumbent == {}
    assert [t.label for t in tuner.trials if t.steps == 100] == ["baseline", "capacity=64"]


def test_a_settings_own_spread_counts_not_only_the_pooled_one(monkeypatch):
    """A GIL-bound baseline varies by 13% from trial to trial, the worker-process settings
    hardly at all: their comparisons are not held to the baseline's noise, so +8% from
    capacity 64 over 2 workers needs one extra pair, not the two the pooled spread asks."""
    def rate(s):
        w = s.get("num_workers", 0)
        return 1000.0 * {0: 1.0, 1: 1.2, 2: 1.5}[w] * (
            1.08 if w == 2 and s.get("capacity") == 64 else 1.0)

    clock = Clock()
    monkeypatch.setattr(search.time, "monotonic", clock.monotonic)
    tuner = simulated(Scripted(clock, rate, {"baseline": [0.87, 1.0, 1.13] * 5}),
                      specs=("only=num_workers,capacity",)).run()
    assert tuner.incumbent == {"num_workers": 2, "capacity": 64}
    longer = [t for t in tuner.trials if t.steps == 100 and t.phase == "knob:capacity"]
    assert len(longer) == 2
    baseline, quiet = tuner.trials[0], longer[0]
    assert tuner.trial_sd(quiet) < 0.7 * tuner.trial_sd(baseline) * (100 / 50) ** -0.5


def test_a_best_setting_far_noisier_than_the_others_gets_a_note(monkeypatch):
    """Capacity 64 is 1.5x the job's own, and its trials vary by about 20% where the
    baseline's vary by 1%: the record says the choices among settings that noisy are not
    established; a best as steady as the rest gets no such note."""
    quiet = [0.99, 1.0, 1.01, 1.0]
    tuner = scripted_tuner(monkeypatch, rate_64(1.5),
                           {"baseline": quiet, "capacity=64": [1.0, 1.3, 0.8, 1.2]})
    assert tuner.incumbent == {"capacity": 64}
    note = [n for n in tuner.notes if n.startswith("the best setting's trials varied by")]
    assert len(note) == 1 and "the other settings' repeats" in note[0], tuner.notes
    steady = scripted_tuner(monkeypatch, rate_64(1.5),
                            {"baseline": quiet, "capacity=64": [1.0, 1.01, 0.99, 1.0]})
    assert steady.incumbent == {"capacity": 64}
    assert not any(n.startswith("the best setting's trials varied") for n in steady.notes)


def test_a_gain_the_final_pairs_do_not_confirm_is_stated_as_such(monkeypatch):
    """The search's best reads no faster than the baseline in the final pairs (say the gain
    was a fluke): both pairs are taken and the record says the gain is not confirmed."""
    clock = Clock()
    monkeypatch.setattr(search.time, "monotonic", clock.monotonic)

    class Runner(FakeRunner):
        def run(self, setting, env, steps, timeout_s, phase, label):
            t = super().run(setting, env, steps, timeout_s, phase, label)
            if phase == "final":
                t.samples_per_s = 1000.0
            return t

    tuner = simulated(Runner(clock, job_rate), specs=("only=num_workers",)).run()
    assert tuner.incumbent == {"num_workers": 2}
    assert tuner.final["pairs"] == 2 and tuner.final["confirmed"] is False
    assert tuner.final["speedup"] == pytest.approx(1.0)


def test_a_race_after_a_longer_rung_reuses_the_incumbents_longer_trial(monkeypatch):
    """capacity=64 wins at the longer rung (+3%); the next knob's race starts from its trial
    of that rung (twice the first rung's length, moments ago) instead of running it again."""
    tuner = run_tuner(monkeypatch, rate=lambda s: 1000.0 * (1.03 if s.get("capacity") == 64
                                                            else 1.0),
                      specs=("only=capacity,use_double_buffer",))
    assert tuner.incumbent == {"capacity": 64}
    won = next(t.index for t in tuner.trials if t.phase == "knob:capacity" and t.steps == 100)
    after = [t for t in tuner.trials if t.index > won and t.phase != "final"]
    assert after[0].phase == "knob:use_double_buffer" and after[0].steps == 50
    assert all(t.phase != "incumbent" or t.steps == 100 for t in after)


def test_the_incumbent_sits_out_a_rung_it_is_far_behind_in(monkeypatch):
    """Every other capacity is 1.5x the job's own, alike within the noise: the longer rung
    only has the better half of them to tell apart, without the incumbent."""
    tuner = run_tuner(monkeypatch, rate=lambda s: 1500.0 if s.get("capacity") else 1000.0,
                      specs=("only=capacity",))
    assert tuner.incumbent.get("capacity") in (4, 8, 16, 64)
    race = [t for t in tuner.trials if t.phase != "final" and t.steps == 100]
    assert [t.phase for t in race] == ["knob:capacity"] * 2


def test_buffering_knobs_are_not_raced_when_the_step_hardly_waits_for_data(monkeypatch):
    """Every trial waits for data 1% of the step: capacity and use_double_buffer could win
    at most ~1%, below min_gain, so they are not tried and a note says why; num_workers
    (it also competes for the cores) still is."""
    clock = Clock()
    monkeypatch.setattr(search.time, "monotonic", clock.monotonic)

    class Runner(FakeRunner):
        def run(self, setting, env, steps, timeout_s, phase, label):
            t = super().run(setting, env, steps, timeout_s, phase, label)
            t.input_share = 0.01
            return t

    tuner = simulated(Runner(clock, job_rate),
                      specs=("only=num_workers,capacity,use_double_buffer",)).run()
    raced = {t.phase for t in tuner.trials}
    assert "knob:num_workers" in raced
    assert not raced & {"knob:capacity", "knob:use_double_buffer"}
    assert any(n.startswith("capacity not tried: the step waits for data 1.0%")
               for n in tuner.notes)
    assert tuner.incumbent == {"num_workers": 2}


def test_the_first_baseline_calibrates_the_length_and_is_the_first_repeat(monkeypatch):
    """Without --trial-steps: the first baseline runs CALIBRATION_S of steps after its first
    (151 steps of 0.01 s); that count is the first rung's length, and the trial is the
    first of the three baselines."""
    clock = Clock()
    monkeypatch.setattr(search.time, "monotonic", clock.monotonic)
    tuner = Tuner(FakeRunner(clock, job_rate), TuneOptions(
        keep_batch_size=True, specs=("only=num_workers",)))
    tuner.load_profile = lambda path: fake_profile()
    tuner.advise = lambda profile: []
    tuner.run()
    assert tuner.steps0 == tuner.trials[0].steps == 151
    assert [(t.phase, t.steps) for t in tuner.trials[:4]] == [("baseline", 151)] * 3 + [
        ("knob:num_workers", 151)]
    assert tuner.incumbent == {"num_workers": 2}


def test_steps_too_slow_to_calibrate_in_time_fall_back_to_a_fixed_count(monkeypatch):
    """A job whose steps are too slow for CALIBRATION_S to hold enough of them ("no-steps"):
    the baseline runs MIN_STEPS steps instead, and the search goes on from there."""
    clock = Clock()
    monkeypatch.setattr(search.time, "monotonic", clock.monotonic)

    class Slow(FakeRunner):
        def run(self, setting, env, steps, timeout_s, phase, label, duration_s=None):
            t = super().run(setting, env, steps, timeout_s, phase, label)
            if duration_s is not None:
                t.status, t.samples_per_s, t.steps = "no-steps", None, 4
            return t

    tuner = Tuner(Slow(clock, job_rate), TuneOptions(keep_batch_size=True,
                                                     specs=("only=num_workers",)))
    tuner.load_profile = lambda path: fake_profile()
    tuner.advise = lambda profile: []
    tuner.run()
    assert [(t.status, t.steps) for t in tuner.trials[:4]] == [("no-steps", 4)] + [
        ("ok", search.MIN_STEPS)] * 3
    assert tuner.steps0 == search.MIN_STEPS and tuner.incumbent == {"num_workers": 2}


def test_advice_is_tried_first(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(search.time, "monotonic", clock.monotonic)
    tuner = Tuner(FakeRunner(clock, job_rate), TuneOptions(trial_steps=50,
                                                            keep_batch_size=True))
    tuner.load_profile = lambda path: fake_profile()
    advice = SimpleNamespace(id="reader-starved", figures={"workers": 2, "suggested_capacity": 16,
                                                           "blas_threads": 1, "cores": 2})
    tuner.advise = lambda profile: [advice]
    tuner.run()
    assert [t.phase for t in tuner.trials[:4]] == ["baseline"] * 3 + ["advice:reader-starved"]
    assert tuner.trials[3].setting == {"num_workers": 2, "capacity": 16}


def advised_tuner(monkeypatch, rate, figures):
    """A Tuner of the simulated job whose only advice is reader-starved with `figures`."""
    clock = Clock()
    monkeypatch.setattr(search.time, "monotonic", clock.monotonic)
    tuner = simulated(FakeRunner(clock, rate), specs=("only=num_workers,capacity,blas_threads",))
    tuner.advise = lambda profile: [SimpleNamespace(id="reader-starved", figures=figures)]
    return tuner


STARVED = {"workers": 2, "blas_threads": 2, "cores": 2}  # advises 2 workers and 1 thread


def test_a_member_of_the_advice_that_costs_leaves_the_winning_change(monkeypatch):
    """The advice's {2 workers, 1 BLAS thread} wins over the job's own (1.5 x 0.82), but
    the one thread costs 18% (the compute needed both): set back alone, the workers alone
    win, and the search goes on from them."""
    def rate(setting):
        threads = 0.82 if setting.get("blas_threads") == 1 else 1.0
        return 1000.0 * (1.5 if setting.get("num_workers") == 2 else 1.0) * threads

    tuner = advised_tuner(monkeypatch, rate, STARVED).run()
    assert tuner.trials[3].phase == "advice:reader-starved"
    assert tuner.trials[3].setting == {"num_workers": 2, "blas_threads": 1}
    assert {t.phase for t in tuner.trials} >= {"ablate:blas_threads", "ablate:num_workers"}
    assert tuner.incumbent == {"num_workers": 2}
    assert tuner.final["speedup"] == pytest.approx(1.5, rel=0.05)


def test_members_that_all_count_keep_the_change_and_are_not_raced_again(monkeypatch):
    """Both members of the advice gain (the workers 1.5x, the one thread 1.1x beside them):
    the change stays whole, and the knob race of blas_threads that follows does not try the
    job's own thread count again (it lost to the one thread just now)."""
    def rate(setting):
        threads = 1.1 if setting.get("blas_threads") == 1 else 1.0
        return 1000.0 * (1.5 if setting.get("num_workers") == 2 else 1.0) * threads

    tuner = advised_tuner(monkeypatch, rate, STARVED).run()
    assert tuner.incumbent == {"num_workers": 2, "blas_threads": 1}
    ablated = [t for t in tuner.trials if t.phase.startswith("ablate:")]
    assert {t.phase for t in ablated} == {"ablate:blas_threads", "ablate:num_workers"}
    assert not [t for t in tuner.trials if t.phase == "knob:blas_threads"
                and t.setting.get("blas_threads", 2) == 2]
    assert any(n.startswith("blas_threads 2 (") and "not tried again" in n
               for n in tuner.notes)


def test_advice_keeps_to_the_values_given_with_space(monkeypatch):
    """--space num_workers=0,1,2: the advisors' 5 workers is not tried (a note says so); the
    advised capacity, a knob whose values the user did not fix, still is."""
    clock = Clock()
    monkeypatch.setattr(search.time, "monotonic", clock.monotonic)
    tuner = Tuner(FakeRunner(clock, job_rate), TuneOptions(
        trial_steps=50, keep_batch_size=True, specs=("num_workers=0,1,2",)))
    tuner.load_profile = lambda path: fake_profile()
    advice = SimpleNamespace(id="reader-starved", figures={"workers": 5, "suggested_capacity": 16,
                                                           "blas_threads": 1, "cores": 2})
    tuner.advise = lambda profile: [advice]
    tuner.run()
    assert tuner.trials[3].phase == "advice:reader-starved"
    assert tuner.trials[3].setting == {"capacity": 16}
    assert all(t.setting.get("num_workers", 0) in (0, 1, 2) for t in tuner.trials)
    assert ("advice reader-starved: num_workers=5 is outside --space num_workers=0,1,2; "
            "not tried") in tuner.notes


def test_budget_stops_the_search_with_the_best_so_far(monkeypatch):
    # trials of 1.5 s: 13 of the search (a race's first trial the last), then the final
    # pair in the 3 s it held back
    tuner = run_tuner(monkeypatch, budget_s=23)
    assert tuner.status == "complete" and tuner.stop_reason == "budget spent"
    assert sum(t.wall_s for t in tuner.trials) <= 23
    # the race it stopped: who was still in it (a finished search leaves none)
    last = [t for t in tuner.trials if t.phase != "final"][-1]
    assert last.phase.startswith("knob:") and tuner.race_alive == {sp.key(last.setting)}
    # the time it held back: the final pair ran after it, and measured the speedup
    assert [t.label for t in tuner.trials if t.phase == "final"] == [
        "baseline", sp.label(tuner.incumbent)]
    assert tuner.final["basis"] == "final pairs" and tuner.final["pairs"] == 1
    assert run_tuner(monkeypatch).race_alive == set()


def test_ctrl_c_keeps_the_best_so_far(monkeypatch):
    tuner = run_tuner(monkeypatch, interrupt_at=12)
    assert tuner.status == "interrupted" and len(tuner.trials) == 11
    assert tuner.incumbent.get("num_workers") == 2


def test_memory_objective_takes_the_lowest_peak_above_the_floor(monkeypatch):
    """GC off (-1) raises the peak; naive_best_fit lowers it but costs 10% of the speed, GC
    at last use (0, the job's own) is the floor's best."""
    clock = Clock()
    monkeypatch.setattr(search.time, "monotonic", clock.monotonic)

    class Runner(FakeRunner):
        def run(self, setting, env, steps, timeout_s, phase, label):
            t = super().run(setting, env, steps, timeout_s, phase, label)
            gc, pool = (setting.get("FLAGS_eager_delete_tensor_gb", 0.0),
                        setting.get("FLAGS_allocator_strategy", "auto_growth"))
            t.peak_bytes = (2000 if gc < 0 else 1000) - (300 if pool == "naive_best_fit"
                                                          else 0) - (
                100 if setting.get("capacity") == 4 else 0)
            return t

    def rate(setting):
        return 900.0 if setting.get("FLAGS_allocator_strategy") == "naive_best_fit" else 1000.0

    tuner = Tuner(Runner(clock, rate), TuneOptions(
        trial_steps=50, objective="memory", floor=0.95, keep_batch_size=True,
        specs=("only=FLAGS_eager_delete_tensor_gb,FLAGS_allocator_strategy,capacity",)))
    tuner.load_profile = lambda path: fake_profile()
    tuner.advise = lambda profile: []
    tuner.run()
    assert tuner.incumbent == {"capacity": 4}


def test_batch_size_ladder_up_to_what_fits(monkeypatch):
    """Peak memory 100 + 10 x batch of a 1000 capacity; samples/s grows with the batch."""
    clock = Clock()
    monkeypatch.setattr(search.time, "monotonic", clock.monotonic)

    class Runner(FakeRunner):
        def run(self, setting, env, steps, timeout_s, phase, label):
            t = super().run(setting, env, steps, timeout_s, phase, label)
            batch = setting.get("batch_size", 16)
            t.peak_bytes, t.capacity_bytes = 100 + 10 * batch, 1000
            if t.peak_bytes > 1000:
                t.status, t.samples_per_s = "oom", None
            t.batch_model = {"largest_batch": 200}  # the model over-estimates: 200 OOMs
            return t

    tuner = Tuner(Runner(clock, lambda s: 100.0 * s.get("batch_size", 16) ** 0.5),
                  TuneOptions(trial_steps=50, max_batch_size=512,
                              specs=("only=batch_size",)))
    tuner.load_profile = lambda path: fake_profile(batch=16)
    tuner.advise = lambda profile: []
    tuner.run()
    verify = [t for t in tuner.trials if t.phase == "batch:verify"]
    assert verify[0].setting == {"batch_size": 200} and verify[0].status == "oom"
    assert tuner.incumbent == {"batch_size": 80}  # 100 + 10 x 80 = 900: 10% headroom
    assert search.LR_NOTE in tuner.notes
    # the verification trials are the ladder race's first rung (with the baseline just
    # before them): neither is run again at that length
    short = [(t.phase, t.label) for t in tuner.trials if t.steps == 50]
    assert short.count(("batch:verify", "batch_size=80")) == 1
    assert short.count(("batch", "batch_size=80")) == 0
    assert short.count(("baseline", "baseline")) == 3
    # throughput rises from the job's 16 to 80: the sizes below 16 cannot be faster
    assert "batch_size=8" not in {t.label for t in tuner.trials}
    assert any(n.startswith("batch sizes 8, 32 not tried: 80 ran") for n in tuner.notes)


def test_a_batch_probe_that_crashes_stops_the_probes_and_says_why(monkeypatch):
    """A verification trial that crashes (not out of memory) is no evidence about memory:
    the probes stop there, and a note gives the trial's status, message and log, rather than
    bisecting towards it as if it had not fitted."""
    clock = Clock()
    monkeypatch.setattr(search.time, "monotonic", clock.monotonic)

    class Runner(FakeRunner):
        def run(self, setting, env, steps, timeout_s, phase, label):
            t = super().run(setting, env, steps, timeout_s, phase, label)
            t.peak_bytes, t.capacity_bytes = 100 + 10 * setting.get("batch_size", 16), 1000
            t.batch_model = {"largest_batch": 80}
            if setting.get("batch_size", 16) > 16:
                t.status, t.samples_per_s = "crashed", None
                t.message, t.log = "AssertionError: batch must be <= 16", "trial.log"
            return t

    tuner = Tuner(Runner(clock, job_rate), TuneOptions(trial_steps=50, max_batch_size=512,
                                                       specs=("only=batch_size",)))
    tuner.load_profile = lambda path: fake_profile(batch=16)
    tuner.advise = lambda profile: []
    tuner.run()
    verify = [t for t in tuner.trials if t.phase == "batch:verify"]
    assert [t.setting for t in verify] == [{"batch_size": 80}]  # no bisection after it
    assert ("batch 80 crashed (not out of memory): AssertionError: batch must be <= 16; see "
            "trial.log. Larger batches were not tried") in tuner.notes


def test_a_job_that_runs_out_of_memory_as_it_is_points_to_the_batch_that_fits(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(search.time, "monotonic", clock.monotonic)

    class Runner(FakeRunner):
        def run(self, setting, env, steps, timeout_s, phase, label):
            t = super().run(setting, env, steps, timeout_s, phase, label)
            t.status, t.samples_per_s = "oom", None
            t.message, t.log, t.profile = "PoolOutOfMemory: ...", "b.log", "b.jsonl"
            return t

    tuner = Tuner(Runner(clock, job_rate), TuneOptions(trial_steps=50))
    with pytest.raises(search.TuneError, match=r"the baseline run failed \(oom\): "
                       r"PoolOutOfMemory: \.\.\.; see b\.log\. The job's own settings do not fit "
                       r"in memory: `paddletune advise b\.jsonl` gives the largest batch"):
        tuner.run()
    assert tuner.status == "failed" and len(tuner.trials) == 1


def test_trials_of_a_larger_batch_measure_the_calibrated_time(monkeypatch):
    """Once a batch 4x the job's own (steps 2x slower) is the incumbent, the knob races'
    first rung runs half the calibrated steps: about the time the job's own steps took, and
    a trial's noise is its time's (span), not its steps'. The final pair's best too."""
    clock = Clock()
    monkeypatch.setattr(search.time, "monotonic", clock.monotonic)

    class Runner(FakeRunner):
        def run(self, setting, env, steps, timeout_s, phase, label, duration_s=None):
            t = super().run(setting, env, steps, timeout_s, phase, label, duration_s)
            batch = setting.get("batch_size", 16)
            t.peak_bytes, t.capacity_bytes = 100 + 10 * batch, 1000
            t.batch_model = {"largest_batch": 64}
            if t.ok:
                t.steps_per_s = t.samples_per_s / batch
            return t

    def rate(setting):
        return (100.0 * setting.get("batch_size", 16) ** 0.5
                * (1.5 if setting.get("num_workers") == 2 else 1.0))

    tuner = Tuner(Runner(clock, rate), TuneOptions(max_batch_size=64,
                                                   specs=("only=batch_size,num_workers",)))
    tuner.load_profile = lambda path: fake_profile(batch=16)
    tuner.advise = lambda profile: []
    tuner.run()
    assert tuner.steps0 == 151 and tuner.incumbent == {"batch_size": 64, "num_workers": 2}
    knob = [t for t in tuner.trials if t.phase == "knob:num_workers"]
    # 151 steps at 25/s; these at 12.5/s (both rates +-1%)
    assert knob and min(t.steps for t in knob) == pytest.approx(76, abs=2)
    assert tuner.span(knob[0]) == pytest.approx(1.0, rel=0.02)
    final = [t.steps for t in tuner.trials if t.phase == "final"]
    # the baseline; the best, whose steps run at 18.75/s (2 workers: 1.5x): 151 x 18.75 / 25
    assert final[0] == 151 and final[1] == pytest.approx(113, abs=2)
    # a batch size not measured yet: its step's time interpolated between measured ones
    per_step = {b: tuner._per_step_s({"batch_size": b}) for b in (16, 40, 64)}
    assert per_step[16] < per_step[40] < per_step[64]
    assert tuner._per_step_s({"batch_size": 128}) is None  # beyond what was measured
    assert tuner.steps_for({"batch_size": 128}, 151) == 151
    # a trial's expected time counts a slower step once: where steps_for shortens the
    # trial by its steps' time it runs as long as the job's own (no batch allowance on
    # top); a batch size not measured yet gets the batch ratio's allowance
    assert tuner._scale({"batch_size": 64}) == 1.0
    assert tuner._scale({"batch_size": 128}) == 8.0
    # the calibration: a step its steady time, the rest of the trial's wall its start-up
    base = tuner.trials[0]
    assert tuner.per_step_s == pytest.approx(1.0 / base.steps_per_s)
    assert tuner.overhead_s == pytest.approx(
        max(base.wall_s - base.steps / base.steps_per_s, 0.2))
    given = simulated(FakeRunner(clock, rate), max_batch_size=64)
    given.trials, given.space = tuner.trials, tuner.space
    assert given.steps_for({"batch_size": 64}, 50) == 50  # --trial-steps: as given


def _batch_trials(batch, rate):
    """[one trial of `batch` at `rate` samples/s], as a race's points hold them."""
    return [Trial(batch, {"batch_size": batch}, f"batch_size={batch}", "batch", 100,
                  status="ok", samples_per_s=rate, steps_per_s=rate / batch)]


class _PointsStub:
    """A tuner's comparisons over one-trial points: better by more than 10%."""

    def __init__(self):
        self.notes = []

    def score_of(self, runs):
        return runs[0].samples_per_s

    def better(self, c, i):
        return c[0].samples_per_s > 1.1 * i[0].samples_per_s


def test_unimodal_prune_keeps_the_sizes_around_the_fastest():
    """Measured: 16 -> 400, 64 -> 900, 128 -> 600 samples/s (a peak in between): sizes below
    16 and above 128 cannot beat 64 if throughput is single-peaked; a gap inside the noise
    prunes nothing. Then 32's step takes at least 16's: at most 800 samples/s, clearly
    below 900; 96 may run up to 96 x 64's steps/s (1,350) and stays."""
    from paddletune.tune.batch import unimodal_prune

    stub = _PointsStub()
    ladder = [8, 32, 64, 96, 128, 256]
    points = {16: _batch_trials(16, 400.0), 64: _batch_trials(64, 900.0),
              128: _batch_trials(128, 600.0)}
    kept = unimodal_prune(stub, ladder, points)
    assert kept == [64, 96, 128]
    assert stub.notes[0] == ("batch sizes 8, 256 not tried: 64 ran 125% faster than 16 and "
                             "50% faster than 128, and throughput is taken to be "
                             "single-peaked in the batch size")
    assert stub.notes[1].startswith("batch sizes 32 not tried: their steps take no less time")
    assert len(stub.notes) == 2
    close = {16: _batch_trials(16, 400.0), 64: _batch_trials(64, 420.0)}
    assert unimodal_prune(stub, ladder, close) == ladder


def test_the_batch_probes_stop_where_the_peak_line_puts_the_largest_safe_batch():
    """Peaks 100 + 10 x batch against a capacity of 1000 (900 usable): from 16 and 80 the
    line's largest safe batch is 80, a batch known to fit: no more probes, even though one
    of 199 ran out of memory (bisecting would try 139); a line that puts it past 199 is
    wrong (bisect); no line yet: bisect."""
    from paddletune.tune.batch import next_batch

    points = [(16, 260), (80, 900)]
    assert next_batch(points, 1000, 80, 199, 512) is None
    assert next_batch([(16, 260), (80, 500)], 1000, 80, 199, 512) == 186  # the line's
    assert next_batch([(16, 260), (80, 400)], 1000, 80, 199, 512) == 139  # line: 308
    assert next_batch([(16, 260)], 1000, 16, 199, 512) == 107


def test_step_time_prune_leaves_out_sizes_whose_bound_the_fastest_beats():
    """16 -> 4,000 samples/s (250 steps/s), 100 -> 16,000 (160/s), 160 -> 19,000: a step of
    32 or 64 takes at least as long as one of 16, so they run at most 8,000 and 16,000
    samples/s, clearly below 19,000; 128 may run up to 128 x 160 = 20,480 (not left out);
    sizes below every measured one, and measured ones, stay."""
    from paddletune.tune.batch import step_time_prune

    stub = _PointsStub()
    points = {16: _batch_trials(16, 4000.0), 100: _batch_trials(100, 16000.0),
              160: _batch_trials(160, 19000.0)}
    assert step_time_prune(stub, [8, 32, 64, 128, 160], points, 160) == [8, 128, 160]
    assert stub.notes == ["batch sizes 32, 64 not tried: their steps take no less time than "
                          "those of the smaller size measured below each, so their samples/s "
                          "are bounded (32 at most 8,000, 64 at most 16,000), clearly below "
                          "the 19,000 of 160"]
    assert points[16][0].samples_per_s == 4000.0  # the bounds are copies
    stub.notes = []
    assert step_time_prune(stub, [32, 64], {16: _batch_trials(16, 4000.0)}, 16) == [32, 64]
    assert stub.notes == []


# --- the record and its rendering -------------------------------------------------------------
def ranked(trials, incumbent, stop_reason="converged", race=(), measured_in_race=True):
    """The record's ranking of `trials` [(setting, steps, samples/s)] with `incumbent` best;
    `race`: the settings still in the race the budget stopped (their trials its, unless
    not `measured_in_race`: the race stopped before its first trial)."""
    tuner = Tuner(None, TuneOptions(trial_steps=50))
    for i, (setting, steps, rate) in enumerate(trials, 1):
        t = Trial(i, dict(setting), sp.label(setting), "knob", steps, status="ok",
                  samples_per_s=rate, steps_per_s=100.0 * 50 / steps, wall_s=2.0)
        tuner.trials.append(t)
    tuner.incumbent, tuner.stop_reason = incumbent, stop_reason
    tuner.race_alive = {sp.key(s) for s in race}
    tuner.race_runs = {k: [t for t in tuner.trials if sp.key(t.setting) == k
                           and measured_in_race] for k in tuner.race_alive}
    return rec.ranking(tuner)


def test_the_ranking_scores_a_setting_over_all_its_trials():
    """The best setting measured three times (1,480 samples/s on average) stays first
    against a setting's one lucky trial (1,500) inside the noise; the table's figures are
    the means (the baseline's three: 1,000 against itself, not -2% against its first)."""
    base = [({}, 50, 1020.0), ({}, 50, 980.0), ({}, 100, 1000.0)]
    best = [({"num_workers": 2}, 50, 1520.0), ({"num_workers": 2}, 100, 1440.0),
            ({"num_workers": 2}, 100, 1480.0)]
    lucky = ({"capacity": 16}, 50, 1500.0)
    rows = ranked([*base, best[0], lucky, *best[1:]], {"num_workers": 2})
    assert [r["label"] for r in rows] == ["capacity=16", "num_workers=2", "baseline"]
    assert rows[1]["best"] and rows[1]["trials"] == 3
    assert rows[1]["samples_per_s"] == pytest.approx((1520 * 50 + 1440 * 100 + 1480 * 100) / 250)
    assert rows[2]["vs_baseline"] == pytest.approx(0.0)
    assert rows[0]["above_best"] == "1 trial against the best's 3: inside the noise"
    assert rows[1]["above_best"] is None and rows[2]["above_best"] is None
    assert 0 < rows[1]["ci"] < 0.1 * rows[1]["samples_per_s"]


def test_a_row_above_the_best_says_why_it_was_not_taken():
    """Far above the best (2,000 against 1,480): its race stopped by the budget while it
    was still in it, or else measured better though it did not win its own race."""
    trials = [({}, 50, 1020.0), ({}, 50, 980.0), ({}, 50, 1000.0),
              ({"num_workers": 2}, 50, 1500.0), ({"num_workers": 2}, 50, 1460.0),
              ({"num_workers": 2, "capacity": 16}, 50, 2000.0)]
    cut = ranked(trials, {"num_workers": 2}, "budget spent",
                 race=[{"num_workers": 2, "capacity": 16}])
    assert cut[0]["above_best"] == ("1 trial against the best's 2: its race did not finish "
                                    "(budget spent)")
    # (a race stopped before it measured the setting: its trials are an earlier race's)
    unmeasured = ranked(trials, {"num_workers": 2}, "budget spent",
                        race=[{"num_workers": 2, "capacity": 16}], measured_in_race=False)
    done = ranked(trials, {"num_workers": 2})
    assert unmeasured[0]["above_best"] == done[0]["above_best"] == ("1 trial against the best's 2: better than the best's "
                                     "trials outside the noise, though it did not win its "
                                     "own race; measure both longer before relying on either")


def test_record_round_trip_and_report(monkeypatch, tmp_path):
    tuner = run_tuner(monkeypatch)
    path = rec.save(rec.build(tuner, {"script": "train.py", "args": ["--lr", "0.1"]},
                              {"budget_s": 60, "objective": "throughput"}),
                    tmp_path / "x.tune.json")
    record = rec.load(path)
    assert record["type"] == "paddletune-tune" and record["best"]["setting"] == tuner.incumbent
    assert record["ranking"][0]["status"] == "ok"
    assert {r["status"] for r in record["ranking"]} >= {"ok", "timeout", "oom", "no effect"}
    result = CliRunner().invoke(app, ["report", str(path)], env={"COLUMNS": "100"})
    assert result.exit_code == 0, result.output
    out = result.output
    assert "paddletune tune train.py --lr 0.1" in out
    assert "Settings, best first" in out and "timeout" in out and "no effect" in out
    assert re.search(r"samples/s ┃\s+± ┃ trials ┃ vs base", out), out
    # why a setting changed nothing, in the runtime's words (the code is the record's)
    assert re.search(r"no effect: .+: (exec|build)_strategy\.\w+: the job ran no "
                     r"CompiledProgram", out), out
    idle = next(r for r in record["ranking"] if r["status"] == "no effect")["no_effect"]
    assert idle[0]["code"] == "no-compiled-program" and record["schema"] == 2
    assert "export PADDLETUNE_OVERRIDES=" in out
    assert "fluid.io.DataLoader.from_generator(..., num_workers=2" in out
    assert re.search(r"Speedup: 1\.[78]\dx ± 0\.\d\d \([\d,]+ -> 1,[78]\d\d samples/s, 1 "
                     r"interleaved pair", out)
    assert "Not confirmed" not in out
    as_json = CliRunner().invoke(app, ["report", "--json", str(path)])
    assert json.loads(as_json.output)["best"]["setting"] == tuner.incumbent
    record["final"]["confirmed"] = False  # the final pairs left the gain inside the noise
    console = Console(record=True, width=100, file=io.StringIO())
    tune_view.render_record(record, console)
    assert "Not confirmed: these trials leave the gain inside the noise" in \
        console.export_text()


def test_render_with_nothing_better():
    record = {"type": "paddletune-tune", "command": {"script": "t.py", "args": []},
              "options": {"budget_s": 10, "objective": "throughput"}, "trials": [],
              "ranking": [], "best": {"setting": {}}, "final": None, "notes": ["a note"]}
    console = Console(width=100, record=True, file=open("/dev/null", "w"))
    tune_view.render_record(record, console)
    text = console.export_text()
    assert "Best: the job's own settings" in text and "note: a note" in text


def test_report_recognises_records_by_content(tmp_path):
    path = tmp_path / "renamed.json"
    path.write_text(json.dumps({"type": "paddletune-tune", "schema": 1}, indent=1))
    assert rec.is_record(path)
    bad = tmp_path / "bad.tune.json"
    bad.write_text("{")
    result = CliRunner().invoke(app, ["report", str(bad)])
    assert result.exit_code == 1 and "cannot read the tuning record" in result.output


@pytest.mark.parametrize("args, message", [
    (["--budget", "soon", "x.py"], "give a duration such as 90s"),
    (["--objective", "speed", "x.py"], "--objective 'speed'"),
    (["missing.py"], "can't open file 'missing.py'"),
    ([], "give the training script"),
])
def test_tune_cli_usage_errors(args, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.py").write_text("")
    result = CliRunner().invoke(app, ["tune", *args])
    assert result.exit_code == 2 and message in result.output


def test_the_record_checks_each_advice_against_what_the_search_measured(monkeypatch, tmp_path):
    """The advice's 2 workers, predicted 1.40x (a high-confidence card: 1.08x-2.00x), run at
    1.5x the baseline: the record and the report say so."""
    from rich.console import Console

    from paddletune.advisors import Advice
    from paddletune.render.tune import render_record
    from paddletune.tune import record as rec

    clock = Clock()
    monkeypatch.setattr(search.time, "monotonic", clock.monotonic)
    tuner = simulated(FakeRunner(clock, job_rate), specs=("only=num_workers",))
    card = Advice(id="reader-starved", title="t", severity="high", evidence="e", change="c",
                  expected_gain="up to 1.40x", confidence="high", expected_speedup=1.4,
                  figures={"workers": 2, "current_workers": 0})
    tuner.advise = lambda profile: [card]
    tuner.run()
    [row] = rec.build(tuner, {"script": "train.py"}, {})["advice"]
    assert row["advice"] == "reader-starved" and row["setting"] == {"num_workers": 2}
    assert row["predicted"] == 1.4
    assert row["range"] == [pytest.approx(1.4 / 1.3), pytest.approx(1.4 / 0.7)]
    assert row["measured"] == pytest.approx(1.5, rel=0.03) and row["within_range"] is True
    console = Console(width=200, record=True)
    render_record(rec.build(tuner, {"script": "train.py"}, {}), console)
    text = console.export_text()
    assert row["verdict"] == "within" and 0 < row["measured_ci"] < 0.5
    assert (f"  reader-starved (num_workers=2): predicted 1.40x (1.08x-2.00x), measured "
            f"{row['measured']:.2f}x ± {row['measured_ci']:.2f}: within its range") in text


@pytest.mark.parametrize("expected_range, got, ci, said", [
    ((1.2, 2.0), 1.5, 0.1, "within"),
    ((1.89, None), 1.79, 0.40, "noise"),  # a lower bound the trials' interval reaches
    ((1.89, None), 1.79, 0.05, "outside"),
    ((1.2, 1.6), 1.7, 0.11, "noise"),  # above the range, the interval reaching down to it
    ((1.2, 1.6), 1.7, 0.09, "outside"),
    ((1.2, 1.6), 1.0, None, "outside"),  # no interval: the point alone
    ((None, None), 1.5, 0.1, None),
    ((1.2, 1.6), None, None, None),
])
def test_an_advice_check_is_outside_its_range_only_where_its_interval_is(expected_range, got,
                                                                         ci, said):
    from paddletune.tune.advice_check import verdict
    assert verdict(expected_range, got, ci) == said


def test_the_report_words_a_lower_bound_and_a_miss():
    from paddletune.render.tune import _advice_figures
    bound = {"predicted": 1.63, "range": [1.63, None], "measured": 1.54, "within_range": False}
    assert _advice_figures(bound) == "predicted at least 1.63x, measured 1.54x: outside its range"
    noisy = {**bound, "measured_ci": 0.12, "verdict": "noise"}
    assert _advice_figures(noisy) == ("predicted at least 1.63x, measured 1.54x ± 0.12: outside "
                                      "its range, though inside these trials' noise")
    unmeasured = {"predicted": None, "range": [None, None], "measured": None}
    assert _advice_figures(unmeasured) == ("no figure predicted; not measured against the "
                                           "baseline")


def test_the_space_line_says_the_batch_ladder_and_the_advices_own_values():
    """The knob races' candidates, the batch size searched on a ladder from the job's own
    and the advice's values raced first: what the trials then try is what it said."""
    from paddletune.render.tune import space_text
    knobs = {"num_workers": sp.Knob("num_workers", "reader", "num_workers", (0, 1, 2), 0),
             "persistent_workers": sp.Knob("persistent_workers", "reader",
                                           "persistent_workers", (False, True), False),
             "batch_size": sp.Knob("batch_size", "reader", "batch_size", (32,), 32)}
    assert space_text(sp.Space(knobs)) == (
        "num_workers {0,1,2}, persistent_workers {false,true}, batch_size on a ladder from "
        "{32} (a setting the advice names races first, at its own values)")
    assert space_text(sp.Space({})) == "nothing to tune"
