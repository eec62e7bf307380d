"""docs/advice.md #9: softmax feeding cross_entropy: use the fused softmax_with_cross_entropy.

Two signals: a program's ops (Fluid: a `softmax` whose output is a `cross_entropy`'s X), and
an eager job's leaf modules or layers (the model's census of its first training step: a
`Softmax` that runs right before a `CrossEntropyLoss` or `NLLLoss`; Paddle's
`CrossEntropyLoss(use_softmax=False)` takes probabilities and is named so) and PyTorch's op
timings (--ops: torch.profiler's `aten::softmax` right before `aten::cross_entropy_loss` or
`aten::nll_loss_nd`, a module's or a functional call's alike)."""

import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from ..profile import records as r
from ..profile.records import ProgramOp
from ..sources.code import CodeWriter
from .base import Advice, rule
from .facts import is_forward, main_ops, names, op_types_share, writer

CROSS_ENTROPY = ("cross_entropy", "cross_entropy2")  # fluid.layers.cross_entropy makes the 2nd
PAIR_TYPES = ("softmax", "softmax_grad", *CROSS_ENTROPY, *(f"{t}_grad" for t in CROSS_ENTROPY))
LOW_SHARE = 0.02  # below this share of op time the saving is small: severity low
MATMUL_OPS = ("mul", "matmul", "matmul_v2")  # an fc layer's product
# eager module pairs (the module that ran, the loss module right after it) -> what it does
MODULE_PAIRS = {
    ("Softmax", "CrossEntropyLoss"): "CrossEntropyLoss, which takes raw scores, applies a "
                                     "second softmax to the probabilities: the loss is "
                                     "flattened and its gradients shrink",
    ("Softmax", "NLLLoss"): "NLLLoss, which expects log-probabilities, computes -p[label] "
                            "on probabilities, not the cross-entropy (and a torch.log between "
                            "them is log(softmax), which underflows to -inf)",
}


# an eager job's op types (--ops: torch.profiler's, paddle.profiler's) -> the module each is
OP_AS_MODULE = {"aten::softmax": "Softmax", "aten::cross_entropy_loss": "CrossEntropyLoss",
                "aten::nll_loss_nd": "NLLLoss", "aten::nll_loss": "NLLLoss",
                "softmax": "Softmax"}


@dataclass(frozen=True)
class SoftmaxHead:
    """A softmax op whose output is a cross_entropy's X, and where its input comes from.

    Fields:
      logits   the softmax's input variable
      softmax  its output variable
      label    the cross_entropy's label variable
      layer    the layer the softmax is the activation of (its Paddle name, "fc_0", the prefix
               of its variables), None for a standalone fluid.layers.softmax
      kind     that layer's type ("fc", "conv2d"), None when not known
      classes  the softmax's last dimension (the fc's size), None when not measured
      readers  the other forward ops that read the softmax output (accuracy, top_k)
    """

    logits: str
    softmax: str
    label: str
    layer: Optional[str] = None
    kind: Optional[str] = None
    classes: Optional[int] = None
    readers: Tuple[str, ...] = ()


@dataclass(frozen=True)
class ModulePair:
    """A module that ran right before a loss module in an eager job: in its recorded steps
    (--ops) or in its first training step (the model's census).

    Fields:
      module  the first module's class ("Softmax")
      loss    the loss module's class ("CrossEntropyLoss", "NLLLoss")
      steps   in how many recorded steps the pair ran (0: seen by the census)
      ops     the two op types as recorded: the classes or torch.profiler's ops
              ("aten::softmax", "aten::cross_entropy_loss")
    """

    module: str
    loss: str
    steps: int
    ops: Tuple[str, str] = ("", "")

    def ran(self) -> str:
        """What was seen, in words."""
        if self.ops == (self.module, self.loss) or not all(self.ops):
            return f"a {self.module} module ran right before the {self.loss} module"
        return (f"{self.ops[0]} ran right before {self.ops[1]} (a {self.module} before a "
                f"{self.loss})")


@rule
def unfused_softmax_cross_entropy(profile) -> Optional[Advice]:
    """softmax + cross_entropy fusion (#9)

    Fires when a softmax op's output is the X input of a cross_entropy op, or (eager jobs)
    when a Softmax module runs right before a CrossEntropyLoss/NLLLoss module: in the steps
    --ops recorded, or in the first training step (the model's census).
    """
    heads = softmax_heads(profile)
    if heads:
        return _program_advice(profile, heads)
    pairs = module_pairs(profile)
    return _module_advice(profile, pairs) if pairs else None


