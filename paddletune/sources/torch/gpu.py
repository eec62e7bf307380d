"""PyTorch on a CUDA device: the caching allocator's figures each step (memory_step events)
and at an out-of-memory error (memory_oom), host-to-device copies (feed) and host syncs
(fetch) timed in the training loop, and torch's side of the steps timed on the device with
CUDA events (TORCH_CUDA, for sources/device_clock.py: device_time events). Installed by
hooks.py only when torch.cuda.is_available(); every function returns what undoes it.

Per step the cheap counters are read (torch.cuda.memory_allocated / memory_reserved /
max_memory_allocated / max_memory_reserved: C calls of a few µs); the full
torch.cuda.memory_stats() dictionary (allocation requests, cudaMalloc calls, retries after a
failed cudaMalloc, inactive split blocks: fragmentation) is read on each of the first
FULL_STATS_FIRST steps (the warm-up, where the allocator grows its cache: its cudaMalloc calls
stay with the warm-up's steps, not a steady one's), then every FULL_STATS_EVERY steps, as it
costs ~0.1 ms, and once more as the job ends (CudaMemory.last: the retries and fragmentation of
the job's last steps). The peak is the allocator's, never reset (a script may read it):
step_peak is the peak so far."""

import os
from typing import Callable, List, Optional

import torch

from .. import device_clock, device_copies
from ..device_memory import CudaMemoryStep, requested_bytes

FULL_STATS_FIRST = 10
FULL_STATS_EVERY = 50


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
        """The figures as training step `step` ends."""
        full = self.steps < FULL_STATS_FIRST or self.steps % FULL_STATS_EVERY == 0
        self.steps += 1
        return self._figures(step, batch_size, full)

    def last(self, step: int, batch_size: Optional[int]) -> CudaMemoryStep:
        """The figures as the job ends, after step `step`, read in full: the requests and
        cudaMalloc calls since the last full read are counted to the pool's totals."""
        return self._figures(step, batch_size, True)

    def _figures(self, step: int, batch_size: Optional[int], full: bool) -> CudaMemoryStep:
        d = self.device
        allocated, reserved = torch.cuda.memory_allocated(d), torch.cuda.memory_reserved(d)
        requests = mallocs = 0
        if full:
            self.full = torch.cuda.memory_stats(d)
            total_requests = int(self.full.get("allocation.all.allocated", 0))
            total_mallocs = int(self.full.get("segment.all.allocated", 0))
            requests, mallocs = total_requests - self._requests, total_mallocs - self._mallocs
            self._requests, self._mallocs = total_requests, total_mallocs
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
    (device_clock.DeviceClock's) is called just before a host tensor's copy method runs.
    Returns the undo functions."""
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


# torch's side of device_clock.DeviceClock; each name looked up at its call (a test may
# replace torch's functions or target_device)
TORCH_CUDA = device_clock.DeviceBinding(
    new_event=lambda: torch.cuda.Event(enable_timing=True),
    current_stream=lambda device: torch.cuda.current_stream(device),
    capturing=lambda: torch.cuda.is_current_stream_capturing(),
    copy_target=lambda method, args, kwargs: target_device(method, args, kwargs))
