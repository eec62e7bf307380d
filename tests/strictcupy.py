"""Strict device arrays for the fake CuPy (`FakeCupy(strict_kernels=True)`, tests/fakecupy.py).

A DeviceArray wraps a NumPy array, as cupy.ndarray wraps device memory, and refuses what CuPy
refuses: `np.asarray(dev)` (no implicit device-to-host copy: use `.get()`), and any host
`numpy.ndarray` operand of a ufunc, a module function or a setitem value (CuPy: "Unsupported
type <class 'numpy.ndarray'>"). Python scalars and NumPy scalars (np.float32(1)) are fine, and
host arrays are fine as indices (CuPy copies them over). Everything else is NumPy's: ufuncs and
NumPy functions applied to DeviceArrays dispatch (`__array_ufunc__`/`__array_function__`) to
NumPy on the wrapped data, the module functions (`fake.exp`, `fake.zeros`, ...) are NumPy's, and
results come back as DeviceArrays (a NumPy scalar too: CuPy's reductions give 0-d arrays).
`asarray`/`array` copy host data in. `ufunc.at` is limited to the ufuncs CuPy implements it for.

Memory is CuPy's: each new array takes `cuda.alloc(nbytes)` from the fake's current allocator
(so the runtime's device pool serves it and gets it back when the array dies); a view shares
its base's memory (`base` is the owning array, `data.ptr` offset into it).

CUDA graphs (`stream.begin_capture()` ... `stream.end_capture()` -> graph, `graph.launch()`):
captured work does not run. The fake runs each kernel of the capturing thread as it comes (so
shapes and errors are real) and records it; at the end of the capture every array that existed
before and that a captured kernel touched is put back as it was, and every array the capture made
is filled with garbage (NaN, or 0x5A bytes), as device memory nobody wrote. Other threads (a
reader's) go on as usual. `launch()` runs the recorded kernels again, in order, on the arrays'
current contents, writing into the same arrays. What CuPy refuses while a stream captures raises
CUDARuntimeError and invalidates the capture (end_capture then raises): a device-to-host read
(`int(x)`, `item()`), a host-to-device copy (`asarray(host)`, `set()`), a synchronisation, and a
result whose size depends on the data (nonzero, a boolean mask). As CuPy 14, it also refuses,
without invalidating the capture, `get()` (RuntimeError) and anything it computes with cuBLAS
(matmul, dot, ...: NotImplementedError). What CUDA itself captures is allowed:
`cuda.runtime.memcpyAsync` into pinned memory, and cuBLAS on a handle of the caller's own
(`FakeCublasLibrary`, which stands in for libcublas, so runtime/gemm.py runs as on a GPU).
"""

import ctypes
import threading
import weakref

import numpy as np

IMPLICIT = ("Implicit conversion to a NumPy array is not allowed. Please use `.get()` to "
            "construct a NumPy array explicitly.")
# cupy.ufunc.at exists only for these (docs.cupy.dev, reference/ufunc.html)
AT_UFUNCS = {"add", "subtract", "maximum", "minimum", "bitwise_and", "bitwise_or",
             "bitwise_xor"}


# functions whose result's size CuPy reads back from the device (a synchronisation)
SIZE_READS = frozenset("nonzero flatnonzero argwhere unique compress extract".split())
CAPTURE_UNSUPPORTED = ("cudaErrorStreamCaptureUnsupported: operation not permitted when stream "
                       "is capturing")

# what CuPy computes with cuBLAS, whose every call it refuses while a stream captures (its
# cublas.setStream raises): runtime/gemm.py takes the products to a handle of its own instead
CUBLAS_CALLS = frozenset("matmul dot tensordot einsum inner vdot".split())
CUBLAS_REFUSED = "calling cuBLAS API during stream capture is currently unsupported"
# CuPy's sorts are all stable; it refuses any other kind by name
SORTS = frozenset(("sort", "argsort"))

# methods that launch no kernel on the current device (views, or copies CuPy routes itself)
_NO_KERNEL = frozenset("reshape view transpose swapaxes squeeze copy".split())


def _unsupported(value):
    return TypeError(f"Unsupported type {type(value)}")


def _root(array):
    while isinstance(array, np.ndarray) and array.base is not None:
        array = array.base
    return array


