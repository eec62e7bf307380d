"""The summary of a profile's records (figures.Summary): steady-state step figures, the
breakdown, throughput, the input-bound verdict, per-op totals, the background samples and the
probes' cost; the reader, memory and ParallelExecutor sections come from their own modules.

Steps recorded in full give exact figures; a long job's later steps come as windows
(records.StepWindow), whose moments merge exactly and whose sketches give the quantiles within
sketch.ACCURACY. Warm-up steps (compile, first-touch allocation, caches) are excluded from the
steady state: `detect_warmup`; so are the steps of a --speed-test ceiling window. The
definitions of each figure are in figures.py.
"""

import bisect
import math
import statistics
from collections import Counter
from typing import List, Optional, Sequence, Tuple

from . import figures as F
from .figures.steps import input_share, steps_per_s
from . import records as r
from .device_figures import device_figures
from .evaluation import evaluation_figures
from .memory_figures import memory_figures
from .parallel_figures import parallel_figures
from .reader_figures import ceiling_span, reader_figures, speed_test_figures
from .samples import FIELDS, entity_windows, field_stats, throttle_shares
from .sketch import DistBuilder

HIGHLY_INPUT_BOUND = 0.20  # input share of a step: TensorFlow Profiler's thresholds
MODERATELY_INPUT_BOUND = 0.05
MIN_STEADY_STEPS = 5  # fewer steady steps than this: too few to tell
WARMUP_FACTOR = 1.5  # a step slower than this x the steady median is still warming up
TOP_OPS = 10


class Spans:
    """Time spans [(t0, t1)] that do not overlap, asked whether they hold a moment
    (bisect over their starts: a long job's thousands of reader intervals)."""

    def __init__(self, spans):
        self.spans = sorted(spans)
        self.starts = [t0 for t0, _ in self.spans]

    def hold(self, t: float) -> bool:
        i = bisect.bisect_right(self.starts, t) - 1
        return i >= 0 and t <= self.spans[i][1]


class Steady:
    """The main program's steady steps: those recorded in full, and the windows after them."""

    def __init__(self, steps: Sequence[r.Step], windows: Sequence[r.StepWindow]):
        self.steps, self.windows = list(steps), list(windows)
        self.n_tail = sum(w.n for w in self.windows)
        self._spans: Optional[Spans] = None  # each step's and window's (holds)

    @property
    def n(self) -> int:
        return len(self.steps) + self.n_tail

    def keys(self) -> set:
        """(program, step) of the steady steps recorded in full."""
        return {(s.program, s.step) for s in self.steps}

    def span(self) -> Optional[Tuple[float, float]]:
        """(first step's begin, last step's end), None without steps."""
        begins = [s.t_s for s in self.steps[:1]] + [w.t0_s for w in self.windows[:1]]
        ends = [s.end_s for s in self.steps[-1:]] + [w.t_s for w in self.windows[-1:]]
        return (min(begins), max(ends)) if begins else None

    def holds(self, t: float) -> bool:
        """Whether time `t` fell inside a steady step's loop iteration (its cycle: the time
        outside the run before it, then the run; a window of steps: inside its span)."""
        if self._spans is None:
            self._spans = Spans([(s.end_s - s.cycle_s, s.end_s) for s in self.steps]
                                + [(w.t0_s, w.t_s) for w in self.windows])
        return self._spans.hold(t)

    def fed(self, spans) -> Tuple[Optional[float], Optional[float]]:
        """(mean cycle, share of the steady steps' time) of the steady steps whose middle
        fell inside one of `spans` [(t0, t1)] (a window of steps by its own middle);
        (None, None) where none did."""
        inside = Spans(spans).hold
        cycles = [s.cycle_s for s in self.steps if inside((s.t_s + s.end_s) / 2)]
        n = len(cycles)
        total = sum(cycles)
        for w in self.windows:
            if "cycle" in w.parts and inside((w.t0_s + w.t_s) / 2):
                n, total = n + w.n, total + w.parts["cycle"].sum
        whole = self.total("cycle", r.Step.cycle_s.fget)
        if not n or whole <= 0:
            return None, None
        return total / n, total / whole

    def dist(self, part: str, value) -> Optional[F.Distribution]:
        """The distribution of one part (records.StepWindow.parts) over every steady step;
        `value(step)` reads it from a step recorded in full."""
        values = [value(s) for s in self.steps]
        if not self.n_tail:
            return distribution(values)
        b = DistBuilder()
        for w in self.windows:
            if part in w.parts:
                b.merge(w.parts[part])
        for v in values:
            b.add(v)
        q = b.sketch.quantile
        return F.Distribution(b.mean, q(0.5), q(0.9), q(0.99), b.min, b.max, b.cv(), b.n)

    def total(self, part: str, value) -> float:
        return sum(value(s) for s in self.steps) + sum(
            w.parts[part].sum for w in self.windows if part in w.parts)


