"""Tensor holders: LoDTensor (a dense array plus optional LoD), SelectedRows (row-sparse)."""

import numpy as np

from .backend import array_module


class SelectedRows:
    """A row-sparse tensor: `value[i]` is row `ids[i]` of a (height, ...) dense tensor.
    Rows may repeat (their values add up), as in the gradient of a shared embedding."""

    __slots__ = ("ids", "value", "full_height")

    def __init__(self, ids, value, height):
        self.ids = ids
        self.value = value
        self.full_height = int(height)

    @property
    def shape(self):
        return (self.full_height,) + tuple(self.value.shape[1:])

    @property
    def dtype(self):
        return self.value.dtype

    @property
    def nbytes(self):
        return self.value.nbytes + self.ids.nbytes

    def merged(self):
        """The same tensor with each row once (duplicates summed), rows sorted."""
        xp = array_module(self.value)
        uniq, inverse = xp.unique(self.ids, return_inverse=True)
        if len(uniq) == len(self.ids):
            order = xp.argsort(self.ids)
            return SelectedRows(self.ids[order], self.value[order], self.full_height)
        out = xp.zeros((len(uniq),) + self.value.shape[1:], dtype=self.value.dtype)
        xp.add.at(out, inverse.reshape(-1), self.value)
        return SelectedRows(uniq, out, self.full_height)

    def to_dense(self):
        xp = array_module(self.value)
        out = xp.zeros(self.shape, dtype=self.value.dtype)
        xp.add.at(out, self.ids, self.value)
        return out

    # Paddle's Python API
    def rows(self):
        return [int(r) for r in self.ids]

    def height(self):
        return self.full_height

    def get_tensor(self):
        tensor = LoDTensor()
        tensor.set(self.value)
        return tensor

    def __repr__(self):
        return f"SelectedRows(rows={len(self.ids)}, height={self.full_height}, " \
               f"width={list(self.value.shape[1:])}, dtype={self.value.dtype})"


def to_dense(value):
    return value.to_dense() if isinstance(value, SelectedRows) else value


class _Holder:
    """A mutable cell holding one value (an array, a SelectedRows or None)."""

    __slots__ = ("value", "lod")

    def __init__(self, value=None):
        self.value = value
        self.lod = []


class LoDTensor:
    """A dense tensor as Fluid exposes it: `set(array, place)`, `np.array(t)`, `shape()`, LoD.
    Tensors obtained from a Scope read and write the scope's storage."""

    def __init__(self, holder=None):
        self._holder = holder if holder is not None else _Holder()

    def set(self, array, place=None):
        value = np.array(array, copy=True) if not hasattr(array, "__cuda_array_interface__") \
            else array.copy()
        if place is not None and getattr(place, "is_gpu_place", lambda: False)():
            from .backend import cupy_status
            cupy = cupy_status()[0]
            with cupy.cuda.Device(place.get_device_id()):  # the place's device, not the current
                value = cupy.asarray(value)
        self._holder.value = value

    def _array(self):
        value = self._holder.value
        if value is None:
            raise ValueError("this LoDTensor holds no data yet (was its variable ever computed, "
                             "or the startup program run?)")
        return value.to_dense() if isinstance(value, SelectedRows) else value

    def __array__(self, dtype=None, copy=None):
        value = self._array()
        if not isinstance(value, np.ndarray):  # a device array: .get() is already a fresh copy
            value = value.get()
            return value.astype(dtype, copy=False) if dtype is not None else value
        if dtype is not None and value.dtype != np.dtype(dtype):
            return value.astype(dtype)
        if copy is False:
            return value
        # like Paddle's LoDTensor: np.array(t) is a snapshot, never a view the next run overwrites
        return value.copy()

    def shape(self):
        return list(self._array().shape)

    def _dtype(self):
        return self._array().dtype

    def _is_initialized(self):
        return self._holder.value is not None

    def lod(self):
        return [list(level) for level in self._holder.lod]

    def set_lod(self, lod):
        self._holder.lod = [list(level) for level in lod]

    def recursive_sequence_lengths(self):
        return [[b - a for a, b in zip(level[:-1], level[1:])] for level in self._holder.lod]

    def set_recursive_sequence_lengths(self, lengths):
        lod = []
        for level in lengths:
            offsets = [0]
            for n in level:
                offsets.append(offsets[-1] + int(n))
            lod.append(offsets)
        self._holder.lod = lod

    def has_valid_recursive_sequence_lengths(self):
        if not self._holder.lod:
            return True
        return self._holder.lod[-1][-1] == self._array().shape[0]

    def __repr__(self):
        value = self._holder.value
        if value is None:
            return "LoDTensor(uninitialized)"
        return f"LoDTensor(shape={list(value.shape)}, dtype={value.dtype})"


def create_lod_tensor(data, recursive_seq_lens, place=None):
    """fluid.create_lod_tensor: a LoDTensor from an array (or a LoDTensor) and sequence lengths."""
    tensor = LoDTensor()
    tensor.set(np.asarray(data), place)
    if recursive_seq_lens:
        tensor.set_recursive_sequence_lengths(recursive_seq_lens)
        if not tensor.has_valid_recursive_sequence_lengths():
            raise ValueError(f"sequence lengths {recursive_seq_lens} do not add up to the "
                             f"{np.asarray(data).shape[0]} rows of the data")
    return tensor
