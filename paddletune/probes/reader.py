"""The reader probe: each DataLoader/PyReader queue's fill, waits, producer and consumer.

It listens to the source's reader_state / reader_push / reader_pop events (and, once a
loader has started, step_end, to pair each step with the size of the batch it consumed) and
samples the running queues' sizes (`source.queue_sizes()`) every `sample_s` on a daemon
thread started by the first pass. A job without a DataLoader costs nothing.

The training loop and the producers only queue their batch and step events (one deque
append each: profiling costs a PyTorch loop's thread a third fewer bytecodes a step than
when they were counted on the spot); the sampler thread counts them, in the order they
came, each time it wakes (`_fold`), and so does the thread that starts or ends a pass,
before it does, and `stop`. While a compute step has let go of the GIL, that counting costs
the loop nothing.

Records (paddletune/profile/records.py; `loader` the loader's id, `pass_no` its pass from 1):
ReaderStart when a pass begins (with its config), ReaderEnd when it ends, is reset or fails,
and ReaderInterval for one pass over [t0_s, t_s) (every `interval_s`, and cut at the pass's
end and wherever the speed-test mode switches, so `speed_test` marks intervals whose pops
were peeks). Counters:
  pushes, produce_s, cpu_s (sums over the batches that reported it), cpu_n, put_wait_s,
  nbytes                          the producer side
  workers {worker: [batches, produce_s, cpu_s]}   per producer (-1: the loader's thread)
  pops, peeks, empty_pops, wait_s, wait_max_s, copy_s     the consumer side
  wait_hist {bucket: pops}        bucket k holds waits in [10^(k/10), 10^((k+1)/10)) s;
                                  bucket -60 also holds every wait under 1 µs (loghist.py)
  pop_sizes {size: pops}          the queue size each pop reported
  occupancy {size: samples}       the periodic queue-size samples (time-weighted fill)
  swings                          drains: an empty pop after the queue was seen full
  shapes {feed name: {"64x100": batches}}    the pushed batches' shapes
  cost {elements: [steps, compute_s]}        each training step's compute time, keyed by
                                  the elements (sum of sizes) of the batches it popped
  steps, step_wait_s, programs    the training steps that popped batches of this pass, the
                                  waits of those pops (the consumer's wait per step), and
                                  {program id: steps}
A pop "found the queue empty" when the queue was empty as the consumer asked (the event's
size is 0: it had to wait for the producer).

overhead_s counts the counting and the queue samples (not the appends); the result's
overhead_by_thread_s splits it between the training loop ("consumer": the passes' starts and
ends, and what it counted then), the producer thread (its starts and ends) and the sampler.
"""

import math
import threading
import time
from collections import deque
from typing import Optional

from ..profile import loghist
from ..profile.records import (LoaderConfig, ReaderEnd, ReaderInterval, ReaderStart, StepCost,
                               WorkerCounts)
from ..profile.schema import SchemaError, decode
from .base import Probe

MAX_SHAPES = 256  # distinct batch shapes whose element count a pass keeps
_FLOOR_S = loghist.FLOOR_S
SAMPLE_S = 0.01  # how often the running queues' sizes are sampled
SLEEP_MAX_S = 0.05  # the sampler's longest wait that is a plain sleep (see _pause)
FOLD_MAX_S = 0.5  # the sampler's longest wait while events may queue (see _sample_wait)
_perf = time.perf_counter


