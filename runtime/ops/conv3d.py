"""conv3d (NCDHW): the 3-D convolution, with its gradient and second-order gradient.

The same scheme as conv2d (ops/conv.py), one spatial dimension more: im2col copies, for every
kernel tap (i, j, k), the strided slice of the zero-padded input that tap sees into
`cols[C, kd, kh, kw, N, OD, OH, OW]` (a Python loop over the taps only), which meets the
filter in one (grouped) matmul. d(input) is W^T @ dOut scattered back by col2im, d(filter)
is dOut @ cols^T. Paddle's paddings are 3 values (one per side of each dimension) or 6
([front, back, top, bottom, left, right]); padding_algorithm SAME/VALID as in conv2d.
"""

import itertools
from typing import NamedTuple, Tuple

from .conv import (_conv_size, _group_matmul, _groups, _same_pads, check_channels,
                   grouped_dout)
from .registry import defop

_LAYOUTS = ("NCDHW", "AnyLayout")
_ATTRS = {"strides": [1, 1, 1], "paddings": [0, 0, 0], "dilations": [1, 1, 1], "groups": 1,
          "padding_algorithm": "EXPLICIT", "data_format": "NCDHW", "use_cudnn": True,
          "use_mkldnn": False, "workspace_size_MB": 512, "exhaustive_search": False}


class Window3(NamedTuple):
    """Kernel sizes, strides, dilations and (low, high) paddings of a 3-D window."""

    k: Tuple[int, int, int]
    s: Tuple[int, int, int]
    d: Tuple[int, int, int]
    pads: Tuple[Tuple[int, int], ...]

    def out(self, size):
        """Output depth/height/width of a convolution over an input of `size` (-1: unknown)."""
        return tuple(_conv_size(n, k, s, d, p0, p1)
                     for n, k, s, d, (p0, p1) in zip(size, self.k, self.s, self.d, self.pads))

    def buffer(self, size, out):
        """The padded buffer: the whole input plus everything a window reaches."""
        return tuple(max((o - 1) * s + d * (k - 1) + 1, p0 + n)
                     for n, o, k, s, d, (p0, _) in zip(size, out, self.k, self.s, self.d,
                                                         self.pads))

    def taps(self):
        return itertools.product(*(range(k) for k in self.k))

    def view(self, buf, tap, out):
        """The strided view of buf that kernel tap `tap` sees: one element per output cell."""
        index = tuple(slice(t * d, t * d + (o - 1) * s + 1, s)
                      for t, d, o, s in zip(tap, self.d, out, self.s))
        return buf[(Ellipsis,) + index]

    def inside(self, size):
        """The index of the unpadded input within a padded buffer."""
        return (Ellipsis,) + tuple(slice(p0, p0 + n) for n, (p0, _) in zip(size, self.pads))


def triple(values, what):
    """Three positive ints from an int or a list of 3 (strides, dilations)."""
    values = [values] * 3 if isinstance(values, int) else [int(v) for v in values]
    if len(values) != 3 or min(values) < 1:
        raise ValueError(f"{what} must be 3 positive ints, got {values}")
    return tuple(values)


def window3(attrs, size, ksize):
    """The Window3 of a conv3d from its attrs (SAME forces dilation 1, as Paddle does)."""
    strides = triple(attrs["strides"], "strides")
    dilations = triple(attrs.get("dilations", [1, 1, 1]), "dilations")
    algorithm = attrs.get("padding_algorithm", "EXPLICIT")
    if algorithm == "SAME":
        pads = tuple(_same_pads(n, k, s) for n, k, s in zip(size, ksize, strides))
        dilations = (1, 1, 1)
    elif algorithm == "VALID":
        pads = ((0, 0),) * 3
    elif algorithm == "EXPLICIT":
        p = [int(v) for v in attrs["paddings"]]
        if len(p) == 3:
            p = [p[0], p[0], p[1], p[1], p[2], p[2]]
        if len(p) != 6 or min(p) < 0:
            raise ValueError(f"paddings must be 3 values [pad_d, pad_h, pad_w] or 6 [front, "
                             f"back, top, bottom, left, right], all >= 0; got {p}")
        pads = tuple(zip(p[0::2], p[1::2]))
    else:
        raise ValueError(f"padding_algorithm must be EXPLICIT, SAME or VALID, got {algorithm!r}")
    return Window3(tuple(ksize), strides, dilations, pads)


