"""The PyTorch source (paddletune/sources/torch) in-process against real torch on the CPU: the
events its hooks announce, the speed test's replay, PADDLETUNE_OVERRIDES, --check-nan, the
hooks' removal, TorchCode's lines and the framework detection."""

import gc
import json
import multiprocessing
import time

import pytest

torch = pytest.importorskip("torch")

import psutil  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.data import dataloader as dl  # noqa: E402
from torch.utils.data._utils import fetch as fetchers  # noqa: E402

from paddletune.profile.records import LoaderConfig  # noqa: E402
from paddletune.sources.detect import DetectError, detect  # noqa: E402
from paddletune.sources.eager.overrides import OverrideError  # noqa: E402
from paddletune.sources.torch import hooks  # noqa: E402
from paddletune.sources.torch.code import NAN_GUARDS, TorchCode  # noqa: E402
from paddletune.sources.torch.source import TorchSource  # noqa: E402

EVENTS = ("step_end", "reader_state", "reader_push", "reader_pop", "nan_inf", "gc_pause",
          "gc_heap")


class Sleepy(torch.utils.data.Dataset):
    """`n` samples of 3 floats; each __getitem__ sleeps `sleep` s and counts itself."""

    def __init__(self, n=16, sleep=0.0, fail_at=None):
        self.n, self.sleep, self.fail_at, self.calls = n, sleep, fail_at, 0

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        self.calls += 1
        if i == self.fail_at:
            raise ValueError(f"bad sample {i}")
        if self.sleep:
            time.sleep(self.sleep)
        return torch.full((3,), float(i)), i


class Stream(torch.utils.data.IterableDataset):
    def __init__(self, n=12):
        self.n = n

    def __iter__(self):
        for i in range(self.n):
            yield torch.full((3,), float(i)), i


class Source:
    """A begun TorchSource and every event it announced, by name."""

    def __init__(self):
        self.source = TorchSource()
        self.source.begin()
        self.events = {name: [] for name in EVENTS}
        for name in EVENTS:
            self.source.subscribe(name, self.events[name].append)

    def __getattr__(self, name):
        return getattr(self.source, name)

    def states(self):
        return [(s.what, s.pass_no) for s in self.events["reader_state"]]


@pytest.fixture
def src(monkeypatch):
    monkeypatch.delenv("PADDLETUNE_OVERRIDES", raising=False)
    return Source()


def _model():
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    return model, torch.optim.SGD(model.parameters(), lr=0.01)


def _train(loader, model, optimizer, second=None, limit=None):
    steps = 0
    for x, _ in loader:
        loss = model(x).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if second is not None:
            second.step()
        steps += 1
        if limit is not None and steps >= limit:
            break
    return steps


# --- steps ------------------------------------------------------------------------------------
def test_one_step_end_per_step_of_the_first_optimizer(src):
    model, optimizer = _model()
    other = nn.Linear(3, 3)
    second = torch.optim.SGD(other.parameters(), lr=0.01)
    loader = torch.utils.data.DataLoader(Sleepy(16, sleep=0.002), batch_size=4)
    with src.running():
        steps = _train(loader, model, optimizer, second)
    ends = src.events["step_end"]
    assert steps == 4
    assert len(ends) == 4
    assert [e.step for e in ends] == [0, 1, 2, 3]
    for e in ends:
        assert e.batch_size == 4
        assert e.read_s >= 0.006, e  # 4 samples x 2 ms slept in __getitem__
        assert e.compute_s >= 0.0
        assert e.t_end >= e.t_begin
        assert e.place == "CPUPlace"
    for a, b in zip(ends, ends[1:]):  # (the heap counted after the first: its pause)
        assert b.t_begin == pytest.approx(a.t_end + b.paused_s, abs=1e-9)
    assert ends[1].paused_s > 0 and [e.paused_s for e in ends[2:]] == [0.0, 0.0]


def test_a_new_optimizer_each_fold_takes_the_steps_over(src):
    """K-fold training builds a model, an optimizer and a DataLoader per fold: each fold's
    optimizer ends the steps once it steps twice (StepTimer.owns), so the later folds'
    training passes are training, not evaluation between steps."""
    folds, batches = 3, 4
    with src.running():
        for _ in range(folds):
            model, optimizer = _model()
            loader = torch.utils.data.DataLoader(Sleepy(4 * batches), batch_size=4)
            assert _train(loader, model, optimizer) == batches
    ends = src.events["step_end"]
    # (a later fold's first step ends at its optimizer's second: it holds two updates)
    assert len(ends) == folds * batches - (folds - 1)
    assert all(e.eval_s == 0.0 for e in ends)
    passes = [s for s in src.events["reader_state"] if s.what == "end"]
    assert len(passes) == folds and all(p.eval_s is None for p in passes)


def test_a_generator_stepping_first_hands_the_steps_to_its_critic(src):
    """WGAN: five critic steps to each generator step. Whichever optimizer steps first, the
    steps are the critic's; the generator's steps inside them."""
    for generator_first in (True, False):
        src = Source()
        generator, critic = _model()[1], _model()[1]
        with src.running():
            for _ in range(4):
                if generator_first:
                    generator.step()
                for _ in range(5):
                    critic.step()
                if not generator_first:
                    generator.step()
        # (generator first: its first step is one, then the critic takes over at its second)
        assert len(src.events["step_end"]) == (1 + 19 if generator_first else 20)


def test_an_lbfgs_closure_reading_a_dataloader_is_training(src):
    """Full-batch L-BFGS: each step's closure reads a whole DataLoader pass. The passes run
    out inside optimizer.step() (StepTimer.stepping): training, not evaluation."""
    model, _ = _model()
    optimizer = torch.optim.LBFGS(model.parameters(), max_iter=2)
    loader = torch.utils.data.DataLoader(Sleepy(8, sleep=0.002), batch_size=4)

    def closure():
        optimizer.zero_grad()
        total = 0.0
        for x, _ in loader:
            loss = model(x).pow(2).mean()
            loss.backward()
            total += float(loss.detach())
        return torch.tensor(total)

    with src.running():
        for _ in range(3):
            optimizer.step(closure)
    ends = src.events["step_end"]
    assert len(ends) == 3 and all(e.eval_s == 0.0 for e in ends)
    assert all(e.read_s >= 0.016 for e in ends)  # (at least one pass: 8 samples x 2 ms)
    passes = [s for s in src.events["reader_state"] if s.what == "end"]
    assert len(passes) >= 3 and all(p.eval_s is None for p in passes)