class _Produced:
    """The producer side's counters since the last record (the producer thread writes them)."""

    def __init__(self):
        self.pushes = self.cpu_n = self.nbytes = 0
        self.produce_s = self.cpu_s = self.put_wait_s = 0.0
        self.workers, self.shapes = {}, {}

    def add(self, r):
        produce_s, cpu_s = r.produce_s, r.cpu_s
        self.pushes += 1
        self.produce_s += produce_s
        self.put_wait_s += r.put_wait_s
        self.nbytes += r.nbytes
        row = self.workers.get(r.worker)
        if row is None:
            row = self.workers[r.worker] = [0, 0.0, 0.0]
        row[0] += 1
        row[1] += produce_s
        if cpu_s is not None:
            self.cpu_s += cpu_s
            self.cpu_n += 1
            row[2] += cpu_s
        shapes = self.shapes
        shapes[r.shapes] = shapes.get(r.shapes, 0) + 1  # (_count, inlined)

    def fields(self, feeds) -> dict:
        return {"pushes": self.pushes, "produce_s": self.produce_s, "cpu_s": self.cpu_s,
                "cpu_n": self.cpu_n, "put_wait_s": self.put_wait_s, "nbytes": self.nbytes,
                "workers": {w: WorkerCounts(*row) for w, row in self.workers.items()},
                "shapes": _shape_names(self.shapes, feeds)}


class _Consumed:
    """The consumer side's counters since the last record (the training thread writes them)."""

    def __init__(self, speed_test=False):
        self.speed_test = speed_test
        self.pops = self.peeks = self.empty_pops = self.swings = self.steps = 0
        self.wait_s = self.wait_max_s = self.copy_s = self.step_wait_s = 0.0
        self.wait_hist, self.pop_sizes, self.cost, self.programs = {}, {}, {}, {}

    def add_pop(self, r, empty):
        wait = r.wait_s
        self.pops += 1
        self.empty_pops += empty
        self.wait_s += wait
        if wait > self.wait_max_s:
            self.wait_max_s = wait
        self.copy_s += r.copy_s
        # (loghist.bucket and _count, inlined: this runs for every batch)
        k = loghist.FLOOR if wait <= _FLOOR_S else loghist.bucket(wait)
        hist, sizes, size = self.wait_hist, self.pop_sizes, r.size
        hist[k] = hist.get(k, 0) + 1
        sizes[size] = sizes.get(size, 0) + 1

    def add_step(self, program, elements, wait_s, compute_s):
        self.steps += 1
        programs = self.programs
        programs[program] = programs.get(program, 0) + 1  # (_count, inlined)
        self.step_wait_s += wait_s
        row = self.cost.get(elements)
        if row is None:
            row = self.cost[elements] = [0, 0.0]
        row[0] += 1
        row[1] += compute_s

    def fields(self) -> dict:
        return {"speed_test": self.speed_test, "pops": self.pops, "peeks": self.peeks,
                "empty_pops": self.empty_pops, "wait_s": self.wait_s,
                "wait_max_s": self.wait_max_s, "copy_s": self.copy_s,
                "wait_hist": self.wait_hist, "pop_sizes": self.pop_sizes,
                "swings": self.swings,
                "cost": {k: StepCost(*row) for k, row in self.cost.items()},
                "steps": self.steps, "step_wait_s": self.step_wait_s,
                "programs": self.programs}


class _PassState:
    """A running pass: its config, the batches queued now, and the open interval's counters,
    one set (and one lock) per writing thread, so the producer and the training loop never
    wait for each other; only a record's cut takes all three locks."""

    def __init__(self, loader, number, config, t0):
        self.loader, self.number, self.config = loader, number, config or {}
        self.capacity = self.config.get("capacity")
        self.t0 = t0
        self.produced, self.consumed, self.occupancy = _Produced(), _Consumed(), {}
        self.push_lock, self.pop_lock = threading.Lock(), threading.Lock()
        self.sample_lock = threading.Lock()
        self.queued = {}  # batch index -> its elements: read by its pop
        self.elements = {}  # the batches' shapes -> their elements (a few distinct ones)
        self.full = False  # seen full since the last empty pop
        self.pending = 0  # elements popped since the last step ended
        self.pending_wait_s = 0.0  # and the waits of those pops
        self.popped = False
        self.size = 0  # the last sampled queue size

    def cut(self, t, speed_test=None):
        """The open interval's (produced, consumed, occupancy, t0), fresh counters from `t`
        (marked `speed_test` when given)."""
        with self.push_lock:
            produced, self.produced = self.produced, _Produced()
        with self.pop_lock:
            consumed = self.consumed
            self.consumed = _Consumed(consumed.speed_test if speed_test is None else speed_test)
        with self.sample_lock:
            occupancy, self.occupancy = self.occupancy, {}
        t0, self.t0 = self.t0, t
        return produced, consumed, occupancy, t0


