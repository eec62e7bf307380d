"""The reader probe: each DataLoader/PyReader queue's fill, waits, producer and consumer.

It listens to the source's reader_state / reader_push / reader_pop / reader_batch events (a
reader_batch: a batch the training loop made itself, counted as its push and then its pop;
and, once a loader has started, step_end, to pair each step with the size of the batch it
consumed) and
samples the running queues' sizes (`source.queue_sizes()`) every `sample_s` on a daemon
thread started by the first pass. A job without a DataLoader costs nothing.

The training loop and the producers only queue their batch and step events: the subscriber
is the queue's own `deque.append`, so no Python code of the probe runs on their threads
(profiling costs a PyTorch loop's thread a third fewer bytecodes a step than when they were
counted on the spot). A pass's start and end are queued too, with a few lines of the probe
(`_on_state`): the pass's records are made where it is counted. The sampler thread counts
them, in the order they came, each time it wakes (`_fold`), and so do `snapshot` and
`stop`. One loop counts them all (`_count_queued`), telling a pass's start or end, a batch's
push, its pop, both at once and a step apart by the payload's class (`_kind`); it does at
once only what depends on the events before (which batch a pop took, a drain, the pops a
step pairs with) and keeps the payload, and a tally adds the kept payloads to the counters
in C (map, reduce), in order, before each record and every TALLY_AT events (see
_PassState): a near-empty PyTorch training step costs the probe about 240 bytecodes, on all
its threads, instead of 570 when each event was counted on its own. While a compute step has
let go of the GIL, that counting costs the loop nothing.

One lock, the fold lock, orders the probe's bookkeeping: counting the queued events, a
tally, a queue sample's counts, a record's cut of a pass's counters and counting a pass's
start or end each hold it, so a pass's counters take no lock of their own (the emitting
threads take none). Records go to the sink after it is let go.

Records (paddletune/profile/records.py; `loader` the loader's id, `pass_no` its pass from 1):
ReaderStart when a pass begins (with its config), ReaderEnd when it ends, is reset or fails,
and ReaderInterval for one pass over [t0_s, t_s) (every `interval_s`, and cut at the pass's
end and wherever the speed-test mode switches, so `speed_test` marks intervals whose pops
were peeks). Counters:
  pushes, produce_s, cpu_s (sums over the batches that reported it), cpu_n, put_wait_s,
  nbytes                          the producer side
  workers {worker: [batches, produce_s, cpu_s, cpu_n]}   per producer (-1: the loader's
                                  thread)
  pops, peeks, empty_pops, wait_s, wait_max_s, copy_s, handover_s     the consumer side
                                  (handover_s: of the waits, taking batches from workers)
  wait_hist {bucket: pops}        bucket k holds waits in [10^(k/10), 10^((k+1)/10)) s,
                                  each less its hand-over (the wait for the batch to be
                                  made); bucket -60 also holds every wait under 1 µs
                                  (loghist.py)
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

overhead_s counts the counting and the queue samples (not the appends: a push, pop or batch
event is the queue's own append, built in C, on whichever thread sends it); the result's
overhead_by_thread_s splits it between whichever thread sends a pass's start or end
("consumer": queueing it, and the stop's counting), the sampler (the counting, the passes'
records included) and `snapshot`'s callers (what they counted).
"""

import math
import os
import threading
import time
from collections import Counter, deque
from functools import partial, reduce
from itertools import compress, islice, repeat
from operator import add, attrgetter, eq, is_not, itemgetter
from typing import Optional

from ..profile import loghist
from ..profile.records import (LoaderConfig, ReaderEnd, ReaderInterval, ReaderStart, StepCost,
                               WorkerCounts)
from ..profile.schema import SchemaError, decode
from .base import Probe

MAX_SHAPES = 256  # distinct batch shapes whose element count a pass keeps
TALLY_AT = 4096  # queued events counted since the last tally that make the fold tally them
_FLOOR, _FLOOR_S = loghist.FLOOR, loghist.FLOOR_S
SAMPLE_S = 0.01  # how often the running queues' sizes are sampled
SLEEP_MAX_S = 0.05  # the sampler's longest wait that is a plain sleep (see _pause)
FOLD_MAX_S = 0.5  # the sampler's longest wait while events may queue (see _sample_wait)
_perf = time.perf_counter