def test_a_time_major_batch_counts_its_batch_dimension(src):
    """pad_sequence's default layout, [T, B] tokens beside [B] lengths and labels in a dict:
    the batch size is the dimension most tensors share, not the first tensor's T."""
    def collate(samples):
        tokens = [torch.arange(3 + i % 5) for i, _ in enumerate(samples)]
        return {"tokens": nn.utils.rnn.pad_sequence(tokens),
                "lengths": torch.tensor([len(t) for t in tokens]),
                "label": torch.zeros(len(samples))}

    model, optimizer = _model()
    loader = torch.utils.data.DataLoader(Sleepy(12), batch_size=4, collate_fn=collate)
    with src.running():
        for batch in loader:
            assert batch["tokens"].shape == (6, 4) and len(batch["label"]) == 4
            optimizer.step()
    assert [e.batch_size for e in src.events["step_end"]] == [4, 4, 4]


def test_batch_dim_takes_the_most_shared_first_dimension():
    from paddletune.sources.eager.steps import batch_dim
    assert batch_dim(((32, 3, 8, 8), (32,))) == 32
    assert batch_dim(((57, 32), (32,), (32,))) == 32  # (time-major tokens first)
    assert batch_dim(((57, 32), (32,))) == 57  # (a tie: the first tensor's)
    assert batch_dim(((), (16, 4))) == 16 and batch_dim(((), ())) is None
    assert batch_dim(()) is None


# --- DataLoader passes --------------------------------------------------------------------------
class Collecting(Sleepy):
    """Sleepy whose sample `at` runs a full collection of the garbage collector (the
    allocation of a fetch setting one off), timing it in `collect_s`."""

    def __init__(self, n, at):
        super().__init__(n)
        self.at, self.collect_s = at, 0.0

    def __getitem__(self, i):
        if i == self.at:
            t0 = time.perf_counter()
            gc.collect()
            self.collect_s += time.perf_counter() - t0
        return super().__getitem__(i)


def test_a_collection_inside_the_fetch_is_the_steps_time_not_the_datas(src):
    """A full collection over a large heap runs inside the third batch's fetch (a
    torch.compile job's heap: a 268 ms "DataLoader wait"): the step's read time leaves it
    out, and the step still holds it."""
    heap = [[i] for i in range(600_000)]  # long-lived objects the collection scans
    model, optimizer = _model()
    dataset = Collecting(16, at=9)
    loader = torch.utils.data.DataLoader(dataset, batch_size=4)
    with src.running():
        _train(loader, model, optimizer)
    del heap
    third = src.events["step_end"][2]
    assert dataset.collect_s > 0.02, dataset.collect_s
    assert third.read_s < 0.25 * dataset.collect_s, (third, dataset.collect_s)
    assert third.t_end - third.t_begin >= dataset.collect_s
    pops = src.events["reader_pop"]
    assert max(p.wait_s for p in pops) < 0.25 * dataset.collect_s
    # the pause itself, sent after the step it fell in
    full = [p for p in src.events["gc_pause"] if p.generation == 2]
    assert len(full) == 1 and full[0].pause_s == pytest.approx(dataset.collect_s, rel=0.2)
    assert third.t_begin <= full[0].t <= third.t_end
    # the heap counted at the first step's end and after the full collection (at the
    # third's), each count's time left out of the step after it
    loop, after = src.events["gc_heap"]
    assert (loop.full, after.full) == (0, 1)
    assert loop.objects > 600_000 and after.objects > 600_000
    steps = src.events["step_end"]
    for count, following in ((loop, steps[1]), (after, steps[3])):
        assert following.t_begin >= count.t + count.read_s


def test_the_gc_clock_keeps_long_pauses_up_to_its_cap(monkeypatch):
    from paddletune.sources.eager import gc_clock as G
    monkeypatch.setattr(G, "PAUSE_S", 0.0)
    monkeypatch.setattr(G, "MAX_PAUSES", 2)
    clock = G.GcClock()
    undo = clock.install()
    try:
        for _ in range(3):
            gc.collect()
    finally:
        for u in undo:
            u()
    dropped = clock.dropped
    assert dropped >= 1 and clock.dropped_s > 0

    class Bus:
        sent = []

        def emit(self, name, payload):
            self.sent.append((name, payload))

    G.send_last_pauses(clock, Bus())
    pauses = [p for _, p in Bus.sent]
    assert {name for name, _ in Bus.sent} == {"gc_pause"}
    assert [(p.generation, p.more) for p in pauses] == [(2, 0), (2, 0), (-1, dropped)]
    assert all(p.pause_s > 0 for p in pauses) and clock.drain() == [] and not clock.dropped


def test_the_gc_clock_counts_the_heap_at_the_first_step_and_after_full_collections(
        monkeypatch):
    """The first step's end, then the step ends after the 1st, 2nd and 4th full collection
    (not the 3rd), at most MAX_HEAP_READS counts; each count's time is the timer's pause."""
    from paddletune.sources.eager import gc_clock as G
    monkeypatch.setattr(G, "MAX_HEAP_READS", 4)

    class Bus:
        def __init__(self):
            self.heaps = []

        def emit(self, name, payload):
            if name == "gc_heap":
                self.heaps.append(payload)

        def listening(self, name):
            return name == "gc_heap"

    class Timer:
        paused = []
        last_end = None  # (no step ended: a count's pause is its own time; from a step's
        # end, the hooks' work before it too: test_a_collection_inside_the_fetch_...)

        def pause(self, seconds):
            self.paused.append(seconds)

    bus, timer, clock = Bus(), Timer(), G.GcClock()
    undo = clock.install()
    try:
        counted = [clock.stepped(bus, timer)]
        for _ in range(9):  # full collections 1..9: counts after 1, 2 and 4, then the cap
            gc.collect()
            counted.append(clock.stepped(bus, timer))
    finally:
        for u in undo:
            u()
    assert [h.full for h in bus.heaps] == [0, 1, 2, 4]
    assert all(h.objects > 1000 and h.read_s > 0 for h in bus.heaps)
    assert len(timer.paused) == 4 and all(p >= h.read_s for p, h in zip(timer.paused,
                                                                        bus.heaps))
    assert [c > 0 for c in counted] == [True, True, True, False, True] + [False] * 5
    assert sum(counted) == pytest.approx(sum(timer.paused)) == pytest.approx(
        clock.heap_read_s)


def test_the_gc_clock_counts_no_heap_in_an_ops_window_a_speed_test_or_past_its_time(
        monkeypatch):
    """A count due while --ops or the speed test runs waits for a step without them; none
    once the counts took MAX_HEAP_READ_S, nor where nobody listens."""
    from paddletune.sources.eager import gc_clock as G

    class Bus:
        heaps = []
        listened = True

        def emit(self, name, payload):
            self.heaps.append(payload)

        def listening(self, name):
            return self.listened

    bus, clock = Bus(), G.GcClock()
    assert clock.stepped(bus, may_count=False) == 0.0 and bus.heaps == []
    assert clock.stepped(bus) > 0 and len(bus.heaps) == 1  # (the count was still due)
    clock._count_heap = True
    monkeypatch.setattr(G, "MAX_HEAP_READ_S", clock.heap_read_s)
    assert clock.stepped(bus) == 0.0 and len(bus.heaps) == 1
    monkeypatch.setattr(G, "MAX_HEAP_READ_S", 10.0)
    bus.listened = False
    assert clock.stepped(bus) == 0.0 and len(bus.heaps) == 1


