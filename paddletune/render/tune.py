"""The `paddletune tune` view: while it runs, the live display on a terminal (tune_live.py)
or a progress line per trial (pipes, logs, --plain); then (and for
`paddletune report FILE.tune.json`) the ranked table, the winning setting as exports and
code, and the speedup over the baseline."""

import shlex
from typing import Optional

from rich.console import Console
from rich.measure import Measurement
from rich.segment import Segment, Segments
from rich.table import Table
from rich.text import Text

from .fmt import NA, duration, nbytes, num

STATUS_STYLE = {"ok": "green", "oom": "red", "timeout": "red", "crashed": "red",
                "interrupted": "red", "no effect": "yellow", "no-steps": "yellow",
                "too full": "yellow"}
MAX_ROWS = 25
UNBOUNDED = 10_000  # columns: room for a table's natural width off a terminal


def progress_view(console: Console, title: str, budget_s: float, live: bool = True):
    """The tuner's progress on `console` (stderr), used as a context manager around the
    tuning: the live display when `live` is wanted and the console writes to a terminal
    that can redraw in place (a real one: FORCE_COLOR does not make a log file one; not
    TERM=dumb), else TuneProgress's line per trial."""
    if live and _isatty(console.file) and console.is_terminal \
            and not console.is_dumb_terminal:
        from .tune_live import TuneLive
        return TuneLive(console, title, budget_s)
    return TuneProgress(console)


class TuneProgress:
    """Progress on `console` (stderr): one line as each trial ends."""

    def __init__(self, console: Console):
        self.console = console

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        return False

    def trial_started(self, tuner, label, phase, steps):
        if self.console.is_terminal:
            self.console.print(Text(f"  … {_clock(tuner)} {phase:<18} {label} ({steps} steps)",
                                    style="dim"), end="\r", soft_wrap=True)

    def trial_done(self, tuner, t):
        base = tuner.first_baseline()
        if t.ok:
            gain = (f"  {t.samples_per_s / base.samples_per_s - 1:+.1%} vs baseline"
                    if base is not None and base is not t else "")
            what = f"{num(t.samples_per_s)} samples/s {_pm(t.samples_per_s, t.ci)}{gain}"
        else:
            what = f"{t.status}: {t.message or ''}"
        if t.no_effect:
            what = f"no effect ({t.no_effect_text})"
        line = Text(f"  #{t.index:<3} {_clock(tuner)} {t.phase:<18} {t.label}  ")
        line.append(what, style=STATUS_STYLE.get("no effect" if t.no_effect else t.status,
                                                 ""))
        self.console.print(line, soft_wrap=True)

    def space(self, tuner):
        self.console.print(Text(f"  space: {space_text(tuner.space)}", style="dim"),
                           soft_wrap=True)

    def accepted(self, tuner, best, incumbent):
        self.console.print(Text(f"  → new best: {best.label} ({num(best.samples_per_s)} vs "
                                f"{num(incumbent.samples_per_s)} samples/s)", style="bold"),
                           soft_wrap=True)


def space_text(space) -> str:
    """The knobs and their candidate values, as the knob races try them: the batch size
    searched on a ladder from the job's own (tune/batch.py); said before the advice is
    known, that a setting it names races first, whatever its values (helper-34: 'num_workers
    {0,1,2}, batch_size {32}' printed, then num_workers=3 and batch sizes 16-256 tried)."""
    knobs = []
    for k in space.knobs.values():
        if k.name == "batch_size":
            knobs.append(f"batch_size on a ladder from {_values(k.values)}")
        else:
            knobs.append(f"{k.name} {_values(k.values)}")
    if not knobs:
        return "nothing to tune"
    return ", ".join(knobs) + " (a setting the advice names races first, at its own values)"