# The tallies read the payloads' fields with these (C: no bytecode per payload)
_PRODUCE_S, _PUT_WAIT_S, _NBYTES = (attrgetter("produce_s"), attrgetter("put_wait_s"),
                                    attrgetter("nbytes"))
_CPU_S, _WORKER, _SHAPES = attrgetter("cpu_s"), attrgetter("worker"), attrgetter("shapes")
_WAIT_S, _SIZE, _COPY_S = attrgetter("wait_s"), attrgetter("size"), attrgetter("copy_s")
_PROGRAM_ID, _COMPUTE_S = attrgetter("program_id"), attrgetter("compute_s")
_FIRST, _SECOND, _THIRD = itemgetter(0), itemgetter(1), itemgetter(2)
_reported = partial(is_not, None)  # (a cpu_s of None: not measured)


def _handover_s(payload) -> float:
    """A pop's hand-over (sources/base.py: optional, 0 where absent)."""
    return getattr(payload, "handover_s", 0.0)


def _made_waits(waits: list, handovers: list) -> list:
    """The waits less their hand-overs: the waits for the batches to be made."""
    return [max(w - h, 0.0) for w, h in zip(waits, handovers)]


def _sum(values, start):
    """start + each of `values` in turn: the additions `start += value` makes one value at a
    time, bit for bit (sum() compensates its float additions' rounding from Python 3.12 on)."""
    return reduce(add, values, start)


def _add_counts(counter: dict, counts: Counter):
    """Add `counts` (a Counter: counted in C, keys in the order they first came)."""
    for key, n in counts.items():
        _count(counter, key, n)


def _by_key(keys: list, *columns) -> list:
    """[(key, [its rows' values of each column, in order])] per distinct key, in the order
    the keys first came (most tallies have one key: one producer, one batch size)."""
    distinct = dict.fromkeys(keys)
    if len(distinct) == 1:
        return [(keys[0], columns)]
    groups = []
    for key in distinct:
        rows = list(map(eq, keys, repeat(key)))
        groups.append((key, [list(compress(column, rows)) for column in columns]))
    return groups


class _Produced:
    """The producer side's counters since the last record. Counting a push only keeps its
    payload in `batches`; tally() adds those to the counters, in order (see _PassState)."""

    def __init__(self):
        self.batches = []  # the payloads of the pushes not tallied yet
        self.tallied = self.cpu_n = self.nbytes = 0
        self.produce_s = self.cpu_s = self.put_wait_s = 0.0
        self.workers = {}  # worker -> [batches, produce_s, cpu_s, cpu_n]
        self.shapes = {}  # the batch's shapes -> batches

    @property
    def pushes(self) -> int:
        return self.tallied + len(self.batches)

    def tally(self) -> list:
        """Add the pushes kept in `batches` to the counters; the (payload, error) of those it
        could not count (left out: see add)."""
        batches, self.batches = self.batches, []
        if not batches:
            return []
        try:  # (the new values first: a payload that fails leaves the counters as they were)
            produce, cpus = list(map(_PRODUCE_S, batches)), list(map(_CPU_S, batches))
            produce_s = _sum(produce, self.produce_s)
            put_wait_s = _sum(map(_PUT_WAIT_S, batches), self.put_wait_s)
            nbytes = _sum(map(_NBYTES, batches), self.nbytes)
            reported = list(filter(_reported, cpus))
            cpu_s = _sum(reported, self.cpu_s)
            rows = []
            for worker, (mine, their_cpus) in _by_key(list(map(_WORKER, batches)), produce,
                                                      cpus):
                row = self.workers.get(worker) or (0, 0.0, 0.0, 0)
                theirs = list(filter(_reported, their_cpus))
                rows.append((worker, [row[0] + len(mine), _sum(mine, row[1]),
                                      _sum(theirs, row[2]), row[3] + len(theirs)]))
            shapes = Counter(map(_SHAPES, batches))
        except Exception:  # noqa: BLE001  (one at a time: the others are counted)
            return _each(self.add, batches)
        self.tallied += len(batches)
        self.produce_s, self.put_wait_s, self.nbytes = produce_s, put_wait_s, nbytes
        self.cpu_s, self.cpu_n = cpu_s, self.cpu_n + len(reported)
        self.workers.update(rows)
        _add_counts(self.shapes, shapes)
        return []

    def add(self, r):
        """Count one push (what tally does for all of them, one payload at a time)."""
        produce_s, cpu_s = r.produce_s, r.cpu_s
        self.tallied += 1
        self.produce_s += produce_s
        self.put_wait_s += r.put_wait_s
        self.nbytes += r.nbytes
        row = self.workers.get(r.worker)
        if row is None:
            row = self.workers[r.worker] = [0, 0.0, 0.0, 0]
        row[0] += 1
        row[1] += produce_s
        if cpu_s is not None:
            self.cpu_s += cpu_s
            self.cpu_n += 1
            row[2] += cpu_s
            row[3] += 1
        _count(self.shapes, r.shapes)

    def fields(self, feeds) -> dict:
        return {"pushes": self.pushes, "produce_s": self.produce_s, "cpu_s": self.cpu_s,
                "cpu_n": self.cpu_n, "put_wait_s": self.put_wait_s, "nbytes": self.nbytes,
                "workers": {w: WorkerCounts(*row) for w, row in self.workers.items()},
                "shapes": _shape_names(self.shapes, feeds)}


