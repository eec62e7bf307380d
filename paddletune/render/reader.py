"""The report's Reader section (each DataLoader's queue, waits, producer vs consumer) and its
Speed test section (the no-data ceiling against the actual throughput), from the summary's
typed reader and speed-test figures."""

from typing import Optional

from rich.console import Group
from rich.text import Text

from ..profile.figures import (LoaderFigures, Occupancy, ProcessFigures, ProducerAlone,
                               ShapeFigures, SpeedTestFigures, Throughput,
                               WindowRate)
from .fmt import NA, add_cells, add_rows, clean, finite, label_table, ms, nbytes, num, pct
from .fmt import plain_table

SPARK = "▁▂▃▄▅▆▇█"  # queue fill from empty to capacity
NOT_BOTTLENECK = 1.1  # ceiling / actual at or below this: the reader is not the bottleneck
WHOLE_RUN_DIFFERS = 0.10  # baseline window vs whole run: shown both beyond this difference


def reader_sections(profile, s) -> list:
    """The Reader section of each loader that delivered batches, then the Speed test's."""
    loaders = s.reader.loaders if s.reader is not None else ()
    sections = [_loader(f) for f in loaders if f.batches]
    how = ("FLAGS_reader_queue_speed_test_mode" if profile.source.framework == "fluid"
           else "the DataLoader's last batch replayed")
    return [x for x in sections + [_speed_test(s.speed_test, how, s.throughput)]
            if x is not None]


# --- reader ---------------------------------------------------------------------------------------
def _loader(f: LoaderFigures) -> Group:
    table = label_table(_title(f), "queue fill", _fill(f.occupancy))
    rows = [("fill over time", _spark(f.timeline, f.config.capacity)),
            ("empty pops", _empty(f)), ("wait per pop", _wait(f)),
            ("hand-over", _handover(f)),
            ("producer", _producer(f)), ("consumer", _consumer(f)),
            ("balance", _balance(f)), ("pass start", _pass_start(f)),
            ("oscillation", _oscillation(f)),
            ("worker memory", _memory(f.processes)),
            ("worker CPU", _worker_cpu(f.processes))]
    rows += [(f"shape {clean(name)}", _shape(v)) for name, v in f.shapes.items()]
    add_rows(table, rows)
    workers = _workers(f)
    return Group(table, workers) if workers is not None else table


def _title(f: LoaderFigures) -> str:
    c = f.config
    workers = c.num_workers or 0
    started = (f" ({c.start_method})" if workers and c.start_method
               and c.start_method != "fork" else "")  # (spawn, forkserver: said)
    producer = (f"{workers} worker process{'es' * (workers > 1)}{started}" if workers
                else "made in the training loop (num_workers=0)" if c.made_in == "loop"
                else "thread producer")
    capacity = c.capacity if c.capacity is not None else NA
    parts = [producer, f"capacity {capacity}"]
    if c.prefetch_factor and c.producer:
        parts.append(f"prefetch_factor {c.prefetch_factor}")
    if c.use_double_buffer is not None or not c.producer:
        parts.append(f"double buffer {'on' if c.use_double_buffer else 'off'}")
    parts.append(f"{c.dataset}-style dataset" if c.dataset
                 else "iterable" if c.iterable else "non-iterable")
    scope = "steady steps" if f.scope == "steady" else "whole run"
    role = " · evaluation (its passes ran between training steps)" if f.evaluation else ""
    return (f"Reader: {clean(f.name or 'DataLoader')}{role} · {' · '.join(parts)} · "
            f"{f.batches:,} batches ({scope})")


def _fill(o: Optional[Occupancy]) -> str:
    if o is None:
        return f"{NA} (no queue samples)"
    of = f" of {o.capacity} ({o.mean / o.capacity:.0%})" if o.capacity else ""
    return (f"mean {o.mean:.1f}{of} · min {o.min} · max {o.max} · full "
            f"{pct(o.full_share, 0)} · empty {pct(o.empty_share, 0)} of the time")


def _spark(points, capacity) -> Optional[str]:
    if len(points) < 2 or not capacity:
        return None
    cells = [SPARK[min(int(fill / capacity * len(SPARK)), len(SPARK) - 1)] for _, fill in points]
    return "".join(cells) + f"  ({SPARK[0]} empty … {SPARK[-1]} full)"


def _empty(f: LoaderFigures) -> str:
    if f.empty_ratio is None:
        return ""
    return (f"{pct(f.empty_ratio, 0)} of {f.batches:,} pops found the queue empty (the loop "
            f"waited for the producer)")


