"""Arithmetic ops: mul, elementwise_{add,sub,mul,div,max,min,pow}, scale, sum, mean, sign."""

import functools

import numpy as np

from ..backend import array_module
from ..dtypes import VarType
from ..gemm import matmul
from ..tensor import SelectedRows
from . import fused
from .registry import (Special, defop, dims_match, infer_same_as, linear_grad_grad,
                       shape_product)


# --- broadcasting helpers (Fluid's `axis` rule) ------------------------------------------------
def aligned_shape(x_shape, y_shape, axis):
    """y's shape padded with 1s so that it lines up with x starting at dimension `axis`
    (axis=-1: trailing alignment). Trailing 1-dims of y are dropped first, as Fluid does."""
    y_shape = list(y_shape)
    if axis == -1 or axis is None:
        axis = len(x_shape) - len(y_shape)
    while len(y_shape) > 1 and len(y_shape) + axis > len(x_shape) and y_shape[-1] == 1:
        y_shape.pop()
    return [1] * axis + y_shape + [1] * (len(x_shape) - axis - len(y_shape))


def operand_shapes(x_shape, y_shape, axis):
    """The shapes x and y take so that NumPy broadcasting implements Fluid's rule."""
    if len(x_shape) >= len(y_shape):
        return tuple(x_shape), tuple(aligned_shape(x_shape, y_shape, axis))
    return tuple(aligned_shape(y_shape, x_shape, axis)), tuple(y_shape)


def broadcast_operands(x, y, axis):
    """(x, y) reshaped so NumPy broadcasting implements Fluid's rule."""
    if x.ndim >= y.ndim:
        if axis == -1 or axis == x.ndim - y.ndim:
            return x, y
        return x, y.reshape(aligned_shape(x.shape, y.shape, axis))
    if axis == -1 or axis == y.ndim - x.ndim:
        return x, y
    return x.reshape(aligned_shape(y.shape, x.shape, axis)), y


def reshaped(array, shape):
    """array.reshape(shape), but the array itself (not a view) when the shape already fits,
    so the executor can still reuse its buffer."""
    return array if array.shape == tuple(shape) else array.reshape(shape)


@functools.lru_cache(maxsize=1024)
def _reduced_axes(grad_shape, shape):
    """The axes of a gradient shaped `grad_shape` that broadcasting expanded from `shape`."""
    lead = len(grad_shape) - len(shape)
    return tuple(range(lead)) + tuple(
        lead + i for i, d in enumerate(shape) if d == 1 and grad_shape[lead + i] != 1)


@functools.lru_cache(maxsize=1024)
def _broadcast_shape(x_shape, y_shape):
    """np.broadcast_shapes(x_shape, y_shape), worked out once per pair of shapes."""
    return np.broadcast_shapes(x_shape, y_shape)


@functools.lru_cache(maxsize=1024)
def _operand_layout(x_shape, y_shape, axis):
    """operand_shapes for array shapes (tuples), worked out once per shapes and axis."""
    return operand_shapes(x_shape, y_shape, axis)


def reduce_to(grad, shape):
    """Sum `grad` over the dimensions that broadcasting expanded, giving `shape`."""
    shape = tuple(shape)
    if grad.shape == shape:
        return grad
    axes = _reduced_axes(grad.shape, shape)
    if axes == (0,) and grad.ndim == 2 and type(grad) is not np.ndarray:  # a bias's gradient
        kernels = fused.kernels(array_module(grad))
        if (kernels is not None and fused.takes(grad) and grad.flags.c_contiguous
                and 0 < grad.shape[0] <= fused.COLSUM_MAX_ROWS and grad.shape[1] > 0):
            return reshaped(kernels.colsum(grad), shape)
    return reshaped(grad.sum(axis=axes, keepdims=True), shape) if axes else reshaped(grad, shape)


@functools.lru_cache(maxsize=1024)
def _summing(grad_shape, aligned, own):
    """(the axes to sum a gradient shaped `grad_shape` over, the shape to give the sums),
    so that reshaped(reduce_to(grad, aligned), own) is grad summed over the axes (without
    keepdims: the same sums) and reshaped (None: the sums have that shape already)."""
    axes = _reduced_axes(grad_shape, aligned) if grad_shape != aligned else ()
    kept = tuple(d for i, d in enumerate(grad_shape) if i not in axes)
    return axes, (None if kept == own else own)