def render_record(record: dict, console: Optional[Console] = None, rows: int = MAX_ROWS):
    """The tuning record: header, ranked table, best setting, speedup, notes."""
    console = console or Console()
    command = record.get("command") or {}
    target = command.get("script") or "?"
    argv = " ".join([f"-m {target}" if command.get("module") else target,
                     *command.get("args", [])])
    opts = record.get("options") or {}
    console.print(Text(f"paddletune tune {argv}", style="bold"), soft_wrap=True)
    console.print(f"{len(record.get('trials', []))} trials in "
                  f"{duration(record.get('elapsed_s'))} (budget "
                  f"{duration(opts.get('budget_s'))}, objective {opts.get('objective')}); "
                  f"{record.get('stop_reason') or record.get('status')}", soft_wrap=True)
    print_table(console, ranking_table(record, rows))
    _above_best(record, console)
    _no_effect(record, console)
    _best(record, console)
    _advice(record, console)
    for note in record.get("notes") or []:
        console.print(Text(f"note: {note}", style="dim"), soft_wrap=True)


def print_table(console: Console, table: Table):
    """`table` on a terminal within its width; elsewhere (a pipe, a file: nothing there
    wraps long lines) at the table's natural width, so no cell wraps, least of all inside
    a setting's name."""
    if console.is_terminal:
        console.print(table)
        return
    natural = Measurement.get(console, console.options.update_width(UNBOUNDED), table)
    options = console.options.update_width(max(console.width, natural.maximum))
    lines = console.render_lines(table, options, pad=False)
    console.print(Segments(segment for line in lines
                           for segment in (*_rstripped(line), Segment.line())),
                  soft_wrap=True, end="")


def _rstripped(line):
    """A rendered line without its trailing blanks (the table's padding to its width)."""
    segments = list(line)
    while segments and not segments[-1].control and not segments[-1].text.strip():
        segments.pop()
    if segments and not segments[-1].control:
        last = segments.pop()
        segments.append(Segment(last.text.rstrip(), last.style))
    return segments


def ranking_table(record: dict, rows: int = MAX_ROWS) -> Table:
    table = Table(title="Settings, best first", title_justify="left", show_edge=False,
                  pad_edge=False)
    for name, justify in (("#", "right"), ("samples/s", "right"), ("±", "right"),
                          ("trials", "right"), ("vs base", "right"), ("peak mem", "right"),
                          ("status", "left"), ("setting", "left")):
        table.add_column(name, justify=justify, overflow="fold",
                         no_wrap=name != "setting")
    ranking = record.get("ranking") or []
    for rank, r in enumerate(ranking[:rows], 1):
        status = r.get("status") or "?"
        table.add_row(str(rank), num(r.get("samples_per_s")),
                      _pm(r.get("samples_per_s"), r.get("ci")),
                      str(r["trials"]) if r.get("trials") else "",
                      _signed(r.get("vs_baseline")), nbytes(r.get("peak_bytes")),
                      Text(status, style=STATUS_STYLE.get(status, "")),
                      ("* " if r.get("best") else "") + (r.get("label") or ""))
    if len(ranking) > rows:
        table.add_row("", "", "", "", "", "", "", f"... {len(ranking) - rows} more")
    return table


def _above_best(record, console):
    """Why each setting ranked above the best (*) was not taken (older records say not)."""
    for rank, r in enumerate(record.get("ranking") or [], 1):
        if r.get("above_best"):
            console.print(Text(f"#{rank} above the best: {r.get('label')}: {r['above_best']}",
                               style="dim"), soft_wrap=True)


def _no_effect(record, console):
    """Why each setting ranked "no effect" changed nothing, in the runtime's words."""
    for r in record.get("ranking") or []:
        items = r.get("no_effect") or []
        if r.get("status") != "no effect" or not items:
            continue
        why = "; ".join(_idle_text(item) for item in items)
        console.print(Text(f"no effect: {r.get('label')}: {why}", style="yellow"),
                      soft_wrap=True)


def _idle_text(item) -> str:
    """One override that changed nothing: an object of schema 2, a string of schema 1."""
    if isinstance(item, str):
        return item
    return f"{item.get('section')}.{item.get('key')}: {item.get('why') or item.get('code')}"


