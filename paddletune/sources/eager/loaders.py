"""DataLoader passes of an eager framework, as the reader probe reads them: the framework's
hooks call `asked` as the loop asks a loader for a pass (its iter()), `start` when the loop
asks an iterator for its first batch of a pass (its workers are running then, so their pids
are known; where they start inside that request, PyTorch's spawn and forkserver workers, the
start is sent once the batch came, with the wait for it: `first_batch`), `got` for each
batch the training loop received (with how long it waited and how many batches were ready as
it asked), `produced` for each batch a worker made (when the worker's own timing is known),
`made` instead of both for a batch the training loop made itself (one reader_batch event
where the subscribers take it), and `end` when the pass stops.

With the speed-test mode on, `replay` hands the training loop the pass's last batch again
instead of a new one: the no-data ceiling (what the step costs when reading costs nothing).

`measure_alone` asks each running pass whose producer is a thread of the trainer (the hooks
mark it `thread_producer`) to time that thread alone: at the loop's next batch the hooks take
the queued batches and a few more at once (`take_alone`), the loop waiting meanwhile; the
batches are handed over in order by `serve_held` (their pops marked as the speed test's), and
`reader_solo` reports the cost of those made alone once the last is handed over or the pass
ends."""

import ast
import itertools
import linecache
import os
import threading
import weakref
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Dict, Optional

from ...profile.schema import made_in_c
from .bus import Bus, ReaderBatch, ReaderPop, ReaderPush, ReaderSolo, ReaderState
from .steps import EvalPass, StepTimer, batch_dim, first_dim, iter_tensors

_perf = time.perf_counter
MAX_FLAT = 64  # (iter_tensors' limit: a longer flat batch is walked)
_reader_batch = made_in_c(ReaderBatch)


@dataclass
class Pass:
    """One pass (epoch) of one DataLoader."""

    loader_id: int
    number: int
    capacity: int
    ready: Callable[[], int]  # batches ready to take now
    batches: int = 0
    produced: int = 0
    last: object = None  # the last batch (the speed test replays it)
    ended: bool = False
    extra: dict = field(default_factory=dict)  # the framework hooks' own state
    thread_producer: bool = False  # a thread of the trainer makes the batches
    solo: int = 0  # batches to time that thread alone on (measure_alone)
    held: deque = field(default_factory=deque)  # (batch, shapes) taken ahead by it
    held_end: Optional[BaseException] = None  # how the pass ended while they were taken
    solo_report: Optional[ReaderSolo] = None  # sent once the held batches are handed over
    held_start: Optional[ReaderState] = None  # its start, sent once its first batch came