def test_the_gc_clock_times_the_thread_it_watches_only():
    from threading import Thread, get_ident
    from paddletune.sources.eager.gc_clock import GcClock
    clock = GcClock()
    undo = clock.install()
    try:
        clock.watching = get_ident()
        gc.collect()
        mine = clock.total_s
        other = Thread(target=gc.collect)
        other.start()
        other.join()
        assert mine > 0 and clock.total_s == mine
    finally:
        for u in undo:
            u()
    assert clock._callback not in gc.callbacks


def test_an_evaluation_in_eval_mode_with_no_grad_only_around_its_forward_is_left_out(src):
    """`model.eval()`, three batches of the validation loader (a `break`), each forward
    under no_grad, then `model.train()`: an evaluation left out of the step it fell in."""
    model, optimizer = _model()
    train_loader = torch.utils.data.DataLoader(Sleepy(8), batch_size=4)
    val_loader = torch.utils.data.DataLoader(Sleepy(40, sleep=0.005), batch_size=4)
    with src.running():
        _train(train_loader, model, optimizer)
        model.eval()
        for i, (x, _) in enumerate(val_loader):
            if i == 3:
                break
            with torch.no_grad():
                model(x)
        model.train()
        _train(train_loader, model, optimizer)
    left = [s for s in src.events["reader_state"] if s.what == "left"]
    assert [(s.loader_id, s.batches) for s in left] == [(1, 4)]
    steps = src.events["step_end"]
    assert steps[2].eval_s == pytest.approx(left[0].eval_s) and steps[2].read_s < 0.01
    assert nn.Module.train.__qualname__ == "Module.train"  # (the hooks are off again)


def test_reader_state_pops_and_pushes_per_epoch(src):
    model, optimizer = _model()
    loader = torch.utils.data.DataLoader(Sleepy(16), batch_size=4)
    with src.running():
        for _ in range(2):
            _train(loader, model, optimizer)
    assert src.states() == [("start", 1), ("end", 1), ("start", 2), ("end", 2)]
    start = src.events["reader_state"][0]
    assert start.config["num_workers"] == 0
    assert start.config["batch_size"] == 4
    assert start.config["dataset"] == "map"
    assert src.events["reader_state"][1].batches == 4
    pops, pushes = src.events["reader_pop"], src.events["reader_push"]
    assert len(pops) == 8 and len(pushes) == 8
    assert [p.index for p in pops] == [0, 1, 2, 3] * 2
    assert {p.worker for p in pushes} == {-1}
    assert all(p.shapes == ((4, 3), (4,)) for p in pushes)
    assert not any(p.speed_test for p in pops)


def test_a_batch_the_loop_makes_is_one_reader_batch_while_every_subscriber_takes_it(
        monkeypatch):
    """(The reader probe's subscription: one callable on the push, the pop and the batch;
    the other tests' subscribers take the push and the pop alone, and get them.)"""
    monkeypatch.delenv("PADDLETUNE_OVERRIDES", raising=False)
    source = TorchSource()
    source.begin()
    got = []
    for name in ("reader_push", "reader_pop", "reader_batch"):
        source.subscribe(name, got.append)
    model, optimizer = _model()
    loader = torch.utils.data.DataLoader(Sleepy(16, sleep=0.001), batch_size=4)
    with source.running():
        _train(loader, model, optimizer)
    assert [type(p).__name__ for p in got] == ["ReaderBatch"] * 4
    assert [(p.loader_id, p.pass_no, p.index, p.size, p.capacity) for p in got] == [
        (0, 1, i, 0, 0) for i in range(4)]
    for p in got:
        assert p.shapes == ((4, 3), (4,)) and p.nbytes == 4 * 3 * 4 + 4 * 8
        assert (p.worker, p.put_wait_s, p.speed_test, p.copy_s) == (-1, 0.0, False, 0.0)
        assert p.wait_s >= p.produce_s >= 0.004
    # (the loop's CPU time making a batch: measured for a random CPU_SHARE of them)
    assert all(p.cpu_s is None or p.cpu_s >= 0.0 for p in got)


class Busy(torch.utils.data.Dataset):
    """Samples that each cost `cpu_s` of the loading thread's CPU time (a spin)."""

    def __init__(self, n, cpu_s):
        self.n, self.cpu_s = n, cpu_s

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        end = time.thread_time() + self.cpu_s
        while time.thread_time() < end:
            pass
        return torch.zeros(3), i


def test_the_loops_cpu_per_batch_is_the_mean_over_the_batches_it_was_measured_on(
        monkeypatch):
    """num_workers=0: a random CPU_SHARE of the batches have their CPU time measured (a
    thread CPU clock is a system call); the reader records count those (cpu_n, per producer
    too), so the CPU per batch is theirs, not spread over every batch."""
    from paddletune.probes.base import Clock
    from paddletune.probes.reader import ReaderProbe
    from paddletune.profile.records import ReaderInterval
    monkeypatch.delenv("PADDLETUNE_OVERRIDES", raising=False)
    source = TorchSource()
    source.begin()
    sink = []
    probe = ReaderProbe(sink.append, Clock(), source=source)
    probe.start()
    model, optimizer = _model()
    loader = torch.utils.data.DataLoader(Busy(80, 0.001), batch_size=2)  # 2 ms a batch
    with source.running():
        steps = _train(loader, model, optimizer)
    probe.stop()
    assert steps == 40
    rows = [iv.workers[-1] for iv in sink if isinstance(iv, ReaderInterval) and iv.workers]
    batches, cpu_n = sum(w.batches for w in rows), sum(w.cpu_n for w in rows)
    cpu_s = sum(w.cpu_s for w in rows)
    assert batches == 40 and 1 <= cpu_n < 40  # (5 expected: the draws are seeded)
    assert 0.002 <= cpu_s / cpu_n < 0.02  # (each measured batch spun 2 ms of CPU)
    intervals = [iv for iv in sink if isinstance(iv, ReaderInterval)]
    assert sum(iv.cpu_n for iv in intervals) == cpu_n
    assert sum(iv.cpu_s for iv in intervals) == pytest.approx(cpu_s)


