"""Matrix products for the kernels: `matmul(a, b)` computes `a @ b`, and can be captured into a
CUDA graph.

CuPy refuses every cuBLAS call while a stream captures: its cublas.setStream raises
NotImplementedError ("calling cuBLAS API during stream capture is currently unsupported"),
although cuBLAS itself captures fine when its handle has a workspace of its own (cuBLAS's guide,
"CUDA Graphs Support"). So while runtime/cuda_graph.py captures a step (`capturing`), a product of
two float32 or float64 matrices goes to cuBLAS directly (ctypes, `Cublas`): a handle of the
runtime's own per device, set to the capturing stream, with a workspace of the graph's own
(32 MiB, made at the capture's first product from the memory serving it, the graph's pool: so
it lives as long as the graph, and graphs replayed at once on different streams never share
one). Eager steps and the CPU compute `a @ b` as before.

Row-major operands, and transposed views of row-major ones, go to column-major cuBLAS as they
lie: C = A B in row-major is C^T = B^T A^T in column-major, so B goes first, and a row-major
matrix read column-major is its transpose. Stacks of matrices (NumPy's broadcasting of the
leading dimensions: attention's batched products, grouped convolutions) are one strided-batched
GEMM. Other products (integers, mixed dtypes, vectors) are left to `a @ b`, which CuPy refuses
under capture: that step runs eagerly, with CuPy's message as the reason.
"""

import ctypes
import ctypes.util
import math
import os
import threading
from typing import NamedTuple, Optional

import numpy as np


class _State(threading.local):
    """Per thread: .capture, the capturing thread's `capturing` (None: not capturing; a class
    default, so reading it on a thread that never captured finds it without an AttributeError
    being raised and caught at each product)."""

    capture = None


_state = _State()

OP_N, OP_T = 0, 1  # cublasOperation_t
TF32_TENSOR_OP_MATH = 3  # cublasMath_t CUBLAS_TF32_TENSOR_OP_MATH
WORKSPACE_BYTES = 32 << 20  # cuBLAS's recommended workspace on Hopper


def matmul(a, b):
    """`a @ b`; while this thread captures a CUDA graph, a product cuBLAS can take directly goes
    there (CuPy would refuse it)."""
    capture = _state.capture
    if capture is None or not direct(a, b):
        return a @ b
    workspace = capture.workspace_for(capture.blas.cupy)
    if a.ndim == 2 and b.ndim == 2:
        return capture.blas.matmul(a, b, workspace)
    return capture.blas.matmul_stacked(a, b, workspace)


def direct(a, b) -> bool:
    """Whether the product goes to cuBLAS directly while capturing: matrices, or stacks of
    them (NumPy's broadcasting of the leading dimensions), of one floating dtype cuBLAS has a
    GEMM for."""
    return a.ndim >= 2 and b.ndim >= 2 and a.dtype == b.dtype and a.dtype.char in "fd"


class capturing:
    """`with capturing(blas):` the products this thread computes go to `blas` (a Cublas),
    whatever the kernels call them through; `workspace` is the capture's cuBLAS workspace
    (a device array, made at its first product), which must live as long as the graph."""

    def __init__(self, blas):
        self.blas, self.workspace = blas, None

    def workspace_for(self, xp):
        if self.workspace is None:  # (from the memory serving the capture: the graph's)
            self.workspace = xp.empty(WORKSPACE_BYTES, dtype="uint8")
        return self.workspace

    def __enter__(self):
        _state.capture = self
        return self

    def __exit__(self, *exc):
        _state.capture = None


class Operand(NamedTuple):
    """A row-major matrix as column-major cuBLAS is told to read it."""
    op: int  # OP_N or OP_T
    ld: int  # its leading dimension, in elements


