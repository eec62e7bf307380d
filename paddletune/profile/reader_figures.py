"""Reader and speed-test figures of the summary: each DataLoader's queue over the steady window,
and the --speed-test no-data ceiling against the baseline window.

Reader figures come from the reader probe's interval records (probes/reader.py) whose span
overlaps the steady steps, leaving out the speed-test intervals (their pops were peeks); when
none overlaps (a very short job), from all of them (`scope` says which). Rates are per batch:
  producer.s_per_batch    time one producer (the loader's thread or one worker) spends
                          making a batch; producer.rate_per_s = producers / s_per_batch
  wait.per_step_s         the loop's wait for batches per training step (the pops paired
                          with each step by the probe; none paired, passes inside step():
                          the wait's rate over the intervals times the cycle);
                          wait.share = per_step_s / cycle
  consumer.s_per_batch    the loop's time per batch when not waiting for one: what a batch
                          would cost if data were free, (cycle - wait per step) / batches per
                          step; consumer.rate_per_s its inverse
The cycle is the main program's steady mean when the loader feeds the main program (the mean
of the steady steps inside the intervals used, where those hold only some of them: a pass's
first interval left out with the warm-up); else the figures fall back to the intervals' own
span (time the pass ran).
"""

from collections import Counter, defaultdict
from typing import Dict, Optional, Sequence, Tuple

from . import figures as F
from . import loghist
from . import records as r
from .reader_merge import merge_intervals
from .samples import entity_windows

OSCILLATION_SWINGS = 3  # drained from full to empty at least this often: oscillating
TIMELINE_POINTS = 48  # the fill-over-time series is averaged down to at most this many points
LONG_WAIT_S = 0.001  # a pop that waited this long for its batch to be made (the hand-over
# of a ready one from a worker, where measured, is left out of the histogram) found none ready
MIN_POPS = 10  # fewer pops than this in the steady intervals: use every interval
MIN_INSIDE_SHARE = 0.5  # the intervals begun inside the steady window stand for it alone
# when they hold at least this share of the pops of those overlapping it
ALL_STEPS = 0.95  # a training loader inside whose passes this share of the steady steps'
# time fell fed them all (its figures are of the steps' mean cycle)
MAIN_WAIT_RATIO = 2.0  # a training loader whose waits add up to this many times those of
MAIN_WAIT_SHARE = 0.05  # the one with the most batches, and to this share of the steady
# window, is the main loader (the input that holds the steps back)


# --- reader ---------------------------------------------------------------------------------------
def reader_figures(profile, window, main_cycle=None, fed=None,
                   cycle_of=None) -> Optional[F.ReaderFigures]:
    """Every loader's figures, the main loader and failed passes; None when no DataLoader
    pass started. `window`: (t0, t1) of the steady steps, or None; `main_cycle`: (main
    program id, its steady mean cycle in seconds), or None; `fed(spans)`: (the mean cycle,
    the share of the steady steps' time) of the steady steps inside `spans` [(t0, t1)],
    for a training loader that fed only some of them (another loader fed the others: an
    epoch on a slower dataset), or None; `cycle_of(spans)` the same for any loader, or None:
    the per-step figures of intervals that hold only some of the steady steps are of those
    steps' cycle."""
    starts = profile.records("reader", r.ReaderStart)
    if not starts:
        return None
    configs, passes = {}, defaultdict(int)
    for s in starts:
        configs.setdefault(s.loader, s.config)
        passes[s.loader] += 1
    intervals = profile.records("reader", r.ReaderInterval)
    ends = profile.records("reader", r.ReaderEnd)
    between = Counter(e.loader for e in ends if e.eval_s is not None)
    evaluation = {loader: 0 < passes[loader] <= between[loader] for loader in configs}
    training = sum(not e for e in evaluation.values())
    loaders = []
    for loader, config in configs.items():
        loaders.append(loader_figures(  # (an evaluation loader's batches are not the
            # steady steps': all its passes count)
            loader, config, passes[loader], None if evaluation[loader] else window,
            main_cycle, [iv for iv in intervals if iv.loader == loader],
            process_figures(profile, loader),
            pass_starts([s for s in starts if s.loader == loader],
                        [e for e in ends if e.loader == loader],
                        [iv for iv in intervals if iv.loader == loader]),
            evaluation=evaluation[loader], fed=fed if training > 1 else None,
            cycle_of=cycle_of))
    errors = tuple(F.LoaderError(e.loader, e.detail) for e in ends if e.what == "error")
    return F.ReaderFigures(tuple(loaders), main_loader_of(loaders, window), errors)


