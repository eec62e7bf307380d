"""docs/advice.md #23: an op produced NaN/Inf: name it and its inputs; clip, lower LR, add eps."""

from typing import List, Optional

from ..profile.records import NanInfEvent
from ..sources.code import CodeWriter
from .base import Advice, rule
from .facts import main_ops, names, startup_outputs, writer

CHECK_DATA = ("# check the data and labels the reader yields:\n"
              "assert np.isfinite(x).all() and 0 <= label.min() and label.max() < num_classes")
EPSILON_WHY = {  # op type -> what its guarded call (the code writer's nan_guard) avoids
    "log": "never take log(0)", "elementwise_div": "never divide by 0",
    "sqrt": "never sqrt a negative", "pow": "keep the base positive",
    "cross_entropy": "stable log-softmax; replaces softmax + cross_entropy"}
TITLES = {None: "NaN/Inf first produced by {op}",
          "inputs": "NaN/Inf first seen entering {op}, made before it",
          "parameters": "NaN/Inf in {op}'s parameters: training diverged"}
FOUND_IN = {  # where a module's NaN/Inf already were as it ran (NanInfEvent.found_in)
    None: "",
    "inputs": ("; its input held them already: an op before it made them, outside any "
               "module (a function the forward calls, such as a log of a non-positive "
               "value or a division by zero)"),
    "parameters": ("; its parameters hold them: an earlier update diverged (the learning "
                   "rate, or gradients that exploded)")}
INPUTS_BEFORE = ("# guard the functions the forward calls before this module:\n"
                 "# x.clamp(min=1e-8).log() for log, x / (y + 1e-8) for a division")
OPTIMIZER_OPS = ("sgd", "momentum", "adam", "adamax", "adagrad", "adadelta", "rmsprop",
                 "lamb", "lars_momentum", "ftrl", "decayed_adagrad")


@rule
def nan_inf(profile) -> Optional[Advice]:
    """NaN/Inf (#23)

    Names the first op that produced NaN/Inf (events from FLAGS_check_nan_inf).
    """
    events = profile.events_of("nan_inf")
    found = [e for e in events if not e.more]  # the outputs recorded one by one
    if not found:
        return None
    first = min(found, key=lambda e: e.t_s)
    n_found = len(found) + sum(e.more for e in events)
    op = first.op_type or "?"
    inputs = list(first.inputs)
    output = first.output
    where = f"op {op} (#{_or_unknown(first.op_index)})"
    counts = _counts(first)
    found_in = getattr(first, "found_in", None)
    return Advice(
        id="nan-inf", source=23, severity="high", confidence="high", blocking=True,
        title=TITLES[found_in].format(op=op),
        evidence=(f"{where} produced {counts}in {output or 'its output'!r} at step "
                  f"{_or_unknown(first.step)}; its inputs: {', '.join(inputs) or 'none'}"
                  f"{_origin(profile, inputs)}{FOUND_IN[found_in]}. {n_found} NaN/Inf "
                  f"output(s) found{_went_on(profile, found, events)}."),
        change="\n".join(_changes(writer(profile), op, found_in)),
        expected_gain="finite losses again: every step after the first NaN is wasted",
        figures={"op": op, "op_index": first.op_index, "step": first.step,
                 "inputs": inputs, "output": output, "n_nan": first.n_nan,
                 "n_inf": first.n_inf, "events": n_found})


def _went_on(profile, found, events) -> str:
    """'; training went on (--check-nan-continue): NaN/Inf in 12 steps, the last step 40'
    ("" when the first one stopped the job)."""
    if not profile.options.check_nan_continue:
        return ""
    totals = [e for e in events if e.more]
    steps = {e.step for e in found if e.step is not None}
    n_steps = totals[-1].steps_with if totals else len(steps)
    last = totals[-1].last_step if totals else max(steps, default=None)
    return (f"; training went on (--check-nan-continue): NaN/Inf in {n_steps} step(s), the "
            f"last step {_or_unknown(last)}")


def _or_unknown(value) -> str:
    return "?" if value is None else str(value)


def _changes(code: CodeWriter, op: str, found_in: Optional[str] = None) -> List[str]:
    base = op[:-5] if op.endswith("_grad") else op
    clip = code.gradient_clip(1.0, "clip gradients")
    lower_lr = ("# lower the learning rate 10x (any optimizer):\n"
                + code.optimizer("SGD", {"learning_rate": "learning_rate / 10"}))
    if found_in == "parameters":  # (the weights diverged: the update, first)
        return [lower_lr, clip, CHECK_DATA]
    if found_in == "inputs":  # (made before this module: by the forward's own functions)
        return [INPUTS_BEFORE, CHECK_DATA, clip]
    guard = code.nan_guard(base) if base in EPSILON_WHY else None
    if guard is not None and not op.endswith("_grad"):
        return [f"# {EPSILON_WHY[base]}:\n{guard}", CHECK_DATA, clip]
    if base in OPTIMIZER_OPS or op.endswith("_grad"):  # exploding gradients first
        return [clip, lower_lr, CHECK_DATA]
    return [CHECK_DATA, clip, lower_lr]


def _counts(event: NanInfEvent) -> str:
    """The NaN and Inf counts in words (the runtime reports both, never both zero; an event
    without counts leaves them at 0)."""
    if not event.n_nan and not event.n_inf:
        return "NaN/Inf "
    return f"{event.n_nan} NaN and {event.n_inf} Inf "


def _origin(profile, inputs: List[str]) -> str:
    """' (x is fed, not computed)' for inputs no op or startup program writes: bad data."""
    ops = main_ops(profile)
    if not ops:
        return ""
    written = {n for op in ops for n in names(op.outputs)} | startup_outputs(profile)
    fed = [n for n in inputs if n not in written and not n.endswith("@GRAD")]
    if not fed:
        return ""
    return f" ({', '.join(fed)} {'is' if len(fed) == 1 else 'are'} fed, not computed)"
