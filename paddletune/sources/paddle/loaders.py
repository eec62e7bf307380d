"""paddle.io.DataLoader passes, as paddle 3.x runs them (paddle/io/dataloader/dataloader_iter.py):

  DataLoader.__iter__                          tags the iterator with its loader's id
  _DataLoaderIterSingleProcess.__next__        a pass's batches, read in the main process
  _DataLoaderIterMultiProcess.__next__         a pass's batches, made by worker processes
  _DataLoaderIterSingleProcess._init_thread    times the fetcher its reading thread runs
  _DataLoaderIterMultiProcess._init_workers    a shared RawArray the forked workers write
                                               their time per batch into
  dataloader_iter._worker_loop                 (the name _init_workers reads the workers'
                                               Process target from) the worker's loop
                                               (worker._worker_loop) with its queues timed

The workers' timing: before the workers fork, `_init_workers` makes a RawArray of slots (one
per batch index modulo the slots; the index, the pass, the seconds, the CPU seconds, the
worker); in the worker, the loop's index queue and result queue are wrapped so that the time
from taking a batch's indices to putting the batch is written into its slot; the main process
reads the slot of each batch as the training loop receives it (the iterator hands batches
over in index order). Workers started with a method other than fork (no slot array in the
child) just run the original loop: no worker timing then."""

import multiprocessing
import threading
import time
import weakref
from collections import deque
from typing import Callable, List, Optional

from paddle.io import BatchSampler, DataLoader
from paddle.io.dataloader import collate as collate_fns
from paddle.io.dataloader import dataloader_iter, worker

from ..eager.gc_clock import GcClock
from ..eager.loaders import LoaderTracker, error_detail, script_arg

_perf = time.perf_counter
_ident = threading.get_ident
_cpu = time.thread_time
SINGLE = dataloader_iter._DataLoaderIterSingleProcess
MULTI = dataloader_iter._DataLoaderIterMultiProcess
STATE = "_paddletune_state"  # the iterator's attribute holding its _IterState
LOADER_ID = "_paddletune_id"  # the DataLoader's attribute holding its id
SLOT = 5  # doubles per slot: index, pass, produce_s, cpu_s, worker
SOLO_MAX_S = 2.0  # timing the reading thread alone waits at most about this long

_forking = None  # (the RawArray, its slots) while _init_workers forks: what the child reads


class _IterState:
    __slots__ = ("loader_id", "timeout", "handle", "finished", "count", "generation",
                 "times", "slots", "single_times")

    def __init__(self, loader_id, timeout):
        self.loader_id, self.timeout = loader_id, timeout
        self.handle = None
        self.finished = False
        self.count = 0  # batches handed over in this pass (the next batch's index)
        self.generation = 0  # the iterator's pass (persistent workers reuse it)
        self.times = None  # the workers' RawArray
        self.slots = 0
        self.single_times = None  # the reading thread's deque of (produce_s, cpu_s)


def _state(it, loaders: LoaderTracker) -> _IterState:
    st = it.__dict__.get(STATE)
    if st is None:
        st = _IterState(loaders.new_loader_id(), None)
        it.__dict__[STATE] = st
    return st


def _ready(it):
    """How many batches wait in the iterator's queue now. It holds the iterator weakly: a
    pass the tracker still holds must not keep an abandoned iterator (its reading thread,
    its workers) alive, paddle stops them as the iterator is freed."""
    ref = weakref.ref(it)

    def ready():
        target = ref()
        queue = None if target is None else target._blocking_queue
        return int(queue.size()) if queue is not None else 0
    return ready


def config_of(it, st: _IterState) -> dict:
    """The pass's LoaderConfig fields, from the iterator (it copies the loader's settings)."""
    workers = list(getattr(it, "_workers", ()) or ())
    sampler = getattr(it, "_batch_sampler", None)
    return {
        "name": f"DataLoader#{st.loader_id}",
        "num_workers": int(it._num_workers),
        "batch_size": getattr(sampler, "batch_size", None),
        "use_shared_memory": bool(it._use_shared_memory),
        "prefetch_factor": int(it._prefetch_factor),
        "capacity": capacity_of(it),
        "use_double_buffer": bool(it._use_buffer_reader),
        "pin_memory": bool(getattr(it, "_pin_memory", False)),
        "drop_last": bool(it._drop_last),
        "timeout": st.timeout or None,
        "persistent_workers": bool(getattr(it, "_persistent_workers", False)),
        "worker_pids": [int(w.pid) for w in workers if w.pid is not None],
        "places": [place_name(p) for p in (it._places or ())],
        "iterable": True,
        "source": "sample" if getattr(sampler, "batch_size", None) else "batch",
        "producer": "workers" if workers else "thread",  # Paddle reads in a thread
        "dataset": _dataset_style(it),
        "args": _script_args(it, sampler),
    }


