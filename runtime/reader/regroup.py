"""PADDLETUNE_OVERRIDES' reader.batch_size for sources whose batches the script makes itself
(runtime/overrides.py decides, per source, and sets the loader's source to
(kind, reader, new batch size, drop_last)); the loader's reader stage runs these, in its
reader thread or in each worker process:

* `sample_lists`: set_sample_list_generator. A reader made by `paddle.batch` itself is
  re-batched from its sample reader (with its drop_last); any other one's lists are
  flattened and re-chunked, a final partial list kept; the first list's size is recorded as
  the script's own batch size (`was`).
* `whole_batches`: set_batch_generator. Each batch is checked as the loader checks it, then
  the arrays of each slot are joined and split along the first axis (a final partial batch
  kept); the first batch's first dimension is `was`. Batches that cannot be regrouped (see
  `unusable`) are passed on as the script made them, and the override recorded as having
  no effect, with why.

The samples (rows) come out in the order the script made them; only the grouping changes.
"""

import collections

import numpy as np

from .. import overrides
from ..tensor import LoDTensor
from .decorator import batch, batch_info


class Checked(list):
    """A batch already checked against the feed variables (the converter passes it on)."""


def sample_lists(reader, batch_size, drop_last):
    """The lists of samples of `reader` regrouped into lists of `batch_size` samples."""
    known = batch_info(reader)
    if known is not None:  # paddle.batch's own reader: `was` was recorded when it was set
        yield from batch(known[0], batch_size, known[2])()
    else:
        yield from batch(lambda: _samples(reader, batch_size), batch_size, drop_last)()


def _samples(reader, batch_size):
    """The samples of `reader`'s lists, in order; the first list's size is recorded as the
    script's own batch size."""
    first = True
    for samples in reader():
        if not hasattr(samples, "__len__"):
            samples = list(samples)
        if first:
            first = False
            overrides.record_batch_size(batch_size, len(samples))
        yield from samples


def whole_batches(items, batch_size, feed_vars, check, name):
    """The script's batches (`items`, each checked with `check(item, index)`) joined and
    split into batches of `batch_size` rows, as Checked lists; the script's own batches,
    checked, where they cannot be (recorded as no effect)."""
    names = [v.name for v in feed_vars]
    rows = _Rows()
    signature = None
    was = None
    items = iter(items)
    for index, item in enumerate(items):
        why = _lod_why(item, names)
        arrays = check(item, index)
        why = why or unusable(arrays, names, signature)
        if why is not None:
            if index == 0:
                overrides.batch_size_no_effect(batch_size, f"{name} keeps the script's batches "
                                               f"(set_batch_generator): {why}")
            else:
                overrides.withdraw_batch_size(
                    batch_size, was, f"{name} keeps the script's batches from batch {index} "
                                     f"on (set_batch_generator): {why}")
            if rows.count:
                yield Checked(rows.take(rows.count))
            yield Checked(arrays)
            for k, rest in enumerate(items, index + 1):
                yield Checked(check(rest, k))
            return
        if index == 0:
            was = int(arrays[0].shape[0])
            signature = [(a.dtype, a.shape[1:]) for a in arrays]
            overrides.record_batch_size(batch_size, was)
            if was == batch_size:  # the script's own size: its batches as they are
                yield Checked(arrays)
                for k, rest in enumerate(items, 1):
                    yield Checked(check(rest, k))
                return
        rows.add(arrays)
        while rows.count >= batch_size:
            yield Checked(rows.take(batch_size))
    if rows.count:
        yield Checked(rows.take(rows.count))


def unusable(arrays, names, signature=None):
    """Why a checked batch cannot be joined with others along its first axis (None: it can):
    `signature` is [(dtype, shape[1:])] of the batches before it."""
    for name, a in zip(names, arrays):
        if not isinstance(a, np.ndarray):
            return (f"slot {name!r} is a {type(a).__module__}.{type(a).__name__}, not a host "
                    f"NumPy array")
        if a.ndim == 0:
            return f"slot {name!r} is a scalar: it has no first axis to regroup along"
    firsts = [int(a.shape[0]) for a in arrays]
    if len(set(firsts)) > 1:
        dims = ", ".join(f"{n}: {d}" for n, d in zip(names, firsts))
        return (f"its slots have different first dimensions ({dims}), so their rows are not "
                f"one per sample")
    if signature is not None:
        for name, a, (dtype, rest) in zip(names, arrays, signature):
            if a.dtype != dtype or a.shape[1:] != rest:
                return (f"slot {name!r} is {_show(a.dtype, a.shape[1:])} per row where the "
                        f"batches before were {_show(dtype, rest)}: rows of different shapes "
                        f"cannot share a batch")
    return None


def _lod_why(item, names):
    values = [item.get(n) for n in names] if isinstance(item, dict) else \
        list(item) if isinstance(item, (list, tuple)) else []
    for name, value in zip(names, values):
        if isinstance(value, LoDTensor) and value.lod():
            return (f"slot {name!r} is a LoDTensor with a LoD: its rows are a batch's sequence "
                    f"items, not one per sample")
    return None


def _show(dtype, rest):
    return f"{np.dtype(dtype).name} {list(rest)}"


class _Rows:
    """Batches waiting to be regrouped: their arrays, and the rows they hold."""

    def __init__(self):
        self.parts = collections.deque()
        self.count = 0

    def add(self, arrays):
        if arrays[0].shape[0]:
            self.parts.append(arrays)
            self.count += int(arrays[0].shape[0])

    def take(self, n):
        """The first `n` rows of every slot (no copy when one batch holds them)."""
        taken, need = [], n
        while need:
            arrays = self.parts[0]
            have = int(arrays[0].shape[0])
            if have <= need:
                taken.append(self.parts.popleft())
                need -= have
            else:
                taken.append([a[:need] for a in arrays])
                self.parts[0] = [a[need:] for a in arrays]
                need = 0
        self.count -= n
        if len(taken) == 1:
            return list(taken[0])
        return [np.concatenate(column) for column in zip(*taken)]