@functools.lru_cache(maxsize=1024)
def _gradient_sums(x_shape, y_shape, grad_shape, axis):
    """(_summing for X's gradient, for Y's) when both are shaped `grad_shape` (an elementwise
    op's gradients have its output's shape), worked out once per shapes and axis."""
    x_aligned, y_aligned = operand_shapes(x_shape, y_shape, axis)
    return (_summing(grad_shape, x_aligned, tuple(x_shape)),
            _summing(grad_shape, y_aligned, tuple(y_shape)))


def _summed(grad, summing):
    """reshaped(reduce_to(grad, aligned), own) for a NumPy gradient, given _summing's
    (axes, shape): one reduction call (a sum's values do not depend on keepdims) and at most
    one reshape."""
    axes, shape = summing
    if axes:
        grad = np.add.reduce(grad, axes)
    return grad if shape is None else grad.reshape(shape)


def _infer_elementwise(ic):
    x, y = ic.input("X"), ic.input("Y")
    if x.shape is None or y.shape is None:  # a variable made without a shape (create_tensor)
        ic.set_output("Out", x.shape if y.shape is None else y.shape, x.dtype)
        return
    axis = ic.attr("axis")
    big, small = (x, y) if len(x.shape) >= len(y.shape) else (y, x)
    if axis != -1 and not 0 <= axis <= len(big.shape) - 1:
        ic.fail(f"axis={axis} is out of range for {ic.describe('X')} and {ic.describe('Y')}")
    aligned = aligned_shape(big.shape, small.shape, axis)
    if len(aligned) != len(big.shape):
        ic.fail(f"cannot broadcast {ic.describe('Y')} onto {ic.describe('X')} at axis={axis}")
    out = []
    for b, s in zip(big.shape, aligned):
        if not (dims_match(b, s) or b == 1 or s == 1):
            ic.fail(f"shapes do not broadcast: {ic.describe('X')}, {ic.describe('Y')} "
                    f"(axis={axis}); dimension {b} vs {s}")
        out.append(s if b == 1 else b)
    ic.set_output("Out", out, x.dtype, lod_level=x.lod_level)


