"""DataFeeder: turns a minibatch of samples (tuples, one field per feed variable) into the
`{name: ndarray}` feed dict that Executor.run takes.

Each field of a sample is converted to the variable's dtype and reshaped to the variable's
per-sample shape `var.shape[1:]`; a -1 there is inferred from the sample's own size (so a flat
784-vector fits a [-1, 1, 28, 28] image variable and a scalar label fits a [-1, 1] variable).
The samples of a slot are then stacked into `[batch] + var.shape[1:]`.

A variable with lod_level L > 0 takes, per sample, sequences nested L deep (e.g. a list of
word ids for L = 1); their steps are stacked as rows and the nesting becomes the LoD, as in
Fluid: that variable is fed a LoDTensor.

Differences from Fluid 1.x: `feed` returns NumPy arrays (LoDTensors only for LoD variables;
the Executor takes either), `feed_parallel` returns a list rather than a generator.
"""

import numpy as np

from .errors import FeedError
from .framework import Variable, default_main_program
from .place import CUDAPlace, cpu_num, cuda_places


class DataFeeder:
    """fluid.DataFeeder(feed_list, place, program=None): feed_list holds Variables or the names
    of variables of `program` (default: the default main program)."""

    def __init__(self, feed_list, place, program=None):
        if isinstance(feed_list, (Variable, str)) or not hasattr(feed_list, "__iter__"):
            raise TypeError(f"DataFeeder: feed_list must be a list of Variables or names, got "
                            f"{type(feed_list).__name__}")
        program = default_main_program() if program is None else program
        self.feed_vars = [_resolve(item, program) for item in feed_list]
        self.feed_names = [var.name for var in self.feed_vars]
        self.feed_shapes = [list(var.shape) for var in self.feed_vars]
        self.feed_dtypes = [var.dtype for var in self.feed_vars]
        self.feed_lod_level = [var.lod_level for var in self.feed_vars]
        self.place = place

    def feed(self, iterable):
        """{name: array} for one minibatch: an iterable of samples, each a tuple/list with one
        field per feed variable."""
        columns = [[] for _ in self.feed_vars]
        lods = [[[] for _ in range(var.lod_level)] for var in self.feed_vars]
        for index, sample in enumerate(iterable):
            fields = self._fields(index, sample)
            for column, var, field, lod in zip(columns, self.feed_vars, fields, lods):
                if var.lod_level:
                    _nested_rows(field, lod, column)
                else:
                    column.append(_convert(field, var, index))
        if not columns or not (columns[0] or lods[0]):
            raise FeedError("DataFeeder.feed: the minibatch is empty (no samples)")
        return {var.name: _stack(var, column) if not var.lod_level else _lod_tensor(
            var, column, lod) for var, column, lod in zip(self.feed_vars, columns, lods)}

    def feed_parallel(self, iterable, num_places=None):
        """One feed dict per place, from a list of minibatches (one minibatch per place)."""
        batches = list(iterable)
        count = self._number_of_places(num_places)
        if len(batches) != count:
            raise FeedError(f"DataFeeder.feed_parallel: got {len(batches)} minibatch(es) for "
                            f"{count} place(s); pass exactly one minibatch per place")
        return [self.feed(minibatch) for minibatch in batches]

    def decorate_reader(self, reader, multi_devices, num_places=None, drop_last=True):
        """A reader yielding feed dicts (or, with multi_devices, lists of one feed dict per
        place) from a reader of minibatches. Leftover minibatches that cannot fill every place
        are dropped; drop_last=False raises instead, as in Fluid."""
        def feed_reader():
            if not multi_devices:
                for minibatch in reader():
                    yield self.feed(minibatch)
                return
            count = self._number_of_places(num_places)
            group = []
            for minibatch in reader():
                group.append(minibatch)
                if len(group) == count:
                    yield self.feed_parallel(group, count)
                    group = []
            if group and not drop_last:
                raise ValueError(f"DataFeeder.decorate_reader: {len(group)} minibatch(es) are "
                                 f"left over for {count} places; only drop_last=True is "
                                 f"supported (they are dropped)")
        return feed_reader

    def _number_of_places(self, num_places):
        if num_places is not None:
            if isinstance(num_places, bool) or not isinstance(num_places, int) or num_places < 1:
                raise ValueError(f"num_places must be a positive int, got {num_places!r}")
            return num_places
        if isinstance(self.place, CUDAPlace):
            return len(cuda_places())
        return cpu_num()

    def _fields(self, index, sample):
        if not isinstance(sample, (tuple, list)):
            if len(self.feed_vars) != 1:
                raise FeedError(f"DataFeeder: sample {index} is a {type(sample).__name__}, "
                                f"not a tuple/list with one field per feed variable "
                                f"{self.feed_names}")
            sample = (sample,)
        if len(sample) != len(self.feed_vars):
            raise FeedError(f"DataFeeder: sample {index} has {len(sample)} field(s) but there "
                            f"are {len(self.feed_vars)} feed variables {self.feed_names}; each "
                            f"sample needs one field per variable, in that order")
        return sample


