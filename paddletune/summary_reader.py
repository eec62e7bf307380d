"""Reader and speed-test figures of the summary: each DataLoader's queue over the steady window,
and the --speed-test no-data ceiling against the baseline window.

Reader figures come from the reader probe's interval records (probes/reader.py) whose span
overlaps the steady steps, leaving out the speed-test intervals (their pops were peeks); when
none overlaps (a very short job), from all of them (`scope` says which). Rates are per batch:
  producer.s_per_batch    time one producer (the loader's thread or one worker) spends
                          making a batch; producer.rate_per_s = producers / s_per_batch
  wait.per_step_s         the loop's wait for batches per training step (the pops paired
                          with each step by the probe); wait.share = per_step_s / cycle
  consumer.s_per_batch    the loop's time per batch when not waiting for one: what a batch
                          would cost if data were free, (cycle - wait per step) / batches per
                          step; consumer.rate_per_s its inverse
The cycle is the main program's steady mean when the loader feeds the main program; else the
figures fall back to the intervals' own span (time the pass ran).
"""

from collections import defaultdict
from typing import Callable, Optional, Sequence

from . import loghist

OSCILLATION_SWINGS = 3  # drained from full to empty at least this often: oscillating
TIMELINE_POINTS = 48  # the fill-over-time series is averaged down to at most this many points
MIN_POPS = 10  # fewer pops than this in the steady intervals: use every interval
_SUMS = ("pushes", "produce_s", "cpu_s", "cpu_n", "put_wait_s", "nbytes", "pops", "peeks",
         "empty_pops", "wait_s", "copy_s", "swings", "steps", "step_wait_s")
_COUNTERS = ("wait_hist", "pop_sizes", "occupancy", "programs")


# --- reader ---------------------------------------------------------------------------------------
def reader_figures(profile, window, main_cycle=None) -> Optional[dict]:
    """{"loaders": [figures per loader], "main": the loader id with most pops}, or None when
    no DataLoader pass started. `window`: (t0, t1) of the steady steps, or None;
    `main_cycle`: (main program id, its steady mean cycle in seconds), or None."""
    starts = [r for r in profile.reader if r.get("what") == "start"]
    if not starts:
        return None
    configs = {r.get("loader"): r.get("config") or {} for r in starts}
    passes = defaultdict(int)
    for r in starts:
        passes[r.get("loader")] += 1
    loaders = [loader_figures(loader, config, passes[loader], window, main_cycle,
                              [r for r in profile.reader if r.get("what") == "interval"
                               and r.get("loader") == loader])
               for loader, config in configs.items()]
    workers = profile.samples.get("workers") or ()
    for f in loaders:
        f["processes"] = process_figures([r for r in workers if r.get("loader") == f["loader"]])
    main = max(loaders, key=lambda f: f["batches"])
    errors = [r for r in profile.reader if r.get("what") == "error"]
    return {"loaders": loaders, "main": main["loader"],
            "errors": [{"loader": r.get("loader"), "detail": r.get("detail")} for r in errors]}


def main_loader(reader: Optional[dict]) -> Optional[dict]:
    """The figures of the main loader (most batches: the training loop's) in a summary's
    reader section, or None without one."""
    loaders = (reader or {}).get("loaders") or []
    main = (reader or {}).get("main")
    return next((f for f in loaders if f.get("loader") == main), loaders[0] if loaders else None)


def loader_figures(loader, config, passes, window, main_cycle, intervals) -> dict:
    picked, scope = _in_window(intervals, window)
    c = merge(picked)
    capacity = config.get("capacity")
    producers = max(int(config.get("num_workers") or 0), 1)
    pops = c["pops"]
    step = _per_step(c, main_cycle) if scope == "steady" else None  # same steps only
    return {"loader": loader, "name": config.get("name"), "config": config, "passes": passes,
            "scope": scope, "span_s": c["span_s"], "batches": pops, "pushes": c["pushes"],
            "peeks": c["peeks"], "empty_pops": c["empty_pops"],
            "empty_ratio": c["empty_pops"] / pops if pops else None,
            "wait": _wait(c, step), "occupancy": _occupancy(c, capacity),
            "timeline": timeline(intervals),
            "producer": _producer(c, producers), "workers": _workers(c),
            "consumer": _consumer(c, step), "swings": c["swings"],
            "oscillating": c["swings"] >= OSCILLATION_SWINGS,
            "copy_s_per_pop": c["copy_s"] / pops if pops else None,
            "shapes": shape_figures(c["shapes"]), "long_batches": long_batches(c["cost"])}


