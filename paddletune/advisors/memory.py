"""ADVICE.md #13, #15-#17: memory, and the figures the other memory rules share (#18 in
sequences.py, #19 in optimizer.py). Each rule states a predicted figure from the memory model
(paddletune/memory_model.py) over the memory probe's records:

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

from typing import Optional

from ..memory_model import HEADROOM, batch_fit, simulate, trace_of
from .base import Advice, rule
from .facts import enough_steps, human_bytes, ms

NEAR = 0.85  # peak share of the capacity that counts as memory pressure
FULL = 0.90  # #17: a steady peak above this share of the capacity is too close
MIN_SAVING = 0.05  # GC/inplace: a saving below this share of the step peak is not worth a word
LOW_SAVING = 0.20  # ... without memory pressure it must save this much (low severity)
ALLOC_SHARES = ((0.15, "high"), (0.05, "medium"), (0.02, "low"))  # #13: share -> severity
MALLOC_EACH_MIN = 10  # #13: underlying allocations per step that, at half the requests or
# more, mean "a malloc per allocation" (FLAGS_fraction_of_*_memory_to_use=0)
SET_FLAG = "fluid.set_flags({{'{flag}': {value}}})  # in the script, before the first exe.run"


def memory_summary(profile) -> Optional[dict]:
    """The summary's memory figures, None without them (no pool: GPU, or the probe off)."""
    m = profile.summary.get("memory")
    return m if m and m.get("capacity_bytes") else None


def pressure(m: dict) -> Optional[str]:
    """'oom', 'near' (peak at least NEAR of the capacity) or None."""
    if m.get("oom"):
        return "oom"
    share = m.get("peak_reserved_share") or m.get("peak_allocated_share") or 0.0
    return "near" if share >= NEAR else None


def pressure_words(m: dict) -> str:
    """The memory pressure in words: the out-of-memory error, or the peak against the capacity."""
    if m.get("oom"):
        o = m["oom"]
        return (f"the run ran out of memory (op {o.get('op_type')} asked for "
                f"{human_bytes(o.get('requested') or 0)} at batch {o.get('batch_size')})")
    return (f"the pool peaked at {human_bytes(m['peak_reserved_bytes'])} reserved of "
            f"{human_bytes(m['capacity_bytes'])} ({m['peak_reserved_share']:.0%})")


def pressure_prefix(m: dict) -> str:
    """pressure_words and a "; " when there is memory pressure, else nothing."""
    return pressure_words(m) + "; " if pressure(m) else ""


def flag_change(flag: str, value, why: str) -> str:
    return "\n".join([f"export {flag}={value}  # {why}",
                      "# or " + SET_FLAG.format(flag=flag, value=repr(value))])


def _saving_severity(m: dict, saving: float, base: float) -> Optional[str]:
    share = saving / base if base else 0.0
    if share < MIN_SAVING:
        return None
    if pressure(m):
        return "high"
    return "low" if share >= LOW_SAVING else None


def _base_peak(m: dict, trace: dict) -> float:
    return float(m.get("step_peak_bytes") or max(op["peak"] for op in trace["ops"]))


# --- #13 ----------------------------------------------------------------------------------------
def on_gpu(m: dict) -> bool:
    """Whether the memory figures are a GPU pool's (#13 on a GPU: advisors/gpu.py)."""
    return str(m.get("place") or "").startswith("CUDAPlace")


def allocation_figures(profile) -> Optional[dict]:
    """#13's measured figures, None unless the underlying allocations of the steady steps are
    worth a word: {m (the memory summary), share, per_step, alloc_s, each (a malloc per
    allocation), severity, cycle_s, speedup}. The CPU and GPU rules share them."""
    m = memory_summary(profile)
    if not m or not enough_steps(profile) or m.get("system_alloc_share") is None:
        return None
    share = m["system_alloc_share"]
    per_step, alloc_s = m["system_allocs_per_step"], m["system_alloc_s_per_step"]
    # a fresh allocation per request (fraction 0): its page faults on first touch cost more
    # than the timed malloc call, so the pattern alone is worth a medium
    each = per_step >= MALLOC_EACH_MIN and per_step >= 0.5 * (m["requests_per_step"] or 0)
    severity = next((sev for bound, sev in ALLOC_SHARES if share >= bound), None)
    if each and severity in (None, "low"):
        severity = "medium"
    if severity is None:
        return None
    cycle_s = profile.summary["cycle_s"]["mean"]
    speedup = cycle_s / (cycle_s - alloc_s) if cycle_s > alloc_s else None
    return {"m": m, "share": share, "per_step": per_step, "alloc_s": alloc_s, "each": each,
            "severity": severity, "cycle_s": cycle_s, "speedup": speedup}


