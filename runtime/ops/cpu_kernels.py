"""Fused CPU kernels for the elementwise work that dominates a step besides the GEMMs: the
optimizer updates (sgd, momentum, Nesterov momentum) and relu's gradient.

Why: NumPy runs `v *= mu; v += g; p -= lr * v` as four passes over the parameter (one of them
writing a temporary), relu's gradient as two (a boolean mask, then the product); one compiled
loop does each in a single pass. On a step with more than one math thread (the BLAS thread
count) a large update is split between this thread and one helper thread of this module, so
both cores work on it; the helper sleeps on a condition variable between updates (it never
spins against the BLAS threads) and is made again in a forked child.

The loops do exactly NumPy's operations in NumPy's order, one rounding each (compiled without
contraction into fused multiply-adds), so results are bit for bit those of the NumPy path,
which every op keeps: it serves other dtypes, mixed dtypes, non-contiguous arrays, machines
without a C compiler (`REASON` says why), and `ENABLED[0] = False` brings it back.
"""

import ctypes

import numpy as np

from .. import blas
from ..cbuild import build

ENABLED = [True]
REASON = ""
SPLIT_MIN = 1 << 16  # elements: below this a second thread costs more than it saves
SMALL = 1024  # elements: below this NumPy's few calls cost less than one call into C

_SOURCE = r"""
#include <pthread.h>
#include <stddef.h>
#define SPLIT_MIN SPLIT_MIN_VALUE

typedef void (*part_fn)(const void *args, long lo, long hi);

/* one helper thread: it runs [lo, hi) of a job while the caller runs the rest */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER, dispatch = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t go = PTHREAD_COND_INITIALIZER, done = PTHREAD_COND_INITIALIZER;
static int helper_running;
static long generation, finished;
static part_fn job;
static const void *job_args;
static long job_lo, job_hi;

static void *helper(void *unused) {
    long seen = 0;
    (void)unused;
    pthread_mutex_lock(&lock);
    for (;;) {
        while (generation == seen) pthread_cond_wait(&go, &lock);
        seen = generation;
        part_fn f = job; const void *a = job_args; long lo = job_lo, hi = job_hi;
        pthread_mutex_unlock(&lock);
        f(a, lo, hi);
        pthread_mutex_lock(&lock);
        finished = seen;
        pthread_cond_signal(&done);
    }
    return NULL;
}

static void after_fork_in_child(void) {
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t fresh_cond = PTHREAD_COND_INITIALIZER;
    lock = fresh; dispatch = fresh; go = fresh_cond; done = fresh_cond;
    helper_running = 0; generation = finished = 0;
}

static int start_helper(void) {
    pthread_t t;
    if (pthread_create(&t, NULL, helper, NULL) != 0) return 0;
    pthread_detach(t);
    if (!helper_running) pthread_atfork(NULL, NULL, after_fork_in_child);
    helper_running = 1;
    return 1;
}

static void run(part_fn f, const void *args, long n, int threads) {
    if (threads < 2 || n < SPLIT_MIN || pthread_mutex_trylock(&dispatch) != 0) {
        f(args, 0, n);
        return;
    }
    if (!helper_running && !start_helper()) {
        pthread_mutex_unlock(&dispatch);
        f(args, 0, n);
        return;
    }
    long half = (n / 2 + 63) & ~63L;
    pthread_mutex_lock(&lock);
    job = f; job_args = args; job_lo = half; job_hi = n;
    long mine = ++generation;
    pthread_cond_signal(&go);
    pthread_mutex_unlock(&lock);
    f(args, 0, half);
    pthread_mutex_lock(&lock);
    while (finished != mine) pthread_cond_wait(&done, &lock);
    pthread_mutex_unlock(&lock);
    pthread_mutex_unlock(&dispatch);
}

#define KERNELS(T, S)                                                                         \
typedef struct { T *p, *v; const T *g; T lr, mu; } update_##S;                               \
static void momentum_part_##S(const void *a, long lo, long hi) {                             \
    const update_##S *u = a;                                                                  \
    T *restrict p = u->p, *restrict vel = u->v;                                               \
    const T *restrict g = u->g;                                                               \
    const T lr = u->lr, mu = u->mu;                                                           \
    for (long i = lo; i < hi; i++) {                                                          \
        T v = vel[i] * mu;                                                                    \
        v = v + g[i];                                                                         \
        vel[i] = v;                                                                           \
        p[i] = p[i] - lr * v;                                                                 \
    }                                                                                         \
}                                                                                             \
static void nesterov_part_##S(const void *a, long lo, long hi) {                             \
    const update_##S *u = a;                                                                  \
    T *restrict p = u->p, *restrict vel = u->v;                                               \
    const T *restrict g = u->g;                                                               \
    const T lr = u->lr, mu = u->mu;                                                           \
    for (long i = lo; i < hi; i++) {                                                          \
        T v = vel[i] * mu;                                                                    \
        v = v + g[i];                                                                         \
        vel[i] = v;                                                                           \
        T step = mu * v;                                                                      \
        step = g[i] + step;                                                                   \
        p[i] = p[i] - lr * step;                                                              \
    }                                                                                         \
}                                                                                             \
static void sgd_part_##S(const void *a, long lo, long hi) {                                  \
    const update_##S *u = a;                                                                  \
    T *restrict p = u->p;                                                                     \
    const T *restrict g = u->g;                                                               \
    const T lr = u->lr;                                                                       \
    for (long i = lo; i < hi; i++) p[i] = p[i] - lr * g[i];                                   \
}                                                                                             \
void pt_momentum_##S(T *p, T *v, const T *g, T lr, T mu, long n, int nesterov, int threads) {\
    update_##S u = {p, v, g, lr, mu};                                                         \
    run(nesterov ? nesterov_part_##S : momentum_part_##S, &u, n, threads);                    \
}                                                                                             \
void pt_sgd_##S(T *p, const T *g, T lr, long n, int threads) {                               \
    update_##S u = {p, NULL, g, lr, 0};                                                       \
    run(sgd_part_##S, &u, n, threads);                                                        \
}                                                                                             \
typedef struct { const T *out, *dout; T *dx; } relu_##S;                                      \
static void relu_grad_part_##S(const void *a, long lo, long hi) {                            \
    const relu_##S *r = a;                                                                    \
    const T *out = r->out, *dout = r->dout;                                                   \
    T *dx = r->dx;                                                                            \
    for (long i = lo; i < hi; i++) {                                                          \
        T keep = out[i] > 0 ? (T)1 : (T)0;                                                    \
        dx[i] = dout[i] * keep;                                                               \
    }                                                                                         \
}                                                                                             \
void pt_relu_grad_##S(const T *out, const T *dout, T *dx, long n, int threads) {             \
    relu_##S r = {out, dout, dx};                                                             \
    run(relu_grad_part_##S, &r, n, threads);                                                  \
}

KERNELS(float, f32)
KERNELS(double, f64)
""".replace("SPLIT_MIN_VALUE", str(SPLIT_MIN))

