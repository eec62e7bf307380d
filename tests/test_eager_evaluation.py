"""Evaluation passes in an eager framework's loop: a DataLoader pass that begins and ends
between two training steps is left out of the steps (sources/eager/steps.py), recorded on its
end (records.ReaderEnd.eval_s), summed in the summary (profile/evaluation.py) and advised on
(#30, advisors/evaluation.py)."""

import pytest

from paddletune.advisors.evaluation import FORK_S_PER_WORKER, evaluation_input
from paddletune.profile import load
from paddletune.sources.eager import loaders as loaders_mod
from paddletune.sources.eager import steps as steps_mod
from paddletune.sources.eager.bus import Bus
from paddletune.sources.eager.loaders import LoaderTracker
from paddletune.sources.eager.steps import StepTimer
from profiles import make_profile, reader_records, source_info, step_records


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t

    def advance(self, seconds):
        self.t += seconds


@pytest.fixture
def loop(monkeypatch):
    """(clock, tracker, timer, steps emitted, reader_state payloads emitted)."""
    clock = Clock()
    monkeypatch.setattr(steps_mod, "_perf", clock)
    monkeypatch.setattr(loaders_mod, "_perf", clock)
    bus = Bus()
    timer = StepTimer(bus)
    timer.reset(clock())
    tracker = LoaderTracker(bus, timer, lambda x: None, lambda x, s=None: 0)
    steps, states = [], []
    bus.subscribe("step_end", steps.append)
    bus.subscribe("reader_state", states.append)
    return clock, tracker, timer, steps, states


def batch(clock, tracker, handle, wait_s, compute_s, size=None):
    """The loop asks for a batch (of `size` samples), waits `wait_s` for it, computes
    `compute_s`."""
    t0 = clock()
    clock.advance(wait_s)
    tracker.got(handle, t0, clock(), None, 0, ((size, 4),) if size else None)
    clock.advance(compute_s)


def train_step(clock, tracker, timer, handle):
    """A training step on a batch of `handle`'s pass: 1 ms wait, 4 ms compute."""
    batch(clock, tracker, handle, 0.001, 0.004)
    timer.step_done("cpu")


def test_a_pass_between_two_steps_is_left_out_of_the_step(loop):
    clock, tracker, timer, steps, states = loop
    train = tracker.start(0, {}, 0, lambda: 0)
    for _ in range(2):  # two training steps: 1 ms wait, 4 ms compute
        batch(clock, tracker, train, 0.001, 0.004)
        timer.feed(0.0005)
        timer.step_done("cpu")
    evaluation = tracker.start(1, {}, 0, lambda: 0)
    for _ in range(3):  # its 3 batches: 50 ms wait each, 5 ms evaluating, a 1 ms sync
        batch(clock, tracker, evaluation, 0.050, 0.005)
        timer.fetch(0.001)
    t0 = clock()
    clock.advance(0.0002)
    tracker.end(evaluation, "end")
    eval_span = clock() - (t0 - 3 * 0.055)
    train_step(clock, tracker, timer, train)
    step = steps[-1]
    assert step.eval_s == pytest.approx(eval_span)
    assert step.read_s == pytest.approx(0.001) and step.fetch_s == 0.0
    assert step.feed_s == 0.0 and step.compute_s == pytest.approx(0.004)
    assert step.t_end - step.t_begin == pytest.approx(0.005)  # the training's own
    (end,) = [s for s in states if s.what == "end"]
    assert (end.loader_id, end.batches) == (1, 3)
    assert end.eval_s == pytest.approx(eval_span) and end.eval_read_s == pytest.approx(0.15)
    # the step after it is whole again
    train_step(clock, tracker, timer, train)
    assert steps[-1].eval_s == 0.0 and steps[-1].t_end - steps[-1].t_begin == \
        pytest.approx(0.005)


