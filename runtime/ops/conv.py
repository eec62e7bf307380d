"""Convolution ops (NCHW): conv2d, depthwise_conv2d, conv2d_transpose and
depthwise_conv2d_transpose, plus the window geometry that pool2d (ops/pool.py) shares.

Convolution is im2col + one matmul per group. im2col copies, for every kernel tap (i, j), the
strided slice of the zero-padded input that tap sees into `cols[C, kh, kw, N, OH, OW]`: a Python
loop over the kh*kw taps only, never over pixels or the batch. Viewed as (groups, C/groups*kh*kw,
N*OH*OW) it meets the filter (groups, M/groups, C/groups*kh*kw) in one (batched) matmul.
The gradients reuse the same pieces: d(input) is W^T @ dOut scattered back by col2im, d(filter)
is dOut @ cols^T. A transposed convolution is the adjoint of a convolution, so its forward pass
is the convolution's input gradient and vice versa.
"""

from typing import NamedTuple

from ..gemm import matmul
from .registry import defop

_LAYOUTS = ("NCHW", "AnyLayout")


# --- geometry ------------------------------------------------------------------------------------
class Window(NamedTuple):
    """Kernel size, strides, dilations and paddings (top, bottom, left, right) of a 2-D window."""

    kh: int
    kw: int
    sh: int
    sw: int
    dh: int
    dw: int
    pt: int
    pb: int
    pl: int
    pr: int

    @property
    def pads(self):
        return [self.pt, self.pb, self.pl, self.pr]

    def conv_out(self, h, w):
        """Output height/width of a convolution over an h x w input (-1 stays unknown)."""
        return (_conv_size(h, self.kh, self.sh, self.dh, self.pt, self.pb),
                _conv_size(w, self.kw, self.sw, self.dw, self.pl, self.pr))

    def transpose_out(self, h, w):
        """Output height/width of a transposed convolution over an h x w input."""
        return (_transpose_size(h, self.kh, self.sh, self.dh, self.pt, self.pb),
                _transpose_size(w, self.kw, self.sw, self.dw, self.pl, self.pr))

    def buffer_hw(self, h, w, oh, ow):
        """Size of the padded buffer: the whole input plus every row/column a window reaches."""
        return (max((oh - 1) * self.sh + self.dh * (self.kh - 1) + 1, self.pt + h),
                max((ow - 1) * self.sw + self.dw * (self.kw - 1) + 1, self.pl + w))


def _conv_size(size, k, s, d, p0, p1):
    return -1 if size < 0 else (size + p0 + p1 - (d * (k - 1) + 1)) // s + 1


def _transpose_size(size, k, s, d, p0, p1):
    return -1 if size < 0 else (size - 1) * s - p0 - p1 + d * (k - 1) + 1


def pair(values, what):
    """Two positive ints from an int or a list of 2 (strides, dilations, ksize)."""
    values = [values, values] if isinstance(values, int) else [int(v) for v in values]
    if len(values) != 2 or min(values) < 1:
        raise ValueError(f"{what} must be 2 positive ints, got {values}")
    return values


def _explicit_pads(paddings):
    pads = [int(p) for p in paddings]
    if len(pads) == 2:
        return pads[0], pads[0], pads[1], pads[1]
    if len(pads) != 4 or min(pads) < 0:
        raise ValueError(f"paddings must be 2 values [pad_h, pad_w] or 4 [top, bottom, left, "
                         f"right], all >= 0; got {pads}")
    return tuple(pads)