def allocation_advice(f: dict, change: str, gain: str, confidence: str,
                      call: str = "system") -> Advice:
    """The #13 advice from allocation_figures `f`; `call` names the underlying allocation."""
    m, per_step, alloc_s, share = f["m"], f["per_step"], f["alloc_s"], f["share"]
    to = "the system" if call == "system" else call
    return Advice(
        id="underlying-allocations", source=13, severity=f["severity"], confidence=confidence,
        title=(f"Every allocation goes to {to}: {per_step:.0f} per step" if f["each"] else
               f"Allocating from {to} costs {share:.0%} of each step"),
        evidence=(f"each steady step made {per_step:.0f} underlying ({call}) allocations for "
                  f"{m['requests_per_step']:.0f} pool requests, {ms(alloc_s)} of the "
                  f"{ms(f['cycle_s'])} step ({share:.1%}), with FLAGS_allocator_strategy="
                  f"{m.get('strategy')} on {m.get('place')}."),
        change=change, expected_gain=gain, expected_speedup=f["speedup"],
        figures={"system_allocs_per_step": per_step, "system_alloc_s_per_step": alloc_s,
                 "system_alloc_share": share, "strategy": m.get("strategy"),
                 "place": m.get("place"),
                 "predicted_system_allocs_per_step":
                     0.0 if m.get("strategy") == "naive_best_fit" else None,
                 "cycle_s": f["cycle_s"]})


def speedup_words(f: dict) -> str:
    return f" (up to {f['speedup']:.2f}x steps/s)" if f["speedup"] else ""


@rule
def underlying_allocations(profile) -> Optional[Advice]:
    """underlying allocations (#13)

    The pool goes to the system allocator during steady steps, a visible share of the step
    (a CPU pool; the GPU pool's cudaMalloc is advisors/gpu.py's).
    """
    f = allocation_figures(profile)
    if f is None or on_gpu(f["m"]):
        return None
    if f["m"].get("strategy") == "naive_best_fit":
        change = "\n".join([
            flag_change("FLAGS_allocator_strategy", "auto_growth",
                        "keep freed blocks for the next step"),
            "# or keep naive_best_fit with real chunks: FLAGS_fraction_of_cpu_memory_to_use=1.0"
            " (GPU: FLAGS_fraction_of_gpu_memory_to_use=0.92); 0 makes every allocation a "
            "malloc"])
        gain = (f"~0 underlying allocations per steady step instead of {f['per_step']:.0f}: "
                f"{ms(f['alloc_s'])} less per step in the calls alone" + speedup_words(f)
                + ", more with the page faults of fresh memory on first touch")
        return allocation_advice(f, change, gain, "high")
    change = ("# the pool is kept at its capacity and gives memory back to grow again: "
              "lower the peak (see the GC / inplace / batch size advice) or raise "
              "FLAGS_cpu_memory_limit_mb")
    gain = (f"up to {f['speedup']:.2f}x steps/s ({ms(f['alloc_s'])} less per step)"
            if f["speedup"] else "unknown")
    return allocation_advice(f, change, gain, "medium")


