"""Paddle 3 on a CUDA device: its allocator's figures at each training step's end
(memory_step events) and at an out-of-memory error (memory_oom), from paddle.device.cuda's
counters (memory_allocated / memory_reserved / max_memory_allocated / max_memory_reserved: the
allocator's own, a few µs each); and the loop's host-to-device copies (Tensor.cuda / .to) and
host syncs (.numpy / .item / .cpu of a GPU tensor; .tolist goes through .numpy) timed.
Paddle exposes no count of allocation requests or cudaMalloc calls, nor of fragmentation:
those stay unknown. Used by hooks.py only on a CUDA build with a device."""

from math import prod
from typing import Callable, List, Optional

import paddle

from .. import device_copies
from ..device_memory import CudaMemoryStep, requested_bytes

PADDLE_TENSORS = device_copies.TensorKind(
    paddle.Tensor, lambda t: t.place.is_gpu_place(),
    lambda t: t.element_size() * prod(t.shape), copies=("cuda", "to"),
    syncs=("numpy", "item", "cpu"))  # (not tolist: Paddle's calls numpy, counted there)


def time_copies_and_syncs(timer, kind: device_copies.TensorKind = PADDLE_TENSORS
                          ) -> List[Callable[[], None]]:
    """Copies to the GPU count as the step's feed, syncs on a GPU tensor as its fetch (the
    source's timer); returns the undo functions."""
    return device_copies.time_copies_and_syncs(kind, timer)


def has_gpu() -> bool:
    """A CUDA build of paddle that sees a device."""
    try:
        return paddle.is_compiled_with_cuda() and paddle.device.cuda.device_count() > 0
    except Exception:  # noqa: BLE001
        return False


class PaddleCudaMemory:
    """Reads the allocator's figures of one device at each step's end."""

    def __init__(self, device: int):
        self.device = device
        self.capacity = paddle.device.cuda.get_device_properties(device).total_memory
        self.strategy = str(allocator_strategy())

    def step(self, step: int, batch_size: Optional[int], executor_id: int = 0,
             program_id: int = 0) -> CudaMemoryStep:
        cuda, d = paddle.device.cuda, self.device
        allocated, reserved = cuda.memory_allocated(d), cuda.memory_reserved(d)
        peak = cuda.max_memory_allocated(d)
        return CudaMemoryStep(
            step, f"CUDAPlace({d})", self.strategy, self.capacity, allocated, reserved, peak,
            peak, cuda.max_memory_reserved(d), 0, 0, max(reserved - allocated, 0), None,
            batch_size, executor_id=executor_id, program_id=program_id)


def allocator_strategy() -> str:
    """FLAGS_allocator_strategy as in force ("auto_growth" by default)."""
    try:
        return paddle.get_flags(["FLAGS_allocator_strategy"])["FLAGS_allocator_strategy"]
    except Exception:  # noqa: BLE001  (a build without the flag)
        return "auto_growth"


def oom_details(exc: BaseException, device: int, batch_size: Optional[int]) -> dict:
    """memory_oom's payload (records.MemoryOom's fields, v1 names) for an out-of-memory error
    on `device`: the request (read from Paddle's message), what the allocator held, the
    device's capacity, the batch."""
    cuda = paddle.device.cuda
    details = {"place": f"CUDAPlace({device})", "requested": requested_bytes(str(exc)),
               "allocated": cuda.memory_allocated(device),
               "reserved": cuda.memory_reserved(device),
               "capacity": cuda.get_device_properties(device).total_memory,
               "peak": cuda.max_memory_allocated(device), "batch_size": batch_size}
    return {k: v for k, v in details.items() if v is not None}
