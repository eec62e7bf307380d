"""docs/advice.md #13, #15-#17: memory, and the figures the other memory rules share (#18 in
sequences.py, #19 in optimizer.py). Each rule states a predicted figure from the memory model
(paddletune/profile/memory_model.py) over the memory probe's records:

- #13 underlying allocations a visible share of the step: the allocator flags (a GPU pool's
  cudaMalloc: advisors/gpu.py, from the same figures);
- #15 garbage collection off: FLAGS_eager_delete_tensor_gb=0, the step peak after replayed
  from the traced step;
- #16 inplace off: BuildStrategy.enable_inplace, the same way;
- #17 out of memory, or the step peak close to the capacity: the largest batch that fits with
  HEADROOM left, from `fixed + per_sample x batch` fitted to the measured peaks;
- #18 (sequences.py) a few batches with far more bytes fed than the rest set the peak: the
  peak of the others, measured, is the peak after dropping or clipping them;
- #19 (optimizer.py) optimizer state a large share of the peak under memory pressure:
  Momentum, with the bytes it saves.

"Memory pressure" is an out-of-memory error or a peak of at least NEAR of the capacity (the
pool's reserved bytes, which is what the capacity limits). Without pressure #15/#16 still fire,
at low severity, when they would save LOW_SAVING of the step peak; #17 and #19 do not.
"""

from dataclasses import dataclass
from typing import Optional

from ..profile.figures import MemoryFigures
from ..profile.memory_model import (HEADROOM, MemoryModel, batch_fit, far_beyond, simulate,
                                    trace_of)
from ..profile.records import MemoryOom, MemoryTrace
from .base import Advice, rule
from .facts import enough_steps, human_bytes, main_loader, ms, script, writer

NEAR = 0.85  # peak share of the capacity that counts as memory pressure
FULL = 0.90  # #17: a steady peak above this share of the capacity is too close
MIN_SAVING = 0.05  # GC/inplace: a saving below this share of the step peak is not worth a word
LOW_SAVING = 0.20  # ... without memory pressure it must save this much (low severity)
ALLOC_SHARES = ((0.15, "high"), (0.05, "medium"), (0.02, "low"))  # #13: share -> severity
MALLOC_EACH_MIN = 10  # #13: underlying allocations per step that, at half the requests or
# more, mean "a malloc per allocation" (FLAGS_fraction_of_*_memory_to_use=0)
GC_WHY = "free each temporary right after its last use (Paddle's default)"


def memory_summary(profile) -> Optional[MemoryFigures]:
    """The summary's memory figures, None without them (no pool: GPU, or the probe off)."""
    m = profile.summary.memory
    return m if m is not None and m.capacity_bytes else None


def pressure(m: MemoryFigures) -> Optional[str]:
    """'oom', 'near' (peak at least NEAR of the capacity) or None."""
    if m.oom is not None:
        return "oom"
    share = m.peak_reserved_share or m.peak_allocated_share or 0.0
    return "near" if share >= NEAR else None


def pressure_words(m: MemoryFigures) -> str:
    """The memory pressure in words: the out-of-memory error, or the peak against the capacity."""
    if m.oom is not None:
        o = m.oom
        return (f"the run ran out of memory (op {o.op_type} asked for "
                f"{human_bytes(o.requested_bytes or 0)} at batch {o.batch_size})")
    return (f"the pool peaked at {human_bytes(m.peak_reserved_bytes)} reserved of "
            f"{human_bytes(m.capacity_bytes)} ({m.peak_reserved_share:.0%})")


def pressure_prefix(m: MemoryFigures) -> str:
    """pressure_words and a "; " when there is memory pressure, else nothing."""
    return pressure_words(m) + "; " if pressure(m) else ""


def _saving_severity(m: MemoryFigures, saving: float, base: float) -> Optional[str]:
    share = saving / base if base else 0.0
    if share < MIN_SAVING:
        return None
    if pressure(m):
        return "high"
    return "low" if share >= LOW_SAVING else None


