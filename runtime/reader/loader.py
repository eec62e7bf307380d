"""fluid.io.DataLoader.from_generator and fluid.io.PyReader: the asynchronous reader.

A pass runs a producer (a thread, or `num_workers` worker processes) that turns the user's
generator into batches, one array per feed variable, and pushes them into a bounded
`BlockingQueue` of `capacity` batches; the consumer pops them:

* iterable mode (`iterable=True`, the default): `for data in loader(): exe.run(feed=data)`.
  `data` is a list with one `{name: LoDTensor}` dict per place (with `return_list=True`, the
  arrays as a list per place; for one place just the list). The pass resets itself at its end.
* non-iterable mode: `loader.start()`, then `exe.run(program)` pops a batch itself and raises
  `fluid.core.EOFException` when the pass is over; catch it and call `loader.reset()`.

`loader.queue.size()` shows how many batches wait at any time.

Paddle 1.x semantics kept: capacity is required and counted in batches; `drop_last` (1.8)
drops trailing batches that cannot fill every place; the order of batches is the generator's;
FLAGS_reader_queue_speed_test_mode makes the consumer read the head batch without popping it
(profiling only: the pass then never ends and trains on one batch over and over).

Differences, deliberate and documented:
* `places` may be omitted in iterable mode (Paddle required it): the batches stay host arrays
  and the executor moves them to its place.
* A failing generator (or worker) stops training at the next pop with the original exception
  and its traceback, instead of a hang or a silently shorter pass; a dead worker process is
  reported with its exit signal. `timeout=` (seconds) raises ReaderTimeout when no batch comes.
* Every batch is checked against the feed variables on the producer side, so a wrong shape or
  dtype names the variable and the batch index.
* `num_workers=N` (or `use_multiprocess=True`, one worker) prepares batches in N processes
  whose batches reach the trainer through shared memory, in the generator's order; see
  `runtime.reader.workers` for how a generator shards itself with `fluid.io.get_worker_info()`.
* An empty generator warns "the reader produced 0 batches" (it is nearly always a bug).
* On a CPU place the double buffer has nothing to do (batches already are host arrays); on a
  GPU place it copies the next batch to the device on a separate stream while a step runs.
* Starting a new pass while an old one is unfinished (e.g. its loop was left by an exception)
  resets the old one first; a non-iterable loader may be start()ed again after its pass ended
  without an explicit reset().
* PyReader's `decorate_*` names are aliases of DataLoader's `set_*` methods.
* `measure_producer_alone(n)` (profiling only): at its next batch the consumer takes what is
  queued and `n` batches more in one go, waiting while the producer thread runs with nothing
  else of the process beside it, and announces their cost on the `reader_solo` event; the
  batches taken are handed over in order at the next steps, so training sees the same data.
* While a pass runs with the thread producer, the interpreter's GIL switch interval is
  lowered to 0.5 ms (from Python's 5 ms; restored when the last such pass ends). A generator
  doing pure-Python work holds the GIL, and the training loop, waking from its step, waited up
  to 5 ms for it every step: `benchmarks/bench_reader.py` measured 90% of the bound with a
  64-batch queue at 5 ms and 99% at 0.5 ms. Worker processes do not need it.
"""

import collections
import itertools
import threading
import time
import warnings
import weakref

import numpy as np

from .. import events, memory, overrides
from ..core import EOFException
from ..errors import EnforceNotMet, add_note, reader_exit_error, reader_failure
from ..flags import FLAGS
from ..framework import Variable, default_main_program
from ..place import CPUPlace, is_gpu
from ..tensor import LoDTensor
from . import map_style
from .blocking_queue import BlockingQueue, QueueClosed
from .batches import WorkerSource, batches
from .decorator import batch_info
from .stages import GIL_SHARING, GIL_SWITCH_INTERVAL_S, Batch, DeviceStage  # noqa: F401  (re-exported)

__all__ = ["DataLoader", "PyReader", "GeneratorLoader", "ReaderTimeout", "live_loaders"]

