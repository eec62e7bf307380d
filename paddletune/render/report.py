"""The `paddletune report` view: a loaded profile's summary as rich text, or as JSON.

Every figure is read from the typed summary (paddletune.profile.figures.Summary); text that
comes from the profile itself (the command line, messages, names) goes through fmt.clean()
before it reaches the terminal."""

import json
import shlex
from datetime import datetime
from pathlib import Path
from typing import List, Optional

from rich import box
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from ..profile.codec import event_kind
from ..profile.figures import (Breakdown, Distribution, EvalFigures, GcFigures, GpuFigures,
                               SystemFigures, Throughput)
from ..profile.schema import encode
from .fmt import NA, add_cells, add_rows, bar, clean, label_table as _table, pct0 as _pct0
from .fmt import duration as _duration, finite as _finite, ms as _ms, nbytes as _bytes
from .fmt import num as _num, pct as _pct
from .memory import memory_section
from .parallel import parallel_section
from .reader import reader_sections

VERDICT_STYLES = {"compute-bound": "bold green", "moderately-input-bound": "bold yellow",
                  "highly-input-bound": "bold red", "too-few-steps": "bold yellow"}
BREAKDOWN = (("outside", "outside the runtime"), ("read", "reader wait"),
             ("feed", "feed"), ("compute", "compute"), ("fetch", "fetch"))
OPTIONAL_PARTS = ("read",)  # rows shown only when non-zero
QUANTILES = ("mean", "p50", "p90", "p99", "max")  # the step-time table's columns, then CV
GPU_PEAKS = (("power_w", "W"), ("temperature_c", "°C"))
SHOWN_ELSEWHERE = ("exit", "probe_unavailable", "speed_test", "producer_solo", "compiled",
                   "distributed", "model", "device_time",
                   "gc_pause", "gc_heap")  # header, rows, sections
ALARMING = ("nan_inf", "error", "signal")
GC_SHOWN_SHARE, GC_SHOWN_S = 0.005, 0.050  # the collector's pauses worth a line: this share
# of the steady steps' time, or one this long (a step it made an outlier)
KILLED = "the job was killed or the profiler crashed"


def render_report(profile, console: Console, top_ops: int = 10):
    """Print the report of `profile` (a paddletune.profile.Profile) on `console`."""
    s = profile.summary
    sections = [_header(profile, s), _verdict(s), _no_steps(profile, s),
                _steps(s, profile.options.head_steps, profile.source.terms,
                       profile.runs_programs),
                _breakdown(s, profile.source.terms), _device(s),
                *reader_sections(profile, s), memory_section(profile, s),
                parallel_section(profile, s), *_ops(profile, s, top_ops), _system(profile, s),
                _model(profile), _scope(profile), _events(profile), _overhead(s),
                _hint(profile)]
    for i, section in enumerate(x for x in sections if x is not None):
        if i:
            console.print()
        console.print(section)


def summary_json(profile) -> str:
    """The summary as strict JSON for scripts: every field present (null when not measured,
    non-finite numbers too), keys sorted."""
    return json.dumps(encode(profile.summary, defaults=True), indent=2, sort_keys=True,
                      allow_nan=False)


# --- header and verdict --------------------------------------------------------------------------
def _header(profile, s) -> Text:
    text = Text()
    text.append("paddletune report", style="bold")
    text.append(f" · {clean(command_line(profile.command))}\n")
    text.append(f"{_when(profile.header.created)} · ran {_duration(s.duration_s)} · ")
    text.append_text(_exit_text(s.exit))
    why = _cut_short_why(profile, s.exit)
    if why:
        text.append(f"\nIncomplete profile: {KILLED} ({why}); the figures below come from "
                    f"the records written before it stopped, after {s.n_steps} training "
                    f"steps ({s.steady_steps} steady) and {_duration(s.duration_s)}.",
                    style="bold red")
    return text