# --- program ops (Fluid) ------------------------------------------------------------------
def _program_advice(profile, heads: Sequence[SoftmaxHead]) -> Advice:
    share = op_types_share(profile, PAIR_TYPES)
    figures = {"pairs": [{"logits": h.logits, "softmax": h.softmax, "label": h.label,
                          "activation_of": h.layer, "classes": h.classes} for h in heads],
               "op_share": share}
    measured = (f"; softmax, cross_entropy and their gradients take {share:.1%} of the "
                f"measured op time" if share is not None else
                " (no op timings: profile with --ops to measure their cost)")
    first = heads[0]
    return Advice(
        id="unfused-softmax-cross-entropy", source=9,
        title="Use the fused softmax_with_cross_entropy",
        severity="low" if share is not None and share < LOW_SHARE else "medium",
        evidence=(f"{len(heads)} softmax op(s) feed cross_entropy: softmax({first.logits!r}) "
                  f"-> {first.softmax!r} -> cross_entropy(label={first.label!r}){measured}. "
                  f"Taking the log of a softmax that underflowed to 0 gives inf/NaN losses."),
        change=_change(writer(profile), heads),
        expected_gain=_gain(share),
        confidence="high" if share is not None else "medium", figures=figures)


def softmax_heads(profile) -> List[SoftmaxHead]:
    """Each softmax of the main program that feeds cross_entropy, with its origin."""
    ops = main_ops(profile)
    pairs = softmax_ce_pairs(ops)
    if not pairs:
        return []
    row_bytes = _output_bytes(profile)
    made_by = {out: op for op in ops if is_forward(op) for out in names(op.outputs)}
    heads = []
    for logits, softmax_out, label in pairs:
        layer = _activation_layer(logits, softmax_out, made_by)
        heads.append(SoftmaxHead(
            logits, softmax_out, label, layer,
            kind=_layer_kind(layer, ops) if layer else None,
            classes=_classes(row_bytes, softmax_out, _ce_output(ops, softmax_out)),
            readers=tuple(_other_readers(ops, softmax_out))))
    return heads


def softmax_ce_pairs(ops: Sequence[ProgramOp]) -> List[Tuple[str, str, str]]:
    """(logits, softmax output, label) for each softmax whose output is cross_entropy's X."""
    made_by_softmax = {}
    for op in ops:
        if op.type == "softmax":
            for out in op.outputs.get("Out", ()):
                made_by_softmax[out] = _first(op.inputs, "X", "?")
    pairs = []
    for op in ops:
        if op.type not in CROSS_ENTROPY:
            continue
        x = _first(op.inputs, "X", None)
        if x in made_by_softmax:
            pairs.append((made_by_softmax[x], x, _first(op.inputs, "Label", "?")))
    return pairs


def _first(slots, slot: str, default):
    """The first variable of an op's `slot`, `default` when it has none."""
    return next(iter(slots.get(slot) or ()), default)


def _layer_name(var: str) -> Optional[str]:
    """The layer a temporary belongs to: 'fc_0.tmp_1' -> 'fc_0' (LayerHelper names its
    temporaries `<layer>.tmp_<n>`); None for a variable named otherwise."""
    layer, sep, _ = var.partition(".tmp_")
    return layer if sep and layer else None


def _activation_layer(logits: str, softmax_out: str,
                      made_by: Dict[str, ProgramOp]) -> Optional[str]:
    """The layer whose act='softmax' the softmax is: its input and output are temporaries of
    the same layer and a forward op of the program made its input (None: a standalone
    fluid.layers.softmax, whose output is the softmax layer's own)."""
    layer = _layer_name(logits)
    if layer is None or layer != _layer_name(softmax_out) or logits not in made_by:
        return None
    return layer


def _layer_kind(layer: str, ops: Sequence[ProgramOp]) -> Optional[str]:
    """The layer's type: "fc" when one of its ops is a matrix product, else the type its
    Paddle name says ('conv2d_1' -> 'conv2d'); None for a layer the script named itself."""
    if any(op.type in MATMUL_OPS and any(_layer_name(v) == layer for v in names(op.outputs))
           for op in ops):
        return "fc"
    generated = re.fullmatch(r"([a-z][a-z0-9_]*?)_\d+", layer)
    return generated.group(1) if generated else None