def _geometry(attrs, x_shape, f_shape):
    layout = attrs.get("data_format", "NCDHW")
    if layout not in _LAYOUTS:
        raise ValueError(f"data_format={layout!r} is not supported: this runtime computes NCDHW "
                         f"only ([batch, channels, depth, height, width]); layers.conv3d "
                         f"transposes NDHWC input")
    return window3(attrs, x_shape[2:], f_shape[2:])


# --- im2col and the convolution primitives ------------------------------------------------------
def im2col3(xp, x, g, out):
    """cols[C, kd, kh, kw, N, OD, OH, OW]: what each kernel tap sees at each output cell."""
    n, c = x.shape[:2]
    buf = xp.zeros((c, n) + g.buffer(x.shape[2:], out), dtype=x.dtype)
    buf[g.inside(x.shape[2:])] = x.transpose(1, 0, 2, 3, 4)
    cols = xp.empty((c,) + g.k + (n,) + tuple(out), dtype=x.dtype)
    for t in g.taps():
        cols[(slice(None),) + t] = g.view(buf, t, out)
    return cols


def col2im3(xp, cols, g, x_shape):
    """The adjoint of im2col3: scatter-add the taps back to an x_shape input."""
    n, c = x_shape[:2]
    out = cols.shape[-3:]
    buf = xp.zeros((c, n) + g.buffer(x_shape[2:], out), dtype=cols.dtype)
    for t in g.taps():
        g.view(buf, t, out)[...] += cols[(slice(None),) + t]
    return xp.ascontiguousarray(buf[g.inside(x_shape[2:])].transpose(1, 0, 2, 3, 4))