def main_loader_of(loaders: Sequence[F.LoaderFigures], window) -> int:
    """The training loop's loader: of those not only evaluating (an evaluation loader only
    where no other ran), the one that delivered the most batches; or another whose waits
    held the steps back more (MAIN_WAIT_RATIO times its wait, and MAIN_WAIT_SHARE of the
    steady window at least): the one whose input to fix."""
    training = [f for f in loaders if not f.evaluation] or list(loaders)
    most = max(training, key=lambda f: f.batches)
    steady = [f for f in training if f.scope == "steady"]  # (waits over the same window)
    if not steady or most.scope != "steady" or not window:
        return most.loader
    waited = max(steady, key=lambda f: f.wait.total_s or 0.0)
    if waited is not most and (waited.wait.total_s or 0.0) >= max(
            MAIN_WAIT_RATIO * (most.wait.total_s or 0.0),
            MAIN_WAIT_SHARE * (window[1] - window[0])):
        return waited.loader
    return most.loader


def loader_figures(loader, config: r.LoaderConfig, passes, window, main_cycle, intervals,
                   processes=None, starts=None, evaluation=False, fed=None,
                   cycle_of=None) -> F.LoaderFigures:
    picked, scope = _in_window(intervals, window)
    c = merge_intervals(picked) if picked else r.ReaderInterval(0.0, 0.0, loader, 0)
    span_s = sum(max(iv.t_s - iv.t0_s, 0.0) for iv in picked)
    pops = c.pops
    cycle_s, steps_share = _fed(fed, intervals) if fed and scope == "steady" else (None, None)
    if cycle_s is not None and main_cycle:  # its own steps' cycle
        main_cycle = (main_cycle[0], cycle_s)
    if cycle_of is not None and scope == "steady" and main_cycle:
        main_cycle = _picked_cycle(cycle_of, picked, main_cycle)
    step = _per_step(c, main_cycle, span_s) if scope == "steady" else None  # same steps
    producers = max(int(config.num_workers or 0), 1)
    return F.LoaderFigures(
        loader=loader, name=config.name, config=config, passes=passes, scope=scope,
        span_s=span_s, batches=pops, pushes=c.pushes, peeks=c.peeks, empty_pops=c.empty_pops,
        empty_ratio=c.empty_pops / pops if pops else None, wait=_wait(c, step, span_s),
        occupancy=_occupancy(c, config.capacity), timeline=timeline(intervals),
        producer=_producer(c, producers, span_s), workers=_workers(c),
        consumer=_consumer(c, step, span_s), swings=c.swings,
        oscillating=c.swings >= OSCILLATION_SWINGS,
        copy_s_per_pop=c.copy_s / pops if pops else None,
        handover_s_per_pop=c.handover_s / pops if pops and c.handover_s else None,
        shapes=shape_figures(c.shapes), long_batches=long_batches(c.cost),
        processes=processes, pass_starts=starts, evaluation=evaluation,
        cycle_s=cycle_s, steps_share=steps_share)


def _picked_cycle(cycle_of, picked, main_cycle):
    """The main cycle for the per-step figures of the `picked` intervals: the mean cycle of
    the steady steps inside them where they hold fewer than ALL_STEPS of the steady steps'
    time (a pass's first interval left out with the warm-up steps it held, where a later
    pass's first interval, its workers' start included, is in: helper-34's s10, whose wait
    read 70% of the loop against the steps' 55%); else `main_cycle` as it is."""
    cycle_s, share = cycle_of([(iv.t0_s, iv.t_s) for iv in picked])
    if cycle_s is None or share is None or share >= ALL_STEPS:
        return main_cycle
    return main_cycle[0], cycle_s


def _fed(fed, intervals) -> Tuple[Optional[float], Optional[float]]:
    """(the mean cycle, the share of the steady steps' time) of the steady steps inside the
    loader's intervals (all but the speed test's: the steps a pass's first interval holds
    too), where it fed fewer than ALL_STEPS of them; else (None, None): it fed every step
    (a loader read beside another each step), whose mean cycle is the steps'."""
    cycle_s, share = fed([(iv.t0_s, iv.t_s) for iv in intervals if not iv.speed_test])
    if share is None or share >= ALL_STEPS:
        return None, None
    return cycle_s, share


