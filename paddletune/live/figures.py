"""The dashboard's figures, computed from a LiveModel's window: typed panels (state.py), no
rendering.

Definitions (t on the profile clock; "main" is the non-startup program with most steps; a
long job's later steps come as StepWindows, each n steps over [t0_s, t_s), and its later
samples as SampleWindows; "horizon" is now, or, once main's steps come as windows (after
its head_steps), the end of its newest window (or last step recorded in full), never more
than a window's length before now: LiveModel.horizon):
  throughput  steps of main in the last RATE_S seconds before the horizon / that span
              (shorter at the start): a step counts when it ends in the span, a window in
              proportion to its overlap with it; samples/s likewise with the batch sizes
              (a window's `samples`); the batch size is the median of those steps';
              history: steps per second of each complete second up to the horizon (the
              sparkline; a window's steps spread evenly over its seconds)
  progress    steps of main so far (recorded in full plus every window's n) of the total,
              --total-steps or --steps of `paddletune profile` (the header's options); ETA
              (total - steps done) / the throughput's steps per second
  breakdown   mean seconds per main step over the window's steps and windows (the windows'
              part sums): wait (for data: `read_s` inside exe.run, plus an iterable
              DataLoader's wait per step from the reader's intervals), feed, compute,
              fetch, other (the rest of the loop's time outside exe.run: Python, or data
              preparation in a synchronous loop)
  reader      the loader with most pops: time-weighted queue fill of the window's intervals
              against capacity, share of pops that found the queue empty, wait per pop
  memory      the newest memory step (pool allocated/reserved; None once steps come as
              windows, until the pool's final state), the largest step peak of the window's
              steps and windows, the all-time pool peak (the newest peak record, else the
              pool's state), the capacity (the pool's, else FLAGS_cpu_memory_limit_mb, else
              the machine's memory), RSS and GPU memory from the newest samples
  cpu, GPUs   the newest sample of each sampled entity; once samples come as windows, a
              SampleWindow's `last` values (per-core figures are not aggregated: none then)
  device      the steps as the GPU ran them (CUDA events, where the source times them): idle
              share and busy time per step, the report's figures (device_figures.py) of the
              steps between the latest two device_time totals (written at 1, 2, 5, 10, 20,
              50, ... timed steps: the latter half or more of them, past the warm-up; and
              after every 30 s of device time: a long job's last 30 s or so),
              every step of the first total alone, and the summary's once it is in; on a
              machine with a GPU but no totals, N/A and why; none on a machine without
  ops         op time per main step over the window's ops records and windows' op totals
  parallel    the ParallelExecutor's step records and windows' scheduler figures
  status      (state.py, Status) "stalled": no record for STALLED_S seconds (plus a
              window's length once windowed); "no step": records, but no step of main
              for that long; "reader stalled": no step, and the newest reader interval of
              the loader whose pass is open (the latest started) pushed nothing and found
              its queue empty at every sample; "died": the header's pid runs no more on
              this machine (the loop's `writer`) and no exit record came
"""

from collections import Counter
from dataclasses import replace
from typing import Optional

from ..profile import records as r
from ..profile.codec import event_kind
from ..profile.device_figures import between, latest_start, main_place
from ..profile.reader_figures import ceiling_span
from .state import (WHOLE_RUN, CpuNow, DeviceNow, GpuNow, LiveAdvice, LiveState, MemoryNow,
                    OpLine, OpsNow, ParallelNow, Progress, ReaderNow, Status, StepTime,
                    Throughput)
from .tally import overlap_share

RATE_S = 10.0  # throughput over the last 10 s
STALLED_S = 10.0  # no record for this long while the job runs: "no new records"
HISTORY_SHOWN = 120  # seconds of throughput history
NOTABLE = ("error", "nan_inf", "step_limit", "overrides")
MEMORY_LIMIT_FLAG = "FLAGS_cpu_memory_limit_mb"
NOT_TIMED = {"fluid": "embedded runtime: not timed"}  # sources that never write device_time


def state(model, now, live=True, **extra) -> LiveState:
    main = model.main_program
    tp = throughput(model, main, now)
    whole = model.summary  # the job's summary: it finished, the whole run is known
    return LiveState(
        title=_title(model.header), path=model.path, now_s=now, window_s=model.window_s,
        status=status(model, now, live, extra.get("writer")),
        progress=progress(model, main, tp),
        memory=memory(model), cpu=cpu(model), ops=ops(model, main),
        throughput=whole_run_throughput(tp, whole),
        breakdown=_whole_or_window(whole_run_breakdown(model, whole), breakdown(model, main)),
        device=device(model),
        reader=reader(model), parallel=parallel(model),
        advice=whole_run_verdict(model.advice, whole, now), notes=tuple(notes(model)[-2:]),
        **extra)


