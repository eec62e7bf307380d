"""PyTorch on a CUDA device: the caching allocator's figures each step (memory_step events),
host-to-device copies (feed) and host syncs (fetch) timed in the training loop. Installed by
hooks.py only when torch.cuda.is_available(); every function returns what undoes it.

Per step the cheap counters are read (torch.cuda.memory_allocated / memory_reserved /
max_memory_allocated / max_memory_reserved: C calls of a few µs); the full
torch.cuda.memory_stats() dictionary (allocation requests, cudaMalloc calls, retries after a
failed cudaMalloc, inactive split blocks: fragmentation) is read on the first step and every
FULL_STATS_EVERY steps, as it costs ~0.1 ms. The peak is the allocator's, never reset (a
script may read it): step_peak is the peak so far."""

import os
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional

import torch

_perf = time.perf_counter
FULL_STATS_EVERY = 50


@dataclass
class CudaMemoryStep:
    """memory_step's payload (sources/base.py) from the caching allocator."""

    step: int
    place: str
    strategy: str
    capacity: int
    allocated: int
    reserved: int
    step_peak: int
    peak_allocated: int
    peak_reserved: int
    requests: int
    system_allocs: int
    cached_free: int
    fragmentation: float
    batch_size: Optional[int] = None
    retries: int = 0
    executor_id: int = 0
    program_id: int = 0
    phase_peaks: Dict[str, int] = field(default_factory=dict)
    system_alloc_s: float = 0.0
    by_tag: Dict[str, int] = field(default_factory=dict)
    by_tag_at_peak: Dict[str, int] = field(default_factory=dict)
    gc: Optional[bool] = None
    inplace: Optional[bool] = None


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


def time_copies_and_syncs(timer) -> List[Callable[[], None]]:
    """Tensor.to / .cuda from the host count as feed; .item / .tolist / .cpu / .numpy of a
    device tensor as fetch (each waits for the device). Returns the undo functions."""
    undo = []
    tensor = torch.Tensor

    def patch(name, make):
        original = getattr(tensor, name)
        setattr(tensor, name, make(original))
        undo.append(lambda: setattr(tensor, name, original))

    def feed(original):
        def wrapper(self, *args, **kwargs):
            if self.is_cuda:
                return original(self, *args, **kwargs)
            t0 = _perf()
            out = original(self, *args, **kwargs)
            if out is not self and out.is_cuda:
                timer.feed(_perf() - t0, out.element_size() * out.numel())
            return out
        return wrapper

    def fetch(original):
        def wrapper(self, *args, **kwargs):
            if not self.is_cuda:
                return original(self, *args, **kwargs)
            t0 = _perf()
            out = original(self, *args, **kwargs)
            timer.fetch(_perf() - t0, self.element_size() * self.numel())
            return out
        return wrapper

    for name in ("to", "cuda"):
        patch(name, feed)
    for name in ("item", "tolist", "cpu", "numpy"):
        patch(name, fetch)
    return undo