def pass_starts(starts: Sequence[r.ReaderStart], ends: Sequence[r.ReaderEnd],
                intervals: Sequence[r.ReaderInterval] = ()) -> Optional[F.PassStarts]:
    """The loader's passes' start-up (F.PassStarts) from their starts, ends and intervals;
    None where none was measured. Each pass's is its iter() before the first batch request
    (ReaderStart.startup_s), plus, where the workers start inside that request (its
    first_wait_s: PyTorch's spawn and forkserver workers), the wait for that first batch
    beyond a batch's usual wait: the mean of the pass's other batches' waits (its
    intervals')."""
    timed = sorted((s for s in starts if s.startup_s is not None), key=lambda s: s.pass_no)
    if not timed:
        return None
    in_first_batch = any(s.first_wait_s is not None for s in timed)
    waits = _pass_waits(intervals) if in_first_batch else {}
    costs = [s.startup_s + _first_batch_excess(s, waits.get(s.pass_no)) for s in timed]
    end_of = {e.pass_no: e.t_s for e in ends if e.what in ("end", "left")}
    first = timed[0].pass_no == 1
    later, later_costs = (timed[1:], costs[1:]) if first else (timed, costs)
    spans = [end_of[s.pass_no] - s.t_s + s.startup_s for s in later if s.pass_no in end_of]
    return F.PassStarts(
        costs[0] if first else None,
        sum(later_costs) / len(later_costs) if later_costs else None, len(later),
        sum(spans) / len(spans) if spans else None, in_first_batch)


def _pass_waits(intervals: Sequence[r.ReaderInterval]) -> Dict[int, Tuple[float, int]]:
    """{pass: (the loop's waits for its batches, summed; its pops)}, the speed test's
    intervals left out."""
    out: Dict[int, Tuple[float, int]] = {}
    for iv in intervals:
        if not iv.speed_test:
            wait_s, pops = out.get(iv.pass_no, (0.0, 0))
            out[iv.pass_no] = (wait_s + iv.wait_s, pops + iv.pops)
    return out


def _first_batch_excess(start: r.ReaderStart, waits: Optional[Tuple[float, int]]) -> float:
    """The wait for a pass's first batch beyond the mean wait of its other batches (all of
    it where it had no other), where its workers started inside it; else 0."""
    first = start.first_wait_s
    if first is None:
        return 0.0
    usual = 0.0
    if waits is not None and waits[1] >= 2:
        usual = max(waits[0] - first, 0.0) / (waits[1] - 1)
    return max(first - usual, 0.0)


def _in_window(intervals, window):
    """The intervals that began inside the steady window when they hold MIN_POPS pops and at
    least half (MIN_INSIDE_SHARE) of the pops of those overlapping it (the first interval of
    a pass also holds its start-up: the first batches, the compile), else those overlapping
    it, else all; the speed test's intervals never.

    In a short job (a tune trial: a second or so) the pass's first interval, cut at the
    probe's first flush, holds most of the steady steps' batches, and those that began
    inside are a tail of a few batches: alone they would stand for the window by chance (a
    slow file's burst among ten batches reads as a producer three times slower)."""
    usable = [iv for iv in intervals if not iv.speed_test]
    if window is None:
        return usable, "all"
    t0, t1 = window
    overlapping = [iv for iv in usable if iv.t_s > t0 and iv.t0_s < t1]
    inside = [iv for iv in overlapping if iv.t0_s >= t0]
    overlapping_pops = sum(iv.pops for iv in overlapping)
    inside_pops = sum(iv.pops for iv in inside)
    if inside_pops >= MIN_POPS and inside_pops >= MIN_INSIDE_SHARE * overlapping_pops:
        return inside, "steady"
    if overlapping_pops >= MIN_POPS:
        return overlapping, "steady"
    return usable, "all"


