"""pool2d (NCHW): max or average pooling over sliding, global or adaptive windows.

Window semantics follow Paddle's CPU kernels: the window of output pixel o starts at
o * stride - pad_top and is clipped to the input, so padding never wins a max and counts as a
zero in an average only when exclusive=False (exclusive=True divides by the number of input
pixels in the window). ceil_mode rounds the output size up, so the last window may hang over
the edge. The max gradient goes to the first (row-major) element of each window equal to the
max, as Paddle does. Sliding windows are computed with a loop over the kh*kw kernel taps on
strided views (see ops/conv.py); adaptive windows with a loop over the (few) output cells.
"""

import numpy as np

from .conv import Window, check_layout, pair, padded, tap, window
from .registry import defop

pool2d = defop("pool2d", inputs=("X",), outputs=("Out",),
               attrs={"pooling_type": "max", "ksize": [], "global_pooling": False,
                      "strides": [1, 1], "paddings": [0, 0], "exclusive": True,
                      "adaptive": False, "ceil_mode": False, "use_cudnn": True,
                      "use_mkldnn": False, "use_quantizer": False, "data_format": "NCHW",
                      "padding_algorithm": "EXPLICIT"})


# --- geometry ------------------------------------------------------------------------------------
def _pool_size(size, k, s, p0, p1, ceil_mode):
    if size < 0:
        return -1
    return (size - k + p0 + p1 + (s - 1 if ceil_mode else 0)) // s + 1


def plan(attrs, in_hw):
    """(mode, window, oh, ow) with mode 'window', 'global' or 'adaptive' (window None then)."""
    check_layout(attrs)
    if attrs["pooling_type"] not in ("max", "avg"):
        raise ValueError(f"pooling_type must be 'max' or 'avg', got {attrs['pooling_type']!r}")
    h, w = in_hw
    if attrs["global_pooling"]:
        return "global", Window(h, w, 1, 1, 1, 1, 0, 0, 0, 0), 1, 1
    ksize = pair(attrs["ksize"], "ksize")
    if attrs["adaptive"]:
        return "adaptive", None, ksize[0], ksize[1]
    g = window(attrs, in_hw, ksize)
    return ("window", g, _pool_size(h, g.kh, g.sh, g.pt, g.pb, attrs["ceil_mode"]),
            _pool_size(w, g.kw, g.sw, g.pl, g.pr, attrs["ceil_mode"]))


def _counts(xp, g, in_hw, oh, ow, dtype):
    """Input pixels inside each clipped window, shape (oh, ow) (at least 1)."""
    def along(size, n_out, k, s, p):
        starts = np.arange(n_out) * s - p
        return np.minimum(starts + k, size) - np.maximum(starts, 0)
    counts = np.outer(along(in_hw[0], oh, g.kh, g.sh, g.pt), along(in_hw[1], ow, g.kw, g.sw, g.pl))
    return xp.asarray(np.maximum(counts, 1).astype(dtype))


