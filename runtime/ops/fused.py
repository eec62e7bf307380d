"""Fused CUDA kernels for the ops that dominate a small model's step on a GPU place.

Why: there the step is bound by the host. Each CuPy call costs 13-25 us of Python and launch on
an H100 (`a + b` 15 us, a fancy-indexed pick 78 us, `int(x.max())` 26 us with its wait), while
the kernels themselves take a few us. The generic kernels, written once for NumPy and CuPy, make
4-12 such calls per op (softmax_with_cross_entropy and its grad about 0.6 ms each, with four
waits to check the labels); these make one or two, and no wait: an out-of-range label raises
when the step's work is done (runtime/device_checks.py), as a device-side assertion does in
Paddle.

Used only where the array module is CuPy itself (`kernels(xp)`, which is None otherwise): the
CPU keeps NumPy, and the fake CuPys of the tests have no compiler. Every op keeps its generic
path: it is the reference the GPU tests compare these with (tests/test_gpu_ops_real.py), and
`ENABLED[0] = False` brings it back (`benchmarks/bench_runtime.py --place gpu` measures both).
Sums are done in a different order than NumPy's, and the compiler may contract a*b+c into one
rounding: results agree with the generic path to float32 rounding, not bit for bit.

Only float32/float64 arrays take these paths; anything else takes the generic one.
"""

import numpy as np

ENABLED = [True]
FLOATS = (np.dtype("float32"), np.dtype("float64"))
INTS = (np.dtype("int32"), np.dtype("int64"))
_C_TYPE = {"float32": "float", "float64": "double", "int32": "int", "int64": "long long"}
_cache = {}


def kernels(xp):
    """The fused kernels for array module `xp` (compiled on first use), or None where `xp` is
    not CuPy or they are switched off."""
    if xp is np or not ENABLED[0]:  # (NumPy: every CPU kernel asks, once or more a step)
        return None
    found = _cache.get(id(xp))
    if found is None:
        found = _cache[id(xp)] = (_Kernels(xp) if hasattr(xp, "ElementwiseKernel")
                                  and hasattr(xp, "RawKernel") else False)
    return found or None


def takes(*arrays):
    """True when every array is float32/float64 of one dtype (what these kernels serve)."""
    dtype = arrays[0].dtype  # (compared as dtypes: a dtype's .name is slow Python)
    return dtype in FLOATS and all(a.dtype == dtype for a in arrays)