def test_worker_processes_report_their_batches(src):
    model, optimizer = _model()
    loader = torch.utils.data.DataLoader(Sleepy(16, sleep=0.002), batch_size=4, num_workers=2)
    with src.running():
        steps = _train(loader, model, optimizer)
    del loader
    gc.collect()
    assert steps == 4
    start = src.events["reader_state"][0]
    assert start.what == "start"
    assert start.config["num_workers"] == 2
    assert len(start.config["worker_pids"]) == 2
    assert src.states()[-1] == ("end", 1)
    pushes = src.events["reader_push"]
    assert len(pushes) == 4
    assert {p.worker for p in pushes} <= {0, 1}
    assert all(p.produce_s > 0 for p in pushes)
    assert all(p.produce_s >= 0.006 for p in pushes)  # 4 samples x 2 ms each
    assert len(src.events["reader_pop"]) == 4
    assert len(src.events["step_end"]) == 4
    # the batches' hand-over, a part of the waits: their tensors' storages rebuilt (a batch
    # that came before its turn, from the other worker, is rebuilt in an earlier pop)
    assert start.config["sharing_strategy"] == torch.multiprocessing.get_sharing_strategy()
    pops = src.events["reader_pop"]
    assert all(0 <= p.handover_s <= p.wait_s for p in pops), pops
    assert sum(p.handover_s > 0 for p in pops) >= len(pops) // 2, pops


@pytest.mark.parametrize("strategy", ["file_descriptor", "file_system"])
def test_the_sharing_strategy_override_is_kept_and_its_hand_over_timed(monkeypatch, strategy):
    """PADDLETUNE_OVERRIDES' multiprocessing.sharing_strategy: set as the job starts, kept
    against the script's own call (whose value is then what it wanted), the job's put back
    after; the hand-over is timed under either strategy."""
    import torch.multiprocessing as mp
    own = mp.get_sharing_strategy()
    other = "file_system" if strategy == "file_descriptor" else "file_descriptor"
    monkeypatch.setenv("PADDLETUNE_OVERRIDES",
                       json.dumps({"multiprocessing": {"sharing_strategy": strategy}}))
    src = Source()
    model, optimizer = _model()
    with src.running():
        mp.set_sharing_strategy(other)  # the script's own call: the override's stays
        assert mp.get_sharing_strategy() == strategy
        loader = torch.utils.data.DataLoader(Sleepy(8), batch_size=4, num_workers=1)
        assert _train(loader, model, optimizer) == 2
        del loader
    assert mp.get_sharing_strategy() == own and mp.set_sharing_strategy.__module__ == \
        "torch.multiprocessing"
    report = src.overrides()
    applied = [(a.section, a.key, a.value, a.was) for a in report["applied"]]
    was = own if own != strategy else other
    assert applied == [("multiprocessing", "sharing_strategy", strategy, was)], report
    assert src.events["reader_state"][0].config["sharing_strategy"] == strategy
    assert all(p.handover_s > 0 for p in src.events["reader_pop"])


def test_persistent_workers_start_a_second_pass(src):
    model, optimizer = _model()
    loader = torch.utils.data.DataLoader(Sleepy(8), batch_size=4, num_workers=2,
                                         persistent_workers=True)
    with src.running():
        for _ in range(2):
            _train(loader, model, optimizer)
    del loader
    gc.collect()
    starts = [s for s in src.events["reader_state"] if s.what == "start"]
    assert [s.pass_no for s in starts] == [1, 2]
    assert src.states() == [("start", 1), ("end", 1), ("start", 2), ("end", 2)]
    assert starts[0].config["persistent_workers"] is True
    # (the start method the workers were started with: the job's default context's)
    assert starts[0].config["start_method"] == (  # (not fixing the default context)
        multiprocessing.get_start_method(allow_none=True)
        or multiprocessing.get_all_start_methods()[0])
    assert len(src.events["reader_pop"]) == 4
    assert len(src.events["step_end"]) == 4


@pytest.mark.parametrize("persistent", [False, True])
def test_each_pass_times_its_iter_where_the_workers_start(src, persistent):
    """ReaderState's start carries the pass's start-up: the loop's iter() (forking the
    workers, or waking persistent ones) to its first batch request, at least what the
    iter() call took here."""
    model, optimizer = _model()
    loader = torch.utils.data.DataLoader(Sleepy(8), batch_size=4, num_workers=2,
                                         persistent_workers=persistent)
    took = []
    with src.running():
        for _ in range(3):
            t0 = time.perf_counter()
            it = iter(loader)
            took.append(time.perf_counter() - t0)
            for x, _ in it:
                loss = model(x).pow(2).mean()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            del it
    del loader
    gc.collect()
    starts = [s for s in src.events["reader_state"] if s.what == "start"]
    assert len(starts) == 3
    for start, iter_s in zip(starts, took):
        assert iter_s * 0.9 <= start.startup_s < iter_s + 0.5, (start.startup_s, iter_s)
    ends = [s for s in src.events["reader_state"] if s.what == "end"]
    assert [e.eval_s for e in ends] == [None] * 3  # (steps ran in each: training passes)


def test_spawned_workers_start_in_the_first_batch_and_their_pass_start_holds_its_wait(src):
    """Workers started with spawn are new interpreters: iter() returns once they are
    launched, and the loop waits for their imports in the first next(). The pass's start is
    sent once its first batch came, with that wait (first_wait_s: seconds where a batch
    the worker had ready takes milliseconds), and names the start method; forked workers'
    do not wait so, and their start is sent at the first request, as before."""
    from multiprocessing import resource_tracker
    tracker = resource_tracker._resource_tracker
    tracking = tracker._pid is not None  # (spawn starts multiprocessing's tracker process)
    model, optimizer = _model()
    data = torch.utils.data.TensorDataset(torch.randn(16, 3), torch.arange(16))
    spawned = torch.utils.data.DataLoader(data, batch_size=4, num_workers=1,  # (a class
                                          multiprocessing_context="spawn")  # of torch's: the
    # worker imports no more than torch; one: seconds already)
    forked = torch.utils.data.DataLoader(Sleepy(8), batch_size=4, num_workers=2,
                                         multiprocessing_context="fork")
    try:
        with src.running():
            assert _train(spawned, model, optimizer) == 4
            assert _train(forked, model, optimizer) == 2
        del spawned, forked
        gc.collect()
    finally:
        if not tracking:  # (the test started it: not left running)
            tracker._stop()
    assert src.states() == [("start", 1), ("end", 1), ("start", 1), ("end", 1)]
    spawn, fork = [s for s in src.events["reader_state"] if s.what == "start"]
    assert (spawn.config["start_method"], fork.config["start_method"]) == ("spawn", "fork")
    pops = [p for p in src.events["reader_pop"] if p.loader_id == spawn.loader_id]
    assert [p.index for p in pops] == [0, 1, 2, 3]
    assert spawn.first_wait_s == pytest.approx(pops[0].wait_s)
    assert spawn.first_wait_s > 0.3 and spawn.first_wait_s > 10 * max(p.wait_s for p in
                                                                     pops[1:]), \
        (spawn.first_wait_s, [p.wait_s for p in pops])
    assert spawn.startup_s < spawn.first_wait_s  # (iter() returned long before)
    assert fork.first_wait_s is None and fork.startup_s is not None