def _ce_output(ops: Sequence[ProgramOp], softmax_out: str) -> Optional[str]:
    """The per-example loss (Y) of the cross_entropy that reads `softmax_out`."""
    for op in ops:
        if op.type in CROSS_ENTROPY and _first(op.inputs, "X", None) == softmax_out:
            return _first(op.outputs, "Y", None)
    return None


def _output_bytes(profile) -> Dict[str, int]:
    """{variable: bytes its op held for it} in the main program's first memory trace."""
    main = profile.summary.main_program
    for trace in profile.records("memory", r.MemoryTrace):
        if trace.program == main:
            return {var: n for op in trace.ops for var, n in op.outputs.items()}
    return {}


def _classes(row_bytes: Dict[str, int], softmax_out: str, loss: Optional[str]):
    """The softmax's last dimension: its output holds `classes` values per example where the
    cross_entropy's loss holds one, in the same dtype. None when not measured (no memory
    trace, an inplace output) or not a whole number."""
    probs, per_example = row_bytes.get(softmax_out, 0), row_bytes.get(loss, 0)
    if probs <= 0 or per_example <= 0 or probs % per_example:
        return None
    return probs // per_example


def _change(code: CodeWriter, heads: Sequence[SoftmaxHead]) -> str:
    lines = []
    for head in heads:
        how, logits = _logits_lines(code, head)
        lines += how
        label = head.label if head.label.isidentifier() else "label"
        if label != head.label:
            lines.append(f"# label below: the label you now pass to cross_entropy "
                         f"(Paddle's {head.label!r})")
        if head.readers:
            now = f"the {head.kind or 'layer'}'s output" if head.layer else \
                "the softmax's output"
            lines.append(f"# prediction replaces {head.softmax!r} in {', '.join(head.readers)}: "
                         f"pass it where the script passes {now} now")
        lines.append(code.fused_softmax_cross_entropy(logits, label,
                                                      return_softmax=bool(head.readers)))
    return "\n".join(lines)


def _logits_lines(code: CodeWriter, head: SoftmaxHead) -> Tuple[List[str], str]:
    """(the lines that say what the fused op takes, the name it takes it as): the layer
    without its softmax activation, the script's own variable, or the value in words."""
    if head.layer is not None:
        return _activation_lines(code, head), "logits"
    if head.logits.isidentifier():
        return [f"# replaces softmax({head.logits}) + cross_entropy (the same per-example "
                f"cost): pass {head.logits}, the softmax's input"], head.logits
    made_by = _layer_name(head.logits)
    return ["# replaces the softmax + cross_entropy (the same per-example cost); drop the "
            "softmax call",
            f"# logits below: the value you now pass to the softmax (Paddle's "
            f"{head.logits!r}" + (f", the output of layer {made_by!r}" if made_by else "")
            + ")"], "logits"


def _activation_lines(code: CodeWriter, head: SoftmaxHead) -> List[str]:
    """The softmax is a layer's act='softmax': that layer's call without it, as `logits`."""
    kind = head.kind or "layer"
    lines = [f"# the softmax is the act='softmax' of the {kind} Paddle names {head.layer!r} "
             f"(its output {head.softmax!r} feeds cross_entropy)",
             f"# drop act='softmax' from that {kind} call and keep its output as logits: "
             f"the fused op applies the softmax (the same per-example cost)"]
    if head.kind is None:
        return lines + ["# logits below: that layer's output, without act='softmax'"]
    args = {"size": head.classes} if head.kind == "fc" and head.classes else {}
    return lines + [f"logits = {code.layer_call(head.kind, **args, act=None)}  "
                    f"# your {head.kind} call, without act='softmax'"]


def _other_readers(ops: Sequence[ProgramOp], var: str) -> List[str]:
    """Forward ops other than cross_entropy that read `var` (e.g. accuracy), a top_k that
    feeds an accuracy named as that accuracy (fluid.layers.accuracy makes both)."""
    forward = [op for op in ops if is_forward(op)]
    readers = set()
    for op in forward:
        if var not in names(op.inputs) or op.type in CROSS_ENTROPY:
            continue
        outs = set(names(op.outputs))
        fed_accuracy = op.type == "top_k" and any(
            other.type == "accuracy" and outs & set(names(other.inputs)) for other in forward)
        readers.add("accuracy" if fed_accuracy else op.type)
    return sorted(readers)


