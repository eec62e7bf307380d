"""Values the coordinate races leave out under the throughput objective (paddletune/tune/
prune.py): shorter reader queues, and in a later round the values that lost by more than
every change since gained; on the simulated job of test_tune.py."""

import re
from types import SimpleNamespace

import pytest

from paddletune.tune import search
from paddletune.tune import space as sp
from paddletune.tune.prune import Losses
from paddletune.tune.search import TuneOptions, Tuner
from test_tune import Clock, FakeRunner, fake_profile, run_tuner


def tuner_of(monkeypatch, rate, profile=None, **options):
    clock = Clock()
    monkeypatch.setattr(search.time, "monotonic", clock.monotonic)
    tuner = Tuner(FakeRunner(clock, rate), TuneOptions(
        **{"trial_steps": 50, "keep_batch_size": True, **options}))
    tuner.load_profile = lambda path: profile or fake_profile()
    tuner.advise = lambda profile: []
    return tuner


def raced(tuner, name):
    return [t.setting.get(name) for t in tuner.trials if t.phase == f"knob:{name}"]


def test_shorter_queues_are_not_raced_for_throughput(monkeypatch):
    """A job with capacity 8: 2 and 4 cannot make the step wait less; 16 and 64 are tried."""
    tuner = tuner_of(monkeypatch, lambda s: 1000.0, fake_profile(capacity=8),
                     specs=("only=capacity",)).run()
    assert sorted(set(raced(tuner, "capacity"))) == [16, 64]
    assert ("capacity 2, 4 not tried: a shorter queue than 8 cannot make the step wait less "
            "(it only saves memory: --objective memory tries it)") in tuner.notes


def test_shorter_queues_are_raced_for_memory_and_when_given_with_space(monkeypatch):
    memory = tuner_of(monkeypatch, lambda s: 1000.0, fake_profile(capacity=8),
                      objective="memory", specs=("only=capacity",)).run()
    assert {2, 4} <= set(raced(memory, "capacity"))
    given = tuner_of(monkeypatch, lambda s: 1000.0, fake_profile(capacity=8),
                     specs=("only=capacity", "capacity=2,4")).run()
    assert set(raced(given, "capacity")) == {2, 4}
    assert not any("not tried" in n for n in memory.notes + given.notes)


def test_a_later_round_skips_values_that_lost_by_more_than_the_changes_since(monkeypatch):
    """num_workers 0 -> 1 (+50%; 2 is 3x slower: it thrashes), then blas_threads +5%: round 2
    re-races num_workers (its context changed) without 2, which lost by far more than +5%;
    0 lost by 1.5x, more than +5% too, so num_workers is not raced at all in round 2."""
    def rate(s):
        base = {0: 1000.0, 1: 1500.0, 2: 500.0}[s.get("num_workers", 0)]
        return base * (1.05 if s.get("blas_threads") == 1 else 1.0)

    tuner = run_tuner(monkeypatch, rate=rate, specs=("only=num_workers,blas_threads",))
    assert tuner.incumbent == {"num_workers": 1, "blas_threads": 1}
    assert raced(tuner, "num_workers") == [1, 2]  # round 1 only
    note = next(n for n in tuner.notes if n.startswith("num_workers 0 ("))
    figures = re.fullmatch(r"num_workers 0 \(([\d.]+)x\), 2 \(([\d.]+)x\) not tried again: "
                           r"slower than 1 in an earlier race, by more than the \+([\d.]+)% "
                           r"the changes since gained together", note).groups()
    assert [float(x) for x in figures] == [pytest.approx(1.5, rel=0.03),
                                           pytest.approx(3.0, rel=0.03),
                                           pytest.approx(5.0, abs=2.5)]


def test_a_value_is_raced_again_when_the_changes_since_gained_more_than_it_lost(monkeypatch):
    """num_workers=2 loses to 1 by 20% with the job's short queue, but with capacity 64 it
    runs 2x faster than with 1 (an interaction): capacity's +50% since is more than its 20%,
    so round 2 races it again and finds it."""
    def rate(s):
        workers, cap = s.get("num_workers", 0), s.get("capacity", 2)
        base = {0: 1000.0, 1: 1500.0, 2: 1200.0}[workers]
        if cap >= 16:
            base *= {0: 1.0, 1: 1.5, 2: 5.0}[workers]
        return base

    tuner = run_tuner(monkeypatch, rate=rate, specs=("only=num_workers,capacity",))
    assert tuner.incumbent.get("num_workers") == 2
    assert tuner.incumbent.get("capacity", 2) >= 16
    assert not any("not tried again" in n for n in tuner.notes)


