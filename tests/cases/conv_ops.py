"""Cases for conv2d, conv3d, depthwise_conv2d, conv2d_transpose, depthwise_conv2d_transpose and
pool2d.

The references are deliberately naive: explicit loops over every output (or input) pixel,
straight from the definitions, sharing nothing with the im2col kernels they check.
"""

import itertools

import numpy as np

from opcheck import case

R = np.random.default_rng(11)


def f64(*shape):
    return R.uniform(-1.0, 1.0, shape)


def distinct(*shape):
    """No ties, gaps >= 0.02: max pooling's gradient is then unambiguous."""
    n = int(np.prod(shape))
    return R.permutation(np.arange(n, dtype=np.float64)).reshape(shape) / n * 2 - 1


def _pads4(attrs, in_hw, ksize, strides):
    """(top, bottom, left, right), dilations after padding_algorithm, written out longhand."""
    algorithm = attrs.get("padding_algorithm", "EXPLICIT")
    dilations = list(attrs.get("dilations", [1, 1]))
    if algorithm == "VALID":
        return [0, 0, 0, 0], dilations
    if algorithm == "SAME":
        pads = []
        for size, k, s in zip(in_hw, ksize, strides):
            out = -(-size // s)
            total = max((out - 1) * s + k - size, 0)
            pads += [total // 2, total - total // 2]
        return pads, [1, 1]
    p = list(attrs["paddings"])
    return (p if len(p) == 4 else [p[0], p[0], p[1], p[1]]), dilations


# --- convolution references -------------------------------------------------------------------
def conv_ref(ins, attrs):
    x, w = ins["Input"], ins["Filter"]
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    groups = attrs["groups"]
    sh, sw = attrs["strides"]
    (pt, pb, pl, pr), (dh, dw) = _pads4(attrs, (h, wd), (kh, kw), (sh, sw))
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    oh = (h + pt + pb - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + pl + pr - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((n, m, oh, ow))
    per_group = m // groups
    for b, o, y, z in itertools.product(range(n), range(m), range(oh), range(ow)):
        g = o // per_group
        for ci, i, j in itertools.product(range(cg), range(kh), range(kw)):
            out[b, o, y, z] += w[o, ci, i, j] * xp[b, g * cg + ci, y * sh + i * dh, z * sw + j * dw]
    return {"Output": out}


def conv_transpose_ref(ins, attrs):
    """Every input pixel scatters input * filter onto the (uncropped) output, then the
    padding is cropped away."""
    x, w = ins["Input"], ins["Filter"]
    n, c, h, wd = x.shape
    _, mg, kh, kw = w.shape
    groups = attrs["groups"]
    sh, sw = attrs["strides"]
    (pt, pb, pl, pr), (dh, dw) = _pads4(attrs, (h, wd), (kh, kw), (sh, sw))
    full_h, full_w = (h - 1) * sh + dh * (kh - 1) + 1, (wd - 1) * sw + dw * (kw - 1) + 1
    oh, ow = attrs.get("output_size") or (full_h - pt - pb, full_w - pl - pr)
    full = np.zeros((n, mg * groups, max(full_h, pt + oh), max(full_w, pl + ow)))
    cg = c // groups
    for b, ci, y, z in itertools.product(range(n), range(c), range(h), range(wd)):
        g = ci // cg
        for mi, i, j in itertools.product(range(mg), range(kh), range(kw)):
            contribution = x[b, ci, y, z] * w[ci, mi, i, j]
            full[b, g * mg + mi, y * sh + i * dh, z * sw + j * dw] += contribution
    return {"Output": full[:, :, pt:pt + oh, pl:pl + ow]}


def conv_attrs(**kw):
    attrs = {"strides": [1, 1], "paddings": [0, 0], "dilations": [1, 1], "groups": 1}
    attrs.update(kw)
    return attrs


# --- conv2d ---------------------------------------------------------------------------------
case("conv2d", {"Input": f64(2, 2, 5, 5), "Filter": f64(3, 2, 3, 3)}, attrs=conv_attrs(),
     reference=conv_ref, name="basic")
case("conv2d", {"Input": f64(2, 2, 5, 5), "Filter": f64(3, 2, 3, 3)},
     attrs=conv_attrs(strides=[2, 2], paddings=[1, 1]), reference=conv_ref, name="stride2_pad1")
case("conv2d", {"Input": f64(2, 2, 6, 5), "Filter": f64(2, 2, 3, 2)},
     attrs=conv_attrs(strides=[1, 2], paddings=[1, 2, 0, 1], dilations=[2, 2]),
     reference=conv_ref, name="dilation2_asymmetric_pads")
case("conv2d", {"Input": f64(2, 4, 5, 5), "Filter": f64(4, 2, 3, 3)},
     attrs=conv_attrs(groups=2, paddings=[1, 1]), reference=conv_ref, name="groups2")
case("conv2d", {"Input": f64(2, 2, 5, 5), "Filter": f64(2, 2, 3, 3)},
     attrs=conv_attrs(strides=[2, 2], padding_algorithm="SAME"), reference=conv_ref,
     name="same")
case("conv2d", {"Input": f64(2, 2, 5, 5), "Filter": f64(2, 2, 2, 2)},
     attrs=conv_attrs(paddings=[3, 3], padding_algorithm="VALID"), reference=conv_ref,
     name="valid")
case("conv2d", {"Input": f64(2, 2, 5, 5), "Filter": f64(3, 2, 3, 3)}, attrs=conv_attrs(),
     reference=conv_ref, name="unknown_batch", var_shapes={"Input": (-1, 2, 5, 5)},
     check_grad=False)
case("depthwise_conv2d", {"Input": f64(2, 2, 5, 5), "Filter": f64(4, 1, 3, 3)},
     attrs=conv_attrs(groups=2, strides=[2, 1], paddings=[1, 1]), reference=conv_ref)

# --- conv3d ---------------------------------------------------------------------------------
def conv3d_ref(ins, attrs):
    """Every output cell summed over its window, the padding written out per side."""
    x, w = ins["Input"], ins["Filter"]
    n, c = x.shape[:2]
    m, cg = w.shape[:2]
    ksize, size, strides = w.shape[2:], x.shape[2:], attrs["strides"]
    algorithm = attrs.get("padding_algorithm", "EXPLICIT")
    dil = list(attrs["dilations"])
    if algorithm == "SAME":
        pads, dil = [], [1, 1, 1]
        for k, s, st in zip(ksize, size, strides):
            total = max((-(-s // st) - 1) * st + k - s, 0)
            pads.append((total // 2, total - total // 2))
    elif algorithm == "VALID":
        pads = [(0, 0)] * 3
    else:
        p = list(attrs["paddings"])
        pads = [(v, v) for v in p] if len(p) == 3 else list(zip(p[0::2], p[1::2]))
    xp = np.pad(x, [(0, 0), (0, 0)] + pads)
    out_size = [(s + a + b - d * (k - 1) - 1) // st + 1
                for s, (a, b), d, k, st in zip(size, pads, dil, ksize, strides)]
    out = np.zeros([n, m] + out_size)
    per_group = m // attrs["groups"]
    for b, o in itertools.product(range(n), range(m)):
        g = o // per_group
        for cell in itertools.product(*map(range, out_size)):
            for ci in range(cg):
                for tap in itertools.product(*map(range, ksize)):
                    at = tuple(q * st + t * d for q, st, t, d in zip(cell, strides, tap, dil))
                    out[(b, o) + cell] += w[(o, ci) + tap] * xp[(b, g * cg + ci) + at]
    return {"Output": out}


def conv3d_attrs(**kw):
    attrs = {"strides": [1, 1, 1], "paddings": [0, 0, 0], "dilations": [1, 1, 1], "groups": 1}
    attrs.update(kw)
    return attrs


case("conv3d", {"Input": f64(2, 2, 4, 3, 3), "Filter": f64(3, 2, 2, 2, 2)},
     attrs=conv3d_attrs(), reference=conv3d_ref, name="basic")
case("conv3d", {"Input": f64(1, 2, 5, 4, 4), "Filter": f64(2, 2, 3, 2, 3)},
     attrs=conv3d_attrs(strides=[2, 1, 2], paddings=[1, 0, 0, 1, 1, 2], dilations=[1, 2, 1]),
     reference=conv3d_ref, name="stride_dilation_asymmetric_pads")
case("conv3d", {"Input": f64(1, 4, 3, 3, 3), "Filter": f64(4, 2, 1, 3, 2)},
     attrs=conv3d_attrs(groups=2, paddings=[0, 1, 1]), reference=conv3d_ref, name="groups2")
case("conv3d", {"Input": f64(1, 2, 4, 3, 5), "Filter": f64(2, 2, 2, 2, 2)},
     attrs=conv3d_attrs(strides=[2, 2, 2], padding_algorithm="SAME"), reference=conv3d_ref,
     name="same")
case("conv3d", {"Input": f64(1, 2, 3, 3, 3), "Filter": f64(2, 2, 2, 2, 2)},
     attrs=conv3d_attrs(paddings=[3, 3, 3], padding_algorithm="VALID"), reference=conv3d_ref,
     name="valid")

# --- conv2d_transpose -------------------------------------------------------------------------
case("conv2d_transpose", {"Input": f64(2, 2, 3, 3), "Filter": f64(2, 3, 3, 3)},
     attrs=conv_attrs(), reference=conv_transpose_ref, name="basic")
case("conv2d_transpose", {"Input": f64(2, 2, 3, 3), "Filter": f64(2, 2, 3, 3)},
     attrs=conv_attrs(strides=[2, 2], paddings=[1, 1]), reference=conv_transpose_ref,
     name="stride2_pad1")
case("conv2d_transpose", {"Input": f64(2, 2, 3, 3), "Filter": f64(2, 2, 3, 3)},
     attrs=conv_attrs(strides=[2, 2], paddings=[1, 1], output_size=[6, 5]),
     reference=conv_transpose_ref, name="output_size")
case("conv2d_transpose", {"Input": f64(2, 4, 3, 3), "Filter": f64(4, 1, 2, 3)},
     attrs=conv_attrs(groups=2, dilations=[2, 2], paddings=[0, 1, 1, 0]),
     reference=conv_transpose_ref, name="groups2_dilation2")
case("depthwise_conv2d_transpose", {"Input": f64(2, 2, 3, 3), "Filter": f64(2, 1, 3, 3)},
     attrs=conv_attrs(groups=2, strides=[2, 2]), reference=conv_transpose_ref)


# --- pool2d -----------------------------------------------------------------------------------
def _window_bounds(o, size, k, s, pad):
    start = o * s - pad
    return max(start, 0), min(start + k, size)


def _adaptive_bounds(o, size, n_out):
    return int(np.floor(o * size / n_out)), int(np.ceil((o + 1) * size / n_out))


def pool_ref(ins, attrs):
    x = ins["X"]
    n, c, h, w = x.shape
    is_max = attrs["pooling_type"] == "max"
    if attrs.get("global_pooling"):
        out = x.max(axis=(2, 3), keepdims=True) if is_max else x.mean(axis=(2, 3), keepdims=True)
        return {"Out": out}
    kh, kw = attrs["ksize"]
    if attrs.get("adaptive"):
        rows = [_adaptive_bounds(o, h, kh) for o in range(kh)]
        cols = [_adaptive_bounds(o, w, kw) for o in range(kw)]
        divisor = None
    else:
        sh, sw = attrs["strides"]
        (pt, pb, pl, pr), _ = _pads4(attrs, (h, w), (kh, kw), (sh, sw))
        extra_h = sh - 1 if attrs.get("ceil_mode") else 0
        extra_w = sw - 1 if attrs.get("ceil_mode") else 0
        oh = (h - kh + pt + pb + extra_h) // sh + 1
        ow = (w - kw + pl + pr + extra_w) // sw + 1
        rows = [_window_bounds(o, h, kh, sh, pt) for o in range(oh)]
        cols = [_window_bounds(o, w, kw, sw, pl) for o in range(ow)]
        divisor = None if attrs.get("exclusive", True) else kh * kw
    out = np.zeros((n, c, len(rows), len(cols)))
    for b, ch, (p, (h0, h1)), (q, (w0, w1)) in itertools.product(
            range(n), range(c), enumerate(rows), enumerate(cols)):
        cell = x[b, ch, h0:h1, w0:w1]
        out[b, ch, p, q] = cell.max() if is_max else cell.sum() / (divisor or cell.size)
    return {"Out": out}


def pool_attrs(kind, ksize, **kw):
    attrs = {"pooling_type": kind, "ksize": ksize, "strides": [1, 1], "paddings": [0, 0]}
    attrs.update(kw)
    return attrs


case("pool2d", {"X": distinct(2, 2, 5, 5)}, attrs=pool_attrs("max", [2, 2], strides=[2, 2]),
     reference=pool_ref, name="max_2x2_stride2")
case("pool2d", {"X": distinct(2, 2, 6, 6)},
     attrs=pool_attrs("max", [3, 3], strides=[2, 2], paddings=[1, 1], ceil_mode=True),
     reference=pool_ref, name="max_pad1_ceil")
case("pool2d", {"X": distinct(2, 2, 5, 6)},
     attrs=pool_attrs("max", [3, 2], strides=[1, 2], paddings=[0, 2, 1, 0]),
     reference=pool_ref, name="max_asymmetric_pads")
case("pool2d", {"X": distinct(2, 2, 5, 5)},
     attrs=pool_attrs("max", [3, 3], strides=[2, 2], padding_algorithm="SAME"),
     reference=pool_ref, name="max_same")
case("pool2d", {"X": f64(2, 2, 5, 5)},
     attrs=pool_attrs("avg", [3, 3], strides=[2, 2], paddings=[1, 1], exclusive=True),
     reference=pool_ref, name="avg_exclusive")
case("pool2d", {"X": f64(2, 2, 5, 5)},
     attrs=pool_attrs("avg", [3, 3], strides=[2, 2], paddings=[1, 1], exclusive=False,
                      ceil_mode=True),
     reference=pool_ref, name="avg_inclusive_ceil")
case("pool2d", {"X": f64(2, 2, 5, 5)}, attrs=pool_attrs("avg", [2, 2], strides=[2, 2],
                                                        ceil_mode=True),
     reference=pool_ref, name="avg_exclusive_ceil")
case("pool2d", {"X": distinct(2, 3, 4, 5)}, attrs=pool_attrs("max", [1, 1], global_pooling=True),
     reference=pool_ref, name="global_max")
case("pool2d", {"X": f64(2, 3, 4, 5)}, attrs=pool_attrs("avg", [1, 1], global_pooling=True),
     reference=pool_ref, name="global_avg")
case("pool2d", {"X": distinct(2, 2, 5, 5)}, attrs=pool_attrs("max", [3, 2], adaptive=True),
     reference=pool_ref, name="adaptive_max")
case("pool2d", {"X": f64(2, 2, 5, 7)}, attrs=pool_attrs("avg", [2, 3], adaptive=True),
     reference=pool_ref, name="adaptive_avg")
case("pool2d", {"X": distinct(2, 2, 4, 4)}, attrs=pool_attrs("max", [2, 2], strides=[2, 2]),
     reference=pool_ref, name="unknown_batch", var_shapes={"X": (-1, 2, 4, 4)},
     check_grad=False)