def test_the_step_after_an_evaluation_counts_its_own_batches(loop):
    """The evaluation's batches (256 samples) are read first in the step's interval: the
    step's batch size and samples are still the training loader's (two batches of 16, as
    with gradient accumulation)."""
    clock, tracker, timer, steps, states = loop
    train = tracker.start(0, {}, 0, lambda: 0)
    batch(clock, tracker, train, 0.001, 0.004, size=16)
    timer.step_done("cpu")
    evaluation = tracker.start(1, {}, 0, lambda: 0)
    batch(clock, tracker, evaluation, 0.010, 0.001, size=256)
    tracker.end(evaluation, "end")
    for _ in range(2):
        batch(clock, tracker, train, 0.001, 0.004, size=16)
    timer.step_done("cpu")
    assert [(s.batch_size, s.samples) for s in steps] == [(16, 16), (16, 32)]


def test_a_pass_that_spans_a_step_is_training(loop):
    clock, tracker, timer, steps, states = loop
    train = tracker.start(0, {}, 0, lambda: 0)
    batch(clock, tracker, train, 0.002, 0.004)
    timer.step_done("cpu")
    batch(clock, tracker, train, 0.002, 0.004)
    tracker.end(train, "end")  # the epoch ends inside the step that took its last batch
    timer.step_done("cpu")
    (end,) = [s for s in states if s.what == "end"]
    assert end.eval_s is None and end.eval_read_s is None
    assert steps[-1].eval_s == 0.0 and steps[-1].read_s == pytest.approx(0.002)


def test_a_pass_before_the_first_step_is_left_out_of_it(loop):
    """A sanity evaluation before training starts: the first step begins after it."""
    clock, tracker, timer, steps, states = loop
    evaluation = tracker.start(1, {}, 0, lambda: 0)
    batch(clock, tracker, evaluation, 0.030, 0.002)
    tracker.end(evaluation, "end")
    train = tracker.start(0, {}, 0, lambda: 0)
    train_step(clock, tracker, timer, train)
    (step,) = steps
    assert step.eval_s == pytest.approx(0.032)
    assert step.t_end - step.t_begin == pytest.approx(0.005)
    assert step.read_s == pytest.approx(0.001)


def test_a_pass_begins_when_the_loop_asks_for_it(loop):
    """iter() may start or wake the workers (Paddle's persistent workers took 0.5 s there):
    that counts in the pass, and is its start-up; of two asks before its first batch, the
    latest (the loop's `for` over a loader it also iterated once before)."""
    clock, tracker, timer, steps, states = loop
    train = tracker.start(0, {}, 0, lambda: 0)
    train_step(clock, tracker, timer, train)
    tracker.asked(1)
    clock.advance(0.100)
    tracker.asked(1)
    clock.advance(0.500)
    evaluation = tracker.start(1, {}, 0, lambda: 0)
    batch(clock, tracker, evaluation, 0.010, 0.001)
    tracker.end(evaluation, "end")
    train_step(clock, tracker, timer, train)
    assert steps[-1].eval_s == pytest.approx(0.511)
    # (the first ask's 0.1 s, an iterator not taken through, stays in the step)
    assert steps[-1].t_end - steps[-1].t_begin == pytest.approx(0.105)
    start = [s for s in states if s.what == "start" and s.loader_id == 1][-1]
    assert start.startup_s == pytest.approx(0.500)
    (end,) = [s for s in states if s.what == "end"]
    assert end.eval_s == pytest.approx(0.511) and end.eval_read_s == pytest.approx(0.010)


def test_a_pass_inside_another_is_left_out_once(loop):
    """Two evaluation loaders, one iterated inside the other's loop."""
    clock, tracker, timer, steps, states = loop
    train = tracker.start(0, {}, 0, lambda: 0)
    train_step(clock, tracker, timer, train)
    outer = tracker.start(1, {}, 0, lambda: 0)
    batch(clock, tracker, outer, 0.010, 0.001)  # 11 ms
    inner = tracker.start(2, {}, 0, lambda: 0)
    batch(clock, tracker, inner, 0.020, 0.002)  # 22 ms
    tracker.end(inner, "end")
    batch(clock, tracker, outer, 0.010, 0.001)  # 11 ms
    tracker.end(outer, "end")
    train_step(clock, tracker, timer, train)
    ends = {s.loader_id: s for s in states if s.what == "end"}
    assert ends[2].eval_s == pytest.approx(0.022) and ends[2].eval_read_s == \
        pytest.approx(0.020)
    assert ends[1].eval_s == pytest.approx(0.022) and ends[1].eval_read_s == \
        pytest.approx(0.020)
    assert steps[-1].eval_s == pytest.approx(0.044)
    assert steps[-1].read_s == pytest.approx(0.001)
    assert steps[-1].t_end - steps[-1].t_begin == pytest.approx(0.005)


