"""Fused CPU kernels for the elementwise work that dominates a step besides the GEMMs: the
optimizer updates (sgd, momentum, Nesterov momentum), relu's gradient, and the bias + relu
pairs that BuildStrategy.fuse_elewise_add_act_ops merges (forward: relu(x + bias); backward:
relu's gradient and the bias's gradient, its column sums, in one pass).

Why: NumPy runs `v *= mu; v += g; p -= lr * v` as four passes over the parameter (one of them
writing a temporary), relu's gradient as two (a boolean mask, then the product); one compiled
loop does each in a single pass. They run on the calling thread: splitting an update with a
second thread was measured slower on the 2-core VM whatever its size (65,536 to 4 million
elements, after a GEMM: the loops are bound by memory bandwidth, which the cores share, and a
second thread competes with the BLAS threads that still spin after their GEMM).

The loops do exactly NumPy's operations in NumPy's order, one rounding each (compiled without
contraction into fused multiply-adds), so results are bit for bit those of the NumPy path,
which every op keeps: it serves other dtypes, mixed dtypes, non-contiguous arrays, machines
without a C compiler (`REASON` says why), and `ENABLED[0] = False` brings it back.
"""

import ctypes
import math
import sys

import numpy as np

from ..cbuild import build

ENABLED = [True]
REASON = ""
SMALL = 1024  # elements: below this NumPy's few calls cost less than one call into C

_SOURCE = r"""
#include <stddef.h>

/* Each loop is compiled for AVX-512, AVX2 and plain x86-64 and the best one the CPU has is
   picked when the library loads (the compiler's function multiversioning): the machine code
   stays portable, and the wide vectors round exactly as the narrow ones. */
#if defined(PT_VECTOR_CLONES) && defined(__x86_64__) && defined(__GNUC__)
#define PT_FAST __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define PT_FAST
#endif

#define KERNELS(T, S)                                                                         \
PT_FAST                                                                                      \
void pt_momentum_##S(T *restrict p, T *restrict vel, const T *restrict g, T lr, T mu,        \
                     long n, int nesterov) {                                                  \
    if (nesterov) {                                                                           \
        for (long i = 0; i < n; i++) {                                                        \
            T v = vel[i] * mu;                                                                \
            v = v + g[i];                                                                     \
            vel[i] = v;                                                                       \
            T step = mu * v;                                                                  \
            step = g[i] + step;                                                               \
            p[i] = p[i] - lr * step;                                                          \
        }                                                                                     \
        return;                                                                               \
    }                                                                                         \
    for (long i = 0; i < n; i++) {                                                            \
        T v = vel[i] * mu;                                                                    \
        v = v + g[i];                                                                         \
        vel[i] = v;                                                                           \
        p[i] = p[i] - lr * v;                                                                 \
    }                                                                                         \
}                                                                                             \
PT_FAST                                                                                      \
void pt_sgd_##S(T *restrict p, const T *restrict g, T lr, long n) {                          \
    for (long i = 0; i < n; i++) p[i] = p[i] - lr * g[i];                                     \
}                                                                                             \
PT_FAST                                                                                      \
void pt_relu_grad_##S(const T *out, const T *dout, T *dx, long n) {                          \
    for (long i = 0; i < n; i++) {  /* dx may be dout's buffer (inplace) */                   \
        T keep = out[i] > 0 ? (T)1 : (T)0;                                                    \
        dx[i] = dout[i] * keep;                                                               \
    }                                                                                         \
}                                                                                             \
PT_FAST                                                                                      \
void pt_bias_relu_##S(const T *x, const T *bias, T *out, long rows, long cols) {             \
    for (long r = 0; r < rows; r++) {  /* out may be x's buffer (inplace) */                  \
        const T *xr = x + r * cols;                                                           \
        T *o = out + r * cols;                                                                \
        for (long c = 0; c < cols; c++) {                                                     \
            T v = xr[c] + bias[c];                                                            \
            o[c] = (v > 0 || v != v) ? v : (T)0;  /* np.maximum(v, 0): NaN kept, -0 -> 0 */   \
        }                                                                                     \
    }                                                                                         \
}                                                                                             \
PT_FAST                                                                                      \
void pt_relu_grad_bias_##S(const T *out, const T *dout, T *dx, T *restrict db, long rows,    \
                           long cols) {                                                       \
    for (long c = 0; c < cols; c++) db[c] = 0;  /* NumPy's sum starts from +0 */              \
    for (long r = 0; r < rows; r++) {  /* dx may be dout's buffer (inplace) */                \
        const T *o = out + r * cols, *d = dout + r * cols;                                    \
        T *g = dx + r * cols;                                                                 \
        for (long c = 0; c < cols; c++) {                                                     \
            T keep = o[c] > 0 ? (T)1 : (T)0;                                                  \
            g[c] = d[c] * keep;                                                               \
        }                                                                                     \
        for (long c = 0; c < cols; c++)  /* the row, still in cache, onto the sums: row by */ \
            db[c] = db[c] + g[c];        /* row, as NumPy sums a C array over axis 0 */       \
    }                                                                                         \
}

KERNELS(float, f32)
KERNELS(double, f64)
"""