def summarize(profile) -> F.Summary:
    """The summary of `profile` (a paddletune.profile.Profile)."""
    main, counts = main_program(profile)
    full = [s for s in profile.steps if s.program == main and not s.startup]
    tail = [w for w in profile.windows if w.program == main]
    usable, ceiling_steps = _without_ceiling(full, ceiling_span(profile))
    warmup = profile.options.warmup
    if warmup is None:
        warmup = detect_warmup([s.cycle_s for s in usable], tail)
    warmup = min(int(warmup), len(usable))
    steady = Steady(usable[warmup:], tail)
    n_steps = len(full) + steady.n_tail
    step = step_figures(steady)
    cycle = step["cycle_s"].mean if step["cycle_s"] else None
    verdict = make_verdict(n_steps, steady.n, step, profile.source.terms)
    duration_s = _duration(profile)
    reader = reader_figures(profile, steady.span(), (main, cycle), steady.fed, steady.fed)
    return F.Summary(
        n_steps=n_steps, main_program=main, warmup_steps=warmup,
        warmup_s=sum(s.cycle_s for s in usable[:warmup]) if warmup else None,
        steady_steps=steady.n,
        aggregated_steps=steady.n_tail, speed_test_steps_excluded=ceiling_steps,
        programs=_programs(profile, counts), duration_s=duration_s, **step,
        verdict=verdict, evaluation=evaluation_figures(profile, duration_s), reader=reader,
        speed_test=speed_test_figures(profile, full, reader is not None),
        memory=memory_figures(profile, steady, cycle),
        parallel=parallel_figures(profile, steady, main),
        ops=op_figures(profile, main, steady), system=system_figures(profile),
        gpus=gpu_figures(profile), device=device_figures(profile, steady,
                                                         ceiling_span(profile)),
        gc=gc_figures(profile, steady), overhead=probe_overhead(profile, duration_s),
        exit=exit_figures(profile))


def gc_figures(profile, steady: Steady) -> Optional[F.GcFigures]:
    """The garbage collector's pauses on the training thread (records.GcPauseEvent): those
    that began inside a steady step (not in the speed test's window, nor in an evaluation
    between steps) against the steps' time; None without a pause."""
    pauses = profile.events_of("gc_pause")
    if not pauses:
        return None
    placed = [p for p in pauses if not p.more]
    more = sum(p.more for p in pauses)
    inside = [p for p in placed if steady.holds(p.t_s)]
    total = sum(p.pause_s for p in inside)
    cycles = steady.total("cycle", r.Step.cycle_s.fget)
    longest = max(inside, key=lambda p: p.pause_s, default=None)
    full = [p for p in inside if p.generation == 2]
    heaps = sorted(profile.events_of("gc_heap"), key=lambda h: h.t_s)
    loop = heaps[0].objects if heaps else None  # (the first step's end: its `full` may be
    # more than 0, collections that ran inside that step: an L-BFGS step's closures)
    last = heaps[-1] if len(heaps) > 1 else None
    return F.GcFigures(
        pauses=len(inside), full=len(full), pause_s=total,
        share=total / cycles if cycles > 0 else None,
        max_s=longest.pause_s if longest else None, max_t_s=longest.t_s if longest else None,
        run_pauses=len(placed) + more, run_pause_s=sum(p.pause_s for p in pauses), more=more,
        full_s=sum(p.pause_s for p in full), heap_loop=loop,
        heap_last=last.objects if last is not None else None)


