"""Figures computed from a profile's records: steady-state step statistics, the time breakdown,
throughput, the input-bound verdict, per-op totals and the background samples' aggregates.

`summarize(profile)` is what the session writes as the last record and what `load()` computes
for a profile cut short. It reads only the records, so a report can always be re-derived.

Definitions (all per training step of the main program, the non-startup program that ran the
most steps):
  wall      one Executor.run: read + feed + compute + fetch
  read      waiting inside the run for a non-iterable DataLoader's batch (0 otherwise)
  outside   the gap between the previous run's end and this run's start: data preparation in
            a synchronous loop, waiting for an iterable DataLoader's batch, logging, Python
  cycle     wall + outside: what one iteration of the training loop costs
  input     outside + read + feed: time the device waits for the next batch (TF Profiler's
            "input")
Warm-up steps (compile, first-touch allocation, caches) are reported but excluded from the
steady-state figures: see `detect_warmup`; so are the steps of a --speed-test ceiling window.
Reader and speed-test figures: see summary_reader.py; memory figures: summary_memory.py;
ParallelExecutor figures: summary_parallel.py.
"""

import math
from collections import Counter, defaultdict
from typing import Dict, List, Optional, Sequence

from .summary_memory import memory_figures
from .summary_parallel import parallel_figures
from .summary_reader import ceiling_span, reader_figures, speed_test_figures

HIGHLY_INPUT_BOUND = 0.20  # input share of a step: TensorFlow Profiler's thresholds
MODERATELY_INPUT_BOUND = 0.05
PER_ENTITY_SAMPLES = ("nvml", "workers")  # one row per GPU / worker: summarised on their own
MIN_STEADY_STEPS = 5  # fewer steady steps than this: too few to tell
WARMUP_FACTOR = 1.5  # a step slower than this x the steady median is still warming up


def summarize(profile) -> dict:
    """The summary record for `profile` (a paddletune.profile.Profile)."""
    train = [s for s in training_steps(profile.steps) if _finite_step(s)]
    main_program = train[0]["program"] if train else None
    usable, ceiling_steps = _without_ceiling(train, ceiling_span(profile))
    warmup = profile.options.get("warmup")
    if warmup is None:
        warmup = detect_warmup([_cycle(s) for s in usable])
    warmup = min(int(warmup), len(usable))
    steady = usable[warmup:]
    out = {"type": "summary", "n_steps": len(train), "main_program": main_program,
           "warmup_steps": warmup, "steady_steps": len(steady),
           "speed_test_steps_excluded": ceiling_steps,
           "programs": _programs(profile.steps),
           "duration_s": _duration(profile)}
    out.update(step_figures(steady))
    out["verdict"] = verdict(out)
    cycle = out["cycle_s"]["mean"] if out["cycle_s"] else None
    out["reader"] = reader_figures(profile, _span(steady), (main_program, cycle))
    out["speed_test"] = speed_test_figures(profile, train, _cycle, out["reader"] is not None)
    out["memory"] = memory_figures(profile, steady, cycle)
    out["parallel"] = parallel_figures(profile, steady, main_program)
    out["ops"] = op_totals(profile.ops, main_program, {s["step"] for s in steady})
    out["samples"] = {name: sample_figures(rows) for name, rows in profile.samples.items()
                      if name not in PER_ENTITY_SAMPLES}
    out["gpus"] = gpu_figures(profile.samples.get("nvml", ()))
    out["overhead"] = probe_overhead(profile.probes, out)
    out["exit"] = _exit(profile)
    return out


def _without_ceiling(steps, span):
    """The steps outside the speed test's ceiling window (training on one re-read batch is
    not the job's real step), and how many were left out."""
    if span is None:
        return steps, 0
    kept = [s for s in steps if not span[0] <= s["t"] < span[1]]
    return kept, len(steps) - len(kept)


def _span(steps):
    """(first step's begin, last step's end) of `steps`, None without steps."""
    return (steps[0]["t"], steps[-1]["t"] + steps[-1]["wall_s"]) if steps else None


def training_steps(steps: Sequence[dict]) -> List[dict]:
    """The steps of the main program: not startup, the program that ran most often."""
    counts = Counter(s["program"] for s in steps if not s.get("startup"))
    if not counts:
        return []
    main = counts.most_common(1)[0][0]
    return [s for s in steps if s["program"] == main and not s.get("startup")]


