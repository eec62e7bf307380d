"""The memory model behind the memory advice: pure functions over a profile's memory records.

- `simulate(trace, gc, inplace)`: replays one traced step (the memory probe's "trace" record)
  under other garbage-collection / inplace settings and gives the step peak it would have had.
  The trace holds, per op, the pool's bytes before, at the highest and after the op, the bytes
  each output holds of its own, what was freed, and (whatever the settings it ran with) where
  GC=0 would free each temporary and which outputs inplace could write into which input. The
  replay keeps the live temporaries of both settings side by side; the difference, plus the
  allocation an inplace write avoids (or needs), shifts each measured figure.
- `fit(points, fixed_hint)`: peak memory as `max(floor, fixed + per_unit * x)` (x: the batch
  size), least squares over the measured points that grow with x; with a single one,
  `fixed_hint` (parameters, their gradients and optimizer state) is the fixed part.
- `one_step_per_sample(...)`: the bytes each sample adds, from one measured step's phase
  peaks: what does not scale with the batch (parameters, optimizer state, the parameters'
  gradients, the update's temporaries) is taken out, and the forward phase's activations
  (all of which scale) are counted with their gradients. runtime/exec_memory.py's out-of-memory estimate uses the same
  formula (the runtime cannot import paddletune): keep the two in step.
- `largest_fitting(capacity, fixed, per_sample, headroom)`: the largest batch whose
  `fixed + per_sample x batch` leaves `headroom` of the capacity free; `MemoryModel.largest`,
  the summary's batch model and advice #17 all use it.
- `far_beyond(largest, measured)`: a largest batch so far above the measured one that memory
  is not what limits the batch size (throughput stops growing long before).
"""

from dataclasses import dataclass, replace
from typing import Dict, Iterable, Optional, Sequence, Tuple

from .figures import ModelFigures
from .records import MemoryTrace

HEADROOM = 0.10  # share of the capacity a recommended batch leaves free
MIN_SPREAD = 1.2  # a fit needs the largest x at least this much above the smallest
TOP = 8  # largest live temporaries reported at the peak
FLAT = 1.05  # a peak within this factor of the lowest one does not grow with x (yet)
# From one step: the backward pass holds the forward activations plus the gradients being
# computed; measured 1.25-1.45x the forward activations per sample on MLPs and activation
# chains (tests/memjob.py), so 1.5 errs on the safe side
BACKWARD_FACTOR = 1.5
FAR = 64  # a largest batch above FAR x the measured one: memory is not the limit


def one_step_per_sample(batch: float, forward_peak: float, backward_peak: Optional[float],
                        persistable: float, parameters: float) -> Optional[float]:
    """Bytes per sample from one step at `batch`, its phases' peaks taken apart: what does
    not scale with the batch is the persistables (`persistable`: parameters and optimizer
    state), the parameters' gradients (as large as `parameters`) and the update's
    temporaries (the optimizer phase, left out: at a small batch the step peaks there and
    nothing in it scales). What does: the forward phase's activations, and in the backward
    phase those activations with their gradients: the larger of the backward peak above the
    persistables and parameter gradients, and BACKWARD_FACTOR x the activations (at a small
    batch the parameter gradients hide the backward's growth). `backward_peak` None: a
    program without backward (eval), its activations alone. None when nothing scales."""
    if not batch:
        return None
    activations = forward_peak - persistable
    if backward_peak is None:
        scaled = activations
    else:
        scaled = max(backward_peak - persistable - parameters, BACKWARD_FACTOR * activations)
    return scaled / batch if scaled > 0 else None