def _elementwise(name, forward, grad_x, grad_y, uses, shape_only=()):
    """Register elementwise_<name>. forward is a ufunc (it may write into a granted buffer);
    grad_x/grad_y(x, y, out, dout) give the unreduced gradients."""
    opdef = defop(f"elementwise_{name}", inputs=("X", "Y"), outputs=("Out",),
                  attrs={"axis": -1, "use_mkldnn": False}, inplace={"Out": "X"})
    opdef.infer(_infer_elementwise)

    @opdef.kernel
    def kernel(ctx, ins, attrs):
        x0 = ins["X"]
        x, y = broadcast_operands(x0, ins["Y"], attrs["axis"])
        buf = ctx.reuse("Out", x0, _broadcast_shape(x.shape, y.shape), x0.dtype) \
            if ctx.inplace else None
        return {"Out": forward(x, y, out=buf)}

    @opdef.grad(uses=uses, shape_only=shape_only)
    def grad(ctx, ins, attrs):
        x0, y0, dout = ins["X"], ins["Y"], ins["Out@GRAD"]
        x, y = (x0, y0) if shape_only else broadcast_operands(x0, y0, attrs["axis"])
        out = ins.get("Out")
        result = {}
        if type(dout) is np.ndarray:  # NumPy: each gradient summed to its shape in one step
            to_x, to_y = _gradient_sums(x0.shape, y0.shape, dout.shape, attrs["axis"])
            want = ctx.want
            if "X@GRAD" in want:
                result["X@GRAD"] = _summed(grad_x(x, y, out, dout), to_x)
            if "Y@GRAD" in want:
                result["Y@GRAD"] = _summed(grad_y(x, y, out, dout), to_y)
            return result
        x_shape, y_shape = _operand_layout(x0.shape, y0.shape, attrs["axis"])
        if "X@GRAD" in ctx.want:  # reduce to the aligned shape, then back to x's own
            result["X@GRAD"] = reshaped(reduce_to(grad_x(x, y, out, dout), x_shape), x0.shape)
        if "Y@GRAD" in ctx.want:
            result["Y@GRAD"] = reshaped(reduce_to(grad_y(x, y, out, dout), y_shape), y0.shape)
        return result

    @opdef.specialize
    def special(step, ins):
        x0, y0 = ins["X"], ins["Y"]
        if type(x0) is not np.ndarray or type(y0) is not np.ndarray:
            return None
        x, y = broadcast_operands(x0, y0, step.attrs["axis"])
        return Special([f"{{Out}} = {{k_f}}({_operand('X', x, x0)}, {_operand('Y', y, y0)})"],
                       {"f": forward, "X": x.shape, "Y": y.shape})

    @opdef.grad_def.specialize
    def grad_special(step, ins):
        x0, y0, dout = ins["X"], ins["Y"], ins["Out@GRAD"]
        out = ins.get("Out")
        if type(dout) is not np.ndarray or (out is not None and type(out) is not np.ndarray):
            return None
        consts = {"reduce": np.add.reduce, "gx": grad_x, "gy": grad_y}
        if shape_only:
            xe, ye = "{X}", "{Y}"
        elif type(x0) is not np.ndarray or type(y0) is not np.ndarray:
            return None
        else:
            x, y = broadcast_operands(x0, y0, step.attrs["axis"])
            xe, ye = _operand("X", x, x0), _operand("Y", y, y0)
            consts["X"], consts["Y"] = x.shape, y.shape
        sums = _gradient_sums(x0.shape, y0.shape, dout.shape, step.attrs["axis"])
        lines = []
        for slot, fn, summing in (("X", grad_x, sums[0]), ("Y", grad_y, sums[1])):
            if slot + "@GRAD" not in step.ctx.want:
                continue
            if fn is _dout:
                value = "{Out@GRAD}"
            else:
                value = (f"{{k_g{slot.lower()}}}({xe}, {ye}, {'{Out}' if out is not None else None}"
                         f", {{Out@GRAD}})")
            axes, shape = summing
            if axes:
                consts[f"axes{slot}"] = axes
                value = f"{{k_reduce}}({value}, {{k_axes{slot}}})"
            if shape is not None:
                consts[f"shape{slot}"] = shape
                value = f"{value}.reshape({{k_shape{slot}}})"
            lines.append(f"{{{slot}@GRAD}} = {value}")
        return Special(lines, consts)

    return opdef


def _operand(slot, operand, given):
    """The code giving `operand`, which broadcast_operands made of the input `given`."""
    return f"{{{slot}}}" if operand is given else f"{{{slot}}}.reshape({{k_{slot}}})"


def _dout(x, y, o, d):
    return d


_SHAPES = ("X", "Y")
linear_grad_grad(_elementwise("add", np.add, _dout, _dout, uses=_SHAPES, shape_only=_SHAPES))
linear_grad_grad(_elementwise("sub", np.subtract, _dout, lambda x, y, o, d: -d,
                              uses=_SHAPES, shape_only=_SHAPES))
_elementwise_mul = _elementwise("mul", np.multiply,
                                lambda x, y, o, d: d * y, lambda x, y, o, d: d * x, uses=_SHAPES)
def _divide(x, y, out=None):
    """x / y; integers divide truncating toward zero, as Fluid's int kernels do."""
    if x.dtype.kind in "iu":
        return np.trunc(np.true_divide(x, y)).astype(x.dtype)
    return np.divide(x, y, out=out)


_elementwise_div = _elementwise("div", _divide,
             lambda x, y, o, d: d / y, lambda x, y, o, d: -d * o / y, uses=("X", "Y", "Out"))
_elementwise("max", np.maximum,
             lambda x, y, o, d: d * (x > y), lambda x, y, o, d: d * (x <= y), uses=_SHAPES)
_elementwise("min", np.minimum,
             lambda x, y, o, d: d * (x < y), lambda x, y, o, d: d * (x >= y), uses=_SHAPES)
_elementwise("pow", np.power,
             lambda x, y, o, d: d * y * x ** (y - 1),
             lambda x, y, o, d: d * o * np.log(np.where(x > 0, x, 1)), uses=("X", "Y", "Out"))