def process_figures(profile, loader) -> Optional[F.ProcessFigures]:
    """Memory and CPU of a loader's worker processes, from the workers probe's samples and
    windows: for each worker of each pass, its USS growth since its first sample (taken as
    the pass started: copy-on-read shows here) and the cores it kept busy; then per worker
    index (the largest growth, the mean cores over passes) and in total. None without
    samples."""
    lives = defaultdict(lambda: {"first": None, "last": None, "uss_max": 0})
    for s in profile.workers:
        if s.loader == loader:
            _live(lives[(s.pass_no, s.worker)], s.t_s, s.t_s, s.uss_bytes, s.uss_bytes,
                  s.uss_bytes, s.cpu_s, s.cpu_s)
    for w in (x for rows in entity_windows(profile.sample_windows, "workers").values()
              for x in rows):
        uss, cpu = w.fields.get("uss_bytes"), w.fields.get("cpu_s")
        if w.labels.get("loader") == loader and uss is not None and cpu is not None:
            _live(lives[(w.labels.get("pass_no"), w.labels.get("worker"))], w.t0_s, w.t_s,
                  uss.first, uss.last, uss.max, cpu.first, cpu.last)
    per_worker = defaultdict(lambda: {"growth": 0, "uss_max": 0, "cores": []})
    for (_, worker), life in lives.items():
        into = per_worker[worker]
        (t0, uss0, cpu0), (t1, _, cpu1) = life["first"], life["last"]
        into["growth"] = max(into["growth"], life["uss_max"] - uss0)
        into["uss_max"] = max(into["uss_max"], life["uss_max"])
        if t1 > t0:
            into["cores"].append((cpu1 - cpu0) / (t1 - t0))
    if not per_worker:
        return None
    rows = tuple(F.WorkerProcess(w, v["growth"], v["uss_max"],
                                 sum(v["cores"]) / len(v["cores"]) if v["cores"] else None)
                 for w, v in sorted(per_worker.items()))
    growths = [p.uss_growth_bytes for p in rows]
    cores = [p.cores for p in rows if p.cores is not None]
    return F.ProcessFigures(len(rows), F.Growth(sum(growths) / len(growths), max(growths)),
                            max(p.uss_max_bytes for p in rows), sum(cores) if cores else None,
                            rows)


def _live(life, t0, t1, uss_first, uss_last, uss_max, cpu_first, cpu_last):
    if life["first"] is None or t0 < life["first"][0]:
        life["first"] = (t0, uss_first, cpu_first)
    if life["last"] is None or t1 >= life["last"][0]:
        life["last"] = (t1, uss_last, cpu_last)
    life["uss_max"] = max(life["uss_max"], uss_max)


def _per_step(c: r.ReaderInterval, main_cycle, span_s: float = 0.0) -> Optional[dict]:
    """Wait and batches per training step, and the cycle they belong to, when the loader's
    steps are the main program's (the cycle is then measured by the step records). Where
    no pop was paired with a step (passes inside an optimizer's step(): an L-BFGS closure
    reads the DataLoader before the step ends), their rates over the intervals' time `span_s`
    times the cycle (helper-33's s03: 100 batches a step, read as one)."""
    programs, steps = c.programs, c.steps
    if not main_cycle or not main_cycle[1]:
        return None
    if not steps and not programs and c.pops and span_s > 0:
        cycle_s = main_cycle[1]
        return {"wait_s": c.wait_s / span_s * cycle_s, "batches": c.pops / span_s * cycle_s,
                "cycle_s": cycle_s}
    if not steps or not programs:
        return None
    if max(programs, key=programs.get) != main_cycle[0]:
        return None
    return {"wait_s": c.step_wait_s / steps, "batches": c.pops / steps,
            "cycle_s": main_cycle[1]}


def _wait(c: r.ReaderInterval, step, span_s) -> F.WaitFigures:
    pops, hist = c.pops, c.wait_hist
    share = (step["wait_s"] / step["cycle_s"] if step else
             c.wait_s / span_s if span_s > 0 else None)
    top = c.wait_max_s
    p50, p90 = (loghist.quantile(hist, q) for q in (0.5, 0.9))
    return F.WaitFigures(mean_s=c.wait_s / pops if pops else None,
                         p50_s=None if p50 is None else min(p50, top),
                         p90_s=None if p90 is None else min(p90, top), max_s=top,
                         total_s=c.wait_s, per_step_s=step["wait_s"] if step else None,
                         share=share, waited_pops=_waited_pops(hist) if hist else None)


def _waited_pops(hist) -> int:
    """The pops of a wait histogram in the buckets at or above LONG_WAIT_S."""
    floor = loghist.bucket(LONG_WAIT_S)
    return sum(n for k, n in hist.items() if int(k) >= floor)