def _in_window(intervals, window):
    """The intervals that began inside the steady window when they hold MIN_POPS pops (the
    first interval of a pass also holds its start-up: the first batches, the compile), else
    those overlapping it, else all; the speed test's intervals never."""
    usable = [r for r in intervals if not r.get("speed_test")]
    if window is None:
        return usable, "all"
    t0, t1 = window
    overlapping = [r for r in usable if r["t"] > t0 and r["t0"] < t1]
    inside = [r for r in overlapping if r["t0"] >= t0]
    for picked in (inside, overlapping):
        if sum(r.get("pops") or 0 for r in picked) >= MIN_POPS:
            return picked, "steady"
    return usable, "all"


def merge(intervals) -> dict:
    """The interval records' counters added up (sums, histograms, per-worker rows, shapes,
    step costs) and their total span."""
    c = {key: 0 for key in _SUMS}
    c.update({key: defaultdict(int) for key in _COUNTERS})
    c["span_s"], c["wait_max_s"] = 0.0, 0.0
    c["workers"], c["cost"] = defaultdict(lambda: [0, 0.0, 0.0]), defaultdict(lambda: [0, 0.0])
    c["shapes"] = defaultdict(lambda: defaultdict(int))
    for r in intervals:
        c["span_s"] += max(r["t"] - r["t0"], 0.0)
        c["wait_max_s"] = max(c["wait_max_s"], r.get("wait_max_s") or 0.0)
        for key in _SUMS:
            c[key] += r.get(key) or 0
        for key in _COUNTERS:
            _add(c[key], r.get(key))
        _add_rows(c["workers"], r.get("workers"))
        _add_rows(c["cost"], r.get("cost"))
        for name, shapes in (r.get("shapes") or {}).items():
            _add(c["shapes"][name], shapes)
    return c


def _add(total, counter):
    for key, n in (counter or {}).items():
        total[int(key) if isinstance(key, str) and key.lstrip("-").isdigit() else key] += n


def _add_rows(total, rows):
    for key, row in (rows or {}).items():
        into = total[int(key)]
        for i, v in enumerate(row):
            into[i] += v


def process_figures(samples) -> Optional[dict]:
    """Memory and CPU of a loader's worker processes, from the workers probe's samples: for
    each worker of each pass, its USS growth since its first sample (taken as the pass
    started: copy-on-read shows here) and the cores it kept busy; then per worker index
    (the largest growth, the mean cores over passes) and in total. None without samples."""
    lives = defaultdict(list)
    for r in samples:
        lives[(r.get("pass"), r.get("worker"))].append(r)
    per_worker = defaultdict(lambda: {"uss_growth_bytes": 0, "uss_max_bytes": 0, "cores": []})
    for (_, worker), rows in lives.items():
        rows.sort(key=lambda r: r["t"])
        into = per_worker[worker]
        growth = max(r["uss_bytes"] for r in rows) - rows[0]["uss_bytes"]
        into["uss_growth_bytes"] = max(into["uss_growth_bytes"], growth)
        into["uss_max_bytes"] = max(into["uss_max_bytes"], max(r["uss_bytes"] for r in rows))
        span = rows[-1]["t"] - rows[0]["t"]
        if span > 0:
            into["cores"].append((rows[-1]["cpu_s"] - rows[0]["cpu_s"]) / span)
    if not per_worker:
        return None
    rows = [{"worker": w, "uss_growth_bytes": v["uss_growth_bytes"],
             "uss_max_bytes": v["uss_max_bytes"],
             "cores": sum(v["cores"]) / len(v["cores"]) if v["cores"] else None}
            for w, v in sorted(per_worker.items())]
    growths = [r["uss_growth_bytes"] for r in rows]
    cores = [r["cores"] for r in rows if r["cores"] is not None]
    return {"workers": len(rows), "uss_growth_bytes": {"mean": sum(growths) / len(growths),
                                                       "max": max(growths)},
            "uss_max_bytes": max(r["uss_max_bytes"] for r in rows),
            "cores": sum(cores) if cores else None, "per_worker": rows}