def test_a_pass_that_fails_or_is_reset_is_not_left_out(loop):
    clock, tracker, timer, steps, states = loop
    train = tracker.start(0, {}, 0, lambda: 0)
    train_step(clock, tracker, timer, train)
    evaluation = tracker.start(1, {}, 0, lambda: 0)
    batch(clock, tracker, evaluation, 0.010, 0.001)
    tracker.end(evaluation, "error", "ValueError: bad sample")
    train_step(clock, tracker, timer, train)
    assert steps[-1].eval_s == 0.0 and steps[-1].read_s == pytest.approx(0.011)
    (end,) = [s for s in states if s.what == "error"]
    assert end.eval_s is None
    # its mark is gone with it: the loader's next pass begins when it is asked for
    tracker.asked(1)
    evaluation = tracker.start(1, {}, 0, lambda: 0)
    batch(clock, tracker, evaluation, 0.010, 0.001)
    tracker.end(evaluation, "end")
    assert [s for s in states if s.what == "end"][-1].eval_s == pytest.approx(0.011)


# --- passes left before their end (an evaluation loop's `break`) -----------------------------
@pytest.fixture
def graded(loop):
    """`loop`, with the framework telling whether gradients are on (grad[0])."""
    grad = [True]
    loop[2].grad_on = lambda: grad[0]
    return loop + (grad,)


def test_an_evaluation_left_by_a_break_is_left_out(graded):
    """`with torch.no_grad(): for i, b in enumerate(val_loader): if i == 3: break`: the
    loop leaves the pass for the training loader's next batch, and that is its end."""
    clock, tracker, timer, steps, states, grad = graded
    train = tracker.start(0, {}, 0, lambda: 0)
    train_step(clock, tracker, timer, train)
    grad[0] = False
    tracker.asked(1)
    clock.advance(0.040)  # its workers start
    evaluation = tracker.start(1, {}, 0, lambda: 0)
    for _ in range(3):
        batch(clock, tracker, evaluation, 0.050, 0.005, size=256)
        timer.fetch(0.001)
    clock.advance(0.003)  # (the loop's own work after the break: the evaluation's)
    grad[0] = True
    eval_span = 0.040 + 3 * 0.055 + 0.003
    train_step(clock, tracker, timer, train)
    step = steps[-1]
    assert step.eval_s == pytest.approx(eval_span)
    assert step.read_s == pytest.approx(0.001) and step.fetch_s == 0.0
    assert step.t_end - step.t_begin == pytest.approx(0.005)
    assert step.batch_size is None and step.samples is None  # (its batches are not the step's)
    (left,) = [s for s in states if s.what == "left"]
    assert (left.loader_id, left.batches, left.detail) == (1, 3, "left after 3 batches")
    assert left.eval_s == pytest.approx(eval_span) and left.eval_read_s == pytest.approx(0.15)
    assert left.t == pytest.approx(clock() - 0.005)  # as the loop turned to training
    assert evaluation.ended
    # the next evaluation is a new pass, left in its turn
    grad[0] = False
    tracker.asked(1)
    evaluation = tracker.start(1, {}, 0, lambda: 0)
    for _ in range(2):
        batch(clock, tracker, evaluation, 0.010, 0.001)
    grad[0] = True
    train_step(clock, tracker, timer, train)
    assert steps[-1].eval_s == pytest.approx(0.022)
    assert [s.batches for s in states if s.what == "left"] == [3, 2]


