"""Reader decorators with Paddle 1.x `paddle.reader` semantics.

A *reader* is a zero-argument function returning an iterable of samples; a decorator takes
readers and returns a new reader. Differences from Paddle 1.x, all deliberate:

* `buffered` and `xmap_readers` never hang and never leak threads: an exception raised by the
  source reader (or by the mapper) is re-raised in the consumer with its original traceback,
  and the background threads exit when the consumer stops iterating (a `break`, an exception,
  or the generator being closed/garbage collected; a thread inside a slow source reader exits
  once that hands over its current sample). Paddle's threads died silently on errors and left
  the consumer blocked forever.
* `compose` detects misalignment with a sentinel, so a reader that yields `None` is not taken
  for an exhausted one, and its error says which reader ended first.
* `firstn` does not read the (n+1)-th sample just to discard it.
* Argument errors (a size that is not a positive int, a reader that is not callable) raise
  ValueError/TypeError at decoration time with the offending value.
"""

import itertools
import queue
import random
import threading

__all__ = ["map_readers", "buffered", "compose", "chain", "shuffle", "ComposeNotAligned",
           "firstn", "xmap_readers", "multiprocess_reader", "cache", "batch"]

_POLL_S = 0.05  # how often a blocked worker thread checks whether the consumer has gone


class ComposeNotAligned(ValueError):
    """compose(check_alignment=True) found readers that yield different numbers of samples."""


# --- argument checks ---------------------------------------------------------------------------
def _positive_int(value, what, allow_zero=False):
    """`value` as an int, or a ValueError naming `what`. Whole floats (32.0) are accepted, as
    Paddle int()-converts them; bools, fractions and non-numbers are not."""
    kind = "a non-negative" if allow_zero else "a positive"
    if isinstance(value, bool) or not _is_whole(value) or int(value) < (0 if allow_zero else 1):
        raise ValueError(f"{what} must be {kind} integer, got {value!r}")
    return int(value)


def _is_whole(value):
    try:
        return int(value) == value
    except (TypeError, ValueError, OverflowError):
        return False


def _check_readers(readers, what):
    for i, reader in enumerate(readers):
        if not callable(reader):
            raise TypeError(f"{what}: reader #{i} must be a zero-argument function returning "
                            f"an iterable of samples, got {type(reader).__name__} (pass the "
                            f"reader itself, not reader())")


# --- simple decorators -------------------------------------------------------------------------
def map_readers(func, *readers):
    """A reader yielding func(s1, s2, ...) over the samples of `readers` side by side (it stops
    with the shortest)."""
    _check_readers(readers, "map_readers")

    def reader():
        yield from map(func, *[r() for r in readers])
    return reader


def chain(*readers):
    """A reader yielding every sample of the first reader, then of the second, and so on."""
    _check_readers(readers, "chain")

    def reader():
        for r in readers:
            yield from r()
    return reader


def firstn(reader, n):
    """A reader yielding at most the first `n` samples of `reader`."""
    _check_readers([reader], "firstn")
    n = _positive_int(n, "firstn: n", allow_zero=True)

    def first_n_reader():
        yield from itertools.islice(reader(), n)
    return first_n_reader


def cache(reader):
    """Read `reader` once, now, and return a reader replaying those samples from memory
    (as Paddle: the source is consumed when cache() is called)."""
    _check_readers([reader], "cache")
    samples = tuple(reader())

    def cached_reader():
        yield from samples
    return cached_reader


def shuffle(reader, buf_size):
    """Buffered shuffle: collect `buf_size` samples, shuffle them with the `random` module
    (so `random.seed(...)` makes it deterministic), yield them, repeat; the last partial
    buffer is shuffled too."""
    _check_readers([reader], "shuffle")
    buf_size = _positive_int(buf_size, "shuffle: buf_size")

    def shuffled_reader():
        buf = []
        for sample in reader():
            buf.append(sample)
            if len(buf) >= buf_size:
                random.shuffle(buf)
                yield from buf
                buf = []
        if buf:
            random.shuffle(buf)
            yield from buf
    return shuffled_reader