def test_a_held_start_is_sent_before_its_pass_ends_without_a_batch():
    """The tracker: a start held for the first batch (in_first_batch) is sent with its wait
    once; a pass that ends before any batch came sends it first, without one."""
    from paddletune.sources.eager.bus import Bus
    from paddletune.sources.eager.loaders import LoaderTracker
    from paddletune.sources.eager.steps import StepTimer
    bus, sent = Bus(), []
    bus.subscribe("reader_state", sent.append)
    tracker = LoaderTracker(bus, StepTimer(bus), lambda item: None, lambda item, shape: 0)
    tracker.asked(0)
    handle = tracker.start(0, {"name": "DataLoader#0"}, 4, lambda: 0, in_first_batch=True)
    assert sent == []
    tracker.first_batch(handle, 1.5)
    tracker.first_batch(handle, 2.5)  # (sent once)
    assert [(s.what, s.first_wait_s) for s in sent] == [("start", 1.5)]
    assert sent[0].startup_s is not None
    tracker.end(handle, "end")
    empty = tracker.start(0, {}, 4, lambda: 0, in_first_batch=True)
    tracker.end(empty, "error", "ValueError: bad sample")
    assert [(s.what, s.pass_no, s.first_wait_s) for s in sent] == [
        ("start", 1, 1.5), ("end", 1, None), ("start", 2, None), ("error", 2, None)]


def test_a_step_over_several_batches_counts_their_samples(src):
    """Gradient accumulation: an optimizer step every 2 batches of 4 trains on 8 samples;
    batch_size stays the batch's (what the DataLoader and the memory see). A second
    loader read in the same step (a GAN's noise) is not counted."""
    model, optimizer = _model()
    loader = torch.utils.data.DataLoader(Sleepy(16), batch_size=4)
    noise = torch.utils.data.DataLoader(Sleepy(64), batch_size=2)
    with src.running():
        for i, ((x, _), (z, _)) in enumerate(zip(loader, noise)):
            loss = model(x).pow(2).mean() + model(z).pow(2).mean()
            loss.backward()
            if i % 2 == 1:
                optimizer.step()
                optimizer.zero_grad()
    steps = src.events["step_end"]
    assert [(s.batch_size, s.samples) for s in steps] == [(4, 8)] * 2


def test_iterable_dataset_gives_pops_and_steps(src):
    model, optimizer = _model()
    loader = torch.utils.data.DataLoader(Stream(12), batch_size=4)
    with src.running():
        assert _train(loader, model, optimizer) == 3
    assert len(src.events["reader_pop"]) == 3
    assert len(src.events["step_end"]) == 3
    assert [e.batch_size for e in src.events["step_end"]] == [4, 4, 4]
    assert src.states() == [("start", 1), ("end", 1)]
    assert src.events["reader_state"][0].config["dataset"] == "iterable"


# --- the speed test -------------------------------------------------------------------------------
def test_speed_test_replays_the_last_batch(src):
    data = Sleepy(64)
    loader = torch.utils.data.DataLoader(data, batch_size=4)
    with src.running():
        it = iter(loader)
        for _ in range(3):
            last = next(it)
        calls = data.calls
        assert calls == 12
        assert src.set_speed_test_mode(True) is False
        replayed = [next(it) for _ in range(5)]
        assert src.set_speed_test_mode(False) is True
        assert data.calls == calls  # __getitem__ not called while replaying
        assert all(batch is last for batch in replayed)
        fresh = next(it)
        assert fresh is not last and data.calls == calls + 4
        del it
    pops = src.events["reader_pop"]
    assert [p.speed_test for p in pops] == [False] * 3 + [True] * 5 + [False]


# --- errors ---------------------------------------------------------------------------------------
def test_dataset_error_propagates_and_ends_the_pass(src):
    model, optimizer = _model()
    loader = torch.utils.data.DataLoader(Sleepy(16, fail_at=9), batch_size=4)
    with src.running():
        with pytest.raises(ValueError, match="^bad sample 9$") as info:
            _train(loader, model, optimizer)
    assert type(info.value) is ValueError
    assert len(src.events["step_end"]) == 2
    end = src.events["reader_state"][-1]
    assert end.what == "error"
    assert "ValueError" in end.detail and "bad sample 9" in end.detail
    assert [s.what for s in src.events["reader_state"]] == ["start", "error"]


# --- overrides ------------------------------------------------------------------------------------
def _overridden(monkeypatch, wanted):
    monkeypatch.setenv("PADDLETUNE_OVERRIDES", json.dumps(wanted))
    return Source()


def _by_key(entries):
    return {(e.section, e.key): e for e in entries}


def test_overrides_change_num_workers_and_batch_size(monkeypatch):
    src = _overridden(monkeypatch, {"reader": {"num_workers": 1, "batch_size": 8}})
    with src.running():
        loader = torch.utils.data.DataLoader(Sleepy(32), batch_size=4, num_workers=0)
        sizes = [len(y) for _, y in loader]
        workers = loader.num_workers
        del loader
    gc.collect()
    assert workers == 1
    assert sizes == [8, 8, 8, 8]
    report = src.overrides()
    applied = _by_key(report["applied"])
    assert applied[("reader", "num_workers")].value == 1
    assert applied[("reader", "num_workers")].was == 0
    assert applied[("reader", "batch_size")].value == 8
    assert applied[("reader", "batch_size")].was == 4
    assert not report["skipped"]
    assert src.events["reader_state"][0].config["num_workers"] == 1


def test_an_override_that_takes_the_workers_away_drops_their_arguments(monkeypatch):
    """num_workers=0 over a script's workers: its persistent_workers and prefetch_factor go
    back to the defaults (PyTorch refuses them without workers), recorded as applied."""
    src = _overridden(monkeypatch, {"reader": {"num_workers": 0}})
    model, optimizer = _model()
    with src.running():
        loader = torch.utils.data.DataLoader(Sleepy(8), batch_size=4, num_workers=2,
                                             persistent_workers=True, prefetch_factor=4)
        assert _train(loader, model, optimizer) == 2
    assert (loader.num_workers, loader.persistent_workers, loader.prefetch_factor) == \
        (0, False, None)
    applied = _by_key(src.overrides()["applied"])
    assert [(k, a.value, a.was) for k, a in applied.items()] == [
        (("reader", "num_workers"), 0, 2), (("reader", "prefetch_factor"), None, 4),
        (("reader", "persistent_workers"), False, True)]


def test_override_skips_say_why(monkeypatch):
    src = _overridden(monkeypatch, {"reader": {"prefetch_factor": 4, "batch_size": 8}})
    data = Sleepy(16)
    sampler = torch.utils.data.BatchSampler(torch.utils.data.SequentialSampler(data), 4,
                                            drop_last=False)
    with src.running():
        fixed = torch.utils.data.DataLoader(data, batch_sampler=sampler)
        assert [len(y) for _, y in fixed] == [4, 4, 4, 4]
        assert fixed.prefetch_factor is None
    report = src.overrides()
    skipped = _by_key(report["skipped"])
    assert skipped[("reader", "prefetch_factor")].code == "no-workers"
    assert skipped[("reader", "batch_size")].code == "fixed-batch"
    assert not report["applied"]


