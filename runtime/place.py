"""Places: where tensors live and kernels run (CPUPlace, CUDAPlace, CUDAPinnedPlace)."""

import os

from .backend import cupy_status
from .errors import PlaceUnavailableError

_GPU_HINT = ("install the GPU extra (pip install 'paddletune[gpu]') on a machine with an NVIDIA "
             "GPU, or run on fluid.CPUPlace()")


class CPUPlace:
    def __eq__(self, other):
        return isinstance(other, CPUPlace)

    def __hash__(self):
        return hash("CPUPlace")

    def __repr__(self):
        return "CPUPlace"

    def is_gpu_place(self):
        return False

    def is_cpu_place(self):
        return True

    def is_cuda_pinned_place(self):
        return False

    def _type(self):
        return 0

    def _equals(self, other):
        return self == other


class CUDAPinnedPlace(CPUPlace):
    """Page-locked host memory (a CPU place for kernels, faster host->device copies)."""

    def __eq__(self, other):
        return isinstance(other, CUDAPinnedPlace)

    def __hash__(self):
        return hash("CUDAPinnedPlace")

    def __repr__(self):
        return "CUDAPinnedPlace"

    def is_cuda_pinned_place(self):
        return True

    def _type(self):
        return 2


class CUDAPlace:
    """GPU `device_id`; needs CuPy and an NVIDIA GPU, and says so clearly when they are missing."""

    def __init__(self, device_id=0):
        if not isinstance(device_id, int) or device_id < 0:
            raise ValueError(f"CUDAPlace needs a non-negative device id, got {device_id!r}")
        cupy, count, reason = cupy_status()
        if cupy is None:
            raise PlaceUnavailableError(f"CUDAPlace({device_id}) is not available: {reason}. "
                                        f"To fix: {_GPU_HINT}.")
        if device_id >= count:
            raise PlaceUnavailableError(f"CUDAPlace({device_id}) does not exist: this machine "
                                        f"has {count} GPU(s), ids 0..{count - 1}")
        self.device_id = device_id

    def get_device_id(self):
        return self.device_id

    def __eq__(self, other):
        return isinstance(other, CUDAPlace) and other.device_id == self.device_id

    def __hash__(self):
        return hash(("CUDAPlace", self.device_id))

    def __repr__(self):
        return f"CUDAPlace({self.device_id})"

    def is_gpu_place(self):
        return True

    def is_cpu_place(self):
        return False

    def is_cuda_pinned_place(self):
        return False

    def _type(self):
        return 1

    def _equals(self, other):
        return self == other


def cpu_num():
    """Number of CPU places: the CPU_NUM environment variable, default 1 (Paddle >= 1.5)."""
    raw = os.environ.get("CPU_NUM", "1")
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"CPU_NUM must be a positive integer, got {raw!r}") from None
    if value < 1:
        raise ValueError(f"CPU_NUM must be a positive integer, got {raw!r}")
    return value


def cpu_places(device_count=None):
    """[CPUPlace()] * device_count, where device_count defaults to CPU_NUM."""
    return [CPUPlace() for _ in range(device_count or cpu_num())]


def cuda_places(device_ids=None):
    """CUDAPlaces for device_ids, default FLAGS_selected_gpus or every visible GPU."""
    if device_ids is None:
        from .flags import FLAGS
        selected = FLAGS.get("selected_gpus")
        if selected:
            device_ids = [int(x) for x in selected.split(",") if x.strip()]
        else:
            cupy, count, reason = cupy_status()
            if cupy is None:
                raise PlaceUnavailableError(f"cuda_places(): {reason}. To fix: {_GPU_HINT}.")
            device_ids = range(count)
    elif isinstance(device_ids, int):
        device_ids = [device_ids]
    return [CUDAPlace(i) for i in device_ids]


def cuda_pinned_places(device_count=None):
    return [CUDAPinnedPlace() for _ in range(device_count or cpu_num())]


def is_gpu(place):
    return isinstance(place, CUDAPlace)