# --- a finished job: the summary's figures, the report's -----------------------------------------
def _whole_or_window(whole: Optional[StepTime], window: Optional[StepTime]):
    """The whole run's breakdown while the window holds steps (else none: N/A, as before)."""
    return whole if whole is not None and window is not None else window


def whole_run_throughput(tp: Optional[Throughput], whole) -> Optional[Throughput]:
    """Once the job's summary is in, the rate shown is the summary's steady throughput (the
    report's and advise's: figures.steps.steps_per_s), labelled WHOLE_RUN; the history
    stays."""
    run = whole.throughput if whole is not None else None
    if tp is None or run is None or not run.steps_per_s:
        return tp
    return replace(tp, steps_per_s=run.steps_per_s, samples_per_s=run.samples_per_s,
                   batch_size=run.batch_size, scope=WHOLE_RUN)


def whole_run_breakdown(model, whole) -> Optional[StepTime]:
    """The summary's steady breakdown as the dashboard's parts (an iterable DataLoader's
    wait split from the loop's other time as in `breakdown`), its step time the report's;
    None before the summary."""
    b = whole.breakdown_s if whole is not None else None
    run = whole.throughput if whole is not None else None
    if b is None or run is None or not run.step_time_s:
        return None
    loader_wait = _reader_wait_per_step(model)
    from_loader = min(loader_wait or 0.0, b.outside_s)
    parts = (("wait", b.read_s + from_loader), ("feed", b.feed_s), ("compute", b.compute_s),
             ("fetch", b.fetch_s), ("other", b.outside_s - from_loader))
    source = "reader" if loader_wait is not None else ("run" if b.read_s else None)
    return StepTime(whole.steady_steps, run.step_time_s, parts, source, WHOLE_RUN,
                    b.compute_wait_s, b.compute_queued_s)


def whole_run_verdict(advice: Optional[LiveAdvice], whole, now) -> Optional[LiveAdvice]:
    """The summary's verdict (the report's) in place of the window's, once it is in."""
    if whole is None or whole.verdict is None:
        return advice
    if advice is None:
        return LiveAdvice(now, whole.verdict, verdict_scope=WHOLE_RUN)
    if advice.error:
        return advice
    return replace(advice, verdict=whole.verdict, verdict_scope=WHOLE_RUN)


def _title(header: Optional[r.Header]) -> str:
    if header is None or not header.command.argv:
        return "(waiting for the profile header)"
    argv = [str(a) for a in header.command.argv]
    return " ".join(["-m"] + argv if header.command.module else argv)


def notes(model) -> list:
    return [e.message or event_kind(e) for e in model.events if event_kind(e) in NOTABLE]


def status(model, now, live, writer: Optional[str] = None) -> Status:
    """The job's state at `now`; `writer`: whether the job's process is alive, gone or
    unknown (LiveLoop.writer_state)."""
    if model.header is None:
        return Status("waiting")
    if model.exit is not None:
        return Status("finished", exit=model.exit)
    idle = max(now - model.last_t, 0.0)
    if writer == "gone":
        return Status("died", idle, pid=model.header.pid)
    if not live:
        return Status("cut short", idle)
    late = STALLED_S + model.lag_s(now)
    if idle > late:
        return Status("stalled", idle)
    return _quiet_loop(model, now, late) or Status("running", idle)


def _quiet_loop(model, now, late) -> Optional[Status]:
    """"evaluating", "reader stalled" or "no step" when the loop has run no step for `late`
    seconds (since its last step, else since the open pass began), None otherwise."""
    idle = max(now - model.last_t, 0.0)
    main, open_pass = model.main_program, model.open_pass()
    since = model.last_step_end.get(main) if main is not None else None
    if since is None and open_pass is not None:
        since = open_pass.t_s
    if since is None or now - since <= late:
        return None
    evaluation = model.evaluating(since) if main is not None else None
    if evaluation is not None:
        return Status("evaluating", idle, quiet_s=now - evaluation.t_s,
                      loader=model.loader_name(evaluation.loader))
    if open_pass is not None and _starved(model.last_interval.get(open_pass.loader), since):
        return Status("reader stalled", idle, quiet_s=now - since,
                      loader=model.loader_name(open_pass.loader))
    return Status("no step", idle, quiet_s=now - since)