class LoaderTracker:
    def __init__(self, bus: Bus, timer: StepTimer, shape_of: Callable,
                 nbytes_of: Callable, describe_flat: Optional[Callable] = None):
        self.bus, self.timer = bus, timer
        self.shape_of, self.nbytes_of = shape_of, nbytes_of
        self.describe_flat = describe_flat  # (shapes, bytes) of a flat batch, read at once
        # (None: not all its items are the framework's plain tensors)
        self._ids = itertools.count()
        self._passes_of: Dict[int, int] = {}  # loader id -> passes so far
        self._live: Dict[int, Pass] = {}  # loader id -> its running pass
        self._asked: Dict[int, float] = {}  # loader id -> when the loop last asked for a pass
        self._lock = threading.Lock()
        self.speed_test = False
        timer.left = self._left

    def new_loader_id(self) -> int:
        return next(self._ids)

    def asked(self, loader_id: int):
        """The loop asked the loader for a new pass (its iter(), before the framework's own:
        starting or waking its workers counts in the pass, and is its start-up)."""
        t = _perf()
        self._asked[loader_id] = t
        self.timer.pass_began(loader_id, t, asked=True)

    def start(self, loader_id: int, config: dict, capacity: int,
              ready: Callable[[], int], in_first_batch: bool = False) -> Pass:
        """The loop asks for the pass's first batch: the pass starts. `in_first_batch`: its
        workers start inside this first request (PyTorch's spawn and forkserver workers),
        so its start is sent once the batch came, with the wait for it (`first_batch`), or
        as the pass ends without one."""
        with self._lock:
            old = self._live.pop(loader_id, None)
            number = self._passes_of[loader_id] = self._passes_of.get(loader_id, 0) + 1
        if old is not None:  # (the loop's latest ask is the new pass's: kept for it)
            self.end(old, "reset", "a new pass began before this one ended", ask_kept=True)
        handle = Pass(loader_id, number, capacity, ready)
        with self._lock:
            self._live[loader_id] = handle
        t = _perf()
        self.timer.pass_began(loader_id, t)
        t_asked = self._asked.pop(loader_id, None)
        state = ReaderState(loader_id, number, t, "start", config,
                            startup_s=t - t_asked if t_asked is not None else None)
        if in_first_batch:
            handle.held_start = state
        else:
            self.bus.emit("reader_state", state)
        return handle

    def first_batch(self, handle: Pass, wait_s: float):
        """The pass's first batch came after the loop waited `wait_s` for it: a start held
        for it (`start`'s in_first_batch) is sent now, with that wait, before the batch's
        events."""
        state = self._held_start(handle)
        if state is not None:
            state.first_wait_s = wait_s
            self.bus.emit("reader_state", state)

    def _held_start(self, handle: Pass) -> Optional[ReaderState]:
        """The pass's start held for its first batch, taken (sent once: the loop's first
        batch and the job's end_all may race), or None."""
        if handle.held_start is None:
            return None
        with self._lock:
            state, handle.held_start = handle.held_start, None
        return state

    def _left(self, loader_id: int, t: float, taken: EvalPass):
        """The step timer saw the loop leave the loader's pass between two steps, at `t`
        (an evaluation loop's `break`): the pass ends there, with what was left out."""
        with self._lock:
            handle = self._live.get(loader_id)
        if handle is not None:
            self.end(handle, "left", f"left after {handle.batches} batches", taken=taken,
                     t=t)

    def end(self, handle: Pass, what: str = "end", detail: Optional[str] = None,
            ask_kept: bool = False, taken: Optional[EvalPass] = None,
            t: Optional[float] = None):
        """The pass ran out ("end"), failed ("error"), was replaced ("reset") or left between
        two steps ("left": `taken` is what the step timer left out, at `t`); `ask_kept`: the
        step timer's mark of the loader's pass is the next pass's already."""
        if handle.ended:
            return
        handle.ended = True
        held = self._held_start(handle)  # (no batch came: sent without a wait)
        if held is not None:
            self.bus.emit("reader_state", held)
        handle.last = None
        self._report_solo(handle)
        with self._lock:
            if self._live.get(handle.loader_id) is handle:
                del self._live[handle.loader_id]
        if t is None:
            t = _perf()
        # (a pass run out between two steps is left out of them: StepTimer.pass_ended)
        between = (taken if taken is not None or ask_kept else  # (one without a batch:
                   self.timer.pass_ended(handle.loader_id, t,  # not an evaluation)
                                         what == "end" and handle.batches > 0))
        self.bus.emit("reader_state", ReaderState(
            handle.loader_id, handle.number, t, what, {}, detail, handle.batches,
            *(between or (None, None))))

    def end_all(self, what: str = "end", detail: Optional[str] = None):
        with self._lock:
            live = list(self._live.values())
        for handle in live:
            self.end(handle, what, detail)

    def queue_sizes(self) -> Dict[int, int]:
        with self._lock:
            live = list(self._live.values())
        out = {}
        for handle in live:
            try:
                out[handle.loader_id] = int(handle.ready())
            except Exception:  # noqa: BLE001  (a queue being torn down)
                continue
        return out

    # --- batches ----------------------------------------------------------------------------
    def produced(self, handle: Pass, worker: int, produce_s: float, cpu_s: Optional[float],
                 batch, size: int) -> Optional[tuple]:
        """A batch made by `worker` (-1: the training loop's own thread) reached the loop;
        the shapes of its tensors when they were looked at (someone listens), else None."""
        if not self.bus.listening("reader_push"):
            handle.produced += 1
            return None
        shapes, nbytes = self._shapes_and_bytes(batch)
        self.bus.emit("reader_push", ReaderPush(
            handle.loader_id, handle.number, handle.produced, worker, _perf(), produce_s, 0.0,
            size, handle.capacity, nbytes, shapes, cpu_s))
        handle.produced += 1
        return shapes

    def made(self, handle: Pass, t_request: float, t_got: float, produce_s: float,
             cpu_s: Optional[float], batch, size: int):
        """The training loop made a batch itself (worker -1) from `t_request` to `t_got`,
        taking `produce_s` seconds and `cpu_s` CPU seconds, `size` batches ready as it asked:
        `produced` and then `got`, sent as one reader_batch event (half the training loop's
        work a batch) while the subscribers take it (Bus.combined) and the pass's
        batches all came this way (a push and its pop have one index)."""
        index = handle.batches
        if index != handle.produced or not self.bus.combined.get("reader_batch"):
            self.got(handle, t_request, t_got, batch, size,
                     self.produced(handle, -1, produce_s, cpu_s, batch, 0))
            return
        shapes, nbytes = self._shapes_and_bytes(batch)
        handle.batches = handle.produced = index + 1
        handle.last = batch
        wait = t_got - t_request
        self.timer.read(t_request, wait, batch_dim(shapes), handle.loader_id)
        self.bus.emit("reader_batch", _reader_batch((
            handle.loader_id, handle.number, index, t_got, produce_s, cpu_s, wait, size,
            handle.capacity, nbytes, shapes, -1, 0.0, False, 0.0)))

    def _shapes_and_bytes(self, batch) -> tuple:
        """(the shapes of its tensors, their bytes): the usual batch, a flat one, described
        at once by the framework's describe_flat where it can."""
        if (self.describe_flat is not None and batch.__class__ in (list, tuple)
                and len(batch) <= MAX_FLAT):
            described = self.describe_flat(batch)
            if described is not None:
                return described
        return self.describe(batch)

    # --- a producer thread timed alone ---------------------------------------------------------
    def measure_alone(self, batches: int) -> int:
        """Ask each running pass of a thread producer to time it alone on `batches` batches
        at the loop's next batch; the passes asked."""
        with self._lock:
            live = [h for h in self._live.values() if h.thread_producer and not h.ended and
                    not h.solo and not h.held]
        for handle in live:
            handle.solo = int(batches)
        return len(live)

    def take_alone(self, handle: Pass, take: Callable[[], tuple], max_s: float):
        """The pull: `take()` gives the next batch as (batch, shapes, produce_s, cpu_s,
        alone: whether the thread began it after the pull began); batches are taken until
        handle.solo were made alone or `max_s` passed, and held. StopIteration or an error
        ends the pull (raised again after the held batches: `serve_held`); Ctrl-C and
        sys.exit are not held back."""
        wanted, handle.solo = handle.solo, 0
        started = _perf()
        n, produce_s, cpu_s = 0, 0.0, 0.0
        try:
            while n < wanted and _perf() - started < max_s:
                batch, shapes, produce, cpu, alone = take()
                handle.held.append((batch, shapes))
                if alone:
                    n += 1
                    produce_s += produce
                    cpu_s = None if cpu is None or cpu_s is None else cpu_s + cpu
        except Exception as err:  # noqa: BLE001  (StopIteration, or the reader's error)
            handle.held_end = err
        handle.solo_report = ReaderSolo(handle.loader_id, handle.number, _perf(), n,
                                        produce_s, cpu_s if n else None)

    def serve_held(self, handle: Pass):
        """The next batch taken ahead, as the loop receives it (a pop marked as the speed
        test's: it did not wait); None when none is held. The pass's end met during the
        pull is raised once they are all handed over."""
        if not handle.held:
            err, handle.held_end = handle.held_end, None
            if err is not None:
                raise err
            return None
        batch, shapes = handle.held.popleft()
        t = _perf()
        self.got(handle, t, t, batch, len(handle.held) + 1 + _safe_ready(handle), shapes,
                 taken_ahead=True)
        if not handle.held:
            self._report_solo(handle)
        return batch

    def _report_solo(self, handle: Pass):
        report, handle.solo_report = handle.solo_report, None
        if report is None and handle.solo:
            report = ReaderSolo(handle.loader_id, handle.number, _perf(), 0, 0.0)
        handle.solo = 0
        if report is not None:
            self.bus.emit("reader_solo", report)

    def got(self, handle: Pass, t_request: float, t_got: float, batch, size: int,
            shapes: Optional[tuple] = None, taken_ahead: bool = False,
            handover_s: float = 0.0):
        """The training loop asked for a batch at `t_request` and got it at `t_got`, with
        `size` batches ready as it asked (`taken_ahead`: held by take_alone, its pop marked
        as the speed test's); `shapes` what `produced` returned for it (the
        batch size is read from them instead of walking the batch again); `handover_s` of
        the wait, taking it from a worker process."""
        wait = t_got - t_request
        index = handle.batches
        handle.batches += 1
        handle.last = batch
        batch_size = (batch_dim(shapes) if shapes is not None
                      else first_dim(batch, self.shape_of))
        self.timer.read(t_request, wait, batch_size, handle.loader_id)
        if self.bus.listening("reader_pop"):
            self.bus.emit("reader_pop", ReaderPop(handle.loader_id, handle.number, index,
                                                  t_got, wait, size, handle.capacity,
                                                  taken_ahead, 0.0, handover_s))

    def replay(self, handle: Pass):
        """In the speed-test mode: the pass's last batch again (None before the first)."""
        if not self.speed_test or handle.last is None:
            return None
        t = _perf()
        self.timer.read(t, 0.0, None, handle.loader_id)
        if self.bus.listening("reader_pop"):
            self.bus.emit("reader_pop", ReaderPop(handle.loader_id, handle.number,
                                                  handle.batches, t, 0.0,
                                                  _safe_ready(handle), handle.capacity,
                                                  speed_test=True))
        return handle.last

    def describe(self, batch):
        """(the shapes of its tensors, their bytes)."""
        shape_of, nbytes_of = self.shape_of, self.nbytes_of
        shapes, nbytes = [], 0
        if batch.__class__ in (list, tuple) and len(batch) <= MAX_FLAT:
            for item in batch:  # the usual (inputs, labels): each looked at once
                shape = shape_of(item)
                if shape is None:
                    shapes, nbytes = [], 0
                    break
                shapes.append(tuple(shape))
                nbytes += nbytes_of(item, shape)
            else:
                return tuple(shapes), nbytes
        for item in iter_tensors(batch, shape_of):
            shape = tuple(shape_of(item))  # (the frameworks' dims are ints)
            shapes.append(shape)
            nbytes += nbytes_of(item, shape)
        return tuple(shapes), nbytes