def _same_pads(size, k, s):
    """TensorFlow-style SAME: output ceil(size / stride), the extra padding at the end."""
    if size < 0:
        return 0, 0
    total = max(((size + s - 1) // s - 1) * s + k - size, 0)
    return total // 2, total - total // 2


def window(attrs, in_hw, k_hw, dilations=(1, 1)):
    """The Window of an op from its strides/paddings/padding_algorithm attrs (SAME forces
    dilation 1, as Paddle does). Raises ValueError on bad attrs."""
    kh, kw = k_hw
    sh, sw = pair(attrs["strides"], "strides")
    dh, dw = pair(dilations, "dilations")
    algorithm = attrs.get("padding_algorithm", "EXPLICIT")
    if algorithm == "SAME":
        pads = _same_pads(in_hw[0], kh, sh) + _same_pads(in_hw[1], kw, sw)
        dh = dw = 1
    elif algorithm == "VALID":
        pads = (0, 0, 0, 0)
    elif algorithm == "EXPLICIT":
        pads = _explicit_pads(attrs["paddings"])
    else:
        raise ValueError(f"padding_algorithm must be EXPLICIT, SAME or VALID, got {algorithm!r}")
    return Window(kh, kw, sh, sw, dh, dw, *pads)


def check_layout(attrs, key="data_format"):
    layout = attrs.get(key, "NCHW")
    if layout not in _LAYOUTS:
        raise ValueError(f"{key}={layout!r} is not supported: this runtime computes NCHW only "
                         f"([batch, channels, height, width]); pass NCHW data")


# --- padded buffers and taps --------------------------------------------------------------------
def padded(xp, a, g, hb, wb, fill=0.0):
    """a[..., h, w] placed at (pt, pl) in a buffer of hb x wb filled with `fill` (a itself when
    no padding is needed)."""
    h, w = a.shape[-2:]
    if g.pt == 0 and g.pl == 0 and (hb, wb) == (h, w):
        return a
    buf = xp.full(a.shape[:-2] + (hb, wb), fill, dtype=a.dtype)
    buf[..., g.pt:g.pt + h, g.pl:g.pl + w] = a
    return buf


def tap(buf, g, i, j, oh, ow):
    """The strided view of buf that kernel tap (i, j) sees: one element per output pixel."""
    h0, w0 = i * g.dh, j * g.dw
    return buf[..., h0:h0 + (oh - 1) * g.sh + 1:g.sh, w0:w0 + (ow - 1) * g.sw + 1:g.sw]


def im2col(xp, x, g, oh, ow):
    """cols[C, kh, kw, N, OH, OW]: what each kernel tap sees at each output pixel."""
    n, c, h, w = x.shape
    buf = padded(xp, x.transpose(1, 0, 2, 3), g, *g.buffer_hw(h, w, oh, ow))
    cols = xp.empty((c, g.kh, g.kw, n, oh, ow), dtype=x.dtype)
    for i in range(g.kh):
        for j in range(g.kw):
            cols[:, i, j] = tap(buf, g, i, j, oh, ow)
    return cols


def col2im(xp, cols, g, x_shape):
    """The adjoint of im2col: scatter-add cols[C, kh, kw, N, OH, OW] back to an x_shape image."""
    n, c, h, w = x_shape
    oh, ow = cols.shape[-2:]
    buf = xp.zeros((c, n) + g.buffer_hw(h, w, oh, ow), dtype=cols.dtype)
    for i in range(g.kh):
        for j in range(g.kw):
            tap(buf, g, i, j, oh, ow)[...] += cols[:, i, j]
    return xp.ascontiguousarray(buf[:, :, g.pt:g.pt + h, g.pl:g.pl + w].transpose(1, 0, 2, 3))


# --- convolution primitives ---------------------------------------------------------------------
def _group_matmul(xp, a, b):
    """a[G, p, q] @ b[G, q, r] -> [G, p, r]; a plain (multi-threaded) GEMM when G == 1."""
    if a.shape[0] == 1:
        return matmul(a[0], b[0])[None]
    return matmul(a, b)


def grouped_dout(xp, dout, groups):
    """dOut[N, M, *spatial] (2-D or 3-D) as (groups, M/groups, N*prod(spatial))."""
    m = dout.shape[1]
    axes = (1, 0) + tuple(range(2, dout.ndim))
    return xp.ascontiguousarray(dout.transpose(axes)).reshape(groups, m // groups, -1)


def check_channels(x, f, groups):
    """The input's channels are the filter's times the groups (ValueError otherwise)."""
    if x.shape[1] != f.shape[1] * groups:
        raise ValueError(f"input has {x.shape[1]} channels, the filter {list(f.shape)} with "
                         f"groups={groups} expects {f.shape[1] * groups}")


def conv_forward(xp, x, f, g, groups):
    """out[N, M, OH, OW] of x[N, C, H, W] with filter f[M, C/groups, kh, kw]."""
    n, _, h, w = x.shape
    m = f.shape[0]
    oh, ow = g.conv_out(h, w)
    cols = im2col(xp, x, g, oh, ow).reshape(groups, -1, n * oh * ow)
    out = _group_matmul(xp, f.reshape(groups, m // groups, -1), cols)
    return xp.ascontiguousarray(out.reshape(m, n, oh, ow).transpose(1, 0, 2, 3))


def conv_input_grad(xp, dout_g, f, g, groups, x_shape, out_hw):
    """d(input) of a convolution, from dOut in grouped_dout form."""
    n, c = x_shape[:2]
    m = f.shape[0]
    fg = f.reshape(groups, m // groups, -1).transpose(0, 2, 1)
    dcols = _group_matmul(xp, fg, dout_g)
    return col2im(xp, dcols.reshape((c, g.kh, g.kw, n) + tuple(out_hw)), g, x_shape)


def conv_filter_grad(xp, x, dout_g, g, groups, f_shape, out_hw):
    """d(filter) of a convolution, from its input x and dOut in grouped_dout form."""
    n = x.shape[0]
    cols = im2col(xp, x, g, *out_hw).reshape(groups, -1, n * out_hw[0] * out_hw[1])
    return _group_matmul(xp, dout_g, cols.transpose(0, 2, 1)).reshape(f_shape)


# --- op declarations ----------------------------------------------------------------------------
_CONV_ATTRS = {"strides": [1, 1], "paddings": [0, 0], "dilations": [1, 1], "groups": 1,
               "padding_algorithm": "EXPLICIT", "data_format": "NCHW", "use_cudnn": True,
               "use_mkldnn": False, "fuse_relu_before_depthwise_conv": False,
               "workspace_size_MB": 512, "exhaustive_search": False}


def _geometry(attrs, x_shape, f_shape):
    check_layout(attrs)
    return window(attrs, x_shape[2:], f_shape[2:], attrs["dilations"])


def _groups(attrs):
    groups = attrs.get("groups") or 1
    if groups < 1:
        raise ValueError(f"groups must be >= 1, got {groups}")
    return groups


def _infer_common(ic):
    """(Input, Filter, groups, Window) after the checks conv2d and conv2d_transpose share."""
    x, f = ic.input("Input"), ic.input("Filter")
    ic.check(len(x.shape) == 4, f"{ic.describe('Input')} must be 4-D [N, C, H, W]")
    ic.check(len(f.shape) == 4, f"{ic.describe('Filter')} must be 4-D")
    try:
        return x, f, _groups(ic.attrs), _geometry(ic.attrs, x.shape, f.shape)
    except ValueError as err:
        ic.fail(str(err))


def _conv_infer(ic):
    x, f, groups, g = _infer_common(ic)
    c, m = x.shape[1], f.shape[0]
    ic.check(c < 0 or c == f.shape[1] * groups,
             f"{ic.describe('Input')} has {c} channels but {ic.describe('Filter')} with "
             f"groups={groups} expects {f.shape[1] * groups} (filter is [M, C/groups, kh, kw])")
    ic.check(m % groups == 0, f"the {m} filters must divide into groups={groups}")
    oh, ow = g.conv_out(*x.shape[2:])
    ic.check(oh != 0 and ow != 0 and oh >= -1 and ow >= -1,
             f"the {f.shape[2]}x{f.shape[3]} filter (dilations {ic.attr('dilations')}) does not "
             f"fit {ic.describe('Input')} with paddings {g.pads}: the output would be empty")
    ic.set_output("Output", [x.shape[0], m, oh, ow], x.dtype)


def _conv_kernel(ctx, ins, attrs):
    x, f = ins["Input"], ins["Filter"]
    groups = _groups(attrs)
    check_channels(x, f, groups)
    g = _geometry(attrs, x.shape, f.shape)
    if min(g.conv_out(*x.shape[2:])) < 1:
        raise ValueError(f"the filter {list(f.shape)} does not fit the input {list(x.shape)}")
    return {"Output": conv_forward(ctx.xp, x, f, g, groups)}


def _conv_grad(ctx, ins, attrs):
    xp, x, f, dout = ctx.xp, ins["Input"], ins["Filter"], ins["Output@GRAD"]
    groups = _groups(attrs)
    g = _geometry(attrs, x.shape, f.shape)
    dout_g = grouped_dout(xp, dout, groups)
    result = {}
    if "Input@GRAD" in ctx.want:
        result["Input@GRAD"] = conv_input_grad(xp, dout_g, f, g, groups, x.shape, dout.shape[2:])
    if "Filter@GRAD" in ctx.want:
        result["Filter@GRAD"] = conv_filter_grad(xp, x, dout_g, g, groups, f.shape,
                                                 dout.shape[2:])
    return result


def _transpose_out_hw(attrs, g, x_shape):
    """Output height/width of conv2d_transpose: the formula, or output_size when given (which
    may exceed the formula by less than the stride)."""
    oh, ow = g.transpose_out(*x_shape[2:])
    size = attrs.get("output_size") or []
    if not size:
        return oh, ow
    size = pair(size, "output_size")
    for want, got, s, what in ((size[0], oh, g.sh, "height"), (size[1], ow, g.sw, "width")):
        if got >= 0 and not got <= want < got + s:
            raise ValueError(f"output_size {size}: the {what} must be in [{got}, {got + s}) "
                             f"for this input, filter, stride and padding")
    return tuple(size)


def _transpose_infer(ic):
    x, f, groups, g = _infer_common(ic)
    ic.check(x.shape[1] < 0 or x.shape[1] == f.shape[0],
             f"{ic.describe('Input')} has {x.shape[1]} channels but {ic.describe('Filter')} "
             f"expects {f.shape[0]} (filter is [C, M/groups, kh, kw])")
    ic.check(f.shape[0] % groups == 0,
             f"the {f.shape[0]} input channels must divide into groups={groups}")
    try:
        oh, ow = _transpose_out_hw(ic.attrs, g, x.shape)
    except ValueError as err:
        ic.fail(str(err))
    ic.check(oh != 0 and ow != 0 and oh >= -1 and ow >= -1,
             f"paddings {g.pads} leave no output for {ic.describe('Input')}")
    ic.set_output("Output", [x.shape[0], f.shape[1] * groups, oh, ow], x.dtype)


def _transpose_kernel(ctx, ins, attrs):
    xp, x, f = ctx.xp, ins["Input"], ins["Filter"]
    groups = _groups(attrs)
    if x.shape[1] != f.shape[0] or x.shape[1] % groups:
        raise ValueError(f"input has {x.shape[1]} channels, the filter {list(f.shape)} with "
                         f"groups={groups} expects {f.shape[0]}, a multiple of groups")
    g = _geometry(attrs, x.shape, f.shape)
    oh, ow = _transpose_out_hw(attrs, g, x.shape)
    out_shape = (x.shape[0], f.shape[1] * groups, oh, ow)
    return {"Output": conv_input_grad(xp, grouped_dout(xp, x, groups), f, g, groups, out_shape,
                                      x.shape[2:])}


def _transpose_grad(ctx, ins, attrs):
    xp, x, f, dout = ctx.xp, ins["Input"], ins["Filter"], ins["Output@GRAD"]
    groups = _groups(attrs)
    g = _geometry(attrs, x.shape, f.shape)
    result = {}
    if "Input@GRAD" in ctx.want:
        result["Input@GRAD"] = conv_forward(xp, dout, f, g, groups)
    if "Filter@GRAD" in ctx.want:
        result["Filter@GRAD"] = conv_filter_grad(xp, dout, grouped_dout(xp, x, groups), g,
                                                 groups, f.shape, x.shape[2:])
    return result


def _declare(name, attrs, infer, kernel, grad):
    opdef = defop(name, inputs=("Input", "Filter"), outputs=("Output",), attrs=attrs)
    opdef.infer(infer)
    opdef.kernel(kernel)
    opdef.grad(uses=("Input", "Filter"))(grad)
    return opdef


def _conv_grad_grad(ctx, ins, attrs):
    """conv2d's gradients dI = I'(dOut, W) and dW = W'(X, dOut) are bilinear: given ddI and
    ddW (what arrives for them), d(dOut) = conv(ddI, W) + conv(X, ddW), dW = W'(ddI, dOut) and
    dX = I'(dOut, ddW)."""
    xp, x, f, dout = ctx.xp, ins["Input"], ins["Filter"], ins["Output@GRAD"]
    ddx, ddf = ins.get("Input@GRAD@GRAD"), ins.get("Filter@GRAD@GRAD")
    groups = _groups(attrs)
    g = _geometry(attrs, x.shape, f.shape)
    dout_g = grouped_dout(xp, dout, groups)
    result = {}
    if "Output@GRAD@GRAD" in ctx.want:
        ddout = xp.zeros(dout.shape, dout.dtype)
        if ddx is not None:
            ddout = ddout + conv_forward(xp, ddx, f, g, groups)
        if ddf is not None:
            ddout = ddout + conv_forward(xp, x, ddf, g, groups)
        result["Output@GRAD@GRAD"] = ddout
    if "Filter@GRAD" in ctx.want:
        result["Filter@GRAD"] = (conv_filter_grad(xp, ddx, dout_g, g, groups, f.shape,
                                                  dout.shape[2:]) if ddx is not None
                                 else xp.zeros(f.shape, f.dtype))
    if "Input@GRAD" in ctx.want:
        result["Input@GRAD"] = (conv_input_grad(xp, dout_g, ddf, g, groups, x.shape,
                                                dout.shape[2:]) if ddf is not None
                                else xp.zeros(x.shape, x.dtype))
    return result


for _name in ("conv2d", "depthwise_conv2d"):
    _conv_def = _declare(_name, _CONV_ATTRS, _conv_infer, _conv_kernel, _conv_grad)
    _conv_def.grad_def.grad(uses=("Input", "Filter", "Output@GRAD"),
                            inputs=("Input", "Filter", "Output@GRAD"))(_conv_grad_grad)
for _name in ("conv2d_transpose", "depthwise_conv2d_transpose"):
    _declare(_name, dict(_CONV_ATTRS, output_size=[]), _transpose_infer, _transpose_kernel,
             _transpose_grad)