def main_program(profile) -> Tuple[Optional[int], Counter]:
    """The non-startup program that ran the most steps, and every program's training steps."""
    counts = Counter(s.program for s in profile.steps if not s.startup)
    for w in profile.windows:
        counts[w.program] += w.n
    return (counts.most_common(1)[0][0] if counts else None), counts


def training_steps(steps: Sequence[r.Step]) -> List[r.Step]:
    """The steps recorded in full of the main program (not startup, the program that ran
    most often among them)."""
    counts = Counter(s.program for s in steps if not s.startup)
    if not counts:
        return []
    main = counts.most_common(1)[0][0]
    return [s for s in steps if s.program == main and not s.startup]


def _without_ceiling(steps, span):
    """The steps outside the speed test's windows (training on one re-read batch is not the
    job's real step), and how many were left out. So are the steps right after them that
    took batches the queue filled while the windows only peeked at it, until a pop finds the
    queue empty: a producer slower than the step only then sets the pace again (bench_advice's
    starved-thread job: 10 such steps, which made the steady step 4% short)."""
    if span is None:
        return steps, 0
    kept = [s for s in steps if not span[0] <= s.t_s < span[1]]
    refill = _refill_steps([s for s in kept if s.t_s >= span[1]])
    kept = [s for s in kept if id(s) not in refill]
    return kept, len(steps) - len(kept)


def _refill_steps(after: Sequence[r.Step]) -> set:
    """ids of the leading steps of `after` (the steps after the speed test) before the first
    whose pop found the queue empty; none when no pop did (a producer that keeps up leaves
    the queue full anyway) or a step's queue is unknown."""
    drained = next((i for i, s in enumerate(after) if s.queue == 0), None)
    if drained is None or any(s.queue is None for s in after[:drained]):
        return set()
    return {id(s) for s in after[:drained]}