def command_line(command) -> str:
    """The command (a records.Command) as the user typed it (`-m` for a module)."""
    if command is None:
        return "?"
    argv = [str(a) for a in command.argv]
    if command.module:
        argv = ["-m"] + argv
    return shlex.join(argv) if argv else (command.script or "?")


def _when(created) -> str:
    try:
        return datetime.strptime(created, "%Y-%m-%dT%H:%M:%S%z").strftime("%Y-%m-%d %H:%M:%S")
    except (TypeError, ValueError):
        return clean(created or "unknown time")


def _exit_text(e) -> Text:
    if e.status is None:
        return Text("no exit record", style="bold red")
    style = "green" if e.status == 0 else "bold red"
    text = Text(f"exit {e.status} ({clean(e.reason or '?')})", style=style)
    if e.message and e.status != 0:
        text.append(f": {clean(e.message)}", style=style)
    return text


def _cut_short_why(profile, exit_figures) -> str:
    why = ["no exit record"] if exit_figures.status is None else []
    if not profile.complete:
        why.append("no summary record")
    if profile.truncated:
        why.append("the last line was cut off")
    return "; ".join(why)


def _verdict(s) -> Text:
    text = Text("Verdict: ", style="bold")
    text.append(clean(s.verdict.text or "unknown (the profile has no summary figures)."),
                style=VERDICT_STYLES.get(s.verdict.kind, "bold"))
    hidden = _hidden_data_cost(s)
    if hidden:
        text.append(" " + hidden)
    return text


HIDDEN_DATA_COST = 0.10  # speed test's data share above the input share by this: say why


def _hidden_data_cost(s) -> str:
    """When the speed test says data costs clearly more of the throughput than the loop
    waits for it, the two figures differ for a reason the reader should be told."""
    st = s.speed_test
    share = st.data_share if st is not None else None
    if share is None or share < (s.input_share or 0.0) + HIDDEN_DATA_COST:
        return ""
    return (f"Yet the speed test says data costs {share:.0%} of the throughput: the "
            f"producers slow the step itself (they share the CPU, and a reader thread the "
            f"GIL, with it) beyond the {s.input_share or 0.0:.0%} the loop waits.")


def _no_steps(profile, s) -> Optional[Text]:
    if s.n_steps:
        return None
    startup = [st for st in profile.steps if st.startup]
    if startup:
        programs = sorted({str(st.program) for st in startup})
        runs = f"{len(startup)} run" + ("s" if len(startup) > 1 else "")
        why = (f"the script only ran startup programs ({runs} of program "
               f"{', '.join(programs)})")
    else:
        why = f"the script never called {profile.source.terms.step}"
    framework = profile.source.framework
    uses = ("it uses this runtime" if framework == "fluid" else
            f"it trains with {framework}: pass --framework if the script's imports misled "
            f"the detection")
    return Text(f"No training steps observed: {why}. Nothing to time; check that the "
                f"training loop runs (and that {uses}).", style="bold yellow")


# --- steps and time breakdown --------------------------------------------------------------------
def _steps(s, head_steps: int, terms, programs: bool) -> Optional[Group]:
    """The steps' count and times; `programs`: the steps ran programs (the main one named)."""
    if not s.n_steps:
        return None
    head = Text("Steps: ", style="bold")
    warm = f" ({_duration(s.warmup_s)})" if s.warmup_steps and _finite(s.warmup_s) else ""
    head.append(f"{s.n_steps} measured · {s.warmup_steps} warm-up excluded{warm} · "
                f"{s.steady_steps} steady")
    if programs and s.main_program is not None:
        head.append(f" (program {s.main_program})")
    if s.aggregated_steps:
        head.append(f" · {s.aggregated_steps} of them from aggregated windows (after each "
                    f"program's first {head_steps} steps)")
    if s.speed_test_steps_excluded:
        head.append(f" · {s.speed_test_steps_excluded} speed-test steps excluded")
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    table.add_column("step time (ms)", style="bold")
    for name in QUANTILES + ("CV",):
        table.add_column(name, justify="right")
    for label, d in ((terms.step, s.step_s), ("loop iteration", s.cycle_s)):
        table.add_row(label, *_distribution_cells(d))
    tp = Text("Throughput: ", style="bold")
    tp.append(_throughput(s.throughput) + _samples_loader(s))
    lines = [head, table, tp]
    step_time = s.throughput.step_time_s if s.throughput is not None else None
    if _finite(step_time):
        each = Text("Step time: ", style="bold")
        each.append(f"{step_time * 1e3:.2f} ms (1 / the throughput: the steady steps' mean "
                    f"loop iteration; `watch` and `advise --json` state the same)")
        lines.append(each)
    if s.evaluation is not None:
        lines.append(_evaluation(s.evaluation))
    if s.gc is not None and s.gc.pauses and (
            (s.gc.share or 0.0) >= GC_SHOWN_SHARE or (s.gc.max_s or 0.0) >= GC_SHOWN_S):
        lines.append(_gc(s.gc))
    return Group(*lines)


