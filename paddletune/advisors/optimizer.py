"""ADVICE.md #19: under memory pressure, an optimizer keeping two or more accumulators per
parameter (Adam, Adadelta, RMSProp, ...) holds a large share of the peak: Momentum keeps one.
The predicted peak takes the saved state off every phase, and the update's temporaries
shrink with the accumulators (see _peak_with_fewer_accumulators)."""

from typing import Optional

from .base import Advice, rule
from .facts import OPTIMIZER_NAMES, human_bytes, main_ops
from .memory import memory_summary, pressure, pressure_words

OPTIMIZER_SHARE = 0.25  # optimizer state share of the step peak
# slots of an optimizer op that are not a per-parameter accumulator
_NOT_STATE = {"Param", "Grad", "LearningRate", "Beta1Pow", "Beta2Pow", "MasterParam"}

# --- #19 ----------------------------------------------------------------------------------------


def optimizer_in(profile) -> Optional[tuple]:
    """(op type, accumulators per parameter) of the main program's optimizer (of any program
    when no step completed), from its update ops' inputs (None without a known update op)."""
    ops = main_ops(profile) or [op for record in profile.programs.values()
                                for op in record.get("ops") or ()]
    for op in ops:
        if op.get("type") in OPTIMIZER_NAMES:
            slots = [s for s, v in (op.get("inputs") or {}).items() if v and s not in _NOT_STATE]
            return op["type"], len(slots)
    return None


def _breakdown(m: dict) -> tuple:
    """(bytes by category, the peak they make up): at the pool's peak, or, when the run ran
    out of memory before a step completed, at the failure (what was held plus the request)."""
    by = m.get("by_category_at_peak") or {}
    base = float(m.get("step_peak_bytes") or m.get("peak_allocated_bytes") or 0)
    oom = m.get("oom")
    if oom and not m.get("step_peak_bytes"):
        by = oom.get("by_tag") or {}
        base = float((oom.get("allocated") or 0) + (oom.get("requested") or 0))
    return by, base


def _peak_with_fewer_accumulators(m: dict, base: float, saved: float, slots: int) -> float:
    """The step peak with one accumulator per parameter instead of `slots`: `saved` bytes of
    state less in every phase; where the peak is in the update, its temporaries (the
    "optimizer" bytes at the pool's peak) are taken to shrink with the accumulators too."""
    phases = m.get("phase_peaks_bytes") or {}
    others = max((phases.get(k) or 0 for k in ("forward", "backward")), default=0)
    update = phases.get("optimizer") or 0
    temporaries = (m.get("by_category_at_peak") or {}).get("optimizer") or 0
    if not update or m.get("oom"):
        return base - saved
    return max(others - saved, update - saved - temporaries * (1 - 1 / slots))


@rule
def optimizer_memory(profile) -> Optional[Advice]:
    """optimizer state memory (#19)

    Under memory pressure, an optimizer keeping two or more accumulators per parameter holds
    OPTIMIZER_SHARE or more of the step peak: Momentum keeps one.
    """
    m = memory_summary(profile)
    found = optimizer_in(profile) if m else None
    if not found or found[1] < 2 or not pressure(m):
        return None
    op_type, slots = found
    by, base = _breakdown(m)
    failed = bool(m.get("oom")) and not m.get("step_peak_bytes")
    state, params = by.get("optimizer_state") or 0, by.get("parameters") or 0
    if not base or not params or state < OPTIMIZER_SHARE * base:
        return None
    saved = min(params * (slots - 1), state)
    predicted = _peak_with_fewer_accumulators(m, base, saved, slots)
    name = OPTIMIZER_NAMES[op_type]
    return Advice(
        id="optimizer-memory", source=19, severity="high" if m.get("oom") else "medium",
        confidence="medium",  # a lighter optimizer changes the training: check convergence
        title=f"{name}'s state holds {state / base:.0%} of the peak",
        evidence=(f"{pressure_words(m)}; {name} keeps {slots} accumulators per parameter: "
                  f"{human_bytes(state)} of optimizer state for {human_bytes(params)} of "
                  f"parameters, {state / base:.0%} of the {human_bytes(base)} "
                  + ("the failing step held and asked for." if failed else "step peak.")),
        change="\n".join([
            "optimizer = fluid.optimizer.Momentum(learning_rate=lr, momentum=0.9)  # instead "
            f"of fluid.optimizer.{name}(...): one accumulator per parameter",
            "# re-tune the learning rate: Momentum usually wants a larger one than " + name]),
        expected_gain=(f"{human_bytes(saved)} less optimizer state (and smaller update "
                       f"temporaries): step peak "
                       f"{human_bytes(base)} -> ~{human_bytes(predicted)}"),
        figures={"optimizer": op_type, "accumulators": slots, "optimizer_state_bytes": state,
                 "parameter_bytes": params, "saved_bytes": saved, "step_peak_bytes": base,
                 "predicted_peak_bytes": predicted, "pressure": pressure(m)})