class ReaderProbe(Probe):
    name = "reader"
    in_step = True  # the pop and step callbacks run in the training loop

    def __init__(self, sink, clock, interval_s: float = 0.5, sample_s: float = SAMPLE_S,
                 source=None):
        super().__init__(sink, clock, source)
        self.interval_s, self.sample_s = interval_s, sample_s
        self._lock = threading.Lock()  # pass starts and ends, totals
        self._events = deque()  # (count, record): what the loop and the producers queued
        self._fold_lock = threading.Lock()  # one thread counts them at a time, in order
        self._passes = {}  # loader id -> _PassState of its running pass
        self._subs, self._step_sub = [], None
        self._halt, self._sampler = threading.Event(), None
        self._last_flush = 0.0
        self.totals = {}  # loader id -> cumulative counters (snapshot, result)
        self.cost_s = {"consumer": 0.0, "producer": 0.0, "sampler": 0.0}  # one writer each
        self.n_records = 0

    # --- life cycle ------------------------------------------------------------------------------
    def _start(self):
        self._subs = [self.subscribe("reader_state", self._on_state),
                      self.subscribe("reader_push", self._later(self._count_push)),
                      self.subscribe("reader_pop", self._later(self._count_pop))]

    def _stop(self):
        for sub in self._subs + ([self._step_sub] if self._step_sub else []):
            sub.close()
        self._subs, self._step_sub = [], None
        self._halt.set()
        if self._sampler is not None:
            self._sampler.join(timeout=2.0)
        self._fold("consumer")
        self._emit(self._flush_all(_perf()))
        self.overhead_s = sum(self.cost_s.values())
        return {"loaders": {str(k): v for k, v in self.totals.items()},
                "records": self.n_records, "interval_s": self.interval_s,
                "sample_s": self.sample_s,
                "overhead_by_thread_s": dict(self.cost_s)}

    def snapshot(self) -> dict:
        """Live figures: per running loader its last sampled queue size and the counters up to
        its last record."""
        return {"loaders": [{"loader": st.loader, "pass": st.number, "size": st.size,
                             "capacity": st.capacity, **self.totals.get(st.loader, {})}
                            for st in list(self._passes.values())]}

    # --- event callbacks -------------------------------------------------------------------------
    def _later(self, count):
        """The subscriber that queues an event for `count` (called by _fold)."""
        append = self._events.append

        def queue(record):
            append((count, record))
        return queue

    def _fold(self, who: Optional[str] = None):
        """Count the queued events, oldest first; their time is `who`'s overhead (None: the
        caller times itself)."""
        events = self._events
        if not events:
            return
        t0 = _perf()
        with self._fold_lock:
            for _ in range(len(events)):  # (appends go on meanwhile: those wait for the next)
                count, record = events.popleft()
                try:
                    count(record)
                except Exception as err:  # noqa: BLE001  (an event it cannot count is
                    # left out, and said so: never the job, never the other events)
                    self.reason = self.reason or (f"a {type(record).__name__} was not "
                                                  f"counted: {type(err).__name__}: {err}")
        if who is not None:
            self.cost_s[who] += _perf() - t0

    def _on_state(self, r):
        t0 = _perf()
        self._fold()  # (the batches and steps before it)
        if r.what == "start":
            self._begin(r)
        else:
            self._end(r)
        self.cost_s["consumer"] += _perf() - t0

    def _begin(self, r):
        st = _PassState(r.loader_id, r.pass_no, r.config, self.clock.rel(r.t))
        with self._lock:
            old = self._passes.pop(r.loader_id, None)
            self._passes[r.loader_id] = st
        records = [self._flush(old, self.clock.rel(r.t))] if old is not None else []
        records.append(ReaderStart(self.clock.rel(r.t), r.loader_id, r.pass_no,
                                   loader_config(r.config)))
        totals = self.totals.setdefault(r.loader_id, _new_totals())
        totals["name"], totals["passes"] = (r.config or {}).get("name"), r.pass_no
        self._emit(records)
        self._run_sampler()
        if self._step_sub is None:
            self._step_sub = self.subscribe("step_end", self._later(self._count_step))

    def _end(self, r):
        t = self.clock.rel(r.t)
        with self._lock:
            st = self._passes.get(r.loader_id)
            if st is None or st.number != r.pass_no:
                return
            del self._passes[r.loader_id]
        records = [self._flush(st, t)]
        records.append(ReaderEnd(t, r.loader_id, r.pass_no, r.what, r.batches,
                                 str(r.detail or "")))
        self._emit(records)

    def _count_push(self, r):
        st = self._passes.get(r.loader_id)
        if st is not None and st.number == r.pass_no:
            shapes = r.shapes
            elements = st.elements.get(shapes)
            if elements is None:
                elements = 0
                for shape in shapes:
                    elements += math.prod(shape)
                if len(st.elements) < MAX_SHAPES:
                    st.elements[shapes] = elements
            st.queued[r.index] = elements
            if st.capacity and r.size >= st.capacity:
                st.full = True
            with st.push_lock:
                st.produced.add(r)

    def _count_pop(self, r):
        st = self._passes.get(r.loader_id)
        if st is not None and st.number == r.pass_no:
            if r.speed_test != st.consumed.speed_test:  # the flag switched: a new interval
                self._emit([self._flush(st, self.clock.rel(r.t - r.wait_s), r.speed_test)])
            with st.pop_lock:
                self._pop(st, r)

    def _pop(self, st, r):
        if r.speed_test:
            st.consumed.peeks += 1
            return
        elements = st.queued.pop(r.index, 0)
        empty = r.size == 0  # the queue was empty when the consumer asked
        st.consumed.add_pop(r, empty)
        if empty:
            if st.full:
                st.consumed.swings += 1
            st.full = False
        st.pending += elements
        st.pending_wait_s += r.wait_s
        st.popped = True

    def _count_step(self, r):
        if not r.is_startup:
            for st in list(self._passes.values()):
                if st.popped:
                    with st.pop_lock:
                        st.consumed.add_step(r.program_id, st.pending, st.pending_wait_s,
                                             r.compute_s)
                    st.pending, st.pending_wait_s, st.popped = 0, 0.0, False

    # --- the sampler -----------------------------------------------------------------------------
    def _run_sampler(self):
        if self._sampler is None and not self._halt.is_set():
            self._last_flush = _perf()
            self._sampler = threading.Thread(target=self._sample_loop, daemon=True,
                                             name="paddletune-reader")
            self._sampler.start()

    def _sample_loop(self):
        broken = False
        while not self._pause(self._sample_wait()):
            t0, c0 = _perf(), time.thread_time()  # (its cost: the CPU it takes, not its
            # waits for the GIL or a core: SamplingProbe's)
            try:
                if broken:  # (still counting: the queued events would pile up)
                    self._fold()
                else:
                    self._emit(self.sample(t0))
            except Exception as err:  # a broken sampler stops sampling, never the job
                self.reason = f"queue sampling failed: {err}"
                broken = True
            finally:
                self.cost_s["sampler"] += time.thread_time() - c0

    def _pause(self, seconds: float) -> bool:
        """Wait `seconds`; whether the probe is halting. A short wait sleeps (a timed
        Event.wait costs twice the CPU of a sleep per wake-up, measured: 20 against 11 us,
        and this thread wakes a hundred times a second); `stop` then waits for at most one
        sleep."""
        if seconds <= SLEEP_MAX_S:
            time.sleep(seconds)
            return self._halt.is_set()
        return self._halt.wait(seconds)

    def _sample_wait(self) -> float:
        """sample_s while a running pass has a queue; else (a loader the training loop reads
        itself, PyTorch's num_workers=0: nothing is ever queued) only the records' interval,
        but at most FOLD_MAX_S, so that the events queued for counting stay few (a fast loop
        queues thousands a second)."""
        queued = any(st.capacity for st in list(self._passes.values()))
        return self.sample_s if queued else min(max(self.sample_s, self.interval_s),
                                                max(self.sample_s, FOLD_MAX_S))

    def sample(self, now) -> list:
        """Count the queued events and each running queue's size; every interval_s, the
        records of all passes."""
        self._fold()
        sizes = {k: v for k, v in self.source.queue_sizes().items() if k in self._passes}
        speed_test = self.source.speed_test_mode()
        for loader, size in sizes.items():
            st = self._passes.get(loader)
            if st is not None and not speed_test:
                st.size = size
                st.full = st.full or bool(st.capacity and size >= st.capacity)
                with st.sample_lock:
                    _count(st.occupancy, size)
        if now - self._last_flush < self.interval_s:
            return []
        self._last_flush = now
        return self._flush_all(now)

    # --- records ---------------------------------------------------------------------------------
    def _flush_all(self, now) -> list:
        return [self._flush(st, self.clock.rel(now)) for st in list(self._passes.values())]

    def _flush(self, st, t, speed_test=None):
        """The open interval's record (None when nothing happened); counting goes on in
        fresh counters from `t`."""
        produced, consumed, occupancy, t0 = st.cut(t, speed_test)
        if not (produced.pushes or consumed.pops or consumed.peeks or occupancy):
            return None
        with self._lock:
            _add_totals(self.totals.setdefault(st.loader, _new_totals()), produced, consumed)
        return ReaderInterval(t0_s=t0, t_s=t, loader=st.loader, pass_no=st.number,
                              **consumed.fields(), **produced.fields(st.config.get("feed")),
                              occupancy=occupancy)

    def _emit(self, records):
        for record in records:
            if record is not None:
                self.n_records += 1
                self.sink(record)