def test_a_kept_iterator_read_a_few_batches_each_evaluation_is_left_each_time(graded):
    """`next(val_iter)` eval_iters times without gradients, the iterator kept across
    evaluations: each evaluation runs from its first batch's request to the loop's turn
    (the source starts a pass again for a left one's iterator)."""
    clock, tracker, timer, steps, states, grad = graded
    train = tracker.start(0, {}, 0, lambda: 0)
    evaluation = None
    for _ in range(2):
        train_step(clock, tracker, timer, train)
        grad[0] = False
        if evaluation is None or evaluation.ended:
            evaluation = tracker.start(1, {}, 0, lambda: 0)
        for _ in range(4):
            batch(clock, tracker, evaluation, 0.002, 0.003)
        grad[0] = True
        train_step(clock, tracker, timer, train)
        assert steps[-1].eval_s == pytest.approx(0.020)
        assert steps[-1].t_end - steps[-1].t_begin == pytest.approx(0.005)
    assert [(s.pass_no, s.what) for s in states if s.loader_id == 1] == [
        (1, "start"), (1, "left"), (2, "start"), (2, "left")]


def test_two_evaluation_loaders_left_in_turn(graded):
    """A validation and a test loader, a few batches of each: the first is left as the loop
    asks the second for a pass, the second as it turns back to training."""
    clock, tracker, timer, steps, states, grad = graded
    train = tracker.start(0, {}, 0, lambda: 0)
    train_step(clock, tracker, timer, train)
    grad[0] = False
    for loader, wait_s in ((1, 0.010), (2, 0.020)):
        tracker.asked(loader)
        handle = tracker.start(loader, {}, 0, lambda: 0)
        for _ in range(2):
            batch(clock, tracker, handle, wait_s, 0.001)
    grad[0] = True
    train_step(clock, tracker, timer, train)
    left = {s.loader_id: s.eval_s for s in states if s.what == "left"}
    assert left == {1: pytest.approx(0.022), 2: pytest.approx(0.042)}
    assert steps[-1].eval_s == pytest.approx(0.064)
    assert steps[-1].t_end - steps[-1].t_begin == pytest.approx(0.005)


def test_one_batch_of_an_iter_of_its_own_is_an_evaluation(graded):
    """`with torch.no_grad(): x, y = next(iter(val_loader))`, a quick validation loss: one
    batch, from an iter() of its own; its batch is not the step's either."""
    clock, tracker, timer, steps, states, grad = graded
    train = tracker.start(0, {}, 0, lambda: 0)
    batch(clock, tracker, train, 0.001, 0.004, size=64)
    timer.step_done("cpu")
    grad[0] = False
    tracker.asked(1)
    probe = tracker.start(1, {}, 0, lambda: 0)
    batch(clock, tracker, probe, 0.030, 0.010, size=1000)
    grad[0] = True
    batch(clock, tracker, train, 0.001, 0.004, size=64)
    timer.step_done("cpu")
    assert steps[-1].eval_s == pytest.approx(0.040)
    assert (steps[-1].batch_size, steps[-1].samples) == (64, 64)
    assert [(s.what, s.batches) for s in states if s.loader_id == 1] == [
        ("start", 0), ("left", 1)]


def test_a_pass_without_a_batch_is_not_an_evaluation(loop):
    """A second iterator of the training loader ran out at once (its pass began and ended
    with no batch): nothing to leave out."""
    clock, tracker, timer, steps, states = loop
    train = tracker.start(0, {}, 0, lambda: 0)
    train_step(clock, tracker, timer, train)
    empty = tracker.start(0, {}, 0, lambda: 0)
    clock.advance(0.001)
    tracker.end(empty, "end")
    train_step(clock, tracker, timer, train)
    assert [s.eval_s for s in states if s.what == "end"] == [None]
    assert steps[-1].eval_s == 0.0