def _address(array):
    return array.__array_interface__["data"][0]


class DeviceArray(np.lib.mixins.NDArrayOperatorsMixin):
    """As cupy.ndarray: device data (here a NumPy array), reachable only through CuPy."""

    __array_priority__ = 100  # as CuPy's: NumPy defers to it

    def __init__(self, fake, host, base=None):
        self._fake, self._a = fake, host
        self.base = base
        if base is None:
            self.device_id = fake.current_device()  # CuPy allocates on the current device
            self.data = fake.cuda.alloc(host.nbytes)
            fake._device_buffers[self.data.ptr] = weakref.ref(self)  # for memcpyAsync
            capture = fake._capturing()
            if capture is not None:
                capture.made(self)
        else:
            self.device_id = base.device_id
            offset = _address(host) - _address(base._a) if host.size else 0
            self.data = type(base.data)(base.data.mem, base.data.ptr - base.data.mem.ptr
                                        + offset)

    # --- what CuPy refuses --------------------------------------------------------------------
    def __array__(self, dtype=None, copy=None):
        raise TypeError(IMPLICIT)

    def get(self, stream=None, order="C", out=None, blocking=True):
        """A host copy (cupy.ndarray.get); CuPy 14 refuses it while the stream captures, even
        without blocking into pinned memory (cuda.runtime.memcpyAsync is captured)."""
        if self._fake._capturing() is not None:
            raise RuntimeError("the current stream is capturing, so D2H transfers are "
                               "disallowed")
        self._fake._host_read("cudaMemcpy (device to host)")
        if out is not None:
            out[...] = self._a
            return out
        return np.array(self._a, order=order, copy=True)

    def set(self, host, stream=None):
        """ndarray.set: copy `host` in on `stream`; recorded in `fake.copies`."""
        from fakecupy import FakePinned, _root as pinned_root
        self._fake._not_capturing("cudaMemcpy (host to device)")
        if not isinstance(host, np.ndarray):
            raise TypeError("Only numpy.ndarray can be set to cupy.ndarray")
        if host.dtype != self.dtype:
            raise TypeError(f"{host.dtype} array cannot be set to {self.dtype} array")
        if host.shape != self.shape:
            raise ValueError(f"Shape mismatch. Old shape: {self.shape}, new shape: {host.shape}")
        self._fake.copies.append((host.nbytes, isinstance(pinned_root(host), FakePinned), stream))
        self._a[...] = host

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.shape, "typestr": self.dtype.str, "version": 3,
                "data": (self.data.ptr, False),
                "strides": None if self._a.flags.c_contiguous else self.strides}

    # --- NumPy dispatch -----------------------------------------------------------------------
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if method == "at" and ufunc.__name__ not in AT_UFUNCS:
            raise TypeError(f"cupy.{ufunc.__name__}.at is not supported")
        return self._fake._call(getattr(ufunc, method) if method != "__call__" else ufunc,
                                inputs, kwargs)

    def __array_function__(self, func, types, args, kwargs):
        return self._fake._call(func, args, kwargs)

    # --- the ndarray interface ----------------------------------------------------------------
    shape = property(lambda self: self._a.shape)
    dtype = property(lambda self: self._a.dtype)
    ndim = property(lambda self: self._a.ndim)
    size = property(lambda self: self._a.size)
    nbytes = property(lambda self: self._a.nbytes)
    itemsize = property(lambda self: self._a.itemsize)
    strides = property(lambda self: self._a.strides)
    flags = property(lambda self: self._a.flags)
    T = property(lambda self: self._fake._wrap(self._a.T, (self,)))

    @shape.setter
    def shape(self, value):
        self._a.shape = value

    _METHODS = frozenset(
        "reshape astype sum mean max min prod argmax argmin transpose swapaxes copy ravel "
        "flatten fill view any all cumsum cumprod clip squeeze take repeat dot nonzero "
        "argsort sort var std round conj item tolist".split())

    def __getattr__(self, name):
        if name.startswith("_") or name not in DeviceArray._METHODS:
            raise AttributeError(f"'cupy.ndarray' object has no attribute {name!r}")
        method = getattr(self._a, name)
        fake = self._fake

        def call(*args, **kwargs):
            if name in ("item", "tolist"):  # explicit device-to-host reads, as CuPy allows
                fake._host_read(f"ndarray.{name} (device to host)")
                return method(*args, **kwargs)
            if name not in _NO_KERNEL:
                fake._check_device(self)
            if name == "fill":
                args = tuple(fake._setitem_value(a) for a in args)
            return fake._call(method, args, kwargs, sources=(self,), self_array=self)
        return call

    def __len__(self):
        return len(self._a)

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __bool__(self):
        self._fake._host_read("bool() (device to host)")
        return bool(self._a)

    def __int__(self):
        self._fake._host_read("int() (device to host)")
        return int(self._a)

    def __float__(self):
        self._fake._host_read("float() (device to host)")
        return float(self._a)

    def __index__(self):
        self._fake._host_read("an index (device to host)")
        return self._a.__index__()

    def __getitem__(self, key):
        fake = self._fake
        fake._check_device(self)
        index = fake._index(key)
        capture = fake._capturing()
        if capture is not None and _has_mask(index):
            fake._not_capturing("a boolean mask (its size is read back)")
        out = fake._wrap(self._a[index], (self,))
        if capture is not None and isinstance(out, DeviceArray) and out.base is None:
            source, target = self._a, out._a
            capture.record(lambda: _store(target, source[index]))
        return out

    def __setitem__(self, key, value):
        fake = self._fake
        fake._check_device(self)
        index, value = fake._index(key), fake._setitem_value(value)
        capture = fake._capturing()
        if capture is not None:
            if _has_mask(index):
                fake._not_capturing("a boolean mask (its size is read back)")
            capture.touch(self)
        target = self._a
        target[index] = value
        if capture is not None:
            capture.record(lambda: target.__setitem__(index, value))

    def __repr__(self):
        return f"DeviceArray({self._a!r})"

    def __copy__(self):
        return self.copy()

    def __deepcopy__(self, memo):
        return self.copy()

    def __reduce__(self):  # pickling a cupy array pickles its data (a sync, fine)
        return (_rebuild, (self._fake, self._a.copy()))


