"""DataLoader passes of an eager framework, as the reader probe reads them: the framework's
hooks call `start` when an iterator yields its first batch of a pass (its workers are running
then, so their pids are known), `got` for each batch the training loop received (with how long
it waited and how many batches were ready as it asked), `produced` for each batch a worker
made (when the worker's own timing is known), and `end` when the pass stops.

With the speed-test mode on, `replay` hands the training loop the pass's last batch again
instead of a new one: the no-data ceiling (what the step costs when reading costs nothing)."""

import itertools
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, Optional

from .bus import Bus, ReaderPop, ReaderPush, ReaderState
from .steps import StepTimer, first_dim, iter_tensors

_perf = time.perf_counter


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


class LoaderTracker:
    def __init__(self, bus: Bus, timer: StepTimer, shape_of: Callable,
                 nbytes_of: Callable):
        self.bus, self.timer = bus, timer
        self.shape_of, self.nbytes_of = shape_of, nbytes_of
        self._ids = itertools.count()
        self._passes_of: Dict[int, int] = {}  # loader id -> passes so far
        self._live: Dict[int, Pass] = {}  # loader id -> its running pass
        self._lock = threading.Lock()
        self.speed_test = False

    def new_loader_id(self) -> int:
        return next(self._ids)

    def start(self, loader_id: int, config: dict, capacity: int,
              ready: Callable[[], int]) -> Pass:
        with self._lock:
            old = self._live.pop(loader_id, None)
            number = self._passes_of[loader_id] = self._passes_of.get(loader_id, 0) + 1
        if old is not None:
            self.end(old, "reset", "a new pass began before this one ended")
        handle = Pass(loader_id, number, capacity, ready)
        with self._lock:
            self._live[loader_id] = handle
        self.bus.emit("reader_state", ReaderState(loader_id, number, _perf(), "start", config))
        return handle

    def end(self, handle: Pass, what: str = "end", detail: Optional[str] = None):
        if handle.ended:
            return
        handle.ended = True
        handle.last = None
        with self._lock:
            if self._live.get(handle.loader_id) is handle:
                del self._live[handle.loader_id]
        self.bus.emit("reader_state", ReaderState(handle.loader_id, handle.number, _perf(),
                                                  what, {}, detail, handle.batches))

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
        shapes, nbytes = self.describe(batch)
        self.bus.emit("reader_push", ReaderPush(
            handle.loader_id, handle.number, handle.produced, worker, _perf(), produce_s, 0.0,
            size, handle.capacity, nbytes, shapes, cpu_s))
        handle.produced += 1
        return shapes

    def got(self, handle: Pass, t_request: float, t_got: float, batch, size: int,
            shapes: Optional[tuple] = None):
        """The training loop asked for a batch at `t_request` and got it at `t_got`, with
        `size` batches ready as it asked; `shapes` what `produced` returned for it (the
        batch size is read from them instead of walking the batch again)."""
        wait = t_got - t_request
        index = handle.batches
        handle.batches += 1
        handle.last = batch
        batch_size = (next((int(shape[0]) for shape in shapes if shape), None)
                      if shapes is not None else first_dim(batch, self.shape_of))
        self.timer.read(t_request, wait, batch_size)
        if self.bus.listening("reader_pop"):
            self.bus.emit("reader_pop", ReaderPop(handle.loader_id, handle.number, index,
                                                  t_got, wait, size, handle.capacity))

    def replay(self, handle: Pass):
        """In the speed-test mode: the pass's last batch again (None before the first)."""
        if not self.speed_test or handle.last is None:
            return None
        t = _perf()
        self.timer.read(t, 0.0, None)
        if self.bus.listening("reader_pop"):
            self.bus.emit("reader_pop", ReaderPop(handle.loader_id, handle.number,
                                                  handle.batches, t, 0.0,
                                                  _safe_ready(handle), handle.capacity,
                                                  speed_test=True))
        return handle.last

    def describe(self, batch):
        """(the shapes of its tensors, their bytes)."""
        shape_of, nbytes_of = self.shape_of, self.nbytes_of
        items = list(iter_tensors(batch, shape_of))
        return (tuple(tuple(map(int, shape_of(item))) for item in items),
                sum(nbytes_of(item) for item in items))


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