def _starved(interval: Optional[r.ReaderInterval], since: float) -> bool:
    """The interval (after the last step) saw nothing pushed and an empty queue at every
    sample: the loop waits on a producer that makes nothing."""
    return (interval is not None and interval.t_s > since and interval.pushes == 0
            and bool(interval.occupancy) and set(interval.occupancy) == {0})


def progress(model, main, tp: Optional[Throughput]) -> Progress:
    options = model.header.options if model.header is not None else r.Options()
    total, source = options.total_steps, "--total-steps"
    if not total:
        total, source = options.steps, "--steps"
    done = model.step_counts[main] if main is not None else 0
    rate = tp.steps_per_s if tp is not None else None
    eta = (total - done) / rate if total and rate and done < total else None
    return Progress(done, total or None, source if total else None,
                    0.0 if total and done >= total else eta)


# --- throughput ----------------------------------------------------------------------------------
class _Recent:
    """Steps (fractions of windows) of one program in a span, and their batch sizes."""

    def __init__(self):
        self.steps, self.samples, self.batches = 0.0, 0.0, Counter()

    def add_step(self, s: r.Step):
        self.steps += 1
        if s.batch_size:
            self.samples += s.sample_count
            self.batches[s.batch_size] += 1

    def add_window(self, w: r.StepWindow, share: float):
        self.steps += w.n * share
        self.samples += w.samples * share
        for size, n in w.batch_sizes.items():
            self.batches[size] += n * share

    def median_batch(self) -> Optional[int]:
        half, seen = sum(self.batches.values()) / 2, 0.0
        for size in sorted(self.batches):
            seen += self.batches[size]
            if seen > half:
                return size
        return None


def throughput(model, main, now) -> Optional[Throughput]:
    if main is None:
        return None
    horizon = model.horizon(main, now)
    start = max(horizon - RATE_S, model.first_step_t.get(main, horizon))
    span = horizon - start
    recent = _Recent()
    for s in reversed(model.steps):  # the newest first: stop at the span's start
        if s.end_s <= start:
            break
        if s.program == main and s.end_s <= horizon:
            recent.add_step(s)
    for w in model.windows:
        if w.program == main:
            recent.add_window(w, overlap_share(w.t0_s, w.t_s, start, horizon))
    hist = model.history[main]
    seconds = range(max(min(hist), int(horizon) - HISTORY_SHOWN), int(horizon)) if hist else ()
    return Throughput(
        steps_per_s=recent.steps / span if span > 0 else None,
        samples_per_s=recent.samples / span if recent.batches and span > 0 else None,
        batch_size=recent.median_batch(), span_s=span,
        history=tuple(hist[k] for k in seconds), samples=model.sample_counts[main])


# --- step time -----------------------------------------------------------------------------------
def breakdown(model, main) -> Optional[StepTime]:
    sums = model.sums[main] if main is not None else None
    if sums is None or not sums.n:
        return None
    gap = sums.mean("gap_s")
    loader_wait = _reader_wait_per_step(model)
    from_loader = min(loader_wait or 0.0, gap)
    read = sums.mean("read_s")
    parts = (("wait", read + from_loader), ("feed", sums.mean("feed_s")),
             ("compute", sums.mean("compute_s")), ("fetch", sums.mean("fetch_s")),
             ("other", gap - from_loader))
    source = "reader" if loader_wait is not None else ("run" if read else None)
    return StepTime(sums.n, sum(v for _, v in parts), parts, source,
                    off_cpu_s=sums.off_cpu.mean(), queued_s=sums.queued.mean())


def _reader_wait_per_step(model) -> Optional[float]:
    rows = [iv for iv in model.reader if not iv.speed_test]
    n = sum(iv.steps for iv in rows)
    return sum(iv.step_wait_s for iv in rows) / n if n else None


# --- the steps on the device --------------------------------------------------------------------
def device(model) -> Optional[DeviceNow]:
    """The summary's device figures once it is in, else those of the latest totals; N/A
    on a machine with a GPU and no totals; None (no line) on one without."""
    whole = model.summary.device if model.summary is not None else None
    if whole is not None:
        return DeviceNow(whole, scope=WHOLE_RUN)
    totals = main_place(model.events_of("device_time"))
    if totals:
        return _latest_device(totals, ceiling_span(model))
    return _no_device(model)


