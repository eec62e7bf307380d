"""Reader decorators (paddle.reader / fluid.io): Paddle 1.x semantics, argument errors, and the
threaded ones' error propagation and thread hygiene."""

import random
import threading
import time
import traceback

import pytest

import runtime as fluid
from runtime import reader as rd
from runtime.reader import ComposeNotAligned


def counting(n, log=None):
    """A reader of 0..n-1 that records every sample it hands out in `log`."""
    def reader():
        for i in range(n):
            if log is not None:
                log.append(i)
            yield i
    return reader


def endless():
    i = 0
    while True:
        yield i
        i += 1


def failing_source():
    yield 0
    yield 1
    raise KeyError("source broke")


@pytest.fixture
def no_thread_leak():
    """Fails the test if it leaves more threads running than it found."""
    baseline = threading.active_count()
    yield
    deadline = time.monotonic() + 2.0
    while threading.active_count() > baseline and time.monotonic() < deadline:
        time.sleep(0.01)
    leaked = [t.name for t in threading.enumerate()][baseline:]
    assert threading.active_count() == baseline, f"leaked threads: {leaked}"


def finishes_within(seconds, fn):
    """Run fn in a helper thread; fail (instead of hanging the suite) if it takes too long.
    Returns fn's result or re-raises its exception."""
    box = {}

    def call():
        try:
            box["value"] = fn()
        except BaseException as err:  # noqa: B036
            box["error"] = err
    helper = threading.Thread(target=call, daemon=True)
    helper.start()
    helper.join(seconds)
    assert not helper.is_alive(), f"did not finish within {seconds} s (hang)"
    if "error" in box:
        raise box["error"]
    return box.get("value")


# --- plain decorators ------------------------------------------------------------------------
def test_exported_names_and_fluid_io_reexports():
    for name in ["map_readers", "buffered", "compose", "chain", "shuffle", "ComposeNotAligned",
                 "firstn", "xmap_readers", "cache", "batch"]:
        assert getattr(fluid.io, name) is getattr(rd, name)
        assert name in rd.__all__


def test_map_readers_applies_func_side_by_side_and_stops_at_shortest():
    r = rd.map_readers(lambda a, b: a * 10 + b, counting(4), counting(3))
    assert list(r()) == [0, 11, 22]
    assert list(r()) == [0, 11, 22]  # a reader can be read again


def test_chain_concatenates_in_order():
    assert list(rd.chain(counting(2), counting(3))()) == [0, 1, 0, 1, 2]
    assert list(rd.chain()()) == []


def test_firstn_limits_and_does_not_read_past_n():
    log = []
    assert list(rd.firstn(counting(10, log), 3)()) == [0, 1, 2]
    assert log == [0, 1, 2]
    assert list(rd.firstn(counting(2), 5)()) == [0, 1]
    assert list(rd.firstn(counting(2), 0)()) == []
    assert list(rd.firstn(endless, 4)()) == [0, 1, 2, 3]


def test_cache_reads_the_source_once_and_replays_it():
    log = []
    cached = rd.cache(counting(3, log))
    assert log == [0, 1, 2]  # read at decoration time, as in Paddle
    assert list(cached()) == [0, 1, 2] and list(cached()) == [0, 1, 2]
    assert log == [0, 1, 2]


def test_shuffle_is_a_buffered_permutation_and_follows_random_seed():
    r = rd.shuffle(counting(10), 4)
    random.seed(7)
    first = list(r())
    random.seed(7)
    assert list(r()) == first
    assert sorted(first) == list(range(10))
    assert sorted(first[:4]) == [0, 1, 2, 3]  # shuffles within each buffer of 4
    assert sorted(first[4:8]) == [4, 5, 6, 7] and sorted(first[8:]) == [8, 9]
    random.seed(8)
    assert any(list(r()) != first for _ in range(5))


def test_compose_splices_tuples_and_checks_alignment():
    pairs = rd.map_readers(lambda i: (i, -i), counting(3))
    composed = rd.compose(pairs, counting(3))
    assert list(composed()) == [(0, 0, 0), (1, -1, 1), (2, -2, 2)]
    with pytest.raises(ComposeNotAligned, match=r"reader\(s\) \[1\] ended after 2 samples"):
        list(rd.compose(counting(3), counting(2))())
    assert list(rd.compose(counting(3), counting(2), check_alignment=False)()) == [(0, 0),
                                                                                   (1, 1)]
    assert issubclass(ComposeNotAligned, ValueError)


def test_compose_does_not_mistake_a_none_sample_for_the_end():
    nones = rd.map_readers(lambda i: None, counting(2))
    assert list(rd.compose(nones, counting(2))()) == [(None, 0), (None, 1)]


def test_batch_groups_samples_and_keeps_or_drops_the_tail():
    assert list(rd.batch(counting(7), 3)()) == [[0, 1, 2], [3, 4, 5], [6]]
    assert list(rd.batch(counting(7), 3, drop_last=True)()) == [[0, 1, 2], [3, 4, 5]]
    assert list(rd.batch(counting(6), 3)()) == [[0, 1, 2], [3, 4, 5]]
    assert list(rd.batch(counting(2), 4.0)()) == [[0, 1]]  # Paddle int()s whole floats


@pytest.mark.parametrize("bad", [0, -3, 2.5, "4", None, True])
def test_batch_size_must_be_a_positive_int(bad):
    with pytest.raises(ValueError, match=r"batch_size must be a positive integer, got"):
        rd.batch(counting(3), bad)