class _Consumed:
    """The consumer side's counters since the last record. Counting a pop only keeps its
    payload in `taken`, and a step's its payload and what it popped in `stepped`; tally()
    adds those to the counters, in order (see _PassState)."""

    def __init__(self, speed_test=False):
        self.speed_test = speed_test
        self.taken = []  # the payloads of the pops not tallied yet (not the peeks)
        self.stepped = []  # (step payload, elements, wait_s) of the steps not tallied yet
        self.tallied_pops = self.tallied_steps = 0
        self.peeks = self.empty_pops = self.swings = 0
        self.wait_s = self.wait_max_s = self.copy_s = self.step_wait_s = 0.0
        self.handover_s = 0.0
        self.wait_hist, self.pop_sizes, self.programs = {}, {}, {}
        self.cost = {}  # elements -> [steps, compute_s]

    @property
    def pops(self) -> int:
        return self.tallied_pops + len(self.taken)

    @property
    def steps(self) -> int:
        return self.tallied_steps + len(self.stepped)

    def tally(self) -> list:
        """Add the pops kept in `taken` and the steps in `stepped` to the counters; the
        (payload, error) of those it could not count (left out: see add_pop, add_step)."""
        return self._tally_pops() + self._tally_steps()

    def _tally_pops(self) -> list:
        taken, self.taken = self.taken, []
        if not taken:
            return []
        try:  # (the new values first: a payload that fails leaves the counters as they were)
            waits, sizes = list(map(_WAIT_S, taken)), list(map(_SIZE, taken))
            wait_s = _sum(waits, self.wait_s)
            wait_max_s = reduce(max, waits, self.wait_max_s)  # (max(a, b): b only if b > a)
            copy_s = _sum(map(_COPY_S, taken), self.copy_s)
            handovers = list(map(_handover_s, taken))
            handover_s = _sum(handovers, self.handover_s)
            made = _made_waits(waits, handovers) if handover_s != self.handover_s else waits
            hist, pop_sizes = Counter(loghist.buckets(made)), Counter(sizes)
            empty = sizes.count(0)  # (the queue was empty when the consumer asked)
        except Exception:  # noqa: BLE001  (one at a time: the others are counted)
            return _each(self.add_pop, taken)
        self.tallied_pops += len(taken)
        self.empty_pops += empty
        self.wait_s, self.wait_max_s, self.copy_s = wait_s, wait_max_s, copy_s
        self.handover_s = handover_s
        _add_counts(self.wait_hist, hist)
        _add_counts(self.pop_sizes, pop_sizes)
        return []

    def _tally_steps(self) -> list:
        stepped, self.stepped = self.stepped, []
        if not stepped:
            return []
        try:
            steps = list(map(_FIRST, stepped))
            programs = Counter(map(_PROGRAM_ID, steps))
            step_wait_s = _sum(map(_THIRD, stepped), self.step_wait_s)
            rows = []
            for elements, (compute,) in _by_key(list(map(_SECOND, stepped)),
                                                list(map(_COMPUTE_S, steps))):
                row = self.cost.get(elements) or (0, 0.0)
                rows.append((elements, [row[0] + len(compute), _sum(compute, row[1])]))
        except Exception:  # noqa: BLE001  (one at a time: the others are counted)
            return _each(lambda step: self.add_step(*step), stepped, _FIRST)
        self.tallied_steps += len(stepped)
        _add_counts(self.programs, programs)
        self.step_wait_s = step_wait_s
        self.cost.update(rows)
        return []

    def add_pop(self, r):
        """Count one pop (what tally does for all of them, one payload at a time)."""
        wait = r.wait_s
        self.tallied_pops += 1
        self.empty_pops += r.size == 0
        self.wait_s += wait
        if wait > self.wait_max_s:
            self.wait_max_s = wait
        self.copy_s += r.copy_s
        handover = _handover_s(r)
        self.handover_s += handover
        _count(self.wait_hist, loghist.bucket(max(wait - handover, 0.0)))
        _count(self.pop_sizes, r.size)

    def add_step(self, r, elements, wait_s):
        """Count one step (what tally does for all of them, one at a time)."""
        program, compute_s = r.program_id, r.compute_s
        self.tallied_steps += 1
        _count(self.programs, program)
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
                "handover_s": self.handover_s,
                "wait_hist": self.wait_hist, "pop_sizes": self.pop_sizes,
                "swings": self.swings,
                "cost": {k: StepCost(*row) for k, row in self.cost.items()},
                "steps": self.steps, "step_wait_s": self.step_wait_s,
                "programs": self.programs}