def _best(record, console):
    best = record.get("best") or {}
    final = record.get("final")
    if not best.get("setting"):
        console.print(Text("Best: the job's own settings (nothing measured beat them outside "
                           "the noise).", style="bold"), soft_wrap=True)
    else:
        console.print(Text(f"Best: {best.get('label')}", style="bold"), soft_wrap=True)
        console.print("  as environment variables (no code change):")
        for line in best.get("exports") or []:
            console.print(f"    {line}", soft_wrap=True, highlight=False, markup=False)
        console.print("  or in the script:")
        for line in best.get("code") or []:
            console.print(f"    {line}", soft_wrap=True, highlight=False, markup=False)
    if final:
        _speedup(record, final, console)


def _speedup(record, final, console):
    """The speedup, and what it rests on: the final's interleaved pairs, or (no pair ran)
    the search's own trials, said as such with their counts, lengths and times, and not
    confirmed (older records called those "interleaved pairs", confirmed: their trials'
    phase tells)."""
    trials = {t.get("index"): t for t in record.get("trials") or []}
    base = [trials[i] for i in final.get("baseline_trials") or [] if i in trials]
    best = [trials[i] for i in final.get("best_trials") or [] if i in trials]
    basis = final.get("basis")
    if basis is None:  # (older records: the phase of the trials it is over)
        basis = "final pairs" if all(t.get("phase") == "final" for t in base + best) \
            else "search trials"
    paired = basis == "final pairs"
    if paired:
        drift = final.get("drift")
        how = (f"{final['pairs']} interleaved pair(s) with the baseline re-measured"
               + (f"; the baseline drifted {drift:+.1%} since the start"
                  if drift is not None else ""))
    else:
        how = f"from the search's trials, none re-measured in a final pair: {_sides(base, best)}"
    console.print(Text(
        f"Speedup: {final['speedup']:.2f}x ± {final['ci']:.2f} "
        f"({num(final['baseline_samples_per_s'])} -> {num(final['best_samples_per_s'])} "
        f"samples/s, {how}); peak memory {nbytes(final.get('baseline_peak_bytes'))} -> "
        f"{nbytes(final.get('peak_bytes'))}", style="bold"), soft_wrap=True)
    if not paired:
        console.print(Text(f"  Not confirmed: {_unpaired(record, final)}", style="yellow"),
                      soft_wrap=True, highlight=False, markup=False)
    elif final.get("confirmed") is False:
        console.print(Text(
            "  Not confirmed: these trials leave the gain inside the noise (the search's "
            "trials measured more); tune again with a larger --budget, or measure both "
            "settings longer, before relying on it.", style="yellow"), soft_wrap=True)


def _sides(base, best) -> str:
    """The baseline's and the best's trials under a speedup: how many, of which lengths,
    when (and how long after the baseline's last the best's first ended)."""
    text = f"the baseline's {_side(base)} against the best's {_side(best)}"
    ends = [t.get("end_s") for t in base + best]
    if base and best and None not in ends:
        gap = min(t["end_s"] for t in best) - max(t["end_s"] for t in base)
        if gap > 0:
            text += f", {duration(gap)} later"
    return text


def _side(trials) -> str:
    steps = sorted({t.get("steps") for t in trials if t.get("steps")})
    lengths = (f"{steps[0]}" if len(steps) == 1 else f"{steps[0]}-{steps[-1]}") + " steps" \
        if steps else "? steps"
    text = f"{len(trials)} trial{'s' * (len(trials) != 1)} of {lengths}"
    ends = sorted(t["end_s"] for t in trials if t.get("end_s") is not None)
    if ends and len(ends) == len(trials):
        text += f" at {_at(ends[0])}" + (f"-{_at(ends[-1])}" if len(ends) > 1 else "")
    return text