DeviceArray.__module__ = "cupy"  # type(x).__module__ as real CuPy's ndarray has it
DeviceArray.__qualname__ = DeviceArray.__name__ = "ndarray"


def _rebuild(fake, host):
    return DeviceArray(fake, host)


def _has_mask(index):
    parts = index if isinstance(index, tuple) else (index,)
    return any(isinstance(p, np.ndarray) and p.dtype == bool for p in parts)


def _store(target, value):
    """A replayed kernel's result into the memory (`target`, the buffer of the array the
    capture handed out) it was given."""
    value = np.asarray(value)
    assert value.shape == target.shape, (
        f"a replayed kernel made shape {value.shape}, the captured one {target.shape}")
    target[...] = value


def _garbage(host):
    """Fill `host` as device memory nobody wrote."""
    if host.dtype.kind in "fc":
        host[...] = np.nan
    elif host.size:  # (a 0-d array is viewed as bytes through a 1-d view of itself)
        host.reshape(-1).view(np.uint8)[:] = 0x5A


class _Capture:
    """One stream capture: the kernels to replay, and the arrays that existed before it (put
    back at its end: captured work does not run)."""

    def __init__(self, stream):
        self.stream, self.kernels, self.invalid = stream, [], None
        self.thread = threading.get_ident()
        self.created = []  # weak references to the arrays the capture made ...
        self.created_ids = set()  # ... and their ids (while they live)
        self.saved = {}  # id -> (array, its contents before the capture touched it)

    def record(self, kernel):
        self.kernels.append(kernel)

    def made(self, array):
        ids = self.created_ids
        ids.add(id(array))
        self.created.append(weakref.ref(array, lambda _, key=id(array): ids.discard(key)))

    def touch(self, array):
        """Keep `array`'s contents (its base's) before a captured kernel uses it."""
        base = array.base if array.base is not None else array
        if id(base) not in self.saved and id(base) not in self.created_ids:
            self.saved[id(base)] = (base, base._a.copy())

    def finish(self):
        for base, contents in self.saved.values():
            base._a[...] = contents
        for ref in self.created:
            array = ref()
            if array is not None:
                _garbage(array._a)