def test_runs_that_are_not_a_left_evaluation_stay_in_the_step(graded):
    """Read with gradients on (no_grad() only around the forward), a single batch without
    gradients beside the training one each step (a teacher's), a run across a step's end,
    and a framework that does not say: nothing is left out."""
    clock, tracker, timer, steps, states, grad = graded
    train = tracker.start(0, {}, 0, lambda: 0)
    train_step(clock, tracker, timer, train)
    other = tracker.start(1, {}, 0, lambda: 0)
    for _ in range(3):  # gradients on
        batch(clock, tracker, other, 0.010, 0.001)
    train_step(clock, tracker, timer, train)
    for _ in range(3):  # a teacher's batch first, without gradients, then the training's
        grad[0] = False
        batch(clock, tracker, other, 0.010, 0.001)
        grad[0] = True
        train_step(clock, tracker, timer, train)
    grad[0] = False  # a run without gradients across a step's end
    batch(clock, tracker, other, 0.010, 0.001)
    timer.step_done("cpu")
    batch(clock, tracker, other, 0.010, 0.001)
    grad[0] = True
    train_step(clock, tracker, timer, train)
    timer.grad_on = None  # no signal
    for _ in range(3):
        batch(clock, tracker, other, 0.010, 0.001)
    train_step(clock, tracker, timer, train)
    assert not [s for s in states if s.what == "left"]
    assert all(s.eval_s == 0.0 for s in steps)
    assert steps[1].read_s == pytest.approx(0.031) and steps[-1].read_s == pytest.approx(0.031)


def test_an_evaluation_in_eval_mode_whose_no_grad_wraps_only_its_forward_is_left_out(graded):
    """`model.eval(); for i, b in enumerate(val_loader): if i == 3: break; with no_grad():
    model(b)`: the batches are asked for with gradients on, but the model is in eval mode
    (the framework's hooks on its train/eval say so), and the loader is not the training
    one: the run is an evaluation, left out as the loop turns back."""
    clock, tracker, timer, steps, states, grad = graded
    evaluating = [False]
    timer.eval_mode = lambda: evaluating[0]
    train = tracker.start(0, {}, 0, lambda: 0)
    batch(clock, tracker, train, 0.001, 0.004, size=32)
    timer.step_done("cpu")
    evaluating[0] = True
    evaluation = tracker.start(1, {}, 0, lambda: 0)
    for _ in range(3):
        batch(clock, tracker, evaluation, 0.020, 0.002, size=256)
    evaluating[0] = False
    batch(clock, tracker, train, 0.001, 0.004, size=32)
    timer.step_done("cpu")
    (left,) = [s for s in states if s.what == "left"]
    assert (left.loader_id, left.batches) == (1, 3)
    assert steps[-1].eval_s == pytest.approx(3 * 0.022)
    assert steps[-1].batch_size == 32 and steps[-1].read_s == pytest.approx(0.001)


def test_the_training_loader_in_eval_mode_stays_training(graded):
    """A backbone frozen in eval mode beside a training head (the model's mode reads eval
    all along): two batches of the training loader accumulated, then a teacher's batch of
    another loader, then the step: the training batches are the step's."""
    clock, tracker, timer, steps, states, grad = graded
    timer.eval_mode = lambda: True
    train = tracker.start(0, {}, 0, lambda: 0)
    teacher = tracker.start(1, {}, 0, lambda: 0)
    batch(clock, tracker, train, 0.001, 0.004, size=32)
    timer.step_done("cpu")
    for _ in range(3):
        batch(clock, tracker, train, 0.001, 0.004, size=32)
        batch(clock, tracker, train, 0.001, 0.004, size=32)
        batch(clock, tracker, teacher, 0.002, 0.001, size=32)
        timer.step_done("cpu")
    assert not [s for s in states if s.what == "left"]
    assert all(s.eval_s == 0.0 and s.samples == 64 for s in steps[1:])