def _gc(g: GcFigures) -> Text:
    """The garbage collector's pauses inside the steady steps (counted in their time)."""
    text = Text("Garbage collection: ", style="bold")
    full = f", {g.full} of them full" if g.full else ""
    share = f", {_pct(g.share)} of the steady steps' time" if g.share is not None else ""
    text.append(f"Python's collector paused the training thread {g.pauses} "
                f"time{'s' if g.pauses != 1 else ''} for 5 ms or more{full}: "
                f"{g.pause_s * 1e3:,.0f} ms{share}, the longest {_ms(g.max_s)} ms at "
                f"{_duration(g.max_t_s)} (counted in the steps' time).")
    if g.more:
        text.append(f" {g.more:,} more pauses after the first 2,000 of the run were counted "
                    f"only, not placed in time.")
    return text


def _evaluation(e: EvalFigures) -> Text:
    """The DataLoader passes between training steps, left out of the steps above."""
    text = Text("Evaluation: ", style="bold")
    share = f", {_pct(e.share)} of the run" if e.share is not None else ""
    text.append(f"{e.passes} DataLoader pass{'es' if e.passes != 1 else ''} ran between "
                f"training steps, left out of the steps above: {e.total_s:.2f} s{share}")
    for f in e.loaders:
        name = f.name or f"DataLoader#{f.loader}"
        made = (f"{f.workers} worker process{'es' if f.workers != 1 else ''}" if f.workers
                else "made in the loop")
        waits = (f", {_pct(f.wait_share)} of it waiting for its batches"
                 if f.wait_share is not None else "")
        each = f"{f.batches / f.passes:.0f}"
        text.append(f"; {name} ({made}): {f.passes} × {f.per_pass_s:.2f} s "
                    f"({each} batch{'' if each == '1' else 'es'} each){waits}")
    text.append(".")
    return text


def _distribution_cells(d: Optional[Distribution]) -> List[str]:
    if d is None:
        return [NA] * (len(QUANTILES) + 1)
    return [_ms(getattr(d, k)) for k in QUANTILES] + [_pct(d.cv, 0)]


SEVERAL_BATCHES = 1.5  # batches a step from which the throughput line says how many
# (gradient accumulation)


def _throughput(tp: Optional[Throughput]) -> str:
    if tp is None:
        return NA
    steps = tp.steps_per_s
    text = f"{steps:,.1f} steps/s" if _finite(steps) else f"{NA} steps/s"
    if tp.batch_size:
        samples = tp.samples_per_s
        text += f" · {samples:,.0f} samples/s" if _finite(samples) else ""
        batches = tp.batches_per_step
        several = (f" · {batches:.1f} batches a step" if batches is not None
                   and batches >= SEVERAL_BATCHES else "")
        return text + f" (batch size {tp.batch_size}{several})"
    return text + " (batch size unknown)"