def _base_peak(m: MemoryFigures, trace: MemoryTrace) -> float:
    return float(m.step_peak_bytes or max(op.peak for op in trace.ops))


def _replayed_peak(trace: MemoryTrace, gc: bool, inplace: bool) -> int:
    """The traced step's peak replayed with `gc` and `inplace` (memory_model.simulate)."""
    return simulate(trace, gc, inplace)["step_peak"]


# --- #13 ----------------------------------------------------------------------------------------
def on_gpu(m: MemoryFigures) -> bool:
    """Whether the memory figures are a GPU pool's (#13 on a GPU: advisors/gpu.py)."""
    return (m.place or "").startswith("CUDAPlace")


@dataclass(frozen=True)
class AllocationFigures:
    """#13's measured figures (the CPU and GPU rules share them).

    m         the memory summary
    share     the underlying allocations' share of the step
    per_step  underlying allocations per steady step
    alloc_s   their time per step
    each      a malloc per allocation (a fresh allocation per pool request)
    severity  the advice's severity
    cycle_s   the mean step cycle
    speedup   the steps/s factor without them (None: unknown)
    """

    m: MemoryFigures
    share: float
    per_step: float
    alloc_s: float
    each: bool
    severity: str
    cycle_s: float
    speedup: Optional[float]


def allocation_figures(profile) -> Optional[AllocationFigures]:
    """#13's measured figures, None unless the underlying allocations of the steady steps are
    worth a word."""
    m = memory_summary(profile)
    if m is None or not enough_steps(profile) or m.system_alloc_share is None:
        return None
    share = m.system_alloc_share
    per_step, alloc_s = m.system_allocs_per_step, m.system_alloc_s_per_step
    # a fresh allocation per request (fraction 0): its page faults on first touch cost more
    # than the timed malloc call, so the pattern alone is worth a medium
    each = per_step >= MALLOC_EACH_MIN and per_step >= 0.5 * (m.requests_per_step or 0)
    severity = next((sev for bound, sev in ALLOC_SHARES if share >= bound), None)
    if each and severity in (None, "low"):
        severity = "medium"
    if severity is None:
        return None
    cycle_s = profile.summary.cycle_s.mean
    speedup = cycle_s / (cycle_s - alloc_s) if cycle_s > alloc_s else None
    return AllocationFigures(m, share, per_step, alloc_s, each, severity, cycle_s, speedup)


def allocation_advice(f: AllocationFigures, change: str, gain: str, confidence: str,
                      call: str = "system") -> Advice:
    """The #13 advice from allocation_figures `f`; `call` names the underlying allocation."""
    m, per_step, alloc_s, share = f.m, f.per_step, f.alloc_s, f.share
    to = "the system" if call == "system" else call
    return Advice(
        id="underlying-allocations", source=13, severity=f.severity, confidence=confidence,
        title=(f"Every allocation goes to {to}: {per_step:.0f} per step" if f.each else
               f"Allocating from {to} costs {share:.0%} of each step"),
        evidence=(f"each steady step made {per_step:.0f} underlying ({call}) allocations for "
                  f"{m.requests_per_step:.0f} pool requests, {ms(alloc_s)} of the "
                  f"{ms(f.cycle_s)} step ({share:.1%}), with FLAGS_allocator_strategy="
                  f"{m.strategy} on {m.place}."),
        change=change, expected_gain=gain, expected_speedup=f.speedup,
        figures={"system_allocs_per_step": per_step, "system_alloc_s_per_step": alloc_s,
                 "system_alloc_share": share, "strategy": m.strategy, "place": m.place,
                 "predicted_system_allocs_per_step":
                     0.0 if m.strategy == "naive_best_fit" else None,
                 "cycle_s": f.cycle_s})


def speedup_words(f: AllocationFigures) -> str:
    return f" (up to {f.speedup:.2f}x steps/s)" if f.speedup else ""


