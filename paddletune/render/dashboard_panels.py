"""The dashboard's panels: each takes the live state (paddletune.live.state.LiveState), its
text height (lines) and width and returns a fixed-height rich Panel; a panel without data
says why (N/A) instead of going. Colours are documented in dashboard.py."""

from typing import Optional

from rich import box
from rich.console import Console, Group
from rich.panel import Panel
from rich.text import Text

from ..live.state import WHOLE_RUN
from .fmt import NA, duration, finite, nbytes, pct

SPARK = "▁▂▃▄▅▆▇█"
SEGMENTS = {"wait": ("▓", "red"), "feed": ("▒", "yellow"), "compute": ("█", "green"),
            "fetch": ("░", "blue"), "other": ("·", "magenta")}
VERDICT_STYLES = {"compute-bound": "green", "moderately-input-bound": "yellow",
                  "highly-input-bound": "red", "too-few-steps": "yellow"}
SEVERITY_STYLES = {"high": "red", "medium": "yellow", "low": "cyan"}
CAPACITY_WORDS = {"pool": "pool", "FLAGS_cpu_memory_limit_mb": "limit", "machine": "machine"}

def _panel(title, lines, height) -> Panel:
    body = Group(*lines[:height]) if lines else Text("")
    return Panel(body, title=title, title_align="left", box=box.ROUNDED, height=height + 2,
                 padding=(0, 1))


def _line(*parts) -> Text:
    """One panel line, cut with an ellipsis where it does not fit."""
    text = Text(no_wrap=True, overflow="ellipsis")
    for part in parts:
        text.append(*part) if isinstance(part, tuple) else text.append(part)
    return text


def _na(reason) -> Text:
    return Text(f"N/A — {reason}", style="dim")  # wraps: a panel without data has room


# --- panels --------------------------------------------------------------------------------------
def throughput_panel(state, lines, width) -> Panel:
    tp = state.throughput
    if tp is None:
        return _panel("Throughput", [_na("no training step yet")], lines)
    samples = tp.samples_per_s
    rate = _line((f"{_rate(tp.steps_per_s)} steps/s", "bold"),
                 f" · {_rate(samples)} samples/s" if finite(samples) else " · samples/s N/A")
    hist = tp.history
    body = [rate]
    if hist:
        body.append(_line((sparkline(hist, width), "cyan")))
        body.append(_line((f"history: {min(len(hist), width)} s, max {max(hist):,.0f} "
                           f"steps/s", "dim")))
    else:
        body.append(_line(("history: after the first full second", "dim")))
    batch = tp.batch_size
    body.append(_line(f"batch {batch if batch else NA} · {tp.samples:,} samples so far"))
    return _panel(f"Throughput ({tp.label})", body, lines)


def _rate(x):
    return NA if not finite(x) else f"{x:,.1f}" if x < 1000 else f"{x:,.0f}"


def breakdown_panel(state, lines, width) -> Panel:
    b = state.breakdown
    device = device_line(state.device, width)
    measured = device is not None and state.device.figures is not None
    if b is None:
        body = [_na("no training step in the window")] + ([device] if measured else [])
        return _panel("Step time", body, lines)
    cycle = b.cycle_s
    shares = [(k, v, v / cycle if cycle > 0 else 0.0) for k, v in b.parts]
    legend = _legend(shares, width, lines - 2 if measured else lines - 1)
    if measured:  # the device's figures take the legend's last row where it needs all
        legend = legend[:max(lines - 2, 0)] + [device]
    elif device is not None and len(legend) < lines - 1:  # its N/A only where there is room
        legend.append(device)
    off_cpu = off_cpu_line(b, cycle, width)
    if off_cpu is not None and len(legend) < lines - 1:  # where there is room
        legend.append(off_cpu)
    title = (f"Step time {cycle * 1e3:.2f} ms (whole run)" if b.scope  # steady: the report's
             else f"Step time {cycle * 1e3:.2f} ms (mean of {b.n})")
    return _panel(title, [stacked_bar(shares, width)] + legend, lines)


def _legend(shares, width, room) -> list:
    """The parts' legend rows: with milliseconds where they fit in `room` rows."""
    long = [f"{SEGMENTS[k][0]} {k} {v * 1e3:.2f} ms {s:.0%}" for k, v, s in shares]
    short = [f"{SEGMENTS[k][0]} {k} {s:.0%}" for k, v, s in shares]
    for items in (long, short):
        packed = _pack(items, width)
        if len(packed) <= room or items is short:
            break
    return [_styled_legend(row, shares) for row in packed]