def _resolve(item, program):
    if isinstance(item, Variable):
        return item
    if isinstance(item, str):
        try:
            return program.global_block().var(item)
        except ValueError as err:  # names the variable and suggests close names
            raise FeedError(f"DataFeeder: {err}") from None
    raise TypeError(f"DataFeeder: feed_list items must be Variables or names, got {item!r}")


def _convert(field, var, index):
    """One sample's field as an array of var's dtype and per-sample shape."""
    try:
        array = np.asarray(field, dtype=var.dtype)
    except (TypeError, ValueError) as err:
        raise FeedError(f"DataFeeder: sample {index}, variable {var.name!r}: cannot convert "
                        f"the field to {var.dtype.name} ({err}); a field must be a number or "
                        f"a regular (non-ragged) array") from None
    target = _sample_shape(var, array)
    if target is None:
        raise FeedError(f"DataFeeder: sample {index}, variable {var.name!r}: a field of shape "
                        f"{list(array.shape)} ({array.size} values) does not fit the "
                        f"variable's per-sample shape {list(var.shape[1:])} (-1 = any; the "
                        f"variable's shape is {list(var.shape)} with the batch first)")
    return array.reshape(target)


def _sample_shape(var, array):
    """The per-sample shape var.shape[1:] with its -1 resolved for `array`, or None if the
    array cannot take that shape."""
    if var.shape is None:
        return list(array.shape)
    wanted = list(var.shape[1:])
    unknown = [i for i, d in enumerate(wanted) if d < 0]
    known = int(np.prod([d for d in wanted if d >= 0])) if wanted else 1
    if not unknown:
        return wanted if array.size == known else None
    if len(unknown) == 1:
        if known == 0 or array.size % known:
            return None
        wanted[unknown[0]] = array.size // known
        return wanted
    same_rank = array.ndim == len(wanted) and all(
        d < 0 or d == a for d, a in zip(wanted, array.shape))
    return list(array.shape) if same_rank else None


def _nested_rows(field, lod, rows):
    """Fluid's DataToLoDTensorConverter: a field nested len(lod) deep adds its length to the
    first level and its items, recursively, to the next (the innermost items are rows)."""
    if not lod:
        rows.append(field)
        return
    items = list(field)
    lod[0].append(len(items))
    for item in items:
        _nested_rows(item, lod[1:], rows)


def _lod_tensor(var, rows, lod):
    """The rows stacked as [rows] + var.shape[1:] and the nesting as the LoD."""
    from .tensor import LoDTensor
    try:
        array = np.asarray(rows, dtype=var.dtype)
    except (TypeError, ValueError) as err:
        raise FeedError(f"DataFeeder: variable {var.name!r}: cannot convert the sequence steps "
                        f"to {var.dtype.name} ({err})") from None
    tail = [d for d in (var.shape[1:] if var.shape else array.shape[1:])]
    if array.size or tail:
        array = array.reshape([len(rows)] + [d if d >= 0 else -1 for d in tail] if tail
                              else [len(rows)])
    tensor = LoDTensor()
    tensor.set(array)
    tensor.set_recursive_sequence_lengths(lod)
    return tensor


def _stack(var, column):
    first = column[0].shape
    for index, array in enumerate(column):
        if array.shape != first:
            raise FeedError(f"DataFeeder: variable {var.name!r} got ragged samples: sample 0 "
                            f"has shape {list(first)} but sample {index} has "
                            f"{list(array.shape)}. Pad them to one shape (this runtime has no "
                            f"LoD)")
    if var.shape and var.shape[0] >= 0 and len(column) != var.shape[0]:
        raise FeedError(f"DataFeeder: variable {var.name!r} has a fixed batch dimension of "
                        f"{var.shape[0]} but the minibatch has {len(column)} samples")
    return np.stack(column)
