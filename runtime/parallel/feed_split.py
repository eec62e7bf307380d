"""How a ParallelExecutor step's feed is spread over its places (Paddle 1.8's rules).

- A dict: each variable is split along its first dimension into one part per place. A
  persistable variable fed with one row is copied to every place instead.
- A list of dicts: one per place.
- Neither: the program's non-iterable DataLoaders give one batch per place.

Fewer parts than places (fewer rows, a shorter list, a DataLoader pass ending mid-group with
drop_last=False) is a "partial feed": it runs on the first k places only, and is allowed, as in
Paddle, for inference programs only (no gradients combined across places). A training
program rejects fewer rows than places, and drops the last incomplete group of a DataLoader
(Paddle turns drop_last=False into True there, with a warning).
"""

import time
import warnings
import weakref

import numpy as np

from ..core import EOFException
from ..errors import FeedError
from ..feed_fetch import _read_batches
from ..framework import Variable
from ..lod import lod_of, split_for_places, with_lod
from ..tensor import LoDTensor

_perf = time.perf_counter
_warned = []
_ended = weakref.WeakKeyDictionary()  # DataLoader -> its pass whose EOF is still to raise


def split_feed(feed, n, program, loss_name, scale_strategy, partial_ok):
    """([feed dict per active place], seconds spent reading DataLoaders); partial_ok() says
    whether fewer than n places may run (an inference program)."""
    if isinstance(feed, (list, tuple)):
        if not 0 < len(feed) <= n or (len(feed) < n and not partial_ok()):
            raise FeedError(f"a list of feed dicts needs one dict per place: got {len(feed)} "
                            f"for {n} places (fewer run only for an inference program)")
        return [_names(f) for f in feed], 0.0
    feed = _names(feed)
    readers = program._py_readers
    if readers and not all(n in feed for r in readers for n in r.feed_names):
        t0 = _perf()
        return _read_groups(readers, feed, n, partial_ok), _perf() - t0
    if n == 1:
        return [feed], 0.0
    block = program.global_block()
    scale_name = (loss_name + "@GRAD") if loss_name else None
    parts = {}
    for name, value in feed.items():
        var = block.vars.get(name)
        copy = (name == scale_name and scale_strategy == 2) or (
            var is not None and var.persistable and _rows(value) == 1)
        parts[name] = None if copy else _split(name, value, n)
    return _assemble(feed, parts, n, partial_ok), 0.0


def _assemble(feed, parts, n, partial_ok):
    counts = {len(p) for p in parts.values() if p is not None}
    k = min(counts) if counts else n
    if len(counts) > 1:
        raise FeedError(f"the fed variables split into different numbers of parts {sorted(counts)}"
                        f" over {n} places: feed the same number of rows for each")
    if k < n and not partial_ok():
        short = min((name for name, p in parts.items() if p is not None),
                    key=lambda name: len(parts[name]))
        err = FeedError(f"The number({k}) of samples[{short}] of current batch is less than "
                        f"the count({n}) of devices(CPU), currently, it is not allowed. You "
                        f"should set the environment variable CPU_NUM in the system to "
                        f"determine the number of devices you need.")
        err.add_note(f"{short!r} has {k} sample(s), fewer than the {n} places it is split over "
                     f"(CPU_NUM or places=); feed at least {n} samples, or use fewer places "
                     f"(only an inference program may run on fewer places)")
        raise err
    feeds = [dict() for _ in range(k)]
    for name, value in feed.items():
        for i, f in enumerate(feeds):
            f[name] = value if parts[name] is None else parts[name][i]
    return feeds


def _read_groups(readers, feed, n, partial_ok):
    """One batch per place from the DataLoaders. A pass ending mid-group gives the batches read
    so far when that is allowed (inference, drop_last=False), and the next run raises the
    pass's EOFException; otherwise the pass is over now."""
    for reader in readers:
        if _ended.get(reader) is getattr(reader, "_pass", None):
            del _ended[reader]
            raise EOFException(f"{reader.name}: the pass is over (no more batches). Catch "
                               f"fluid.core.EOFException, call loader.reset(), then "
                               f"loader.start() for the next pass")
    feeds = []
    for _ in range(n):
        try:
            batch = _read_batches(readers, feed)
        except EOFException:
            keep = all(not getattr(r, "_drop_last", True) for r in readers)
            if feeds and keep and partial_ok():
                for reader in readers:  # the pass that just ended
                    _ended[reader] = getattr(reader, "_pass", None)
                return feeds
            if feeds and keep:
                _warn_drop_last()
            raise
        feeds.append(batch)
    return feeds


def _warn_drop_last():
    if not _warned:
        _warned.append(True)
        warnings.warn("drop_last=False for DataLoader is not supported in training network. It "
                      "is automatically turned to drop_last=True.", RuntimeWarning, stacklevel=5)


def _rows(value):
    shape = getattr(value, "shape", None)
    if isinstance(value, LoDTensor):
        shape = value.shape()
    elif shape is None:
        shape = np.shape(value)
    return shape[0] if len(shape) else 0


def _split(name, value, n):
    if isinstance(value, LoDTensor):
        if value.lod():  # whole sequences to each place, as Paddle's SplitLoDTensor
            lod = value.lod()
            return _with_lods(split_for_places(with_lod(value._array(), lod), n), value)
        value = value._array()
    if not hasattr(value, "shape"):
        value = np.asarray(value)
    if value.ndim == 0:
        raise FeedError(f"feeding {name!r}: a scalar cannot be split over {n} places; "
                        f"give it a batch dimension or feed a list of dicts, one per place")
    if value.shape[0] == 0:
        raise FeedError(f"feeding {name!r}: the batch is empty")
    return np.array_split(value, min(n, value.shape[0]), axis=0)


def _with_lods(parts, like):
    """The parts as LoDTensors, which the executor's feed takes with their LoD."""
    out = []
    for part in parts:
        tensor = LoDTensor()
        tensor._holder.value = np.asarray(part)
        tensor._holder.lod = lod_of(part)
        out.append(tensor)
    return out


def _names(feed):
    if feed is None:
        return {}
    if not isinstance(feed, dict):
        raise FeedError(f"feed must be a dict {{name: array}} or a list of them (one per "
                        f"place), got {type(feed).__name__}")
    return {(k.name if isinstance(k, Variable) else k): v for k, v in feed.items()}