def test_override_of_the_scripts_own_value_is_same_value(monkeypatch):
    src = _overridden(monkeypatch, {"reader": {"batch_size": 4}})
    with src.running():
        loader = torch.utils.data.DataLoader(Sleepy(8), batch_size=4)
        assert [len(y) for _, y in loader] == [4, 4]
    report = src.overrides()
    assert _by_key(report["skipped"])[("reader", "batch_size")].code == "same-value"
    assert not report["applied"]


@pytest.mark.parametrize("wanted, key", [
    ({"reader": {"bogus_key": 1}}, "bogus_key"),
    ({"reader": {"num_workers": "2"}}, "num_workers"),
    ({"reader": {"pin_memory": 1}}, "pin_memory"),
    ({"threads": {"intra_op": 0}}, "intra_op"),
])
def test_bad_overrides_raise_naming_the_key(monkeypatch, wanted, key):
    monkeypatch.setenv("PADDLETUNE_OVERRIDES", json.dumps(wanted))
    source = TorchSource()
    with pytest.raises(OverrideError, match=key):
        source.begin()


def test_thread_override_holds_against_the_script(monkeypatch):
    before = torch.get_num_threads()
    wanted = 1 if before != 1 else 2
    src = _overridden(monkeypatch, {"threads": {"intra_op": wanted}})
    original_set = torch.set_num_threads
    try:
        with src.running():
            assert torch.get_num_threads() == wanted
            torch.set_num_threads(before)  # the script's own call
            assert torch.get_num_threads() == wanted
        assert torch.get_num_threads() == before
        assert torch.set_num_threads is original_set
        applied = _by_key(src.overrides()["applied"])
        assert applied[("threads", "intra_op")].value == wanted
        assert applied[("threads", "intra_op")].was == before
    finally:
        torch.set_num_threads(before)


def test_the_speed_test_sets_the_threads_past_an_override(monkeypatch):
    """set_math_threads (the speed test's one-thread window) is not the script's call the
    override keeps its count against: it takes effect and changes nothing in the report."""
    before = torch.get_num_threads()
    src = _overridden(monkeypatch, {"threads": {"intra_op": 2}})
    try:
        with src.running():
            assert src.set_math_threads(1) == 2 and torch.get_num_threads() == 1
            assert src.set_math_threads(2) == 1 and torch.get_num_threads() == 2
        applied = _by_key(src.overrides()["applied"])
        if before != 2:
            assert applied[("threads", "intra_op")].was == before
        else:
            assert ("threads", "intra_op") not in applied
    finally:
        torch.set_num_threads(before)


# --- --check-nan ----------------------------------------------------------------------------------
class MakesNaN(nn.Module):
    def forward(self, x):
        return x * float("nan")


def test_check_nan_names_the_module(src):
    model = nn.Sequential(nn.Linear(3, 3), MakesNaN())
    with src.running(check_nan=True):
        with pytest.raises(hooks.NanInfError, match="MakesNaN"):
            model(torch.ones(2, 3))
    events = src.events["nan_inf"]
    assert len(events) == 1
    assert events[0]["op_type"] == "MakesNaN"
    assert events[0]["n_nan"] == 6


class LogsThenLinear(nn.Module):
    """A forward that takes a log inline (no module of its own) before its Linear."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(3, 2)

    def forward(self, x):
        return self.linear(torch.log(x))


def test_check_nan_says_where_the_modules_nan_came_from(src):
    """The first module whose output is not finite may only pass NaN on: its input held
    them already (an inline torch.log of a negative), or its weights (a diverged update).
    The event and the error say which (found_in); the module's own NaN has neither."""
    model = LogsThenLinear()
    with src.running(check_nan=True):
        with pytest.raises(hooks.NanInfError, match="its input held them already"):
            model(-torch.ones(2, 3))
    assert [e["found_in"] for e in src.events["nan_inf"]] == ["inputs"]
    diverged = nn.Linear(3, 2)
    with torch.no_grad():
        diverged.weight[0, 0] = float("inf")
    with src.running(check_nan=True):
        with pytest.raises(hooks.NanInfError, match="its parameters hold them"):
            diverged(torch.ones(2, 3))
    with src.running(check_nan=True):
        with pytest.raises(hooks.NanInfError):
            nn.Sequential(nn.Linear(3, 3), MakesNaN())(torch.ones(2, 3))
    assert [e["found_in"] for e in src.events["nan_inf"]] == ["inputs", "parameters", None]


def test_check_nan_continue_counts_every_bad_output(src):
    model = nn.Sequential(nn.Linear(3, 3), MakesNaN())
    with src.running(check_nan=True, nan_continue=True):
        for _ in range(3):
            out = model(torch.ones(2, 3))
    assert torch.isnan(out).all()
    assert len(src.events["nan_inf"]) == 3
    assert all(e["op_type"] == "MakesNaN" for e in src.events["nan_inf"])


def test_no_nan_check_without_the_option(src):
    model = nn.Sequential(nn.Linear(3, 3), MakesNaN())
    with src.running():
        model(torch.ones(2, 3))
    assert src.events["nan_inf"] == []


# --- removal --------------------------------------------------------------------------------------
def test_hooks_are_removed_after_the_block(monkeypatch):
    patched = [(dl._BaseDataLoaderIter, "__init__"), (dl._BaseDataLoaderIter, "_reset"),
               (dl._BaseDataLoaderIter, "__next__"),
               (dl._MultiProcessingDataLoaderIter, "__init__"),
               (dl._MultiProcessingDataLoaderIter, "_process_data"),
               (fetchers._MapDatasetFetcher, "fetch"),
               (fetchers._IterableDatasetFetcher, "fetch"), (dl.DataLoader, "__init__")]
    originals = {(cls, name): cls.__dict__[name] for cls, name in patched}
    set_threads = torch.set_num_threads
    src = _overridden(monkeypatch, {"reader": {"num_workers": 0}})
    model, optimizer = _model()
    with src.running(check_nan=True):
        assert dl._BaseDataLoaderIter.__dict__["__next__"] is not \
            originals[(dl._BaseDataLoaderIter, "__next__")]
        assert dl.DataLoader.__dict__["__init__"] is not originals[(dl.DataLoader, "__init__")]
        _train(torch.utils.data.DataLoader(Sleepy(8), batch_size=4), model, optimizer)
        for cls in (fetchers._MapDatasetFetcher, fetchers._IterableDatasetFetcher):
            # (timed only in the workers a multi-process iterator forks: not the loop's own)
            assert cls.__dict__["fetch"] is originals[(cls, "fetch")]
    for (cls, name), original in originals.items():
        assert cls.__dict__[name] is original, f"{cls.__name__}.{name} still patched"
    assert torch.set_num_threads is set_threads
    steps = len(src.events["step_end"])
    assert steps == 2
    _train(torch.utils.data.DataLoader(Sleepy(8), batch_size=4), model, optimizer)
    nn.Sequential(nn.Linear(3, 3), MakesNaN())(torch.ones(1, 3))  # no check any more
    assert len(src.events["step_end"]) == steps
    assert src.events["nan_inf"] == []
    assert len(src.events["reader_pop"]) == 2