class FakeGraph:
    """cupy.cuda.Graph: launch() replays the captured kernels (counted in fake.graph_launches)."""

    def __init__(self, fake, kernels):
        self._fake, self._kernels = fake, kernels

    def launch(self, stream=None):
        self._fake.graph_launches += 1
        for kernel in self._kernels:
            kernel()

    def upload(self, stream=None):
        pass


class FakeCublasLibrary:
    """libcublas as runtime/gemm.py calls it through ctypes, on the strict fake's device memory,
    so that gemm.Cublas itself runs in CPU tests: handles, streams and workspaces are checked
    and noted; cublas<S|D>gemm_v2 is done in NumPy, column-major, on the operands' own bytes
    (each operand inside one device array's buffer, read as cuBLAS reads it: `ld` elements
    between columns), and while the stream captures it is recorded too (made again at each
    launch), as cuBLAS on a handle with its own workspace captures. `gemms` counts the
    products."""

    def __init__(self, fake):
        self.fake, self.gemms, self.workspaces = fake, 0, {}
        self.stream = 0
        functions = {"cublasCreate_v2": self._create, "cublasSetStream_v2": self._set_stream,
                     "cublasSetWorkspace_v2": self._set_workspace,
                     "cublasSetMathMode": lambda handle, mode: 0,
                     "cublasSgemm_v2": self._gemm(np.float32),
                     "cublasDgemm_v2": self._gemm(np.float64),
                     "cublasSgemmStridedBatched": self._stacked_gemm(np.float32),
                     "cublasDgemmStridedBatched": self._stacked_gemm(np.float64)}
        for name, function in functions.items():  # plain functions: ctypes-style attributes
            setattr(self, name, lambda *args, _f=function: _f(*args))

    def _create(self, handle_ref):
        handle_ref._obj.value = 0xB1A5
        return 0

    def _set_stream(self, handle, stream):
        self.stream = stream
        self.workspaces.pop(_value(handle), None)  # as cuBLAS: the default workspace again
        return 0

    def _set_workspace(self, handle, address, size):
        self.fake._device_memory(address, size)  # (a device array's memory, or it raises)
        self.workspaces[_value(handle)] = (address, size)
        return 0

    def _matrix(self, address, rows, cols, ld, dtype):
        """The column-major (rows, cols) matrix at `address` with leading dimension `ld`, as a
        writable NumPy view of the device array's buffer holding it."""
        assert ld >= max(1, rows), f"CUBLAS_STATUS_INVALID_VALUE: ld {ld} < rows {rows}"
        item = np.dtype(dtype).itemsize
        span = ((cols - 1) * ld + rows) * item
        buffer, offset = self.fake._device_memory(address, span)
        raw = (ctypes.c_char * buffer.nbytes).from_address(buffer.ctypes.data)
        flat = np.frombuffer(raw, np.uint8)[offset:offset + span]
        return np.lib.stride_tricks.as_strided(flat.view(dtype), (rows, cols), (item, ld * item)), \
            buffer

    def _gemm(self, dtype):
        def gemm(handle, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):
            return self._run(handle, [self._product(dtype, transa, transb, m, n, k, alpha, a,
                                                    lda, b, ldb, beta, c, ldc)])
        return gemm

    def _stacked_gemm(self, dtype):
        """cublas<S|D>gemmStridedBatched: `count` products, each operand `stride` elements
        after the one before (0: the same matrix for every product)."""
        def gemm(handle, transa, transb, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b,
                 beta, c, ldc, stride_c, count):
            item = np.dtype(dtype).itemsize
            assert stride_c >= m * n or count == 1, "the products' outputs overlap"
            return self._run(handle, [
                self._product(dtype, transa, transb, m, n, k, alpha, a + i * stride_a * item,
                              lda, b + i * stride_b * item, ldb, beta, c + i * stride_c * item,
                              ldc) for i in range(count)])
        return gemm

    def _product(self, dtype, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):
        """One column-major product as a function making it on the operands' memory."""
        stored_a = (m, k) if transa == 0 else (k, m)
        stored_b = (k, n) if transb == 0 else (n, k)
        first, keep_a = self._matrix(a, *stored_a, lda, dtype)
        second, keep_b = self._matrix(b, *stored_b, ldb, dtype)
        out, keep_c = self._matrix(c, m, n, ldc, dtype)
        scale, add = alpha._obj.value, beta._obj.value

        def run(_keep=(keep_a, keep_b, keep_c)):
            # op(A) op(B) made as its transpose, op(B)^T op(A)^T: the runtime's row-major
            # operands, in the layouts its CPU path multiplies them in, so that NumPy makes
            # the CPU path's BLAS call (a call with other transpose flags may round
            # differently on some CPUs: the comparisons with the CPU test the graph, not that)
            product_t = (second.T if transb == 0 else second) @ (first.T if transa == 0
                                                                 else first)
            out.T[...] = scale * product_t + (add * out.T if add else 0)
        return run

    def _run(self, handle, products):
        """Make the products now, and record them while the stream captures."""
        assert _value(handle) in self.workspaces, "no workspace of its own: a capture would " \
            "allocate one"
        for run in products:
            run()
        capture = self.fake._capturing()
        if capture is not None:
            assert self.stream == capture.stream.ptr, "cuBLAS set to a stream not capturing"
            for run in products:
                capture.record(run)
        self.gemms += 1
        return 0


