"""fluid.io.DataLoader.from_generator / PyReader in one process: modes, order, checks, the
queue, speed-test mode, failures and clean-up (thread mode; worker processes are covered in
test_reader_workers.py and test_reader_reliability.py)."""

import threading
import time
import warnings

import numpy as np
import pytest

import runtime as fluid
from runtime import events
from runtime.errors import FeedError
from runtime.reader.blocking_queue import BlockingQueue, QueueClosed


# --- fixtures --------------------------------------------------------------------------------------
@pytest.fixture
def prog():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [-1, 3], "float32")
        y = fluid.data("y", [-1, 1], "int64")
        total = fluid.layers.reduce_sum(x)
    return main, startup, x, y, total


def batch_gen(n, rows=2, start=0):
    def gen():
        for i in range(start, start + n):
            yield [np.full((rows, 3), i, "float32"), np.full((rows, 1), i, "int64")]
    return gen


def first_values(loader):
    return [int(np.array(d[0]["x"])[0, 0]) for d in loader()]


def producer_threads(loader=None):
    """Producer threads alive (of `loader` only, when given: a stuck generator of an earlier
    test may still hold its thread for a while)."""
    suffix = f"{loader.name}-producer" if loader is not None else "-producer"
    return [t for t in threading.enumerate() if t.name.endswith(suffix)]


