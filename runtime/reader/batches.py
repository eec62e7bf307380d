"""Batches from the user's generator: grouped, checked against the feed variables, and (in a
worker process) the worker's share of them."""

import itertools

import numpy as np

from .. import memory
from ..data_feeder import DataFeeder
from ..memory.numpy_hook import pooled
from ..errors import FeedError
from ..place import CPUPlace
from . import regroup
from .decorator import batch
from .worker_main import warn_trainer


def batches(kind, reader, batch_size, drop_last, feed_vars, name="DataLoader", pool=None):
    """The generator's output as batches: lists with one checked array per feed variable.
    With `pool` (a reader thread's), each batch's arrays are in it, tagged "reader": the
    user's generator runs on NumPy's own allocator (its temporaries are not the batch's, and
    each of them through the pool's hook cost a decoding generator 2.8x its time: 14.1 ms a
    batch against 5.05 on examples/input_pipeline.py --decode-us 8), the conversion runs on
    the pool, and an array the generator made itself is copied in."""
    convert = converter(kind, feed_vars)
    for index, item in enumerate(raw_batches(kind, reader, batch_size, drop_last, feed_vars,
                                             name)):
        if pool is None:
            yield convert(item, index)
            continue
        with memory.tagged(pool, "reader"):
            arrays = [_in_pool(a) for a in convert(item, index)]
        yield arrays


def _in_pool(array):
    """`array`, or a copy in the current thread's pool when NumPy's own allocator made it (a
    view of the user's data is left as it is, as it always was)."""
    if isinstance(array, np.ndarray) and array.flags.owndata and not pooled(array):
        return array.copy()
    return array


def raw_batches(kind, reader, batch_size, drop_last, feed_vars=(), name="DataLoader"):
    """What the generator yields, grouped into batches (still unchecked, but for regrouped
    whole batches: those are regroup.Checked). A batch_size for a sample-list or batch
    source is PADDLETUNE_OVERRIDES' (runtime/overrides.py): the script's batches are
    regrouped to it (runtime/reader/regroup.py)."""
    if kind == "sample":
        return batch(reader, batch_size, drop_last)()
    if batch_size is None:
        return reader()
    if kind == "sample_list":
        return regroup.sample_lists(reader, batch_size, drop_last)
    return regroup.whole_batches(reader(), batch_size, feed_vars,
                                 lambda item, index: _check_batch(item, feed_vars, index), name)


def converter(kind, feed_vars):
    """(item, index) -> the batch as checked arrays, one per feed variable."""
    if kind == "batch":
        return lambda item, index: (item if isinstance(item, regroup.Checked) else
                                    _check_batch(item, feed_vars, index))
    feeder = DataFeeder(feed_vars, CPUPlace())
    names = feeder.feed_names

    def convert(samples, index):
        try:
            feed = feeder.feed(samples)
        except FeedError as err:
            raise FeedError(f"DataLoader batch {index}: {err}") from None
        return [feed[name] for name in names]
    return convert


class WorkerSource:
    """What each worker process runs: its share of the batches.

    A generator that calls fluid.io.get_worker_info() before its first item shards itself:
    the worker sends all it yields. One that does not would make every worker yield every
    batch, so then worker i keeps batches i, i+N, i+2N... of the full stream (correct data
    when every worker's stream is the same: their RNGs start alike; but only the conversion
    runs in parallel) and the trainer is warned once."""

    def __init__(self, source, feed_vars):
        self.source, self.feed_vars = source, feed_vars

    def __call__(self, info):
        kind, reader, batch_size, drop_last = self.source
        convert = converter(kind, self.feed_vars)
        raw = iter(raw_batches(kind, reader, batch_size, drop_last, self.feed_vars, info.name))
        try:
            first = next(raw)
        except StopIteration:
            return
        n, me = info.num_workers, info.id
        stride = n > 1 and not info.consulted
        if stride and me == 0:
            warn_trainer(_UNSHARDED.format(name=info.name, n=n))
        for k, item in enumerate(itertools.chain([first], raw)):
            if stride and k % n != me:
                continue
            # the batch's index in the pass (round robin: worker me's k-th is k * n + me)
            yield convert(item, k if stride else k * n + me)


_UNSHARDED = ("{name}: the generator does not shard itself (it never calls "
              "fluid.io.get_worker_info() before its first batch), so each of the {n} worker "
              "processes runs all of it and keeps one batch in {n}: the batches are right as "
              "long as the generator yields the same sequence in every process (Python's "
              "random and NumPy's global RNG start alike in all), but its own work is "
              "repeated {n} times. Shard it: "
              "`info = fluid.io.get_worker_info()` and yield only items "
              "info.id, info.id + info.num_workers, ...")


def _check_batch(item, feed_vars, index):
    from ..feed_fetch import _check_feed  # the executor's own checks and messages
    names = [v.name for v in feed_vars]
    if isinstance(item, dict):
        missing = [n for n in names if n not in item]
        if missing:
            raise FeedError(f"DataLoader batch {index}: the batch dict has no value for "
                            f"{missing} (its keys: {sorted(map(str, item))})")
        item = [item[n] for n in names]
    elif not isinstance(item, (list, tuple)):
        raise FeedError(f"DataLoader batch {index}: the batch generator yielded a "
                        f"{type(item).__name__}; yield a list with one array per feed "
                        f"variable {names}")
    if len(item) != len(feed_vars):
        raise FeedError(f"DataLoader batch {index}: the batch has {len(item)} array(s) but "
                        f"the feed_list has {len(feed_vars)} variables {names}; yield one "
                        f"array per variable, in that order")
    try:
        return [_check_feed(var, value) for var, value in zip(feed_vars, item)]
    except FeedError as err:
        raise FeedError(f"DataLoader batch {index}: {err}") from None