_perf = time.perf_counter
_cpu = time.thread_time  # the producer thread's own CPU time
_loader_ids = itertools.count()
_LIVE = weakref.WeakSet()
_JOIN_S = 2.0  # how long reset() waits for a producer thread still inside the user's generator
SOLO_MAX_S = 2.0  # measure_producer_alone waits at most this long for its batches


class ReaderTimeout(EnforceNotMet, TimeoutError):
    """No batch reached the consumer within the loader's `timeout`."""


def live_loaders():
    """The DataLoaders alive now (for probes sampling queue sizes)."""
    return list(_LIVE)


class _Pass:
    """One pass over the generator: its queue, producer and counters."""

    def __init__(self, number, capacity):
        self.number = number
        self.queue = BlockingQueue(capacity)
        self.stop = threading.Event()
        self.thread = None
        self.pool = None
        self.device = None  # the GPU double-buffer stage, when there is one
        self.popped = 0
        self.over = False
        self.shares_gil = False  # this pass lowered the GIL switch interval
        self.solo = 0  # batches to time the producer alone on (measure_producer_alone)
        self.held = collections.deque()  # batches taken ahead by that measurement
        self.solo_report = None  # its ReaderSolo, sent once the held batches are handed over


_KEEP_ORDER = [True]


def keep_data_loader_order(*args):
    """Fluid 1.8's switch (`paddle.fluid.reader.keep_data_loader_order`): with no argument
    whether the loaders keep their batches in the generator's order, with a bool set it.
    This runtime's loaders always keep the order, which also meets `False` (any order)."""
    if not args:
        return _KEEP_ORDER[0]
    if len(args) != 1 or not isinstance(args[0], bool):
        raise TypeError(f"keep_data_loader_order takes one bool, got {args!r}")
    _KEEP_ORDER[0] = args[0]
    return None


class DataLoaderBase:
    """Fluid 1.8's abstract base of the DataLoaders (`paddle.fluid.reader.DataLoaderBase`)."""

    def __call__(self):
        return self

    def next(self):
        return self.__next__()

    def __iter__(self):
        raise NotImplementedError(f"{type(self).__name__} does not implement __iter__")

    def __next__(self):
        raise NotImplementedError(f"{type(self).__name__} does not implement __next__")


_RAGGED_MSG = ("DataLoader: the data holds nested lists of different lengths, which cannot "
               "become one tensor; pad them to equal length, or make a LoDTensor with "
               "fluid.create_lod_tensor")