def _script_args(it, sampler) -> list:
    """The arguments the script gave the DataLoader beyond those the config holds
    (LoaderConfig.args): shuffle or its own batch sampler, collate_fn, worker_init_fn."""
    args = []
    if type(sampler) is BatchSampler:
        if getattr(sampler, "shuffle", False):
            args.append("shuffle=True")
    elif sampler is not None:
        args.append(script_arg("batch_sampler", sampler))
    collate = getattr(it, "_collate_fn", None)
    if collate is not None and collate not in (collate_fns.default_collate_fn,
                                               collate_fns.default_convert_fn):
        args.append(script_arg("collate_fn", collate))
    if getattr(it, "_worker_init_fn", None) is not None:
        args.append(script_arg("worker_init_fn", it._worker_init_fn))
    return args


def _dataset_style(it) -> Optional[str]:
    """map | iterable (paddle.io.IterableDataset), from the iterator's dataset kind."""
    kind = getattr(it, "_dataset_kind", None)
    if kind is None:
        return None
    return "iterable" if kind == worker._DatasetKind.ITER else "map"


def place_name(text: str) -> str:
    """paddle's device ("cpu", "gpu:0", "Place(gpu:0)") as paddletune names places."""
    text = str(text)
    if text.startswith("Place(") and text.endswith(")"):
        text = text[6:-1]
    kind, _, index = text.partition(":")
    if kind == "cpu":
        return "CPUPlace"
    if kind in ("gpu", "cuda"):
        return f"CUDAPlace({index or 0})"
    if kind == "gpu_pinned":
        return "CUDAPinnedPlace"
    return f"{kind.upper()}Place({index})" if index else text


def capacity_of(it) -> int:
    """The batches paddle keeps ahead: the blocking queue's length (single process:
    prefetch_factor x places; workers: prefetch_factor x max(workers, places))."""
    value = getattr(it, "_outstanding_capacity", None)
    if value is None:
        value = getattr(it, "_blocking_queue_capacity", 0)
    return int(value or 0)