def _count(counter: dict, key, n=1):
    counter[key] = counter.get(key, 0) + n


def _new_totals() -> dict:
    return {"name": None, "passes": 0, "pushes": 0, "pops": 0, "peeks": 0, "empty_pops": 0,
            "wait_s": 0.0, "produce_s": 0.0, "swings": 0}


def _add_totals(totals, produced, consumed):
    for key in ("pushes", "produce_s"):
        totals[key] += getattr(produced, key)
    for key in ("pops", "peeks", "empty_pops", "wait_s", "swings"):
        totals[key] += getattr(consumed, key)


def loader_config(config) -> LoaderConfig:
    """A DataLoader's config dict (the source's reader_state payload) as a record; fields
    that do not fit are left out."""
    config = dict(config or {})
    try:
        return decode(LoaderConfig, config)
    except SchemaError:
        keep = {}
        for key, value in config.items():
            try:
                decode(LoaderConfig, {key: value})
            except SchemaError:
                continue
            keep[key] = value
        return decode(LoaderConfig, keep)


def _shape_names(shapes: dict, feeds) -> dict:
    """{(shape of each array): batches} -> {feed name: {"64x100": batches}}."""
    feeds = list(feeds or [])
    out = {}
    for shape, n in shapes.items():
        names = feeds if len(feeds) == len(shape) else [str(i) for i in range(len(shape))]
        for name, dims in zip(names, shape):
            _count(out.setdefault(name, {}), "x".join(map(str, dims)), n)
    return out