class GeneratorLoader(DataLoaderBase):
    """What `DataLoader.from_generator(...)` returns."""

    @classmethod
    def _check_input_array(cls, item):
        """Fluid 1.8: a sample field must convert to a regular array; ragged nested lists
        (NumPy gives an object array) raise TypeError."""
        try:
            arr = np.asarray(item)
        except ValueError as exc:  # NumPy >= 1.24 refuses ragged input outright
            raise TypeError(_RAGGED_MSG) from exc
        if arr.dtype == np.object_:
            raise TypeError(_RAGGED_MSG)
        return arr

    def __init__(self, feed_list=None, capacity=None, use_double_buffer=True, iterable=True,
                 return_list=False, use_multiprocess=False, drop_last=True, num_workers=None,
                 timeout=0, use_shared_memory=True, name=None):
        if not feed_list:
            raise ValueError("DataLoader: feed_list is required: the fluid.data variables the "
                             "batches feed, e.g. feed_list=[image, label]")
        if capacity is None:
            raise ValueError("DataLoader: capacity is required: how many batches the queue "
                             "holds, e.g. capacity=64")
        self._queue_capacity = _positive_int(capacity, "capacity")
        program = default_main_program()
        self._feed_vars = [_resolve(v, program) for v in feed_list]
        self.feed_names = [v.name for v in self._feed_vars]
        if num_workers is None:
            num_workers = 1 if use_multiprocess else 0
        self._num_workers = _positive_int(num_workers, "num_workers", allow_zero=True)
        if timeout is None or isinstance(timeout, bool) or not timeout >= 0:
            raise ValueError(f"DataLoader: timeout must be a number of seconds >= 0 (0: wait "
                             f"forever), got {timeout!r}")
        self._timeout = float(timeout)
        self._use_double_buffer = bool(use_double_buffer)
        self._iterable = bool(iterable)
        self._return_list = bool(return_list)
        self._drop_last = bool(drop_last)
        self._use_shared_memory = bool(use_shared_memory)
        self.id = next(_loader_ids)
        self.name = name or f"DataLoader#{self.id}"
        self._source = None  # (kind, reader, batch_size, drop_last)
        self._places = [CPUPlace()]
        self._pass = None
        self._passes = 0
        self._lock = threading.Lock()
        if not self._iterable:
            program._py_readers.append(self)
        _LIVE.add(self)
        overrides.apply_reader(self)  # PADDLETUNE_OVERRIDES: capacity, workers, double buffer

    # --- configuration ---------------------------------------------------------------------------
    def set_sample_generator(self, reader, batch_size, drop_last=True, places=None):
        """`reader()` yields one sample at a time (a tuple with one field per feed variable);
        the loader groups `batch_size` of them into a batch (the last, shorter one is dropped
        unless drop_last=False)."""
        _check_reader(reader, "set_sample_generator")
        batch_size = _positive_int(batch_size, "batch_size")
        return self._set(("sample", reader, batch_size, bool(drop_last)), places)

    def set_sample_list_generator(self, reader, places=None):
        """`reader()` yields lists of samples (as `paddle.batch` makes them). config()'s
        batch_size is paddle.batch's when the reader is its own, else None (or, regrouping
        them, PADDLETUNE_OVERRIDES' reader.batch_size: runtime/overrides.py)."""
        _check_reader(reader, "set_sample_list_generator")
        return self._set(("sample_list", reader, None, False), places)

    def set_batch_generator(self, reader, places=None):
        """`reader()` yields whole batches: a list/tuple with one array per feed variable (or
        a dict keyed by variable name). config()'s batch_size is None (or, regrouping them,
        PADDLETUNE_OVERRIDES' reader.batch_size: runtime/overrides.py)."""
        _check_reader(reader, "set_batch_generator")
        return self._set(("batch", reader, None, False), places)

    def _set(self, source, places):
        self._source = source
        if places is not None:
            self._places = _as_places(places)
        overrides.apply_reader(self)  # PADDLETUNE_OVERRIDES: the batch size
        return self

    # --- the queue ---------------------------------------------------------------------------------
    @property
    def queue(self):
        """The current pass's BlockingQueue (size(), capacity()); an empty closed one when no
        pass has started."""
        p = self._pass
        if p is None:
            q = BlockingQueue(self._queue_capacity)
            q.close()
            return q
        return p.queue

    @property
    def capacity(self):
        return self._queue_capacity

    @property
    def iterable(self):
        return self._iterable

    def config(self):
        kind, reader, batch_size, _ = self._source or (None, None, None, None)
        if kind == "sample_list" and batch_size is None:
            known = batch_info(reader)  # paddle.batch(reader, batch_size) tells its size
            batch_size = known[1] if known else None
        return {"name": self.name, "capacity": self._queue_capacity,
                "iterable": self._iterable, "use_double_buffer": self._use_double_buffer,
                "num_workers": self._num_workers, "use_shared_memory": self._use_shared_memory,
                "source": kind, "batch_size": batch_size, "feed": list(self.feed_names),
                "places": [repr(p) for p in self._places], "drop_last": self._drop_last,
                "timeout": self._timeout}

    # --- iterable mode ---------------------------------------------------------------------------
    def __call__(self):
        if not self._iterable:
            raise RuntimeError(f"{self.name} is not iterable (iterable=False): call "
                               f"loader.start(), run exe.run(program) until it raises "
                               f"fluid.core.EOFException, then loader.reset()")
        return self._iterate()

    def __iter__(self):
        return self.__call__()

    def _iterate(self):
        p = self._begin()
        places = len(self._places)
        try:
            while True:
                group = []
                for _ in range(places):
                    batch = self._take(p)
                    if batch is None:
                        break
                    group.append(batch)
                if not group or (len(group) < places and self._drop_last):
                    return
                yield self._present(group)
        finally:
            self._end(p, "end" if p.over else "reset")

    def _present(self, group):
        if self._return_list:
            lists = [list(b.arrays) for b in group]
            return lists[0] if len(self._places) == 1 else lists
        return [{name: _tensor(a) for name, a in zip(self.feed_names, b.arrays)}
                for b in group]

    # --- non-iterable mode -------------------------------------------------------------------------
    def start(self):
        if self._iterable:
            raise RuntimeError(f"{self.name} is iterable: loop over it (`for data in "
                               f"loader():`) instead of calling start()")
        p = self._pass
        if p is not None and not p.over:
            raise RuntimeError(f"{self.name}: a pass is already running; call reset() before "
                               f"start()")
        self._begin()

    def reset(self):
        """Stop the current pass: the producer thread and worker processes exit, the queue
        is emptied. Safe to call at any time, also mid-pass."""
        p = self._pass
        if p is not None:
            self._end(p, "end" if p.over else "reset")

    def _reset(self):
        """Fluid's name for ending a pass in either mode (an iterable loader's loop left
        early): the same as reset()."""
        self.reset()

    def _executor_feed(self):
        """The next batch as a feed dict, for Executor.run (non-iterable mode)."""
        p = self._pass
        if p is None or (p.over and p.thread is None):
            raise RuntimeError(f"{self.name} (non-iterable) was not started: call "
                               f"loader.start() before exe.run, and again after each "
                               f"reset()")
        batch = self._take(p)
        if batch is None:
            self._end(p, "end")
            raise EOFException(f"{self.name}: the pass is over (no more batches). Catch "
                               f"fluid.core.EOFException, call loader.reset(), then "
                               f"loader.start() for the next pass")
        return dict(zip(self.feed_names, batch.arrays))

    # --- pass life cycle ---------------------------------------------------------------------------
    def _begin(self):
        if self._source is None:
            raise RuntimeError(f"{self.name} has no data source: call set_sample_generator, "
                               f"set_sample_list_generator or set_batch_generator first")
        with self._lock:
            old = self._pass
            if old is not None:
                self._end(old, "end" if old.over else "reset")
            self._passes += 1
            p = self._pass = _Pass(self._passes, self._queue_capacity)
        if self._num_workers:
            from .workers import WorkerPool  # imported late: it pulls in multiprocessing
            source = WorkerSource(self._source, self._feed_vars)
            p.pool = WorkerPool([source] * self._num_workers, self.name,
                                use_shared_memory=self._use_shared_memory)
        if events.reader_state.subs:
            config = self.config()
            config["worker_pids"] = p.pool.pids if p.pool is not None else []
            events.reader_state.emit(events.ReaderState(self.id, p.number, _perf(), "start",
                                                        config))
        p.thread = threading.Thread(target=self._produce, args=(p,), daemon=True,
                                    name=f"{self.name}-producer")
        if p.pool is None:
            p.shares_gil = GIL_SHARING.begin()
        p.thread.start()
        if self._use_double_buffer and any(is_gpu(pl) for pl in self._places):
            p.device = DeviceStage(p.queue, self._places[0])
        return p

    def _end(self, p, how, detail="", join_s=_JOIN_S):
        """Finish pass `p`: stop its producer and workers and record how it ended (waiting up
        to `join_s` for a producer thread still inside the generator)."""
        if p.thread is None:
            return
        p.stop.set()
        p.queue.close(drop=True)
        if p.device is not None:
            p.device.close()
        if p.pool is not None:
            p.pool.close()
        thread, p.thread = p.thread, None
        self._report_solo(p)
        if p.shares_gil:
            p.shares_gil = False
            GIL_SHARING.end()
        if thread is not threading.current_thread():
            thread.join(join_s)
            if thread.is_alive() and join_s:
                warnings.warn(f"{self.name}: the reader thread is still inside your generator "
                              f"after {_JOIN_S:.0f} s; it exits when the generator yields its "
                              f"next item", RuntimeWarning, stacklevel=3)
        p.over = True
        if events.reader_state.subs:
            events.reader_state.emit(events.ReaderState(self.id, p.number, _perf(), how,
                                                        detail=detail, batches=p.popped))

    def _produce(self, p):
        """The producer thread: batches from the generator (or the worker pool) into the
        queue, until the source ends, the pass is reset, or the source fails. The batches
        made here count as the pool's "reader" memory (batches.batches); batches from worker
        processes are in shared memory."""
        emit = events.reader_push
        index = 0
        source = None
        try:
            if p.pool is not None:
                source = iter(p.pool)
            else:
                kind, reader, batch_size, drop_last = self._source
                source = iter(batches(kind, reader, batch_size, drop_last, self._feed_vars,
                                      self.name, memory.pool_for(CPUPlace())))
            while not p.stop.is_set():
                t0, c0 = _perf(), _cpu()
                try:
                    item = next(source)
                except StopIteration:
                    break
                t1 = _perf()
                if p.pool is not None:
                    batch = Batch(item.arrays, index, item.worker, item.produce_s, item.cpu_s)
                else:
                    batch = Batch(item, index, -1, t1 - t0, _cpu() - c0)
                size = p.queue.push(batch)
                if not size:
                    return
                if emit.subs:
                    emit.emit(events.ReaderPush(
                        self.id, p.number, index, batch.worker, _perf(), batch.produce_s,
                        _perf() - t1, size, self._queue_capacity, batch.nbytes,
                        tuple(tuple(getattr(a, "shape", ())) for a in batch.arrays),
                        batch.cpu_s))
                index += 1
        except BaseException as err:  # noqa: B036  (handed to the consumer)
            if not p.stop.is_set():
                where = (f"a worker process of {self.name}" if p.pool is not None else
                         f"the generator of {self.name} (reader thread)")
                if not isinstance(err, Exception):  # sys.exit() in a generator
                    err = reader_exit_error(f"{type(err).__name__}{err.args!r}",
                                            f"the reader thread of {self.name}")
                p.queue.kill(reader_failure(add_note(
                    err, f"raised in {where} while preparing batch {index}")))
            return
        finally:
            _close_source(source)
        if index == 0 and not p.stop.is_set():
            warnings.warn(f"{self.name}: the reader produced 0 batches in pass {p.number}: "
                          f"is the generator empty (or did it return instead of yield)? ",
                          RuntimeWarning, stacklevel=1)
        p.queue.close()

    # --- timing the producer alone (profiling) ----------------------------------------------------
    def measure_producer_alone(self, batches: int) -> bool:
        """Ask the running pass to time its producer thread alone: at its next batch the
        consumer takes what is queued and `batches` more at once (waiting at most SOLO_MAX_S),
        the producer running while nothing else of the process does. The batches are handed
        over in order, their pops marked `speed_test` (taken ahead, not waited for); once the
        last is handed over, or the pass ends, the `reader_solo` event gives the cost of those
        made alone (0 batches: none was). False (nothing asked) without a running pass of a
        producer thread (worker processes and the GPU double buffer are left alone)."""
        p = self._pass
        if p is None or p.over or p.thread is None or p.pool is not None or \
                p.device is not None or batches < 1 or p.solo or p.held:
            return False
        p.solo = int(batches)
        return True

    def _take_alone(self, p):
        """measure_producer_alone's pull: into `p.held`, the queued batches, the one the
        producer may have made beside the trainer, then p.solo batches made alone."""
        wanted, p.solo = p.solo, 0
        skip = p.queue.size() + 1
        started = _perf()
        alone = []
        try:
            while len(alone) < wanted:
                left = SOLO_MAX_S - (_perf() - started)
                if left <= 0:
                    break
                batch, _ = p.queue.pop(timeout=min(left, self._timeout or left))
                p.held.append(batch)
                if len(p.held) > skip:
                    alone.append(batch)
        except (QueueClosed, TimeoutError):  # the pass ended, or the producer is slow: the
            pass  # normal pop reports either at its turn
        except BaseException as err:  # the producer failed, or Ctrl-C: as the normal pop
            self._end(p, "error", f"{type(err).__name__}: {err}")
            raise
        cpu = [b.cpu_s for b in alone]
        p.solo_report = events.ReaderSolo(self.id, p.number, _perf(), len(alone),
                                          sum(b.produce_s for b in alone),
                                          None if None in cpu else sum(cpu))

    def _take_held(self, p):
        batch = p.held.popleft()
        p.popped += 1
        if events.reader_pop.subs:
            events.reader_pop.emit(events.ReaderPop(
                self.id, p.number, batch.index, _perf(), 0.0,
                len(p.held) + 1 + p.queue.size(), self._queue_capacity, True))
        if not p.held:
            self._report_solo(p)
        return batch

    def _report_solo(self, p):
        """Announce the measurement asked of pass `p` (once; 0 batches when none was made)."""
        report, p.solo_report = p.solo_report, None
        if report is None and p.solo:
            report = events.ReaderSolo(self.id, p.number, _perf(), 0, 0.0, None)
        p.solo, p.held = 0, collections.deque()
        if report is not None and events.reader_solo.subs:
            events.reader_solo.emit(report)

    def _take(self, p):
        """The next batch of pass `p`, or None at the end of the pass; a failure of the
        producer is raised here (and ends the pass)."""
        speed_test = FLAGS.get("reader_queue_speed_test_mode")
        if p.solo and not speed_test:
            self._take_alone(p)
        if p.held:
            return self._take_held(p)
        source = p.device.queue if p.device is not None else p.queue
        t0 = _perf()
        try:
            batch, size = source.pop(peek=speed_test and p.device is None,
                                     timeout=self._timeout)
            if p.device is not None:
                size = p.queue.size()
        except QueueClosed:
            p.over = True
            return None
        except TimeoutError:
            stuck = p.pool is None and p.thread is not None  # a thread can't be stopped
            self._end(p, "error", f"timeout after {self._timeout:g} s", join_s=0)
            raise ReaderTimeout(f"{self.name}: no batch arrived within timeout="
                                f"{self._timeout:g} s ({p.popped} batches taken so far this "
                                f"pass). The generator or a worker is stuck or too slow; raise "
                                f"timeout= or make the reader faster" + (
                                    ". The reader thread stays inside your generator until "
                                    "it yields (a thread cannot be stopped from outside); "
                                    "with num_workers=1 a stuck generator's process is "
                                    "stopped at once" if stuck else "")) from None
        except BaseException as err:
            self._end(p, "error", f"{type(err).__name__}: {err}")
            raise
        t1 = _perf()
        p.popped += 1
        if events.reader_pop.subs:
            events.reader_pop.emit(events.ReaderPop(
                self.id, p.number, batch.index, t1, t1 - t0, size, self._queue_capacity,
                bool(speed_test)))
        return batch

    def __del__(self):
        p = self.__dict__.get("_pass")
        if p is not None and p.thread is not None:
            try:
                self._end(p, "reset")
            except Exception:  # interpreter shutdown: nothing more to do
                pass

    def __repr__(self):
        mode = "iterable" if self._iterable else "non-iterable"
        return f"<{type(self).__name__} {self.name!r} {mode}, {self.queue!r}>"


