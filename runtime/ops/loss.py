"""Loss ops: cross_entropy (on probabilities) and the fused, numerically stable
softmax_with_cross_entropy (on logits). Hard labels are int64 with a trailing dimension of 1."""

import array
import weakref

import numpy as np

from .. import device_checks
from . import cpu_kernels, fused
from .registry import Special, defop, dims_match

_TINY = 1e-20  # Paddle clips log(0) to a large finite value instead of inf


def _check_labels(xp, label, n_classes, ignore_index, what):
    """Raise a clear error when a hard label is outside [0, n_classes)."""
    flat = label.reshape(-1)
    valid = flat[flat != ignore_index] if ignore_index is not None else flat
    if valid.size == 0:
        return
    lo, hi = int(valid.min()), int(valid.max())
    if lo < 0 or hi >= n_classes:
        bad = lo if lo < 0 else hi
        raise ValueError(_out_of_range(bad, int(xp.nonzero(flat == bad)[0][0]), n_classes, what))


def _out_of_range(value, row, n_classes, what):
    return (f"label value {value} (at row {row}) is out of range [0, {n_classes}) for {what} "
            f"with {n_classes} classes; check the labels of your data or the size of the last "
            f"layer")


def _infer_loss(ic, x_slot, label_slot):
    x, label = ic.input(x_slot), ic.input(label_slot)
    soft = ic.attrs.get("soft_label", False)
    axis = ic.attrs.get("axis", -1)
    rank = len(x.shape)
    axis = axis + rank if axis < 0 else axis
    ic.check(0 <= axis < rank, f"axis is out of range for {ic.describe(x_slot)}")
    ic.check(len(label.shape) == rank,
             f"{ic.describe(label_slot)} must have the rank of {ic.describe(x_slot)}; for hard "
             f"labels use shape [batch, 1] (reshape labels with .reshape(-1, 1))")
    for i, (a, b) in enumerate(zip(x.shape, label.shape)):
        if i == axis:
            ok = dims_match(a, b) if soft else b == 1 or b < 0
        else:
            ok = dims_match(a, b)
        ic.check(ok, f"{ic.describe(label_slot)} does not fit {ic.describe(x_slot)} "
                     f"(soft_label={soft}): {'same shape' if soft else 'size 1 on the class axis'} "
                     f"expected")
    if not soft:
        ic.check(label.dtype.kind in "iu",
                 f"hard labels must be integers (int64), got {label.dtype.name}; pass "
                 f"soft_label=True for probability labels")
    loss_shape = list(x.shape)
    loss_shape[axis] = 1
    return loss_shape


def _plain_labels(label, n_classes, ignore_index):
    """True when every hard label is a class index in [0, n_classes) and none can equal
    ignore_index (which then lies outside that range): no masking or checking needed."""
    if label.size == 0 or label.dtype.kind not in "iu":
        return False
    if ignore_index is not None and 0 <= ignore_index < n_classes:
        return False
    unsigned = _UNSIGNED.get(label.dtype)
    if unsigned is not None:  # one reduction: a negative label reads as a huge unsigned one
        if type(label) is np.ndarray:  # (the ufunc's reduce: .max() without its wrapper)
            return int(np.maximum.reduce(label.view(unsigned), None)) < n_classes
        return int(label.view(unsigned).max()) < n_classes
    return ((label.dtype.kind == "u" or int(label.min()) >= 0)  # (e.g. big-endian ints)
            and int(label.max()) < n_classes)


_UNSIGNED = {np.dtype(f"int{bits}"): np.dtype(f"uint{bits}") for bits in (8, 16, 32, 64)}

# the softmax and the labels (weak references) of the last forward pass that found its labels
# plain (softmax_with_cross_entropy on NumPy): its gradient, given the same two arrays, reads
# the same labels (nothing writes a label between the two ops), so it needs no second look
_PLAIN_SEEN = [lambda: None, lambda: None]


def _remember_plain(softmax, label):
    if type(softmax) is np.ndarray and type(label) is np.ndarray:
        _PLAIN_SEEN[:] = weakref.ref(softmax), weakref.ref(label)


def _seen_plain(softmax, label):
    """True when the forward pass that made `softmax` found these very `label` plain."""
    return _PLAIN_SEEN[0]() is softmax and _PLAIN_SEEN[1]() is label


_ROWS = {}  # n -> (0 .. n-1 as a read-only int64 array, the same as a column): `_rows`


def _rows(n):
    """The row numbers of a [n, classes] array for the label picks on NumPy, made once per n
    and outside any memory pool (their memory is an array.array's): a step's pool does not
    serve them, and a step does not make them again."""
    found = _ROWS.get(n)
    if found is None:
        rows = np.frombuffer(array.array("q", range(n)), np.int64)
        rows.flags.writeable = False
        found = (rows, rows[:, None])
        if len(_ROWS) < 256:
            _ROWS[n] = found
    return found