def script_arg(name: str, value) -> str:
    """A DataLoader argument the script set, as the advice's code keeps it (LoaderConfig.args):
    `name=` the value's own name where it is a function named as an identifier (a module's
    collate function), else the bare `name` (a lambda, a partial, a sampler object)."""
    own = getattr(value, "__name__", "")
    return f"{name}={own}" if isinstance(own, str) and own.isidentifier() else name


LIBRARY_DIRS = (os.path.dirname(os.__file__) + os.sep,  # the standard library's, and
                os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
                + os.sep)  # paddletune's (an installed package under site-packages is one)


class ByIdentity:
    """A map keyed by objects' identity that holds them weakly, for keys that need not be
    hashable: a DataLoader subclass defining __eq__ without __hash__ is unhashable, and a
    WeakKeyDictionary keyed by it raised TypeError in the script's loop."""

    def __init__(self):
        self._items: Dict[int, tuple] = {}

    def get(self, obj, default=None):
        entry = self._items.get(id(obj))
        return entry[1] if entry is not None and entry[0]() is obj else default

    def __setitem__(self, obj, value):
        key, items = id(obj), self._items

        def gone(_ref, key=key):
            items.pop(key, None)
        items[key] = (weakref.ref(obj, gone), value)


def call_argument(frame, keyword: str = "dataset") -> Optional[str]:
    """The script's own expression for the first argument (or `keyword=`) of the call
    `frame` is making, where it is a name or a dotted name (`train_ds`, `self.train_set`):
    read from the call's source (its position in the code, Python 3.11+), so it names the
    object as the code that built it does. None where it is something else (a call, a
    subscript), the frame is a library's (the standard library, installed packages,
    paddletune), or the source cannot be read. Nothing of the frame's locals is touched
    (before Python 3.13 reading them keeps a snapshot of every local alive)."""
    try:
        code = frame.f_code
        if code.co_filename.startswith(LIBRARY_DIRS) or "-packages" in code.co_filename:
            return None
        positions = next(itertools.islice(code.co_positions(), frame.f_lasti // 2, None))
        call = _call_at(code.co_filename, *positions)
    except (AttributeError, StopIteration, TypeError, ValueError, SyntaxError,
            RecursionError, MemoryError):
        return None
    if not isinstance(call, ast.Call):
        return None
    given = call.args[0] if call.args and not isinstance(call.args[0], ast.Starred) else next(
        (k.value for k in call.keywords if k.arg == keyword), None)
    return _dotted(given)


def _call_at(filename, line, end_line, col, end_col):
    """The expression at that span of `filename`'s source (columns in UTF-8 bytes), parsed."""
    if None in (line, end_line, col, end_col):
        return None
    lines = linecache.getlines(filename)[line - 1:end_line]
    if not lines:
        return None
    encoded = [text.encode("utf-8") for text in lines]
    if len(encoded) == 1:
        encoded[0] = encoded[0][col:end_col]
    else:
        encoded[0], encoded[-1] = encoded[0][col:], encoded[-1][:end_col]
    return ast.parse(b"".join(encoded).decode("utf-8").strip(), mode="eval").body


def _dotted(node) -> Optional[str]:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id] + parts[::-1])


def _safe_ready(handle: Pass) -> int:
    try:
        return int(handle.ready())
    except Exception:  # noqa: BLE001
        return 0


def error_detail(exc: BaseException) -> str:
    """'ValueError: its message's first line' (the type alone when it says nothing): how a
    pass that failed records why."""
    text = str(exc).strip()
    line = text.splitlines()[0] if text else ""
    return f"{type(exc).__name__}: {line}" if line else type(exc).__name__
