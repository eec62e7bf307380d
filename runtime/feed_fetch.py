"""Feeds and fetches of Executor.run (and of the ParallelExecutor and DataLoaders, which use
the same checks): a feed dict normalised, the non-iterable readers' batches added, each value
checked and converted as Paddle 1.8 does (scalars wrapped, shapes checked only for fluid.data
variables, a LoD's first dimension not checked), fetched values copied out as NumPy arrays or
LoDTensors (a fetched LoD needs return_numpy=False, as in Paddle)."""

import numpy as np

from .dtypes import convert_dtype
from .errors import FeedError, FetchError, where
from .framework import Variable
from .lod import lod_of, with_lod
from .tensor import NUMPY1_FETCHES, LoDTensor, SelectedRows, fetched


def _normalize_feed(feed):
    if feed is None:
        return {}
    if isinstance(feed, (list, tuple)):
        if len(feed) == 1 and isinstance(feed[0], dict):
            return feed[0]
        raise FeedError("a list of feed dicts (one per device) needs a data-parallel "
                        "CompiledProgram; for a plain Program pass one dict")
    if not isinstance(feed, dict):
        raise FeedError(f"feed must be a dict {{name: array}}, got {type(feed).__name__}")
    for k in feed:
        if type(k) is not str:
            return {(k.name if isinstance(k, Variable) else k): v for k, v in feed.items()}
    return feed  # (read only: a step never changes its feed dict)


def _read_batches(readers, feed):
    """The feed with the next batch of each non-iterable DataLoader of the program whose
    variables the caller did not feed (raises fluid.core.EOFException at a pass's end)."""
    for reader in readers:
        if not all(name in feed for name in reader.feed_names):
            feed = {**feed, **reader._executor_feed()}
    return feed


def as_numpy(tensor):
    """A LoDTensor (or a list/LoDTensorArray of them) as NumPy; a tensor holding LoD cannot
    be converted (RuntimeError, as Paddle), pass return_numpy=False instead."""
    if isinstance(tensor, list):
        return [as_numpy(t) for t in tensor]
    if tensor.lod():
        raise RuntimeError("Some of your fetched tensors hold LoD information. They can not be "
                           "completely cast to Python ndarray. Please set the parameter "
                           "'return_numpy' as 'False' to return LoDTensor itself directly.")
    return np.array(tensor)


def _as_lodtensor(data, place, dtype=None):
    """A LoDTensor holding `data` (a Python scalar needs `dtype`; it becomes a [1] tensor)."""
    if isinstance(data, list):
        raise RuntimeError("Some of your feed data hold LoD information. They can not be "
                           "completely cast from a list of Python ndarray to LoDTensor. Please "
                           "convert data to LoDTensor directly before feeding the data.")
    if not isinstance(data, np.ndarray) and np.isscalar(data):
        assert dtype is not None, "dtype should be given when casting python scalar to tensor"
        data = np.array([data]).astype(convert_dtype(dtype))
    tensor = LoDTensor()
    tensor.set(data, place)
    return tensor


def _fetch_names(fetch_list):
    if fetch_list is None:
        return ()
    if isinstance(fetch_list, (str, Variable)):
        fetch_list = [fetch_list]
    names = []
    for item in fetch_list:
        if isinstance(item, Variable):
            names.append(item.name)
        elif isinstance(item, str):
            names.append(item)
        else:
            raise FetchError(f"fetch_list items must be Variables or names, got {item!r}")
    return tuple(names)