def conv3d_forward(xp, x, f, g, groups):
    """out[N, M, OD, OH, OW] of x[N, C, D, H, W] with filter f[M, C/groups, kd, kh, kw]."""
    n, m = x.shape[0], f.shape[0]
    out = g.out(x.shape[2:])
    cols = im2col3(xp, x, g, out).reshape(groups, -1, n * out[0] * out[1] * out[2])
    res = _group_matmul(xp, f.reshape(groups, m // groups, -1), cols)
    return xp.ascontiguousarray(res.reshape((m, n) + out).transpose(1, 0, 2, 3, 4))


def conv3d_input_grad(xp, dout_g, f, g, groups, x_shape, out):
    n, c, m = x_shape[0], x_shape[1], f.shape[0]
    fg = f.reshape(groups, m // groups, -1).transpose(0, 2, 1)
    dcols = _group_matmul(xp, fg, dout_g)
    return col2im3(xp, dcols.reshape((c,) + g.k + (n,) + tuple(out)), g, x_shape)


def conv3d_filter_grad(xp, x, dout_g, g, groups, f_shape, out):
    cols = im2col3(xp, x, g, out).reshape(groups, -1, dout_g.shape[-1])
    return _group_matmul(xp, dout_g, cols.transpose(0, 2, 1)).reshape(f_shape)


# --- the op -------------------------------------------------------------------------------------
def _infer(ic):
    x, f = ic.input("Input"), ic.input("Filter")
    ic.check(len(x.shape) == 5, f"{ic.describe('Input')} must be 5-D [N, C, D, H, W]")
    ic.check(len(f.shape) == 5, f"{ic.describe('Filter')} must be 5-D [M, C/groups, kd, kh, kw]")
    try:
        groups = _groups(ic.attrs)
        g = _geometry(ic.attrs, x.shape, f.shape)
    except ValueError as err:
        ic.fail(str(err))
    c, m = x.shape[1], f.shape[0]
    ic.check(c < 0 or c == f.shape[1] * groups,
             f"{ic.describe('Input')} has {c} channels but {ic.describe('Filter')} with "
             f"groups={groups} expects {f.shape[1] * groups}")
    ic.check(m % groups == 0, f"the {m} filters must divide into groups={groups}")
    out = g.out(x.shape[2:])
    ic.check(all(o != 0 and o >= -1 for o in out),
             f"the filter {list(f.shape[2:])} does not fit {ic.describe('Input')} with "
             f"paddings {list(g.pads)}: the output would be empty")
    ic.set_output("Output", [x.shape[0], m] + list(out), x.dtype)


def _kernel(ctx, ins, attrs):
    x, f = ins["Input"], ins["Filter"]
    groups = _groups(attrs)
    check_channels(x, f, groups)
    g = _geometry(attrs, x.shape, f.shape)
    if min(g.out(x.shape[2:])) < 1:
        raise ValueError(f"the filter {list(f.shape)} does not fit the input {list(x.shape)}")
    return {"Output": conv3d_forward(ctx.xp, x, f, g, groups)}


def _grad(ctx, ins, attrs):
    xp, x, f, dout = ctx.xp, ins["Input"], ins["Filter"], ins["Output@GRAD"]
    groups = _groups(attrs)
    g = _geometry(attrs, x.shape, f.shape)
    dout_g = grouped_dout(xp, dout, groups)
    out = dout.shape[2:]
    result = {}
    if "Input@GRAD" in ctx.want:
        result["Input@GRAD"] = conv3d_input_grad(xp, dout_g, f, g, groups, x.shape, out)
    if "Filter@GRAD" in ctx.want:
        result["Filter@GRAD"] = conv3d_filter_grad(xp, x, dout_g, g, groups, f.shape, out)
    return result


def _grad_grad(ctx, ins, attrs):
    """The gradients are bilinear (as conv2d's): given ddI and ddW, d(dOut) = conv(ddI, W) +
    conv(X, ddW), dW = W'(ddI, dOut) and dX = I'(dOut, ddW)."""
    xp, x, f, dout = ctx.xp, ins["Input"], ins["Filter"], ins["Output@GRAD"]
    ddx, ddf = ins.get("Input@GRAD@GRAD"), ins.get("Filter@GRAD@GRAD")
    groups = _groups(attrs)
    g = _geometry(attrs, x.shape, f.shape)
    dout_g = grouped_dout(xp, dout, groups)
    out = dout.shape[2:]
    result = {}
    if "Output@GRAD@GRAD" in ctx.want:
        ddout = xp.zeros(dout.shape, dout.dtype)
        if ddx is not None:
            ddout = ddout + conv3d_forward(xp, ddx, f, g, groups)
        if ddf is not None:
            ddout = ddout + conv3d_forward(xp, x, ddf, g, groups)
        result["Output@GRAD@GRAD"] = ddout
    if "Filter@GRAD" in ctx.want:
        result["Filter@GRAD"] = (conv3d_filter_grad(xp, ddx, dout_g, g, groups, f.shape, out)
                                 if ddx is not None else xp.zeros(f.shape, f.dtype))
    if "Input@GRAD" in ctx.want:
        result["Input@GRAD"] = (conv3d_input_grad(xp, dout_g, ddf, g, groups, x.shape, out)
                                if ddf is not None else xp.zeros(x.shape, x.dtype))
    return result


_conv3d = defop("conv3d", inputs=("Input", "Filter"), outputs=("Output",), attrs=_ATTRS)
_conv3d.infer(_infer)
_conv3d.kernel(_kernel)
_conv3d.grad(uses=("Input", "Filter"))(_grad)
_conv3d.grad_def.grad(uses=("Input", "Filter", "Output@GRAD"),
                      inputs=("Input", "Filter", "Output@GRAD"))(_grad_grad)