def compose(*readers, check_alignment=True):
    """A reader yielding flat tuples joining one sample of each reader: samples that are tuples
    are spliced in, others become one field. With check_alignment (the default) readers of
    different lengths raise ComposeNotAligned; without it, it stops at the shortest."""
    _check_readers(readers, "compose")

    def as_tuple(sample):
        return sample if isinstance(sample, tuple) else (sample,)

    def composed_reader():
        iterators = [r() for r in readers]
        if not check_alignment:
            for samples in zip(*iterators):
                yield sum(map(as_tuple, samples), ())
            return
        missing = object()
        for n, samples in enumerate(itertools.zip_longest(*iterators, fillvalue=missing)):
            ended = [i for i, s in enumerate(samples) if s is missing]
            if ended:
                raise ComposeNotAligned(
                    f"compose: reader(s) {ended} ended after {n} samples while the others "
                    f"have more; pass check_alignment=False to stop at the shortest reader")
            yield sum(map(as_tuple, samples), ())
    return composed_reader


def batch(reader, batch_size, drop_last=False):
    """paddle.batch: a reader yielding lists of `batch_size` samples; the last, shorter list is
    yielded too unless drop_last=True."""
    _check_readers([reader], "batch")
    batch_size = _positive_int(batch_size, "batch: batch_size")

    def batch_reader():
        group = []
        for sample in reader():
            group.append(sample)
            if len(group) == batch_size:
                yield group
                group = []
        if group and not drop_last:
            yield group
    # what it batches, for a DataLoader whose batch size PADDLETUNE_OVERRIDES changes
    # (runtime/overrides.py): it re-batches `reader` itself, with this drop_last. The
    # decorator is never overridden on its own: a batch reader may feed anything (an eval
    # loop, DataFeeder), and the override belongs to the loader it feeds, so it is applied
    # once, there.
    batch_reader._batch_of = (reader, batch_size, bool(drop_last))
    return batch_reader


def batch_info(reader):
    """(sample reader, batch_size, drop_last) when `reader` is made by `batch` itself (not
    wrapped by another decorator), else None."""
    info = getattr(reader, "_batch_of", None)
    return info if isinstance(info, tuple) and len(info) == 3 else None


# --- threaded decorators -----------------------------------------------------------------------
class _Failure:
    """An exception caught in a worker thread, carried to the consumer."""

    __slots__ = ("error",)

    def __init__(self, error):
        self.error = error


_END = object()  # a worker thread has nothing more to send


def _put(q, item, stop):
    """Put `item` on `q`, giving up when `stop` is set. True when it was put."""
    while not stop.is_set():
        try:
            q.put(item, timeout=_POLL_S)
            return True
        except queue.Full:
            pass
    return False


def _get(q, stop):
    """The next item of `q`, or _END once `stop` is set."""
    while not stop.is_set():
        try:
            return q.get(timeout=_POLL_S)
        except queue.Empty:
            pass
    return _END


def _start(target, *args):
    thread = threading.Thread(target=target, args=args, daemon=True,
                              name=f"paddle-reader-{target.__name__}")
    thread.start()
    return thread


def _stop_threads(stop, threads, cond=None):
    """Tell the worker threads to exit and wait for them (they poll `stop` every _POLL_S; a
    thread blocked inside the user's source reader exits when that returns its next sample)."""
    stop.set()
    if cond is not None:
        with cond:
            cond.notify_all()
    for thread in threads:
        thread.join()


def buffered(reader, size):
    """A reader whose samples are read ahead by a background thread into a queue of at most
    `size` samples."""
    _check_readers([reader], "buffered")
    size = _positive_int(size, "buffered: size")

    def fill(q, stop):
        try:
            for sample in reader():
                if not _put(q, sample, stop):
                    return
        except BaseException as err:  # noqa: B036  (delivered to the consumer)
            _put(q, _Failure(err), stop)
            return
        _put(q, _END, stop)

    def buffered_reader():
        q, stop = queue.Queue(maxsize=size), threading.Event()
        thread = _start(fill, q, stop)
        try:
            while True:
                item = q.get()
                if item is _END:
                    return
                if isinstance(item, _Failure):
                    raise item.error
                yield item
        finally:
            _stop_threads(stop, [thread])
    return buffered_reader


def xmap_readers(mapper, reader, process_num, buffer_size, order=False):
    """A reader yielding mapper(sample) for each sample of `reader`, computed by `process_num`
    threads, with queues of `buffer_size` samples. order=True keeps the input order."""
    _check_readers([reader], "xmap_readers")
    if not callable(mapper):
        raise TypeError(f"xmap_readers: mapper must be callable, got {type(mapper).__name__}")
    process_num = _positive_int(process_num, "xmap_readers: process_num")
    buffer_size = _positive_int(buffer_size, "xmap_readers: buffer_size")

    def xreader():
        return _XMap(mapper, reader, process_num, buffer_size, order).run()
    return xreader