def waiting_runner(clock, rate, put_wait_share):
    """Trials that wait for data 30% of the step, their producers blocked on a full queue
    `put_wait_share(setting)` of the time."""
    class Runner(FakeRunner):
        def run(self, setting, env, steps, timeout_s, phase, label):
            t = super().run(setting, env, steps, timeout_s, phase, label)
            t.input_share, t.put_wait_share = 0.3, put_wait_share(setting)
            return t
    return Runner(clock, rate)


@pytest.mark.parametrize("blocked, raced_capacity", [(0.001, False), (0.4, True)])
def test_capacity_is_raced_only_when_the_producers_wait_for_room(monkeypatch, blocked,
                                                                 raced_capacity):
    """A worker process feeds a step that waits for data 30% of the time. When it is almost
    never blocked on a full queue, a longer queue would go unused: capacity is not raced (a
    note says why); blocked 40% of the time, it is (and wins)."""
    clock = Clock()
    monkeypatch.setattr(search.time, "monotonic", clock.monotonic)
    runner = waiting_runner(clock, lambda s: 1300.0 if s.get("capacity", 2) >= 16 else 1000.0,
                            lambda s: blocked)
    tuner = Tuner(runner, TuneOptions(trial_steps=50, keep_batch_size=True,
                                      specs=("only=capacity,use_double_buffer",)))
    tuner.load_profile = lambda path: fake_profile(workers=1)
    tuner.advise = lambda profile: []
    tuner.run()
    phases = {t.phase for t in tuner.trials}
    assert ("knob:capacity" in phases) is raced_capacity
    assert "knob:use_double_buffer" in phases  # the step does wait for data
    note = ("capacity not tried: the reader waited for room in the queue 0.1% of the time "
            "(below the 2% that counts): a longer queue would go unused; more producers "
            "(num_workers) are what feeds a step that waits")
    assert (note in tuner.notes) is not raced_capacity
    if raced_capacity:
        assert tuner.incumbent["capacity"] >= 16
    else:
        assert "capacity" not in tuner.incumbent