def test_a_left_evaluation_then_a_whole_one(graded):
    """A few batches of the validation loader (left at the test loader's iter()), then the
    whole test loader: each is left out once."""
    clock, tracker, timer, steps, states, grad = graded
    train = tracker.start(0, {}, 0, lambda: 0)
    train_step(clock, tracker, timer, train)
    grad[0] = False
    tracker.asked(1)
    val = tracker.start(1, {}, 0, lambda: 0)
    for _ in range(2):
        batch(clock, tracker, val, 0.010, 0.001)
    tracker.asked(2)
    test = tracker.start(2, {}, 0, lambda: 0)
    for _ in range(3):
        batch(clock, tracker, test, 0.005, 0.001)
    tracker.end(test, "end")
    grad[0] = True
    train_step(clock, tracker, timer, train)
    assert [(s.loader_id, s.what, round(s.eval_s, 6)) for s in states
            if s.eval_s is not None] == [(1, "left", 0.022), (2, "end", 0.018)]
    assert steps[-1].eval_s == pytest.approx(0.040)
    assert steps[-1].t_end - steps[-1].t_begin == pytest.approx(0.005)


# --- the summary and the advice ---------------------------------------------------------------
CORES_2 = {"cpu": {"model": "Test CPU", "logical_cores": 2, "physical_cores": 2,
                   "usable_cores": 2}}
EVAL_CONFIG = {"name": "DataLoader#1", "num_workers": 0, "producer": "loop", "capacity": 0,
               "batch_size": 256, "feed": ["0", "1"]}


def with_eval_passes(steps, passes=3, batches=8, make_s=0.060, eval_s=0.004, cpu_s=0.015,
                     workers=0, start_method=None):
    """The training `steps` (step records) with `passes` passes of loader 1 between them,
    evenly spaced (the later steps moved later by the passes before them), and the passes'
    reader records: each batch made in `make_s` (`cpu_s` of it CPU) and evaluated in
    `eval_s`."""
    config = {**EVAL_CONFIG, "num_workers": workers,
              "producer": "workers" if workers else "loop", "start_method": start_method}
    per_pass = batches * (make_s + eval_s)
    out, shift, every = [], 0.0, len(steps) // (passes + 1)
    for i, step in enumerate(steps):
        p = i // every if i % every == 0 else 0
        if 0 < p <= passes:
            t0 = step["t"] + shift
            shift += per_pass
            out += eval_records(p, t0, per_pass, batches, make_s, cpu_s, config)
        step["t"] += shift
    return out


def eval_records(p, t0, per_pass, batches, make_s, cpu_s, config):
    """Pass `p` of loader 1 from `t0`, `per_pass` long: its start, one interval, its end."""
    interval = {"type": "reader", "what": "interval", "t0": t0, "t": t0 + per_pass,
                "loader": 1, "pass": p, "speed_test": False, "pushes": batches,
                "produce_s": make_s * batches, "cpu_s": cpu_s * batches, "cpu_n": batches,
                "put_wait_s": 0.0, "nbytes": batches * 1000,
                "workers": {"-1": [batches, make_s * batches, cpu_s * batches]},
                "pops": batches, "peeks": 0, "empty_pops": batches,
                "wait_s": make_s * batches, "wait_max_s": make_s, "copy_s": 0.0,
                "wait_hist": {}, "pop_sizes": {"0": batches}, "occupancy": {"0": 10},
                "swings": 0, "shapes": {}, "cost": {}, "steps": 0, "step_wait_s": 0.0,
                "programs": {}}
    return [{"type": "reader", "what": "start", "t": t0, "loader": 1, "pass": p,
             "config": config}, interval,
            {"type": "reader", "what": "end", "t": t0 + per_pass, "loader": 1, "pass": p,
             "batches": batches, "detail": "", "eval_s": per_pass,
             "eval_read_s": make_s * batches}]


def job(tmp_path, name="p", n_steps=60, train_config=None, **kwargs):
    steps = step_records(n_steps=n_steps, wall_s=0.004, gap_s=0.0)
    passes = with_eval_passes(steps[1:], **kwargs)
    config = {"name": "DataLoader#0", "num_workers": 0, "producer": "loop", "capacity": 0,
              **(train_config or {})}
    extra = reader_records(steps, config=config, produce_s=0.0005, wait_s=0.0005) + passes
    return load(make_profile(tmp_path / f"{name}.jsonl", steps=steps, env=CORES_2,
                             extra=extra, source=source_info("torch")))