# --- kernel sources ---------------------------------------------------------------------------
_SWCE_FORWARD = r"""
extern "C" __global__ void pt_swce_forward(const T* x, const L* label, T* softmax, T* loss,
                                           int* bad, long long n, long long c, long long ignore) {
    // one block of BLOCK threads per row: max, sum of exp, normalise, then the row's loss
    __shared__ T part[BLOCK];
    const long long row = blockIdx.x;
    const int t = threadIdx.x;
    const T* xr = x + row * c;
    T* sr = softmax + row * c;
    T m = xr[0];
    for (long long j = t; j < c; j += BLOCK) { T v = xr[j]; m = v > m ? v : m; }
    part[t] = m;
    __syncthreads();
    for (int s = BLOCK / 2; s > 0; s >>= 1) {
        if (t < s && part[t + s] > part[t]) part[t] = part[t + s];
        __syncthreads();
    }
    m = part[0];
    __syncthreads();
    T total = 0;
    for (long long j = t; j < c; j += BLOCK) { T e = EXP(xr[j] - m); sr[j] = e; total += e; }
    part[t] = total;
    __syncthreads();
    for (int s = BLOCK / 2; s > 0; s >>= 1) {
        if (t < s) part[t] += part[t + s];
        __syncthreads();
    }
    total = part[0];
    for (long long j = t; j < c; j += BLOCK) sr[j] /= total;
    if (t == 0) {
        long long lab = (long long)label[row];
        if (lab == ignore) {
            loss[row] = 0;
        } else if (lab < 0 || lab >= c) {
            atomicMax(bad, (int)(n - row));  // the first bad row: n - bad
            loss[row] = 0;
        } else {
            loss[row] = LOG(total) - (xr[lab] - m);
        }
    }
}
"""
_MEAN = r"""
extern "C" __global__ void pt_mean(const T* x, T* out, long long n) {
    // one block: each thread sums a stride of x, then a tree sum; out[0] = sum / n
    __shared__ T part[BLOCK];
    const int t = threadIdx.x;
    T total = 0;
    for (long long i = t; i < n; i += BLOCK) total += x[i];
    part[t] = total;
    __syncthreads();
    for (int s = BLOCK / 2; s > 0; s >>= 1) {
        if (t < s) part[t] += part[t + s];
        __syncthreads();
    }
    if (t == 0) out[0] = part[0] / (T)n;
}
"""
_ACCURACY = r"""
extern "C" __global__ void pt_accuracy(const I* idx, const L* label, float* rate, C1* correct,
                                       C2* total, long long n, long long k) {
    // one block: a row is a hit when any of its k indices is its label; then a tree sum
    __shared__ long long part[BLOCK];
    const int t = threadIdx.x;
    long long hits = 0;
    for (long long r = t; r < n; r += BLOCK) {
        const long long lab = (long long)label[r];
        for (long long j = 0; j < k; ++j) {
            if ((long long)idx[r * k + j] == lab) { hits += 1; break; }
        }
    }
    part[t] = hits;
    __syncthreads();
    for (int s = BLOCK / 2; s > 0; s >>= 1) {
        if (t < s) part[t] += part[t + s];
        __syncthreads();
    }
    if (t == 0) {
        correct[0] = (C1)part[0];
        total[0] = (C2)n;
        rate[0] = n ? (float)((double)part[0] / (double)n) : 0.0f;
    }
}
"""
_TOP1 = r"""
extern "C" __global__ void pt_top1(const T* x, T* out, long long* idx, long long n,
                                   long long c) {
    // a thread per row: its largest value and where it first is (a NaN wins, as in argmax)
    const long long row = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (row >= n) return;
    const T* xr = x + row * c;
    T m = xr[0];
    long long at = 0;
    for (long long j = 1; j < c && m == m; ++j) {
        const T v = xr[j];
        if (v > m || v != v) { m = v; at = j; }
    }
    out[row] = m;
    idx[row] = at;
}
"""
_COLSUM = r"""
extern "C" __global__ void pt_colsum(const T* x, T* out, long long n, long long c) {
    // a thread per column, adding its n rows in double (the bias gradient of a batch)
    const long long j = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (j >= c) return;
    double total = 0;
    for (long long i = 0; i < n; ++i) total += (double)x[i * c + j];
    out[j] = (T)total;
}
"""
COLSUM_MAX_ROWS = 16384  # a thread adds a whole column: taller arrays take CuPy's sum
TOP1_MAX = 1024  # a thread reads its whole row: wider rows take the generic argmax
_BLOCK = 128
MEAN_MAX = 1 << 20  # one block sums at most this many values (8192 a thread); more: CuPy's sum


