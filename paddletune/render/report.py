"""The `paddletune report` view: a loaded profile's summary as rich text, or as JSON."""

import json
import shlex
from datetime import datetime
from typing import List, Optional

from rich import box
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from ..export import json_safe
from ..summary import sample_figures, throttle_figures
from .fmt import NA, bar, label_table as _table, pct0 as _pct0
from .fmt import duration as _duration, finite as _finite, ms as _ms, nbytes as _bytes
from .fmt import num as _num, pct as _pct
from .memory import memory_section
from .parallel import parallel_section
from .reader import reader_sections

VERDICT_STYLES = {"compute-bound": "bold green", "moderately-input-bound": "bold yellow",
                  "highly-input-bound": "bold red", "too-few-steps": "bold yellow"}
BREAKDOWN = (("outside", "outside the runtime"), ("read", "reader wait in run"),
             ("feed", "feed"), ("compute", "compute"), ("fetch", "fetch"))
OPTIONAL_PARTS = ("read",)  # rows shown only when non-zero
GPU_PEAKS = (("power_w", "W"), ("temperature_c", "°C"))
KILLED = "the job was killed or the profiler crashed"


def render_report(profile, console: Console, top_ops: int = 10):
    """Print the report of `profile` (a paddletune.profile.Profile) on `console`."""
    s = profile.summary or {}
    sections = [_header(profile, s), _verdict(s), _no_steps(profile, s), _steps(s),
                _breakdown(s), *reader_sections(profile, s), memory_section(profile, s),
                parallel_section(profile, s), *_ops(s, top_ops), _system(profile, s), _events(profile), _overhead(s), _hint(profile)]
    for i, section in enumerate(x for x in sections if x is not None):
        if i:
            console.print()
        console.print(section)


def summary_json(profile) -> str:
    """The summary as JSON: sorted keys, non-finite numbers as null."""
    return json.dumps(json_safe(profile.summary or {}), indent=2, sort_keys=True,
                      allow_nan=False)


# --- header and verdict --------------------------------------------------------------------------
def _header(profile, s) -> Text:
    text = Text()
    text.append("paddletune report", style="bold")
    text.append(f" · {command_line(profile.header.get('command'))}\n")
    text.append(f"{_when(profile.header.get('created'))} · ran {_duration(s.get('duration_s'))}"
                " · ")
    text.append_text(_exit_text(s.get("exit") or {}))
    why = _cut_short_why(profile, s.get("exit") or {})
    if why:
        text.append(f"\nIncomplete profile: {KILLED} ({why}); the figures below come from "
                    f"the records written before it stopped.", style="bold red")
    return text


def command_line(command) -> str:
    """The command as the user typed it (argv; `python -m` for a module)."""
    if isinstance(command, str):
        return command
    if isinstance(command, (list, tuple)):
        return shlex.join(str(a) for a in command)
    command = command or {}
    argv = [str(a) for a in command.get("argv") or []]
    if command.get("module"):
        argv = ["-m"] + argv
    return shlex.join(argv) if argv else (command.get("script") or "?")


def _when(created) -> str:
    try:
        return datetime.strptime(created, "%Y-%m-%dT%H:%M:%S%z").strftime("%Y-%m-%d %H:%M:%S")
    except (TypeError, ValueError):
        return str(created or "unknown time")


def _exit_text(e: dict) -> Text:
    status, reason, message = e.get("status"), e.get("reason"), e.get("message")
    if status is None:
        return Text("no exit record", style="bold red")
    if status == 0:
        label, style = f"exit 0 ({reason or '?'})", "green"
    else:
        label, style = f"exit {status} ({reason or '?'})", "bold red"
    text = Text(label, style=style)
    if message and status != 0:
        text.append(f": {message}", style=style)
    return text


def _cut_short_why(profile, exit_figures) -> str:
    why = ["no exit record"] if exit_figures.get("status") is None else []
    if not profile.complete:
        why.append("no summary record")
    if profile.truncated:
        why.append("the last line was cut off")
    return "; ".join(why)


def _verdict(s) -> Text:
    v = s.get("verdict") or {}
    text = Text("Verdict: ", style="bold")
    text.append(v.get("text") or "unknown (the profile has no summary figures).",
                style=VERDICT_STYLES.get(v.get("kind"), "bold"))
    return text


def _no_steps(profile, s) -> Optional[Text]:
    trained = s.get("n_steps") if "n_steps" in s else any(
        not st.get("startup") for st in profile.steps)  # a summary without the figure
    if trained:
        return None
    startup = [st for st in profile.steps if st.get("startup")]
    if startup:
        programs = sorted({str(st.get("program")) for st in startup})
        runs = f"{len(startup)} run" + ("s" if len(startup) > 1 else "")
        why = (f"the script only ran startup programs ({runs} of program "
               f"{', '.join(programs)})")
    else:
        why = "the script never called Executor.run"
    return Text(f"No training steps observed: {why}. Nothing to time; check that the "
                f"training loop runs (and that it uses this runtime).", style="bold yellow")


