"""docs/advice.md #9: softmax feeding cross_entropy: use the fused softmax_with_cross_entropy."""

from typing import List, Optional, Sequence, Tuple

from ..profile.records import ProgramOp
from ..sources.code import CodeWriter
from .base import Advice, rule
from .facts import code_name, is_forward, main_ops, names, op_types_share, writer

PAIR_TYPES = ("softmax", "cross_entropy", "softmax_grad", "cross_entropy_grad")
LOW_SHARE = 0.02  # below this share of op time the saving is small: severity low


@rule
def unfused_softmax_cross_entropy(profile) -> Optional[Advice]:
    """softmax + cross_entropy fusion (#9)

    Fires when a softmax op's output is the X input of a cross_entropy op.
    """
    ops = main_ops(profile)
    pairs = softmax_ce_pairs(ops)
    if not pairs:
        return None
    share = op_types_share(profile, PAIR_TYPES)
    figures = {"pairs": [{"logits": lg, "softmax": sm, "label": lb} for lg, sm, lb in pairs],
               "op_share": share}
    measured = (f"; softmax, cross_entropy and their gradients take {share:.1%} of the "
                f"measured op time" if share is not None else
                " (no op timings: profile with --ops to measure their cost)")
    logits, softmax_out, label = pairs[0]
    return Advice(
        id="unfused-softmax-cross-entropy", source=9,
        title="Use the fused softmax_with_cross_entropy",
        severity="low" if share is not None and share < LOW_SHARE else "medium",
        evidence=(f"{len(pairs)} softmax op(s) feed cross_entropy: softmax({logits!r}) -> "
                  f"{softmax_out!r} -> cross_entropy(label={label!r}){measured}. Taking the "
                  f"log of a softmax that underflowed to 0 gives inf/NaN losses."),
        change=_change(writer(profile), ops, pairs),
        expected_gain=_gain(share),
        confidence="high" if share is not None else "medium", figures=figures)


def softmax_ce_pairs(ops: Sequence[ProgramOp]) -> List[Tuple[str, str, str]]:
    """(logits, softmax output, label) for each softmax whose output is cross_entropy's X."""
    made_by_softmax = {}
    for op in ops:
        if op.type == "softmax":
            for out in op.outputs.get("Out", ()):
                made_by_softmax[out] = _first(op.inputs, "X", "?")
    pairs = []
    for op in ops:
        if op.type != "cross_entropy":
            continue
        x = _first(op.inputs, "X", None)
        if x in made_by_softmax:
            pairs.append((made_by_softmax[x], x, _first(op.inputs, "Label", "?")))
    return pairs


def _first(slots, slot: str, default):
    """The first variable of an op's `slot`, `default` when it has none."""
    return next(iter(slots.get(slot) or ()), default)


def _change(code: CodeWriter, ops: Sequence[ProgramOp], pairs) -> str:
    lines = []
    for logits, softmax_out, label in pairs:
        keep = _other_readers(ops, softmax_out)
        lines.append(f"# replaces softmax({logits!r}) + cross_entropy (the same per-example "
                     f"cost): pass the logits")
        if keep:
            lines.append(f"# prediction replaces {softmax_out!r} in {', '.join(keep)}")
        lines.append(code.fused_softmax_cross_entropy(
            code_name(logits, "logits"), code_name(label, "label"), return_softmax=bool(keep)))
    return "\n".join(lines)


def _other_readers(ops: Sequence[ProgramOp], var: str) -> List[str]:
    """Forward ops other than cross_entropy that read `var` (e.g. accuracy, top_k)."""
    return sorted({op.type for op in ops
                   if var in names(op.inputs) and is_forward(op) and op.type != "cross_entropy"})


def _gain(share) -> str:
    stable = "numerically stable loss (log-sum-exp instead of log(softmax))"
    if share is None:
        return f"{stable}, and one fused op instead of two forward and two backward ops"
    return (f"{stable}; part of the {share:.1%} of op time the four ops take now (one fused "
            f"pass, and its gradient is simply softmax - label)")
