"""What a framework's CUDA allocator tells at each step's end (the memory_step event's
payload, sources/base.py) and at an out-of-memory error, in the same shape for PyTorch's
caching allocator (sources/torch/gpu.py) and Paddle 3's (sources/paddle/gpu.py). Imports no
framework."""

import re
from dataclasses import dataclass, field
from typing import Dict, Optional


@dataclass
class CudaMemoryStep:
    """memory_step's payload (sources/base.py) from a CUDA allocator. Counts a framework does
    not expose stay 0 (requests, system_allocs: Paddle's; the memory figures then say they
    are unknown)."""

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
    fragmentation: Optional[float]  # None: not exposed (Paddle)
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



_REQUEST = re.compile(r"(?:Tried to allocate|Cannot allocate) ([0-9.]+) ?"
                      r"(bytes|B|KiB|MiB|GiB|TiB|kB|KB|MB|GB|TB)\b")
_UNITS = {"bytes": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40,
          "kB": 1 << 10, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40}


def requested_bytes(message: str) -> Optional[int]:
    """The request a CUDA out-of-memory message names (PyTorch's "Tried to allocate 2.00
    GiB", Paddle's "Cannot allocate 1.500000GB memory"), in bytes; None when it names none."""
    found = _REQUEST.search(message)
    return int(float(found.group(1)) * _UNITS[found.group(2)]) if found else None


def device_index(place: str) -> int:
    """3 for "CUDAPlace(3)"."""
    return int(place[len("CUDAPlace("):-1])
