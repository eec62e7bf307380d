"""fluid.layers.py_reader / create_py_reader_by_data / read_file / double_buffer (Paddle 1.x's
non-iterable reader, kept for old scripts; fluid.io.DataLoader replaced it).

`py_reader(...)` returns a reader with a feed queue of `capacity` batches. Batches reach it in
one of two ways, as in Paddle:
* pushed by hand: `reader.queue.push(LoDTensorArray or list of arrays)`, `reader.queue.close()`;
* from a generator: `reader.decorate_paddle_reader(batch_reader)` (alias
  `decorate_sample_list_generator`), `decorate_sample_generator(...)` or
  `decorate_tensor_provider(...)` (alias `decorate_batch_generator`), then `reader.start()`
  runs a thread that fills the queue.
`read_file(reader)` gives the variables the batches feed. Each Executor.run pops one batch;
when the queue is closed and empty it raises fluid.core.EOFException: call `reader.reset()`
(and `start()` for the next pass).

Differences: the reader is a plain object, not a READER Variable of the program (no
create_py_reader/read ops); the batches are host arrays whichever place runs (double buffering
is accepted and has nothing to do)."""

import threading

import numpy as np

from .. import unique_name
from ..core import EOFException
from ..errors import ReaderWorkerError
from ..framework import default_main_program
from ..reader.blocking_queue import BlockingQueue, QueueClosed
from ..tensor import LoDTensor
from .io import legacy_data

__all__ = ["py_reader", "create_py_reader_by_data", "read_file", "double_buffer"]


class FeedQueue:
    """Paddle's LoDTensorBlockingQueue as the reader's `queue`: push a batch (a LoDTensorArray
    or a list of arrays, one per variable); close() ends the pass once it is drained."""

    def __init__(self, capacity):
        self._capacity = capacity
        self._queue = BlockingQueue(capacity)

    def push(self, batch):
        return bool(self._queue.push(list(batch)))

    def close(self):
        self._queue.close()

    def kill(self, error=None):
        self._queue.kill(error or EOFException("the py_reader's feed queue was killed"))

    def size(self):
        return self._queue.size()

    def capacity(self):
        return self._capacity

    def is_closed(self):
        return self._queue.is_closed()

    def _reopen(self):
        self._queue = BlockingQueue(self._capacity)

    def _pop(self):
        return self._queue.pop()[0]


class PyReader:
    """What layers.py_reader returns."""

    def __init__(self, feed_vars, capacity, name):
        self.name = name
        self._feed_vars = list(feed_vars)
        self.feed_names = [v.name for v in self._feed_vars]
        self.queue = FeedQueue(int(capacity))
        self.tensor_provider = None
        self.thread = None
        self.exited = False
        self._drop_last = True
        self._pass = object()
        default_main_program()._py_readers.append(self)

    # --- sources ---------------------------------------------------------------------------
    def decorate_tensor_provider(self, provider, places=None):
        """`provider()` yields one batch at a time: a list of arrays, one per variable."""
        self.tensor_provider = provider

    decorate_batch_generator = decorate_tensor_provider

    def decorate_paddle_reader(self, reader, places=None):
        """`reader()` yields lists of samples (paddle.batch's output), each sample a tuple
        with one field per variable."""
        from ..data_feeder import DataFeeder
        feeder = DataFeeder(feed_list=self._feed_vars, place=None)

        def provider():
            for samples in reader():
                fed = feeder.feed(samples)
                yield [fed[name] for name in self.feed_names]
        self.tensor_provider = provider

    decorate_sample_list_generator = decorate_paddle_reader

    def decorate_sample_generator(self, sample_generator, batch_size, drop_last=True,
                                  places=None):
        from ..reader.decorator import batch
        self.decorate_paddle_reader(batch(sample_generator, batch_size, drop_last), places)

    # --- pass life cycle -------------------------------------------------------------------------
    def start(self):
        if self.thread is not None:
            raise RuntimeError(f"py_reader {self.name}: a pass is already running; call "
                               f"reset() before start()")
        if self.queue.is_closed():
            self.queue._reopen()
        self._pass = object()
        if self.tensor_provider is None:
            return
        self.exited = False
        self.thread = threading.Thread(target=self._provide, args=(self.queue,), daemon=True,
                                       name=f"py_reader-{self.name}")
        self.thread.start()

    def _provide(self, queue):
        try:
            for batch in self.tensor_provider():
                if self.exited or not queue.push(batch):
                    break
            queue.close()
        except BaseException as err:  # noqa: B036  (handed to the executor's next pop)
            # Paddle reports a failed reader thread as EnforceNotMet at the next run
            failure = ReaderWorkerError(f"py_reader {self.name}: its generator raised "
                                        f"{type(err).__name__}: {err}")
            failure.__cause__ = err
            queue.kill(failure)

    def reset(self):
        self.exited = True
        self.queue.close()
        if self.thread is not None:
            self.queue._queue.close(drop=True)
            self.thread.join()
            self.thread = None
        self.queue._reopen()
        self._pass = object()

    def _executor_feed(self):
        try:
            batch = self.queue._pop()
        except QueueClosed:
            raise EOFException(f"py_reader {self.name}: the pass is over (its queue is closed "
                               f"and empty); call reader.reset() and start() for the next "
                               f"pass") from None
        if len(batch) != len(self.feed_names):
            raise ValueError(f"py_reader {self.name}: a batch has {len(batch)} arrays for "
                             f"{len(self.feed_names)} variables {self.feed_names}")
        return {name: _host(value) for name, value in zip(self.feed_names, batch)}


def _host(value):
    if isinstance(value, LoDTensor):
        return value
    return np.asarray(value)


def py_reader(capacity, shapes, dtypes, lod_levels=None, name=None, use_double_buffer=True):
    """A reader of batches for variables of these shapes (the batch dimension included, -1)
    and dtypes; read_file(reader) gives the variables."""
    if len(shapes) != len(dtypes):
        raise ValueError("py_reader: shapes and dtypes must have the same length")
    lod_levels = lod_levels or [0] * len(shapes)
    name = name or unique_name.generate("py_reader")
    feed_vars = [legacy_data(f"{name}_data_{i}", list(shape), append_batch_size=False,
                             dtype=dtype, lod_level=lod)
                 for i, (shape, dtype, lod) in enumerate(zip(shapes, dtypes, lod_levels))]
    return PyReader(feed_vars, capacity, name)


def create_py_reader_by_data(capacity, feed_list, name=None, use_double_buffer=True):
    """A py_reader that feeds the given data variables."""
    return PyReader(feed_list, capacity, name or unique_name.generate("py_reader"))


def read_file(reader):
    """The variables `reader` feeds (one, or a list of them)."""
    out = list(reader._feed_vars)
    return out[0] if len(out) == 1 else out


def double_buffer(reader, place=None, name=None):
    """Accepted for compatibility: batches are host arrays already, nothing to prefetch."""
    return reader