def off_cpu_line(b, cycle, width) -> Optional[Text]:
    """Of the compute, the training thread's time off its CPU and waiting for a core, as the
    report's rows under compute (shares of the step), dimmed; None where not measured."""
    if b.off_cpu_s is None:
        return None
    off = f"{_ms(b.off_cpu_s)} {_share_of(b.off_cpu_s, cycle)}"
    forms = [f"  of compute: {off} off the CPU", f"  off the CPU {off}"]
    if b.queued_s is not None:
        queued = f"{_ms(b.queued_s)} {_share_of(b.queued_s, cycle)}"
        forms[:0] = [f"  of compute: {off} off the CPU, {queued} waiting for a core",
                     f"  off CPU {_ms(b.off_cpu_s)} ({_ms(b.queued_s)} waiting for a core)"]
    return _line((next((f for f in forms if len(f) <= width), forms[-1]), "dim"))


def _share_of(seconds, cycle) -> str:
    return f"{seconds / cycle:.0%}" if finite(seconds) and cycle > 0 else ""


def device_line(d, width):
    """The steps as the GPU ran them (CUDA events), in the report's words as far as `width`
    allows; its N/A and why; None without a device line (a machine without a GPU)."""
    if d is None:
        return None
    if d.figures is None:
        return _line("GPU time ", (f"N/A — {d.reason}", "dim"))
    forms = _device_forms(d.figures, _device_scope(d))
    return _line(next((f for f in forms if len(f) <= width), forms[-1]))


def device_plain(d) -> str:
    """The device's figures for the plain line (`d.figures` set)."""
    f, which = d.figures, _device_scope(d)
    if f.idle_share is None:
        return f"GPU {_ms(f.cycle_s)} per step ({which})"
    return f"GPU idle {pct(f.idle_share)} busy {_ms(f.busy_s)} ({which})"


def _device_forms(f, which) -> list:
    """The device line from the longest form to the shortest."""
    step = _ms(f.cycle_s)
    if f.idle_share is None:  # no host-to-device copy: no split between idle and busy
        return [f"GPU ({which}): {step} per step, no batch or host-to-device copy to split "
                f"it at",
                f"GPU {step} per step ({which}), no copy to split",
                f"GPU {step} per step ({which})", f"GPU {step} per step"]
    idle, busy = pct(f.idle_share), _ms(f.busy_s)
    return [f"GPU ({which}): idle {idle} of each {step} step waiting for the host, "
            f"busy {busy}",
            f"GPU ({which}): idle {idle} of each {step} step, busy {busy}",
            f"GPU idle {idle} · busy {busy} ({which})",
            f"GPU idle {idle} of {step} · busy {busy}",
            f"GPU idle {idle} · busy {busy}"]


def _device_scope(d) -> str:
    """Which steps: those between the latest two totals, or as the report says it."""
    f = d.figures
    if d.scope == "latest":
        return f"steps {d.first_step:,}–{d.last_step:,}"
    plural = "s" if f.steps != 1 else ""
    if d.scope == WHOLE_RUN and f.scope == "steady":
        return f"{f.steps:,} steady step{plural}"
    return f"{f.steps:,} step{plural}, warm-up included"


def stacked_bar(shares, width) -> Text:
    """A bar of `width` cells split in proportion to the shares (largest remainders)."""
    raw = [(k, s * width) for k, _, s in shares]
    cells = {k: int(x) for k, x in raw}
    rest = width - sum(cells.values())
    for k, x in sorted(raw, key=lambda kx: -(kx[1] - int(kx[1])))[:max(rest, 0)]:
        cells[k] += 1
    text = Text(no_wrap=True, overflow="crop")
    for k, _, _ in shares:
        glyph, style = SEGMENTS[k]
        text.append(glyph * cells[k], style=style)
    return text


def _pack(items, width):
    rows, row = [], ""
    for item in items:
        candidate = f"{row}  {item}" if row else item
        if len(candidate) > width and row:
            rows.append(row)
            candidate = item
        row = candidate
    return rows + [row]


def _styled_legend(row, shares) -> Text:
    text = _line(row)
    for k, _, _ in shares:
        glyph, style = SEGMENTS[k]
        text.highlight_words([f"{glyph} {k}"], style=style)
    return text