def _per_step(c, main_cycle) -> Optional[dict]:
    """Wait and batches per training step, and the cycle they belong to, when the loader's
    steps are the main program's (the cycle is then measured by the step records)."""
    programs, steps = c["programs"], c["steps"]
    if not main_cycle or not steps or not programs or not main_cycle[1]:
        return None
    if max(programs, key=programs.get) != main_cycle[0]:
        return None
    return {"wait_s": c["step_wait_s"] / steps, "batches": c["pops"] / steps,
            "cycle_s": main_cycle[1]}


def _wait(c, step) -> dict:
    pops, hist = c["pops"], c["wait_hist"]
    share = (step["wait_s"] / step["cycle_s"] if step else
             c["wait_s"] / c["span_s"] if c["span_s"] > 0 else None)
    top = c["wait_max_s"]
    p50, p90 = (loghist.quantile(hist, q) for q in (0.5, 0.9))
    return {"mean_s": c["wait_s"] / pops if pops else None,
            "p50_s": None if p50 is None else min(p50, top),
            "p90_s": None if p90 is None else min(p90, top), "max_s": top,
            "total_s": c["wait_s"],
            "per_step_s": step["wait_s"] if step else None, "share": share}


def _occupancy(c, capacity) -> Optional[dict]:
    """Queue fill from the periodic samples (time-weighted), else from the pops' sizes."""
    sizes, source = c["occupancy"], "samples"
    if not sizes:
        sizes, source = c["pop_sizes"], "pops"
    n = sum(sizes.values())
    if not n:
        return None
    full = sum(k for size, k in sizes.items() if capacity and size >= capacity)
    return {"mean": sum(size * k for size, k in sizes.items()) / n, "min": min(sizes),
            "max": max(sizes), "capacity": capacity, "full_share": full / n,
            "empty_share": sizes.get(0, 0) / n, "n": n, "source": source}