def test_abandoned_iterator_lets_its_workers_exit(src):
    me = psutil.Process()
    before = {p.pid for p in me.children(recursive=True)}
    model, optimizer = _model()
    loader = torch.utils.data.DataLoader(Sleepy(64, sleep=0.001), batch_size=4, num_workers=2)
    with src.running():
        it = iter(loader)
        for _ in range(2):
            x, _ = next(it)
            loss = model(x).sum()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        workers = {w.pid for w in it._workers}
        assert len(workers) == 2
        del it
        gc.collect()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            alive = [p for p in me.children(recursive=True)
                     if p.pid not in before and p.pid in workers and _running(p)]
            if not alive:
                break
            time.sleep(0.05)
        assert not alive, f"workers still running after the iterator was dropped: {alive}"


def _running(p):
    try:
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


# --- TorchCode ------------------------------------------------------------------------------------
def test_loader_line_compiles_and_names_num_workers():
    code = TorchCode()
    line = code.loader(LoaderConfig(name="DataLoader#0", num_workers=0, batch_size=32),
                       num_workers=3)
    compile(line, "x", "exec")
    assert "torch.utils.data.DataLoader(" in line
    assert "num_workers=3" in line and "batch_size=32" in line
    assert "persistent_workers=True" in line
    none = code.loader(LoaderConfig(num_workers=2, batch_size=None), num_workers=0,
                       prefetch_factor=4, capacity=16)
    compile(none, "x", "exec")
    assert "prefetch_factor" not in none and "capacity" not in none


def pad_batch(samples):  # (a collate function of the script's own)
    return torch.stack([x for x, _ in samples]), torch.tensor([y for _, y in samples])


def test_a_loaders_other_arguments_are_recorded_and_kept_in_the_code(src):
    """The script's shuffle, collate_fn, sampler and worker_init_fn (LoaderConfig.args):
    the advice's DataLoader line keeps those it can write and names the rest above it, so
    the line runs where the script's did (its collate_fn kept)."""
    weights = torch.ones(16)
    loaders = {
        "shuffled": torch.utils.data.DataLoader(Sleepy(16), batch_size=4, shuffle=True,
                                                collate_fn=pad_batch, drop_last=True),
        "sampled": torch.utils.data.DataLoader(
            Sleepy(16), batch_size=4, collate_fn=lambda b: pad_batch(b),
            sampler=torch.utils.data.WeightedRandomSampler(weights, 16)),
        "batched": torch.utils.data.DataLoader(
            Sleepy(16), batch_sampler=torch.utils.data.BatchSampler(range(16), 4, False)),
        "plain": torch.utils.data.DataLoader(Sleepy(16), batch_size=4),
        # a seeded shuffle and a timeout (helper-39's s10: a call without its generator
        # changed the shuffle's order)
        "seeded": torch.utils.data.DataLoader(Sleepy(16), batch_size=4, shuffle=True,
                                              generator=torch.Generator().manual_seed(0),
                                              num_workers=1, timeout=60),
    }
    with src.running():
        for loader in loaders.values():
            next(iter(loader))
    args = [s.config["args"] for s in src.events["reader_state"] if s.what == "start"]
    assert args == [["shuffle=True", "collate_fn=pad_batch"], ["sampler", "collate_fn"],
                    ["batch_sampler"], [], ["shuffle=True", "generator", "timeout=60"]]
    seeded = TorchCode().loader(LoaderConfig(batch_size=4, num_workers=1,
                                             args=tuple(args[4])))
    assert seeded.splitlines() == [
        "# generator: the script's own object, passed as the script passes it",
        "loader = torch.utils.data.DataLoader(dataset, batch_size=4, shuffle=True, "
        "timeout=60, generator=generator, num_workers=1, persistent_workers=True)"]
    code = TorchCode()
    shuffled = code.loader(LoaderConfig(batch_size=4, drop_last=True, args=tuple(args[0])),
                           num_workers=2)
    assert shuffled == ("loader = torch.utils.data.DataLoader(dataset, batch_size=4, "
                        "shuffle=True, collate_fn=pad_batch, drop_last=True, num_workers=2, "
                        "persistent_workers=True)")
    dataset = Sleepy(16)
    exec(shuffled, {"torch": torch, "dataset": dataset, "pad_batch": pad_batch})
    resized = code.loader(LoaderConfig(batch_size=4, args=tuple(args[0])), batch_size=8)
    assert resized == ("loader = torch.utils.data.DataLoader(dataset, batch_size=8, "
                       "shuffle=True, collate_fn=pad_batch)")
    sampled = code.loader(LoaderConfig(batch_size=4, args=tuple(args[1])), num_workers=2)
    assert sampled.splitlines() == [
        "# sampler and collate_fn: the script's own objects, passed as the script passes them",
        "loader = torch.utils.data.DataLoader(dataset, batch_size=4, sampler=sampler, "
        "collate_fn=collate_fn, num_workers=2, persistent_workers=True)"]
    compile(sampled, "x", "exec")
    # a batch_sampler of the script's (batch_size None) stays in the call: without it the
    # pasted loader would make batches of one (helper-34's s05b)
    batches = code.loader(LoaderConfig(batch_size=None, args=tuple(args[2])), num_workers=2)
    assert batches.splitlines()[0] == ("# batch_sampler: the script's own object, passed as "
                                       "the script passes it")
    scope = {"torch": torch, "dataset": dataset,
             "batch_sampler": torch.utils.data.BatchSampler(range(16), 5, drop_last=False)}
    exec(batches, scope)
    assert [len(b) for b in scope["loader"].batch_sampler] == [5, 5, 5, 1]
    # with it, a DataLoader takes no batch_size, shuffle, sampler or drop_last: a batch size
    # known, or changed (tune's), is left out of the call, the change said to the sampler
    config = LoaderConfig(batch_size=5, drop_last=True, args=tuple(args[2]) + ("shuffle=True",))
    for changes in ({"num_workers": 2}, {"batch_size": 8}):
        line = code.loader(config, **changes)
        exec(line, scope)  # (torch raised ValueError where they were written)
        assert ("batch_size=8" in line) == ("batch_size" in changes)
    assert line.splitlines()[1] == ("# batch_size=8: your batch_sampler makes the batches: "
                                    "give it 8 a batch")