@_elementwise_mul.grad_def.grad(uses=("X", "Y", "Out@GRAD"), inputs=("X", "Y", "Out@GRAD"))
def _elementwise_mul_grad_grad(ctx, ins, attrs):
    """dX = dOut * y and dY = dOut * x (reduced to their shapes), differentiated: with ddX and
    ddY the gradients arriving for dX and dY, d/dx = ddY * dOut, d/dy = ddX * dOut, and
    d/d(dOut) = ddX * y + ddY * x (broadcast)."""
    x0, y0, dout = ins["X"], ins["Y"], ins["Out@GRAD"]
    x_shape, y_shape = operand_shapes(x0.shape, y0.shape, attrs["axis"])
    x, y = broadcast_operands(x0, y0, attrs["axis"])
    ddx, ddy = ins.get("X@GRAD@GRAD"), ins.get("Y@GRAD@GRAD")
    ddx = ddx.reshape(x_shape) if ddx is not None else None
    ddy = ddy.reshape(y_shape) if ddy is not None else None
    result = {}
    if "X@GRAD" in ctx.want:
        dx = dout * ddy if ddy is not None else ctx.xp.zeros(dout.shape, dout.dtype)
        result["X@GRAD"] = reshaped(reduce_to(dx, x_shape), x0.shape)
    if "Y@GRAD" in ctx.want:
        dy = dout * ddx if ddx is not None else ctx.xp.zeros(dout.shape, dout.dtype)
        result["Y@GRAD"] = reshaped(reduce_to(dy, y_shape), y0.shape)
    if "Out@GRAD@GRAD" in ctx.want:
        ddout = ctx.xp.zeros(dout.shape, dout.dtype)
        if ddx is not None:
            ddout = ddout + ddx * y
        if ddy is not None:
            ddout = ddout + ddy * x
        result["Out@GRAD@GRAD"] = ddout
    return result


@_elementwise_div.grad_def.grad(uses=("Y", "Out", "Out@GRAD"), inputs=("Y", "Out", "Out@GRAD"))
def _elementwise_div_grad_grad(ctx, ins, attrs):
    """dX = dOut / y and dY = -dOut * out / y (reduced), differentiated with ddX, ddY the
    gradients arriving for them: d(dOut) = (ddX - ddY * out) / y, dOut' = -ddY * dOut / y for
    Out, and dy = (ddY * out - ddX) * dOut / y^2 (reduced to y's shape)."""
    y0, out, dout = ins["Y"], ins["Out"], ins["Out@GRAD"]
    x_shape, y_shape = operand_shapes(out.shape, y0.shape, attrs["axis"])
    y = y0.reshape(y_shape)
    ddx, ddy = ins.get("X@GRAD@GRAD"), ins.get("Y@GRAD@GRAD")
    ddx = ddx.reshape(x_shape) if ddx is not None else 0.0
    ddy = ddy.reshape(y_shape) if ddy is not None else 0.0
    result = {}
    if "Out@GRAD@GRAD" in ctx.want:
        result["Out@GRAD@GRAD"] = ((ddx - ddy * out) / y + ctx.xp.zeros(dout.shape, dout.dtype))
    if "Out@GRAD" in ctx.want:
        result["Out@GRAD"] = -ddy * dout / y + ctx.xp.zeros(out.shape, out.dtype)
    if "Y@GRAD" in ctx.want:
        dy = (ddy * out - ddx) * dout / (y * y) + ctx.xp.zeros(dout.shape, dout.dtype)
        result["Y@GRAD"] = reshaped(reduce_to(dy, y_shape), y0.shape)
    return result


# --- mul: flatten both operands to matrices, multiply -----------------------------------------
mul = defop("mul", inputs=("X", "Y"), outputs=("Out",),
            attrs={"x_num_col_dims": 1, "y_num_col_dims": 1})