def wait_until(predicate, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


def loader_for(prog, **kw):
    main, startup, x, y, _ = prog
    with fluid.program_guard(main, startup):
        return fluid.io.DataLoader.from_generator(feed_list=[x, y], **kw)


# --- the queue ---------------------------------------------------------------------------------------
class TestBlockingQueue:
    def test_fifo_size_capacity(self):
        q = BlockingQueue(3)
        assert q.push("a") == 1 and q.push("b") == 2
        assert q.size() == 2 and q.capacity() == 3
        assert q.pop() == ("a", 2)
        assert q.pop(peek=True) == ("b", 1) and q.size() == 1

    def test_close_drains_then_ends(self):
        q = BlockingQueue(2)
        q.push(1)
        q.close()
        assert q.push(2) == 0
        assert q.pop() == (1, 1)
        with pytest.raises(QueueClosed):
            q.pop()

    def test_a_pop_that_had_to_wait_reports_size_0(self):
        q = BlockingQueue(2)
        threading.Timer(0.05, q.push, args=("late",)).start()
        assert q.pop() == ("late", 0)  # the queue was empty when the consumer asked
        q.push("ready")
        assert q.pop() == ("ready", 1)

    def test_push_blocks_while_full_until_pop(self):
        q = BlockingQueue(1)
        q.push(1)
        done = []
        t = threading.Thread(target=lambda: done.append(q.push(2)))
        t.start()
        time.sleep(0.05)
        assert not done
        q.pop()
        t.join(2)
        assert done == [1]

    def test_kill_wakes_a_waiting_consumer_with_the_error(self):
        q = BlockingQueue(2)
        q.push(1)
        q.kill(ValueError("boom"))
        with pytest.raises(ValueError, match="boom"):
            q.pop()

        q2 = BlockingQueue(2)
        threading.Timer(0.05, q2.kill, args=(KeyError("k"),)).start()
        with pytest.raises(KeyError):
            q2.pop()

    def test_timeout(self):
        q = BlockingQueue(1)
        t0 = time.monotonic()
        with pytest.raises(TimeoutError):
            q.pop(timeout=0.05)
        assert time.monotonic() - t0 < 2

    @pytest.mark.parametrize("bad", [0, -1, 2.0, True, None])
    def test_capacity_must_be_positive_int(self, bad):
        with pytest.raises(ValueError, match="capacity"):
            BlockingQueue(bad)


# --- iterable mode -----------------------------------------------------------------------------------
class TestIterable:
    def test_batch_generator_order_and_feed_dicts(self, prog):
        loader = loader_for(prog, capacity=2).set_batch_generator(batch_gen(7))
        data = list(loader())
        assert len(data) == 7
        assert all(isinstance(d, list) and len(d) == 1 for d in data)
        assert sorted(data[0][0]) == ["x", "y"]
        assert isinstance(data[0][0]["x"], fluid.LoDTensor)
        assert [int(np.array(d[0]["y"])[0, 0]) for d in data] == list(range(7))

    def test_runs_with_an_executor_and_repeats_passes(self, prog):
        main, startup, *_, total = prog
        exe = fluid.Executor(fluid.CPUPlace())
        loader = loader_for(prog, capacity=4).set_batch_generator(batch_gen(5))
        for _ in range(3):
            sums = [exe.run(main, feed=d, fetch_list=[total])[0].item() for d in loader()]
            assert sums == [i * 6.0 for i in range(5)]

    def test_sample_generator_batches_and_drop_last(self, prog):
        def samples():
            for i in range(10):
                yield np.full(3, i, "float32"), np.array([i], "int64")
        loader = loader_for(prog, capacity=2).set_sample_generator(samples, batch_size=4)
        shapes = [np.array(d[0]["x"]).shape for d in loader()]
        assert shapes == [(4, 3), (4, 3)]
        loader.set_sample_generator(samples, batch_size=4, drop_last=False)
        assert [np.array(d[0]["x"]).shape[0] for d in loader()] == [4, 4, 2]

    def test_sample_list_generator_converts_like_datafeeder(self, prog):
        def lists():
            yield [([1, 2, 3], 0), ([4, 5, 6], 1)]
            yield [([7, 8, 9], 2)]
        loader = loader_for(prog, capacity=2).set_sample_list_generator(lists)
        data = list(loader())
        assert np.array(data[0][0]["x"]).dtype == np.float32
        assert np.array(data[1][0]["y"]).tolist() == [[2]]

    def test_return_list(self, prog):
        loader = loader_for(prog, capacity=2, return_list=True).set_batch_generator(batch_gen(2))
        data = list(loader())
        assert isinstance(data[0], list) and len(data[0]) == 2
        assert isinstance(data[0][0], np.ndarray)

    def test_dict_batches(self, prog):
        def gen():
            yield {"y": np.zeros((2, 1), "int64"), "x": np.ones((2, 3), "float32")}
        loader = loader_for(prog, capacity=2).set_batch_generator(gen)
        assert np.array(list(loader())[0][0]["x"]).sum() == 6

    def test_several_places_get_one_batch_each_and_drop_last(self, prog):
        places = fluid.cpu_places(2)
        loader = loader_for(prog, capacity=4).set_batch_generator(batch_gen(5), places=places)
        data = list(loader())
        assert [len(d) for d in data] == [2, 2]  # the fifth batch cannot fill both places
        assert [int(np.array(d["x"])[0, 0]) for group in data for d in group] == [0, 1, 2, 3]
        loader2 = loader_for(prog, capacity=4, drop_last=False)
        loader2.set_batch_generator(batch_gen(5), places=places)
        assert [len(d) for d in loader2()] == [2, 2, 1]

    def test_queue_size_is_observable_and_bounded(self, prog):
        loader = loader_for(prog, capacity=3).set_batch_generator(batch_gen(20))
        it = loader()
        next(it)
        assert wait_until(lambda: loader.queue.size() == 3)
        assert loader.queue.capacity() == 3
        it.close()

    def test_training_with_a_dataloader_learns(self):
        main, startup = fluid.Program(), fluid.Program()
        main.random_seed = startup.random_seed = 1
        with fluid.program_guard(main, startup):
            x = fluid.data("x", [-1, 4], "float32")
            y = fluid.data("y", [-1, 1], "float32")
            loss = fluid.layers.mean(fluid.layers.square_error_cost(fluid.layers.fc(x, 1), y))
            fluid.optimizer.SGD(0.1).minimize(loss)
            loader = fluid.io.DataLoader.from_generator(feed_list=[x, y], capacity=8)
        w = np.array([[1.0], [-2.0], [3.0], [0.5]], "float32")

        def samples():
            rng = np.random.default_rng(0)
            for _ in range(256):
                a = rng.standard_normal(4).astype("float32")
                yield a, a @ w
        loader.set_sample_generator(samples, batch_size=16)
        exe = fluid.Executor(fluid.CPUPlace())
        exe.run(startup)
        losses = [exe.run(main, feed=d, fetch_list=[loss])[0].item()
                  for _ in range(4) for d in loader()]
        assert losses[-1] < 1e-3 < losses[0]


# --- non-iterable mode -------------------------------------------------------------------------------
class TestNonIterable:
    def make(self, n=4):
        main, startup = fluid.Program(), fluid.Program()
        with fluid.program_guard(main, startup):
            x = fluid.data("x", [-1, 3], "float32")
            total = fluid.layers.reduce_sum(x)
            reader = fluid.io.PyReader(feed_list=[x], capacity=2, iterable=False)
        reader.decorate_batch_generator(
            lambda: ([np.full((1, 3), i, "float32")] for i in range(n)))
        return main, reader, total

    def run_pass(self, exe, main, reader, total):
        out = []
        reader.start()
        try:
            while True:
                out.append(exe.run(main, fetch_list=[total])[0].item())
        except fluid.core.EOFException:
            reader.reset()
        return out

    def test_start_run_eof_reset_start(self):
        main, reader, total = self.make()
        exe = fluid.Executor(fluid.CPUPlace())
        assert self.run_pass(exe, main, reader, total) == [0.0, 3.0, 6.0, 9.0]
        assert self.run_pass(exe, main, reader, total) == [0.0, 3.0, 6.0, 9.0]

    def test_the_wait_is_recorded_as_read_time(self):
        main, startup = fluid.Program(), fluid.Program()
        with fluid.program_guard(main, startup):
            x = fluid.data("x", [-1, 3], "float32")
            total = fluid.layers.reduce_sum(x)
            reader = fluid.io.DataLoader.from_generator(feed_list=[x], capacity=1,
                                                        iterable=False)

        def slow():
            for i in range(3):
                time.sleep(0.05)
                yield [np.ones((1, 3), "float32")]
        reader.set_batch_generator(slow)
        records = []
        exe = fluid.Executor(fluid.CPUPlace())
        with events.subscribe("step_end", records.append):
            self.run_pass(exe, main, reader, total)
        assert len(records) == 3
        assert all(r.read_s > 0.02 for r in records)
        assert all(r.feed_s < r.read_s for r in records)

    def test_run_before_start_says_start(self):
        main, reader, total = self.make()
        with pytest.raises(RuntimeError, match=r"start\(\)"):
            fluid.Executor(fluid.CPUPlace()).run(main, fetch_list=[total])

    def test_start_twice_says_reset(self):
        main, reader, total = self.make()
        reader.start()
        with pytest.raises(RuntimeError, match=r"reset\(\)"):
            reader.start()
        reader.reset()

    def test_explicit_feed_bypasses_the_reader(self):
        main, reader, total = self.make()
        out = fluid.Executor(fluid.CPUPlace()).run(
            main, feed={"x": np.ones((2, 3), "float32")}, fetch_list=[total])
        assert out[0].item() == 6.0

    def test_mode_misuse(self, prog):
        main, reader, total = self.make()
        with pytest.raises(RuntimeError, match="not iterable"):
            reader()
        iterable = loader_for(prog, capacity=2).set_batch_generator(batch_gen(1))
        with pytest.raises(RuntimeError, match="iterable"):
            iterable.start()

    def test_pyreader_aliases(self, prog):
        main, startup, x, y, _ = prog
        with fluid.program_guard(main, startup):
            reader = fluid.io.PyReader(feed_list=[x, y], capacity=2)
        assert reader.decorate_paddle_reader.__func__ is \
            fluid.io.PyReader.decorate_sample_list_generator
        reader.decorate_tensor_provider(batch_gen(3))
        assert len(list(reader())) == 3


# --- speed-test mode ---------------------------------------------------------------------------------
def test_speed_test_mode_rereads_the_head_batch(prog):
    loader = loader_for(prog, capacity=2).set_batch_generator(batch_gen(50))
    pops = []
    it = loader()
    with events.subscribe("reader_pop", pops.append):
        assert int(np.array(next(it)[0]["x"])[0, 0]) == 0
        fluid.set_flags({"FLAGS_reader_queue_speed_test_mode": True})
        try:
            seen = {int(np.array(next(it)[0]["x"])[0, 0]) for _ in range(20)}
        finally:
            fluid.set_flags({"FLAGS_reader_queue_speed_test_mode": False})
        assert seen == {1}  # the head, never popped
        assert int(np.array(next(it)[0]["x"])[0, 0]) == 1  # popped once the flag is off
        assert int(np.array(next(it)[0]["x"])[0, 0]) == 2
    it.close()
    assert [p.speed_test for p in pops] == [False] + [True] * 20 + [False, False]


# --- timing the producer alone (the speed test's solo phase) ------------------------------------
def busy_gen(n, busy_s):
    """Batches 0..n-1, each costing `busy_s` of the producer thread's CPU."""
    def gen():
        for i in range(n):
            t = time.perf_counter()
            while time.perf_counter() - t < busy_s:
                pass
            yield [np.full((2, 3), i, "float32"), np.full((2, 1), i, "int64")]
    return gen


def test_the_producer_timed_alone_hands_over_every_batch_in_order(prog):
    loader = loader_for(prog, capacity=3).set_batch_generator(busy_gen(30, 0.002))
    pops, solos, seen = [], [], []
    with events.subscribe("reader_pop", pops.append), \
            events.subscribe("reader_solo", solos.append):
        for i, data in enumerate(loader()):
            seen.append(int(np.array(data[0]["x"])[0, 0]))
            time.sleep(0.005)  # the queue fills while the loop "trains"
            if i == 5:
                assert loader.measure_producer_alone(4)
                assert not loader.measure_producer_alone(4)  # one at a time
            if i == 7:
                assert solos == []  # reported once the batches taken ahead are handed over
    assert seen == list(range(30))
    [solo] = solos
    assert (solo.loader_id, solo.pass_no, solo.batches) == (loader.id, 1, 4)
    assert 4 * 0.002 <= solo.produce_s < 1.0 and solo.cpu_s > 0
    # the queue (3), the batch finished beside the loop, the 4 made alone: handed over
    # without waiting, marked as the speed test's pops
    assert [p.speed_test for p in pops] == [False] * 6 + [True] * 8 + [False] * 16
    assert all(p.size > 0 and p.wait_s == 0 for p in pops if p.speed_test)


def test_a_pass_that_ends_during_the_timing_reports_what_was_made(prog):
    loader = loader_for(prog, capacity=2).set_batch_generator(busy_gen(6, 0.001))
    solos, seen = [], []
    with events.subscribe("reader_solo", solos.append):
        for i, data in enumerate(loader()):
            seen.append(int(np.array(data[0]["x"])[0, 0]))
            if i == 0:
                time.sleep(0.05)
                assert loader.measure_producer_alone(8)
    assert seen == list(range(6)) and len(solos) == 1
    assert solos[0].batches == 2  # 1 taken, 2 queued, 1 made beside the loop, 2 alone


def test_a_pass_reset_while_batches_are_held_still_reports(prog):
    loader = loader_for(prog, capacity=2).set_batch_generator(busy_gen(50, 0.001))
    solos = []
    with events.subscribe("reader_solo", solos.append):
        it = loader()
        next(it)
        assert loader.measure_producer_alone(3)
        next(it)
        it.close()  # the loop left with batches still held
    assert len(solos) == 1 and solos[0].batches == 3


def test_a_generator_failing_during_the_timing_raises_and_ends_the_pass(prog):
    def gen():
        for i in range(5):
            yield [np.full((2, 3), i, "float32"), np.full((2, 1), i, "int64")]
        raise ValueError("bad sample")
    loader = loader_for(prog, capacity=2).set_batch_generator(gen)
    states = []
    with events.subscribe("reader_state", states.append):
        it = loader()
        next(it)
        time.sleep(0.05)
        assert loader.measure_producer_alone(8)
        with pytest.raises(ValueError, match="bad sample"):
            next(it)
    assert [s.what for s in states] == ["start", "error"]
    assert not producer_threads(loader)


def test_only_a_running_thread_producer_is_timed_alone(prog):
    loader = loader_for(prog, capacity=2).set_batch_generator(batch_gen(4))
    assert not loader.measure_producer_alone(4)  # no pass
    solos = []
    with events.subscribe("reader_solo", solos.append):
        for i, _ in enumerate(loader()):
            if i == 1:
                assert loader.measure_producer_alone(0) is False
    assert solos == []


# --- checks and failures -----------------------------------------------------------------------------
class TestFailures:
    def test_generator_error_is_raised_promptly_with_its_traceback(self, prog):
        def gen():
            yield [np.zeros((1, 3), "float32"), np.zeros((1, 1), "int64")]
            raise ValueError("bad record 17")
        loader = loader_for(prog, capacity=2).set_batch_generator(gen)
        t0 = time.monotonic()
        with pytest.raises(ValueError, match="bad record 17") as info:
            list(loader())
        assert time.monotonic() - t0 < 2
        assert any(frame.name == "gen" for frame in info.traceback)
        assert "reader thread" in "".join(getattr(info.value, "__notes__", []))
        assert wait_until(lambda: not producer_threads(), 2)

    def test_stop_iteration_inside_the_generator_is_pep479(self, prog):
        def gen():
            yield [np.zeros((1, 3), "float32"), np.zeros((1, 1), "int64")]
            next(iter(()))
        loader = loader_for(prog, capacity=2).set_batch_generator(gen)
        with pytest.raises(RuntimeError, match="generator raised StopIteration"):
            list(loader())

    def test_empty_generator_warns(self, prog):
        loader = loader_for(prog, capacity=2).set_batch_generator(lambda: iter(()))
        with pytest.warns(RuntimeWarning, match="produced 0 batches"):
            assert list(loader()) == []

    def test_wrong_shape_names_the_variable_and_batch(self, prog):
        def gen():
            yield [np.zeros((2, 3), "float32"), np.zeros((2, 1), "int64")]
            yield [np.zeros((2, 4), "float32"), np.zeros((2, 1), "int64")]
        loader = loader_for(prog, capacity=2).set_batch_generator(gen)
        with pytest.raises(FeedError, match=r"batch 1.*'x'.*\[-1, 3\].*\[2, 4\]"):
            list(loader())

    def test_wrong_dtype_names_the_variable(self, prog):
        loader = loader_for(prog, capacity=2).set_batch_generator(
            lambda: iter([[np.zeros((2, 3)), np.zeros((2, 1), "int64")]]))
        with pytest.raises(FeedError, match=r"'x'.*float32.*float64"):
            list(loader())

    def test_wrong_arity_lists_the_feed(self, prog):
        loader = loader_for(prog, capacity=2).set_batch_generator(
            lambda: iter([[np.zeros((2, 3), "float32")]]))
        with pytest.raises(FeedError, match=r"1 array.*\['x', 'y'\]"):
            list(loader())

    def test_argument_errors(self, prog):
        main, startup, x, y, _ = prog
        with pytest.raises(ValueError, match="capacity is required"):
            fluid.io.DataLoader.from_generator(feed_list=[x])
        with pytest.raises(ValueError, match="feed_list"):
            fluid.io.DataLoader.from_generator(capacity=2)
        loader = loader_for(prog, capacity=2)
        with pytest.raises(TypeError, match=r"not set_batch_generator\(reader\(\)\)"):
            loader.set_batch_generator(batch_gen(1)())
        with pytest.raises(ValueError, match="batch_size"):
            loader.set_sample_generator(batch_gen(1), batch_size=0)
        with pytest.raises(RuntimeError, match="no data source"):
            list(loader_for(prog, capacity=2)())

    def test_timeout(self, prog):
        def stuck():
            time.sleep(3)
            yield [np.zeros((1, 3), "float32"), np.zeros((1, 1), "int64")]
        loader = loader_for(prog, capacity=2, timeout=0.2).set_batch_generator(stuck)
        t0 = time.monotonic()
        with pytest.raises(fluid.io.ReaderTimeout, match="timeout=0.2"):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # thread still in the generator
                list(loader())
        assert time.monotonic() - t0 < 2.9


# --- clean-up ----------------------------------------------------------------------------------------
class TestCleanup:
    def test_break_stops_the_producer(self, prog):
        loader = loader_for(prog, capacity=2).set_batch_generator(batch_gen(10_000))
        for i, _ in enumerate(loader()):
            if i == 3:
                break
        assert wait_until(lambda: not producer_threads(loader), 1.5)

    def test_reset_mid_pass(self):
        main, startup = fluid.Program(), fluid.Program()
        with fluid.program_guard(main, startup):
            x = fluid.data("x", [-1, 3], "float32")
            reader = fluid.io.DataLoader.from_generator(feed_list=[x], capacity=2,
                                                        iterable=False)
        reader.set_batch_generator(lambda: ([np.ones((1, 3), "float32")] for _ in range(10**6)))
        reader.start()
        exe = fluid.Executor(fluid.CPUPlace())
        exe.run(main)
        reader.reset()
        assert not producer_threads(reader)
        reader.start()  # a fresh pass starts from the first batch
        exe.run(main)
        reader.reset()

    def test_many_short_passes_keep_thread_count_flat(self, prog):
        loader = loader_for(prog, capacity=2).set_batch_generator(batch_gen(3))
        before = threading.active_count()
        for _ in range(200):
            for i, _ in enumerate(loader()):
                if i == 1:
                    break
        assert threading.active_count() <= before

    def test_a_new_pass_resets_an_abandoned_one(self, prog):
        loader = loader_for(prog, capacity=2).set_batch_generator(batch_gen(100))
        stale = loader()
        next(stale)
        assert first_values(loader) == list(range(100))
        assert list(stale) == []  # its pass was reset


def test_gil_switch_interval_is_lowered_only_while_a_thread_producer_runs(prog):
    import sys
    from runtime.reader.loader import GIL_SWITCH_INTERVAL_S
    before = sys.getswitchinterval()
    loader = loader_for(prog, capacity=2).set_batch_generator(batch_gen(5))
    it = loader()
    next(it)
    assert sys.getswitchinterval() == pytest.approx(min(before, GIL_SWITCH_INTERVAL_S))
    list(it)
    assert sys.getswitchinterval() == pytest.approx(before)