def _value(handle):
    """A handle as ctypes passes it: the pointer's value (a c_void_p holds it in .value)."""
    return getattr(handle, "value", handle)


class StrictKernels:
    """The array side of the fake module (mixed into FakeCupy)."""

    # --- CUDA graphs ----------------------------------------------------------------------------
    def _capturing(self):
        """The capture under way in this thread, or None."""
        capture = self.__dict__.get("_capture")
        if capture is not None and capture.thread == threading.get_ident():
            return capture
        return None

    def _memcpy_async(self, dst, src, size, kind, stream):
        """cuda.runtime.memcpyAsync of `size` bytes of device memory at `src` (inside a device
        array's buffer: the same bytes, as laid out there). Device to device: into the device
        array holding `dst`, counted in `device_copies`, outside a capture only. Device to host,
        to host address `dst`: while a stream captures, the copy must be issued on that stream
        and go to pinned memory (to pageable memory it syncs, which a capture refuses); it is
        then recorded, and made at each launch into the pinned buffer, which must still exist.
        Outside a capture it is made at once and counted in host_reads."""
        from fakecupy import MEMCPY_DEVICE_TO_DEVICE, MEMCPY_DEVICE_TO_HOST
        assert kind in (MEMCPY_DEVICE_TO_HOST, MEMCPY_DEVICE_TO_DEVICE), kind
        buffer, offset = self._device_memory(src, size)
        capture = self._capturing()
        if kind == MEMCPY_DEVICE_TO_DEVICE:
            assert capture is None, "the fake copies device to device outside captures only"
            target, target_offset = self._device_memory(dst, size)
            ctypes.memmove(target.ctypes.data + target_offset, buffer.ctypes.data + offset, size)
            self.device_copies += 1
            return
        if capture is None:
            self._host_read("cudaMemcpyAsync (device to host)")
            ctypes.memmove(dst, buffer.ctypes.data + offset, size)
            return
        assert stream == capture.stream.ptr, "a copy on a stream that is not capturing " \
            "runs once, now, and is not part of the graph"
        pinned = next((ref for start, length, ref in self._pinned_buffers
                       if start <= dst and dst + size <= start + length and ref() is not None),
                      None)
        if pinned is None:
            self._not_capturing("cudaMemcpyAsync to pageable host memory")

        def copy():
            assert pinned() is not None, "the graph copies into pinned memory freed since"
            ctypes.memmove(dst, buffer.ctypes.data + offset, size)
        capture.record(copy)

    def _device_memory(self, address, size):
        """(the NumPy buffer of the live device array whose memory holds [address, +size), the
        offset in bytes into it); dead arrays are forgotten on the way."""
        for start, ref in list(self._device_buffers.items()):
            array = ref()
            if array is None:
                del self._device_buffers[start]
            elif start <= address and address + size <= start + array.nbytes:
                assert array._a.flags.c_contiguous or array._a.flags.f_contiguous
                return array._a, address - start
        raise AssertionError(f"no device array holds address {address:#x} (+{size})")

    def _host_read(self, what):
        """A device-to-host read (counted in host_reads): refused while capturing."""
        self._not_capturing(what)
        self.host_reads += 1

    def _not_capturing(self, what):
        """Raise, as CUDA does, when `what` is done while this thread's stream captures."""
        capture = self._capturing()
        if capture is not None:
            from fakecupy import CUDARuntimeError
            capture.invalid = capture.invalid or what
            raise CUDARuntimeError(f"{CAPTURE_UNSUPPORTED} ({what})")

    def _begin_capture(self, stream):
        from fakecupy import CUDARuntimeError
        if not self.strict_kernels:
            raise CUDARuntimeError("the fake captures CUDA graphs with strict kernels only")
        if self._capture is not None:
            raise CUDARuntimeError("cudaErrorIllegalState: a stream is capturing already")
        self._capture = _Capture(stream)

    def _end_capture(self, stream):
        from fakecupy import CUDARuntimeError
        capture = self._capture
        if capture is None or capture.stream is not stream:
            raise CUDARuntimeError("cudaErrorIllegalState: the stream is not capturing")
        self._capture = None
        capture.finish()
        if capture.invalid:
            raise CUDARuntimeError(f"cudaErrorStreamCaptureInvalidated: capture was "
                                   f"invalidated ({capture.invalid})")
        return FakeGraph(self, capture.kernels)

    def _strict_asarray(self, value, dtype=None, order=None, copy=None):
        if isinstance(value, DeviceArray):
            if dtype is None or np.dtype(dtype) == value.dtype:
                return value.copy() if copy else value
            return value.astype(dtype)
        capture = self._capturing()
        if capture is not None and np.ndim(value) == 0 and not isinstance(value, np.ndarray):
            out = DeviceArray(self, np.array(value, dtype=dtype))  # CuPy fills a scalar in:
            target, fill = out._a, out._a.copy()  # a kernel, no copy from the host
            capture.record(lambda: target.__setitem__(..., fill))
            return out
        self._not_capturing("cudaMemcpy (host to device)")
        if isinstance(value, (list, tuple)):
            value = [self._host_element(v) for v in value]
        return DeviceArray(self, np.array(value, dtype=dtype, order=order or "K", copy=True))

    def _host_element(self, value):
        if isinstance(value, DeviceArray):  # cupy.array([dev0d, ...]) gathers on the device
            return value._a
        return value

    def _strict_array(self, value, dtype=None, copy=True, order="K", ndmin=0):
        out = self._strict_asarray(value, dtype, order, copy=copy)
        return out if out.ndim >= ndmin else out.reshape((1,) * (ndmin - out.ndim) + out.shape)

    def _asnumpy(self, value, stream=None):
        return value.get() if isinstance(value, DeviceArray) else np.asarray(value)

    # --- unwrapping arguments, wrapping results --------------------------------------------------
    def _unwrap(self, value, sources):
        if isinstance(value, DeviceArray):
            self._check_device(value)
            sources.append(value)
            return value._a
        if isinstance(value, np.ndarray):
            raise _unsupported(value)
        if isinstance(value, (list, tuple)) and any(
                isinstance(v, (DeviceArray, np.ndarray, list, tuple)) for v in value):
            return type(value)(self._unwrap(v, sources) for v in value)
        return value

    def _call(self, fn, args, kwargs, sources=(), self_array=None):
        """fn (NumPy's) on the unwrapped arguments; host arrays refused; results wrapped."""
        capture = self._capturing()
        name = getattr(fn, "__name__", "")
        if capture is not None and name in SIZE_READS:
            self._not_capturing(f"{fn.__name__} (its result's size is read back)")
        if capture is not None and name in CUBLAS_CALLS:
            raise NotImplementedError(CUBLAS_REFUSED)
        if name in SORTS and kwargs.get("kind") not in (None, "stable"):
            raise ValueError("kind can only be None or 'stable'")
        sources = list(sources)
        args = [self._unwrap(a, sources) for a in args]
        out = kwargs.get("out")
        kwargs = {k: self._unwrap(v, sources) for k, v in kwargs.items()}
        if capture is not None:
            for source in sources:  # any of them may be written (out=, fill, copyto, at)
                capture.touch(source)
        result = fn(*args, **kwargs)
        if out is not None:  # written in place: hand back the device array(s) given
            if capture is not None:
                capture.record(lambda: fn(*args, **kwargs))
            return out[0] if isinstance(out, tuple) and len(out) == 1 else out
        if self_array is not None and result is self_array._a:
            return self_array  # astype(copy=False) and friends: the array itself
        wrapped = self._wrap(result, sources)
        if capture is not None:
            capture.record(_replayer(fn, args, kwargs, wrapped))
        return wrapped

    def _wrap(self, result, sources):
        if isinstance(result, np.ndarray):
            root = _root(result)
            for src in sources:
                if _root(src._a) is root:  # a view of a device array: shares its memory
                    return DeviceArray(self, result, src.base if src.base is not None else src)
            return DeviceArray(self, result)
        if isinstance(result, np.generic):
            return DeviceArray(self, np.asarray(result))
        if isinstance(result, (tuple, list)):
            return type(result)(self._wrap(r, sources) for r in result)
        return result

    def _check_device(self, array):
        """CuPy runs a kernel on the current device; an array of another device needs peer
        access (without it CuPy raises this; with it, it warns of the slow path)."""
        current = self.current_device()
        if array.device_id != current:
            raise ValueError(f"Array device must be same as the current device: array device "
                             f"= {array.device_id} while current = {current}")

    def _index(self, key):
        """An index: device arrays unwrapped; host ints/slices/arrays are fine (CuPy copies
        host index arrays over: not while capturing)."""
        if isinstance(key, tuple):
            return tuple(self._index(k) for k in key)
        if isinstance(key, (np.ndarray, list)) and np.ndim(key) > 0:
            self._not_capturing("a host index array (copied to the device)")
        return self._unwrap(key, []) if isinstance(key, DeviceArray) else key

    def _setitem_value(self, value):
        if isinstance(value, DeviceArray):
            return self._unwrap(value, [])
        if isinstance(value, np.ndarray) and value.ndim > 0:
            raise _unsupported(value)  # CuPy: fill() with a non-scalar NumPy array
        return value

    def _strict_attr(self, name):
        """`fake.<name>`: NumPy's ufuncs and functions on device arrays; its constants/types."""
        special = {"asarray": self._strict_asarray, "array": self._strict_array,
                   "asnumpy": self._asnumpy, "ndarray": DeviceArray,
                   "get_array_module": lambda *a: self}
        if name in special:
            return special[name]
        target = getattr(np, name)
        if isinstance(target, np.ufunc):
            return _Ufunc(self, target)
        if callable(target) and not isinstance(target, type):
            return lambda *args, **kwargs: self._call(target, args, kwargs)
        return target


