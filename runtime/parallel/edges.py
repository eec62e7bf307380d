"""The ParallelExecutor's edges: the default thread count and the BLAS oversubscription
warning, the feed split over places, and the fetch merge."""

import os
import sys
import time
import warnings

import numpy as np

from .. import blas
from ..errors import FeedError
from ..executor import _as_tensor, _read_batches
from ..framework import Variable
from ..place import is_gpu
from ..tensor import LoDTensor

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


def split_feed(feed, n, program, loss_name, scale_strategy):
    read_s = 0.0
    if isinstance(feed, (list, tuple)):
        if len(feed) != n:
            raise FeedError(f"a list of feed dicts needs one dict per place: got {len(feed)} "
                            f"for {n} places")
        return [_names(f) for f in feed], read_s
    feed = _names(feed)
    readers = program._py_readers
    if readers and not all(n in feed for r in readers for n in r.feed_names):
        t0 = _perf()
        feeds = [_read_batches(readers, feed) for _ in range(n)]
        return feeds, _perf() - t0
    if n == 1:
        return [feed], read_s
    scale_name = (loss_name + "@GRAD") if loss_name else None
    feeds = [dict() for _ in range(n)]
    for name, value in feed.items():
        if name == scale_name and scale_strategy == 2:
            for f in feeds:
                f[name] = value
            continue
        for f, part in zip(feeds, _split(name, value, n)):
            f[name] = part
    return feeds, read_s

def _split(name, value, n):
    if isinstance(value, LoDTensor):
        if value.lod():
            raise FeedError(f"feeding {name!r}: splitting a LoDTensor with LoD over places is "
                            f"not supported; feed a list of dicts, one per place")
        value = value._array()
    if not hasattr(value, "shape"):
        value = np.asarray(value)
    if value.ndim == 0:
        raise FeedError(f"feeding {name!r}: a scalar cannot be split over {n} places; "
                        f"give it a batch dimension or feed a list of dicts, one per place")
    if value.shape[0] < n:
        raise FeedError(f"the batch of {name!r} has {value.shape[0]} sample(s), fewer than "
                        f"the {n} places it is split over (CPU_NUM or places=); feed at "
                        f"least {n} samples, or use fewer places")
    return np.array_split(value, n, axis=0)

def _names(feed):
    if feed is None:
        return {}
    if not isinstance(feed, dict):
        raise FeedError(f"feed must be a dict {{name: array}} or a list of them (one per "
                        f"place), got {type(feed).__name__}")
    return {(k.name if isinstance(k, Variable) else k): v for k, v in feed.items()}


def _merge(results, fetch_names, return_numpy, return_merged):
    out = []
    for per_place in results:
        if return_merged:
            arrays = [np.atleast_1d(v) for v in per_place if v is not None]
            value = np.concatenate(arrays, axis=0) if arrays else None
            out.append(value if return_numpy or value is None else _as_tensor(value))
        else:
            out.append([v if return_numpy or v is None else _as_tensor(v) for v in per_place])
    return out