class DataLoader:
    """fluid.io.DataLoader: `DataLoader.from_generator(...)` builds a GeneratorLoader, and
    `DataLoader(dataset, feed_list, places, ...)` (Fluid 1.8's map-style loader: map_style.py)
    an iterable one over `dataset[i]`, batched by a BatchSampler and collate_fn; a pass is
    `for data in loader():`, `len(loader)` its batches."""

    def __new__(cls, dataset, feed_list=None, places=None, return_list=False,
                batch_sampler=None, batch_size=1, shuffle=False, drop_last=False,
                collate_fn=None, num_workers=0, use_buffer_reader=True, use_shared_memory=True,
                timeout=0, worker_init_fn=None):
        sampler = map_style.loader_args(dataset, feed_list, places, return_list, batch_sampler,
                                        batch_size, shuffle, drop_last, num_workers, timeout)
        places = _as_places(places)
        loader = MapStyleLoader(feed_list, capacity=2 * len(places),  # Paddle's queue size
                                use_double_buffer=use_buffer_reader, iterable=True,
                                return_list=return_list, drop_last=drop_last,
                                num_workers=num_workers, timeout=timeout,
                                use_shared_memory=use_shared_memory and num_workers > 0)
        loader.batch_sampler = sampler
        generator = map_style.BatchGenerator(dataset, sampler, collate_fn, worker_init_fn)
        return loader.set_batch_generator(generator, places)

    @staticmethod
    def from_generator(feed_list=None, capacity=None, use_double_buffer=True, iterable=True,
                       return_list=False, use_multiprocess=False, drop_last=True,
                       num_workers=None, timeout=0, use_shared_memory=True, name=None):
        return GeneratorLoader(feed_list, capacity, use_double_buffer, iterable, return_list,
                               use_multiprocess, drop_last, num_workers, timeout,
                               use_shared_memory, name)