def test_capacity_given_with_space_is_raced_however_idle(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(search.time, "monotonic", clock.monotonic)
    tuner = Tuner(waiting_runner(clock, lambda s: 1000.0, lambda s: 0.0), TuneOptions(
        trial_steps=50, keep_batch_size=True, specs=("only=capacity", "capacity=1,32")))
    tuner.load_profile = lambda path: fake_profile(capacity=8)
    tuner.advise = lambda profile: []
    tuner.run()
    assert set(raced(tuner, "capacity")) == {1, 32} and not tuner.notes[1:]


def trials_of(rates):
    return {sp.key({"num_workers": w} if w else {}): [
        SimpleNamespace(setting={"num_workers": w} if w else {}, samples_per_s=r, steps=50)]
        for w, r in rates.items()}


def test_losses_keep_the_values_a_race_did_not_run():
    """Race 1 of num_workers: 0 and 2 lose to 1. After a +10% change elsewhere, race 2 runs
    only 0 (2 was left out), which loses again: 2's loss stands for a third round, and a
    race whose incumbent has no trial records nothing."""
    knob = SimpleNamespace(current=0, why="")
    tuner = SimpleNamespace(space=SimpleNamespace(knobs={"num_workers": knob}), notes=[],
                            better=lambda a, b: a[0].samples_per_s > 1.02 * b[0].samples_per_s)
    losses = Losses()
    one = sp.key({"num_workers": 1})
    losses.record(tuner, "num_workers", trials_of({0: 1000.0, 1: 1500.0, 2: 500.0}), one)
    losses.gains.append(1.1)
    assert losses.prune(tuner, "num_workers", 1, [0, 2]) == []
    losses.record(tuner, "num_workers", trials_of({0: 1100.0, 1: 1650.0}), one)
    losses.record(tuner, "num_workers", {one: []}, one)  # the incumbent's trial failed
    assert {k: round(v[0], 2) for k, v in losses.lost["num_workers"].items()} == {
        sp.key({"num_workers": 0}): 1.5, sp.key({"num_workers": 2}): 3.0}
    losses.gains.append(1.6)  # now 1.1 x 1.6 = 1.76x since 2's race, 1.6x since 0's
    assert losses.prune(tuner, "num_workers", 1, [0, 2]) == [0]


def eager_tuner(incumbent, input_share, producer_ratio=None, passes=None):
    """A tuner's state as prune reads it: a DataLoader's knobs (num_workers 0 to 2,
    prefetch_factor, persistent_workers), the incumbent, and its latest trial's share of the
    step spent waiting for data (and its producers' rate over the loop's, and the passes its
    DataLoader began)."""
    knobs = {k.name: k for k in (
        sp.Knob("num_workers", "reader", "num_workers", (0, 1, 2), 0),
        sp.Knob("prefetch_factor", "reader", "prefetch_factor", (2, 4, 8), 2),
        sp.Knob("persistent_workers", "reader", "persistent_workers", (False, True), False),
        sp.Knob("sharing_strategy", "multiprocessing", "sharing_strategy",
                ("file_descriptor", "file_system"), "file_descriptor"))}
    latest = SimpleNamespace(input_share=input_share, put_wait_share=None,
                             producer_ratio=producer_ratio, passes=passes)
    return SimpleNamespace(space=sp.Space(knobs, framework="torch"), incumbent=incumbent,
                           notes=[], options=TuneOptions(), latest=lambda setting: latest)


def test_dataloader_arguments_that_need_workers_wait_for_a_setting_with_workers():
    """prefetch_factor and persistent_workers do nothing without worker processes (the
    hooks skip them): not raced while the incumbent has num_workers=0, raced once it has
    workers; prefetch_factor, buffering, only while the step waits for data."""
    from paddletune.tune.prune import idle_knob
    none = eager_tuner({}, input_share=0.5)
    assert idle_knob(none, "prefetch_factor") and idle_knob(none, "persistent_workers")
    assert idle_knob(none, "sharing_strategy")  # (how workers hand tensors over)
    assert not idle_knob(none, "num_workers")
    assert ("prefetch_factor not tried while the best setting had no worker processes "
            "(num_workers=0): it needs them") in none.notes
    waiting = eager_tuner({"num_workers": 2}, input_share=0.3)
    assert not idle_knob(waiting, "prefetch_factor")
    assert not idle_knob(waiting, "persistent_workers")
    assert not idle_knob(waiting, "sharing_strategy")
    fed = eager_tuner({"num_workers": 2}, input_share=0.005)
    assert idle_knob(fed, "prefetch_factor") and not idle_knob(fed, "persistent_workers")
    assert fed.notes[0].startswith("prefetch_factor not tried: the step waits for data 0.5% "
                                   "of the time")


def test_workers_kept_between_passes_wait_for_trials_that_begin_a_second_pass():
    """persistent_workers acts only as a DataLoader pass starts again: while the incumbent's
    trials never began a second pass (bench_tune's PyTorch job: 512 batches a pass, trials
    of a few hundred steps) its race could only measure noise, so it is not run (a note
    says why); with a second pass in the trial, or the passes unknown, it is raced."""
    from paddletune.tune.prune import idle_knob
    one = eager_tuner({"num_workers": 2}, input_share=0.3, passes=1)
    assert idle_knob(one, "persistent_workers") and not idle_knob(one, "prefetch_factor")
    assert one.notes == ["persistent_workers not tried: the trials never began a second pass "
                         "of the DataLoader, so workers kept between passes would change "
                         "nothing they measure (in the whole job they save the workers' start "
                         "at each epoch: the advice's code sets persistent_workers=True)"]
    for passes in (2, None):
        assert not idle_knob(eager_tuner({"num_workers": 2}, 0.3, passes=passes),
                             "persistent_workers")
    given = eager_tuner({"num_workers": 2}, input_share=0.3, passes=1)
    given.space.knobs["persistent_workers"] = sp.Knob(
        "persistent_workers", "reader", "persistent_workers", (False, True), False, why=sp.GIVEN)
    assert not idle_knob(given, "persistent_workers")  # (--space asked for it: raced)


def test_buffering_waits_for_producers_that_keep_up():
    """Two workers make 16% of the batches the loop could take (bench_tune's PyTorch job,
    profiled by hand: 116 against 730 batches a second): the queue drains as fast as they
    fill it, so a deeper one (prefetch_factor) cannot feed the step; producers as fast as the
    loop, with the step still waiting (bursts), leave it to the race."""
    from paddletune.tune.prune import idle_knob
    slow = eager_tuner({"num_workers": 2}, input_share=0.6, producer_ratio=0.16)
    assert idle_knob(slow, "prefetch_factor") and not idle_knob(slow, "persistent_workers")
    assert slow.notes == ["prefetch_factor not tried: the producers make 16% of the batches "
                          "the loop takes when it does not wait: the queue drains as fast as "
                          "they fill it, however long it is; more producers (num_workers) "
                          "are what feeds a step that waits"]
    bursty = eager_tuner({"num_workers": 2}, input_share=0.3, producer_ratio=1.2)
    assert not idle_knob(bursty, "prefetch_factor") and not bursty.notes
    unknown = eager_tuner({"num_workers": 2}, input_share=0.3)
    assert not idle_knob(unknown, "prefetch_factor")