# --- #15 ----------------------------------------------------------------------------------------
@rule
def gc_off(profile) -> Optional[Advice]:
    """garbage collection off (#15)

    FLAGS_eager_delete_tensor_gb < 0 keeps every temporary to the end of the step; the step
    peak with GC on is replayed from the traced step.
    """
    m = memory_summary(profile)
    if not m or m.get("gc") is not False:
        return None
    trace = trace_of(profile)
    if trace is None or trace.get("gc"):
        return _gc_off_unmeasured(m) if m.get("oom") else None
    base = _base_peak(m, trace)
    now = simulate(trace, False, trace["inplace"])["step_peak"]
    gc = base - (now - simulate(trace, True, trace["inplace"])["step_peak"])
    both = base - (now - simulate(trace, True, True)["step_peak"])
    severity = _saving_severity(m, base - gc, base)
    if severity is None:
        return None
    more = (f"; ~{human_bytes(both)} with BuildStrategy.enable_inplace too"
            if not trace["inplace"] and both < gc * (1 - MIN_SAVING / 2) else "")
    why = pressure_prefix(m)
    return Advice(
        id="gc-off", source=15, severity=severity, confidence="high",
        title=f"Garbage collection is off: the step peak would drop {1 - gc / base:.0%}",
        evidence=(f"{why}FLAGS_eager_delete_tensor_gb is negative, so every temporary lives "
                  f"until the end of the step: the step peak is {human_bytes(base)}. "
                  f"Replaying the traced step (step {trace['step']}, batch "
                  f"{trace.get('batch_size')}) with each temporary freed after its last use "
                  f"gives ~{human_bytes(gc)}."),
        change=GC_CHANGE,
        expected_gain=f"step peak {human_bytes(base)} -> ~{human_bytes(gc)}{more}",
        figures={"step_peak_bytes": base, "predicted_peak_bytes": gc,
                 "predicted_peak_with_inplace_bytes": both,
                 "capacity_bytes": m["capacity_bytes"], "pressure": pressure(m)})


GC_CHANGE = flag_change("FLAGS_eager_delete_tensor_gb", 0.0,
                         "free each temporary right after its last use (Paddle's default)")


def _gc_off_unmeasured(m: dict) -> Advice:
    """GC off and out of memory before a step completed: no traced step to replay."""
    return Advice(
        id="gc-off", source=15, severity="high", confidence="medium",
        title="Garbage collection is off and the run ran out of memory",
        evidence=(f"{pressure_words(m)} with FLAGS_eager_delete_tensor_gb negative: every "
                  f"temporary of the step was still held. No step completed, so there is no "
                  f"traced step to predict the peak from."),
        change=GC_CHANGE,
        expected_gain=("a lower step peak (unknown: profile again with GC on, or at a smaller "
                       "batch, for the figures)"),
        figures={"predicted_peak_bytes": None, "capacity_bytes": m["capacity_bytes"],
                 "pressure": "oom"})


# --- #16 ----------------------------------------------------------------------------------------
INPLACE_CHANGE = "\n".join([
    "build_strategy = fluid.BuildStrategy()",
    "build_strategy.enable_inplace = True",
    "compiled = fluid.CompiledProgram(main_program, build_strategy=build_strategy)",
    "exe.run(compiled, feed=feed, fetch_list=fetch_list)  # instead of exe.run(main_program, ...)"])


@rule
def inplace_off(profile) -> Optional[Advice]:
    """inplace off (#16)

    Ops that may write their output into an input's buffer did not; the step peak with
    inplace (and GC) on is replayed from the traced step.
    """
    m = memory_summary(profile)
    trace = trace_of(profile) if m else None
    if trace is None or m.get("inplace") is not False or trace.get("inplace"):
        return None
    pairs = sum(len(v) for v in (trace.get("inplace_candidates") or {}).values())
    if not pairs:
        return None
    base = _base_peak(m, trace)
    now = simulate(trace, trace["gc"], False)["step_peak"]
    with_gc = simulate(trace, True, False)["step_peak"]
    saving = with_gc - simulate(trace, True, True)["step_peak"]
    after_gc = base - (now - with_gc)  # what GC alone gives (the base when GC is on)
    predicted = after_gc - saving
    severity = _saving_severity(m, saving, base)
    if severity is None:
        return None
    gc_note = ("" if trace["gc"] else
               f" (with FLAGS_eager_delete_tensor_gb=0 as well, which alone gives "
               f"~{human_bytes(after_gc)})")
    why = pressure_prefix(m)
    return Advice(
        id="inplace-off", source=16, severity=severity, confidence="high",
        title=f"Inplace is off: {pairs} op outputs could reuse their input's memory",
        evidence=(f"{why}the program runs without BuildStrategy.enable_inplace: {pairs} op "
                  f"outputs allocate a buffer of their own where they could take over their "
                  f"input's. Replaying the traced step (step {trace['step']}, batch "
                  f"{trace.get('batch_size')}) with inplace saves {human_bytes(saving)} at "
                  f"the peak{gc_note}."),
        change=INPLACE_CHANGE,
        expected_gain=f"step peak {human_bytes(base)} -> ~{human_bytes(predicted)}",
        figures={"step_peak_bytes": base, "predicted_peak_bytes": predicted,
                 "saving_bytes": saving, "inplace_pairs": pairs, "gc": trace["gc"],
                 "capacity_bytes": m["capacity_bytes"], "pressure": pressure(m)})