def test_the_summary_sums_the_passes_and_the_training_loader_stays_the_main_one(tmp_path):
    profile = job(tmp_path, batches=120)  # more batches than the training loader's 60
    e = profile.summary.evaluation
    assert e.passes == 3 and e.total_s == pytest.approx(3 * 120 * 0.064)
    (f,) = e.loaders
    assert (f.loader, f.name, f.passes, f.batches, f.workers) == (1, "DataLoader#1", 3, 360, 0)
    assert f.wait_share == pytest.approx(0.060 / 0.064)
    assert e.share == pytest.approx(e.total_s / profile.summary.duration_s)
    assert profile.summary.main_loader.loader == profile.summary.reader.main == 0
    assert f.loader == 1 and profile.summary.reader.of(1).evaluation
    assert not profile.summary.reader.of(0).evaluation
    # the evaluation loader's figures hold all its passes, not the steady steps' window
    evaluation = profile.summary.reader.of(1)
    assert (evaluation.scope, evaluation.batches) == ("all", 360)


def test_evaluation_waiting_for_its_batches_is_given_workers(tmp_path):
    profile = job(tmp_path)
    a = evaluation_input(profile)
    assert a is not None and a.id == "evaluation-input" and a.source == 30
    fig = a.figures
    # 60 ms making over 4 ms evaluating wants 15 workers; 1 core beside the loop at 0.25
    # of a core each runs 4
    assert (fig["workers_wanted"], fig["workers_cap"], fig["suggested_workers"]) == \
        (15, 4, 4)
    batch_s = max(0.004 + 0.00075, 0.060 / 4, 0.015 / 1)
    assert fig["predicted_batch_s"] == pytest.approx(batch_s)
    assert fig["predicted_passes_s"] == pytest.approx(
        3 * (0.060 + 0.00075) + 21 * batch_s + 4 * FORK_S_PER_WORKER)  # (forked once)
    assert fig["saved_s"] == pytest.approx(3 * 8 * 0.064 - fig["predicted_passes_s"])
    assert a.expected_speedup is None  # the steps do not change: the run's time does
    assert a.change.splitlines()[1].startswith(
        "eval_loader = torch.utils.data.DataLoader(dataset, batch_size=256, num_workers=4, "
        "persistent_workers=True)")
    assert "left out of the steps" in a.evidence


def test_spawned_workers_start_a_new_interpreter_each(tmp_path):
    """The same job with the spawn start method: each worker's start is 0.7 s
    (SPAWN_S_PER_WORKER), not a fork's 15 ms, where no loader measured its own. Its 4
    workers' 2.8 s outweigh the 1.2 s they would save over 3 passes of 8 batches: nothing
    is advised; over passes of 120 batches they still pay, saving 2.74 s less than forked
    ones."""
    from paddletune.advisors.evaluation import SPAWN_S_PER_WORKER
    assert evaluation_input(job(tmp_path, "f")) is not None
    assert evaluation_input(job(tmp_path, "s", start_method="spawn")) is None
    fork = evaluation_input(job(tmp_path, "fl", batches=120)).figures
    spawn = evaluation_input(job(tmp_path, "sl", batches=120, start_method="spawn")).figures
    assert fork["start_s_per_worker"] == FORK_S_PER_WORKER
    assert spawn["start_s_per_worker"] == SPAWN_S_PER_WORKER == 0.7
    assert spawn["predicted_passes_s"] == pytest.approx(
        fork["predicted_passes_s"] + 4 * (SPAWN_S_PER_WORKER - FORK_S_PER_WORKER))


