"""PyTorch on a CUDA device: the caching allocator's figures each step (memory_step events)
and at an out-of-memory error (memory_oom), host-to-device copies (feed) and host syncs
(fetch) timed in the training loop, and the steps timed on the device with CUDA events
(DeviceSteps: device_time events). Installed by hooks.py only when torch.cuda.is_available();
every function returns what undoes it.

Per step the cheap counters are read (torch.cuda.memory_allocated / memory_reserved /
max_memory_allocated / max_memory_reserved: C calls of a few µs); the full
torch.cuda.memory_stats() dictionary (allocation requests, cudaMalloc calls, retries after a
failed cudaMalloc, inactive split blocks: fragmentation) is read on the first step and every
FULL_STATS_EVERY steps, as it costs ~0.1 ms. The peak is the allocator's, never reset (a
script may read it): step_peak is the peak so far."""

import os
from collections import deque
from typing import Callable, Dict, List, Optional

import torch

from .. import device_copies
from ..device_memory import CudaMemoryStep, requested_bytes

FULL_STATS_EVERY = 50
WRITE_AT = (1, 2, 5)  # device_time totals written at 1, 2, 5, 10, 20, 50, ... steps


class CudaMemory:
    """Reads the allocator's figures of `device` at each step's end."""

    def __init__(self, device: int):
        self.device = device
        self.capacity = torch.cuda.get_device_properties(device).total_memory
        conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF") or os.environ.get(
            "PYTORCH_ALLOC_CONF")
        self.strategy = f"caching ({conf})" if conf else "caching"
        self.steps = 0
        self._requests = self._mallocs = 0
        self.full: dict = {}

    def step(self, step: int, batch_size: Optional[int]) -> CudaMemoryStep:
        d = self.device
        allocated, reserved = torch.cuda.memory_allocated(d), torch.cuda.memory_reserved(d)
        requests = mallocs = 0
        if self.steps % FULL_STATS_EVERY == 0:
            self.full = torch.cuda.memory_stats(d)
            total_requests = int(self.full.get("allocation.all.allocated", 0))
            total_mallocs = int(self.full.get("segment.all.allocated", 0))
            requests, mallocs = total_requests - self._requests, total_mallocs - self._mallocs
            self._requests, self._mallocs = total_requests, total_mallocs
        self.steps += 1
        inactive = int(self.full.get("inactive_split_bytes.all.current", 0))
        peak = torch.cuda.max_memory_allocated(d)
        return CudaMemoryStep(
            step, f"CUDAPlace({d})", self.strategy, self.capacity, allocated, reserved, peak,
            peak, torch.cuda.max_memory_reserved(d), requests, mallocs,
            max(reserved - allocated, 0), inactive / reserved if reserved else 0.0,
            batch_size, int(self.full.get("num_alloc_retries", 0)))


def oom_details(exc: BaseException, device: int, batch_size: Optional[int]) -> dict:
    """memory_oom's payload (records.MemoryOom's fields, v1 names) for a CUDA out-of-memory
    error on `device`: the request, what the caching allocator held, the device's free and
    total memory, the batch."""
    free, total = torch.cuda.mem_get_info(device)
    details = {"place": f"CUDAPlace({device})", "requested": requested_bytes(str(exc)),
               "allocated": torch.cuda.memory_allocated(device),
               "reserved": torch.cuda.memory_reserved(device), "capacity": total,
               "free": free, "peak": torch.cuda.max_memory_allocated(device),
               "batch_size": batch_size}
    return {k: v for k, v in details.items() if v is not None}


def time_copies_and_syncs(timer, copy_queued: Optional[Callable[[Callable, tuple, dict],
                                                                 None]] = None
                          ) -> List[Callable[[], None]]:
    """Tensor.to / .cuda from the host count as feed; .item / .tolist / .cpu / .numpy of a
    device tensor as fetch (each waits for the device). `copy_queued(method, args, kwargs)`
    (DeviceClock's) is called just before a host tensor's copy method runs. Returns the undo
    functions."""
    return device_copies.time_copies_and_syncs(TORCH_TENSORS, timer, copy_queued)


def target_device(method, args, kwargs) -> Optional[int]:
    """The CUDA device index a host tensor's .cuda(...) / .to(...) call copies to, None when
    it names none (a dtype conversion on the host)."""
    if method.__name__ == "cuda":
        where = args[0] if args else kwargs.get("device")
        return _index(torch.device("cuda") if where is None else where)
    where = kwargs.get("device")
    if where is None and args:
        where = args[0]
    if isinstance(where, torch.Tensor):
        return where.device.index if where.is_cuda else None
    if isinstance(where, (str, torch.device)) or type(where) is int:
        return _index(where)
    return None


def _index(where) -> Optional[int]:
    if isinstance(where, int):
        return where
    try:
        device = torch.device(where)
    except (RuntimeError, TypeError):
        return None
    if device.type != "cuda":
        return None
    return device.index if device.index is not None else torch.cuda.current_device()


TORCH_TENSORS = device_copies.TensorKind(
    torch.Tensor, lambda t: t.is_cuda, lambda t: t.element_size() * t.numel(),
    copies=("to", "cuda"), syncs=("item", "tolist", "cpu", "numpy"))


