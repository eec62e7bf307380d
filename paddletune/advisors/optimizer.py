"""docs/advice.md #19: under memory pressure, an optimizer keeping two or more accumulators per
parameter (Adam, Adadelta, RMSProp, ...) holds a large share of the peak: Momentum keeps one.
The predicted peak takes the saved state off every phase, and the update's temporaries off
the update phase: the runtime's Momentum updates its parameter and velocity in place (one
fused loop on the CPU, runtime/ops/cpu_kernels.py; one kernel on a GPU, runtime/ops/fused.py)."""

from typing import Optional, Tuple

from ..profile.figures import MemoryFigures
from .base import Advice, rule
from .facts import OPTIMIZER_NAMES, human_bytes, main_ops, writer
from .memory import memory_summary, pressure, pressure_words

OPTIMIZER_SHARE = 0.25  # optimizer state share of the step peak
# slots of an optimizer op that are not a per-parameter accumulator
_NOT_STATE = {"Param", "Grad", "LearningRate", "Beta1Pow", "Beta2Pow", "MasterParam"}

# --- #19 ----------------------------------------------------------------------------------------


def optimizer_in(profile) -> Optional[tuple]:
    """(op type, accumulators per parameter) of the main program's optimizer (of any program
    when no step completed), from its update ops' inputs (None without a known update op)."""
    ops = main_ops(profile) or [op for record in profile.programs.values()
                                for op in record.ops]
    for op in ops:
        if op.type in OPTIMIZER_NAMES:
            slots = [s for s, v in op.inputs.items() if v and s not in _NOT_STATE]
            return op.type, len(slots)
    return None


def _breakdown(m: MemoryFigures) -> Tuple[float, float, float]:
    """(optimizer state bytes, parameter bytes, the peak they are part of): at the pool's
    peak, or, when the run ran out of memory before a step completed, at the failure (what
    was held plus the request)."""
    oom = m.oom
    if oom is not None and not m.step_peak_bytes:
        held = (oom.allocated_bytes or 0) + (oom.requested_bytes or 0)
        return (oom.by_tag.get("optimizer_state", 0), oom.by_tag.get("parameters", 0),
                float(held))
    by = m.by_category_at_peak
    return by.optimizer_state, by.parameters, float(m.step_peak_bytes or
                                                     m.peak_allocated_bytes or 0)


def _peak_with_momentum(m: MemoryFigures, base: float, saved: float) -> float:
    """The step peak with Momentum's one accumulator per parameter: `saved` bytes of state
    less in every phase; where the peak is in the update, its temporaries (the "optimizer"
    bytes at the pool's peak) go too, Momentum's update making none."""
    phases = m.phase_peaks
    others = max(phases.forward_bytes or 0, phases.backward_bytes or 0)
    update = phases.optimizer_bytes or 0
    temporaries = m.by_category_at_peak.optimizer
    if not update or m.oom is not None:
        return base - saved
    return max(others - saved, update - saved - temporaries)


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
    state, params, base = _breakdown(m)
    failed = m.oom is not None and not m.step_peak_bytes
    if not base or not params or state < OPTIMIZER_SHARE * base:
        return None
    saved = min(params * (slots - 1), state)
    predicted = _peak_with_momentum(m, base, saved)
    name = OPTIMIZER_NAMES[op_type]
    return Advice(
        id="optimizer-memory", source=19, severity="high" if m.oom is not None else "medium",
        confidence="medium",  # a lighter optimizer changes the training: check convergence
        title=f"{name}'s state holds {state / base:.0%} of the peak",
        evidence=(f"{pressure_words(m)}; {name} keeps {slots} accumulators per parameter: "
                  f"{human_bytes(state)} of optimizer state for {human_bytes(params)} of "
                  f"parameters, {state / base:.0%} of the {human_bytes(base)} "
                  + ("the failing step held and asked for." if failed else "step peak.")),
        change="\n".join([
            writer(profile).optimizer("Momentum", {"learning_rate": "lr", "momentum": 0.9},
                                      instead_of=name, why="one accumulator per parameter"),
            "# re-tune the learning rate: Momentum usually wants a larger one than " + name]),
        expected_gain=(f"{human_bytes(saved)} less optimizer state (and no update "
                       f"temporaries: Momentum updates in place): step peak "
                       f"{human_bytes(base)} -> ~{human_bytes(predicted)}"),
        figures={"optimizer": op_type, "accumulators": slots, "optimizer_state_bytes": state,
                 "parameter_bytes": params, "saved_bytes": saved, "step_peak_bytes": base,
                 "predicted_peak_bytes": predicted, "peak_basis": "accounting",
                 "pressure": pressure(m)})