# --- steps and time breakdown --------------------------------------------------------------------
def _steps(s) -> Optional[Group]:
    n = s.get("n_steps")
    if not n:
        return None
    head = Text("Steps: ", style="bold")
    head.append(f"{n} measured · {s.get('warmup_steps', 0)} warm-up excluded · "
                f"{s.get('steady_steps', 0)} steady")
    if s.get("main_program") is not None:
        head.append(f" (program {s['main_program']})")
    if s.get("speed_test_steps_excluded"):
        head.append(f" · {s['speed_test_steps_excluded']} speed-test ceiling steps excluded")
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    table.add_column("step time (ms)", style="bold")
    for name in ("mean", "p50", "p90", "max", "CV"):
        table.add_column(name, justify="right")
    for label, key in (("Executor.run", "step_s"), ("loop iteration", "cycle_s")):
        table.add_row(label, *_distribution_cells(s.get(key)))
    tp = Text("Throughput: ", style="bold")
    tp.append(_throughput(s.get("throughput")))
    return Group(head, table, tp)


def _distribution_cells(d) -> List[str]:
    d = d or {}
    return [_ms(d.get(k)) for k in ("mean", "p50", "p90", "max")] + [_pct(d.get("cv"), 0)]


def _throughput(tp) -> str:
    if not tp:
        return NA
    steps = tp.get("steps_per_s")
    text = f"{steps:,.1f} steps/s" if _finite(steps) else f"{NA} steps/s"
    samples, batch = tp.get("samples_per_s"), tp.get("batch_size")
    if batch:
        text += f" · {samples:,.0f} samples/s" if _finite(samples) else ""
        return text + f" (batch size {batch})"
    return text + " (batch size unknown)"


def _breakdown(s) -> Optional[Table]:
    b, shares = s.get("breakdown_s"), s.get("shares") or {}
    if not b:
        return None
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    table.add_column("Time per step", style="bold")
    table.add_column("ms", justify="right")
    table.add_column("share", justify="right")
    table.add_column("", no_wrap=True)
    for key, label in BREAKDOWN:
        if key in OPTIONAL_PARTS and not b.get(key):
            continue
        share = shares.get(key)
        table.add_row(label, _ms(b.get(key)), _pct(share), bar(share))
    cycle = (s.get("cycle_s") or {}).get("mean")
    table.add_row("loop iteration", _ms(cycle), _pct(1.0 if _finite(cycle) else None), "",
                  style="bold")
    return table


# --- ops -----------------------------------------------------------------------------------------
def _ops(s, top_ops) -> List[Table]:
    ops = s.get("ops")
    if not ops or top_ops <= 0:
        return []
    types = _op_table(f"Op types (top {top_ops} by time, {ops.get('steps', '?')} steady steps)",
                      "type")
    for r in (ops.get("by_type") or [])[:top_ops]:
        types.add_row(str(r.get("type")), *_op_cells(r))
    single = _op_table("Single ops", "op")
    for r in (ops.get("top") or [])[:top_ops]:
        single.add_row(f"#{r.get('index')} {r.get('type')}", *_op_cells(r))
    return [t for t in (types, single) if t.row_count]


def _op_table(title, first) -> Table:
    table = Table(title=title, title_justify="left", title_style="bold", box=box.SIMPLE_HEAD,
                  pad_edge=False, show_edge=False)
    table.add_column(first)
    for name in ("total ms", "calls", "mean µs", "share"):
        table.add_column(name, justify="right")
    return table


def _op_cells(r) -> List[str]:
    mean = r.get("mean_s")
    return [_ms(r.get("total_s")), f"{r.get('count', NA)}",
            f"{mean * 1e6:,.1f}" if _finite(mean) else NA, _pct(r.get("share"))]


# --- system, GPU, events, overhead ---------------------------------------------------------------
def _system(profile, s) -> Table:
    sys_figs = (s.get("samples") or {}).get("system") or {}
    table = _table("System", *_cpu_row(sys_figs, profile.env))
    for label, value in _system_rows(sys_figs, profile.env):
        table.add_row(label, value)
    for label, value in _gpu_rows(profile):
        table.add_row(label, value)
    return table


def _cpu_row(figs, env):
    cpu_env = env.get("cpu") or {}
    cores = cpu_env.get("usable_cores") or cpu_env.get("logical_cores")
    of = f" of {cores * 100}% ({cores} usable cores)" if _finite(cores) else ""
    cpu = figs.get("cpu_percent")
    if not cpu:
        return "CPU (process)", "N/A — no system samples"
    return "CPU (process)", f"mean {_pct0(cpu['mean'])} · peak {_pct0(cpu['max'])}{of}"