def test_a_spawned_workers_start_is_the_jobs_own_where_a_loader_measured_it():
    """A loader of the job whose 2 spawned workers took 3 s to start its first pass: 1.5 s
    a worker; a forked loader's, or one without a measured start, does not count."""
    from types import SimpleNamespace as NS
    from paddletune.advisors.evaluation import _start_s_per_worker

    def loader(workers, method, first_s):
        return NS(config=NS(num_workers=workers, start_method=method),
                  pass_starts=NS(first_s=first_s) if first_s is not None else None)

    loaders = [loader(2, "spawn", 3.0), loader(4, "fork", 0.06), loader(2, "spawn", None),
               loader(0, "spawn", None)]
    profile = NS(summary=NS(reader=NS(loaders=loaders)))
    assert _start_s_per_worker(profile, loader(0, "spawn", None)) == 1.5
    assert _start_s_per_worker(profile, loader(0, "fork", None)) == FORK_S_PER_WORKER
    assert _start_s_per_worker(profile, None) == FORK_S_PER_WORKER


def test_evaluation_with_too_few_workers_is_given_more(tmp_path):
    """Two workers, each 60 ms a batch against 4 ms evaluating it: 4 workers (the cores'
    cap), the batches after each pass's first at the pace of 4 against that of 2."""
    a = evaluation_input(job(tmp_path, "w", workers=2))
    fig = a.figures
    assert (fig["current_workers"], fig["suggested_workers"]) == (2, 4)
    assert fig["make_s_per_batch"] == pytest.approx(0.060)  # (one worker's, not the wait)
    now, new = max(0.00475, 0.030, 0.015), max(0.00475, 0.015, 0.015)
    assert fig["predicted_passes_s"] == pytest.approx(
        3 * 8 * 0.064 - 21 * (now - new) + 2 * FORK_S_PER_WORKER)  # (2 more, forked once)
    assert "each of its 2 workers made a batch in 60.00 ms" in a.evidence
    assert "num_workers=4" in a.change


def test_evaluation_with_workers_enough_or_busy_evaluating_is_not_advised(tmp_path):
    assert evaluation_input(job(tmp_path, "w", workers=4)) is None  # (the cores' cap)
    assert evaluation_input(job(tmp_path, "e", make_s=0.002, eval_s=0.030)) is None
    short = job(tmp_path, "s", n_steps=400, passes=1, batches=1)
    assert short.summary.evaluation.share < 0.05
    assert evaluation_input(short) is None


def test_the_report_states_the_passes_under_the_steps(tmp_path):
    from rich.console import Console

    from paddletune.render.report import render_report
    profile = job(tmp_path)
    console = Console(width=100, record=True, force_terminal=False, color_system=None)
    render_report(profile, console)
    text = " ".join(console.export_text().split())
    share = profile.summary.evaluation.share
    assert (f"Evaluation: 3 DataLoader passes ran between training steps, left out of the "
            f"steps above: 1.54 s, {share:.1%} of the run; DataLoader#1 (made in the loop): "
            f"3 × 0.51 s (8 batches each), 93.8% of it waiting for its batches.") in text
    assert ("Reader: DataLoader#1 · evaluation (its passes ran between training steps) · "
            "made in the training loop (num_workers=0)") in text


def test_a_validation_run_read_first_in_a_step_does_not_give_it_its_samples(graded):
    """An evaluation nothing leaves out (gradients on, the model in train mode, a `break`
    after 6 batches of 256) read after a step: the next step reads it first, then its
    training batch of 64. The step's batch size and samples are the training loader's, as
    the latest step's were (helper-34's s03: 3,537 samples/s and 1.5 batches a step read
    against the script's 2,330 and 1)."""
    clock, tracker, timer, steps, states, grad = graded
    train = tracker.start(0, {}, 0, lambda: 0)
    val = tracker.start(1, {}, 0, lambda: 0)
    batch(clock, tracker, train, 0.001, 0.004, size=64)
    timer.step_done("cpu")
    for _ in range(6):
        batch(clock, tracker, val, 0.002, 0.001, size=256)
    batch(clock, tracker, train, 0.001, 0.004, size=64)
    timer.step_done("cpu")
    assert not [s for s in states if s.what == "left"]
    assert [(s.batch_size, s.samples) for s in steps] == [(64, 64), (64, 64)]
    assert steps[-1].read_s == pytest.approx(6 * 0.002 + 0.001)  # (its time stays the step's)