@rule
def underlying_allocations(profile) -> Optional[Advice]:
    """underlying allocations (#13)

    The pool goes to the system allocator during steady steps, a visible share of the step
    (a CPU pool; the GPU pool's cudaMalloc is advisors/gpu.py's).
    """
    f = allocation_figures(profile)
    if f is None or on_gpu(f.m):
        return None
    if f.m.strategy == "naive_best_fit":
        change = "\n".join([
            writer(profile).set_flag("FLAGS_allocator_strategy", "auto_growth",
                                     "keep freed blocks for the next step"),
            "# or keep naive_best_fit with real chunks: FLAGS_fraction_of_cpu_memory_to_use=1.0"
            " (GPU: FLAGS_fraction_of_gpu_memory_to_use=0.92); 0 makes every allocation a "
            "malloc"])
        gain = (f"~0 underlying allocations per steady step instead of {f.per_step:.0f}: "
                f"{ms(f.alloc_s)} less per step in the calls alone" + speedup_words(f)
                + ", more with the page faults of fresh memory on first touch")
        return allocation_advice(f, change, gain, "high")
    change = ("# the pool is kept at its capacity and gives memory back to grow again: "
              "lower the peak (see the GC / inplace / batch size advice) or raise "
              "FLAGS_cpu_memory_limit_mb")
    gain = (f"up to {f.speedup:.2f}x steps/s ({ms(f.alloc_s)} less per step)"
            if f.speedup else "unknown")
    return allocation_advice(f, change, gain, "medium")


# --- #15 ----------------------------------------------------------------------------------------
@rule
def gc_off(profile) -> Optional[Advice]:
    """garbage collection off (#15)

    FLAGS_eager_delete_tensor_gb < 0 keeps every temporary to the end of the step; the step
    peak with GC on is replayed from the traced step.
    """
    m = memory_summary(profile)
    if m is None or m.gc is not False:
        return None
    trace = trace_of(profile)
    if trace is None or trace.gc:
        return _gc_off_unmeasured(profile, m) if m.oom is not None else None
    base = _base_peak(m, trace)
    now = _replayed_peak(trace, False, trace.inplace)
    gc = base - (now - _replayed_peak(trace, True, trace.inplace))
    both = base - (now - _replayed_peak(trace, True, True))
    severity = _saving_severity(m, base - gc, base)
    if severity is None:
        return None
    more = (f"; ~{human_bytes(both)} with BuildStrategy.enable_inplace too"
            if not trace.inplace and both < gc * (1 - MIN_SAVING / 2) else "")
    why = pressure_prefix(m)
    return Advice(
        id="gc-off", source=15, severity=severity, confidence="high",
        title=f"Garbage collection is off: the step peak would drop {1 - gc / base:.0%}",
        evidence=(f"{why}FLAGS_eager_delete_tensor_gb is negative, so every temporary lives "
                  f"until the end of the step: the step peak is {human_bytes(base)}. "
                  f"Replaying the traced step (step {trace.step}, batch "
                  f"{trace.batch_size}) with each temporary freed after its last use "
                  f"gives ~{human_bytes(gc)}."),
        change=_gc_change(profile),
        expected_gain=f"step peak {human_bytes(base)} -> ~{human_bytes(gc)}{more}",
        figures={"step_peak_bytes": base, "predicted_peak_bytes": gc, "peak_basis": "replay",
                 "predicted_peak_with_inplace_bytes": both,
                 "capacity_bytes": m.capacity_bytes, "pressure": pressure(m)})


def _gc_change(profile) -> str:
    return writer(profile).set_flag("FLAGS_eager_delete_tensor_gb", 0.0, GC_WHY)