def _pick(xp, values, label, axis):
    """values[..., label, ...] along axis (label has size 1 on that axis)."""
    if values.ndim == 2 and axis in (-1, 1) and label.ndim == 2:  # [batch, classes]: 5x faster
        rows = _rows(values.shape[0])[1] if xp is np else xp.arange(values.shape[0])[:, None]
        return values[rows, label]  # (the rows as a column: the picked values come out shaped
        # [batch, 1], as label is)
    return xp.take_along_axis(values, label.astype(np.int64, copy=False), axis=axis)


def _put(xp, values, label, new, axis):
    """values[..., label, ...] = new along axis, in place."""
    if values.ndim == 2 and axis in (-1, 1):
        values[xp.arange(values.shape[0]), label[:, 0]] = new[:, 0]
    else:
        xp.put_along_axis(values, label, new, axis=axis)


def _subtract_one(xp, values, label, axis):
    """values[..., label, ...] -= 1 along axis, in place."""
    if values.ndim == 2 and axis in (-1, 1) and label.ndim == 2:
        if xp is np:  # one unbuffered pass (each row's index once), not a pick and a put
            np.subtract.at(values, (_rows(values.shape[0])[0], label[:, 0]),
                           cpu_kernels.typed(1, values.dtype))
        else:
            values[xp.arange(values.shape[0]), label[:, 0]] -= 1
    else:
        _put(xp, values, label, _pick(xp, values, label, axis) - 1, axis)


# --- cross_entropy on probabilities -----------------------------------------------------------
cross_entropy = defop("cross_entropy", inputs=("X", "Label"), outputs=("Y",),
                      attrs={"soft_label": False, "ignore_index": -100})


@cross_entropy.infer
def _ce_shape(ic):
    x = ic.input("X")
    ic.set_output("Y", _infer_loss(ic, "X", "Label"), x.dtype)


@cross_entropy.kernel
def _ce(ctx, ins, attrs):
    xp, x, label = ctx.xp, ins["X"], ins["Label"]
    if attrs["soft_label"]:
        y = -(label * xp.log(xp.maximum(x, _TINY))).sum(axis=-1, keepdims=True)
        return {"Y": y.astype(x.dtype, copy=False)}
    ignore = attrs["ignore_index"]
    _check_labels(xp, label, x.shape[-1], ignore, "cross_entropy")
    safe = xp.where(label == ignore, 0, label)
    y = -xp.log(xp.maximum(_pick(xp, x, safe, -1), _TINY))
    y[label == ignore] = 0
    return {"Y": y.astype(x.dtype, copy=False)}


@cross_entropy.grad(uses=("X", "Label"), inputs=("X",))
def _ce_grad(ctx, ins, attrs):
    xp, x, label, dy = ctx.xp, ins["X"], ins["Label"], ins["Y@GRAD"]
    if attrs["soft_label"]:
        return {"X@GRAD": -dy * label / xp.maximum(x, _TINY)}
    ignore = attrs["ignore_index"]
    safe = xp.where(label == ignore, 0, label).astype(np.int64, copy=False)
    picked = _pick(xp, x, safe, -1)
    g = -dy / xp.maximum(picked, _TINY)
    g = xp.where(label == ignore, 0, g).astype(x.dtype, copy=False)
    dx = xp.zeros_like(x)
    _put(xp, dx, safe, g, -1)
    return {"X@GRAD": dx}


# --- cross_entropy2: hard labels, what fluid.layers.cross_entropy appends in Fluid 1.8 --------
cross_entropy2 = defop("cross_entropy2", inputs=("X", "Label"), outputs=("Y", "MatchX", "XShape"),
                       attrs={"ignore_index": -100})


@cross_entropy2.infer
def _ce2_shape(ic):
    x = ic.input("X")
    shape = _infer_loss(ic, "X", "Label")
    ic.set_output("Y", shape, x.dtype)
    ic.set_output("MatchX", shape, x.dtype)
    ic.set_output("XShape", [0] + list(x.shape), x.dtype)


@cross_entropy2.kernel
def _ce2(ctx, ins, attrs):
    x = ins["X"]
    out = _ce(ctx, ins, dict(attrs, soft_label=False))
    result = {"Y": out["Y"]}
    if "MatchX" in ctx.want:
        label = ins["Label"]
        ignore = attrs["ignore_index"]
        safe = ctx.xp.where(label == ignore, 0, label)
        result["MatchX"] = _pick(ctx.xp, x, safe, -1).astype(x.dtype, copy=False)
    if "XShape" in ctx.want:
        result["XShape"] = ctx.xp.empty((0,) + tuple(x.shape), dtype=x.dtype)
    return result


