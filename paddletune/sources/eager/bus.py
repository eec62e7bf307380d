"""The event bus of an eager framework's source, and the payloads it carries.

Each payload has the attributes sources/base.py lists for its event (the embedded runtime's
records are the reference). A subscriber that raises an Exception is dropped with a warning, so
a broken probe never breaks training; a BaseException (the session's step limit, Ctrl-C) goes
through to the script, as it does from the runtime's own channels."""

import threading
import warnings
from dataclasses import dataclass, field
from typing import Callable, Dict, NamedTuple, Optional, Tuple

from ..base import COMBINED, Subscription


class Bus:
    """Subscribers per event, held as tuples (replaced, never changed in place), so an emit
    on the training thread iterates them as they are while another thread subscribes.

    A combined event (sources/base.py's COMBINED: reader_batch) is sent instead of its parts
    only while every subscriber of a part takes the combined one too (`combined[event]`), so
    a subscriber of the parts alone still gets each of them.

    `subs` and `combined` are read, never changed, outside the bus: the per-step and
    per-batch paths look them up (in place of a call to `listening`: a frame less, on the
    training thread)."""

    def __init__(self):
        self.subs: Dict[str, Tuple[Callable, ...]] = {}  # event -> its subscribers
        # combined event -> sent instead of its parts now: something takes it, and every
        # subscriber of its parts does too (worked out as the subscribers change)
        self.combined: Dict[str, bool] = {}
        self._lock = threading.Lock()  # (subscribers change from the probes' threads)

    def subscribe(self, event: str, fn: Callable) -> Subscription:
        with self._lock:
            self.subs[event] = self.subs.get(event, ()) + (fn,)
            self._plan_combined()
        return Subscription(lambda: self._unsubscribe(event, fn))

    def _unsubscribe(self, event: str, fn: Callable):
        with self._lock:
            subs = list(self.subs.get(event, ()))
            if fn in subs:
                subs.remove(fn)
                self.subs[event] = tuple(subs)
                self._plan_combined()

    def _plan_combined(self):
        """(under the lock, as the subscribers change: not worked out for each batch)"""
        for combined, parts in COMBINED.items():
            takers = self.subs.get(combined, ())
            self.combined[combined] = bool(takers) and all(
                fn in takers for part in parts for fn in self.subs.get(part, ()))

    def subscribers(self, event: str) -> int:
        return len(self.subs.get(event, ()))

    def listening(self, event: str) -> bool:
        return bool(self.subs.get(event))

    def emit(self, event: str, payload):
        for fn in self.subs.get(event, ()):
            try:
                fn(payload)
            except Exception as err:  # noqa: BLE001  (a probe bug must not stop the job)
                self._unsubscribe(event, fn)
                warnings.warn(f"event subscriber {getattr(fn, '__qualname__', fn)!r} on "
                              f"{event!r} raised {type(err).__name__}: {err}; it was "
                              f"unsubscribed", RuntimeWarning, stacklevel=2)


class StepEnd(NamedTuple):
    """One training step: from the previous step's end (the first: its first batch's
    request) to the end of the optimizer's step. Times are perf_counter seconds; `read_s` the
    DataLoader waits in it, `feed_s` the host-to-device copies, `fetch_s` the host syncs
    (.item(), .numpy(), ...), `compute_s` the rest; `paused_s` the source's own work left out
    before `t_begin` (StepTimer.pause); `eval_s` the DataLoader passes that ran between this
    step and the previous one (evaluation), left out likewise (StepTimer.pass_ended). A
    tuple, as are ReaderPush and ReaderPop: one is made per step or batch, and a tuple's
    constructor takes a third of a dataclass's bytecodes."""

    step: int
    t_begin: float
    t_end: float
    read_s: float
    feed_s: float
    fetch_s: float
    compute_s: float
    batch_size: Optional[int]
    place: str
    feed_bytes: int = 0
    fetch_bytes: int = 0
    executor_id: int = 0
    program_id: int = 0
    n_ops: Optional[int] = None
    fetch_names: Tuple[str, ...] = ()
    feed_names: Tuple[str, ...] = ()
    is_startup: bool = False
    paused_s: float = 0.0
    compute_wait_s: Optional[float] = None  # (the runtime's; not measured here)
    compute_queued_s: Optional[float] = None
    eval_s: float = 0.0  # DataLoader passes between the steps, left out before `t_begin`
    samples: Optional[int] = None  # the samples of its batches (gradient accumulation: of
    # several; None: not counted)

    @property
    def wall_s(self):
        return self.t_end - self.t_begin