def reader_panel(state, lines, width) -> Panel:
    r = state.reader
    if r is None:
        return _panel("Reader queue", [_na("no DataLoader/PyReader: feeding is synchronous")],
                      lines)
    workers = (f"{r.workers} workers" if r.workers
               else "made in the loop" if r.made_in == "loop" else "thread")
    passes = f", pass {r.passes}" if r.passes > 1 else ""
    title = f"Reader {r.name} ({workers}{passes})"
    if not r.pops:
        why = (f"pass {r.passes} {r.pass_ended}" if r.pass_ended
               else "no batch popped in the window")
        return _panel(title, [_na(why)], lines)
    fill, share, cap = r.fill_mean, r.fill_share, r.capacity
    style = _fill_style(share)
    bar_w = max(width - 22, 4)
    body = [_line("fill ", (_bar(share, bar_w), style),
                  f" {fill:.1f} of {cap}" if finite(fill) else f" {NA} of {cap}",
                  (f" {share:.0%}" if finite(share) else "", style))]
    empty = r.empty_ratio
    body.append(_line("empty ", (f"{empty:.0%}" if finite(empty) else NA, _empty_style(empty)),
                      f" of {r.pops:,} pops · {_ms(r.wait_per_pop_s)}/pop"))
    hist = [h for h in r.fill_history if finite(h)]
    if hist:
        body.append(_line("fill over time ", (sparkline(hist, width - 15, top=1.0), style)))
    body.append(_line(f"{_rate(r.batches_per_s)} batches/s · producer "
                      f"{_ms(r.produce_per_batch_s)}/batch"))
    return _panel(title, body, lines)


def _fill_style(share):
    return "dim" if not finite(share) else "red" if share < 0.25 else (
        "yellow" if share < 0.5 else "green")


def _empty_style(ratio):
    return "dim" if not finite(ratio) else "red" if ratio >= 0.5 else (
        "yellow" if ratio >= 0.1 else "green")


def _ms(seconds):
    return f"{seconds * 1e3:.2f} ms" if finite(seconds) else NA


def memory_panel(state, lines, width) -> Panel:
    m = state.memory
    cap, peak = m.capacity, m.peak_allocated
    body = []
    if m.pool_seen:
        body.append(_pool_line(m))
        share = peak / cap if finite(peak) and finite(cap) and cap else None
        style = "bold red" if m.ooms else _mem_style(share)
        body.append(_line("peak ", (nbytes(peak), style),
                          (f" {share:.1%}" if finite(share) else "", style),
                          f" of {nbytes(cap)} {CAPACITY_WORDS.get(m.capacity_from, '')}"
                          .rstrip(), (" · OOM", "bold red") if m.ooms else ""))
    else:
        body.append(_na("no pool figures until a training step ends"))
    if finite(m.rss):
        body.append(_line(f"RSS {nbytes(m.rss)}",
                          f" · {nbytes(m.available)} free" if finite(m.available) else ""))
    else:
        body.append(_line("RSS ", ("N/A — no system sample yet", "dim")))
    if not m.gpus:
        body.append(_line("GPU ", (f"N/A — {m.gpu_reason}", "dim")))
    for g in m.gpus:
        share = g.used / g.total if finite(g.used) and finite(g.total) and g.total else None
        body.append(_line(f"GPU {g.gpu} ", (f"{nbytes(g.used)} of {nbytes(g.total)}",
                                            _mem_style(share)),
                          f" · util {g.util:.0f}%" if finite(g.util) else ""))
    return _panel("Memory (pool, host, GPU)", body, lines)


def _pool_line(m) -> Text:
    """Allocated and reserved at the newest step; once a long job's steps come only as
    windows (no per-step pool figures), the window's largest step peak."""
    if not finite(m.allocated) and finite(m.step_peak):
        return _line(f"step peak {nbytes(m.step_peak)} (largest in the window)")
    return _line(f"alloc {nbytes(m.allocated)} · reserved {nbytes(m.reserved)}")


def _mem_style(share):
    return "dim" if not finite(share) else "red" if share >= 0.85 else (
        "yellow" if share >= 0.70 else "green")


