"""The ParallelExecutor's edges: the default thread count and the BLAS oversubscription
warning, and the fetch merge (the feed split is in feed_split.py)."""

import os
import sys
import time
import warnings

import numpy as np

from .. import blas
from ..core import LoDTensorArray
from ..feed_fetch import _as_tensor, _fetch
from ..lod import concat_parts, lod_of
from ..tensor import fetched
from ..place import is_gpu

_perf = time.perf_counter
_warned_blas = []


def default_num_threads(places):
    """Paddle's default for ExecutionStrategy.num_threads == 0: 2 per CPU place, 4 per GPU."""
    return len(places) * (4 if places and is_gpu(places[0]) else 2)


def usable_cores():
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def check_blas_threads(num_threads):
    """Warn once when executor threads x BLAS threads oversubscribe the usable cores."""
    if num_threads <= 1 or _warned_blas:
        return
    try:
        threads = blas.get_blas_threads()
    except Exception:  # a BLAS we cannot ask: nothing to report
        threads = None
    cores = usable_cores()
    if threads and num_threads * threads > cores:
        _warned_blas.append(True)
        warnings.warn(
            f"ParallelExecutor: {num_threads} executor threads x {threads} BLAS threads = "
            f"{num_threads * threads} > {cores} usable cores; the threads will compete. Set "
            f"OPENBLAS_NUM_THREADS=1 (or runtime.blas.set_blas_threads(1)) or lower "
            f"ExecutionStrategy.num_threads; the runtime does not change it for you",
            RuntimeWarning, stacklevel=_user_stacklevel())


def _user_stacklevel():
    """The warnings stacklevel of the first frame outside the runtime package (the caller)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    frame, level = sys._getframe(1), 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(root):
        frame, level = frame.f_back, level + 1
    return level + 1


def _merge(results, fetch_names, return_numpy, return_merged):
    out = []
    for per_place in results:
        if return_merged:
            out.append(_merged(per_place, return_numpy))
        else:
            out.append([_unmerged(v, return_numpy) for v in per_place])
    return out


def _merged(per_place, return_numpy):
    """One fetch's values from every place joined along the batch: arrays concatenated, a
    LoDTensorArray entry by entry, LoD tensors with their LoDs joined."""
    values = [v for v in per_place if v is not None]
    if values and all(isinstance(v, list) for v in values):
        entries = [_merged([v[k] if k < len(v) else None for v in values], return_numpy)
                   for k in range(max(len(v) for v in values))]
        return entries if return_numpy else LoDTensorArray(entries)
    if any(lod_of(v) for v in values):
        value = concat_parts(values)
        return _fetch(value, return_numpy)
    arrays = [np.atleast_1d(v) for v in values]
    if not arrays:
        return None
    if len(arrays) == 1 and type(arrays[0]) is np.ndarray:
        value = arrays[0]  # one place's value, fetched: a copy already
    else:
        value = np.concatenate(arrays, axis=0)
    return fetched(value) if return_numpy else _as_tensor(value)


def _unmerged(value, return_numpy):
    if value is None:
        return None
    if isinstance(value, list) or lod_of(value):
        return _fetch(value, return_numpy)
    return value if return_numpy else _as_tensor(value)