class _XMap:
    """One pass of xmap_readers: a feeding thread, `process_num` mapping threads, and the
    consumer generator. In ordered mode each mapper waits for its turn before handing its
    result on, so memory stays bounded by the queues."""

    def __init__(self, mapper, reader, process_num, buffer_size, order):
        self.mapper, self.reader, self.workers, self.order = mapper, reader, process_num, order
        self.in_q = queue.Queue(maxsize=buffer_size)
        self.out_q = queue.Queue(maxsize=buffer_size)
        self.stop = threading.Event()
        self.turn = threading.Condition()
        self.next_out = 0

    def feed(self):
        count = 0
        try:
            for sample in self.reader():
                if not _put(self.in_q, (count, sample), self.stop):
                    return
                count += 1
        except BaseException as err:  # noqa: B036  (delivered after the samples before it)
            _put(self.in_q, (count, _Failure(err)), self.stop)
        for _ in range(self.workers):
            _put(self.in_q, _END, self.stop)

    def work(self):
        while True:
            item = _get(self.in_q, self.stop)
            if item is _END:
                _put(self.out_q, _END, self.stop)
                return
            index, sample = item
            result = sample  # a _Failure of the source reader is handed on in its turn
            if not isinstance(sample, _Failure):
                try:
                    result = self.mapper(sample)
                except BaseException as err:  # noqa: B036  (delivered to the consumer)
                    result = _Failure(err)
            if not self.hand_on(index, result):
                return

    def hand_on(self, index, result):
        if not self.order:
            return _put(self.out_q, result, self.stop)
        with self.turn:
            self.turn.wait_for(lambda: self.next_out == index or self.stop.is_set())
        if not _put(self.out_q, result, self.stop):
            return False
        with self.turn:
            self.next_out += 1
            self.turn.notify_all()
        return True

    def run(self):
        threads = [_start(self.feed)] + [_start(self.work) for _ in range(self.workers)]
        try:
            finished = 0
            while finished < self.workers:
                item = self.out_q.get()
                if item is _END:
                    finished += 1
                elif isinstance(item, _Failure):
                    raise item.error
                else:
                    yield item
        finally:
            _stop_threads(self.stop, threads, self.turn)


# --- processes ---------------------------------------------------------------------------------
def multiprocess_reader(readers, use_pipe=True, queue_size=1000):
    """A reader yielding the samples of every reader in `readers`, each read in its own
    (forked) process. use_pipe=True takes one sample from each process in turn (round robin,
    Paddle's pipe order: deterministic); use_pipe=False takes them as they come. `queue_size`
    bounds the samples read ahead, across all processes.

    Unlike Paddle 1.x, an exception in a reader process reaches the consumer as its own class,
    with that process's traceback (Paddle raised "multiprocess reader raises an exception"; a
    DataLoader fed by it raises the error as an EnforceNotMet too, as Paddle's does); a
    process that dies is reported with its signal; leaving the loop early stops and reaps the
    processes. Samples are pickled: they must be picklable."""
    if isinstance(readers, (list, tuple)):
        readers = list(readers)
    else:
        raise TypeError(f"multiprocess_reader: readers must be a list of readers, got "
                        f"{type(readers).__name__}")
    if not readers:
        raise ValueError("multiprocess_reader: readers is empty; give one reader per process")
    _check_readers(readers, "multiprocess_reader")
    queue_size = _positive_int(queue_size, "multiprocess_reader: queue_size")
    prefetch = max(1, queue_size // len(readers))

    def multiprocess_reader_():
        from .workers import WorkerPool  # imported late: it pulls in multiprocessing
        pool = WorkerPool([_ignoring_info(r) for r in readers], "multiprocess_reader",
                          use_shared_memory=False, prefetch=prefetch,
                          order="round_robin" if use_pipe else "arrival",
                          what="multiprocess_reader process")
        items = iter(pool)
        try:
            for item in items:
                yield item.value
        finally:
            items.close()
            pool.close()
    return multiprocess_reader_


def _ignoring_info(reader):
    return lambda info: reader()