def _replayer(fn, args, kwargs, wrapped):
    """The kernel a capture records for fn's call: run again (which is the whole kernel where
    fn writes into an argument: fill, copyto, ufunc.at), its result stored in the memory the
    capture handed out (views and host values need nothing more). It holds buffers, not the
    device arrays, which die during and after the capture as CuPy's would."""
    def buffer(target):
        return target._a if isinstance(target, DeviceArray) and target.base is None else None

    many = isinstance(wrapped, (tuple, list))
    targets = [buffer(t) for t in wrapped] if many else [buffer(wrapped)]

    def replay():
        result = fn(*args, **kwargs)
        for target, value in zip(targets, result if many else [result]):
            if target is not None:
                _store(target, value)
    return replay


class _Ufunc:
    """cupy.<ufunc>: NumPy's, on device arrays only (`.at` where CuPy has it)."""

    def __init__(self, fake, ufunc):
        self._fake, self._ufunc = fake, ufunc
        self.__name__ = ufunc.__name__

    def __call__(self, *args, **kwargs):
        return self._fake._call(self._ufunc, args, kwargs)

    def at(self, *args):
        if self.__name__ not in AT_UFUNCS:
            raise AttributeError(f"cupy.{self.__name__}.at is not supported")
        return self._fake._call(self._ufunc.at, args, {})

    def __getattr__(self, name):  # reduce, outer, accumulate, nin, nout, ...
        target = getattr(self._ufunc, name)
        if callable(target):
            return lambda *args, **kwargs: self._fake._call(target, args, kwargs)
        return target