@cross_entropy2.grad(uses=("X", "Label"), inputs=("X",), outputs=("Y",))
def _ce2_grad(ctx, ins, attrs):
    return _ce_grad(ctx, ins, dict(attrs, soft_label=False))


# --- softmax_with_cross_entropy on logits -------------------------------------------------------
swce = defop("softmax_with_cross_entropy", inputs=("Logits", "Label"),
             outputs=("Softmax", "Loss"),
             attrs={"soft_label": False, "ignore_index": -100, "numeric_stable_mode": True,
                    "axis": -1})


@swce.infer
def _swce_shape(ic):
    logits = ic.input("Logits")
    loss_shape = _infer_loss(ic, "Logits", "Label")
    ic.set_output("Softmax", logits.shape, logits.dtype)
    ic.set_output("Loss", loss_shape, logits.dtype)


def _fusable(kernels, logits, label, attrs):
    """The fused CUDA kernels serve hard labels on the last axis of float logits."""
    return (kernels is not None and not attrs["soft_label"]
            and attrs["axis"] in (-1, logits.ndim - 1) and fused.takes(logits)
            and fused.label_types_ok(label) and logits.size > 0)


def _swce_fused(ctx, kernels, logits, label, ignore):
    xp, c = ctx.xp, logits.shape[-1]
    flat = xp.ascontiguousarray(logits.reshape(-1, c))
    labels = xp.ascontiguousarray(label.reshape(-1))
    softmax, loss, bad = kernels.swce_forward(flat, labels, ignore)
    n = flat.shape[0]

    def explain(value):
        row = n - value
        return _out_of_range(int(labels[row].get()), row, c, "softmax_with_cross_entropy")
    device_checks.defer(ctx.op, bad, explain)
    return {"Softmax": softmax.reshape(logits.shape),
            "Loss": loss.reshape(logits.shape[:-1] + (1,))}


@swce.kernel
def _swce(ctx, ins, attrs):
    xp, logits, label = ctx.xp, ins["Logits"], ins["Label"]
    if xp is not np:
        kernels = fused.kernels(xp)
        if _fusable(kernels, logits, label, attrs):
            return _swce_fused(ctx, kernels, logits, label, attrs["ignore_index"])
    axis = attrs["axis"]
    if xp is np:  # the reductions .max() and .sum() make, without their Python wrappers
        shifted = logits - np.maximum.reduce(logits, axis, None, None, True)
        exp = np.exp(shifted)
        total = np.add.reduce(exp, axis, None, None, True)
    else:
        shifted = logits - logits.max(axis=axis, keepdims=True)
        exp = xp.exp(shifted)
        total = exp.sum(axis=axis, keepdims=True)
    log_total = xp.log(total)
    softmax = exp
    softmax /= total
    if attrs["soft_label"]:
        loss = (label * (log_total - shifted)).sum(axis=axis, keepdims=True)
        return {"Softmax": softmax, "Loss": loss.astype(logits.dtype, copy=False)}
    ignore = attrs["ignore_index"]
    n_classes = logits.shape[axis]
    if _plain_labels(label, n_classes, ignore):  # the common case: two reductions, no masks
        _remember_plain(softmax, label)
        return {"Softmax": softmax, "Loss": log_total - _pick(xp, shifted, label, axis)}
    return _swce_labelled(xp, label, n_classes, ignore, softmax, log_total, shifted, axis)


def _swce_labelled(xp, label, n_classes, ignore, softmax, log_total, shifted, axis):
    """softmax_with_cross_entropy's outputs where some hard label is not a plain class index
    (checked: ignored rows lose nothing, others raise)."""
    _check_labels(xp, label, n_classes, ignore, "softmax_with_cross_entropy")
    ignored = label == ignore
    has_ignored = bool(ignored.any())
    safe = xp.where(ignored, 0, label) if has_ignored else label
    loss = log_total - _pick(xp, shifted, safe, axis)
    if has_ignored:
        loss[ignored] = 0
    return {"Softmax": softmax, "Loss": loss}


@swce.grad(uses=("Softmax", "Label"), inputs=("Logits",), outputs=("Loss",),
           inplace={"Logits@GRAD": "Softmax"})
