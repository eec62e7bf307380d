"""The dashboard's figures, computed from a LiveModel's window: plain dicts, no rendering.

Definitions (t on the profile clock; "main" is the non-startup program with most steps):
  throughput  steps of main ending in the last RATE_S seconds / that span (shorter at the
              start); samples/s likewise with the steps' batch sizes; history: steps per
              second of each complete second (the sparkline)
  breakdown   mean seconds per main step over the window: wait (for data: `read_s` inside
              exe.run, plus an iterable DataLoader's wait per step from the reader's
              intervals), feed, compute, fetch, other (the rest of the loop's time outside
              exe.run: Python, or data preparation in a synchronous loop)
  reader      the loader with most pops: time-weighted queue fill of the window's intervals
              against capacity, share of pops that found the queue empty, wait per pop
  memory      the newest memory step (pool allocated/reserved), the window's largest step
              peak, the all-time pool peak, the capacity (the pool's, else
              FLAGS_cpu_memory_limit_mb, else the machine's memory), RSS and GPU memory
              from the newest samples
  ETA         (total - steps done) / steps per second, where the total is --total-steps or
              --steps of `paddletune profile` (the header's options)
"""

import math
from collections import Counter

RATE_S = 10.0  # throughput over the last 10 s
STALLED_S = 10.0
HISTORY_SHOWN = 120  # seconds of throughput history  # no record for this long while the job runs: "no new records"
NOTABLE = ("error", "nan_inf", "step_limit", "overrides")
STEP_SUMS = ("n", "read_s", "feed_s", "compute_s", "fetch_s", "gap_s")  # LiveModel.sums


def state(model, now, live=True, **extra) -> dict:
    main = model.main_program
    out = {"title": _title(model.header), "path": model.path, "now_s": now,
           "window_s": model.window_s, "status": status(model, now, live),
           "throughput": throughput(model, main, now), "breakdown": breakdown(model, main),
           "reader": reader(model), "memory": memory(model), "cpu": cpu(model),
           "ops": ops(model, main), "parallel": parallel(model), "advice": model.advice,
           "notes": [e.get("message") or e.get("kind") for e in model.events
                     if e.get("kind") in NOTABLE][-2:]}
    out["progress"] = progress(model, main, out["throughput"])
    out.update(extra)
    return out


def _title(header) -> str:
    command = (header or {}).get("command") or {}
    argv = [str(a) for a in command.get("argv") or []]
    if command.get("module"):
        argv = ["-m"] + argv
    return " ".join(argv) if argv else "(waiting for the profile header)"


def status(model, now, live) -> dict:
    if model.header is None:
        return {"state": "waiting", "idle_s": None, "exit": None}
    exits = [e for e in model.events if e.get("kind") == "exit"]
    if exits:
        e = exits[-1]
        return {"state": "finished", "idle_s": None,
                "exit": {k: e.get(k) for k in ("status", "reason", "message")}}
    idle = max(now - model.last_t, 0.0)
    stalled = live and idle > STALLED_S
    return {"state": "stalled" if stalled else ("running" if live else "cut short"),
            "idle_s": idle, "exit": None}


def progress(model, main, tp) -> dict:
    options = (model.header or {}).get("options") or {}
    total, source = options.get("total_steps"), "--total-steps"
    if not total:
        total, source = options.get("steps"), "--steps"
    done = model.step_counts.get(main, 0)
    rate = (tp or {}).get("steps_per_s")
    eta = (total - done) / rate if total and rate and done < total else None
    return {"steps": done, "total": total or None, "total_from": source if total else None,
            "eta_s": 0.0 if total and done >= total else eta}


