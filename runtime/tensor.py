"""Tensor holders: LoDTensor (a dense array plus optional LoD), SelectedRows (row-sparse)."""

import numpy as np

from .backend import array_module


class SelectedRows:
    """A row-sparse tensor: `value[i]` is row `ids[i]` of a (height, ...) dense tensor.
    Rows may repeat (their values add up), as in the gradient of a shared embedding.
    `SelectedRows(rows, height)` (Paddle's Python constructor) makes one whose values are set
    through get_tensor().set(...)."""

    __slots__ = ("ids", "value", "full_height")

    def __init__(self, ids=None, value=None, height=0):
        if value is not None and not hasattr(value, "shape"):  # SelectedRows(rows, height)
            value, height = None, value
        self.ids = ids if ids is not None else np.zeros(0, dtype=np.int64)
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
        """The values, as a LoDTensor that reads and writes this SelectedRows' values."""
        return LoDTensor(_RowsHolder(self))

    def set_rows(self, rows):
        self.ids = np.asarray(rows, dtype=np.int64)

    def __len__(self):
        return len(self.ids)

    def set_height(self, height):
        self.full_height = int(height)

    def __repr__(self):
        return f"SelectedRows(rows={len(self.ids)}, height={self.full_height}, " \
               f"width={list(self.value.shape[1:])}, dtype={self.value.dtype})"


def to_dense(value):
    return value.to_dense() if isinstance(value, SelectedRows) else value


class _RowsHolder:
    """The holder a SelectedRows' get_tensor() works on: its value attribute."""

    __slots__ = ("rows", "lod")

    def __init__(self, rows):
        self.rows, self.lod = rows, []

    @property
    def value(self):
        return self.rows.value

    @value.setter
    def value(self, value):
        self.rows.value = value


class _Holder:
    """A mutable cell holding one value (an array, a SelectedRows or None)."""

    __slots__ = ("value", "lod")

    def __init__(self, value=None):
        self.value = value
        self.lod = []


class LoDTensor:
    """A dense tensor as Fluid exposes it: `set(array, place)`, `np.array(t)`, `shape()`, LoD.
    Tensors obtained from a Scope read and write the scope's storage."""

    def __init__(self, holder=None, lod=None):
        if isinstance(holder, (list, tuple)):  # LoDTensor(lod), Paddle's constructor
            holder, lod = None, holder
        self._holder = holder if holder is not None else _Holder()
        if lod:
            self.set_lod(lod)

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

    # --- Paddle's lower-level tensor API (tests and tools call these) -----------------------
    def _set_dims(self, dims):
        """The shape the next _alloc_* / _mutable_data gives the tensor."""
        self._dims = [int(d) for d in dims]

    def _mutable_data(self, place, dtype):
        """Allocate (zeros) for the _set_dims shape, or keep the data when shape and dtype
        match; returns the data's address, as Paddle does (an empty tensor gets shape [0])."""
        from .dtypes import convert_dtype
        value = self._holder.value
        shape = getattr(self, "_dims", None)
        if shape is None:
            shape = list(value.shape) if value is not None else [0]
        dtype = convert_dtype(dtype)
        if value is None or list(value.shape) != shape or value.dtype != dtype:
            self._holder.value = np.zeros(shape, dtype=dtype)
        value = self._holder.value
        return int(value.data.ptr) if hasattr(value, "data") and hasattr(value.data, "ptr") \
            else int(value.ctypes.data)

    def __getitem__(self, index):
        """A new tensor holding a copy of data[index] (Paddle's slicing of a Tensor)."""
        tensor = LoDTensor()
        tensor._holder.value = self._array()[index].copy()
        return tensor

    def _alloc_float(self, place):
        self._mutable_data(place, "float32")

    def _alloc_int(self, place):
        self._mutable_data(place, "int32")

    def _place(self):
        from .place import CPUPlace, CUDAPlace
        value = self._array()
        if isinstance(value, np.ndarray):
            return CPUPlace()
        return CUDAPlace(value.device.id)

    def _get_float_element(self, index):
        return float(self._array().reshape(-1)[index])

    def _set_float_element(self, index, value):
        self._array().reshape(-1)[index] = value

    _get_double_element = _get_float_element
    _set_double_element = _set_float_element

    def _clear(self):
        self._holder.value = None

    def _dtype(self):
        return self._array().dtype

    def _is_initialized(self):
        return self._holder.value is not None

    def _lod(self):
        """The holder's LoD, or the one its value carries (a LoDArray the runtime stored)."""
        return self._holder.lod or getattr(self._holder.value, "lod", None) or ()

    def lod(self):
        return [list(level) for level in self._lod()]

    def set_lod(self, lod):
        self._holder.lod = [list(level) for level in lod]

    def recursive_sequence_lengths(self):
        return [[b - a for a, b in zip(level[:-1], level[1:])] for level in self._lod()]

    def set_recursive_sequence_lengths(self, lengths):
        lod = []
        for level in lengths:
            offsets = [0]
            for n in level:
                offsets.append(offsets[-1] + int(n))
            lod.append(offsets)
        self._holder.lod = lod

    def has_valid_recursive_sequence_lengths(self):
        lod = self._lod()
        if not lod:
            return True
        return lod[-1][-1] == self._array().shape[0]

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


def create_random_int_lodtensor(recursive_seq_lens, base_shape, place, low, high):
    """fluid.create_random_int_lodtensor: an int64 LoDTensor of sum(last lengths) rows of
    base_shape, each value drawn uniformly from [low, high] (both included)."""
    if not isinstance(base_shape, list):
        raise TypeError(f"base_shape should be a list, got {type(base_shape).__name__}")
    shape = [sum(recursive_seq_lens[-1])] + base_shape
    data = np.random.randint(low, high + 1, shape).astype("int64")
    return create_lod_tensor(data, recursive_seq_lens, place)


class FetchedArray(np.ndarray):
    """What Executor.run returns for a one-element fetch of rank >= 1 (a loss of shape [1]):
    a plain ndarray that float() and int() accept, as NumPy 1.x did and as Fluid scripts
    rely on (`float(loss)`); NumPy 2 refuses them for arrays of rank > 0."""

    def __float__(self):
        if self.size == 1:
            return float(self.reshape(-1)[0])
        return np.ndarray.__float__(self)

    def __int__(self):
        if self.size == 1:
            return int(self.reshape(-1)[0])
        return np.ndarray.__int__(self)

    def __repr__(self):
        return repr(self.view(np.ndarray))


NUMPY1_FETCHES = [False]  # set by runtime.compat.install(): scripts written for Paddle 1.x


def fetched(array):
    """`array`, as a FetchedArray when it holds exactly one element in rank >= 1 and the
    `paddle` shim is installed (Fluid 1.x scripts ran on NumPy 1.x)."""
    if NUMPY1_FETCHES[0] and array.size == 1 and array.ndim >= 1 and type(array) is np.ndarray:
        return array.view(FetchedArray)
    return array