class LoaderHooks:
    """The DataLoader patches of one running job (installed by PaddleHooks). `handed_over`
    (None: not wanted) is called as the iterator hands each batch to the loop,
    however it came (read, replayed by the speed test, held by the solo timing): the moment
    the loop got its batch (PaddleHooks marks a step's start on the GPU there)."""

    def __init__(self, loaders: LoaderTracker, patch,
                 handed_over: Optional[Callable[[], None]] = None):
        self.loaders = loaders
        self.patch = patch  # patch(owner, name, replacement)
        self.handed_over = handed_over
        self.own_s = 0.0  # __next__'s own time so far, beside paddle's (PaddleHooks.own_s)
        self.gc = GcClock()  # Python's collections inside the loop's fetches

    def install(self) -> List[Callable[[], None]]:
        """Patch the DataLoader; returns the undo of what patch() does not undo."""
        self.patch(DataLoader, "__iter__", self._iter(DataLoader.__iter__))
        self.patch(SINGLE, "__next__", self._next(SINGLE.__next__, False))
        self.patch(MULTI, "__next__", self._next(MULTI.__next__, True))
        self.patch(SINGLE, "_init_thread", self._init_thread(SINGLE._init_thread))
        self.patch(MULTI, "_init_workers", self._init_workers(MULTI._init_workers))
        self.patch(dataloader_iter, "_worker_loop", _timed_worker_loop)
        return self.gc.install()

    # --- the loader's iterators --------------------------------------------------------
    def _iter(self, original):
        loaders = self.loaders

        def __iter__(loader):
            lid = loader.__dict__.get(LOADER_ID)
            if lid is None:
                lid = loader.__dict__[LOADER_ID] = loaders.new_loader_id()
            loaders.asked(lid)  # (the pass begins: paddle starts or wakes its workers now)
            it = original(loader)
            st = it.__dict__.get(STATE)
            if st is None or st.loader_id != lid:
                st = it.__dict__[STATE] = _IterState(lid, getattr(loader, "timeout", None))
            else:  # persistent workers: the same iterator, reset for a new pass
                st.finished = False
            return it

        __iter__.__wrapped__ = original
        return __iter__

    def _init_thread(self, original):
        def _init_thread(it):
            fetcher = getattr(it, "_dataset_fetcher", None)
            if fetcher is not None and "fetch" not in fetcher.__dict__:
                times = deque(maxlen=256)
                fetch = fetcher.fetch
                ref = weakref.ref(it)  # (no cycle: paddle frees the iterator at once)

                def timed_fetch(*args, **kwargs):
                    t0, c0 = _perf(), _cpu()
                    try:
                        out = fetch(*args, **kwargs)
                    except StopIteration:
                        raise
                    except Exception as err:
                        # paddle's reading thread dies of this without closing its queue,
                        # and the training loop would wait for a batch forever: kill the
                        # queue (the loop's read then raises) and keep the cause
                        target = ref()
                        if target is not None:
                            target.__dict__[STATE + "_error"] = error_detail(err)
                            target._exit_thread_unexpectedly()
                        raise
                    times.append((t0, _perf() - t0, _cpu() - c0))
                    return out

                fetcher.fetch = timed_fetch
                it.__dict__[STATE + "_times"] = times
            return original(it)

        _init_thread.__wrapped__ = original
        return _init_thread

    def _init_workers(self, original):
        def _init_workers(it):
            global _forking
            if _start_method() != "fork":  # the child would not see the slot array
                return original(it)
            slots = 2 * capacity_of(it) + 8
            try:
                times = multiprocessing.RawArray("d", SLOT * slots)
                for s in range(slots):
                    times[SLOT * s] = -1.0
            except Exception:  # noqa: BLE001  (no shared memory: no worker timing)
                return original(it)
            _forking = (times, slots)
            try:
                return original(it)
            finally:
                _forking = None
                it.__dict__[STATE + "_workers"] = (times, slots)

        _init_workers.__wrapped__ = original
        return _init_workers

    def _next(self, original, multi: bool):
        serve = self._serve(original, multi)
        handed_over = self.handed_over
        if handed_over is None:
            return serve
        hooks = self

        def __next__(it):
            batch = serve(it)
            t_in = _perf()
            handed_over()
            hooks.own_s += _perf() - t_in
            return batch

        __next__.__wrapped__ = original
        return __next__

    def _serve(self, original, multi: bool):
        """The iterator's __next__ with the pass tracked; its own time (beside paddle's read)
        added to own_s where paddle read the batch (a replayed or held one's: the speed
        test's and the solo timing's)."""
        loaders, hooks, gc_clock = self.loaders, self, self.gc

        def __next__(it):
            t_in = _perf()
            st = it.__dict__.get(STATE)
            if st is None:
                st = _state(it, loaders)
            if st.finished:  # asked again after its StopIteration
                return original(it)
            handle = st.handle
            if handle is None or handle.ended:
                handle = st.handle = loaders.start(st.loader_id, config_of(it, st),
                                                   capacity_of(it), _ready(it))
                st.count = 0
                st.generation += 1
                if multi:
                    st.times, st.slots = it.__dict__.get(STATE + "_workers", (None, 0))
                else:
                    st.single_times = it.__dict__.get(STATE + "_times")
            if loaders.speed_test:
                batch = loaders.replay(handle)
                if batch is not None:
                    return batch
            if not multi:
                handle.thread_producer = True
                if handle.solo:
                    began = _perf()
                    loaders.take_alone(handle, lambda: self._take_alone(it, st, handle,
                                                                        original, began),
                                       SOLO_MAX_S)
            queue = it._blocking_queue
            ready = queue.size() if queue is not None else 0
            collected = gc_clock.total_s  # (the training thread's: the step hook's)
            t_request = _perf()
            try:
                if handle.held or handle.held_end is not None:
                    return loaders.serve_held(handle)
                batch = original(it)
            except StopIteration:
                st.finished, st.handle = True, None
                loaders.end(handle, "end")
                raise
            except Exception as err:
                st.handle = None
                cause = it.__dict__.get(STATE + "_error")
                loaders.end(handle, "error", error_detail(err) + (
                    f" (the dataset raised {cause})" if cause else ""))
                raise
            # (a collection the fetch set off is the step's own time, not the data's)
            gc_s = gc_clock.total_s - collected if gc_clock.watching == _ident() else 0.0
            t_got = _perf() - gc_s
            index = st.count
            st.count = index + 1
            shapes = None
            if multi:
                if st.times is not None:
                    shapes = self._worker_produced(st, handle, index, batch, ready)
            else:
                times = st.single_times
                if times:
                    _, produce_s, cpu_s = times.popleft()
                    shapes = loaders.produced(handle, -1, produce_s, cpu_s, batch, 0)
            loaders.got(handle, t_request, t_got, batch, ready, shapes)
            hooks.own_s += _perf() - t_in - (t_got - t_request) - gc_s
            return batch

        __next__.__wrapped__ = original
        return __next__

    def _take_alone(self, it, st: _IterState, handle, original, began: float) -> tuple:
        """One batch of the reading thread's timing alone (LoaderTracker.take_alone): taken
        from paddle's queue while the loop only waits; alone when its fetch began after
        `began` (the pull's start: paddle's buffered reader keeps batches beyond the queue)."""
        batch = original(it)
        st.count += 1
        times = st.single_times
        if not times:
            return batch, None, 0.0, None, False
        t0, produce_s, cpu_s = times.popleft()
        shapes = self.loaders.produced(handle, -1, produce_s, cpu_s, batch, 0)
        return batch, shapes, produce_s, cpu_s, t0 >= began

    def _worker_produced(self, st: _IterState, handle, index: int, batch, ready: int):
        """The worker's time for batch `index` from the shared slots (`ready`: the batches
        queued as the loop asked); returns what loaders.produced does."""
        times, base = st.times, SLOT * (index % st.slots)
        if times[base] != index or times[base + 1] != st.generation:
            return None  # not written (yet), or another pass's: no timing for this batch
        produce_s, cpu_s, worker = times[base + 2], times[base + 3], int(times[base + 4])
        if times[base] != index:  # overwritten while read
            return None
        return self.loaders.produced(handle, worker, produce_s, cpu_s, batch, ready)