def _samples_loader(s) -> str:
    """Where each step reads batches of more than one size from its training loaders (a
    FixMatch's labeled and unlabeled batches), whose samples are counted: the first loader
    each step reads (steps.StepTimer.read), and the main loader's own size where it differs.
    Not where the loaders fed different steps (an epoch each: the main one has a cycle of
    its own, LoaderFigures.cycle_s)."""
    tp, main = s.throughput, s.main_loader
    if tp is None or not tp.batch_size or s.reader is None or main is None or \
            main.cycle_s is not None:
        return ""
    feeding = [f for f in s.reader.loaders
               if not f.evaluation and f.scope == "steady" and f.config.batch_size]
    if len({f.config.batch_size for f in feeding}) < 2 or main.config.batch_size is None:
        return ""
    if main.config.batch_size != tp.batch_size:
        return (f"; samples are those of the first loader each step reads, while the main "
                f"loader, {main.name}, reads {main.config.batch_size} a batch")
    others = [f for f in feeding if f.cycle_s is None and f.config.batch_size != tp.batch_size]
    if not others:
        return ""
    read = ", ".join(f"{f.name} {f.config.batch_size}" for f in others)
    return (f"; samples are those of {main.name}, the main loader; each step also read "
            f"{read} a batch, not counted")


def _breakdown(s, terms) -> Optional[Table]:
    b: Optional[Breakdown] = s.breakdown_s
    if b is None:
        return None
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    table.add_column("Time per step", style="bold")
    table.add_column("ms", justify="right")
    table.add_column("share", justify="right")
    table.add_column("", no_wrap=True)
    for key, label in BREAKDOWN:
        label = terms.between if key == "outside" else label
        label = terms.read_wait() if key == "read" else label
        if key in OPTIONAL_PARTS and not b.part(key):
            continue
        share = s.shares.part(key) if s.shares is not None else None
        table.add_row(label, _ms(b.part(key)), _pct(share), bar(share))
        if key == "compute":
            _off_cpu_rows(table, b, s.cycle_s.mean if s.cycle_s is not None else None)
    cycle = s.cycle_s.mean if s.cycle_s is not None else None
    table.add_row("loop iteration", _ms(cycle), _pct(1.0 if _finite(cycle) else None), "",
                  style="bold")
    return table


def _off_cpu_rows(table: Table, b: Breakdown, cycle: Optional[float]):
    """Under compute, where the runtime measured it: the training thread's time off its CPU
    while its ops ran (the GIL another thread held, a lock, a core), and of that the time
    it was runnable but waited for a core (dimmed: parts of compute, not of the step)."""
    for label, seconds in (("  of it off the CPU", b.compute_wait_s),
                           ("    waiting for a core", b.compute_queued_s)):
        if seconds is None:
            return
        share = seconds / cycle if _finite(cycle) and cycle > 0 else None
        table.add_row(label, _ms(seconds), _pct(share), "", style="dim")


def _device(s) -> Optional[Text]:
    """The steps as the GPU ran them (CUDA events), beside the host's breakdown."""
    d = s.device
    if d is None or not d.steps:
        return None
    which = "steady steps" if d.scope == "steady" else "steps, warm-up included"
    text = Text(f"On the GPU (CUDA events, {d.steps} {which}): ", style="bold")
    if d.idle_share is None:
        text.append(f"{_ms(d.cycle_s)} ms per step from one step's end to the next's (no "
                    f"batch handed over or host-to-device copy to split it at)")
        return text
    text.append(f"idle {_pct(d.idle_share)} of each {_ms(d.cycle_s)} ms step waiting for the "
                f"host, busy {_ms(d.busy_s)} ms from the step's start (its batch or first "
                f"copy) to its end")
    input_share = s.input_share
    if _finite(input_share) and input_share >= 2 * d.idle_share + 0.05:
        text.append(f"; the host's {_pct(input_share)} waiting for input overlapped the "
                    f"device's work on the step before", style="yellow")
    return text