def detect_warmup(cycle_s: Sequence[float]) -> int:
    """How many leading steps are warm-up.

    The first step always is (it compiles the program). After it, a step still warms up while
    it is slower than WARMUP_FACTOR x the median of the second half of the run; at most half
    of the steps are ever called warm-up.
    """
    n = len(cycle_s)
    if n <= 1:
        return n
    settled = _median(cycle_s[n // 2:])
    k = 1
    while k < n // 2 and cycle_s[k] > WARMUP_FACTOR * settled:
        k += 1
    return k


def step_figures(steady: Sequence[dict]) -> dict:
    """Distribution, breakdown (mean seconds and shares of the cycle) and throughput."""
    if not steady:
        return {"step_s": None, "cycle_s": None, "breakdown_s": None, "shares": None,
                "input_share": None, "throughput": None}
    parts = {"read": [s.get("read_s") or 0.0 for s in steady],
             "feed": [s["feed_s"] for s in steady],
             "compute": [s["compute_s"] for s in steady],
             "fetch": [s["fetch_s"] for s in steady],
             "outside": [s.get("gap_s") or 0.0 for s in steady]}
    cycles = [_cycle(s) for s in steady]
    mean_cycle = sum(cycles) / len(cycles)
    breakdown = {k: sum(v) / len(v) for k, v in parts.items()}
    shares = {k: (v / mean_cycle if mean_cycle > 0 else 0.0) for k, v in breakdown.items()}
    batches = sorted(s["batch_size"] for s in steady if s.get("batch_size"))
    batch = batches[len(batches) // 2] if batches else None
    samples = sum(s.get("batch_size") or 0 for s in steady)
    throughput = {"steps_per_s": 1.0 / mean_cycle if mean_cycle > 0 else None,
                  "batch_size": batch,
                  "samples_per_s": samples / sum(cycles) if batch and sum(cycles) > 0 else None,
                  "fetch_bytes_per_step": sum(s.get("fetch_bytes", 0) for s in steady)
                  / len(steady)}
    return {"step_s": distribution([s["wall_s"] for s in steady]),
            "cycle_s": distribution(cycles), "breakdown_s": breakdown, "shares": shares,
            "input_share": shares["outside"] + shares["read"] + shares["feed"],
            "throughput": throughput}


def verdict(figures: dict) -> dict:
    """Input-bound or compute-bound, stated with the numbers (TF Profiler's classes)."""
    n = figures.get("steady_steps", 0)
    share = figures.get("input_share")
    if share is None or n < MIN_STEADY_STEPS:
        why = ("no training steps observed" if not figures.get("n_steps")
               else f"only {n} steady-state step(s); need at least {MIN_STEADY_STEPS}")
        return {"kind": "too-few-steps", "input_share": share,
                "text": f"Too few steps to tell: {why}."}
    b = figures["breakdown_s"]
    read = (f" + {b['read'] * 1e3:.2f} ms waiting for the DataLoader inside exe.run"
            if b.get("read") else "")
    numbers = (f"{share:.1%} of each {figures['cycle_s']['mean'] * 1e3:.2f} ms step waits for "
               f"input ({b['outside'] * 1e3:.2f} ms outside the runtime{read} + "
               f"{b['feed'] * 1e3:.2f} ms feeding), {figures['shares']['compute']:.1%} computes")
    if share >= HIGHLY_INPUT_BOUND:
        kind, head = "highly-input-bound", "Highly input-bound"
    elif share >= MODERATELY_INPUT_BOUND:
        kind, head = "moderately-input-bound", "Moderately input-bound"
    else:
        kind, head = "compute-bound", "Compute-bound"
    cv = figures["cycle_s"]["cv"]
    noisy = f"; step times vary a lot (CV {cv:.0%})" if cv > 0.5 else ""
    return {"kind": kind, "input_share": share, "text": f"{head}: {numbers}{noisy}."}


def op_totals(op_records: Sequence[dict], program, steps) -> Optional[dict]:
    """Per-op-type total/mean/count/share of compute over the steady steps, and the top ops."""
    rows = [r for r in op_records if r.get("program") == program and r.get("step") in steps]
    if not rows:
        return None
    by_type, by_op = defaultdict(lambda: [0.0, 0]), defaultdict(lambda: [0.0, 0])
    for r in rows:
        for index, op_type, _t, dur in r["ops"]:
            by_type[op_type][0] += dur
            by_type[op_type][1] += 1
            by_op[(index, op_type)][0] += dur
            by_op[(index, op_type)][1] += 1
    total = sum(v[0] for v in by_type.values()) or 1e-30
    types = [{"type": t, "total_s": s, "count": c, "mean_s": s / c, "share": s / total}
             for t, (s, c) in sorted(by_type.items(), key=lambda kv: -kv[1][0])]
    top = [{"index": i, "type": t, "total_s": s, "count": c, "mean_s": s / c, "share": s / total}
           for (i, t), (s, c) in sorted(by_op.items(), key=lambda kv: -kv[1][0])[:10]]
    return {"steps": len(rows), "total_s": total, "by_type": types, "top": top}


def sample_figures(rows: Sequence[dict]) -> Dict[str, dict]:
    """mean/max/last of every numeric field of a probe's samples (lists and None skipped)."""
    fields = defaultdict(list)
    for r in rows:
        for k, v in r.items():
            if k not in ("type", "probe", "t") and isinstance(v, (int, float)) \
                    and not isinstance(v, bool) and math.isfinite(v):
                fields[k].append(v)
    return {k: {"mean": sum(v) / len(v), "max": max(v), "last": v[-1], "n": len(v)}
            for k, v in fields.items()}


def gpu_figures(rows: Sequence[dict]) -> List[dict]:
    """sample_figures per GPU: [{"gpu": index, "util_percent": {...}, ..., "throttle":
    {reason: share of samples}}] by index ("throttle" only where NVML reported reasons)."""
    by_gpu = defaultdict(list)
    for r in rows:
        by_gpu[r.get("gpu")].append({k: v for k, v in r.items() if k != "gpu"})
    out = []
    for g, v in sorted(by_gpu.items(), key=str):
        throttle = throttle_figures(v)
        out.append({"gpu": g, **sample_figures(v), **({"throttle": throttle} if throttle
                                                       is not None else {})})
    return out


def throttle_figures(rows: Sequence[dict]) -> Optional[dict]:
    """Share of a GPU's samples with each clock-throttle reason active ({} when never);
    None when NVML reported no reasons."""
    known = [r["throttle"] for r in rows if isinstance(r.get("throttle"), list)]
    if not known:
        return None
    counts = defaultdict(int)
    for reasons in known:
        for name in reasons:
            counts[name] += 1
    return {name: n / len(known) for name, n in sorted(counts.items(), key=lambda kv: -kv[1])}


def probe_overhead(probes: Dict[str, dict], figures: dict) -> dict:
    """Each probe's self-measured cost, and its share of the time the job ran steps."""
    cycles = figures.get("cycle_s")
    busy = cycles["mean"] * figures["steady_steps"] if cycles else None
    out = {}
    for name, rec in probes.items():
        spent = rec.get("overhead_s")
        if spent is None:
            continue
        out[name] = {"overhead_s": spent,
                     "share": spent / busy if busy else None,
                     "in_step": bool(rec.get("in_step"))}
    return out


def distribution(values: Sequence[float]) -> Optional[dict]:
    if not values:
        return None
    ordered = sorted(values)
    mean = sum(ordered) / len(ordered)
    var = sum((v - mean) ** 2 for v in ordered) / len(ordered)
    return {"mean": mean, "p50": _quantile(ordered, 0.5), "p90": _quantile(ordered, 0.9),
            "min": ordered[0], "max": ordered[-1],
            "cv": math.sqrt(var) / mean if mean > 0 else 0.0, "n": len(ordered)}


def _quantile(ordered, q):
    """Linear interpolation between closest ranks (NumPy's default)."""
    pos = (len(ordered) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def _median(values):
    return _quantile(sorted(values), 0.5) if values else 0.0


def _finite_step(step):
    """False for a step with a NaN/inf/missing time (a clock or writer bug): it is skipped."""
    times = (step.get("wall_s"), step.get("feed_s"), step.get("compute_s"), step.get("fetch_s"))
    gap = step.get("gap_s")
    return all(isinstance(v, (int, float)) and math.isfinite(v) for v in times) and (
        gap is None or (isinstance(gap, (int, float)) and math.isfinite(gap)))


def _cycle(step):
    return step["wall_s"] + (step.get("gap_s") or 0.0)


def _programs(steps):
    counts = Counter((s["program"], bool(s.get("startup"))) for s in steps)
    return [{"program": p, "startup": st, "steps": n} for (p, st), n in sorted(counts.items())]


def _duration(profile):
    exits = profile.events_of("exit")
    if exits:
        return exits[-1]["t"]
    ends = [r["t"] + r.get("wall_s", 0.0) for r in profile.steps[-1:]]  # killed: last record
    ends += [r["t"] for rows in profile.samples.values() for r in rows[-1:]]
    ends += [r["t"] for r in profile.events[-1:]]
    return max((t for t in ends if isinstance(t, (int, float)) and math.isfinite(t)),
               default=0.0)


def _exit(profile):
    exits = profile.events_of("exit")
    if exits:
        e = exits[-1]
        return {"status": e.get("status"), "reason": e.get("reason"), "message": e.get("message")}
    return {"status": None, "reason": "unknown", "message": "the profile ends without an exit "
            "record: the job was killed or the profiler crashed"}