def _latest_device(totals, ceiling) -> DeviceNow:
    """The steps between the latest two totals (or all of the latest's), counted from 1."""
    last = totals[-1]
    start = latest_start(totals, ceiling)
    before = start.last_step if start is not None else last.last_step - last.steps
    return DeviceNow(between(start, last), before + 2, last.last_step + 1,
                     "latest" if start is not None else "first")


def _no_device(model) -> Optional[DeviceNow]:
    header = model.header
    if header is None or not (header.env.gpu.available or header.env.cupy.available):
        return None
    reason = NOT_TIMED.get(header.source.framework)
    if reason is None:
        reason = "no CUDA-event totals" if model.finished else "no CUDA-event total yet"
    return DeviceNow(reason=reason)


# --- the reader ----------------------------------------------------------------------------------
SAME_TIME_S = 1.0  # loaders whose newest intervals with steps ended this close: read together


def reader(model) -> Optional[ReaderNow]:
    starts = [p for p in model.reader_passes if isinstance(p, r.ReaderStart)]
    if not starts:
        return None
    pops = Counter()
    for iv in model.reader:
        pops[iv.loader] += iv.pops
    loader = _training_loader(model, pops)
    if loader is None:
        loader = pops.most_common(1)[0][0] if pops else starts[-1].loader
    mine = [p for p in starts if p.loader == loader]
    config = mine[-1].config
    ended = [p for p in model.reader_passes if isinstance(p, r.ReaderEnd)
             and p.loader == loader and p.pass_no == len(mine)]
    rows = [iv for iv in model.reader if iv.loader == loader and not iv.speed_test]
    return ReaderNow(name=config.name or f"loader {loader}", capacity=config.capacity,
                     workers=config.num_workers, passes=len(mine), made_in=config.made_in,
                     pass_ended=ended[-1].what if ended else None,
                     **_queue(rows, config.capacity))


def _training_loader(model, pops: Counter) -> Optional[int]:
    """The loader the training steps take their batches from now: of those whose newest
    interval had a step in it and ended within SAME_TIME_S of the newest such (loaders
    read together each step flush together), the one with the most batches. While an epoch
    reads another dataset than the last, that is its loader, not the one with the most
    batches over the run. None before the first such interval."""
    fed = [iv for iv in model.last_interval.values() if iv.steps and not iv.speed_test]
    if not fed:
        return None
    newest = max(iv.t_s for iv in fed)
    now = [iv.loader for iv in fed if iv.t_s >= newest - SAME_TIME_S]
    return max(now, key=lambda loader: pops[loader])


def _queue(rows, capacity) -> dict:
    occ, pops = Counter(), sum(iv.pops for iv in rows)
    for iv in rows:
        occ.update(iv.occupancy)
    n = sum(occ.values())
    fill = sum(k * v for k, v in occ.items()) / n if n else None
    span = sum(iv.t_s - iv.t0_s for iv in rows)
    pushes = sum(iv.pushes for iv in rows)
    return {"pops": pops, "fill_mean": fill,
            "fill_share": fill / capacity if fill is not None and capacity else None,
            "empty_ratio": sum(iv.empty_pops for iv in rows) / pops if pops else None,
            "wait_per_pop_s": sum(iv.wait_s for iv in rows) / pops if pops else None,
            "batches_per_s": pops / span if span > 0 else None,
            "produce_per_batch_s": (sum(iv.produce_s for iv in rows) / pushes
                                    if pushes else None),
            "fill_history": tuple(_mean_fill(iv, capacity) for iv in rows)[-60:]}


def _mean_fill(iv: r.ReaderInterval, capacity) -> Optional[float]:
    n = sum(iv.occupancy.values())
    fill = sum(k * v for k, v in iv.occupancy.items())
    return fill / n / capacity if n and capacity else None


# --- memory and CPU ------------------------------------------------------------------------------
def _newest(records, cls):
    found = [x for x in records if isinstance(x, cls)]
    return found[-1] if found else None


