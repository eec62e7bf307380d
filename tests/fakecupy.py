"""A fake of exactly the CuPy names runtime/memory/device.py uses, for CPU-only tests.

Device memory is virtual: cudaMalloc hands out addresses from a counter and keeps the books
(free bytes per device, live allocations), since the pool only does arithmetic on addresses (the
one write, cudaMemset for FLAGS_init_allocated_mem, is recorded, not performed). So a fake device
can have gigabytes without the test allocating any. Every call is counted: `mallocs` (sizes, in
order), `frees` (addresses), `memsets`, `devices_entered`. `asarray` makes a FakeArray (host
values plus device memory from the current allocator), enough for the executor's feed; `empty`
one whose `set(host, stream)` is counted in `copies` (bytes, from pinned memory?, stream), and
`cuda.alloc_pinned_memory` in `pinned_allocs` (the reader's double buffer).

Streams and events (runtime/gpu_timing.py): `cuda.get_current_stream().synchronize()` is counted
in `stream_syncs` (device ids), `cuda.Event().record()` in `events_recorded`, its
`synchronize()` in `event_syncs`, `cuda.get_elapsed_time` in `elapsed_reads`,
`cuda.runtime.deviceSynchronize()` in `device_syncs`; `order` lists allocations, event
records and stream waits in call order. Each record
advances a virtual device clock by `event_tick_ms`; work counts as done only up to the last
synchronisation, and reading the elapsed time of an event not yet done raises
cudaErrorNotReady, as CUDA does. With `numpy_kernels=True` the module also answers NumPy's
names (`fake.matmul` is `numpy.matmul`) and `asarray` gives NumPy arrays, so the executor can
run a whole program on a CUDAPlace. With `strict_kernels=True` it answers them with strict
device arrays instead (tests/strictcupy.py): NumPy's kernels, but host arrays mixed into device
computations and implicit device-to-host conversions raise TypeError, as CuPy does, and every
array takes its memory from `cuda.alloc` (the runtime's device pool, when installed).

    fake = fakecupy.FakeCupy(devices=2, total_bytes=1000 * MB)
    fakecupy.inject(monkeypatch, fake)   # runtime sees it as CuPy with 2 GPUs

`restore_gpu_flags` (an autouse fixture, once imported) puts the GPU pool's flags back.
"""

import contextlib
import threading
import time
import types
import weakref

import numpy as np
import pytest

import runtime as fluid
from strictcupy import StrictKernels

MB = 1 << 20
GPU_FLAGS = ["FLAGS_allocator_strategy", "FLAGS_fraction_of_gpu_memory_to_use",
             "FLAGS_initial_gpu_memory_in_mb", "FLAGS_reallocate_gpu_memory_in_mb",
             "FLAGS_gpu_memory_limit_mb", "FLAGS_gpu_allocator_retry_time",
             "FLAGS_init_allocated_mem", "FLAGS_eager_delete_tensor_gb"]


@pytest.fixture(autouse=True)
def restore_gpu_flags():
    """Put the flags of the GPU pool back after each test (import it into a test module)."""
    saved = fluid.get_flags(GPU_FLAGS)
    try:
        yield
    finally:
        fluid.set_flags(saved)


class CUDARuntimeError(RuntimeError):
    """As cupy_backends.cuda.api.runtime.CUDARuntimeError: a failed CUDA runtime call."""


class UnownedMemory:
    """As cupy.cuda.UnownedMemory: memory someone else owns; keeps `owner` alive."""

    def __init__(self, ptr, size, owner, device_id=-1):
        if device_id < 0 and ptr == 0:  # CuPy looks the device up from the pointer otherwise
            raise RuntimeError("UnownedMemory requires explicit device ID for a null pointer.")
        self.ptr, self.size, self.owner, self.device_id = ptr, size, owner, device_id


class MemoryPointer:
    """As cupy.cuda.MemoryPointer: a memory object and an offset into it."""

    def __init__(self, mem, offset):
        assert mem.ptr != 0 or offset == 0
        self.mem, self.ptr = mem, mem.ptr + offset

    @property
    def device_id(self):
        return self.mem.device_id


class FakeArray:
    """What `fake.asarray` gives: the host values, and device memory from CuPy's allocator."""

    def __init__(self, fake, value):
        self.fake, self.host = fake, value
        self.nbytes, self.shape, self.dtype = value.nbytes, value.shape, value.dtype
        self.data = fake.cuda.alloc(value.nbytes)
        self.base = None

    def set(self, host, stream=None):
        """ndarray.set: copy `host` in on `stream`; recorded in `fake.copies` as (bytes,
        from pinned memory, the stream)."""
        if not isinstance(host, np.ndarray):  # CuPy's checks, in its order
            raise TypeError("Only numpy.ndarray can be set to cupy.ndarray")
        if host.dtype != self.dtype:
            raise TypeError(f"{host.dtype} array cannot be set to {self.dtype} array")
        if host.shape != self.shape:
            raise ValueError(f"Shape mismatch. Old shape: {self.shape}, new shape: {host.shape}")
        pinned = isinstance(_root(host), FakePinned)
        self.fake.copies.append((host.nbytes, pinned, stream))
        self.host = np.array(host, copy=True)


