"""The report's Reader section (each DataLoader's queue, waits, producer vs consumer) and its
Speed test section (the no-data ceiling against the actual throughput)."""

from typing import Optional

from rich.console import Group
from rich.text import Text

from .fmt import NA, finite, label_table, ms, nbytes, num, pct, plain_table

SPARK = "▁▂▃▄▅▆▇█"  # queue fill from empty to capacity
NOT_BOTTLENECK = 1.1  # ceiling / actual at or below this: the reader is not the bottleneck


def reader_sections(profile, s) -> list:
    """The Reader section of each loader that delivered batches, then the Speed test's."""
    reader = s.get("reader") or {}
    sections = [_loader(f) for f in reader.get("loaders") or [] if f.get("batches")]
    return [x for x in sections + [_speed_test(s.get("speed_test"))] if x is not None]


# --- reader ---------------------------------------------------------------------------------------
def _loader(f) -> Group:
    table = label_table(_title(f), "queue fill", _fill(f.get("occupancy")))
    rows = [("fill over time", _spark(f.get("timeline"), (f.get("config") or {}).get("capacity"))),
            ("empty pops", _empty(f)), ("wait per pop", _wait(f.get("wait") or {})),
            ("producer", _producer(f)), ("consumer", _consumer(f.get("consumer") or {})),
            ("balance", _balance(f)), ("oscillation", _oscillation(f)),
            ("worker memory", _memory(f.get("processes"))),
            ("worker CPU", _worker_cpu(f.get("processes")))]
    rows += [(f"shape {name}", _shape(v)) for name, v in (f.get("shapes") or {}).items()]
    for label, value in rows:
        if value:
            table.add_row(label, value)
    workers = _workers(f.get("workers") or [], f.get("processes"))
    return Group(table, workers) if workers is not None else table


def _title(f) -> str:
    c = f.get("config") or {}
    workers = c.get("num_workers") or 0
    producer = (f"{workers} worker process{'es' * (workers > 1)}" if workers
                else "thread producer")
    parts = [producer, f"capacity {c.get('capacity', NA)}",
             f"double buffer {'on' if c.get('use_double_buffer') else 'off'}",
             "iterable" if c.get("iterable") else "non-iterable"]
    scope = "steady steps" if f.get("scope") == "steady" else "whole run"
    return (f"Reader: {f.get('name') or 'DataLoader'} · {' · '.join(parts)} · "
            f"{f['batches']:,} batches ({scope})")


def _fill(o) -> str:
    if not o:
        return f"{NA} (no queue samples)"
    cap = o.get("capacity")
    of = f" of {cap} ({o['mean'] / cap:.0%})" if cap else ""
    return (f"mean {o['mean']:.1f}{of} · min {o['min']} · max {o['max']} · full "
            f"{pct(o['full_share'], 0)} · empty {pct(o['empty_share'], 0)} of the time")


def _spark(points, capacity) -> Optional[str]:
    if not points or len(points) < 2 or not capacity:
        return None
    cells = [SPARK[min(int(fill / capacity * len(SPARK)), len(SPARK) - 1)] for _, fill in points]
    return "".join(cells) + f"  ({SPARK[0]} empty … {SPARK[-1]} full)"


def _empty(f) -> str:
    ratio = f.get("empty_ratio")
    if ratio is None:
        return ""
    return (f"{pct(ratio, 0)} of {f['batches']:,} pops found the queue empty (the loop "
            f"waited for the producer)")


def _wait(w) -> str:
    if w.get("mean_s") is None:
        return ""
    return (f"mean {ms(w['mean_s'])} ms · p50 {ms(w.get('p50_s'))} · p90 {ms(w.get('p90_s'))} "
            f"· max {ms(w.get('max_s'))} · {pct(w.get('share'))} of the loop's time")


def _producer(f) -> str:
    p = f.get("producer") or {}
    if p.get("s_per_batch") is None:
        return ""
    n = p["producers"]
    who = f"{n} workers" if n > 1 else "1 worker" if (f.get("config") or {}).get(
        "num_workers") else "1 thread"
    cpu = (f"; CPU {ms(p['cpu_s_per_batch'])} ms" if finite(p.get("cpu_s_per_batch")) else "")
    return (f"{ms(p['s_per_batch'])} ms/batch ({who}{cpu}) → at most {num(p['rate_per_s'])} "
            f"batches/s; blocked on a full queue {pct(p.get('put_wait_share'), 0)} of the time")