def throughput(model, main, now):
    if main is None:
        return None
    start = max(now - RATE_S, model.first_step_t.get(main, now))
    span = now - start
    recent = []
    for s in reversed(model.steps):  # the newest first: stop at the span's start
        if s["t"] + s["wall_s"] <= start:
            break
        if s.get("program") == main:
            recent.append(s)
    batches = [s.get("batch_size") for s in recent if s.get("batch_size")]
    hist = model.history.get(main) or {}
    seconds = range(max(min(hist), int(now) - HISTORY_SHOWN), int(now)) if hist else ()
    return {"steps_per_s": len(recent) / span if span > 0 else None,
            "samples_per_s": sum(batches) / span if batches and span > 0 else None,
            "batch_size": sorted(batches)[len(batches) // 2] if batches else None,
            "span_s": span, "history": [hist.get(k, 0) for k in seconds],
            "samples": model.sample_counts.get(main, 0)}


def breakdown(model, main):
    sums = model.sums.get(main)
    if main is None or not sums or not sums[0]:
        return None
    n = sums[0]
    mean = {k: max(v / n, 0.0) for k, v in zip(STEP_SUMS[1:], sums[1:])}
    loader_wait = _reader_wait_per_step(model)
    from_loader = min(loader_wait or 0.0, mean["gap_s"])
    wait = mean["read_s"] + from_loader
    parts = [("wait", wait), ("feed", mean["feed_s"]), ("compute", mean["compute_s"]),
             ("fetch", mean["fetch_s"]), ("other", mean["gap_s"] - from_loader)]
    source = "reader" if loader_wait is not None else ("run" if mean["read_s"] else None)
    return {"n": n, "cycle_s": sum(v for _, v in parts), "parts": parts, "wait_from": source}


def _reader_wait_per_step(model):
    rows = [r for r in model.reader if not r.get("speed_test")]
    n = sum(r.get("steps") or 0 for r in rows)
    return sum(r.get("step_wait_s") or 0.0 for r in rows) / n if n else None


def reader(model):
    starts = [r for r in model.reader_passes if r.get("what") == "start"]
    if not starts:
        return None
    pops = Counter()
    for r in model.reader:
        pops[r.get("loader")] += r.get("pops") or 0
    loader = pops.most_common(1)[0][0] if pops else starts[-1].get("loader")
    mine = [r for r in starts if r.get("loader") == loader]
    config = mine[-1].get("config") or {}
    ended = [r for r in model.reader_passes if r.get("loader") == loader
             and r.get("what") in ("end", "reset", "error") and r.get("pass") == len(mine)]
    out = {"name": config.get("name") or f"loader {loader}", "capacity": config.get("capacity"),
           "workers": config.get("num_workers") or 0, "passes": len(mine),
           "pass_ended": ended[-1].get("what") if ended else None}
    rows = [r for r in model.reader if r.get("loader") == loader and not r.get("speed_test")]
    out.update(_queue(rows, config.get("capacity")))
    return out


def _queue(rows, capacity):
    occ, pops = Counter(), sum(r.get("pops") or 0 for r in rows)
    for r in rows:
        occ.update({int(k): v for k, v in (r.get("occupancy") or {}).items()})
    n = sum(occ.values())
    fill = sum(k * v for k, v in occ.items()) / n if n else None
    span = sum(r["t"] - r.get("t0", r["t"]) for r in rows)
    pushes = sum(r.get("pushes") or 0 for r in rows)
    return {"pops": pops, "fill_mean": fill,
            "fill_share": fill / capacity if fill is not None and capacity else None,
            "empty_ratio": sum(r.get("empty_pops") or 0 for r in rows) / pops if pops else None,
            "wait_per_pop_s": sum(r.get("wait_s") or 0.0 for r in rows) / pops if pops else None,
            "batches_per_s": pops / span if span > 0 else None,
            "produce_per_batch_s": (sum(r.get("produce_s") or 0.0 for r in rows) / pushes
                                    if pushes else None),
            "fill_history": [_mean_fill(r, capacity) for r in rows][-60:]}


def _mean_fill(r, capacity):
    occ = {int(k): v for k, v in (r.get("occupancy") or {}).items()}
    n = sum(occ.values())
    return sum(k * v for k, v in occ.items()) / n / capacity if n and capacity else None


def memory(model):
    steps = list(model.memory)
    last = steps[-1] if steps else {}
    result = ((model.probes.get("memory") or {}).get("result")) or {}
    peak = next((m for m in reversed(model.memory_fixed) if m.get("what") == "peak"), {})
    ooms = [m for m in model.memory_fixed if m.get("what") == "oom"]
    capacity, source = _capacity(model, result, ooms)
    system = (model.latest.get("system") or [{}])[0]
    gpus = [{"gpu": r.get("gpu"), "used": r.get("mem_used_bytes"),
             "total": r.get("mem_total_bytes"), "util": r.get("util_percent"),
             "proc": r.get("proc_mem_bytes")} for r in model.latest.get("nvml") or []]
    return {"allocated": last.get("allocated", result.get("allocated")),
            "reserved": last.get("reserved", result.get("reserved")),
            "peak_allocated": peak.get("peak_allocated", result.get("peak_allocated")),
            "peak_reserved": peak.get("peak_reserved", result.get("peak_reserved")),
            "capacity": capacity, "capacity_from": source, "ooms": len(ooms),
            "pool_seen": bool(steps or peak or result),
            "rss": system.get("rss_bytes"), "available": system.get("mem_available_bytes"),
            "gpus": gpus, "gpu_reason": _gpu_reason(model)}


def _capacity(model, result, ooms):
    if result.get("capacity"):
        return result["capacity"], "pool"
    if ooms and ooms[-1].get("capacity"):
        return ooms[-1]["capacity"], "pool"
    env = (model.header or {}).get("env") or {}
    limit = (env.get("flags") or {}).get("FLAGS_cpu_memory_limit_mb")
    if isinstance(limit, (int, float)) and limit > 0:
        return int(limit * 2 ** 20), "FLAGS_cpu_memory_limit_mb"
    total = (env.get("memory") or {}).get("total_bytes")
    return (total, "machine") if total else (None, None)


def _gpu_reason(model):
    env = (model.header or {}).get("env") or {}
    gpu = env.get("gpu") or {}
    probe = model.probes.get("nvml") or {}
    return gpu.get("reason") or probe.get("reason") or "no NVML samples yet"


def cpu(model):
    rows = model.latest.get("system")
    env = (model.header or {}).get("env") or {}
    cores = (env.get("cpu") or {}).get("usable_cores") or (env.get("cpu") or {}).get(
        "logical_cores")
    if not rows:
        return {"sampled": False, "cores": cores}
    s = rows[0]
    workers = {r.get("worker") for r in model.latest.get("workers") or []}
    return {"sampled": True, "cores": cores, "process": s.get("cpu_percent"),
            "total": s.get("cpu_total_percent"), "per_core": s.get("per_core_percent") or [],
            "threads": s.get("threads"), "blas_threads": s.get("blas_threads"),
            "load1": s.get("load1"), "steal": s.get("steal_percent"),
            "workers": len(workers - {None})}


def ops(model, main):
    enabled = bool(((model.header or {}).get("options") or {}).get("ops"))
    n, by_type = model.op_steps.get(main, 0), model.op_sums.get(main) or {}
    total = sum(by_type.values())
    top = sorted(by_type.items(), key=lambda kv: -kv[1])
    return {"enabled": enabled, "steps": n,
            "top": [{"type": t, "per_step_s": s / n, "share": s / total}
                    for t, s in top if s > 0] if n and total > 0 else []}


def parallel(model):
    rows = [r for r in model.sched if r.get("what") == "step"]
    if not rows:
        return None
    last, wall = rows[-1], sum(r.get("wall_s") or 0.0 for r in rows)
    busy = sum(sum(r.get("busy_s") or []) for r in rows)
    threads = last.get("threads") or 1
    return {"places": last.get("places"), "threads": last.get("threads"),
            "reduce": last.get("reduce"), "steps": len(rows),
            "concurrency": _mean(r.get("concurrency") for r in rows),
            "ready_mean": _mean(r.get("ready_mean") for r in rows),
            "busy_share": busy / (threads * wall) if wall > 0 else None,
            "sched_share": sum(r.get("sched_s") or 0.0 for r in rows) / wall if wall > 0
            else None,
            "drops": sum(1 for r in model.sched if r.get("what") == "drop")}


def _mean(values):
    vals = [v for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    return sum(vals) / len(vals) if vals else None
