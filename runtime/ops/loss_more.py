"""More loss ops of Fluid 1.8: sigmoid_cross_entropy_with_logits (elementwise, labels in
[0, 1], entries equal to ignore_index contribute nothing; normalize divides by how many do)."""

from .registry import defop, infer_same_as

sce = defop("sigmoid_cross_entropy_with_logits", inputs=("X", "Label"), outputs=("Out",),
            attrs={"ignore_index": -100, "normalize": False})
sce.infer(infer_same_as())


def _keep(xp, label, attrs):
    """1 where the label counts, 0 where it equals ignore_index; and the normalizer."""
    keep = (label != attrs["ignore_index"]).astype(label.dtype)
    count = float(keep.sum()) if attrs["normalize"] else 1.0
    return keep, max(count, 1.0) if attrs["normalize"] else 1.0


@sce.kernel
def _sce(ctx, ins, attrs):
    xp, x, label = ctx.xp, ins["X"], ins["Label"]
    # max(x, 0) - x * z + log(1 + e^-|x|): no overflow for large |x|
    loss = xp.maximum(x, 0) - x * label + xp.log1p(xp.exp(-xp.abs(x)))
    keep, norm = _keep(xp, label, attrs)
    return {"Out": (loss * keep / norm).astype(x.dtype, copy=False)}


@sce.grad(uses=("X", "Label"), inputs=("X",))
def _sce_grad(ctx, ins, attrs):
    xp, x, label, dout = ctx.xp, ins["X"], ins["Label"], ins["Out@GRAD"]
    z = xp.exp(-xp.abs(x))
    sigmoid = xp.where(x >= 0, 1 / (1 + z), z / (1 + z))
    keep, norm = _keep(xp, label, attrs)
    return {"X@GRAD": (dout * (sigmoid - label) * keep / norm).astype(x.dtype, copy=False)}