_FLAGS = ("-O3", "-ffp-contract=off", "-fno-math-errno")


class _Kernels:
    def __init__(self, lib):
        ptr, lng, intc = ctypes.c_void_p, ctypes.c_long, ctypes.c_int
        self.momentum, self.sgd, self.relu_grad = {}, {}, {}
        self.bias_relu, self.relu_grad_bias = {}, {}
        for dtype, suffix, scalar in ((np.dtype("float32"), "f32", ctypes.c_float),
                                      (np.dtype("float64"), "f64", ctypes.c_double)):
            momentum = getattr(lib, f"pt_momentum_{suffix}")
            momentum.argtypes = [ptr, ptr, ptr, scalar, scalar, lng, intc]
            momentum.restype = None
            sgd = getattr(lib, f"pt_sgd_{suffix}")
            sgd.argtypes = [ptr, ptr, scalar, lng]
            sgd.restype = None
            relu_grad = getattr(lib, f"pt_relu_grad_{suffix}")
            relu_grad.argtypes = [ptr, ptr, ptr, lng]
            relu_grad.restype = None
            bias_relu = getattr(lib, f"pt_bias_relu_{suffix}")
            bias_relu.argtypes = [ptr, ptr, ptr, lng, lng]
            bias_relu.restype = None
            relu_grad_bias = getattr(lib, f"pt_relu_grad_bias_{suffix}")
            relu_grad_bias.argtypes = [ptr, ptr, ptr, ptr, lng, lng]
            relu_grad_bias.restype = None
            self.momentum[dtype], self.sgd[dtype], self.relu_grad[dtype] = (
                momentum, sgd, relu_grad)
            self.bias_relu[dtype], self.relu_grad_bias[dtype] = bias_relu, relu_grad_bias


_loaded = []


def _library():
    """The kernels' library: with per-CPU clones of each loop where the compiler makes them
    (GCC and recent Clang on x86-64 Linux), else as plain portable code."""
    try:
        return ctypes.CDLL(build("cpu_kernels", _SOURCE, _FLAGS + ("-DPT_VECTOR_CLONES",)))
    except Exception:  # noqa: B902  (a compiler or loader without ifunc support)
        return ctypes.CDLL(build("cpu_kernels", _SOURCE, _FLAGS))


def _kernels():
    if not _loaded:
        global REASON
        try:
            _loaded.append(_Kernels(_library()))
        except (OSError, RuntimeError, AttributeError, Exception) as err:  # noqa: B902
            REASON = f"the fused CPU kernels could not be built ({type(err).__name__}: {err})"
            _loaded.append(None)
    return _loaded[0]


def _interface_address(array):
    return array.__array_interface__["data"][0]