def _occupancy(c: r.ReaderInterval, capacity) -> Optional[F.Occupancy]:
    """Queue fill from the periodic samples (time-weighted), else from the pops' sizes."""
    sizes, source = c.occupancy, "samples"
    if not sizes:
        sizes, source = c.pop_sizes, "pops"
    n = sum(sizes.values())
    if not n:
        return None
    full = sum(k for size, k in sizes.items() if capacity and size >= capacity)
    return F.Occupancy(sum(size * k for size, k in sizes.items()) / n, min(sizes), max(sizes),
                       capacity, full / n, sizes.get(0, 0) / n, n, source)


def timeline(intervals) -> Tuple[Tuple[float, float], ...]:
    """[[t, mean fill], ...] of every interval with queue samples (speed-test ones too),
    averaged down to at most TIMELINE_POINTS points: fill against capacity over time."""
    points = []
    for iv in sorted(intervals, key=lambda iv: iv.t_s):
        n = sum(iv.occupancy.values())
        if n:
            points.append((iv.t_s, sum(s * k for s, k in iv.occupancy.items()) / n))
    group = -(-len(points) // TIMELINE_POINTS) or 1
    return tuple((chunk[-1][0], sum(p[1] for p in chunk) / len(chunk))
                 for chunk in (points[i:i + group] for i in range(0, len(points), group)))


def _producer(c: r.ReaderInterval, producers, span_s) -> F.ProducerFigures:
    per = c.produce_s / c.pushes if c.pushes else None
    cpu = c.cpu_s / c.cpu_n if c.cpu_n else None
    return F.ProducerFigures(producers, per, cpu,
                             # (at most 1: a batch's CPU time never exceeds its time; the CPU
                             # may be a sample's mean, the time is every batch's)
                             min(cpu / per, 1.0) if cpu is not None and per else None,
                             producers / per if per else None,
                             c.put_wait_s / span_s if span_s > 0 else None)


def _workers(c: r.ReaderInterval) -> Tuple[F.WorkerFigures, ...]:
    return tuple(F.WorkerFigures(w, row.batches, row.produce_s / row.batches if row.batches
                                 else None,
                                 row.cpu_s / row.cpu_batches if row.cpu_batches else None)
                 for w, row in sorted(c.workers.items()))


def _consumer(c: r.ReaderInterval, step, span_s) -> F.ConsumerFigures:
    pops = c.pops
    if step:
        free = max(step["cycle_s"] - step["wait_s"], 0.0) / step["batches"]
        actual = step["batches"] / step["cycle_s"]
    else:
        free = (span_s - c.wait_s) / pops if pops and span_s > c.wait_s else None
        actual = pops / span_s if span_s > 0 else None
    return F.ConsumerFigures(free or None, 1 / free if free else None, actual,
                             step["batches"] if step else None)


def shape_figures(shapes: Dict[str, Dict[str, int]]) -> Dict[str, F.ShapeFigures]:
    """Per feed variable: the most common shape (None where a dim varies) and, for each
    varying dim, min/p50/p95/max over the batches."""
    out = {}
    for name, counter in shapes.items():
        parsed = {}
        for key, n in counter.items():
            try:
                shape = tuple(int(d) for d in str(key).split("x") if d)
            except ValueError:
                continue  # not a shape ("64x?"): not counted
            parsed[shape] = parsed.get(shape, 0) + n
        if not parsed:
            continue
        common = max(parsed, key=parsed.get)
        rank_varies = len({len(s) for s in parsed}) > 1
        varying = () if rank_varies else tuple(
            row for row in (_dim(parsed, d) for d in range(len(common))) if row)
        varied = {row.dim for row in varying}
        out[name] = F.ShapeFigures(sum(parsed.values()), rank_varies,
                                   tuple(None if d in varied else v
                                         for d, v in enumerate(common)), varying)
    return out


def _dim(parsed, d) -> Optional[F.DimFigures]:
    values = defaultdict(int)
    for shape, n in parsed.items():
        values[shape[d]] += n
    if len(values) < 2:
        return None
    return F.DimFigures(d, min(values), counter_quantile(values, 0.5),
                        counter_quantile(values, 0.95), max(values))


def counter_quantile(counts: dict, q: float):
    """The smallest value whose cumulative count reaches q of the total (values weighted by
    their counts)."""
    rows = sorted(counts.items())
    rank, seen = q * sum(n for _, n in rows), 0
    for v, n in rows:
        seen += n
        if seen >= rank:
            return v
    return rows[-1][0]


def long_batches(cost: Dict[int, r.StepCost]) -> Optional[F.LongBatches]:
    """Steps on batches larger than the p95 batch (in elements) against the others."""
    steps = sum(row.steps for row in cost.values())
    if len(cost) < 2 or not steps:
        return None
    p95 = counter_quantile({k: row.steps for k, row in cost.items()}, 0.95)
    long = [row for k, row in cost.items() if k > p95]
    rest = [row for k, row in cost.items() if k <= p95]
    if not long:
        return None
    long_n, long_s = sum(x.steps for x in long), sum(x.compute_s for x in long)
    rest_n, rest_s = sum(x.steps for x in rest), sum(x.compute_s for x in rest)
    typical = rest_s / rest_n if rest_n else 0.0
    return F.LongBatches(steps, p95, max(cost), long_n, long_s / long_n, typical,
                         long_s / long_n / typical if typical > 0 else None,
                         long_s / (long_s + rest_s) if long_s + rest_s > 0 else None)


# --- speed test -----------------------------------------------------------------------------------
def ceiling_span(profile) -> Optional[Tuple[float, float]]:
    """(t0, t1) of the speed test's ceiling window (t1 = inf while it never ended), or None."""
    switches = _switches(profile)
    if "ceiling" not in switches:
        return None
    done = switches.get("done")
    return switches["ceiling"].t_s, done.t_s if done is not None else float("inf")


def _switches(profile) -> dict:
    return {e.phase: e for e in profile.events_of("speed_test")}


def speed_test_figures(profile, train: Sequence[r.Step],
                       has_loader: bool) -> Optional[F.SpeedTestFigures]:
    """Baseline and ceiling throughput of --speed-test's windows (None without a speed test).

    A window holds the training steps that began after its switch event and before the
    next; its throughput is steps (samples) over the sum of their cycles (run + the gap
    before it). ratio = ceiling / baseline steps/s; data_share = 1 - baseline / ceiling."""
    window = profile.options.speed_test
    switches = _switches(profile)
    if window is None and not switches:
        return None
    begun, started = switches.get("baseline"), switches.get("ceiling")
    one, done = switches.get("one_thread"), switches.get("done")
    ended = switches.get("solo") or one or done  # the ceiling window's end
    base = _window(train, begun, started)
    ceil = _window(train, started, ended)
    ratio = ceil.steps_per_s / base.steps_per_s if base and ceil and base.steps_per_s else None
    return F.SpeedTestFigures(
        window_steps=window, has_loader=has_loader,
        reached=next((p for p in ("done", "one_thread", "solo", "ceiling", "baseline")
                      if p in switches), None),
        complete=bool(ended and started and window and ended.step - started.step >= window),
        baseline=base, ceiling=ceil, ratio=ratio,
        data_share=1 - 1 / ratio if ratio else None,
        one_thread=_window(train, one, done),
        producers_alone=tuple(F.ProducerAlone(e.loader, e.batches, e.s_per_batch,
                                              e.cpu_s_per_batch)
                              for e in profile.events_of("producer_solo")))


def _window(train, start, end) -> Optional[F.WindowRate]:
    """The window between switch events `start` and `end` (None: not reached / open)."""
    if start is None:
        return None
    t0, t1 = start.t_s, end.t_s if end is not None else float("inf")
    steps = [s for s in train if t0 <= s.t_s < t1]
    total_s = sum(s.cycle_s for s in steps)
    if not steps or total_s <= 0:
        return None
    samples = sum(s.sample_count for s in steps)
    return F.WindowRate(len(steps), total_s / len(steps), len(steps) / total_s,
                        samples / total_s if samples else None,
                        _cpu_per_step(start.cpu_s, end and end.cpu_s, len(steps)),
                        _cpu_per_step(start.thread_cpu_s, end and end.thread_cpu_s,
                                      len(steps)))


def _cpu_per_step(start: Optional[float], end: Optional[float], steps: int):
    """CPU seconds per step between two readings of a CPU clock (None: either missing)."""
    if start is None or end is None or end < start:
        return None
    return (end - start) / steps