def _unpaired(record, final) -> str:
    """Why a speedup from the search's trials is not confirmed, and what to run instead."""
    why = final.get("no_pairs")
    if why is None:  # (older records: interrupted, a final trial failed, else the budget)
        why = "interrupted" if record.get("status") == "interrupted" else \
            "failed" if any(t.get("phase") == "final" and t.get("status") != "ok"
                            for t in record.get("trials") or []) else "budget"
    outside = final.get("outside_noise", final.get("confirmed"))
    noise = {True: " (the search's trials put the gain outside their noise, but they were "
                   "not taken alternately, and a race's winner reads high in the trials that "
                   "chose it)",
             False: " (and the search's trials leave the gain inside their noise)"}.get(
        outside, "")
    budget = duration((record.get("options") or {}).get("budget_s"))
    said, again = _UNPAIRED.get(why, _UNPAIRED["failed"])
    return (f"{said}{noise}; {again.format(budget=budget)}, or measure both settings "
            f"alternately, a few runs each: `{_profile_command(record)}` with and without the "
            f"exports above, before relying on it.")


_UNPAIRED = {  # a final without a pair: why, and what to run instead of trusting it
    "budget": ("the budget ended before the final interleaved pairs",
               "run `paddletune tune` with a larger --budget (this one: {budget})"),
    "interrupted": ("the tuning was stopped before the final interleaved pairs",
                    "run `paddletune tune` again and let it finish"),
    "failed": ("the final interleaved pairs' trials failed (the record's trials say how)",
               "run `paddletune tune` again")}


def _profile_command(record) -> str:
    """`paddletune profile` of the tuned job for 30 s of steps, as the record ran it."""
    command = record.get("command") or {}
    target = command.get("script") or "SCRIPT"
    args = command.get("args") or []
    return " ".join(["paddletune profile --duration 30s",
                     *(["-m"] if command.get("module") else []), shlex.quote(target),
                     *(["--", *map(shlex.quote, args)] if args else [])])


def _at(seconds) -> str:
    """A time since the tuning started, as the progress lines show it (m:ss)."""
    s = int(seconds)
    return f"{s // 60}:{s % 60:02d}"


def _advice(record, console):
    """Each piece of advice the search tried: predicted (with its range) against measured."""
    rows = record.get("advice") or []
    if rows:
        console.print("Advice, predicted and measured by the search (against the baseline, "
                      "trials of the same length):", soft_wrap=True)
    for row in rows:
        console.print(f"  {row.get('advice')} ({row.get('label')}): {_advice_figures(row)}",
                      soft_wrap=True, highlight=False, markup=False)


def _advice_figures(row) -> str:
    predicted, got = row.get("predicted"), row.get("measured")
    low, high = (row.get("range") or [None, None])[:2]
    if predicted is None:
        said = "no figure predicted"
    elif low is not None and high is None:
        said = f"predicted at least {low:.2f}x"
    else:
        said = f"predicted {predicted:.2f}x" + (f" ({low:.2f}x-{high:.2f}x)" if low else "")
    if got is None:
        return f"{said}; not measured against the baseline"
    ci = row.get("measured_ci")
    measured = f"measured {got:.2f}x" + (f" ± {ci:.2f}" if ci else "")
    return f"{said}, {measured}{_VERDICTS[_verdict(row)]}"


_VERDICTS = {"within": ": within its range", "outside": ": outside its range",
             "noise": ": outside its range, though inside these trials' noise", None: ""}


def _verdict(row) -> Optional[str]:
    """The row's verdict (records before "verdict" said only within_range)."""
    if "verdict" in row:
        return row["verdict"]
    return {True: "within", False: "outside", None: None}[row.get("within_range")]


def _isatty(file) -> bool:
    try:
        return file.isatty()
    except (AttributeError, ValueError, OSError):
        return False


def _pm(value, ci) -> str:
    if ci is None or not value:
        return NA
    return f"±{ci / value:.1%}"


def _signed(share) -> str:
    return f"{share:+.1%}" if isinstance(share, (int, float)) else NA


def _clock(tuner) -> str:
    s = int(tuner.elapsed_s())
    return f"{s // 60}:{s % 60:02d}"


def _values(values) -> str:
    return "{" + ",".join(str(v).lower() if isinstance(v, bool) else str(v)
                          for v in values) + "}"