def _gain(share) -> str:
    stable = "numerically stable loss (log-sum-exp instead of log(softmax))"
    if share is None:
        return f"{stable}, and one fused op instead of two forward and two backward ops"
    return (f"{stable}; part of the {share:.1%} of op time the four ops take now (one fused "
            f"pass, and its gradient is simply softmax - label)")


# --- eager jobs: op timings (PyTorch's --ops) and the model's census ------------------------
def module_pairs(profile) -> List[ModulePair]:
    """The MODULE_PAIRS that ran back to back: in the main program's recorded steps (each
    op record of a PyTorch job is one step's top-level operators in the order they started:
    a functional softmax too), else in the first training step's leaf calls (the model's
    census, either framework, no --ops needed); most frequent first."""
    return recorded_pairs(profile) or census_pairs(profile)


def census_pairs(profile) -> List[ModulePair]:
    """The MODULE_PAIRS the model's census saw back to back in the first training step."""
    census = profile.last_event("model")
    seen = []
    for key, count in (census.pairs if census is not None else {}).items():
        pair = tuple(key.split(">", 1))
        if pair in MODULE_PAIRS:
            seen.append((count, ModulePair(pair[0], pair[1], 0, pair)))
    return [pair for _, pair in sorted(seen, key=lambda item: -item[0])]


def recorded_pairs(profile) -> List[ModulePair]:
    """The MODULE_PAIRS that ran back to back in the main program's steps --ops recorded."""
    main = profile.summary.main_program
    counts: Dict[Tuple[str, str], int] = {}
    recorded: Dict[Tuple[str, str], Tuple[str, str]] = {}
    for record in profile.ops:
        if record.program != main:
            continue
        seen = {}
        for a, b in zip(record.ops, record.ops[1:]):
            pair = (OP_AS_MODULE.get(a.type, a.type), OP_AS_MODULE.get(b.type, b.type))
            if pair in MODULE_PAIRS:
                seen.setdefault(pair, (a.type, b.type))
        for pair, ops in seen.items():
            counts[pair] = counts.get(pair, 0) + 1
            recorded.setdefault(pair, ops)
    return [ModulePair(module, loss, n, recorded[(module, loss)]) for (module, loss), n
            in sorted(counts.items(), key=lambda item: -item[1])]


def _op_types(module: str) -> List[str]:
    """The op types a module's calls are recorded under: its class, or its profiler op
    (torch.profiler's, paddle.profiler's)."""
    return [module] + [op for op, m in OP_AS_MODULE.items() if m == module]


def _where(pair: ModulePair, recorded: int) -> str:
    if pair.steps:
        return f"in {pair.steps} of {recorded} recorded steps"
    return "in the first training step"


def _seen_by(pair: ModulePair) -> str:
    return "The op timings" if pair.steps else "The model's census (its leaf calls in order)"


def _module_advice(profile, pairs: Sequence[ModulePair]) -> Advice:
    first = pairs[0]
    recorded = sum(1 for rec in profile.ops if rec.program == profile.summary.main_program)
    share = op_types_share(profile, [t for p in pairs for t in _op_types(p.module)])
    cost = (f"; the {first.module} calls take {share:.1%} of the measured op time"
            if share is not None else "")
    code, harm = writer(profile), MODULE_PAIRS[(first.module, first.loss)]
    return Advice(
        id="unfused-softmax-cross-entropy", source=9,
        title=f"{first.module} before {first.loss}: give the loss the raw scores",
        severity="high" if first.loss == "CrossEntropyLoss" else "medium",
        evidence=(f"{first.ran()} {_where(first, recorded)}{cost}. If the loss takes that "
                  f"{first.module}'s output, {harm}. {_seen_by(first)} name what ran, not "
                  f"what each one reads: check that the loss reads the softmax."),
        change="\n".join(code.loss_on_logits(p.module, p.loss) for p in pairs),
        expected_gain=("the loss the model is meant to minimise, numerically stable (log-sum-"
                       "exp), and one module less in the forward pass"),
        confidence="medium",
        figures={"module_pairs": [{"module": p.module, "loss": p.loss, "steps": p.steps}
                                  for p in pairs],
                 "recorded_steps": recorded, "module_share": share})
