"""Paddle 3 on a CUDA device: its allocator's figures at each training step's end
(memory_step events) and at an out-of-memory error (memory_oom), from paddle.device.cuda's
counters (memory_allocated / memory_reserved / max_memory_allocated / max_memory_reserved: the
allocator's own, a few µs each); and the loop's host-to-device copies (Tensor.cuda / .to) and
host syncs (.numpy / .item / .cpu of a GPU tensor; .tolist goes through .numpy) timed; and
Paddle's side of the steps timed on the device with CUDA events (paddle_cuda(), for
sources/device_clock.py). Paddle exposes no count of allocation requests or cudaMalloc calls,
nor of fragmentation: those stay unknown. Used by hooks.py only on a CUDA build with a
device."""

from math import prod
from typing import Callable, List, Optional

import paddle

from .. import device_copies
from ..device_clock import DeviceBinding
from ..device_memory import CudaMemoryStep, device_index, requested_bytes
from .loaders import place_name

PADDLE_TENSORS = device_copies.TensorKind(
    paddle.Tensor, lambda t: t.place.is_gpu_place(),
    lambda t: t.element_size() * prod(t.shape), copies=("cuda", "to"),
    syncs=("numpy", "item", "cpu"))  # (not tolist: Paddle's calls numpy, counted there)


def time_copies_and_syncs(timer, kind: device_copies.TensorKind = PADDLE_TENSORS,
                          copy_queued: Optional[Callable[[Callable, tuple, dict], None]] = None
                          ) -> List[Callable[[], None]]:
    """Copies to the GPU count as the step's feed, syncs on a GPU tensor as its fetch (the
    source's timer); `copy_queued(method, args, kwargs)` (device_clock.DeviceClock's) is
    called just before a host tensor's copy method runs. Returns the undo functions."""
    return device_copies.time_copies_and_syncs(kind, timer, copy_queued)


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


# --- the steps timed on the device (CUDA events, sources/device_clock.py) ------------------------
def paddle_cuda() -> DeviceBinding:
    """Paddle's side of device_clock.DeviceClock: paddle.device's Event, current_stream and
    is_current_stream_capturing (nothing is recorded while a CUDA graph is captured), each
    looked up at its call (a test replaces paddle's)."""
    return DeviceBinding(
        new_event=TimingEvent, current_stream=CurrentStream,
        capturing=lambda: paddle.device.is_current_stream_capturing(),
        copy_target=lambda method, args, kwargs: target_device(method, args, kwargs))


class TimingEvent:
    """paddle.device.Event(enable_timing=True) as device_clock.TimingEvent: the same names
    as torch's (record, query, synchronize, elapsed_time in milliseconds), but recorded on a
    CurrentStream (Paddle's Event takes Paddle's Stream) and timed against another
    TimingEvent. Paddle makes an event on its current device (its Event takes no device):
    a step on another device fails its record, which stops the clock."""

    __slots__ = ("event",)

    def __init__(self):
        self.event = paddle.device.Event(enable_timing=True)

    def record(self, stream: "CurrentStream"):
        self.event.record(stream.stream)

    def query(self) -> bool:
        return self.event.query()

    def synchronize(self):
        self.event.synchronize()

    def elapsed_time(self, end: "TimingEvent") -> float:
        return self.event.elapsed_time(end.event)


class CurrentStream:
    """paddle.device.current_stream of device n, equal to another wrapping the same CUDA
    stream (Paddle makes a new Stream object at each call and compares Streams by
    identity)."""

    __slots__ = ("stream", "handle")

    def __init__(self, device: int):
        self.stream = paddle.device.current_stream(f"gpu:{device}")
        self.handle = self.stream.stream_base.raw_stream  # the cudaStream_t

    def __eq__(self, other) -> bool:
        return isinstance(other, CurrentStream) and other.handle == self.handle

    def __hash__(self) -> int:
        return hash(self.handle)


def target_device(method, args, kwargs) -> Optional[int]:
    """The GPU index a host tensor's .cuda(...) / .to(...) call copies to; None when it
    names no GPU (a dtype conversion, a copy to the host or to pinned memory)."""
    if method.__name__ == "cuda":
        device_id = args[0] if args else kwargs.get("device_id")
        return device_id if isinstance(device_id, int) else default_gpu()
    where = kwargs.get("device", kwargs.get("other"))
    if where is None and args:
        where = args[0]
    if isinstance(where, paddle.Tensor):
        where = where.place
    if isinstance(where, str) and where.lower() in ("gpu", "cuda"):
        return default_gpu()
    name = place_name(str(where)) if where is not None else ""
    return device_index(name) if name.startswith("CUDAPlace(") else None


def default_gpu() -> int:
    """The GPU a copy that names none goes to: paddle's current device when a GPU, else 0
    (as Tensor.cuda() chooses)."""
    kind, _, index = str(paddle.get_device()).partition(":")
    return int(index) if kind == "gpu" and index.isdigit() else 0