class _Kernels:
    """The kernels of one CuPy module; the elementwise ones typed by CuPy at each call."""

    def __init__(self, cupy):
        self.cupy = cupy
        ek = cupy.ElementwiseKernel
        self.momentum = ek("T g, raw L lr, T mu", "T p, T v",
                           "v = mu * v + g; p -= (T)lr[0] * v;", "pt_momentum")
        self.nesterov = ek("T g, raw L lr, T mu", "T p, T v",
                           "v = mu * v + g; p -= (T)lr[0] * (g + mu * v);", "pt_momentum_nesterov")
        self.sgd = ek("T g, raw L lr", "T p", "p -= (T)lr[0] * g;", "pt_sgd")
        self.adam = ek(
            "T g, raw L lr, raw T b1p, raw T b2p, T b1, T b2, T eps", "T p, T m1, T m2",
            "T c2 = sqrt((T)1 - b2p[0]);"
            "T lr_t = (T)lr[0] * c2 / ((T)1 - b1p[0]);"
            "m1 = b1 * m1 + ((T)1 - b1) * g;"
            "m2 = b2 * m2 + ((T)1 - b2) * (g * g);"
            "p -= lr_t * m1 / (sqrt(m2) + eps);", "pt_adam")
        self.relu_grad = ek("T out, T dout", "T dx", "dx = dout * (T)(out > (T)0);",
                            "pt_relu_grad")
        self.fill_scaled = ek("raw T value, T divisor", "T out", "out = value[0] / divisor;",
                              "pt_fill_scaled")
        self.swce_grad = ek(
            "T softmax, raw L label, raw T dloss, int64 c, int64 ignore", "T dx",
            "long long row = i / c; long long lab = (long long)label[row];"
            "dx = lab == ignore ? (T)0 : (softmax - (T)(i - row * c == lab)) * dloss[row];",
            "pt_swce_grad")
        self._raw = {}

    def _compiled(self, name, source, **types):
        """RawKernel `name` of `source` with the macros `types` (dtype names -> C types)."""
        key = (name,) + tuple(sorted(types.items()))
        kernel = self._raw.get(key)
        if kernel is None:
            macros = "".join(f"#define {k} {_C_TYPE.get(v, v)}\n" for k, v in types.items())
            kernel = self._raw[key] = self.cupy.RawKernel(
                f"#define BLOCK {_BLOCK}\n" + macros + source, name)
        return kernel

    def mean(self, x):
        """[1] array: the mean of the C-contiguous float array x (1 <= x.size <= MEAN_MAX)."""
        out = self.cupy.empty(1, x.dtype)
        self._compiled("pt_mean", _MEAN, T=x.dtype.name)(
            (1,), (_BLOCK,), (x, out, self.cupy.int64(x.size)))
        return out

    def accuracy(self, idx, label, correct_dtype, total_dtype):
        """(rate float32 [1], correct [1], total [1]) of C-contiguous indices [n, k] and labels
        [n]."""
        cupy = self.cupy
        n, k = idx.shape
        rate = cupy.empty(1, cupy.float32)
        correct, total = cupy.empty(1, correct_dtype), cupy.empty(1, total_dtype)
        kernel = self._compiled("pt_accuracy", _ACCURACY, I=idx.dtype.name, L=label.dtype.name,
                                C1=correct.dtype.name, C2=total.dtype.name)
        kernel((1,), (_BLOCK,), (idx, label, rate, correct, total, cupy.int64(n),
                                 cupy.int64(k)))
        return rate, correct, total

    def colsum(self, x):
        """[c]: the sum over the rows of the C-contiguous float array x [n, c]."""
        cupy = self.cupy
        n, c = x.shape
        out = cupy.empty(c, x.dtype)
        self._compiled("pt_colsum", _COLSUM, T=x.dtype.name)(
            ((c + _BLOCK - 1) // _BLOCK,), (_BLOCK,), (x, out, cupy.int64(n), cupy.int64(c)))
        return out

    def top1(self, x):
        """(values [n, 1], indices int64 [n, 1]) of the largest of each row of the
        C-contiguous float array x [n, c] (n, c >= 1)."""
        cupy = self.cupy
        n, c = x.shape
        out, idx = cupy.empty((n, 1), x.dtype), cupy.empty((n, 1), cupy.int64)
        self._compiled("pt_top1", _TOP1, T=x.dtype.name)(
            ((n + _BLOCK - 1) // _BLOCK,), (_BLOCK,), (x, out, idx, cupy.int64(n), cupy.int64(c)))
        return out, idx

    def swce_forward(self, logits, label, ignore):
        """softmax and loss of 2-D C-contiguous logits [n, c] with hard labels [n] (n, c >= 1);
        and the flag of the first out-of-range label (`n - row`, 0 when none)."""
        cupy = self.cupy
        n, c = logits.shape
        f = "f" if logits.dtype.name == "float32" else ""
        kernel = self._compiled("pt_swce_forward", _SWCE_FORWARD, T=logits.dtype.name,
                                L=label.dtype.name, EXP=f"exp{f}", LOG=f"log{f}")
        softmax = cupy.empty_like(logits)
        loss = cupy.empty((n, 1), logits.dtype)
        bad = cupy.zeros(1, cupy.int32)
        kernel((n,), (_BLOCK,), (logits, label, softmax, loss, bad, cupy.int64(n),
                                 cupy.int64(c), cupy.int64(ignore)))
        return softmax, loss, bad


def label_types_ok(*labels):
    """True when the (integer) arrays are int32/int64, which the kernels index with."""
    return all(label.dtype in INTS for label in labels)