def timeline(intervals) -> list:
    """[[t, mean fill], ...] of every interval with queue samples (speed-test ones too),
    averaged down to at most TIMELINE_POINTS points: fill against capacity over time."""
    points = []
    for r in sorted(intervals, key=lambda r: r["t"]):
        sizes = r.get("occupancy") or {}
        n = sum(sizes.values())
        if n:
            points.append((r["t"], sum(int(s) * k for s, k in sizes.items()) / n))
    group = -(-len(points) // TIMELINE_POINTS) or 1
    return [[chunk[-1][0], sum(p[1] for p in chunk) / len(chunk)]
            for chunk in (points[i:i + group] for i in range(0, len(points), group))]


def _producer(c, producers) -> dict:
    per = c["produce_s"] / c["pushes"] if c["pushes"] else None
    cpu = c["cpu_s"] / c["cpu_n"] if c["cpu_n"] else None
    span = c["span_s"]
    return {"producers": producers, "s_per_batch": per, "cpu_s_per_batch": cpu,
            "cpu_share": cpu / per if cpu is not None and per else None,
            "rate_per_s": producers / per if per else None,
            "put_wait_share": c["put_wait_s"] / span if span > 0 else None}


def _workers(c) -> list:
    return [{"worker": w, "batches": n, "s_per_batch": s / n if n else None,
             "cpu_s_per_batch": cpu / n if n else None}
            for w, (n, s, cpu) in sorted(c["workers"].items())]


def _consumer(c, step) -> dict:
    pops, span = c["pops"], c["span_s"]
    if step:
        free = max(step["cycle_s"] - step["wait_s"], 0.0) / step["batches"]
        actual = step["batches"] / step["cycle_s"]
    else:
        free = (span - c["wait_s"]) / pops if pops and span > c["wait_s"] else None
        actual = pops / span if span > 0 else None
    return {"s_per_batch": free or None, "rate_per_s": 1 / free if free else None,
            "actual_per_s": actual,
            "batches_per_step": step["batches"] if step else None}


def shape_figures(shapes) -> dict:
    """Per feed variable: the most common shape (None where a dim varies) and, for each
    varying dim, min/p50/p95/max over the batches."""
    out = {}
    for name, counter in shapes.items():
        parsed = {tuple(int(d) for d in str(key).split("x") if d): n
                  for key, n in counter.items()}
        common = max(parsed, key=parsed.get)
        rank_varies = len({len(s) for s in parsed}) > 1
        varying = [] if rank_varies else [
            row for row in (_dim(parsed, d) for d in range(len(common))) if row]
        varied = {row["dim"] for row in varying}
        out[name] = {"batches": sum(parsed.values()), "rank_varies": rank_varies,
                     "shape": [None if d in varied else v for d, v in enumerate(common)],
                     "varying": varying}
    return out


def _dim(parsed, d) -> Optional[dict]:
    values = defaultdict(int)
    for shape, n in parsed.items():
        values[shape[d]] += n
    if len(values) < 2:
        return None
    return {"dim": d, "min": min(values), "p50": counter_quantile(values, 0.5),
            "p95": counter_quantile(values, 0.95), "max": max(values)}


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


def long_batches(cost) -> Optional[dict]:
    """Steps on batches larger than the p95 batch (in elements) against the others."""
    steps = sum(n for n, _ in cost.values())
    if len(cost) < 2 or not steps:
        return None
    p95 = counter_quantile({k: n for k, (n, _) in cost.items()}, 0.95)
    long = [row for k, row in cost.items() if k > p95]
    rest = [row for k, row in cost.items() if k <= p95]
    if not long:
        return None
    long_n, long_s = sum(n for n, _ in long), sum(s for _, s in long)
    rest_n, rest_s = sum(n for n, _ in rest), sum(s for _, s in rest)
    typical = rest_s / rest_n
    return {"steps": steps, "p95_elements": p95, "max_elements": max(cost),
            "long_steps": long_n, "long_compute_s": long_s / long_n,
            "typical_compute_s": typical,
            "slowdown": long_s / long_n / typical if typical > 0 else None,
            "long_share": long_s / (long_s + rest_s) if long_s + rest_s > 0 else None}


# --- speed test -----------------------------------------------------------------------------------
def ceiling_span(profile):
    """(t0, t1) of the speed test's ceiling window (t1 = inf while it never ended), or None."""
    switches = {e.get("phase"): e for e in profile.events_of("speed_test")}
    if "ceiling" not in switches:
        return None
    end = switches.get("done", {}).get("t", float("inf"))
    return switches["ceiling"]["t"], end


def speed_test_figures(profile, train: Sequence[dict], cycle: Callable,
                       has_loader: bool) -> Optional[dict]:
    """Baseline and ceiling throughput of --speed-test's windows (None without a speed test).

    A window holds the training steps that began after its switch event and before the
    next; its throughput is steps (samples) over the sum of their cycles (run + the gap
    before it). ratio = ceiling / baseline steps/s; data_share = 1 - baseline / ceiling."""
    window = profile.options.get("speed_test")
    switches = {e.get("phase"): e for e in profile.events_of("speed_test")}
    if window is None and not switches:
        return None
    bounds = [switches.get(p, {}).get("t") for p in ("baseline", "ceiling", "done")]
    ends = [t if t is not None else float("inf") for t in bounds[1:]]
    base = _window(train, bounds[0], ends[0], cycle)
    ceil = _window(train, bounds[1], ends[1], cycle)
    ratio = (ceil["steps_per_s"] / base["steps_per_s"]
             if base and ceil and base["steps_per_s"] else None)
    done, started = switches.get("done"), switches.get("ceiling")
    return {"window_steps": window, "has_loader": has_loader,
            "reached": next((p for p in ("done", "ceiling", "baseline") if p in switches), None),
            "complete": bool(done and started and window and
                             done.get("step", 0) - started.get("step", 0) >= window),
            "baseline": base, "ceiling": ceil, "ratio": ratio,
            "data_share": 1 - 1 / ratio if ratio else None}


def _window(train, t0, t1, cycle) -> Optional[dict]:
    if t0 is None:
        return None
    steps = [s for s in train if t0 <= s["t"] < t1]
    total_s = sum(cycle(s) for s in steps)
    if not steps or total_s <= 0:
        return None
    samples = sum(s.get("batch_size") or 0 for s in steps)
    return {"steps": len(steps), "cycle_s": total_s / len(steps),
            "steps_per_s": len(steps) / total_s,
            "samples_per_s": samples / total_s if samples else None}