def _data_offset():
    """Where an ndarray object holds its data pointer, relative to its own address (NumPy's
    PyArrayObject: right after the object header, stable across NumPy 1.x and 2.x), when that
    is verified here on arrays and views; None otherwise (then the slower
    __array_interface__ gives the addresses). Reading it costs a sixth of building an
    __array_interface__ dict, which was most of a fused call's Python overhead."""
    if sys.implementation.name != "cpython":  # (id() is the object's address in CPython)
        return None
    offset = ctypes.sizeof(ctypes.c_ssize_t) + ctypes.sizeof(ctypes.c_void_p)
    base = np.arange(64, dtype=np.float64)
    for a in (base, base[5:], base.reshape(8, 8)[1:, 2:], base.astype(np.float32)[3:],
              np.zeros((3, 4), np.float32)):
        if ctypes.c_void_p.from_address(id(a) + offset).value != _interface_address(a):
            return None
    return offset


_OFFSET = _data_offset()

if _OFFSET is not None:
    def _address(array, _at=ctypes.c_void_p.from_address, _offset=_OFFSET):
        """The data address of `array`, which must be an exact np.ndarray (what _dense
        accepts): any other object's memory at that offset is not a data pointer."""
        return _at(id(array) + _offset).value
else:
    _address = _interface_address


def _dense(*arrays):
    """True when the fused loops serve these arrays: NumPy, one float dtype, contiguous and
    writable where written, large enough to be worth a call into C."""
    first = arrays[0]
    if (not ENABLED[0] or type(first) is not np.ndarray or first.size < SMALL
            or first.dtype not in _FLOATS):
        return False
    dtype, size = first.dtype, first.size
    for a in arrays:
        if (type(a) is not np.ndarray or a.dtype != dtype or a.size != size
                or not a.flags.c_contiguous):
            return False
    return _kernels() is not None


_FLOATS = (np.dtype("float32"), np.dtype("float64"))


def _apart(nbytes, *addresses):
    """No two of the arrays share memory (the loops read and write them as separate), for
    arrays that _dense accepted (C-contiguous, `nbytes` each, at these addresses): what
    np.may_share_memory tells from the arrays' extents, which for contiguous arrays of one
    size overlap exactly when their starts are less than `nbytes` apart."""
    for i, a in enumerate(addresses):
        for b in addresses[i + 1:]:
            if -nbytes < a - b < nbytes:
                return False
    return True


def _scalar_lr(lr, dtype):
    return type(lr) is np.ndarray and lr.size == 1 and lr.dtype == dtype


def momentum(p, v, g, lr, mu, nesterov):
    """p, v updated in place as the NumPy path does (True), or False when it must run. `mu`
    must be a Python float: NumPy rounds it to the arrays' type, as the C call does (a NumPy
    float64 would make NumPy compute in double)."""
    if not (type(mu) is float and _dense(p, v, g) and p.flags.writeable and v.flags.writeable
            and _scalar_lr(lr, p.dtype)):
        return False
    at_p, at_v, at_g = _address(p), _address(v), _address(g)
    if not _apart(p.nbytes, at_p, at_v, at_g):
        return False
    _loaded[0].momentum[p.dtype](at_p, at_v, at_g, lr.item(), mu, p.size, int(bool(nesterov)))
    return True


def sgd(p, g, lr):
    if not (_dense(p, g) and p.flags.writeable and _scalar_lr(lr, p.dtype)):
        return False
    at_p, at_g = _address(p), _address(g)
    if not _apart(p.nbytes, at_p, at_g):
        return False
    _loaded[0].sgd[p.dtype](at_p, at_g, lr.item(), p.size)
    return True


def relu_grad(out, dout, buf):
    """dout * (out > 0) into `buf` (or a new array); None when the NumPy path must run."""
    if not _dense(out, dout) or out.shape != dout.shape:
        return None
    if buf is None:
        buf = np.empty_like(dout)
    elif not (type(buf) is np.ndarray and buf.dtype == dout.dtype and buf.size == dout.size
              and buf.flags.c_contiguous and buf.flags.writeable):
        return None
    _loaded[0].relu_grad[dout.dtype](_address(out), _address(dout), _address(buf), dout.size)
    return buf