@pytest.mark.parametrize("make", [
    lambda: rd.shuffle(counting(3), 0),
    lambda: rd.buffered(counting(3), -1),
    lambda: rd.xmap_readers(abs, counting(3), 0, 4),
    lambda: rd.xmap_readers(abs, counting(3), 2, 0),
])
def test_sizes_are_checked_when_decorating(make):
    with pytest.raises(ValueError, match="must be a positive integer"):
        make()


def test_firstn_accepts_zero_but_not_negative_counts():
    with pytest.raises(ValueError, match=r"firstn: n must be a non-negative integer, got -1"):
        rd.firstn(counting(3), -1)


def test_passing_a_generator_instead_of_a_reader_says_so():
    with pytest.raises(TypeError, match=r"pass the reader itself, not reader\(\)"):
        rd.batch(counting(3)(), 2)
    with pytest.raises(TypeError, match="mapper must be callable"):
        rd.xmap_readers(None, counting(3), 2, 2)


# --- buffered --------------------------------------------------------------------------------
def test_buffered_yields_everything_in_order(no_thread_leak):
    r = rd.buffered(counting(50), 4)
    assert list(r()) == list(range(50))
    assert list(r()) == list(range(50))


def test_buffered_reads_ahead_at_most_the_queue_size(no_thread_leak):
    log = []
    it = rd.buffered(counting(100, log), 5)()
    assert next(it) == 0
    # the thread fills the queue (waited for: a loaded machine can hold it back past a fixed
    # sleep), then has 0.3 s to read further than it may
    deadline = time.monotonic() + 10.0
    while len(log) < 6 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.3)
    # queue of 5 + the sample the thread holds while the queue is full + the one consumed
    assert 6 <= len(log) <= 7
    it.close()


def test_buffered_reraises_the_source_error_with_its_traceback(no_thread_leak):
    got = []

    def consume():
        for sample in rd.buffered(failing_source, 2)():
            got.append(sample)
    with pytest.raises(KeyError, match="source broke") as err:
        finishes_within(5, consume)
    assert got == [0, 1]
    frames = [f.name for f in traceback.extract_tb(err.value.__traceback__)]
    assert "failing_source" in frames


def test_buffered_thread_exits_when_the_consumer_breaks_early(no_thread_leak):
    for sample in rd.buffered(endless, 3)():
        if sample == 10:
            break


def test_buffered_thread_exits_when_the_generator_is_closed(no_thread_leak):
    it = rd.buffered(endless, 2)()
    next(it)
    next(it)
    it.close()


def test_buffered_thread_exits_when_the_consumer_raises(no_thread_leak):
    with pytest.raises(RuntimeError, match="consumer"):
        for sample in rd.buffered(endless, 2)():
            if sample == 3:
                raise RuntimeError("consumer failed")


# --- xmap_readers ----------------------------------------------------------------------------
def jittery_square(x):
    time.sleep(random.random() * 0.003)
    return x * x


def test_xmap_unordered_maps_every_sample(no_thread_leak):
    r = rd.xmap_readers(jittery_square, counting(40), 4, 8)
    assert sorted(r()) == [i * i for i in range(40)]


def test_xmap_ordered_keeps_the_input_order(no_thread_leak):
    r = rd.xmap_readers(jittery_square, counting(40), 4, 3, order=True)
    assert list(r()) == [i * i for i in range(40)]
    assert list(r()) == [i * i for i in range(40)]


@pytest.mark.parametrize("order", [False, True])
def test_xmap_mapper_error_reaches_the_consumer_without_hanging(order, no_thread_leak):
    def mapper(x):
        if x == 5:
            raise ZeroDivisionError(f"mapper failed on {x}")
        return x

    def consume():
        return list(rd.xmap_readers(mapper, counting(30), 3, 2, order=order)())
    with pytest.raises(ZeroDivisionError, match="mapper failed on 5") as err:
        finishes_within(5, consume)
    assert "mapper" in [f.name for f in traceback.extract_tb(err.value.__traceback__)]


@pytest.mark.parametrize("order", [False, True])
def test_xmap_source_error_reaches_the_consumer(order, no_thread_leak):
    got = []

    def consume():
        for sample in rd.xmap_readers(lambda x: x, failing_source, 2, 2, order=order)():
            got.append(sample)
    with pytest.raises(KeyError, match="source broke"):
        finishes_within(5, consume)
    if order:
        assert got == [0, 1]  # the error comes after the samples read before it


@pytest.mark.parametrize("order", [False, True])
def test_xmap_threads_exit_when_the_consumer_breaks_early(order, no_thread_leak):
    for sample in rd.xmap_readers(jittery_square, endless, 4, 2, order=order)():
        if sample > 100:
            break


def test_xmap_single_worker_and_empty_source(no_thread_leak):
    assert list(rd.xmap_readers(abs, counting(0), 1, 1)()) == []
    assert list(rd.xmap_readers(abs, counting(5), 1, 1, order=True)()) == [0, 1, 2, 3, 4]


def test_decorators_compose_like_a_paddle_input_pipeline(no_thread_leak):
    random.seed(0)
    pipeline = rd.batch(rd.buffered(rd.shuffle(rd.xmap_readers(
        lambda x: (x, x % 2), counting(20), 2, 4, order=True), 8), 4), 5, drop_last=True)
    batches = list(pipeline())
    assert [len(b) for b in batches] == [5, 5, 5, 5]
    assert sorted(s for b in batches for s in b) == [(i, i % 2) for i in range(20)]