class MapStyleLoader(GeneratorLoader):
    """What `DataLoader(dataset, ...)` returns: its length is the batch sampler's."""

    batch_sampler = None

    def __len__(self):
        return len(self.batch_sampler)


class PyReader(GeneratorLoader):
    """fluid.io.PyReader (Fluid 1.5): the same loader with the `decorate_*` method names."""

    def __init__(self, feed_list=None, capacity=None, use_double_buffer=True, iterable=True,
                 return_list=False):
        super().__init__(feed_list, capacity, use_double_buffer, iterable, return_list)

    def decorate_sample_generator(self, sample_generator, batch_size, drop_last=True,
                                  places=None):
        return self.set_sample_generator(sample_generator, batch_size, drop_last, places)

    def decorate_sample_list_generator(self, reader, places=None):
        return self.set_sample_list_generator(reader, places)

    def decorate_batch_generator(self, reader, places=None):
        return self.set_batch_generator(reader, places)

    decorate_paddle_reader = decorate_sample_list_generator
    decorate_tensor_provider = decorate_batch_generator

    @property
    def _loader(self):
        """Fluid 1.8's PyReader wraps a GeneratorLoader as `_loader`; here it is one."""
        return self


def _close_source(source):
    close = getattr(source, "close", None)
    if close is not None:
        try:
            close()
        except Exception:  # closing must not hide the pass's own outcome
            pass


# --- small helpers ---------------------------------------------------------------------------------
def _tensor(array):
    tensor = LoDTensor()
    tensor._holder.value = array
    return tensor


def _positive_int(value, what, allow_zero=False):
    low = 0 if allow_zero else 1
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        kind = "a non-negative" if allow_zero else "a positive"
        raise ValueError(f"DataLoader: {what} must be {kind} integer, got {value!r}")
    return value


def _check_reader(reader, method):
    if not callable(reader):
        raise TypeError(f"DataLoader.{method}: pass the generator function itself (a "
                        f"zero-argument callable returning an iterable), got "
                        f"{type(reader).__name__}; e.g. {method}(reader), not "
                        f"{method}(reader())")


def _resolve(item, program):
    if isinstance(item, Variable):
        return item
    if isinstance(item, str):
        return program.global_block().var(item)
    raise TypeError(f"DataLoader: feed_list items must be Variables or names, got {item!r}")


def _as_places(places):
    if not isinstance(places, (list, tuple)):
        places = [places]
    if not places:
        raise ValueError("DataLoader: places is empty; pass e.g. fluid.cpu_places()")
    return list(places)