@dataclass
class OpEnd:
    """One op (for an eager framework: one leaf module's forward call) of a step."""

    program_id: int
    step: int
    index: int
    type: str
    role: int
    t_begin: float
    t_end: float
    timing: str = "host"


@dataclass
class ReaderState:
    loader_id: int
    pass_no: int
    t: float
    what: str  # start | end | reset | error | left
    config: dict = field(default_factory=dict)
    detail: Optional[str] = None
    batches: int = 0
    # an ended pass that ran between two training steps (an evaluation): its time left out
    # of the steps, and the loop's waits for its batches (None: not such a pass)
    eval_s: Optional[float] = None
    eval_read_s: Optional[float] = None
    # a start's: from the loop's iter() to its first batch request (None: not seen)
    startup_s: Optional[float] = None
    # a start's: the loop's wait for the pass's first batch, where its workers start inside
    # that request (the start is sent once the batch came); None: not measured
    first_wait_s: Optional[float] = None


class ReaderPush(NamedTuple):
    loader_id: int
    pass_no: int
    index: int
    worker: int  # -1: made in the training loop's own thread
    t: float
    produce_s: float
    put_wait_s: float
    size: int
    capacity: int
    nbytes: int
    shapes: tuple  # one shape (a tuple of ints) per tensor of the batch
    cpu_s: Optional[float] = None


class ReaderPop(NamedTuple):
    loader_id: int
    pass_no: int
    index: int
    t: float
    wait_s: float
    size: int
    capacity: int
    speed_test: bool = False
    copy_s: float = 0.0
    handover_s: float = 0.0  # of wait_s, taking the batch from a worker (sources/torch)


class ReaderBatch(NamedTuple):
    """A batch the training loop made itself and took at once (PyTorch's num_workers=0):
    its reader_push and its reader_pop in one payload (half the events a batch costs). It has
    the attributes of both: `size` and `t` are the pop's (the push's size is 0: nothing was
    queued), and as a push its worker is -1, as a pop it is never a peek."""

    loader_id: int
    pass_no: int
    index: int
    t: float
    produce_s: float
    cpu_s: Optional[float]
    wait_s: float
    size: int
    capacity: int
    nbytes: int
    shapes: tuple
    worker: int = -1
    put_wait_s: float = 0.0
    speed_test: bool = False
    copy_s: float = 0.0


@dataclass
class ReaderSolo:
    """A producer thread's batches made while the training loop only waited for them."""

    loader_id: int
    pass_no: int
    t: float
    batches: int  # 0: none was made alone
    produce_s: float
    cpu_s: Optional[float] = None


# (the fields the per-step and per-batch paths fill in order: profile.schema.made_in_c)
if StepEnd._fields != (
        "step", "t_begin", "t_end", "read_s", "feed_s", "fetch_s", "compute_s", "batch_size",
        "place", "feed_bytes", "fetch_bytes", "executor_id", "program_id", "n_ops",
        "fetch_names", "feed_names", "is_startup", "paused_s", "compute_wait_s",
        "compute_queued_s", "eval_s", "samples") or ReaderBatch._fields != (
        "loader_id", "pass_no", "index", "t", "produce_s", "cpu_s", "wait_s", "size",
        "capacity", "nbytes", "shapes", "worker", "put_wait_s", "speed_test",
        "copy_s"):  # pragma: no cover
    raise ImportError("StepEnd's or ReaderBatch's fields changed: update StepTimer.step_done "
                      "and LoaderTracker.made")