@mul.infer
def _mul_shape(ic):
    x, y = ic.input("X"), ic.input("Y")
    xk, yk = ic.attr("x_num_col_dims"), ic.attr("y_num_col_dims")
    ic.check(0 < xk < len(x.shape) + (len(x.shape) == 1),
             f"x_num_col_dims={xk} must be in [1, rank(X)) for {ic.describe('X')}")
    ic.check(0 < yk < len(y.shape) + (len(y.shape) == 1),
             f"y_num_col_dims={yk} must be in [1, rank(Y)) for {ic.describe('Y')}")
    inner_x, inner_y = shape_product(x.shape[xk:]), shape_product(y.shape[:yk])
    ic.check(dims_match(inner_x, inner_y),
             f"the flattened inner dimensions differ: {ic.describe('X')} gives {inner_x} "
             f"columns (x_num_col_dims={xk}) but {ic.describe('Y')} gives {inner_y} rows "
             f"(y_num_col_dims={yk})")
    ic.set_output("Out", list(x.shape[:xk]) + list(y.shape[yk:]), x.dtype)


def _as_matrix(a, k):
    rows = 1
    for d in a.shape[:k]:
        rows *= d
    return reshaped(a, (rows, a.size // rows if rows else 0))


@mul.kernel
def _mul(ctx, ins, attrs):
    x, y = ins["X"], ins["Y"]
    xk, yk = attrs["x_num_col_dims"], attrs["y_num_col_dims"]
    if x.ndim == 2 and y.ndim == 2:
        return {"Out": matmul(x, y)}
    out = matmul(_as_matrix(x, xk), _as_matrix(y, yk))
    return {"Out": out.reshape(x.shape[:xk] + y.shape[yk:])}


@mul.specialize
def _mul_special(step, ins):
    x, y = ins["X"], ins["Y"]
    if type(x) is np.ndarray and type(y) is np.ndarray and x.ndim == 2 and y.ndim == 2:
        return Special(["{Out} = {X} @ {Y}"])  # (matmul's product off a CUDA graph capture)
    return None


@mul.grad(uses=("X", "Y"))
def _mul_grad(ctx, ins, attrs):
    x, y, dout = ins["X"], ins["Y"], ins["Out@GRAD"]
    xk, yk = attrs["x_num_col_dims"], attrs["y_num_col_dims"]
    if x.ndim == 2 and y.ndim == 2 and dout.ndim == 2:  # (then xk = yk = 1: the infer checks)
        # matrices: the products have the operands' shapes already
        result = {}
        if "X@GRAD" in ctx.want:
            result["X@GRAD"] = matmul(dout, y.T)
        if "Y@GRAD" in ctx.want:
            result["Y@GRAD"] = matmul(x.T, dout)
        return result
    x2, y2 = _as_matrix(x, xk), _as_matrix(y, yk)
    d2 = reshaped(dout, (x2.shape[0], y2.shape[1]))
    result = {}
    if "X@GRAD" in ctx.want:
        result["X@GRAD"] = reshaped(matmul(d2, y2.T), x.shape)
    if "Y@GRAD" in ctx.want:
        result["Y@GRAD"] = reshaped(matmul(x2.T, d2), y.shape)
    return result


@mul.grad_def.specialize
def _mul_grad_special(step, ins):
    x, y, dout = ins["X"], ins["Y"], ins["Out@GRAD"]
    if not (type(x) is np.ndarray and type(y) is np.ndarray and type(dout) is np.ndarray
            and x.ndim == 2 and y.ndim == 2 and dout.ndim == 2):
        return None
    lines = []
    if "X@GRAD" in step.ctx.want:
        lines.append("{X@GRAD} = {Out@GRAD} @ {Y}.T")
    if "Y@GRAD" in step.ctx.want:
        lines.append("{Y@GRAD} = {X}.T @ {Out@GRAD}")
    return Special(lines)


@mul.grad_def.grad(uses=("X", "Y", "Out@GRAD"), inputs=("X", "Y", "Out@GRAD"))
def _mul_grad_grad(ctx, ins, attrs):
    """dX = dOut Y^T, dY = X^T dOut (as matrices), differentiated: d/dX = dOut ddY^T,
    d/dY = ddX^T dOut, d/d(dOut) = ddX Y + X ddY."""
    x, y, dout = ins["X"], ins["Y"], ins["Out@GRAD"]
    xk, yk = attrs["x_num_col_dims"], attrs["y_num_col_dims"]
    x2, y2 = _as_matrix(x, xk), _as_matrix(y, yk)
    d2 = reshaped(dout, (x2.shape[0], y2.shape[1]))
    ddx, ddy = ins.get("X@GRAD@GRAD"), ins.get("Y@GRAD@GRAD")
    ddx2 = reshaped(ddx, x2.shape) if ddx is not None else ctx.xp.zeros(x2.shape, x.dtype)
    ddy2 = reshaped(ddy, y2.shape) if ddy is not None else ctx.xp.zeros(y2.shape, y.dtype)
    result = {}
    if "X@GRAD" in ctx.want:
        result["X@GRAD"] = reshaped(matmul(d2, ddy2.T), x.shape)
    if "Y@GRAD" in ctx.want:
        result["Y@GRAD"] = reshaped(matmul(ddx2.T, d2), y.shape)
    if "Out@GRAD@GRAD" in ctx.want:
        result["Out@GRAD@GRAD"] = reshaped(matmul(ddx2, y2) + matmul(x2, ddy2), dout.shape)
    return result


# --- scale ------------------------------------------------------------------------------------
scale = defop("scale", inputs=("X", "ScaleTensor?"), outputs=("Out",),
              attrs={"scale": 1.0, "bias": 0.0, "bias_after_scale": True})
scale.infer(infer_same_as())


@scale.kernel
def _scale(ctx, ins, attrs):
    x, s, b = ins["X"], attrs["scale"], attrs["bias"]
    factor = ins.get("ScaleTensor")
    if factor is not None:  # a [1] tensor computed by the graph (e.g. a clipping factor)
        s = factor.reshape(())
    if isinstance(x, SelectedRows):
        return {"Out": SelectedRows(x.ids, _affine(x.value, s, b, attrs), x.full_height)}
    return {"Out": _affine(x, s, b, attrs)}


def _affine(x, s, b, attrs):
    dtype = x.dtype
    if attrs["bias_after_scale"]:
        out = x * s + b if b else x * s
    else:
        out = (x + b) * s
    return out.astype(dtype, copy=False)


@scale.grad(uses=(), inputs=("X",))
def _scale_grad(ctx, ins, attrs):
    dout = ins["Out@GRAD"]
    return {"X@GRAD": (dout * attrs["scale"]).astype(dout.dtype, copy=False)}


@scale.grad_def.grad(uses=(), inputs=("Out@GRAD",))
def _scale_grad_grad(ctx, ins, attrs):
    """scale's gradient is dOut * scale (no bias): so is its own."""
    ddx = ins["X@GRAD@GRAD"]
    return {"Out@GRAD@GRAD": (ddx * attrs["scale"]).astype(ddx.dtype, copy=False)}


# --- sum of a list (also accumulates gradients; handles SelectedRows) --------------------------
sum_op = defop("sum", inputs=("X*",), outputs=("Out",), attrs={"use_mkldnn": False})


@sum_op.infer
def _sum_shape(ic):
    xs = ic.inputs("X")
    first = xs[0]
    for x in xs[1:]:
        ic.check(len(x.shape) == len(first.shape) and all(map(dims_match, x.shape, first.shape)),
                 f"all inputs must have one shape: {first.name!r} {list(first.shape)} vs "
                 f"{x.name!r} {list(x.shape)}")
    sparse = all(x.type == VarType.SELECTED_ROWS for x in xs)
    ic.set_output("Out", first.shape, first.dtype,
                  type=VarType.SELECTED_ROWS if sparse else VarType.LOD_TENSOR)


@sum_op.kernel
def _sum(ctx, ins, attrs):
    xs = [x for x in ins["X"] if x is not None]
    if xs and isinstance(xs[0], list):  # LoDTensorArrays (gradients): entry by entry
        return {"Out": _sum_arrays(xs)}
    sparse = [x for x in xs if isinstance(x, SelectedRows)]
    if sparse and len(sparse) == len(xs):  # concatenate rows; duplicates add up when applied
        xp = ctx.xp
        return {"Out": SelectedRows(xp.concatenate([s.ids for s in sparse]),
                                    xp.concatenate([s.value for s in sparse]),
                                    sparse[0].full_height)}
    dense = [x for x in xs if not isinstance(x, SelectedRows)]
    out = dense[0] + dense[1] if len(dense) > 1 else dense[0].copy()
    for x in dense[2:]:
        out += x
    for s in sparse:
        ctx.xp.add.at(out, s.ids, s.value)
    return {"Out": out}


def _sum_arrays(arrays):
    out = [None] * max(len(a) for a in arrays)
    for array in arrays:
        for i, v in enumerate(array):
            if v is not None:
                out[i] = v if out[i] is None else out[i] + v
    return out


@sum_op.grad(uses=())
def _sum_grad(ctx, ins, attrs):
    dout = ins["Out@GRAD"]
    return {"X@GRAD": [dout] * len(ctx.op.outputs["X@GRAD"])}


@sum_op.grad_def.grad(uses=(), inputs=("Out@GRAD",))
def _sum_grad_grad(ctx, ins, attrs):
    """sum's gradient copies dOut to every input: its own gradient sums what arrives."""
    grads = [g for g in ins["X@GRAD@GRAD"] if g is not None]
    out = grads[0].copy()
    for g in grads[1:]:
        out += g
    return {"Out@GRAD@GRAD": out}


# --- mean: the average of all elements, shape [1] ----------------------------------------------
mean = defop("mean", inputs=("X",), outputs=("Out",))


@mean.infer
def _mean_shape(ic):
    ic.set_output("Out", [1], ic.input("X").dtype)


@mean.kernel
def _mean(ctx, ins, attrs):
    x = ins["X"]
    if type(x) is np.ndarray and x.flags.c_contiguous:
        # x.sum(dtype=x.dtype)'s sum (over the elements in memory order, as one run), made
        # straight into a [1] array: no scalar turned back into an array
        out = np.add.reduce(x.ravel(), 0, x.dtype, None, True)
    else:
        kernels = fused.kernels(ctx.xp)
        if kernels is not None and fused.takes(x) and 1 <= x.size <= fused.MEAN_MAX:
            return {"Out": kernels.mean(ctx.xp.ascontiguousarray(x))}
        out = x.sum(dtype=x.dtype).reshape(1)  # what x.mean() does, minus its Python wrapper
    out /= x.size
    return {"Out": out}


@mean.specialize
def _mean_special(step, ins):
    x = ins["X"]
    if type(x) is not np.ndarray or not x.flags.c_contiguous:
        return None
    return Special(["{t0} = {k_reduce}({X}.ravel(), 0, {k_dtype}, None, True)",
                    "{t0} /= {k_size}", "{Out} = {t0}"],
                   {"reduce": np.add.reduce, "dtype": x.dtype, "size": x.size})


@mean.grad(uses=("X",), shape_only=("X",))
def _mean_grad(ctx, ins, attrs):
    x, dout = ins["X"], ins["Out@GRAD"]
    kernels = fused.kernels(ctx.xp)
    if kernels is not None and fused.takes(x, dout):
        return {"X@GRAD": kernels.fill_scaled(dout, x.size, ctx.xp.empty(x.shape, x.dtype))}
    value = dout.ravel()[0] / x.size
    if ctx.xp is not np:
        return {"X@GRAD": ctx.xp.full(x.shape, value, dtype=x.dtype)}
    grad = np.empty(x.shape, x.dtype)  # what np.full does, minus its Python-level wrapper
    grad.fill(value)
    return {"X@GRAD": grad}


@mean.grad_def.specialize
def _mean_grad_special(step, ins):
    x, dout = ins["X"], ins["Out@GRAD"]
    if type(dout) is not np.ndarray:
        return None
    return Special(["{t0} = {Out@GRAD}.ravel()[0] / {k_size}",
                    "{t1} = {k_empty}({k_shape}, {k_dtype})", "{t1}.fill({t0})",
                    "{X@GRAD} = {t1}"],
                   {"size": x.size, "empty": np.empty, "shape": x.shape, "dtype": x.dtype})


linear_grad_grad(mean)


# --- sign (used by L1 decay; no gradient) ------------------------------------------------------
sign = defop("sign", inputs=("X",), outputs=("Out",))
sign.infer(infer_same_as())


@sign.kernel
def _sign(ctx, ins, attrs):
    return {"Out": ctx.xp.sign(ins["X"])}