# --- #17 ----------------------------------------------------------------------------------------
BATCH_SHARE = 0.3  # activations' share of what a failing step held for the batch to matter


def _batch_filled_memory(oom: dict) -> bool:
    """Whether the batch filled the memory of a step that failed before any step completed:
    it failed outside the update, and activations held BATCH_SHARE of the pool or more."""
    by = oom.get("by_tag") or {}
    held = sum(by.values()) or oom.get("allocated") or 0
    return (oom.get("phase") not in ("optimizer", "parameters", "optimizer_state")
            and held > 0 and (by.get("activations") or 0) >= BATCH_SHARE * held)


@rule
def batch_size_memory(profile) -> Optional[Advice]:
    """batch size vs memory (#17)

    Out of memory, or a steady peak above FULL of the capacity: the largest batch whose
    predicted peak leaves HEADROOM free, from the model fitted to the measured peaks.
    """
    m = memory_summary(profile)
    if not m:
        return None
    oom = m.get("oom")
    share = m.get("peak_reserved_share") or 0.0
    if not oom and share < FULL:
        return None
    capacity = m["capacity_bytes"]
    model = batch_fit(m)
    current = (oom or {}).get("batch_size") or max(
        (b for b, _ in m.get("batch_points") or []), default=None)
    largest = model.largest(capacity) if model else None
    if largest is None and oom and oom.get("fit_batch_size"):
        if not _batch_filled_memory(oom):
            return None  # the other memory advice (GC, optimizer, the cap) applies instead
        largest = int(oom["fit_batch_size"] * (1 - HEADROOM))
    if not largest or (current and largest >= current and not oom):
        return None
    if model is not None:
        predicted = model.peak(largest)
        how = (f"step peak = {human_bytes(model.fixed)} + {human_bytes(model.per_unit)} per "
               f"sample (" + ("fitted to the peaks at batch " + ", ".join(
                   str(int(x)) for x, _ in model.points) if model.how.startswith("fit") else
                   f"parameters, their gradients and optimizer state fixed; the rest of the "
                   f"peak at batch {int(model.points[-1][0])} scaled per sample")
               + (f"; at least {human_bytes(capacity)} at batch {current}, which ran out of "
                  f"memory" if "raised" in model.how else "") + ")")
        gain = (f"no out-of-memory: predicted step peak ~{human_bytes(predicted)} of "
                f"{human_bytes(capacity)} at batch {largest} ({HEADROOM:.0%} headroom)")
    else:
        predicted = None
        how = "estimated from what the failing step held (an upper bound)"
        gain = f"no out-of-memory at batch {largest} (an estimate: measure it)"
    what = pressure_words(m)
    return Advice(
        id="batch-size-memory", source=17, severity="high" if oom else "medium",
        confidence="high" if model is not None and model.how.startswith("fit") else
        "medium" if model is not None else "low",
        title=(f"Batch {current} does not fit: use at most {largest}" if oom else
               f"Batch {current} leaves {1 - share:.0%} of the memory free: use {largest}"),
        evidence=f"{what}; {how}.",
        change="\n".join([
            f"BATCH_SIZE = {largest}  # the largest batch predicted to leave {HEADROOM:.0%} of "
            f"{human_bytes(capacity)} free",
            "# to measure it instead: paddletune.batchsize.find_max_batch_size(trial) runs "
            "trial(batch) until out of memory, in process"]),
        expected_gain=gain,
        figures={"batch_size": current, "largest_safe_batch": largest,
                 "predicted_peak_bytes": predicted, "capacity_bytes": capacity,
                 "headroom": HEADROOM, "model": model.to_dict() if model else None,
                 "oom": bool(oom)})