def operand(x) -> Optional[Operand]:
    """How cuBLAS reads `x` (shape (rows, cols)) to get x^T: as it lies (C order, or a row
    stride of at least a row) or transposed (F order: x is the transpose of a C-order array);
    None when neither (the caller copies it into C order)."""
    rows, cols = x.shape
    item = x.itemsize
    if x.flags.c_contiguous:
        return Operand(OP_N, max(1, cols))
    if x.flags.f_contiguous:
        return Operand(OP_T, max(1, rows))
    row_stride, col_stride = x.strides
    if col_stride == item and row_stride % item == 0 and row_stride >= cols * item:
        return Operand(OP_N, row_stride // item)
    if row_stride == item and col_stride % item == 0 and col_stride >= rows * item:
        return Operand(OP_T, col_stride // item)
    return None


class GemmCall(NamedTuple):
    """The arguments of cublas<t>gemm for row-major C (m, n) = A (m, k) @ B (k, n)."""
    transa: int
    transb: int
    m: int
    n: int
    k: int
    lda: int
    ldb: int
    ldc: int


def gemm_call(a_operand: Operand, b_operand: Operand, m: int, n: int, k: int) -> GemmCall:
    """Column-major C^T (n, m) = B^T (n, k) A^T (k, m): B is cuBLAS's first matrix."""
    return GemmCall(b_operand.op, a_operand.op, n, m, k, b_operand.ld, a_operand.ld, max(1, n))


def _library_path() -> Optional[str]:
    """The first libcublas this process loaded, from /proc/self/maps: CuPy's, or PyTorch's
    where torch loaded one first (the same C API either way; the handle is ours alone)."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.rsplit(None, 1)[-1]
                if os.path.basename(path).startswith("libcublas.so"):
                    return path
    except OSError:
        pass
    return None


def _load_library(cupy):
    get_handle = getattr(cupy.cuda.device, "get_cublas_handle", None)
    if get_handle is not None:
        get_handle()  # CuPy loads its cuBLAS, so that one at least is mapped
    names = [_library_path(), "libcublas.so.13", "libcublas.so.12", "libcublas.so.11",
             ctypes.util.find_library("cublas")]
    errors = []
    for name in filter(None, names):
        try:
            return ctypes.CDLL(name)
        except OSError as err:
            errors.append(str(err))
    raise RuntimeError("cuBLAS's library was not found for the capture's products "
                       f"({'; '.join(errors) or 'no candidate'})")


def _declare(lib):
    p, i, s, ll = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t, ctypes.c_longlong
    gemm = [p, i, i, i, i, i, p, p, i, p, i, p, p, i]
    strided = [p, i, i, i, i, i, p, p, i, ll, p, i, ll, p, p, i, ll, i]
    signatures = {"cublasCreate_v2": [ctypes.POINTER(p)], "cublasSetStream_v2": [p, p],
                  "cublasSetWorkspace_v2": [p, p, s], "cublasSetMathMode": [p, i],
                  "cublasSgemm_v2": gemm, "cublasDgemm_v2": gemm,
                  "cublasSgemmStridedBatched": strided, "cublasDgemmStridedBatched": strided}
    for name, argtypes in signatures.items():
        function = getattr(lib, name)
        function.argtypes, function.restype = argtypes, ctypes.c_int


def _check(status: int, what: str):
    if status != 0:
        raise RuntimeError(f"{what} failed: cuBLAS status {status}")


class Cublas:
    """A cuBLAS handle of the runtime's own for one device: the GEMMs of a step being captured,
    each with the capture's workspace. One lock: the handle is not shared between threads at
    once."""

    SCALARS = {"f": ctypes.c_float, "d": ctypes.c_double}

    def __init__(self, cupy):
        self.cupy = cupy
        self.lib = _load_library(cupy)
        _declare(self.lib)
        self.handle = ctypes.c_void_p()
        _check(self.lib.cublasCreate_v2(ctypes.byref(self.handle)), "cublasCreate")
        if os.environ.get("CUPY_TF32", "0") != "0":  # as CuPy's own products compute
            _check(self.lib.cublasSetMathMode(self.handle, TF32_TENSOR_OP_MATH),
                   "cublasSetMathMode")
        self.gemms = {"f": self.lib.cublasSgemm_v2, "d": self.lib.cublasDgemm_v2}
        self.stacked_gemms = {"f": self.lib.cublasSgemmStridedBatched,
                              "d": self.lib.cublasDgemmStridedBatched}
        self.lock = threading.Lock()

    def matmul(self, a, b, workspace):
        """a (m, k) @ b (k, n) on the current stream; both of one dtype, float32 or float64;
        `workspace` a device array cuBLAS may use (WORKSPACE_BYTES)."""
        m, k, n = _dims(a, b)
        if m == 0 or n == 0 or k == 0:
            return self.cupy.zeros((m, n), a.dtype)
        a, a_op = self._readable(a)
        b, b_op = self._readable(b)
        out = self.cupy.empty((m, n), a.dtype)
        call = gemm_call(a_op, b_op, m, n, k)
        self._launch(self.gemms, workspace, call, a.dtype, "cublas gemm",
                     (b.data.ptr, call.lda, a.data.ptr, call.ldb), (out.data.ptr, call.ldc))
        return out

    def matmul_stacked(self, a, b, workspace):
        """a (..., m, k) @ b (..., k, n), the leading dimensions broadcast as NumPy does, as one
        strided-batched GEMM: a 2-D operand (or one whose leading dimensions all broadcast) is
        read with a batch stride of 0."""
        m, k, n = _dims(a, b)
        batch = _broadcast_shapes(a.shape[:-2], b.shape[:-2])
        count = math.prod(batch)
        if m == 0 or n == 0 or k == 0 or count == 0:
            return self.cupy.zeros(batch + (m, n), a.dtype)
        (a, a_op), a_stride = self._stack(a, batch, count)
        (b, b_op), b_stride = self._stack(b, batch, count)
        out = self.cupy.empty((count, m, n), a.dtype)
        call = gemm_call(a_op, b_op, m, n, k)
        self._launch(self.stacked_gemms, workspace, call, a.dtype, "cublas strided-batched gemm",
                     (b.data.ptr, call.lda, b_stride, a.data.ptr, call.ldb, a_stride),
                     (out.data.ptr, call.ldc, m * n, count))
        return out.reshape(batch + (m, n))

    def _launch(self, functions, workspace, call, dtype, what, operands, output):
        """functions[dtype](handle, the ops and dims, 1, *operands, 0, *output) on the current
        stream with `workspace` (set again each time: setting the stream puts cuBLAS's default
        one back)."""
        scalar = self.SCALARS[dtype.char]
        one, zero = scalar(1), scalar(0)
        with self.lock:
            _check(self.lib.cublasSetStream_v2(
                self.handle, self.cupy.cuda.get_current_stream().ptr), "cublasSetStream")
            _check(self.lib.cublasSetWorkspace_v2(self.handle, workspace.data.ptr,
                                                  workspace.nbytes), "cublasSetWorkspace")
            _check(functions[dtype.char](
                self.handle, call.transa, call.transb, call.m, call.n, call.k,
                ctypes.byref(one), *operands, ctypes.byref(zero), *output), what)

    def _stack(self, x, batch, count):
        """((x as `count` matrices cuBLAS can read, the first one's Operand), the stride from
        one matrix to the next in elements: 0 for a matrix every product shares)."""
        xp = self.cupy
        if x.ndim == 2:
            return self._readable(x), 0
        if x.shape[:-2] != batch:
            x = xp.broadcast_to(x, batch + x.shape[-2:])
        x = x.reshape((count,) + x.shape[-2:])  # (a copy where the leading dims do not merge)
        first = operand(x[0])
        if first is None or x.strides[0] < 0 or x.strides[0] % x.itemsize:
            x = xp.ascontiguousarray(x)
            first = operand(x[0])
        return (x, first), x.strides[0] // x.itemsize

    def _readable(self, x):
        """(x, or a C-order copy where cuBLAS cannot read it as it lies; its Operand)."""
        found = operand(x)
        if found is None:
            x = self.cupy.ascontiguousarray(x)
            found = operand(x)
        return x, found


def _dims(a, b) -> tuple:
    """(m, k, n) of a (..., m, k) @ b (..., k, n); ValueError when the k differ."""
    (m, k), (k2, n) = a.shape[-2:], b.shape[-2:]
    if k != k2:
        raise ValueError(f"matmul: inner dimensions differ, {list(a.shape)} @ {list(b.shape)}")
    return m, k, n


def _broadcast_shapes(a_batch: tuple, b_batch: tuple) -> tuple:
    """NumPy's broadcasting of the two operands' leading dimensions."""
    try:
        return tuple(np.broadcast_shapes(a_batch, b_batch))
    except ValueError:
        raise ValueError(f"matmul: the leading dimensions do not broadcast: {a_batch} and "
                         f"{b_batch}") from None


_handles = {}
_handles_lock = threading.Lock()


def capture_blas(cupy) -> Cublas:
    """The current device's Cublas, made on first use (before a capture begins: cuBLAS
    allocates as it creates a handle)."""
    device = cupy.cuda.runtime.getDevice()
    with _handles_lock:
        blas = _handles.get(device)
        if blas is None:
            blas = _handles[device] = Cublas(cupy)
        return blas