# --- ops -----------------------------------------------------------------------------------------
def _ops(profile, s, top_ops) -> list:
    ops = s.ops
    if ops is None and profile.options.ops:
        return [_no_ops(profile)]
    if ops is None or top_ops <= 0:
        return []
    types = _op_table(f"Op types (top {top_ops} by time, {ops.steps} steady steps)", "type")
    for r in ops.by_type[:top_ops]:
        add_cells(types, [r.type, *_op_cells(r)])
    single = _op_table("Single ops", "op")
    for r in ops.top[:top_ops]:
        add_cells(single, [f"#{r.index} {r.type}", *_op_cells(r)])
    return [t for t in (types, single) if t.row_count]


def _no_ops(profile) -> Text:
    """--ops was asked for and no op was timed: why, as the source said (a probe_unavailable
    event of the ops probe), or that the job ran no op the source can time."""
    reasons = [e.message for e in profile.events_of("probe_unavailable")
               if e.probe == "ops" and e.message]
    reason = reasons[0] if reasons else "no op of this job was timed"
    return Text(f"Ops: N/A — {clean(reason)}", style="dim")


def _op_table(title, first) -> Table:
    table = Table(title=title, title_justify="left", title_style="bold", box=box.SIMPLE_HEAD,
                  pad_edge=False, show_edge=False)
    table.add_column(first)
    for name in ("total ms", "calls", "mean µs", "share"):
        table.add_column(name, justify="right")
    return table


def _op_cells(r) -> List[str]:
    mean = r.mean_s
    return [_ms(r.total_s), f"{r.count}", f"{mean * 1e6:,.1f}" if _finite(mean) else NA,
            _pct(r.share)]


# --- system, GPU, events, overhead ---------------------------------------------------------------
def _system(profile, s) -> Table:
    figs = s.system or SystemFigures()
    table = _table("System", *_cpu_row(figs, profile.env.cpu.cores))
    add_rows(table, _system_rows(figs, profile.env.numpy.blas_threads))
    add_rows(table, _gpu_rows(profile, s.gpus))
    return table


def _cpu_row(figs: SystemFigures, cores):
    cpu = figs.cpu_percent
    if cpu is None:
        return "CPU (process)", ("N/A — the job ended before two system samples 50 ms "
                                 "apart (a CPU rate needs them)")
    of = f" of {cores * 100}% ({cores} usable cores)" if _finite(cores) else ""
    return "CPU (process)", f"mean {_pct0(cpu.mean)} · peak {_pct0(cpu.max)}{of}"


def _system_rows(figs: SystemFigures, header_blas):
    rows = []
    total, rss, threads = figs.cpu_total_percent, figs.rss_bytes, figs.threads
    if total:
        rows.append(("CPU (machine)", f"mean {_pct0(total.mean)} · peak {_pct0(total.max)}"))
    if rss:
        rows.append(("memory", f"peak RSS {_bytes(rss.max)}" + _available(figs)))
    blas = (figs.blas_threads.last if figs.blas_threads else None) or header_blas
    parts = ([f"peak {_num(threads.max)}"] if threads else []) + (
        [f"BLAS threads {_num(blas)}"] if blas else [])
    if parts:
        rows.append(("threads", " · ".join(parts)))
    load, steal = figs.load1, figs.steal_percent
    if load:
        rows.append(("load (1 min)", f"mean {load.mean:.2f} · peak {load.max:.2f}"))
    if steal and steal.max > 0:
        rows.append(("CPU steal", f"mean {steal.mean:.1f}% · peak {steal.max:.1f}% "
                                  f"(time taken by other VMs)"))
    return rows


def _available(figs: SystemFigures) -> str:
    avail = figs.mem_available_bytes
    return f" · {_bytes(avail.last)} available" if avail is not None else ""


def _gpu_rows(profile, gpus):
    if not gpus:
        probe = profile.probes.get("nvml")
        reason = (profile.env.gpu.reason or (probe.reason if probe else None)
                  or "no NVML samples recorded")
        return [("GPU", f"N/A — {reason}")]
    return [(f"GPU {g.gpu}", _gpu_value(g)) for g in gpus]