def _adaptive_bounds(size, n_out):
    """[start, end) of each adaptive window: floor(i*size/n) to ceil((i+1)*size/n)."""
    return [(i * size // n_out, -(-(i + 1) * size // n_out)) for i in range(n_out)]


@pool2d.infer
def _pool_infer(ic):
    x = ic.input("X")
    ic.check(len(x.shape) == 4, f"{ic.describe('X')} must be 4-D [N, C, H, W]")
    try:
        _, _, oh, ow = plan(ic.attrs, x.shape[2:])
    except ValueError as err:
        ic.fail(str(err))
    ic.check(oh != 0 and ow != 0 and oh >= -1 and ow >= -1,
             f"the pooling window {ic.attr('ksize')} (paddings {ic.attr('paddings')}) does not "
             f"fit {ic.describe('X')}: the output would be empty")
    ic.set_output("Out", [x.shape[0], x.shape[1], oh, ow], x.dtype)


# --- forward ---------------------------------------------------------------------------------
@pool2d.kernel
def _pool(ctx, ins, attrs):
    xp, x = ctx.xp, ins["X"]
    mode, g, oh, ow = plan(attrs, x.shape[2:])
    if min(oh, ow) < 1:
        raise ValueError(f"the pooling window does not fit the input {list(x.shape)}")
    is_max = attrs["pooling_type"] == "max"
    if mode == "global":
        out = x.max(axis=(2, 3), keepdims=True) if is_max else x.mean(axis=(2, 3), keepdims=True)
    elif mode == "adaptive":
        out = _adaptive_forward(xp, x, oh, ow, is_max)
    elif is_max:
        out = _max_forward(xp, x, g, oh, ow)
    else:
        out = _avg_forward(xp, x, g, oh, ow, attrs["exclusive"])
    return {"Out": out}


def _max_forward(xp, x, g, oh, ow):
    buf = padded(xp, x, g, *g.buffer_hw(*x.shape[2:], oh, ow), fill=-np.inf)
    out = tap(buf, g, 0, 0, oh, ow).copy()
    for i in range(g.kh):
        for j in range(g.kw):
            if i or j:
                xp.maximum(out, tap(buf, g, i, j, oh, ow), out=out)
    return out


def _avg_forward(xp, x, g, oh, ow, exclusive):
    buf = padded(xp, x, g, *g.buffer_hw(*x.shape[2:], oh, ow))
    out = tap(buf, g, 0, 0, oh, ow).copy()
    for i in range(g.kh):
        for j in range(g.kw):
            if i or j:
                out += tap(buf, g, i, j, oh, ow)
    out /= _counts(xp, g, x.shape[2:], oh, ow, x.dtype) if exclusive else g.kh * g.kw
    return out


def _adaptive_forward(xp, x, oh, ow, is_max):
    out = xp.empty(x.shape[:2] + (oh, ow), dtype=x.dtype)
    for p, (h0, h1) in enumerate(_adaptive_bounds(x.shape[2], oh)):
        for q, (w0, w1) in enumerate(_adaptive_bounds(x.shape[3], ow)):
            cell = x[:, :, h0:h1, w0:w1]
            out[:, :, p, q] = cell.max(axis=(2, 3)) if is_max else cell.mean(axis=(2, 3))
    return out


# --- gradient --------------------------------------------------------------------------------
@pool2d.grad(uses=("X", "Out"))
def _pool_grad(ctx, ins, attrs):
    xp, x, out, dout = ctx.xp, ins["X"], ins["Out"], ins["Out@GRAD"]
    mode, g, oh, ow = plan(attrs, x.shape[2:])
    is_max = attrs["pooling_type"] == "max"
    if mode == "global":
        dx = _first_max_grad(xp, x, out, dout) if is_max else \
            xp.broadcast_to(dout / (x.shape[2] * x.shape[3]), x.shape).copy()
    elif mode == "adaptive":
        dx = _adaptive_grad(xp, x, out, dout, is_max)
    elif is_max:
        dx = _max_grad(xp, x, out, dout, g)
    else:
        dx = _avg_grad(xp, x, dout, g, attrs["exclusive"])
    return {"X@GRAD": dx}


def _cropped(buf, g, x_shape):
    h, w = x_shape[2:]
    if buf.shape == tuple(x_shape):
        return buf
    return buf[:, :, g.pt:g.pt + h, g.pl:g.pl + w].copy()


def _max_grad(xp, x, out, dout, g):
    oh, ow = out.shape[2:]
    buf = padded(xp, x, g, *g.buffer_hw(*x.shape[2:], oh, ow), fill=-np.inf)
    dbuf = xp.zeros(buf.shape, dtype=dout.dtype)
    taken = xp.zeros(out.shape, dtype=bool)
    for i in range(g.kh):
        for j in range(g.kw):
            hit = tap(buf, g, i, j, oh, ow) == out
            hit &= ~taken
            tap(dbuf, g, i, j, oh, ow)[...] += dout * hit
            taken |= hit
    return _cropped(dbuf, g, x.shape)


def _avg_grad(xp, x, dout, g, exclusive):
    oh, ow = dout.shape[2:]
    share = dout / (_counts(xp, g, x.shape[2:], oh, ow, dout.dtype) if exclusive
                    else g.kh * g.kw)
    dbuf = xp.zeros(x.shape[:2] + g.buffer_hw(*x.shape[2:], oh, ow), dtype=dout.dtype)
    for i in range(g.kh):
        for j in range(g.kw):
            tap(dbuf, g, i, j, oh, ow)[...] += share
    return _cropped(dbuf, g, x.shape)


def _first_max_grad(xp, cell, out, dout):
    """Gradient of max over the last two axes of `cell` [N, C, h, w]: all of dout[N, C] to
    the first element equal to the max."""
    n, c, h, w = cell.shape
    flat = cell.reshape(n, c, h * w)
    first = (flat == out.reshape(n, c, 1)).argmax(axis=-1)
    onehot = xp.arange(h * w) == first[..., None]
    return (onehot * dout.reshape(n, c, 1)).reshape(n, c, h, w)


def _adaptive_grad(xp, x, out, dout, is_max):
    dx = xp.zeros(x.shape, dtype=dout.dtype)
    oh, ow = out.shape[2:]
    for p, (h0, h1) in enumerate(_adaptive_bounds(x.shape[2], oh)):
        for q, (w0, w1) in enumerate(_adaptive_bounds(x.shape[3], ow)):
            d = dout[:, :, p:p + 1, q:q + 1]
            if is_max:
                dx[:, :, h0:h1, w0:w1] += _first_max_grad(xp, x[:, :, h0:h1, w0:w1],
                                                          out[:, :, p:p + 1, q:q + 1], d)
            else:
                dx[:, :, h0:h1, w0:w1] += d / ((h1 - h0) * (w1 - w0))
    return dx