def test_every_python_line_of_torch_code_compiles():
    code = TorchCode()
    config = LoaderConfig(num_workers=1, batch_size=16, prefetch_factor=2)
    texts = {
        "loader": code.loader(config, num_workers=4, prefetch_factor=4, pin_memory=True),
        "comment": code.comment("a\n\nb"),
        "constant": code.constant("LR", 0.1, "why"),
        "batch_size": code.batch_size(64, "why"),
        "set_flag": code.set_flag("FLAGS_check_nan_inf", True),
        "async_loader": code.async_loader(["x", "y"], "CUDAPlace(0)", "loss"),
        "async_loader_cpu": code.async_loader(["x"], "CPUPlace", "cost"),
        "shard_note": code.shard_note(),
        "pinned_copy": code.pinned_copy("CUDAPlace(0)"),
        "build_strategy": code.build_strategy({"fuse_all_reduce_ops": True}),
        "exec_strategy": code.exec_strategy({"num_threads": 2}),
        "layer_call": code.layer_call("dropout", p=0.1, training=True),
        "optimizer": code.optimizer("Momentum", {"lr": 0.1, "momentum": 0.9},
                                    instead_of="Adam", why="steadier"),
        "optimizer_plain": code.optimizer("Adam", {"lr": 0.001}),
        "gradient_clip": code.gradient_clip(1.0, "the loss explodes"),
        "fused": code.fused_softmax_cross_entropy("logits", "label", return_softmax=True),
        "fused_plain": code.fused_softmax_cross_entropy("logits", "label"),
        "fetch_every": code.fetch_every("loss", ["acc"], 10),
        "sample_filter": code.sample_filter(0, 1),
        "reader_filter": code.reader_filter(1),
    }
    for op in NAN_GUARDS:
        texts[f"nan_guard:{op}"] = code.nan_guard(op)
    for name, text in texts.items():
        assert text, name
        compile(text, name, "exec")
    assert code.nan_guard("no_such_op") is None
    # shell lines (the environment), not Python:
    assert code.blas_threads("OMP_NUM_THREADS", 2).startswith("export OMP_NUM_THREADS=2")
    assert code.set_flag("OMP_NUM_THREADS", 1).startswith("export OMP_NUM_THREADS=1")


# --- detection ------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, framework", [
    ("import torch\n", "torch"),
    ("from torch import nn\n", "torch"),
    ("import paddle\n", "paddle"),
    ("import paddle.fluid as fluid\n", "fluid"),
    ("import runtime\n", "fluid"),
    ("import numpy\n", "fluid"),
])
def test_detect_reads_imports(tmp_path, text, framework):
    script = tmp_path / "train.py"
    script.write_text(text)
    assert detect(str(script)) == framework


def test_detect_follows_local_modules(tmp_path):
    (tmp_path / "model_def.py").write_text("import torch\n")
    script = tmp_path / "train.py"
    script.write_text("import model_def\n")
    assert detect(str(script)) == "torch"


def test_detect_refuses_two_frameworks(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("import torch\nimport paddle\n")
    with pytest.raises(DetectError, match="--framework"):
        detect(str(script))


def test_the_memory_probe_listens_to_step_ends_only_where_cuda_figures_can_come(monkeypatch):
    """Source.may_send: without a CUDA device no memory_step comes, so the memory probe puts
    no callback on every step's end (the training thread's cost)."""
    from paddletune.probes.base import Clock
    from paddletune.probes.memory import MemoryProbe
    for cuda, listeners in ((False, 0), (True, 1)):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
        source = TorchSource()
        assert source.may_send("memory_step") is cuda and source.may_send("step_end")
        probe = MemoryProbe([].append, Clock(), source).start()
        assert (source.subscribers("step_end"), source.subscribers("memory_step")) == (
            listeners, 1)
        probe.stop()
        assert source.subscribers("step_end") == 0


TRAIN_SET = Sleepy(8)  # (a module-level dataset: the script's global)


def _make_loader(data):
    return torch.utils.data.DataLoader(data, batch_size=4)


def test_the_scripts_name_for_its_dataset_is_recorded_and_used_in_the_code(src):
    """The advice's DataLoader line passes the dataset as the script's DataLoader(...) call
    does (the sweep's `ds`, `train`: a pasted `DataLoader(dataset, ...)` raised NameError):
    a local, a module global, a dotted name, `dataset=`, the parameter of the helper that
    builds it (where the line is pasted); None for an expression (the line keeps
    `dataset`)."""
    model, optimizer = _model()
    train_ds = Sleepy(8)

    class Holder:
        train_set = Sleepy(8)
    with src.running():
        loaders = [torch.utils.data.DataLoader(train_ds, batch_size=4),
                   torch.utils.data.DataLoader(
                       TRAIN_SET,
                       batch_size=4),
                   torch.utils.data.DataLoader(Holder.train_set, batch_size=4),
                   torch.utils.data.DataLoader(batch_size=4, dataset=train_ds),
                   _make_loader(train_ds),
                   torch.utils.data.DataLoader(Sleepy(8), batch_size=4)]
        for loader in loaders:
            _train(loader, model, optimizer)
    names = [s.config.get("dataset_name") for s in src.events["reader_state"]
             if s.what == "start"]
    assert names == ["train_ds", "TRAIN_SET", "Holder.train_set", "train_ds", "data", None]
    config = LoaderConfig(batch_size=4, dataset_name=names[0])
    assert TorchCode().loader(config, num_workers=2).startswith(
        "loader = torch.utils.data.DataLoader(train_ds, batch_size=4, num_workers=2")
    assert "DataLoader(dataset, " in TorchCode().loader(LoaderConfig(batch_size=4),
                                                         num_workers=2)


def test_looking_up_the_datasets_name_keeps_no_local_alive(src):
    """The name is read from the call's source, not the frame's locals (on Python 3.11,
    reading a function frame's f_locals keeps a snapshot of every local alive until it
    returns: the reviewer's weakref to a deleted batch stayed alive)."""
    import weakref
    with src.running():
        big = torch.zeros(4)
        gone = weakref.ref(big)
        loader = torch.utils.data.DataLoader(Sleepy(8), batch_size=4)
        next(iter(loader))  # (the name looked up, and the pass begun, while `big` lives)
        del big
        assert gone() is None


class _Unhashable(torch.utils.data.DataLoader):
    def __eq__(self, other):  # (and so no __hash__)
        return self is other


def test_an_unhashable_dataloader_subclass_trains_and_is_recorded(src):
    """A DataLoader subclass defining __eq__ is unhashable: the hooks' maps keyed by the
    loader raised TypeError in the script's loop (a WeakKeyDictionary); they key by identity
    now, and forget a loader once it is gone."""
    import gc
    import weakref
    from paddletune.sources.eager.loaders import ByIdentity
    model, optimizer = _model()
    with src.running():
        loader = _Unhashable(Sleepy(8), batch_size=4)
        assert _train(loader, model, optimizer) == 2
    (start,) = [s for s in src.events["reader_state"] if s.what == "start"]
    assert start.config["batch_size"] == 4
    names = ByIdentity()
    names[loader] = "loader"
    assert names.get(loader) == "loader" and names.get(object()) is None
    gone = weakref.ref(loader)
    del loader
    gc.collect()
    assert gone() is None and names._items == {}