def _gpu_value(g: GpuFigures) -> str:
    util, used, proc = g.util_percent, g.mem_used_bytes, g.proc_mem_bytes
    parts = [f"util mean {_pct0(util.mean)} · peak {_pct0(util.max)}" if util
             else "util N/A"]
    if used:
        total = g.mem_total_bytes.last if g.mem_total_bytes else None
        parts.append(f"memory peak {_bytes(used.max)}" + (f" of {_bytes(total)}" if total
                                                          else ""))
    if proc:
        parts.append(f"this process {_bytes(proc.max)}")
    peaks = [f"{getattr(g, key).max:.0f} {unit}" for key, unit in GPU_PEAKS
             if getattr(g, key)]
    limit = g.power_limit_w.last if g.power_limit_w else None
    if peaks and limit and g.power_w:
        peaks[0] += f" of {limit:.0f} W"
    parts += ["peak " + ", ".join(peaks)] if peaks else []
    if g.throttle:
        parts.append("clocks held down: " + ", ".join(
            f"{name.replace('_', ' ')} {share:.0%} of samples"
            for name, share in g.throttle.items()))
    return " · ".join(parts)


def _model(profile) -> Optional[Text]:
    """What the model is made of, as the source saw it in the first training step."""
    census = profile.last_event("model")
    if census is None or not census.message:
        return None
    return Text.assemble(("Model (first training step): ", "bold"), clean(census.message))


def _scope(profile) -> Optional[Text]:
    """What the profile does not cover: a compiled model, one rank of a distributed job (the
    source's scope events, each as it recorded it)."""
    found = profile.events_of("compiled") + profile.events_of("distributed")
    if not found:
        return None
    text = Text("What this profile covers:", style="bold")
    for e in found:
        text.append("\n  " + clean(e.message or event_kind(e)), style="yellow")
    return text


def _events(profile) -> Optional[Text]:
    notable = [e for e in profile.events if event_kind(e) not in SHOWN_ELSEWHERE]
    if not notable:
        return None
    text = Text("Events: ", style="bold")
    for i, e in enumerate(notable[:5]):
        kind = event_kind(e)
        line = f"{kind} at {_duration(e.t_s)}: {e.message or ''}".rstrip(": ")
        text.append(("\n  " if i else "") + clean(line),
                    style="red" if kind in ALARMING else "")
    if len(notable) > 5:
        text.append(f"\n  … and {len(notable) - 5} more")
    return text


def _overhead(s) -> Optional[Text]:
    groups = []
    for in_step, label in ((True, "of the training loop's time"),
                           (False, "background, of the job's wall time")):
        parts = [_probe_cost(name, o) for name, o in s.overhead.items()
                 if o.in_step == in_step and (_finite(o.share) or _finite(o.overhead_s))]
        if parts:
            groups.append(f"{' · '.join(parts)} ({label})")
    if not groups:
        return None
    return Text("Probe overhead: " + "; ".join(groups), style="dim")


def _probe_cost(name, o) -> str:
    cost = _pct(o.share, 2) if _finite(o.share) else f"{_ms(o.overhead_s)} ms"
    return f"{clean(name)} {cost}"


def _hint(profile) -> Text:
    """What to run next, each command whole on its own line: a profile under the working
    folder is named relative to it, so the usual one fits an 80-column terminal."""
    path = Path(profile.path)
    try:
        path = path.resolve().relative_to(Path.cwd().resolve())
    except (OSError, ValueError):  # elsewhere: as given
        pass
    shown = clean(shlex.quote(str(path)))
    text = Text("Next: ", style="bold")
    text.append("ranked advice, and a timeline for Perfetto (https://ui.perfetto.dev):")
    for command in ("advise", "export"):
        text.append(f"\n  paddletune {command} {shown}", style="cyan")
    return text
