"""Fused CPU kernels for the elementwise work that dominates a step besides the GEMMs: the
optimizer updates (sgd, momentum, Nesterov momentum) and relu's gradient.

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

import numpy as np

from ..cbuild import build

ENABLED = [True]
REASON = ""
SMALL = 1024  # elements: below this NumPy's few calls cost less than one call into C

_SOURCE = r"""
#include <stddef.h>

#define KERNELS(T, S)                                                                         \
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
void pt_sgd_##S(T *restrict p, const T *restrict g, T lr, long n) {                          \
    for (long i = 0; i < n; i++) p[i] = p[i] - lr * g[i];                                     \
}                                                                                             \
void pt_relu_grad_##S(const T *out, const T *dout, T *dx, long n) {                          \
    for (long i = 0; i < n; i++) {  /* dx may be dout's buffer (inplace) */                   \
        T keep = out[i] > 0 ? (T)1 : (T)0;                                                    \
        dx[i] = dout[i] * keep;                                                               \
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
            self.momentum[dtype], self.sgd[dtype], self.relu_grad[dtype] = (
                momentum, sgd, relu_grad)


_loaded = []


def _kernels():
    if not _loaded:
        global REASON
        try:
            _loaded.append(_Kernels(ctypes.CDLL(build("cpu_kernels", _SOURCE, _FLAGS))))
        except (OSError, RuntimeError, AttributeError, Exception) as err:  # noqa: B902
            REASON = f"the fused CPU kernels could not be built ({type(err).__name__}: {err})"
            _loaded.append(None)
    return _loaded[0]


def _address(array):
    return array.__array_interface__["data"][0]


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


def _distinct(*arrays):
    """No two of the arrays share memory (the loops read and write them as separate)."""
    return not any(np.may_share_memory(a, b)
                   for i, a in enumerate(arrays) for b in arrays[i + 1:])


def _scalar_lr(lr, dtype):
    return type(lr) is np.ndarray and lr.size == 1 and lr.dtype == dtype


def momentum(p, v, g, lr, mu, nesterov):
    """p, v updated in place as the NumPy path does (True), or False when it must run. `mu`
    must be a Python float: NumPy rounds it to the arrays' type, as the C call does (a NumPy
    float64 would make NumPy compute in double)."""
    if not (type(mu) is float and _dense(p, v, g) and p.flags.writeable and v.flags.writeable
            and _scalar_lr(lr, p.dtype) and _distinct(p, v, g)):
        return False
    _loaded[0].momentum[p.dtype](_address(p), _address(v), _address(g), lr.item(), mu, p.size,
                                 int(bool(nesterov)))
    return True


def sgd(p, g, lr):
    if not (_dense(p, g) and p.flags.writeable and _scalar_lr(lr, p.dtype)
            and _distinct(p, g)):
        return False
    _loaded[0].sgd[p.dtype](_address(p), _address(g), lr.item(), p.size)
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