def memory(model) -> MemoryNow:
    with_memory = [w for w in model.windows if w.memory is not None]
    folded = [w.memory for w in with_memory]
    last = model.memory[-1] if model.memory else None  # the newest memory step in the window
    if last is not None and with_memory and with_memory[-1].t_s > last.t_s:
        last = None  # steps come as windows now: the head's figures are stale
    pool = _newest(model.memory_fixed, r.MemoryPool)
    peak = _newest(model.memory_fixed, r.MemoryPeak)
    ooms = [m for m in model.memory_fixed if isinstance(m, r.MemoryOom)]
    step_peaks = [m.step_peak_bytes for m in model.memory] + [m.step_peak_bytes for m in folded]
    now = last or pool  # allocated and reserved: the newest step's, else the pool's at the end
    high = peak or pool  # the all-time peak
    capacity, source = _capacity(model.header, pool, ooms)
    system = model.current("system")
    return MemoryNow(
        allocated=now.allocated_bytes if now else None,
        reserved=now.reserved_bytes if now else None,
        peak_allocated=high.peak_allocated_bytes if high else None,
        peak_reserved=high.peak_reserved_bytes if high else None,
        step_peak=max(step_peaks) if step_peaks else None, capacity=capacity,
        capacity_from=source, ooms=len(ooms),
        pool_seen=bool(model.memory or peak or pool or folded),
        rss=system[-1].rss_bytes if system else None,
        available=system[-1].mem_available_bytes if system else None,
        gpus=tuple(GpuNow(g.gpu, g.mem_used_bytes, g.mem_total_bytes, g.util_percent,
                          g.proc_mem_bytes) for g in model.current("nvml")),
        gpu_reason=_gpu_reason(model))


def _capacity(header: Optional[r.Header], pool, ooms):
    if pool is not None and pool.capacity_bytes:
        return pool.capacity_bytes, "pool"
    if ooms and ooms[-1].capacity_bytes:
        return ooms[-1].capacity_bytes, "pool"
    if header is None:
        return None, None
    flags = header.env.flags
    limit = flags[MEMORY_LIMIT_FLAG] if flags and MEMORY_LIMIT_FLAG in flags else None
    if isinstance(limit, (int, float)) and not isinstance(limit, bool) and limit > 0:
        return int(limit * 2 ** 20), MEMORY_LIMIT_FLAG
    total = header.env.memory.total_bytes
    return (total, "machine") if total else (None, None)


def _gpu_reason(model) -> str:
    gpu_reason = model.header.env.gpu.reason if model.header is not None else None
    probe = model.probes["nvml"].reason if "nvml" in model.probes else None
    return gpu_reason or probe or "no NVML samples yet"


def cpu(model) -> CpuNow:
    cores = model.header.env.cpu.cores if model.header is not None else None
    rows = model.current("system")
    if not rows:
        return CpuNow(False, cores)
    s = rows[-1]
    return CpuNow(True, cores, process=s.cpu_percent, total=s.cpu_total_percent,
                  per_core=tuple(p for p in s.per_core_percent or () if p is not None),
                  threads=s.threads, blas_threads=s.blas_threads, load1=s.load1,
                  steal=s.steal_percent, workers=len(model.current("workers")))


# --- ops and the ParallelExecutor ----------------------------------------------------------------
def ops(model, main) -> OpsNow:
    enabled = model.header is not None and model.header.options.ops
    sums = model.op_sums[main] if main is not None else None
    if sums is None or not sums.steps:
        return OpsNow(enabled)
    n, total = sums.steps, sum(sums.by_type.values())
    top = sorted(sums.by_type.items(), key=lambda kv: -kv[1])
    return OpsNow(enabled, n, tuple(OpLine(t, s / n, s / total) for t, s in top if s > 0)
                  if total > 0 else ())


def parallel(model) -> Optional[ParallelNow]:
    rows = [s for s in model.sched if isinstance(s, r.SchedStep)]
    folded = [w for w in model.windows if w.sched is not None]
    if not rows and not folded:
        return None
    newest_window = folded[-1] if folded else None
    last = (newest_window.sched if newest_window is not None
            and (not rows or newest_window.t_s > rows[-1].t_s) else rows[-1])
    n = len(rows) + sum(w.sched.n for w in folded)
    wall = sum(s.wall_s for s in rows) + sum(w.sched.wall_s for w in folded)
    busy = sum(sum(s.busy_s) for s in rows) + sum(sum(w.sched.busy_s) for w in folded)
    sched_s = sum(s.sched_s for s in rows) + sum(w.sched.sched_s for w in folded)
    concurrency = (sum(s.concurrency for s in rows)
                   + sum(w.sched.concurrency_sum for w in folded))
    ready = sum(s.ready_mean for s in rows) + sum(w.sched.ready_mean_sum for w in folded)
    return ParallelNow(
        places=last.places, threads=last.threads, reduce=last.reduce, steps=n,
        concurrency=concurrency / n if n else None, ready_mean=ready / n if n else None,
        busy_share=busy / ((last.threads or 1) * wall) if wall > 0 else None,
        sched_share=sched_s / wall if wall > 0 else None,
        drops=sum(1 for s in model.sched if isinstance(s, r.SchedDrop)))