def _gc_off_unmeasured(profile, m: MemoryFigures) -> Advice:
    """GC off and out of memory before a step completed: no traced step to replay."""
    return Advice(
        id="gc-off", source=15, severity="high", confidence="medium",
        title="Garbage collection is off and the run ran out of memory",
        evidence=(f"{pressure_words(m)} with FLAGS_eager_delete_tensor_gb negative: every "
                  f"temporary of the step was still held. No step completed, so there is no "
                  f"traced step to predict the peak from."),
        change=_gc_change(profile),
        expected_gain=("a lower step peak (unknown: profile again with GC on, or at a smaller "
                       "batch, for the figures)"),
        figures={"predicted_peak_bytes": None, "capacity_bytes": m.capacity_bytes,
                 "pressure": "oom"})


# --- #16 ----------------------------------------------------------------------------------------
@rule
def inplace_off(profile) -> Optional[Advice]:
    """inplace off (#16)

    Ops that may write their output into an input's buffer did not; the step peak with
    inplace (and GC) on is replayed from the traced step.
    """
    m = memory_summary(profile)
    trace = trace_of(profile) if m is not None else None
    if trace is None or m.inplace is not False or trace.inplace:
        return None
    pairs = sum(len(v) for v in trace.inplace_candidates.values())
    if not pairs:
        return None
    base = _base_peak(m, trace)
    now = _replayed_peak(trace, trace.gc, False)
    with_gc = _replayed_peak(trace, True, False)
    saving = with_gc - _replayed_peak(trace, True, True)
    after_gc = base - (now - with_gc)  # what GC alone gives (the base when GC is on)
    predicted = after_gc - saving
    severity = _saving_severity(m, saving, base)
    if severity is None:
        return None
    gc_note = ("" if trace.gc else
               f" (with FLAGS_eager_delete_tensor_gb=0 as well, which alone gives "
               f"~{human_bytes(after_gc)})")
    why = pressure_prefix(m)
    return Advice(
        id="inplace-off", source=16, severity=severity, confidence="high",
        title=f"Inplace is off: {pairs} op outputs could reuse their input's memory",
        evidence=(f"{why}the program runs without BuildStrategy.enable_inplace: {pairs} op "
                  f"outputs allocate a buffer of their own where they could take over their "
                  f"input's. Replaying the traced step (step {trace.step}, batch "
                  f"{trace.batch_size}) with inplace saves {human_bytes(saving)} at "
                  f"the peak{gc_note}."),
        change=writer(profile).build_strategy({"enable_inplace": True}, data_parallel=False),
        expected_gain=f"step peak {human_bytes(base)} -> ~{human_bytes(predicted)}",
        figures={"step_peak_bytes": base, "predicted_peak_bytes": predicted,
                 "peak_basis": "replay",
                 "saving_bytes": saving, "inplace_pairs": pairs, "gc": trace.gc,
                 "capacity_bytes": m.capacity_bytes, "pressure": pressure(m)})


# --- #17 ----------------------------------------------------------------------------------------
BATCH_SHARE = 0.3  # activations' share of what a failing step held for the batch to matter
AROUND = (0.75, 1.0, 1.25)  # #17: the batch sizes `paddletune tune` is asked to measure


def _batch_filled_memory(oom: MemoryOom) -> bool:
    """Whether the batch filled the memory of a step that failed before any step completed:
    it failed outside the update, and activations held BATCH_SHARE of the pool or more."""
    held = sum(oom.by_tag.values()) or oom.allocated_bytes or 0
    return (oom.phase not in ("optimizer", "parameters", "optimizer_state")
            and held > 0 and oom.by_tag.get("activations", 0) >= BATCH_SHARE * held)