def _wait(f: LoaderFigures) -> str:
    w = f.wait
    if w.mean_s is None:
        return ""
    of = "the loop's time"
    if f.cycle_s is not None and f.steps_share is not None:
        of = (f"the time of the steps it fed ({ms(f.cycle_s)} ms each, "
              f"{pct(f.steps_share, 0)} of the steady steps' time)")
    return (f"mean {ms(w.mean_s)} ms · p50 {ms(w.p50_s)} · p90 {ms(w.p90_s)} "
            f"· max {ms(w.max_s)} · {pct(w.share)} of {of}")


def _handover(f: LoaderFigures) -> Optional[str]:
    """Of each wait, the time taking the batch from a worker once it was made (measured)."""
    h, mean = f.handover_s_per_pop, f.wait.mean_s
    if not h:
        return None
    of = f", {h / mean:.0%} of the mean wait" if mean else ""
    return (f"{ms(h)} ms per batch taking it from a worker process once made (its "
            f"tensors' storage{of}; the percentiles above leave it out)")


def _producer(f: LoaderFigures) -> str:
    p = f.producer
    if p.s_per_batch is None:
        return ""
    n = p.producers
    who = f"{n} workers" if n > 1 else "1 worker" if f.config.num_workers else "1 thread"
    cpu = f"; CPU {ms(p.cpu_s_per_batch)} ms" if finite(p.cpu_s_per_batch) else ""
    return (f"{ms(p.s_per_batch)} ms/batch ({who}{cpu}) → at most {num(p.rate_per_s)} "
            f"batches/s; blocked on a full queue {pct(p.put_wait_share, 0)} of the time")


def _consumer(f: LoaderFigures) -> str:
    c = f.consumer
    if c.s_per_batch is None:
        return ""
    return (f"{ms(c.s_per_batch)} ms/batch when not waiting → {num(c.rate_per_s)} "
            f"batches/s; took {num(c.actual_per_s)} batches/s")


def _balance(f: LoaderFigures) -> str:
    ratio = f.producer_ratio
    if ratio is None:
        return ""
    if f.config.made_in == "loop":  # (no queue: each batch is made while the step waits)
        need = "one worker process" if ratio >= 1 else "more than one worker process"
        own, beside = (("the evaluation's own time per batch", "the evaluation")
                       if f.evaluation else ("the step's own time", "the step"))
        return (f"made in the loop, every batch is waited for; one takes {1 / ratio:.2f}x "
                f"{own}: {need} beside {beside} would keep up")
    if ratio < 1:
        return (f"the producer is {1 / ratio:.2f}x slower than the consumer: the queue "
                f"cannot stay filled")
    return f"the producer keeps up ({ratio:.2f}x the consumer's rate)"



def _pass_start(f: LoaderFigures) -> str:
    """The loop's iter() before each pass's first batch, where the workers start (or wake);
    with the first batch's wait beyond the others' where they start inside it (spawn)."""
    p = f.pass_starts
    if p is None or not f.config.num_workers:
        return ""
    first = f"{ms(p.first_s)} ms on the first pass" if p.first_s is not None else ""
    later = (f"{ms(p.later_s)} ms on each of {p.later} later one{'s' * (p.later > 1)}"
             if p.later_s is not None else "")
    how = ("its persistent workers woken" if f.config.persistent_workers
           else "its workers started")
    took = ', '.join(x for x in (first, later) if x)
    if p.in_first_batch:
        return (f"iter() and the first batch's wait beyond the others' took {took} ({how}: "
                f"{f.config.start_method or 'spawn'} workers start in the first next())")
    return f"iter() took {took} ({how})"


def _oscillation(f: LoaderFigures) -> str:
    if not f.oscillating:
        return ""
    return (f"the queue swung {f.swings} times from full ({f.config.capacity}) to empty: the "
            f"producer runs in bursts")


def _shape(v: ShapeFigures) -> str:
    if v.rank_varies:
        return "the number of dims varies between batches"
    dims = ", ".join("*" if d is None else str(d) for d in v.shape)
    varying = [f"dim {r.dim} varies: min {r.min} · p50 {r.p50} · p95 {r.p95} · max {r.max}"
               for r in v.varying]
    return "; ".join([f"[{dims}]"] + varying)


def _memory(p: Optional[ProcessFigures]) -> str:
    if p is None:
        return ""
    growth = p.uss_growth_bytes
    return (f"private memory (USS) grew {nbytes(growth.mean)} per worker during a pass "
            f"(max {nbytes(growth.max)}; peak {nbytes(p.uss_max_bytes)})")


def _worker_cpu(p: Optional[ProcessFigures]) -> str:
    if p is None or not finite(p.cores):
        return ""
    return f"{p.cores:.2f} cores busy in {p.workers} worker process(es)"