class FakePinned(bytearray):
    """cupy.cuda.alloc_pinned_memory's PinnedMemoryPointer: a writable buffer with size(),
    rounded up to 512 bytes as CuPy's default PinnedMemoryPool does (so size() may exceed the
    request, and np.frombuffer needs its count)."""

    def size(self):
        return len(self)


def _root(array):
    """The object owning an array's memory (through views and NumPy's memoryview)."""
    while isinstance(array, np.ndarray) and array.base is not None:
        array = array.base
    return array.obj if isinstance(array, memoryview) else array


class FakeCupy(StrictKernels):
    """The module: `fake.cuda.runtime.malloc(...)`, `fake.cuda.Device(0)`, ..."""

    def __init__(self, devices=1, total_bytes=1000 * MB, malloc_delay_s=0.0, numpy_kernels=False,
                 event_tick_ms=0.0, strict_kernels=False):
        self.total_bytes, self.malloc_delay_s = total_bytes, malloc_delay_s
        self.numpy_kernels, self.event_tick_ms = numpy_kernels, event_tick_ms
        self.strict_kernels = strict_kernels
        self.stream_syncs, self.events_recorded, self.event_syncs, self.elapsed_reads = [], 0, 0, 0
        self.device_syncs = []
        self._device_buffers = {}  # strict kernels: data.ptr -> weak ref to the array owning it
        self._pinned_buffers = []  # (host address, size, weak ref to the FakePinned)
        self.host_reads = 0  # device-to-host reads (get, int(), item, ...) outside captures
        self.device_copies = 0  # cuda.runtime.memcpyAsync device to device
        self.device_ms, self._seq, self._done_seq = 0.0, 0, 0
        self.used = [0] * devices  # bytes cudaMalloc'd per device (by anyone)
        self.live = {}  # address -> (device, size)
        self.mallocs, self.frees, self.memsets = [], [], []
        self._next_addr = 1 << 40
        self._device = threading.local()
        self._default_allocator = self._raw_alloc
        self._allocator = self._default_allocator
        self._thread_allocator = threading.local()
        self.devices_entered = []  # the ids of `with cuda.Device(i)`, in order
        self.copies, self.pinned_allocs, self.stream_waits = [], [], []
        self.order = []  # ("alloc", size), ("record", stream), ("wait", stream), in call order
        stream_type = lambda non_blocking=False: FakeStream(  # noqa: E731
            self, self.current_device(), non_blocking)
        stream_type.null = FakeStream(self, None, default=True)
        self._capture = None  # the stream capture under way (strict kernels), or None
        self.graph_launches = 0
        self.frees_while_capturing = []  # cudaFree'd addresses while a stream captured
        self._current_streams = threading.local()
        self.cuda = types.SimpleNamespace(
            runtime=types.SimpleNamespace(
                malloc=self._malloc, free=self._free, memset=self._memset,
                memGetInfo=self._mem_get_info, getDeviceCount=lambda: len(self.used),
                CUDARuntimeError=CUDARuntimeError, deviceSynchronize=self._device_synchronize,
                getDeviceProperties=lambda i: {"name": b"Fake GPU", "totalGlobalMem":
                                               self.total_bytes},
                memcpyAsync=self._memcpy_async, memcpyDeviceToHost=MEMCPY_DEVICE_TO_HOST,
                memcpyDeviceToDevice=MEMCPY_DEVICE_TO_DEVICE,
                getDevice=self.current_device),
            Device=self._device_context, UnownedMemory=UnownedMemory, MemoryPointer=MemoryPointer,
            set_allocator=self._set_allocator, get_allocator=self._get_allocator,
            using_allocator=self._using_allocator, alloc=self._alloc,
            get_current_stream=self._current_stream,
            Event=lambda block=False, disable_timing=False, interprocess=False: FakeEvent(
                self, disable_timing), get_elapsed_time=self._elapsed_time,
            Stream=stream_type, alloc_pinned_memory=self._alloc_pinned)

    def asarray(self, value, dtype=None):
        """cupy.asarray: a host array copied to the current device."""
        if self.strict_kernels:
            return self._strict_asarray(value, dtype)
        if self.numpy_kernels:
            return np.asarray(value, dtype)
        return FakeArray(self, value)

    def empty(self, shape, dtype=float):
        """cupy.empty: device memory from the current allocator (NumPy's with numpy_kernels)."""
        if self.strict_kernels:
            return self._strict_attr("empty")(shape, dtype)
        if self.numpy_kernels:
            return np.empty(shape, dtype)
        return FakeArray(self, np.empty(shape, dtype))

    def _alloc_pinned(self, size):
        self.pinned_allocs.append(size)
        pinned = FakePinned((size + 511) // 512 * 512)
        address = np.frombuffer(pinned, np.uint8).ctypes.data
        self._pinned_buffers.append((address, len(pinned), weakref.ref(pinned)))
        return pinned

    def __getattr__(self, name):
        if name.startswith("_") or name in ("numpy_kernels", "strict_kernels"):
            raise AttributeError(name)
        if self.strict_kernels:
            return self._strict_attr(name)
        if self.numpy_kernels:
            return getattr(np, name)
        if name == "ndarray":  # cupy.ndarray: what asarray/empty give here
            return FakeArray
        raise AttributeError(name)

    # --- streams and events -------------------------------------------------------------------
    def _streams(self):
        stack = getattr(self._current_streams, "stack", None)
        if stack is None:
            stack = self._current_streams.stack = []
        return stack

    def _current_stream(self):
        """The innermost `with stream`, else the device's default stream."""
        stack = self._streams()
        return stack[-1] if stack else FakeStream(self, self.current_device(), default=True)

    def _record(self, event):
        self.order.append(("record", event.stream))
        self.events_recorded += 1
        self._seq += 1
        self.device_ms += self.event_tick_ms
        event.seq, event.stamp_ms = self._seq, self.device_ms

    def _device_synchronize(self):
        """cudaDeviceSynchronize: every stream of the current device done."""
        self._not_capturing("cudaDeviceSynchronize")
        self.device_syncs.append(self.current_device())
        self._done_seq = self._seq

    def _elapsed_time(self, start, end):
        """cupy.cuda.get_elapsed_time: milliseconds between two recorded, completed events."""
        self.elapsed_reads += 1
        for event in (start, end):
            if event.seq is None or event.disable_timing:
                raise CUDARuntimeError("cudaErrorInvalidResourceHandle: event not recorded, "
                                       "or made with disable_timing")
            if event.seq > self._done_seq:
                raise CUDARuntimeError("cudaErrorNotReady: device not ready")
        return end.stamp_ms - start.stamp_ms

    # --- cudaSetDevice ------------------------------------------------------------------------
    def current_device(self):
        return getattr(self._device, "id", 0)

    @contextlib.contextmanager
    def _device_context(self, device_id):
        if not 0 <= device_id < len(self.used):
            raise CUDARuntimeError("cudaErrorInvalidDevice: invalid device ordinal")
        self.devices_entered.append(device_id)
        previous, self._device.id = self.current_device(), device_id
        try:
            yield
        finally:
            self._device.id = previous

    # --- the runtime calls --------------------------------------------------------------------
    def _malloc(self, size):
        device = self.current_device()
        if self.malloc_delay_s:
            time.sleep(self.malloc_delay_s)
        if self.used[device] + size > self.total_bytes:
            raise CUDARuntimeError("cudaErrorMemoryAllocation: out of memory")
        addr = self._next_addr
        self._next_addr += (size + 511) // 512 * 512 + 512  # cudaMalloc aligns to 256 at least
        self.used[device] += size
        self.live[addr] = (device, size)
        self.mallocs.append(size)
        return addr

    def _free(self, addr):
        capture = self.__dict__.get("_capture")
        if capture is not None:  # legal in relaxed mode, but a graph's memory must not go
            self.frees_while_capturing.append(addr)
        if addr not in self.live:
            raise CUDARuntimeError(f"cudaErrorInvalidValue: {addr:#x} was not cudaMalloc'd")
        device, size = self.live.pop(addr)
        self.used[device] -= size
        self.frees.append(addr)

    def _memset(self, addr, value, size):
        device, block = self._containing(addr)
        assert device == self.current_device(), "cudaMemset on another device's memory"
        assert addr + size <= block[0] + block[1], "cudaMemset past the end of an allocation"
        self.memsets.append((addr, value, size))

    def _containing(self, addr):
        for base, (device, size) in self.live.items():
            if base <= addr < base + size:
                return device, (base, size)
        raise CUDARuntimeError(f"cudaErrorInvalidValue: {addr:#x} is not device memory")

    def _mem_get_info(self):
        device = self.current_device()
        return self.total_bytes - self.used[device], self.total_bytes

    # --- CuPy's allocator ---------------------------------------------------------------------
    def _raw_alloc(self, size):
        """CuPy's plain allocator (what `set_allocator(None)` restores): one cudaMalloc,
        freed when the memory object dies."""
        addr = self._malloc(size)
        return MemoryPointer(UnownedMemory(addr, size, _Freer(self, addr), self.current_device()),
                             0)

    def _alloc(self, size):
        """cupy.cuda.alloc (what ndarray creation calls, with size 0 too): the current
        allocator; noted in `order` as ("alloc", size)."""
        self.order.append(("alloc", size))
        return self._get_allocator()(size)

    def _set_allocator(self, allocator=None):
        self._allocator = allocator if allocator is not None else self._default_allocator

    def _get_allocator(self):
        allocator = getattr(self._thread_allocator, "value", None)
        return allocator if allocator is not None else self._allocator

    @contextlib.contextmanager
    def _using_allocator(self, allocator=None):
        previous = getattr(self._thread_allocator, "value", None)
        self._thread_allocator.value = allocator if allocator is not None else self._raw_alloc
        try:
            yield
        finally:
            self._thread_allocator.value = previous


MEMCPY_DEVICE_TO_HOST, MEMCPY_DEVICE_TO_DEVICE = 2, 3  # cudaMemcpyKind


class FakeStream:
    """As cupy.cuda.Stream: synchronize() waits for everything queued on it; `with stream`
    makes it current (`cuda.get_current_stream()` answers it); wait_event(e) is recorded in
    `fake.stream_waits` as (stream, event). `cuda.Stream.null` is the null stream (device None).
    With strict kernels a non-default stream can capture a CUDA graph (tests/strictcupy.py):
    begin_capture() / end_capture() -> a graph whose launch() replays the captured kernels."""

    def __init__(self, fake, device_id, non_blocking=False, default=False):
        self.fake, self.device_id, self.non_blocking = fake, device_id, non_blocking
        self.default = default
        self.ptr = 0 if default else id(self)  # cudaStream_t (the null stream's is 0)

    def synchronize(self):
        self.fake._not_capturing("cudaStreamSynchronize")
        self.fake.stream_syncs.append(self.device_id)
        self.fake._done_seq = self.fake._seq

    def wait_event(self, event):
        self.fake.order.append(("wait", self))
        self.fake.stream_waits.append((self, event))

    def begin_capture(self, mode=None):
        if self.default or self.device_id is None:
            raise RuntimeError("cannot capture on the default (legacy) stream")
        self.fake._begin_capture(self)

    def end_capture(self):
        return self.fake._end_capture(self)

    def is_capturing(self):
        capture = getattr(self.fake, "_capture", None)
        return capture is not None and capture.stream is self

    def __enter__(self):
        self.fake._streams().append(self)
        return self

    def __exit__(self, *exc):
        self.fake._streams().pop()
        return False


class FakeEvent:
    """As cupy.cuda.Event: record() on the current stream, synchronize() waits for it."""

    def __init__(self, fake, disable_timing=False):
        self.fake, self.seq, self.stamp_ms, self.stream = fake, None, None, None
        self.disable_timing = disable_timing

    def record(self, stream=None):
        self.stream = stream
        self.fake._record(self)

    def synchronize(self):
        self.fake._not_capturing("cudaEventSynchronize")
        self.fake.event_syncs += 1
        self.fake._done_seq = max(self.fake._done_seq, self.seq or 0)


class _Freer:
    def __init__(self, fake, addr):
        self.fake, self.addr = fake, addr

    def __del__(self):
        self.fake._free(self.addr)


def train(place, build, feeds, between=None):
    """(the loss of each step, the executor) of `build()`'s (main, startup, loss) trained on
    `place` in a scope of its own; `between(step, exe, main)` runs after each step. Fetches
    are host arrays (return_numpy), never device ones."""
    with fluid.unique_name.guard():
        main, startup, loss = build()
    exe = fluid.Executor(place)
    losses = []
    with fluid.scope_guard(fluid.Scope()):
        exe.run(startup)
        for i, feed in enumerate(feeds):
            value, = exe.run(main, feed=feed, fetch_list=[loss])
            assert type(value) is np.ndarray
            losses.append(float(value.reshape(-1)[0]))
            if between is not None:
                between(i, exe, main)
    return losses, exe


def inject(monkeypatch, fake):
    """Make the runtime see `fake` as CuPy with its GPUs; device pools start afresh."""
    from runtime import backend, executor, gemm, memory, place

    status = lambda: (fake, len(fake.used), "")  # noqa: E731
    for module in (backend, place, executor):
        monkeypatch.setattr(module, "cupy_status", status)
    from strictcupy import FakeCublasLibrary
    monkeypatch.setattr(gemm, "_handles", {})  # gemm.Cublas itself, on the fake's cuBLAS
    monkeypatch.setattr(gemm, "_load_library", lambda cupy: FakeCublasLibrary(cupy))
    monkeypatch.setattr(memory, "_pools", {k: v for k, v in memory._pools.items()
                                           if not k.startswith("gpu")})