def _each(count, items, payload=lambda item: item) -> list:
    """count(item) for each item; the (payload, error) of those that raised."""
    failed = []
    for item in items:
        try:
            count(item)
        except Exception as err:  # noqa: BLE001
            failed.append((payload(item), err))
    return failed


class _PassState:
    """A running pass: its config, the batches queued now, and the open interval's counters.
    Only a thread holding the probe's fold lock writes them (counting the queued events, a
    tally, a queue sample, a record's cut), so they need no lock of their own (snapshot()
    only reads them).

    Counting an event does at once only what depends on the events before it (a pop's batch
    elements, from its push; the drains; a step's pops) and keeps the payload; a tally adds
    the kept ones to the counters in a few passes over them in C (map, reduce: no bytecode
    per payload), in the order they came, so every sum is the one `+=` per event would make.
    The probe tallies a pass before each record's cut, and all passes every TALLY_AT events."""

    def __init__(self, loader, number, config, t0):
        self.loader, self.number, self.config = loader, number, config or {}
        self.capacity = self.config.get("capacity")
        self.t0 = t0
        self.produced, self.consumed, self.occupancy = _Produced(), _Consumed(), {}
        self.queued = {}  # batch index -> its elements: read by its pop
        self.elements = {}  # the batches' shapes -> their elements (a few distinct ones)
        self.full = False  # seen full since the last empty pop
        self.pending = 0  # elements popped since the last step ended
        self.pending_wait_s = 0.0  # and the waits of those pops
        self.popped = False
        self.size = 0  # the last sampled queue size

    def tally(self) -> list:
        """Add the kept payloads to the counters; the (payload, error) of those it could not
        count."""
        return self.produced.tally() + self.consumed.tally()

    def cut(self, t, speed_test=None):
        """The open interval's (produced, consumed, occupancy, t0), fresh counters from `t`
        (marked `speed_test` when given). The caller holds the probe's fold lock and has
        tallied the pass."""
        produced, self.produced = self.produced, _Produced()
        consumed = self.consumed
        self.consumed = _Consumed(consumed.speed_test if speed_test is None else speed_test)
        occupancy, self.occupancy = self.occupancy, {}
        t0, self.t0 = self.t0, t
        return produced, consumed, occupancy, t0

    def elements_of(self, shapes) -> int:
        """The elements of a batch of `shapes` (kept for the first MAX_SHAPES shapes)."""
        elements = 0
        for shape in shapes:
            elements += math.prod(shape)
        if len(self.elements) < MAX_SHAPES:
            self.elements[shapes] = elements
        return elements


# What a queued event is: its payload's class says (see _kind)
_PUSH, _POP, _BATCH, _STEP = "reader_push", "reader_pop", "reader_batch", "step_end"
_STATE = "reader_state"
_KIND_BY_ATTRIBUTES = ((("what",), _STATE), (("is_startup",), _STEP),
                       (("produce_s", "speed_test"), _BATCH), (("speed_test",), _POP),
                       (("produce_s",), _PUSH))