def _workers(f: LoaderFigures) -> Optional[object]:
    if len(f.workers) < 2:
        return None
    memory = {w.worker: w for w in (f.processes.per_worker if f.processes else ())}
    extra = ("USS growth", "cores") if memory else ()
    table = plain_table("worker", "batches", "ms/batch", "CPU ms/batch", *extra)
    for r in f.workers:
        cells = [str(r.worker), num(r.batches), ms(r.s_per_batch), ms(r.cpu_s_per_batch)]
        if memory:
            m = memory.get(r.worker)
            cores = m.cores if m is not None else None
            cells += [nbytes(m.uss_growth_bytes if m is not None else None),
                      f"{cores:.2f}" if finite(cores) else NA]
        add_cells(table, cells)
    return table


# --- speed test -----------------------------------------------------------------------------------
def _speed_test(st: Optional[SpeedTestFigures],
                how: str = "FLAGS_reader_queue_speed_test_mode",
                whole: Optional[Throughput] = None) -> Optional[object]:
    if st is None:
        return None
    if not st.has_loader:
        return Text("Speed test: nothing measured. This job has no DataLoader/PyReader, and "
                    "--speed-test only changes how a DataLoader/PyReader queue is read "
                    "(FLAGS_reader_queue_speed_test_mode); feed through "
                    "fluid.io.DataLoader.from_generator to measure the no-data ceiling.",
                    style="bold yellow")
    base, ceil = st.baseline, st.ceiling
    if base is None or ceil is None:
        got = f"{base.steps} baseline steps measured" if base else "no baseline steps"
        return Text(f"Speed test: incomplete: the job ended before the ceiling window "
                    f"({got}; each window is {st.window_steps} steps).",
                    style="bold yellow")
    table = label_table(f"Speed test ({how})", "actual",
                        _rate(base, "baseline"))
    rows = [("ceiling", _rate(ceil, "no data: the same batch re-read")),
            ("data cost", _data_cost(st))]
    if not st.complete:
        rows.append(("window", f"incomplete: the job ended during the ceiling window "
                               f"({ceil.steps} of {st.window_steps} steps)"))
    rows += [("alone", _alone(a, len(st.producers_alone) > 1)) for a in st.producers_alone]
    if st.one_thread is not None:
        rows.append(("1 thread", _rate(st.one_thread, "no data, 1 math thread")))
    rows.append(("training", _replayed(ceil, st.one_thread)))
    rows += _whole_run(base, whole)
    add_rows(table, rows)
    return table


def _replayed(ceil: WindowRate, one_thread: Optional[WindowRate]) -> str:
    """What the no-data windows did to the training: each of their steps trained on a
    re-read batch (helper-40's sweep: 83 optimizer steps where the script alone took 63, and
    another final loss)."""
    steps = ceil.steps + (one_thread.steps if one_thread is not None else 0)
    windows = "the no-data windows'" if one_thread is not None else "the ceiling's"
    return (f"{windows} {steps} steps trained on re-read batches, not new ones (a loop to "
            f"the end of its data takes {steps} steps more than without --speed-test): the "
            f"model this run leaves is not the script's usual result")


def _whole_run(base: WindowRate, whole: Optional[Throughput]) -> list:
    """The report's throughput beside the baseline window's, where they differ by more
    than WHOLE_RUN_DIFFERS: the speed test compares its two windows, not the whole run."""
    rate = whole.steps_per_s if whole is not None else None
    if not finite(rate) or not base.steps_per_s or \
            abs(base.steps_per_s / rate - 1.0) <= WHOLE_RUN_DIFFERS:
        return []
    steady = f"{whole.steps} steady steps" if whole.steps else "steady steps"
    return [("whole run", f"{rate:,.1f} steps/s ({steady}, the report's throughput; "
                          f"\"actual\" is the {base.steps}-step baseline window before the "
                          f"ceiling)")]


def _rate(w: WindowRate, what) -> str:
    samples = f" · {num(w.samples_per_s)} samples/s" if finite(w.samples_per_s) else ""
    return f"{w.steps_per_s:,.1f} steps/s{samples} ({what}, {w.steps} steps)"


def _alone(a: ProducerAlone, name_it: bool) -> str:
    cpu = f"; CPU {ms(a.cpu_s_per_batch)} ms" if finite(a.cpu_s_per_batch) else ""
    which = f" of DataLoader#{a.loader}" if name_it else ""
    return (f"{ms(a.s_per_batch)} ms/batch (the reader thread{which}{cpu}), timed on "
            f"{a.batches} batches made while the loop only waited")


def _data_cost(st: SpeedTestFigures) -> str:
    ratio = st.ratio
    if not finite(ratio):
        return NA
    if ratio <= NOT_BOTTLENECK:
        return f"the ceiling is {ratio:.2f}x the actual: the reader is not the bottleneck"
    return (f"the ceiling is {ratio:.2f}x the actual: reading data costs "
            f"{pct(st.data_share)} of the throughput")