_FLAGS = ("-O3", "-ffp-contract=off", "-fno-math-errno", "-pthread")


class _Kernels:
    def __init__(self, lib):
        ptr, lng, intc = ctypes.c_void_p, ctypes.c_long, ctypes.c_int
        self.momentum, self.sgd, self.relu_grad = {}, {}, {}
        for dtype, suffix, scalar in ((np.dtype("float32"), "f32", ctypes.c_float),
                                      (np.dtype("float64"), "f64", ctypes.c_double)):
            momentum = getattr(lib, f"pt_momentum_{suffix}")
            momentum.argtypes = [ptr, ptr, ptr, scalar, scalar, lng, intc, intc]
            momentum.restype = None
            sgd = getattr(lib, f"pt_sgd_{suffix}")
            sgd.argtypes = [ptr, ptr, scalar, lng, intc]
            sgd.restype = None
            relu_grad = getattr(lib, f"pt_relu_grad_{suffix}")
            relu_grad.argtypes = [ptr, ptr, ptr, lng, intc]
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


def _threads(n):
    if n < SPLIT_MIN:
        return 1
    return blas.get_blas_threads() or 1


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


def momentum(p, v, g, lr, mu, nesterov):
    """p, v updated in place as the NumPy path does (True), or False when it must run."""
    if not (_dense(p, v, g) and p.flags.writeable and v.flags.writeable
            and type(lr) is np.ndarray and lr.size == 1 and lr.dtype == p.dtype):
        return False
    n = p.size
    _loaded[0].momentum[p.dtype](_address(p), _address(v), _address(g), lr.item(), mu, n,
                                 int(bool(nesterov)), _threads(n))
    return True


def sgd(p, g, lr):
    if not (_dense(p, g) and p.flags.writeable and type(lr) is np.ndarray and lr.size == 1
            and lr.dtype == p.dtype):
        return False
    n = p.size
    _loaded[0].sgd[p.dtype](_address(p), _address(g), lr.item(), n, _threads(n))
    return True


def relu_grad(out, dout, buf):
    """dout * (out > 0) into `buf` (or a new array); None when the NumPy path must run."""
    if not _dense(out, dout):
        return None
    if buf is None:
        buf = np.empty_like(dout)
    elif not (type(buf) is np.ndarray and buf.dtype == dout.dtype and buf.size == dout.size
              and buf.flags.c_contiguous and buf.flags.writeable):
        return None
    n = dout.size
    _loaded[0].relu_grad[dout.dtype](_address(out), _address(dout), _address(buf), n,
                                     _threads(n))
    return buf