def largest_fitting(capacity: float, fixed: float, per_sample: float,
                    headroom: float = 0.0) -> Optional[int]:
    """The largest whole batch whose `fixed + per_sample x batch` stays within
    (1 - headroom) x capacity; None when even the fixed part does not fit."""
    room = capacity * (1 - headroom)
    if room <= fixed or per_sample <= 0:
        return None
    return int((room - fixed) // per_sample)


def far_beyond(largest: Optional[float], measured: Optional[float]) -> bool:
    """Whether `largest` is more than FAR x the `measured` batch: memory does not limit the
    batch size there, and throughput stops growing long before."""
    return bool(largest and measured and largest > FAR * measured)


def simulate(trace: MemoryTrace, gc: bool, inplace: bool) -> dict:
    """{"step_peak", "phase_peaks" {tag: bytes}, "peak_op" {index, type}, "largest_live"
    [[temporary, bytes], ...] (the TOP largest held when the peak was reached, after the peak
    op's writes)} the traced step would reach with `gc` (FLAGS_eager_delete_tensor_gb=0 when
    True, GC off when False) and `inplace` (BuildStrategy.enable_inplace)."""
    last_use = trace.last_value_use
    pairs = {int(k): {o: x for o, x in v} for k, v in trace.inplace_candidates.items()}
    frees_at: Dict[int, list] = {}
    for name, index in last_use.items():
        frees_at.setdefault(int(index), []).append(name)
    measured, simulated = _Live(), _Live()
    peak, phases, at_peak = 0, {}, ({}, None)
    for op in trace.ops:
        i = op.index
        granted_m = set(op.inplace)
        granted_t = pairs.get(i, {}) if inplace else {}
        sizes = {o: (measured.get(pairs.get(i, {}).get(o)) if o in granted_m else b)
                 for o, b in op.outputs.items()}
        # an output written into its input needs no allocation of its own
        extra = sum(sizes.get(o, 0) for o in granted_m if o not in granted_t) - \
            sum(sizes.get(o, 0) for o in granted_t if o not in granted_m)
        shift = simulated.total - measured.total
        op_peak = op.peak + shift + extra
        for o, nbytes in sizes.items():
            if o not in last_use:
                continue  # persistables, feeds and fetch targets: the same in both settings
            measured.write(o, nbytes, pairs.get(i, {}).get(o) if o in granted_m else None)
            simulated.write(o, nbytes, granted_t.get(o))
        held = simulated.bytes.copy()  # after the op's writes, before its frees
        measured.drop(op.frees)
        if gc:
            simulated.drop(frees_at.get(i, ()))
        after = op.after + simulated.total - measured.total
        top = max(op_peak, after)
        if top > peak:
            at_peak = (held, op)
        peak = max(peak, top)
        tag = op.tag or "other"
        phases[tag] = max(phases.get(tag, 0), top)
    live, op = at_peak
    largest = sorted(((n, b) for n, b in live.items() if b), key=lambda x: -x[1])[:TOP]
    return {"step_peak": int(peak), "phase_peaks": {k: int(v) for k, v in phases.items()},
            "peak_op": {"index": op.index, "type": op.type} if op else None,
            "largest_live": [[n, int(b)] for n, b in largest]}


class _Live:
    """Live temporaries -> bytes, with a running total."""

    def __init__(self):
        self.bytes: Dict[str, int] = {}
        self.total = 0

    def get(self, name) -> int:
        return self.bytes.get(name, 0) if name is not None else 0

    def write(self, name, nbytes, into=None):
        """`name` gets a buffer of `nbytes`, or takes over input `into`'s buffer."""
        if into is not None:
            nbytes = self.bytes.pop(into, nbytes)
            self.total -= nbytes
        self.total += nbytes - self.bytes.get(name, 0)
        self.bytes[name] = nbytes

    def drop(self, names: Iterable[str]):
        for name in names:
            self.total -= self.bytes.pop(name, 0)


@dataclass(frozen=True)
class MemoryModel:
    """peak(x) = max(floor, fixed + per_unit * x), fitted from `points` [(x, peak bytes)].
    `floor`: the lowest measured peak (small batches often peak where x does not matter,
    e.g. in the optimizer)."""

    fixed: float
    per_unit: float
    unit: str  # "sample" or "feed byte"
    points: Tuple[Tuple[float, float], ...]
    how: str  # "fit" (least squares over 2+ growing points) or "one point" (fixed part given)
    floor: float = 0.0

    def peak(self, x: float) -> float:
        return max(self.floor, self.fixed + self.per_unit * x)

    def largest(self, capacity: float, headroom: float = HEADROOM) -> Optional[int]:
        """The largest whole x whose predicted peak stays within (1 - headroom) x capacity
        (None when even the fixed part does not fit)."""
        if capacity * (1 - headroom) <= self.floor:
            return None
        return largest_fitting(capacity, self.fixed, self.per_unit, headroom)

    def at_least(self, x: float, peak: float) -> "MemoryModel":
        """The model with its slope raised (if needed) so that peak(x) >= `peak`: x was seen
        to need at least that much (it ran out of memory there)."""
        need = (peak - self.fixed) / x
        if need <= self.per_unit:
            return self
        return replace(self, per_unit=need, how=f"{self.how}, raised to the out-of-memory")

    def error(self) -> float:
        """The largest relative miss of the model on its own points."""
        return max((abs(self.peak(x) - p) / p for x, p in self.points if p), default=0.0)

    def to_dict(self) -> dict:
        return {"fixed_bytes": self.fixed, "per_unit_bytes": self.per_unit, "unit": self.unit,
                "floor_bytes": self.floor, "how": self.how,
                "points": [list(p) for p in self.points], "max_error": self.error()}

    def figures(self, **extra) -> ModelFigures:
        """The model as the summary holds it (figures.ModelFigures)."""
        return ModelFigures(self.fixed, self.per_unit, self.unit, self.floor, self.how,
                            self.points, self.error(), **extra)


def fit(points: Sequence[Sequence[float]], fixed_hint: Optional[float] = None,
        unit: str = "sample") -> Optional[MemoryModel]:
    """The model through `points` [(x, peak)]. The points more than FLAT above the lowest
    peak are growing with x: least squares over them when there are two or more that spread
    by MIN_SPREAD and the line is sensible (positive slope, fixed part >= 0); else a line
    through the largest x with `fixed_hint` as the fixed part (with only flat points this
    over-states the slope: a safe side); None when neither is possible."""
    pts = tuple(sorted((float(x), float(p)) for x, p in points if x and p))
    if not pts:
        return None
    floor = min(p for _, p in pts)
    growing = [(x, p) for x, p in pts if p > FLAT * floor]
    xs = [x for x, _ in growing]
    if len(set(xs)) >= 2 and max(xs) >= MIN_SPREAD * min(xs):
        n = len(growing)
        mx, mp = sum(xs) / n, sum(p for _, p in growing) / n
        sxx = sum((x - mx) ** 2 for x in xs)
        slope = sum((x - mx) * (p - mp) for x, p in growing) / sxx
        fixed = mp - slope * mx
        if slope > 0 and fixed >= 0:
            return MemoryModel(fixed, slope, unit, pts, "fit", floor)
    if fixed_hint is None:
        return None
    x, p = pts[-1]
    if p <= fixed_hint:
        return None
    return MemoryModel(float(fixed_hint), (p - fixed_hint) / x, unit, pts, "one point", floor)


def batch_fit(m) -> Optional[MemoryModel]:
    """The batch model of a summary's memory figures (figures.MemoryFigures): least squares
    over its batch points that grow with the batch, else `one_step_model` at the largest
    batch measured, raised (`at_least`) so that a batch that ran out of memory needs the
    whole capacity; None without a model."""
    model = fit(m.batch_points)
    if model is None:
        model = one_step_model(m)
    oom, capacity = m.oom, m.capacity_bytes
    if model is not None and oom is not None and oom.batch_size and capacity:
        model = model.at_least(oom.batch_size, capacity)
    return model


def one_step_model(m) -> Optional[MemoryModel]:
    """The model from the largest batch measured alone (one_step_per_sample): the
    persistables fixed, the measured peak as the floor. Without the forward phase's peak at
    that batch, `fit` with the parameters, their gradients and the optimizer state fixed."""
    if not m.batch_points:
        return None
    batch = m.batch_points[-1][0]
    phases = m.phase_peaks  # the highest of each phase: the largest batch's
    persistable = persistable_bytes(m)
    if phases.forward_bytes is None or persistable is None:
        return fit(m.batch_points, fixed_bytes(m))
    per_sample = one_step_per_sample(batch, phases.forward_bytes, phases.backward_bytes,
                                     persistable, m.by_category_at_peak.parameters)
    if per_sample is None:
        return None
    points = tuple((float(x), float(p)) for x, p in m.batch_points)
    return MemoryModel(persistable, per_sample, "sample", points, "one point",
                       min(p for _, p in points))


def trace_of(profile, program=None) -> Optional[MemoryTrace]:
    """The memory trace of `program` (default: the main program), None without one."""
    want = program if program is not None else profile.summary.main_program
    return next((t for t in profile.records("memory", MemoryTrace) if t.program == want), None)


def fixed_bytes(m) -> Optional[float]:
    """What does not grow with the batch: parameters, their gradients (as large) and the
    optimizer state, from the breakdown at the pool's peak (figures.MemoryFigures)."""
    by = m.by_category_at_peak
    if not by.parameters:
        return None
    return float(2 * by.parameters + by.optimizer_state)


def persistable_bytes(m) -> Optional[float]:
    """What no step frees and no batch size changes: parameters and optimizer state, from
    the breakdown at the pool's peak (figures.MemoryFigures); None without parameters."""
    by = m.by_category_at_peak
    if not by.parameters:
        return None
    return float(by.parameters + by.optimizer_state)