@rule
def batch_size_memory(profile) -> Optional[Advice]:
    """batch size vs memory (#17)

    Out of memory, or a steady peak above FULL of the capacity: the largest batch whose
    predicted peak leaves HEADROOM free, from the model fitted to the measured peaks (the
    out-of-memory error's own estimate, from the same formula, is that batch with no
    headroom). Never a batch over FAR x the current one: memory is not the limit there.
    """
    m = memory_summary(profile)
    if m is None:
        return None
    oom, share = m.oom, m.peak_reserved_share or 0.0
    if oom is None and share < FULL:
        return None
    capacity = m.capacity_bytes
    model = batch_fit(m)
    current = (oom.batch_size if oom is not None else None) or max(
        (b for b, _ in m.batch_points), default=None)
    largest = model.largest(capacity) if model else None
    if largest is None and oom is not None and oom.fit_batch_size:
        if not _batch_filled_memory(oom):
            return None  # the other memory advice (GC, optimizer, the cap) applies instead
        largest = int(oom.fit_batch_size * (1 - HEADROOM))
    if not largest or (current and largest >= current and oom is None):
        return None
    if far_beyond(largest, current):
        return None  # memory does not limit the batch: throughput stops growing long before
    predicted = model.peak(largest) if model is not None else None
    return Advice(
        id="batch-size-memory", source=17, severity="high" if oom else "medium",
        confidence="high" if model is not None and model.how.startswith("fit") else
        "medium" if model is not None else "low",
        title=(f"Batch {current} does not fit: use at most {largest}" if oom else
               f"Batch {current} leaves {1 - share:.0%} of the memory free: use {largest}"),
        evidence=f"{pressure_words(m)}; {_model_words(model, capacity, current)}.",
        change=_batch_change(profile, largest, capacity, current if oom else None),
        expected_gain=(f"no out-of-memory: predicted step peak ~{human_bytes(predicted)} of "
                       f"{human_bytes(capacity)} at batch {largest} ({HEADROOM:.0%} headroom)"
                       if model is not None else
                       f"no out-of-memory at batch {largest} (an estimate: measure it)"),
        figures={"batch_size": current, "largest_safe_batch": largest,
                 "predicted_peak_bytes": predicted, "capacity_bytes": capacity,
                 "peak_basis": (None if model is None else
                                "fit" if model.how.startswith("fit") else "one point"),
                 "headroom": HEADROOM, "model": model.to_dict() if model else None,
                 "oom": bool(oom)})


def _model_words(model: Optional[MemoryModel], capacity: float, current) -> str:
    """How the largest batch was found, in words."""
    if model is None:
        return "estimated from what the failing step held (an upper bound)"
    fitted = model.how.startswith("fit")
    how = ("fitted to the peaks at batch " + ", ".join(str(int(x)) for x, _ in model.points)
           if fitted else
           f"parameters and optimizer state fixed; the activations and their gradients "
           f"from the phase peaks at batch {int(model.points[-1][0])} scaled per sample")
    raised = (f"; at least {human_bytes(capacity)} at batch {current}, which ran out of "
              f"memory" if "raised" in model.how else "")
    fits = model.largest(capacity, headroom=0.0)
    fits_words = f"; batch {fits} would just fit, with no headroom" if fits else ""
    return (f"step peak = {human_bytes(model.fixed)} + {human_bytes(model.per_unit)} per "
            f"sample ({how}{raised}){fits_words}")


def _batch_change(profile, largest: int, capacity: float, failed: Optional[int]) -> str:
    """The batch size line, and how to measure the sizes around it (below `failed`, the batch
    that ran out of memory): `paddletune tune` where a DataLoader makes the batches (it can
    change their size), else a profile at the new size."""
    line = writer(profile).batch_size(largest, f"the largest batch predicted to leave "
                                               f"{HEADROOM:.0%} of {human_bytes(capacity)} "
                                               f"free")
    if main_loader(profile) is None:
        return "\n".join([line, f"# to measure it: set that batch size, then paddletune "
                                f"profile {script(profile)} (its memory figures give the peak)"])
    sizes = sorted({max(1, round(largest * k)) for k in AROUND
                    if failed is None or round(largest * k) < failed} | {largest})
    return "\n".join([line, f"# to measure it: paddletune tune --space reader.batch_size="
                            f"{','.join(map(str, sizes))} {script(profile)}",
                      "# (a trial per size: tune resizes the batches the DataLoader makes)"])