_NO_PASS = object()  # (_count_queued's last pass before its first event)


def _kind(record, kinds: dict) -> str:
    """The event a payload reports, from the attributes sources/base.py lists for it: only a
    reader_state's has what, only a step_end's is_startup, only a reader_pop's speed_test,
    only a reader_push's produce_s, a reader_batch's both. A class that declares its fields
    (a NamedTuple, a dataclass: the sources' own payloads) is learnt in `kinds` once; another
    (a SimpleNamespace) is looked at each time."""
    cls = type(record)
    declared = getattr(cls, "__dataclass_fields__", None) or getattr(cls, "_fields", None)
    for attributes, kind in _KIND_BY_ATTRIBUTES:
        if declared is None:
            if all(hasattr(record, attribute) for attribute in attributes):
                return kind
        elif all(attribute in declared for attribute in attributes):
            kinds[cls] = kind
            return kind
    raise TypeError("not a reader_state, reader_push, reader_pop, reader_batch or step_end "
                    "payload")


class ReaderProbe(Probe):
    name = "reader"
    in_step = True  # the pop and step callbacks run in the training loop

    def __init__(self, sink, clock, interval_s: float = 0.5, sample_s: float = SAMPLE_S,
                 source=None):
        super().__init__(sink, clock, source)
        self.interval_s, self.sample_s = interval_s, sample_s
        self._events = deque()  # the payloads the loop and the producers queued
        self._fold_lock = threading.Lock()  # the counting, tallies, cuts, passes' changes
        self._kinds = {}  # payload class -> _STATE, _PUSH, _POP, _BATCH or _STEP (_kind)
        self._untallied = 0  # events counted since all passes were last tallied
        self._passes = {}  # loader id -> _PassState of its running pass
        self._subs, self._step_sub = [], None
        self._halt, self._sampler = threading.Event(), None
        self._last_flush = 0.0
        self._queue_started = False  # a pass with a queue started, not counted yet
        self._owner = os.getpid()  # (a process the job forks has no sampler: see _on_state)
        self.totals = {}  # loader id -> cumulative counters (snapshot, result)
        self.cost_s = {"consumer": 0.0, "sampler": 0.0,  # one writer each
                       "snapshot": 0.0}  # (snapshot's: its callers, one thread in practice)
        self.n_records = 0

    # --- life cycle ------------------------------------------------------------------------------
    def _start(self):
        queue = self._events.append  # (a C method: nothing of the probe runs in the emitter)
        self._subs = [self.subscribe("reader_state", self._on_state),
                      self.subscribe("reader_push", queue),
                      self.subscribe("reader_pop", queue),
                      self.subscribe("reader_batch", queue)]

    def _stop(self):
        for sub in self._subs + ([self._step_sub] if self._step_sub else []):
            sub.close()
        self._subs, self._step_sub = [], None
        self._halt.set()
        if self._sampler is not None:
            self._sampler.join(timeout=2.0)
        t0 = _perf()
        with self._fold_lock:
            records = self._count_queued()
            for st in self._passes.values():  # (counting, timed as such: the cut is not)
                self._tally(st)
        self.cost_s["consumer"] += _perf() - t0
        now = _perf()
        with self._fold_lock:
            records += self._flush_all(now)
        self._emit(records)
        self.overhead_s = sum(self.cost_s.values())
        return {"loaders": {str(k): v for k, v in self.totals.items()},
                "records": self.n_records, "interval_s": self.interval_s,
                "sample_s": self.sample_s,
                "overhead_by_thread_s": dict(self.cost_s)}

    def snapshot(self) -> dict:
        """Live figures: per running loader its last sampled queue size and the counters up to
        its last record (the queued events counted first, on the caller's thread)."""
        self._fold("snapshot")
        return {"loaders": [{"loader": st.loader, "pass": st.number, "size": st.size,
                             "capacity": st.capacity, **self.totals.get(st.loader, {})}
                            for st in list(self._passes.values())]}

    def sealed_records(self, timeout_s: float = 0.2) -> list:
        """The queued events counted (the passes' starts and ends among them) and every
        running pass's open interval cut now, for the profile's seal; [] when the fold lock
        stays busy for `timeout_s` (this very thread may hold it)."""
        if not self._fold_lock.acquire(timeout=timeout_s):
            return []
        try:
            records = self._count_queued()
            records += self._flush_all(_perf())
        finally:
            self._fold_lock.release()
        return [record for record in records if record is not None]

    # --- event callbacks -------------------------------------------------------------------------
    def _fold(self, who: Optional[str] = None):
        """Count the queued events, oldest first; their time is `who`'s overhead (None: the
        caller times itself)."""
        if not self._events:
            return
        t0 = _perf()
        with self._fold_lock:
            records = self._count_queued()
        self._emit(records)
        if who is not None:
            self.cost_s[who] += _perf() - t0

    def _count_queued(self) -> list:
        """Count the queued events, oldest first (the caller holds the fold lock); the records
        of the intervals that a switch of the speed-test mode cut.

        This runs for every batch and step, so what would be a function per event and kind
        is written out in this one loop, consecutive events of one pass look it up once, and
        it does only what depends on the events before (see _PassState)."""
        records = []
        events, passes, kinds = self._events, self._passes, self._kinds
        n = len(events)  # (appends go on meanwhile: those wait for the next)
        loader = number = _NO_PASS  # the last push's or pop's pass: `st` (None: not running)
        st = None
        for r in islice(iter(events.popleft, _NO_PASS), n):
            try:
                try:
                    kind = kinds[r.__class__]
                except KeyError:
                    kind = _kind(r, kinds)
                if kind is _STATE:  # a pass starts or ends: its records
                    if r.what == "start":
                        records += self._begin(r)
                        self._queue_started = False  # (its capacity is in _passes now)
                    else:
                        records += self._end(r)
                    loader = number = _NO_PASS  # (the passes changed: look them up again)
                    continue
                if kind is _STEP:  # pair each pass's pops since the last step with this one
                    if not r.is_startup:
                        for ps in passes.values():
                            if ps.popped:
                                ps.consumed.stepped.append((r, ps.pending, ps.pending_wait_s))
                                ps.pending, ps.pending_wait_s, ps.popped = 0, 0.0, False
                    continue
                if r.loader_id != loader or r.pass_no != number:
                    st = passes.get(r.loader_id)
                    loader, number = r.loader_id, r.pass_no
                    if st is not None and st.number != number:
                        st = None
                if st is None:  # (not a running pass's)
                    continue
                if kind is not _POP:  # a push: the batch's elements, for its pop; a full queue
                    shapes = r.shapes
                    elements = st.elements.get(shapes)
                    if elements is None:
                        elements = st.elements_of(shapes)
                    if kind is _PUSH:
                        st.queued[r.index] = elements
                        capacity = st.capacity
                        if capacity and r.size >= capacity:
                            st.full = True
                        st.produced.batches.append(r)
                        continue
                    st.produced.batches.append(r)  # (a batch's: the loop made it, nothing
                    # was queued, and its pop follows here)
                # a pop (a batch's: never a peek, its elements those of its push): the mode
                # it peeks in, its batch's elements for the step, a drain
                speed_test, c = r.speed_test, st.consumed
                if speed_test != c.speed_test:  # the flag switched: a new interval
                    records.append(self._flush(st, self.clock.rel(r.t - r.wait_s),
                                               speed_test))
                    c = st.consumed
                if speed_test:
                    c.peeks += 1
                    continue
                if kind is _POP:
                    elements = st.queued.pop(r.index, 0)
                if r.size == 0:  # the queue was empty when the consumer asked
                    if st.full:
                        c.swings += 1
                    st.full = False
                st.pending += elements
                st.pending_wait_s += r.wait_s
                st.popped = True
                c.taken.append(r)
            except Exception as err:  # noqa: BLE001  (an event it cannot count is
                # left out, and said so: never the job, never the other events)
                self._not_counted(r, err)
                loader = number = _NO_PASS  # (the next event looks its pass up again)
        self._untallied += n
        if self._untallied >= TALLY_AT:  # (the kept payloads stay few)
            self._untallied = 0
            for ps in passes.values():
                self._tally(ps)
        return records

    def _tally(self, st):
        for payload, err in st.tally():
            self._not_counted(payload, err)

    def _not_counted(self, payload, err):
        self.reason = self.reason or (f"a {type(payload).__name__} was not counted: "
                                      f"{type(err).__name__}: {err}")

    def _on_state(self, r):
        """A pass starts or ends: queued with its batches and counted in their order by
        whichever thread counts next (the sampler, a snapshot, stop), so the training
        loop does not make the pass's records (the interval's tally and cut, the config's
        record: 100-350 us a pass in bench_torch_overhead's MLP). The sampler starts with the
        first pass, sampling often at once when the pass has a queue. In a process the job
        forked (its sampler thread was not forked, and its profile is not written) the
        queued events are dropped instead, at each pass's start and end."""
        t0 = _perf()
        if os.getpid() != self._owner:
            self._events.clear()
            return
        self._events.append(r)
        if r.what == "start":
            if (r.config or {}).get("capacity"):
                self._queue_started = True
            self._run_sampler()
            if self._step_sub is None:
                self._step_sub = self.subscribe("step_end", self._events.append)
        self.cost_s["consumer"] += _perf() - t0

    def _begin(self, r) -> list:
        """A pass starts (under the fold lock): its records, and the last interval of the
        loader's pass it replaces."""
        st = _PassState(r.loader_id, r.pass_no, r.config, self.clock.rel(r.t))
        old = self._passes.pop(r.loader_id, None)
        self._passes[r.loader_id] = st
        records = [self._flush(old, self.clock.rel(r.t))] if old is not None else []
        records.append(ReaderStart(self.clock.rel(r.t), r.loader_id, r.pass_no,
                                   loader_config(r.config), getattr(r, "startup_s", None),
                                   getattr(r, "first_wait_s", None)))
        totals = self.totals.setdefault(r.loader_id, _new_totals())
        totals["name"], totals["passes"] = (r.config or {}).get("name"), r.pass_no
        return records

    def _end(self, r) -> list:
        """A pass ends, is reset or fails (under the fold lock): its records."""
        t = self.clock.rel(r.t)
        st = self._passes.get(r.loader_id)
        if st is None or st.number != r.pass_no:
            return []
        del self._passes[r.loader_id]
        records = [self._flush(st, t)]
        records.append(ReaderEnd(t, r.loader_id, r.pass_no, r.what, r.batches,
                                 str(r.detail or ""), getattr(r, "eval_s", None),
                                 getattr(r, "eval_read_s", None)))
        return records

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
        """sample_s while a running pass has a queue (or one was just queued to start; a
        pass started during a long wait is sampled from its end); else (a loader the
        training loop reads itself, PyTorch's num_workers=0: nothing is ever queued) only the
        records' interval, but at most FOLD_MAX_S, so that the events queued for counting
        stay few (a fast loop queues thousands a second)."""
        queued = self._queue_started or any(st.capacity for st in list(self._passes.values()))
        return self.sample_s if queued else min(max(self.sample_s, self.interval_s),
                                                max(self.sample_s, FOLD_MAX_S))

    def sample(self, now) -> list:
        """Count the queued events (their records sent at once, as _fold sends them) and each
        running queue's size; every interval_s, the records of all passes."""
        sizes = self.source.queue_sizes()
        speed_test = self.source.speed_test_mode()
        flushed = []
        with self._fold_lock:  # (the source is asked before: it may hold its own locks)
            counted = self._count_queued()  # (first: the passes begun or ended before the
            # sizes were read are the ones they are filed under)
            for loader, size in sizes.items():
                st = self._passes.get(loader)
                if st is not None and not speed_test:
                    st.size = size
                    st.full = st.full or bool(st.capacity and size >= st.capacity)
                    _count(st.occupancy, size)
            if now - self._last_flush >= self.interval_s:
                self._last_flush = now
                flushed = self._flush_all(now)
        self._emit(counted)
        return flushed

    # --- records (under the fold lock) -----------------------------------------------------------
    def _flush_all(self, now) -> list:
        return [self._flush(st, self.clock.rel(now)) for st in list(self._passes.values())]

    def _flush(self, st, t, speed_test=None):
        """The open interval's record (None when nothing happened); counting goes on in
        fresh counters from `t`. A step alone is something: the interval cut between a pop
        and the step that consumed it holds that step (else the pass would lose it)."""
        self._tally(st)
        produced, consumed, occupancy, t0 = st.cut(t, speed_test)
        if not (produced.pushes or consumed.pops or consumed.peeks or consumed.steps
                or occupancy):
            return None
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
