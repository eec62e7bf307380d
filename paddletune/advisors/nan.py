"""ADVICE.md #23: an op produced NaN/Inf: name it and its inputs; clip, lower LR, add eps."""

from typing import List, Optional

from .base import Advice, rule
from .facts import main_ops, names, startup_outputs

CLIP = ("# clip gradients (before optimizer.minimize(loss)):\n"
        "fluid.clip.set_gradient_clip(fluid.clip.GradientClipByGlobalNorm(clip_norm=1.0))")
LOWER_LR = ("# lower the learning rate 10x (any optimizer):\n"
            "optimizer = fluid.optimizer.SGD(learning_rate=learning_rate / 10)")
CHECK_DATA = ("# check the data and labels the reader yields:\n"
              "assert np.isfinite(x).all() and 0 <= label.min() and label.max() < num_classes")
EPSILON_FIX = {  # op type -> the guarded call
    "log": "# never take log(0):\nout = fluid.layers.log(fluid.layers.clip(x, min=1e-8, max=1e8))",
    "elementwise_div": "# never divide by 0:\nout = fluid.layers.elementwise_div(x, y + 1e-8)",
    "sqrt": "# never sqrt a negative:\nout = fluid.layers.sqrt(fluid.layers.relu(x) + 1e-12)",
    "pow": "# keep the base positive:\nout = fluid.layers.pow(fluid.layers.relu(x) + 1e-8, factor)",
    "cross_entropy": ("# stable log-softmax; replaces softmax + cross_entropy:\n"
                      "loss = fluid.layers.softmax_with_cross_entropy(logits=logits, label=label)"),
}
OPTIMIZER_OPS = ("sgd", "momentum", "adam", "adamax", "adagrad", "adadelta", "rmsprop",
                 "lamb", "lars_momentum", "ftrl", "decayed_adagrad")


@rule
def nan_inf(profile) -> Optional[Advice]:
    """NaN/Inf (#23)

    Names the first op that produced NaN/Inf (events from FLAGS_check_nan_inf).
    """
    found = profile.events_of("nan_inf")
    if not found:
        return None
    first = min(found, key=lambda e: e.get("t") or 0.0)
    op = first.get("op_type") or first.get("op") or "?"
    inputs = _names(first.get("inputs"))
    output = first.get("output") or ", ".join(_names(first.get("outputs")))
    where = f"op {op} (#{first.get('op_index', '?')})"
    counts = _counts(first)
    return Advice(
        id="nan-inf", source=23, severity="high", confidence="high", blocking=True,
        title=f"NaN/Inf first produced by {op}",
        evidence=(f"{where} produced {counts}in {output or 'its output'!r} at step "
                  f"{first.get('step', '?')}; its inputs: {', '.join(inputs) or 'none'}"
                  f"{_origin(profile, inputs)}. {len(found)} NaN/Inf event(s) recorded."),
        change="\n".join(_changes(op)),
        expected_gain="finite losses again: every step after the first NaN is wasted",
        figures={"op": op, "op_index": first.get("op_index"), "step": first.get("step"),
                 "inputs": inputs, "output": output, "n_nan": first.get("n_nan"),
                 "n_inf": first.get("n_inf"), "events": len(found)})


def _changes(op: str) -> List[str]:
    base = op[:-5] if op.endswith("_grad") else op
    if base in EPSILON_FIX and not op.endswith("_grad"):
        return [EPSILON_FIX[base], CHECK_DATA, CLIP]
    if base in OPTIMIZER_OPS or op.endswith("_grad"):  # exploding gradients first
        return [CLIP, LOWER_LR, CHECK_DATA]
    return [CHECK_DATA, CLIP, LOWER_LR]


def _counts(event) -> str:
    n_nan, n_inf = event.get("n_nan"), event.get("n_inf")
    if n_nan is None and n_inf is None:
        return "NaN/Inf "
    return f"{n_nan or 0} NaN and {n_inf or 0} Inf "


def _names(value) -> List[str]:
    if isinstance(value, dict):
        return names(value)
    return [str(v) for v in value or []]


def _origin(profile, inputs: List[str]) -> str:
    """' (x is fed, not computed)' for inputs no op or startup program writes: bad data."""
    ops = main_ops(profile)
    if not ops:
        return ""
    written = {n for op in ops for n in names(op.get("outputs"))} | startup_outputs(profile)
    fed = [n for n in inputs if n not in written and not n.endswith("@GRAD")]
    if not fed:
        return ""
    return f" ({', '.join(fed)} {'is' if len(fed) == 1 else 'are'} fed, not computed)"
