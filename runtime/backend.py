"""Array modules per place: NumPy on CPU, CuPy on GPU (detected lazily, never required)."""

import functools

import numpy as np


@functools.lru_cache(maxsize=None)
def cupy_status():
    """(cupy module or None, device count, reason when unavailable)."""
    try:
        import cupy  # noqa: F401  (optional dependency: pip install 'paddletune[gpu]')
    except Exception as err:  # ImportError, or a broken CUDA install raising at import
        return None, 0, f"CuPy is not installed ({type(err).__name__}: {err})"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as err:
        return None, 0, f"CuPy found no usable NVIDIA GPU ({type(err).__name__}: {err})"
    if count == 0:
        return None, 0, "CuPy found no NVIDIA GPU"
    return cupy, count, ""


def gpu_count():
    return cupy_status()[1]


def is_compiled_with_cuda():
    """True when CuPy and at least one GPU are usable (Paddle's name for 'GPU build')."""
    return cupy_status()[0] is not None


def array_module(array):
    """numpy or cupy, whichever owns this array."""
    if isinstance(array, np.ndarray) or np.isscalar(array):
        return np
    cupy = cupy_status()[0]
    if cupy is not None and isinstance(array, cupy.ndarray):
        return cupy
    return np