def cpu_panel(state, lines, width) -> Panel:
    c = state.cpu
    cores = c.cores
    if not c.sampled:
        return _panel("CPU", [_na("no system sample yet")], lines)
    of = f" of {cores * 100}%" if cores else ""
    body = [_line(f"process {_pct(c.process)}{of} · machine {_pct(c.total)}")]
    per_core = [p for p in c.per_core if finite(p)]
    if per_core:
        text = _line("cores ")
        for p in per_core[:max(width - 12, 1)]:
            text.append(SPARK[min(int(p / 100 * len(SPARK)), len(SPARK) - 1)],
                        style=_busy_style(p))
        text.append(f" ({len(per_core)}, mean {sum(per_core) / len(per_core):.0f}%)")
        body.append(text)
    threads = f"threads {_int(c.threads)} · BLAS {_int(c.blas_threads)}"
    body.append(_line(f"{threads} · load {c.load1:.2f}" if finite(c.load1) else threads))
    steal, workers = c.steal, c.workers
    extra = ([f"steal {steal:.1f}%"] if finite(steal) else []) + (
        [f"{workers} reader worker processes"] if workers else [])
    if extra:
        body.append(_line(" · ".join(extra)))
    return _panel("CPU", body, lines)


def _busy_style(p):
    return "green" if p < 70 else "yellow" if p < 95 else "red"


def _pct(x):
    return f"{x:.0f}%" if finite(x) else NA


def _int(x):
    return f"{x:,.0f}" if finite(x) else NA


def ops_panel(state, lines, width) -> Panel:
    o = state.ops
    if not o.enabled:
        return _panel("Top ops", [_na("per-op timing is off: profile with --ops")], lines)
    if not o.top:
        return _panel("Top ops", [_na("no op timings in the window")], lines)
    name_w = max(width - 19, 6)
    body = [_line(f"{op.type[:name_w]:<{name_w}} {op.per_step_s * 1e3:7.2f} ms "
                  f"{op.share:5.1%}") for op in o.top[:lines]]
    return _panel(f"Top ops (per step, {o.steps} steps)", body, lines)


def parallel_panel(state, lines, width) -> Panel:
    p = state.parallel
    body = [_line(f"{p.places} places · {p.threads} threads · {p.reduce or '?'}"),
            _line(f"busy {_share(p.busy_share)} · concurrency {_num2(p.concurrency)} · "
                  f"ready {_num2(p.ready_mean)}"),
            _line(f"scheduling {_share(p.sched_share)} of the step · {p.drops} scope drops")]
    return _panel(f"ParallelExecutor ({p.steps} steps)", body, lines)


def _share(x):
    return f"{x:.0%}" if finite(x) else NA


def _num2(x):
    return f"{x:.2f}" if finite(x) else NA


def advice_panel(state, lines, width) -> Panel:
    a = state.advice
    window = f"last {state.window_s:.0f} s"
    if a is None:
        return _panel(f"Verdict and advice ({window})",
                      [_na("first computed once training steps arrive (every 5 s)")], lines)
    if a.error:
        return _panel(f"Verdict and advice ({window})",
                      [_line(("advisors failed: " + a.error, "red"))], lines)
    v = a.verdict
    verdict = Text(v.text if v is not None and v.text else "no verdict",
                   style=VERDICT_STYLES.get(v.kind, "") if v is not None else "")
    spare = lines - max(len(a.advice), 1)  # lines the verdict may take
    wrapped = verdict.wrap(Console(width=width, color_system=None), width)
    if len(wrapped) > spare:
        wrapped = [_line(verdict)]
    body = list(wrapped)
    for item in a.advice:
        body.append(_line((f"● {item.severity:<6} ", SEVERITY_STYLES.get(item.severity, "")),
                          item.title, (f" — {item.gain}", "dim")))
    if not a.advice:
        body.append(_line(("no advice: nothing stands out in the window", "dim")))
    age = max(state.now_s - a.t_s, 0.0)
    if a.verdict_scope:
        return _panel(f"Verdict ({a.verdict_scope}) and advice ({window}, computed "
                      f"{duration(age)} ago)", body, lines)
    return _panel(f"Verdict and advice ({window}, computed {duration(age)} ago)", body, lines)


# --- bits ----------------------------------------------------------------------------------------
def sparkline(values, width, top=None) -> str:
    """The last `width` values as ▁..█ (scaled to `top`, default their maximum)."""
    values = list(values)[-max(width, 1):]
    top = top if top is not None else max(values, default=0)
    if not values or not top or top <= 0:
        return SPARK[0] * len(values)
    return "".join(SPARK[min(int(max(v, 0) / top * (len(SPARK) - 1) + 0.5), len(SPARK) - 1)]
                   for v in values)


def _bar(share, width) -> str:
    if not finite(share):
        return " " * width
    n = int(round(min(max(share, 0.0), 1.0) * width))
    return "█" * n + "░" * (width - n)