def _system_rows(figs, env):
    rows = []
    total, rss, threads = figs.get("cpu_total_percent"), figs.get("rss_bytes"), figs.get("threads")
    if total:
        rows.append(("CPU (machine)", f"mean {_pct0(total['mean'])} · peak {_pct0(total['max'])}"))
    if rss:
        rows.append(("memory", f"peak RSS {_bytes(rss['max'])}" + _available(figs)))
    blas = (figs.get("blas_threads") or {}).get("last") or (env.get("numpy") or {}).get(
        "blas_threads")
    parts = ([f"peak {_num(threads['max'])}"] if threads else []) + (
        [f"BLAS threads {_num(blas)}"] if blas else [])
    if parts:
        rows.append(("threads", " · ".join(parts)))
    load, steal = figs.get("load1"), figs.get("steal_percent")
    if load:
        rows.append(("load (1 min)", f"mean {load['mean']:.2f} · peak {load['max']:.2f}"))
    if steal and steal["max"] > 0:
        rows.append(("CPU steal", f"mean {steal['mean']:.1f}% · peak {steal['max']:.1f}% "
                                  f"(time taken by other VMs)"))
    return rows


def _available(figs) -> str:
    avail = (figs.get("mem_available_bytes") or {}).get("last")
    return f" · {_bytes(avail)} available" if avail is not None else ""


def _gpu_rows(profile):
    rows = [r for r in profile.samples.get("nvml", ()) if isinstance(r, dict)]
    if not rows:
        gpu = profile.env.get("gpu") or {}
        probe = profile.probes.get("nvml") or {}
        reason = gpu.get("reason") or probe.get("reason") or "no NVML samples recorded"
        return [("GPU", f"N/A — {reason}")]
    gpus = sorted({r.get("gpu") for r in rows}, key=str)
    out = []
    for g in gpus:
        mine = [r for r in rows if r.get("gpu") == g]
        out.append((f"GPU {g}", _gpu_value(sample_figures(mine), throttle_figures(mine))))
    return out


def _gpu_value(f, throttle=None) -> str:
    util, used, proc = f.get("util_percent"), f.get("mem_used_bytes"), f.get("proc_mem_bytes")
    parts = [f"util mean {_pct0(util['mean'])} · peak {_pct0(util['max'])}" if util
             else "util N/A"]
    if used:
        total = (f.get("mem_total_bytes") or {}).get("last")
        parts.append(f"memory peak {_bytes(used['max'])}" + (f" of {_bytes(total)}" if total
                                                             else ""))
    if proc:
        parts.append(f"this process {_bytes(proc['max'])}")
    peaks = [f"{f[key]['max']:.0f} {unit}" for key, unit in GPU_PEAKS if f.get(key)]
    limit = (f.get("power_limit_w") or {}).get("last")
    if peaks and limit and f.get("power_w"):
        peaks[0] += f" of {limit:.0f} W"
    parts += ["peak " + ", ".join(peaks)] if peaks else []
    if throttle:
        parts.append("clocks held down: " + ", ".join(
            f"{name.replace('_', ' ')} {share:.0%} of samples" for name, share in throttle.items()))
    return " · ".join(parts)


def _events(profile) -> Optional[Text]:
    shown_elsewhere = ("exit", "probe_unavailable", "speed_test", None)  # header, rows, sections
    notable = [e for e in profile.events if e.get("kind") not in shown_elsewhere]
    if not notable:
        return None
    text = Text("Events: ", style="bold")
    for i, e in enumerate(notable[:5]):
        style = "red" if e.get("kind") in ("nan_inf", "error", "signal") else ""
        text.append(("\n  " if i else "") + f"{e.get('kind')} at {_duration(e.get('t'))}: "
                    f"{e.get('message') or ''}".rstrip(": "), style=style)
    if len(notable) > 5:
        text.append(f"\n  … and {len(notable) - 5} more")
    return text


def _overhead(s) -> Optional[Text]:
    overhead = s.get("overhead") or {}
    if not overhead:
        return None
    parts = []
    for name, o in overhead.items():
        share, spent = o.get("share"), o.get("overhead_s")
        if not (_finite(share) or _finite(spent)):
            continue
        cost = _pct(share, 2) if _finite(share) else f"{_ms(spent)} ms"
        parts.append(f"{name} {cost}" + ("" if o.get("in_step") else " (background)"))
    if not parts:
        return None
    return Text("Probe overhead (share of step time): " + " · ".join(parts), style="dim")


def _hint(profile) -> Text:
    path = shlex.quote(str(profile.path))
    text = Text("Next: ", style="bold")
    text.append(f"paddletune advise {path}", style="cyan")
    text.append(" for recommendations\n      ")
    text.append(f"paddletune export {path} --format chrome", style="cyan")
    text.append(" for a timeline (Perfetto)")
    return text