def _swce_grad(ctx, ins, attrs):
    xp, softmax, label, dloss = ctx.xp, ins["Softmax"], ins["Label"], ins["Loss@GRAD"]
    axis = attrs["axis"]
    kernels = fused.kernels(xp) if xp is not np else None
    if _fusable(kernels, softmax, label, attrs) and fused.takes(softmax, dloss):
        grad = ctx.reuse("Logits@GRAD", softmax, softmax.shape, softmax.dtype)
        grad = xp.empty_like(softmax) if grad is None else grad
        kernels.swce_grad(softmax, label.reshape(-1), dloss.reshape(-1), softmax.shape[-1],
                          attrs["ignore_index"], grad)
        return {"Logits@GRAD": grad}
    if attrs["soft_label"]:
        return {"Logits@GRAD": (softmax - label) * dloss}
    ignore = attrs["ignore_index"]
    plain = _seen_plain(softmax, label) or _plain_labels(label, softmax.shape[axis], ignore)
    return {"Logits@GRAD": _swce_grad_hard(ctx, xp, softmax, label, dloss, axis, ignore, plain)}


def _swce_grad_hard(ctx, xp, softmax, label, dloss, axis, ignore, plain):
    """softmax_with_cross_entropy's gradient for hard labels (`plain`: every label a class
    index)."""
    ignored = None if plain else label == ignore
    safe = label if plain else xp.where(ignored, 0, label).astype(np.int64, copy=False)
    grad = ctx.reuse("Logits@GRAD", softmax, softmax.shape, softmax.dtype)
    grad = softmax.copy() if grad is None else grad
    _subtract_one(xp, grad, safe, axis)
    grad *= dloss
    if not plain and ignored.any():
        grad *= ~ignored
    return grad


@swce.specialize
def _swce_special(step, ins):
    """The NumPy path for hard labels, the reductions' axis and the labels' checks decided
    (the pick of a [batch, classes] with its row numbers' size known)."""
    logits, label = ins["Logits"], ins["Label"]
    attrs = step.attrs
    if (type(logits) is not np.ndarray or type(label) is not np.ndarray or attrs["soft_label"]
            or not {"Softmax", "Loss"} <= {k for k, _ in step.outs1}):
        return None
    axis, ignore = attrs["axis"], attrs["ignore_index"]
    n_classes = logits.shape[axis]
    plain = _plain_check(label, n_classes, ignore)
    if plain is None:
        return None
    two = logits.ndim == 2 and axis in (-1, 1) and label.ndim == 2
    rows = _rows(logits.shape[0])[1]
    maximum, add, exp, log = np.maximum.reduce, np.add.reduce, np.exp, np.log

    def run(logits, label):
        shifted = logits - maximum(logits, axis, None, None, True)
        softmax = exp(shifted)
        total = add(softmax, axis, None, None, True)
        log_total = log(total)
        softmax /= total
        if plain(label):
            _remember_plain(softmax, label)
            if two:
                return softmax, log_total - shifted[rows, label]
            return softmax, log_total - _pick(np, shifted, label, axis)
        out = _swce_labelled(np, label, n_classes, ignore, softmax, log_total, shifted, axis)
        return out["Softmax"], out["Loss"]
    return Special(["{Softmax}, {Loss} = {k_run}({Logits}, {Label})"], {"run": run})


def _plain_check(label, n_classes, ignore):
    """A function telling whether labels like `label` are plain (_plain_labels), with what
    their dtype and the attrs decide worked out; None where they never are."""
    if label.size == 0 or label.dtype.kind not in "iu":
        return None
    if ignore is not None and 0 <= ignore < n_classes:
        return None
    unsigned = _UNSIGNED.get(label.dtype)
    if unsigned is None:
        return lambda label: _plain_labels(label, n_classes, ignore)
    maximum = np.maximum.reduce
    return lambda label: int(maximum(label.view(unsigned), None)) < n_classes


@swce.grad_def.specialize
def _swce_grad_special(step, ins):
    softmax, label, dloss = ins["Softmax"], ins["Label"], ins["Loss@GRAD"]
    attrs = step.attrs
    if (type(softmax) is not np.ndarray or type(label) is not np.ndarray
            or type(dloss) is not np.ndarray or attrs["soft_label"]):
        return None
    axis, ignore = attrs["axis"], attrs["ignore_index"]
    plain = _plain_check(label, softmax.shape[axis], ignore)
    if plain is None or not (softmax.ndim == 2 and axis in (-1, 1) and label.ndim == 2):
        return None
    rows, one = _rows(softmax.shape[0])[0], cpu_kernels.typed(1, softmax.dtype)
    subtract_at = np.subtract.at
    ctx = step.ctx

    def run(softmax, label, dloss):
        if _seen_plain(softmax, label) or plain(label):
            grad = softmax.copy()
            subtract_at(grad, (rows, label[:, 0]), one)
            grad *= dloss
            return grad
        return _swce_grad_hard(ctx, np, softmax, label, dloss, axis, ignore, False)
    return Special(["{Logits@GRAD} = {k_run}({Softmax}, {Label}, {Loss@GRAD})"], {"run": run})