def _check_feed(var, value, num_places=1, executor=False):
    """The fed value as an array for `var`, as Paddle 1.8 takes it: a Python scalar becomes a
    one-element array of var's dtype; variables made by fluid.data (need_check_feed) must get
    their dtype and a compatible shape (else ValueError with Paddle's message); other values
    are cast to var's dtype, their shape unchecked (as fluid.layers.data variables)."""
    lod = []
    if isinstance(value, LoDTensor):
        lod = value.lod()
        value = value._array()
    elif not isinstance(value, np.ndarray) and not hasattr(value, "__cuda_array_interface__"):
        value = _to_array(var, value)
    if var.need_check_feed:
        _check_fed_shape(var, value, num_places, executor, bool(lod))
        if var.dtype is not None and value.dtype != var.dtype:
            err = FeedError(f"The data type of fed Variable {var.name!r} must be "
                            f"{var.dtype.name!r}, but received {value.dtype.name!r}")
            err.add_note(f"{var.name!r} is {var.dtype.name}, the value fed is "
                         f"{value.dtype.name}: convert it with array.astype('{var.dtype.name}')"
                         f"{where(var.callsite)}")
            raise err
    elif var.dtype is not None and value.dtype != var.dtype:
        value = value.astype(var.dtype)
    if var.persistable:
        value = value.copy()  # the runtime may update persistables in place
    return with_lod(value, lod) if lod else value


def _to_array(var, value):
    try:
        if np.isscalar(value):
            return np.array([value], dtype=var.dtype)
        return np.asarray(value, dtype=var.dtype)
    except (TypeError, ValueError) as err:
        raise FeedError(f"cannot convert the value fed to {var.name!r} to "
                        f"{var.dtype.name}: {err}") from None


def _check_fed_shape(var, value, num_places, executor, with_lod=False):
    """Paddle's messages: Executor.run's (shapes as tuple and list, 'on each device') or its
    readers' (both as lists). A value with a LoD has its first dimension unchecked (it counts
    the sequences' steps, not the batch), as in Paddle."""
    if var.shape is None or _shape_ok(var.shape, value.shape):
        return
    if with_lod and len(var.shape) == value.ndim and _shape_ok(var.shape[1:], value.shape[1:]):
        return
    shape = list(value.shape)
    if num_places > 1 and shape:
        shape[0] = shape[0] // num_places
    expected, where_ = (tuple(var.shape), " on each device") if executor else (list(var.shape), "")
    err = FeedError(f"The fed Variable {var.name!r} should have dimensions = {len(var.shape)}, "
                    f"shape = {expected!r}, but received fed shape {shape!r}{where_}")
    hint = ""
    if len(value.shape) + 1 == len(var.shape) and var.shape[-1] == 1:
        hint = " Add the trailing dimension: array.reshape(-1, 1)."
    err.add_note(f"(expected {list(var.shape)}, -1 = any; got {list(value.shape)}; declared"
                 f"{where(var.callsite) or ' in the program'}).{hint}")
    raise err


def _shape_ok(expected, actual):
    return len(expected) == len(actual) and all(
        e < 0 or e == a for e, a in zip(expected, actual))


def _fetch(value, return_numpy):
    if type(value) is np.ndarray:  # the common case: no LoD to look for
        value = value.copy()  # never hand out a buffer the runtime may reuse or update
        if not return_numpy:
            return _as_tensor(value)
        return fetched(value) if NUMPY1_FETCHES[0] else value  # (no call for the common case)
    if value is None:
        return None
    if isinstance(value, list):  # a LoDTensorArray: its tensors, in order
        items = [_fetch(v, return_numpy) for v in value]
        if return_numpy:
            return items
        from .core import LoDTensorArray
        return LoDTensorArray(items)
    if isinstance(value, SelectedRows):
        value = value.to_dense()
    if not isinstance(value, np.ndarray):
        value = value.get() if hasattr(value, "get") else np.asarray(value)
        return fetched(value) if return_numpy else _as_tensor(value)
    lod = lod_of(value)
    value = np.array(value)
    if lod:
        if return_numpy:
            raise RuntimeError("Some of your fetched tensors hold LoD information. They can "
                               "not be completely cast to Python ndarray. Please set the "
                               "parameter 'return_numpy' as 'False' to return LoDTensor itself "
                               "directly.")
        return _as_tensor(value, lod)
    return fetched(value) if return_numpy else _as_tensor(value)


def _as_tensor(array, lod=()):
    tensor = LoDTensor()
    tensor._holder.value = array
    tensor._holder.lod = [list(level) for level in lod]
    return tensor