def _consumer(c) -> str:
    if c.get("s_per_batch") is None:
        return ""
    return (f"{ms(c['s_per_batch'])} ms/batch when not waiting → {num(c['rate_per_s'])} "
            f"batches/s; took {num(c.get('actual_per_s'))} batches/s")


def _balance(f) -> str:
    made = (f.get("producer") or {}).get("rate_per_s")
    taken = (f.get("consumer") or {}).get("rate_per_s")
    if not (finite(made) and finite(taken)) or made <= 0:
        return ""
    if made < taken:
        return (f"the producer is {taken / made:.2f}x slower than the consumer: the queue "
                f"cannot stay filled")
    return f"the producer keeps up ({made / taken:.2f}x the consumer's rate)"


def _oscillation(f) -> str:
    if not f.get("oscillating"):
        return ""
    cap = (f.get("config") or {}).get("capacity")
    return (f"the queue swung {f['swings']} times from full ({cap}) to empty: the producer "
            f"runs in bursts")


def _shape(v) -> str:
    if v.get("rank_varies"):
        return "the number of dims varies between batches"
    dims = ", ".join("*" if d is None else str(d) for d in v.get("shape") or [])
    varying = [f"dim {r['dim']} varies: min {r['min']} · p50 {r['p50']} · p95 {r['p95']} · "
               f"max {r['max']}" for r in v.get("varying") or []]
    return "; ".join([f"[{dims}]"] + varying)


def _memory(p) -> str:
    if not p:
        return ""
    growth = p["uss_growth_bytes"]
    return (f"private memory (USS) grew {nbytes(growth['mean'])} per worker during a pass "
            f"(max {nbytes(growth['max'])}; peak {nbytes(p['uss_max_bytes'])})")


def _worker_cpu(p) -> str:
    if not p or not finite(p.get("cores")):
        return ""
    return f"{p['cores']:.2f} cores busy in {p['workers']} worker process(es)"


def _workers(rows, processes=None) -> Optional[object]:
    if len(rows) < 2:
        return None
    memory = {r["worker"]: r for r in (processes or {}).get("per_worker") or []}
    extra = ("USS growth", "cores") if memory else ()
    table = plain_table("worker", "batches", "ms/batch", "CPU ms/batch", *extra)
    for r in rows:
        cells = [str(r["worker"]), num(r["batches"]), ms(r.get("s_per_batch")),
                 ms(r.get("cpu_s_per_batch"))]
        if memory:
            m = memory.get(r["worker"], {})
            cells += [nbytes(m.get("uss_growth_bytes")),
                      f"{m['cores']:.2f}" if finite(m.get("cores")) else NA]
        table.add_row(*cells)
    return table


# --- speed test -----------------------------------------------------------------------------------
def _speed_test(st) -> Optional[object]:
    if not st:
        return None
    if not st.get("has_loader"):
        return Text("Speed test: nothing measured. This job has no DataLoader/PyReader, and "
                    "--speed-test only changes how a DataLoader/PyReader queue is read "
                    "(FLAGS_reader_queue_speed_test_mode); feed through "
                    "fluid.io.DataLoader.from_generator to measure the no-data ceiling.",
                    style="bold yellow")
    base, ceil = st.get("baseline"), st.get("ceiling")
    if not base or not ceil:
        got = f"{base['steps']} baseline steps measured" if base else "no baseline steps"
        return Text(f"Speed test: incomplete: the job ended before the ceiling window "
                    f"({got}; each window is {st.get('window_steps')} steps).",
                    style="bold yellow")
    table = label_table("Speed test (FLAGS_reader_queue_speed_test_mode)", "actual",
                        _rate(base, "baseline"))
    table.add_row("ceiling", _rate(ceil, "no data: the same batch re-read"))
    table.add_row("data cost", _data_cost(st))
    if not st.get("complete"):
        table.add_row("window", f"incomplete: the job ended during the ceiling window "
                                f"({ceil['steps']} of {st.get('window_steps')} steps)")
    return table


def _rate(w, what) -> str:
    samples = (f" · {num(w['samples_per_s'])} samples/s" if finite(w.get("samples_per_s"))
               else "")
    return f"{w['steps_per_s']:,.1f} steps/s{samples} ({what}, {w['steps']} steps)"


def _data_cost(st) -> str:
    ratio = st.get("ratio")
    if not finite(ratio):
        return NA
    if ratio <= NOT_BOTTLENECK:
        return f"the ceiling is {ratio:.2f}x the actual: the reader is not the bottleneck"
    return (f"the ceiling is {ratio:.2f}x the actual: reading data costs "
            f"{pct(st['data_share'])} of the throughput")