class DeviceClock:
    """DeviceSteps for each device the training steps run on, made as a step first ends on
    it (the first step, a warm-up, is not timed); `send` gets their totals. It runs inside
    the script's own calls (optimizer.step, Tensor.to): nothing it does may raise there, so
    a failure stops the timing (the totals so far are kept), and nothing is recorded while
    a CUDA graph is being captured."""

    def __init__(self, send: Callable[[dict], None]):
        self.send = send
        self.devices: Dict[int, "DeviceSteps"] = {}
        self.failed = False

    def copy_queued(self, method, args, kwargs):
        """A host tensor's copy method is about to run (`method(tensor, *args, **kwargs)`):
        the first copy to a device after its step's end marks the next step's start. Only
        read while some device waits for that mark (a step's other copies cost one check)."""
        if self.failed or not any(steps.waiting for steps in self.devices.values()):
            return
        self._guarded(self._mark, method, args, kwargs)

    def _mark(self, method, args, kwargs):
        steps = self.devices.get(target_device(method, args, kwargs))
        if steps is not None:
            steps.copy_queued()

    def step_ended(self, device: int, step: int):
        if self.failed:
            return
        steps = self.devices.get(device)
        if steps is None:
            steps = self.devices[device] = DeviceSteps(device, self.send)
        self._guarded(steps.step_ended, step)

    def _guarded(self, action, *args):
        try:
            if not torch.cuda.is_current_stream_capturing():
                action(*args)
        except Exception:  # noqa: BLE001  (the script's step goes on untimed)
            self.failed = True

    def close(self):
        for steps in self.devices.values():
            try:
                steps.close()
            except Exception:  # noqa: BLE001  (a failed device fails the wait too)
                pass


# --- the steps as the device ran them (CUDA events) --------------------------------------------
class DeviceSteps:
    """CUDA events on one device's current stream: one where each training step ends (after
    the optimizer step queued its kernels), one before the first host-to-device copy after it
    (the next step's batch). Read without waiting (Event.query) as later steps end, folded
    into totals (records.DeviceTimeEvent's fields) sent through `send` at growing step counts
    and by close(). `new_event` makes an event (a timing CUDA event; tests pass their own)."""

    def __init__(self, device: int, send: Callable[[dict], None], new_event=None,
                 stream=None):
        self.device, self.send = device, send
        self._new_event = new_event or (lambda: torch.cuda.Event(enable_timing=True))
        self._stream = stream if stream is not None else (
            lambda: torch.cuda.current_stream(device))
        self._spare: List = []  # events done with, to record again
        self._pending = deque()  # (step, copy event or None, end event), oldest first
        self._copy = None  # this step's first copy's event
        self._end_stream = None  # the stream the step's end was recorded on
        self._last_end = None  # the newest end event read
        self.steps = self.copied = self.last_step = 0
        self.cycle_s = self.idle_s = self.busy_s = 0.0
        self._next_write = 1

    @property
    def waiting(self) -> bool:
        """Whether the next step's first copy is still to be marked."""
        return self._copy is None and self._pending is not None

    def copy_queued(self):
        """A host-to-device copy is about to be queued: the step's first marks its start,
        when it is queued on the stream the steps end on (a prefetcher's copy on a side
        stream says nothing of when that stream's work can begin)."""
        if self._copy is None and self._pending is not None:
            stream = self._stream()
            if self._end_stream is None or stream == self._end_stream:
                self._copy = self._record(stream)

    def step_ended(self, step: int):
        """The training step `step` queued its last kernels."""
        if self._pending is None:
            return
        self._end_stream = self._stream()
        self._pending.append((step, self._copy, self._record(self._end_stream)))
        self._copy = None
        self._read(block=False)

    def close(self):
        """Waits for the last step's end on the device, sends the totals, stops."""
        if self._pending is None:
            return
        try:
            self._read(block=True)
        finally:
            self._pending = None
        if self.steps:
            self.send(self._totals())

    def _record(self, stream):
        event = self._spare.pop() if self._spare else self._new_event()
        event.record(stream)
        return event

    def _read(self, block: bool):
        pending = self._pending
        while pending:
            step, copy, end = pending[0]
            if block:
                end.synchronize()
                if copy is not None:
                    copy.synchronize()
            elif not (end.query() and (copy is None or copy.query())):
                return
            pending.popleft()
            self._fold(step, copy, end)

    def _fold(self, step, copy, end):
        last = self._last_end
        if last is not None:
            cycle = last.elapsed_time(end) / 1e3  # (milliseconds)
            self.steps += 1
            self.cycle_s += cycle
            self.last_step = step
            if copy is not None:
                idle = min(max(last.elapsed_time(copy) / 1e3, 0.0), cycle)
                self.copied += 1
                self.idle_s += idle
                self.busy_s += cycle - idle
            self._spare.append(last)
        if copy is not None:
            self._spare.append(copy)
        self._last_end = end
        if self.steps >= self._next_write:
            self.send(self._totals())
            self._next_write = _next_write(self._next_write)

    def _totals(self) -> dict:
        return {"place": f"CUDAPlace({self.device})", "steps": self.steps,
                "last_step": self.last_step, "cycle_s": round(self.cycle_s, 9),
                "copied": self.copied, "idle_s": round(self.idle_s, 9),
                "busy_s": round(self.busy_s, 9)}


def _next_write(count: int) -> int:
    """The step count after `count` in 1, 2, 5, 10, 20, 50, ..."""
    scale = 1
    while True:
        for mantissa in WRITE_AT:
            if mantissa * scale > count:
                return mantissa * scale
        scale *= 10