def detect_warmup(cycle_s: Sequence[float], tail: Sequence[r.StepWindow] = ()) -> int:
    """How many leading steps are warm-up.

    The first step always is (it compiles the program). After it, a step still warms up while
    it is slower than WARMUP_FACTOR x the median of the second half of the run; at most half
    of the steps are ever called warm-up. Warm-up is looked for among the steps recorded in
    full; the run's second half includes the windows after them.
    """
    n = len(cycle_s) + sum(w.n for w in tail)
    if n <= 1:
        return n
    settled = _second_half_median(cycle_s, tail, n)
    k = 1
    while k < min(n // 2, len(cycle_s)) and cycle_s[k] > WARMUP_FACTOR * settled:
        k += 1
    return k


def _second_half_median(cycle_s, tail, n) -> float:
    if not tail:
        return _quantile(sorted(cycle_s[n // 2:]), 0.5)
    b = DistBuilder()
    for w in tail:
        if "cycle" in w.parts:
            b.merge(w.parts["cycle"])
    for v in cycle_s[n // 2:]:
        b.add(v)
    return b.sketch.quantile(0.5) or 0.0


def step_figures(steady: Steady) -> dict:
    """Distribution, breakdown (mean seconds and shares of the cycle) and throughput."""
    if not steady.n:
        return {"step_s": None, "cycle_s": None, "breakdown_s": None, "shares": None,
                "input_share": None, "throughput": None}
    n = steady.n
    total_cycle = steady.total("cycle", r.Step.cycle_s.fget)
    mean_cycle = total_cycle / n
    breakdown = F.Breakdown(*(steady.total(part, getter) / n for part, getter in _PARTS),
                            compute_wait_s=_measured_mean(steady, "compute_wait"),
                            compute_queued_s=_measured_mean(steady, "compute_queued"))
    shares = F.Shares(*(b / mean_cycle if mean_cycle > 0 else 0.0 for b in (
        breakdown.outside_s, breakdown.read_s, breakdown.feed_s, breakdown.compute_s,
        breakdown.fetch_s)))
    return {"step_s": steady.dist("wall", lambda s: s.wall_s),
            "cycle_s": steady.dist("cycle", r.Step.cycle_s.fget),
            "breakdown_s": breakdown, "shares": shares,
            "input_share": input_share(breakdown.outside_s, breakdown.read_s,
                                       breakdown.feed_s, mean_cycle) or 0.0,
            "throughput": _throughput(steady, total_cycle, mean_cycle)}


_PARTS = (("outside", lambda s: s.gap_s or 0.0), ("read", lambda s: s.read_s),
          ("feed", lambda s: s.feed_s), ("compute", lambda s: s.compute_s),
          ("fetch", lambda s: s.fetch_s))


def _measured_mean(steady: Steady, part: str) -> Optional[float]:
    """The mean of the steady steps' `part` (records.Step.compute_wait_s, compute_queued_s:
    fields a step may lack); None unless every one measured it (a window's part counts the
    steps that did)."""
    field = f"{part}_s"
    if any(getattr(s, field) is None for s in steady.steps) or any(
            part not in w.parts or w.parts[part].n != w.n for w in steady.windows):
        return None
    return steady.total(part, lambda s: getattr(s, field)) / steady.n


def _throughput(steady: Steady, total_cycle: float, mean_cycle: float) -> F.Throughput:
    sizes = Counter(s.batch_size for s in steady.steps if s.batch_size)
    for w in steady.windows:
        sizes.update(w.batch_sizes)
    batch = _median_of_counts(sizes)
    samples = sum(s.sample_count for s in steady.steps) + sum(w.samples
                                                              for w in steady.windows)
    fetched = sum(s.fetch_bytes for s in steady.steps) + sum(w.fetch_bytes
                                                             for w in steady.windows)
    return F.Throughput(
        steps_per_s=steps_per_s(steady.n, total_cycle), batch_size=batch,
        samples_per_s=samples / total_cycle if batch and total_cycle > 0 else None,
        fetch_bytes_per_step=fetched / steady.n, steps=steady.n, seconds=total_cycle,
        spread=_spread(steady))


SPREAD_PARTS = 5  # Throughput.spread: the steady steps cut in this many consecutive parts
SPREAD_MIN_STEPS = 10  # ... each of at least this many steps


def _spread(steady: Steady) -> Optional[float]:
    """The standard deviation of the mean step time (cycle) of SPREAD_PARTS consecutive parts
    of the steady steps, over the mean step time: how far one part of the run measured a
    different speed from another. A window (records.StepWindow) is never cut; parts of fewer
    than SPREAD_MIN_STEPS steps (a short run, or a window holding most of it): None."""
    units = [(1, s.cycle_s) for s in steady.steps] + [
        (w.n, w.parts["cycle"].sum) for w in steady.windows if "cycle" in w.parts]
    total_n = sum(n for n, _ in units)
    if total_n < SPREAD_PARTS * SPREAD_MIN_STEPS:
        return None
    parts = [[0, 0.0] for _ in range(SPREAD_PARTS)]
    start = 0
    for unit_n, unit_cycle in units:  # a unit goes to the part where it starts
        part = parts[min(SPREAD_PARTS - 1, start * SPREAD_PARTS // total_n)]
        part[0] += unit_n
        part[1] += unit_cycle
        start += unit_n
    parts = [(k, c) for k, c in parts if k]
    if len(parts) < 3 or min(k for k, _ in parts) < SPREAD_MIN_STEPS:
        return None
    mean = sum(c for _, c in parts) / total_n
    return statistics.stdev([c / k for k, c in parts], mean) / mean if mean > 0 else None


def _median_of_counts(counts: Counter) -> Optional[int]:
    """The element at index n // 2 of the sorted values counted (None when empty)."""
    total = sum(counts.values())
    if not total:
        return None
    seen = 0
    for value in sorted(counts):
        seen += counts[value]
        if seen > total // 2:
            return value
    return None


def make_verdict(n_steps: int, steady_steps: int, step: dict,
                 terms: r.Terms = r.Terms()) -> F.Verdict:
    """Input-bound or compute-bound, stated with the numbers (TF Profiler's classes), in the
    source's `terms`."""
    share = step["input_share"]
    if share is None or steady_steps < MIN_STEADY_STEPS:
        why = ("no training steps observed" if not n_steps
               else f"only {steady_steps} steady-state step(s); need at least "
                    f"{MIN_STEADY_STEPS}")
        return F.Verdict("too-few-steps", share, f"Too few steps to tell: {why}.")
    b, cycle = step["breakdown_s"], step["cycle_s"]
    read = (f" + {b.read_s * 1e3:.2f} ms waiting for the {terms.loader} inside {terms.call}"
            if b.read_s else "")
    numbers = (f"{share:.1%} of each {cycle.mean * 1e3:.2f} ms step waits for input "
               f"({b.outside_s * 1e3:.2f} ms {terms.between}{read} + "
               f"{b.feed_s * 1e3:.2f} ms feeding), {step['shares'].compute:.1%} computes")
    if share >= HIGHLY_INPUT_BOUND:
        kind, head = "highly-input-bound", "Highly input-bound"
    elif share >= MODERATELY_INPUT_BOUND:
        kind, head = "moderately-input-bound", "Moderately input-bound"
    else:
        kind, head = "compute-bound", "Compute-bound"
    noisy = f"; step times vary a lot (CV {cycle.cv:.0%})" if cycle.cv > 0.5 else ""
    return F.Verdict(kind, share, f"{head}: {numbers}{noisy}.")


def op_figures(profile, program, steady: Steady) -> Optional[F.OpFigures]:
    """Per-op-type total/mean/count/share of the steady steps' op time, and the top ops."""
    keys = steady.keys()
    rows = [o for o in profile.ops if o.program == program and (o.program, o.step) in keys]
    windows = [w for w in steady.windows if w.op_steps]
    if not rows and not windows:
        return None
    by_type, by_op = {}, {}
    for o in rows:
        for op in o.ops:
            _add_time(by_type, op.type, op.dur_s, 1)
            _add_time(by_op, (op.index, op.type), op.dur_s, 1)
    for w in windows:
        for op in w.ops:
            _add_time(by_type, op.type, op.total_s, op.count)
            _add_time(by_op, (op.index, op.type), op.total_s, op.count)
    total = sum(v[0] for v in by_type.values()) or 1e-30
    types = tuple(F.OpTypeFigures(t, s, c, s / c, s / total)
                  for t, (s, c) in sorted(by_type.items(), key=lambda kv: -kv[1][0]))
    top = tuple(F.SingleOpFigures(i, t, s, c, s / c, s / total)
                for (i, t), (s, c) in sorted(by_op.items(), key=lambda kv: -kv[1][0])[:TOP_OPS])
    timings = {o.timing for o in rows} | {w.timing for w in windows if w.timing}
    return F.OpFigures(len(rows) + sum(w.op_steps for w in windows), total,
                       "+".join(sorted(timings)) or "host", types, top)


def _add_time(table, key, seconds, count):
    row = table.get(key)
    if row is None:
        table[key] = [seconds, count]
    else:
        row[0] += seconds
        row[1] += count


def system_figures(profile) -> Optional[F.SystemFigures]:
    """The system probe's fields over its samples and windows (None: never sampled)."""
    windows = entity_windows(profile.sample_windows, "system").get(None, [])
    if not profile.system and not windows:
        return None
    names = [f for f in FIELDS["system"] if hasattr(F.SystemFigures, f)]
    return F.SystemFigures(**field_stats(profile.system, windows, names))


def gpu_figures(profile) -> Tuple[F.GpuFigures, ...]:
    """Each GPU's NVML fields over its samples and windows, by index."""
    windows = entity_windows(profile.sample_windows, "nvml")
    gpus = sorted({s.gpu for s in profile.gpu} | {k for k in windows if k is not None})
    names = [f for f in FIELDS["nvml"] if hasattr(F.GpuFigures, f)]
    out = []
    for g in gpus:
        mine = [s for s in profile.gpu if s.gpu == g]
        theirs = windows.get(g, [])
        out.append(F.GpuFigures(g, **field_stats(mine, theirs, names),
                                throttle=throttle_shares(mine, theirs)))
    return tuple(out)


def probe_overhead(profile, duration_s: float) -> dict:
    """Each probe's self-measured cost and its share (F.ProbeOverhead): an in-step probe's
    of the training loop's time (every step's loop iteration, warm-up and startup included:
    the steps it measured); a background probe's of the job's wall time (it runs beside the job
    from start to end). Dividing a whole-run cost by the steady steps alone gave shares
    above 100% on short runs; a share still above 1 (a clock that disagrees) is None."""
    in_loop = loop_time_s(profile)
    out = {}
    for name, rec in profile.probes.items():
        if rec.overhead_s is None:
            continue
        whole = in_loop if rec.in_step else duration_s
        share = rec.overhead_s / whole if whole and whole > 0 else None
        out[name] = F.ProbeOverhead(rec.overhead_s, share if share is None or share <= 1.0
                                    else None, rec.in_step)
    return out


def loop_time_s(profile) -> float:
    """The training loop's time: every recorded step's loop iteration (its run and the gap
    before it), the steps in full and the windows' alike."""
    return (sum(s.cycle_s for s in profile.steps)
            + sum(w.parts["cycle"].sum for w in profile.windows if "cycle" in w.parts))


def distribution(values: Sequence[float]) -> Optional[F.Distribution]:
    """The exact distribution of `values` (None when empty)."""
    if not values:
        return None
    ordered = sorted(values)
    n = len(ordered)
    mean = sum(ordered) / n
    var = sum((v - mean) ** 2 for v in ordered) / n
    return F.Distribution(mean, _quantile(ordered, 0.5), _quantile(ordered, 0.9),
                          _quantile(ordered, 0.99), ordered[0], ordered[-1],
                          math.sqrt(var) / mean if mean > 0 else 0.0, n)


def _quantile(ordered, q):
    """Linear interpolation between closest ranks (NumPy's default)."""
    if not ordered:
        return 0.0
    pos = (len(ordered) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def _programs(profile, counts) -> Tuple[F.ProgramSteps, ...]:
    runs = Counter((s.program, bool(s.startup)) for s in profile.steps if s.startup)
    runs.update({(p, False): n for p, n in counts.items()})
    return tuple(F.ProgramSteps(p, st, n) for (p, st), n in sorted(runs.items()))


def _duration(profile) -> float:
    exit_event = profile.last_event("exit")
    if exit_event is not None:
        return max(exit_event.t_s, 0.0)
    ends = [s.end_s for s in profile.steps[-1:]] + [w.t_s for w in profile.windows[-1:]]
    ends += [x.t_s for family in (profile.system, profile.gpu, profile.events)
             for x in family[-1:]]
    return max([t for t in ends if t >= 0] or [0.0])


def exit_figures(profile) -> F.ExitFigures:
    e = profile.last_event("exit")
    if e is not None:
        return F.ExitFigures(e.status, e.reason, e.message)
    return F.ExitFigures(None, "unknown", "the profile ends without an exit record: the job "
                                          "was killed or the profiler crashed")