# --- in the worker process -------------------------------------------------------------------
def _timed_worker_loop(*args, **kwargs):
    """paddle's worker loop (paddle.io.dataloader.worker._worker_loop) with its index queue
    and result queue timed; a module-level function, so a spawned worker unpickles it (and,
    seeing no slot array, runs the plain loop)."""
    shared = _forking
    if shared is None or len(args) < 10:
        return worker._worker_loop(*args, **kwargs)
    args = list(args)
    clock = _WorkerClock(shared[0], shared[1], int(args[9]))
    args[2] = _IndexQueue(args[2], clock)
    args[3] = _ResultQueue(args[3], clock)
    return worker._worker_loop(*args, **kwargs)


def _start_method() -> str:
    """The start method a new Process uses now (without fixing the default context)."""
    method = multiprocessing.get_start_method(allow_none=True)
    if method is None:
        try:
            method = multiprocessing.context._default_context._default_context._name
        except AttributeError:
            method = "unknown"
    return method


class _WorkerClock:
    __slots__ = ("times", "slots", "worker", "generation", "index", "t0", "c0")

    def __init__(self, times, slots, worker):
        self.times, self.slots, self.worker = times, slots, worker
        self.generation = 1
        self.index: Optional[int] = None
        self.t0 = self.c0 = 0.0

    def took(self, data):
        if isinstance(data, tuple) and len(data) == 2 and isinstance(data[0], int):
            self.index, self.t0, self.c0 = data[0], _perf(), _cpu()
        elif isinstance(data, dataloader_iter._ResumeIteration):
            self.generation += 1  # the next pass of persistent workers
            self.index = None

    def put(self, item):
        index = self.index
        if index is None or not (isinstance(item, tuple) and len(item) == 3
                                 and item[0] == index):
            return
        self.index = None
        times, base = self.times, SLOT * (index % self.slots)
        times[base] = -1.0
        times[base + 1] = self.generation
        times[base + 2] = _perf() - self.t0
        times[base + 3] = _cpu() - self.c0
        times[base + 4] = self.worker
        times[base] = index


class _IndexQueue:
    def __init__(self, queue, clock):
        self._queue, self._clock = queue, clock

    def get(self, *args, **kwargs):
        data = self._queue.get(*args, **kwargs)
        self._clock.took(data)
        return data

    def __getattr__(self, name):
        return getattr(self._queue, name)


class _ResultQueue:
    def __init__(self, queue, clock):
        self._queue, self._clock = queue, clock

    def put(self, item, *args, **kwargs):
        self._clock.put(item)
        return self._queue.put(item, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._queue, name)