def _rows_cols(shape, bias_shape):
    """(rows, cols) when a bias of `bias_shape` is added along the trailing dimensions of an
    array of `shape` (an fc's bias), else None."""
    n = len(bias_shape)
    if n == 0 or n > len(shape) or tuple(shape[len(shape) - n:]) != tuple(bias_shape):
        return None
    cols = math.prod(bias_shape)
    return (math.prod(shape) // cols, cols) if cols else None


def _output(buf, like, keep):
    """Where a kernel writes its result the shape of `like`: a new array, or `like`'s own
    buffer (`buf is like`: granted by the plan); None when that buffer cannot be written or
    shares memory with `keep`, an input read after it is written."""
    if buf is None:
        return np.empty_like(like)
    if buf is not like or not buf.flags.writeable or np.may_share_memory(keep, buf):
        return None
    return buf


def bias_relu(x, bias, buf):
    """np.maximum(x + bias, 0) for a bias along x's trailing dimensions, into `buf` (x's own
    buffer, granted, or None for a new array); None when the NumPy path must run."""
    if not (_dense(x) and type(bias) is np.ndarray and bias.dtype == x.dtype
            and bias.flags.c_contiguous):
        return None
    shape = _rows_cols(x.shape, bias.shape)
    out = _output(buf, x, bias) if shape is not None else None
    if out is None:
        return None
    _loaded[0].bias_relu[x.dtype](_address(x), _address(bias), _address(out), *shape)
    return out


def relu_grad_bias(out, dout, bias_shape, buf):
    """(dout * (out > 0), its sums over the rows: the bias's gradient, shaped `bias_shape`)
    for a bias along the trailing dimensions, the first into `buf` (dout's buffer, granted,
    or None for a new array); None when the NumPy path must run."""
    if not _dense(out, dout) or out.shape != dout.shape:
        return None
    shape = _rows_cols(dout.shape, bias_shape)
    if shape is None or shape[0] == 1 or shape[1] == 1:
        # one column: NumPy sums it pairwise, not row by row; one row (an add of equal
        # shapes): NumPy gives the gradient itself, -0 kept, where +0 + g is +0
        return None
    dx = _output(buf, dout, out)
    if dx is None:
        return None
    db = np.empty(tuple(bias_shape), dout.dtype)
    _loaded[0].relu_grad_bias[dout.dtype](_address(out), _address(dout), _address(dx),
                                          _address(db), *shape)
    return dx, db


# --- Python scalars as NumPy scalars of an array's type ----------------------------------------
TYPED = {}  # (value, dtype) -> the value as a scalar of that dtype (`typed`)


def typed(value, dtype):
    """`value` (a Python float or int) as a NumPy scalar of `dtype` when that is float32 or
    float64: the operand NumPy makes of a Python scalar beside an array of that dtype (NEP 50:
    the scalar takes the array's type), so a ufunc gives the same results with either; with
    the NumPy scalar it skips working that out at each call (1-3k instructions on a tiny
    array). Made once per value and dtype (`TYPED`: a caller may look a Python float or int
    up there itself); zeros, NaN, other values (a NumPy scalar keeps its own type) and other
    dtypes are given back as they are."""
    kind = type(value)
    if kind is not float and kind is not int:
        return value
    found = TYPED.get((value, dtype))
    if found is not None:
        return found
    if (dtype not in _FLOATS or len(TYPED) >= 256 or value != value or value == 0
            or kind is int and not -2 ** 24 < value < 2 ** 24):
        return value  # (zeros and NaN are not cached: -0.0 == 0.0 as keys, so a cached 0.0
        # would answer for -0.0; NaN != NaN. Ints only where float32 holds them exactly)
    with np.errstate(all="ignore"):
        found = dtype.type(value)
    if not math.isfinite(found):  # (out of the dtype's range: NumPy's own casting decides)
        return value
    TYPED[(value, dtype)] = found
    return found
