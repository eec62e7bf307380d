"""The step timer of an eager framework: a training step is one step of the job's optimizer
(the first optimizer seen stepping; a second one, a GAN's, steps inside the same step), timed
from the previous step's end. What the loop did in between is split by what the source saw:
waiting for the DataLoader (read), host-to-device copies (feed), host syncs (fetch), and the
rest (compute: forward, backward, the update and the loop's own Python)."""

import time
from typing import Callable, Optional

from ...profile.schema import made_in_c
from .bus import Bus, StepEnd

_perf = time.perf_counter
_step_end = made_in_c(StepEnd)


class StepTimer:
    def __init__(self, bus: Bus):
        self.bus = bus
        self.reset()

    def reset(self, t_start: Optional[float] = None):
        self.steps = 0
        self._t_prev_end = None  # the previous step's end
        self._t_first = None  # the first DataLoader request before the first step
        self._t_start = t_start  # the job's start (a first step without any read)
        self._read_s = self._feed_s = self._fetch_s = 0.0
        self._feed_bytes = self._fetch_bytes = 0
        self._paused_s = 0.0
        self._batch_size = None
        self._owner = None  # the optimizer whose steps are the training steps

    # --- what the loop did since the last step --------------------------------------------
    def read(self, t_request: float, wait_s: float, batch_size: Optional[int]):
        """A DataLoader batch was asked for at `t_request` and came `wait_s` later."""
        if self._t_prev_end is None and self._t_first is None:
            self._t_first = t_request
        self._read_s += wait_s
        if batch_size is not None:
            self._batch_size = batch_size

    def feed(self, seconds: float, nbytes: int = 0):
        self._feed_s += seconds
        self._feed_bytes += nbytes

    def fetch(self, seconds: float, nbytes: int = 0):
        self._fetch_s += seconds
        self._fetch_bytes += nbytes

    def pause(self, seconds: float):
        """The source's own work between two steps (an --ops window's reading) took `seconds`
        since the last step ended: left out of the next step, which starts after it
        (StepEnd.paused_s says by how much)."""
        if self._t_prev_end is not None:
            self._t_prev_end += seconds
            self._paused_s += seconds

    @property
    def last_end(self) -> Optional[float]:
        """When the latest step ended, as the next one starts (perf_counter; None: none
        yet)."""
        return self._t_prev_end

    @property
    def batch_size(self) -> Optional[int]:
        """The latest batch's size (None: none seen)."""
        return self._batch_size

    # --- the step's end -------------------------------------------------------------------
    def owns(self, optimizer) -> bool:
        """Whether `optimizer`'s steps are the training steps (the first to step is)."""
        if self._owner is None:
            self._owner = id(optimizer)
        return self._owner == id(optimizer)

    def step_done(self, place: str):
        """The step ended now: emit its record (when someone listens) and start the next."""
        t_end = _perf()
        t_begin = self._t_prev_end
        if t_begin is None:
            t_begin = self._t_first if self._t_first is not None else (
                self._t_start if self._t_start is not None else t_end)
        record = None
        if self.bus.subs.get("step_end"):  # (_record, inlined: this runs every step)
            wall = t_end - t_begin
            if wall < 0.0:
                wall = 0.0
            read_s, feed_s, fetch_s = self._read_s, self._feed_s, self._fetch_s
            parts = read_s + feed_s + fetch_s
            if parts > wall > 0:  # (clock jitter: never above wall)
                scale = wall / parts
                read_s, feed_s, fetch_s = read_s * scale, feed_s * scale, fetch_s * scale
            record = _step_end((self.steps, t_begin, t_end, read_s, feed_s, fetch_s,
                                wall - parts if wall > parts else 0.0, self._batch_size, place,
                                self._feed_bytes, self._fetch_bytes, 0, 0, None, (), (), False,
                                self._paused_s, None, None))
        self.steps += 1
        self._t_prev_end = t_end
        self._read_s = self._feed_s = self._fetch_s = 0.0
        self._feed_bytes = self._fetch_bytes = 0
        self._paused_s = 0.0
        if record is not None:  # last: a subscriber may end the job here (the step limit)
            self.bus.emit("step_end", record)


def first_dim(batch, shape_of: Callable) -> Optional[int]:
    """The first dimension of the first tensor in `batch` (a tensor, or lists, tuples and
    dicts of them): the batch size; None when none is found."""
    if isinstance(batch, (list, tuple)) and batch:  # the usual (inputs, labels): no walk
        shape = shape_of(batch[0])
        if shape:
            return int(shape[0])
    for item in iter_tensors(batch, shape_of, limit=8):
        shape = shape_of(item)
        if shape:
            return int(shape[0])
    return None


def iter_tensors(batch, shape_of: Callable, limit: int = 64):
    """The tensors of a batch (nested lists, tuples and dicts), at most `limit` of them."""
    if isinstance(batch, (list, tuple)) and len(batch) <= limit:
        for item in batch:
            if shape_of(item) is None:
                break
        else:
            return iter(batch)  # the usual (inputs, labels): no walk
    return _walk_tensors(batch, shape_of, limit)


def _walk_tensors(batch, shape_of: Callable, limit: int):
    stack, found = [batch], 0
    while stack and found < limit:
        item = stack.pop()
        if isinstance(item, (list, tuple)):
            stack.extend(reversed(item))
        elif isinstance(item, dict):
            stack.extend(reversed(list(item.values())))
        elif shape_of(item) is not None:
            found += 1
            yield item
