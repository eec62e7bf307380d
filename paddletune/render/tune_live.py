"""The `paddletune tune` live display for a terminal: redrawn in place (rich Live, inline, a
few times a second, so the running trial's timer moves while the tuner waits on it) below
the command line; its last frame stays on the screen above the ranked table.

    paddletune tune · train.py · running · phase knob:capacity
    elapsed 1:15 of 5:00 ━━━━━━━━━━────────────────────────────── 25% · 9 trials done · 3 failed
    ╭─ Running ──────────────────────╮╭─ Best so far ───────────────────────────────────────╮
    │ #10 num_workers=2 capacity=8   ││ num_workers=2 (accepted at #6)                      │
    │ knob:capacity · 80 steps       ││ 1,290 samples/s · +29.0% ±3.2% vs baseline          │
    │ ⠦ 1.2 s of ~3.1 s ━━━━━─────── ││ noise ±1.4%/trial (2 repeats) · gains count > +2.0% │
    ╰────────────────────────────────╯╰─────────────────────────────────────────────────────╯
    ╭─ Last trials (1 earlier) · * the best so far ────────────────────────────────────────╮
    │   #  setting                phase          steps  samples/s      ±  vs base  status  │
    │   7  num_workers=2 capac…   knob:capacity     40          —      —        —  oom     │
    │   ...                                                                                │
    ╰──────────────────────────────────────────────────────────────────────────────────────╯
    ✓ accepted #6 num_workers=2  +29.0% vs baseline
    Ctrl-C stops and keeps the best so far (the record is saved after every trial)

Figures: a trial's ± is its own 95% interval (batch means over its steady steps); "vs base"
compares with the first baseline; the best so far is the incumbent's latest trial at its
longest length, its ± the 95% interval of the gain and the noise the tuner's (the spread of
repeated trials, else the batch-means interval). Colours as the report's: green ok, red
failed (oom, timeout, crashed), yellow no effect / too full / no steps; each also says so
in words.
"""

import os
import threading
import time
from typing import List, Optional

from rich import box
from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.spinner import Spinner
from rich.table import Table
from rich.text import Text

from ..tune.compare import Z
from .dashboard_panels import _line
from .fmt import NA, nbytes, num
from .tune import STATUS_STYLE

MIN_ROWS, MAX_ROWS = 3, 8  # the last trials' table
ACCEPTED_SHOWN = 3
WIDE = 80  # from this width, the running trial and the best so far side by side


class TuneLive:
    """The live progress of a tuning (the Tuner's progress object) on a terminal `console`;
    a context manager: the display runs inside `with`, and stops cleanly on the way out
    (Ctrl-C, an exception), its last frame left on the screen."""

    def __init__(self, console: Console, title: str, budget_s: float, hz: float = 4.0,
                 clock=time.monotonic):
        self.console, self.title, self.budget_s = console, title, budget_s
        self.hz, self.clock = hz, clock
        self.tuner = None
        self.running: Optional[dict] = None  # the trial being run
        self.stopped: Optional[dict] = None  # the trial that Ctrl-C / an error cut short
        self.changes: List[dict] = []  # the accepted changes
        self.stage = "baseline"
        self.searching = False  # after the baseline's repeats (space() called)
        self.finished = False
        self.live: Optional[Live] = None
        self.spinner = Spinner("dots", style="cyan")  # one, so that it turns between frames
        self._lock = threading.Lock()  # the tuner's thread writes, the refresh thread draws

    # --- the display -----------------------------------------------------------------------------
    def __enter__(self):
        self.live = Live(console=self.console, get_renderable=self._frame_safe,
                         auto_refresh=True, refresh_per_second=self.hz, transient=False,
                         redirect_stdout=True, redirect_stderr=True)
        self.live.start(refresh=True)
        return self

    def __exit__(self, exc_type, exc, tb):
        with self._lock:
            self.finished = True
            if self.running is not None:
                self.stopped = {**self.running, "ran_s": self.clock() - self.running["start"]}
                self.running = None
        if self.live is not None:
            live, self.live = self.live, None
            thread = getattr(live, "_refresh_thread", None)
            live.stop()  # the final frame (with the outcome), the cursor shown again
            if thread is not None:  # (stopped: it draws nothing more; gone within 1/hz s)
                thread.join(timeout=2.0)
        return False

    def _refresh(self):
        live = self.live
        if live is not None:
            try:
                live.refresh()
            except Exception:  # a frame that fails to draw must not stop the tuning
                pass

    def _frame_safe(self):
        try:
            try:  # the terminal's size now (a resize; COLUMNS/LINES may be stale)
                width, height = os.get_terminal_size(self.console.file.fileno())
                self.console.size = (width, height)
            except (OSError, ValueError, AttributeError):
                width, height = self.console.size
            return self.frame(width, height)
        except Exception as err:  # drawn by the refresh thread: never let it die
            return Text(f"paddletune tune · (display error: {err})", style="dim")

    # --- the Tuner's progress calls --------------------------------------------------------------
    def trial_started(self, tuner, label, phase, steps):
        with self._lock:
            self.tuner = tuner
            self.running = {"index": len(tuner.trials) + 1, "label": label, "phase": phase,
                            "steps": steps, "start": self.clock(),
                            "expected_s": _expected(tuner, steps)}
            self._stage(phase)
        self._refresh()

    def trial_done(self, tuner, t):
        with self._lock:
            self.tuner, self.running = tuner, None
        self._refresh()

    def space(self, tuner):
        with self._lock:
            self.tuner, self.searching, self.stage = tuner, True, "advice"
        self._refresh()

    def accepted(self, tuner, best, incumbent):
        with self._lock:
            self.tuner = tuner
            base = tuner.first_baseline()
            self.changes.append({"index": best.index, "label": best.label,
                                 "gain": _gain(best, base), "over": _gain(best, incumbent),
                                 "from": incumbent.label if incumbent is not None else None})
        self._refresh()

    def _stage(self, phase):
        family = phase.split(":")[0] if phase.startswith(("advice", "batch")) else phase
        if phase in ("baseline", "incumbent") and self.searching:
            return  # the incumbent re-measured within a race: the race's phase goes on
        self.stage = family

    # --- the frame -------------------------------------------------------------------------------
    def frame(self, width: int = 100, height: int = 30):
        """The whole display for a terminal `width` wide, at most `height` tall."""
        with self._lock:
            tuner, running, stopped = self.tuner, self.running, self.stopped
            accepted, stage, finished = list(self.changes), self.stage, self.finished
        trials = list(tuner.trials) if tuner is not None else []
        base = tuner.first_baseline() if tuner is not None else None
        fixed = (2 + 5 + 3 + max(1, min(len(accepted), ACCEPTED_SHOWN)) + 1
                 + (0 if width >= WIDE else 5))  # all but the table's rows
        rows = max(MIN_ROWS, min(MAX_ROWS, height - 1 - fixed))
        parts = [*self._header(tuner, trials, stage, finished, width)]
        inner = (width * 2 // 5 if width >= WIDE else width) - 4  # the running panel's text
        left = _running_panel(tuner, running, stopped, self.clock(), finished, self.spinner,
                              inner)
        right = _best_panel(tuner, base, accepted, finished)
        if width >= WIDE:
            grid = Table.grid(expand=True)
            grid.add_column(ratio=2)
            grid.add_column(ratio=3)
            grid.add_row(left, right)
            parts.append(grid)
        else:
            parts += [left, right]
        parts.append(_trials_panel(tuner, trials, base, rows, wide=width >= 90,
                                   pad=not finished))
        parts += _accepted_lines(accepted, finished)
        parts.append(_footer(tuner, finished))
        return Group(*parts)

    def _header(self, tuner, trials, stage, finished, width):
        status = _status(tuner, finished)
        first = _line(("paddletune tune", "bold"), f" · {self.title} · ", status,
                      f" · phase {stage}")
        elapsed = tuner.elapsed_s() if tuner is not None else 0.0
        failed = sum(1 for t in trials if _trial_status(tuner, t) != "ok")
        share = min(elapsed / self.budget_s, 1.0) if self.budget_s else 0.0
        bar_width = max(10, min(40, width - 60))
        grid = Table.grid(padding=(0, 1))
        grid.add_column(no_wrap=True)
        grid.add_column(width=bar_width, no_wrap=True)
        grid.add_column(no_wrap=True, overflow="ellipsis")
        n = len(trials)
        done = Text(f"{share:.0%} · {n} trial{'s' if n != 1 else ''} done · ")
        done.append(f"{failed} failed", style="red" if failed else "")
        grid.add_row(f"elapsed {_clock(elapsed)} of {_clock(self.budget_s)}",
                     _bar(share, bar_width, "cyan"), done)
        return [first, grid]


# --- panels --------------------------------------------------------------------------------------
def _running_panel(tuner, running, stopped, now, finished, spinner, inner=36) -> Panel:
    if running is not None:
        ran = now - running["start"]
        expected = running.get("expected_s")
        clock = _timer(ran) + (f" of ~{_timer(expected)}" if expected else "")
        timer = Table.grid(padding=(0, 1))
        timer.add_column(no_wrap=True)
        timer.add_column(no_wrap=True)
        cells = [spinner, Text(clock, style="bold")]
        room = min(14, inner - len(clock) - 4)  # the spinner, the gaps, a margin
        if expected and room >= 4:  # how far along it should be: a hang shows a full bar
            timer.add_column(width=room, no_wrap=True)
            cells.append(_bar(ran / expected, room, "cyan" if ran <= expected else "yellow"))
        timer.add_row(*cells)
        body = [_line((f"#{running['index']} ", "bold"), (running["label"], "bold")),
                _line(f"{running['phase']} · {running['steps']:,} steps"), timer]
        return _panel("Running", body)
    if stopped is not None:
        body = [_line((f"#{stopped['index']} ", "bold"), stopped["label"]),
                _line(f"{stopped['phase']} · {stopped['steps']:,} steps"),
                _line((f"stopped after {_timer(stopped['ran_s'])} (not counted)", "red"))]
        return _panel("Running", body)
    if finished:
        return _panel("Running", [_line(("no trial running: the tuning ended", "dim")),
                                  _line(""), _line("")])
    what = "the next trial" if tuner is not None and tuner.trials else "the baseline"
    return _panel("Running", [_line((f"starting {what}…", "dim")), _line(""), _line("")])


def _best_panel(tuner, base, accepted, finished=False) -> Panel:
    if (tuner is None or base is None) and finished:
        return _panel("Best so far", [_line(("no baseline measured", "dim")), _line(""),
                                      _line("")])
    if tuner is None or base is None:
        return _panel("Best so far", [_line(("nothing measured yet", "dim")),
                                      _line(("the baseline runs first, 3 times: their spread "
                                             "is the noise", "dim")), _line("")])
    incumbent = tuner.incumbent
    best = (tuner.latest(incumbent) if incumbent else None) or base
    if not incumbent:
        head = _line(("the job's own settings", "bold"), (" (nothing beat them yet)", "dim"))
    else:
        when = next((f" (accepted at #{a['index']})" for a in reversed(accepted)
                     if a["label"] == best.label), "")
        head = _line((best.label, "bold green"), (when, "dim"))
    rate = _line((f"{num(best.samples_per_s)} samples/s", "bold"))
    memory = getattr(getattr(tuner, "options", None), "objective", None) == "memory"
    if memory:  # the objective is the peak, keeping --floor of the baseline's samples/s
        rate.append(f" · peak {nbytes(best.peak_bytes)}", style="bold")
        if best is not base and best.peak_bytes and base.peak_bytes:
            rate.append(f" ({best.peak_bytes / base.peak_bytes - 1:+.1%} vs baseline)")
    elif best is not base:
        gain = best.samples_per_s / base.samples_per_s - 1
        rate.append(f" · {gain:+.1%}", style="green" if gain > 0 else "red")
        pm = _safe(lambda: Z * tuner.noise([best], [base]) * (1 + gain))
        rate.append(f" ±{pm:.1%}" if pm is not None else "")
        rate.append(" vs baseline")
    else:
        rate.append(" · the baseline", style="dim")
    noise = _safe(lambda: Z * tuner.trial_sd(best))
    bar = _safe(lambda: tuner.options.min_gain if memory else
                max(tuner.options.min_gain, Z * tuner.noise([best], [best])))
    repeats = _repeats(tuner.trials)
    parts = []
    if noise is not None:
        parts.append(f"noise ±{noise:.1%}/trial (" + (
            f"{repeats} repeat{'s' if repeats != 1 else ''})" if repeats else
            "its own interval)"))
    if bar is not None:
        parts.append(f"gains count > {bar:+.1%}")
    return _panel("Best so far", [head, rate, _line((" · ".join(parts), "dim"))])


def _trials_panel(tuner, trials, base, rows, wide=True, pad=True) -> Panel:
    """The last `rows` trials; `pad`: blank rows up to `rows` (a frame that keeps its height
    while the trials come)."""
    table = Table(box=None, pad_edge=False, show_edge=False, expand=True, padding=(0, 1),
                  header_style="bold")
    columns = (("#", "right", {"width": 3}),
               ("setting", "left", {"ratio": 1, "min_width": 16}),
               ("phase", "left", {"max_width": 16}), ("steps", "right", {}),
               ("samples/s", "right", {}), ("±", "right", {}), ("vs base", "right", {}),
               ("status", "left", {}))
    keep = [wide or name not in ("phase", "steps") for name, _, _ in columns]
    for (name, justify, kw), kept in zip(columns, keep):
        if kept:
            table.add_column(name, justify=justify, no_wrap=True, overflow="ellipsis", **kw)
    best_key = _key(tuner.incumbent) if tuner is not None and tuner.incumbent else None
    shown = trials[-rows:]
    for t in shown:
        status = _trial_status(tuner, t)
        setting = ("* " if best_key is not None and _key(t.setting) == best_key else "") + \
            (t.label or "(the job's own)")
        ok = t.samples_per_s is not None and t.status == "ok"
        if t is base:
            vs = "base"
        elif ok and base is not None and base.samples_per_s:
            vs = f"{t.samples_per_s / base.samples_per_s - 1:+.1%}"
        else:
            vs = NA
        cells = (str(t.index), setting, t.phase, f"{t.steps:,}",
                 num(t.samples_per_s) if ok else NA,
                 f"±{t.ci / t.samples_per_s:.1%}" if ok and t.ci is not None
                 and t.samples_per_s else NA,
                 vs, Text(status, style=STATUS_STYLE.get(status, "")))
        table.add_row(*(c for c, kept in zip(cells, keep) if kept))
    if not shown:
        table.add_row(*([""] * sum(keep)))
    for _ in range(rows - max(len(shown), 1) if pad else 0):
        table.add_row(*([""] * sum(keep)))
    earlier = len(trials) - len(shown)
    title = "Last trials" + (f" ({earlier} earlier)" if earlier > 0 else "") + \
        (" · * the best so far" if best_key is not None else "")
    return Panel(table, title=title, title_align="left", box=box.ROUNDED, padding=(0, 1))


def _accepted_lines(accepted, finished=False) -> List[Text]:
    """A line per accepted change (the latest ACCEPTED_SHOWN), or one saying there is none."""
    if not accepted:
        return [_line(("accepted: ", "bold"), ("nothing" if finished else "nothing yet (a "
                                               "change counts when its gain clears the noise)",
                                               "dim"))]
    lines = []
    earlier = len(accepted) - ACCEPTED_SHOWN
    for a in accepted[-ACCEPTED_SHOWN:]:
        text = _line(("✓ accepted ", "bold green"), (f"#{a['index']} ", "dim"),
                     (a["label"], "bold"))
        if a["gain"] is not None:
            text.append(f"  {a['gain']:+.1%} vs baseline")
        if a["over"] is not None and a["from"] and a["from"] != "baseline":
            text.append(f", {a['over']:+.1%} over {a['from']}", style="dim")
        lines.append(text)
    if earlier > 0:
        lines[0].append(f"  ({earlier} earlier)", style="dim")
    return lines


def _footer(tuner, finished) -> Text:
    if not finished:
        return Text("Ctrl-C stops and keeps the best so far (the record is saved after every "
                    "trial)", style="dim", no_wrap=True, overflow="ellipsis")
    reason = getattr(tuner, "stop_reason", None) if tuner is not None else None
    text = Text(no_wrap=True, overflow="ellipsis")
    text.append(f"ended: {reason or 'stopped'}", style="bold")
    text.append(" · the ranked settings follow", style="dim")
    return text


# --- helpers -------------------------------------------------------------------------------------
def _status(tuner, finished):
    state = getattr(tuner, "status", "running") if tuner is not None else "running"
    if finished and state == "running":
        state = "stopped"
    return (state, {"running": "green", "complete": "bold green",
                    "interrupted": "bold yellow"}.get(state, "bold red"))


def _trial_status(tuner, t) -> str:
    """As the record's ranking says it: no effect / too full for a run that changed nothing
    or left no memory headroom."""
    if t.status == "ok" and t.no_effect:
        return "no effect"
    if t.status == "ok" and tuner is not None and not _safe(lambda: tuner.fits(t), True):
        return "too full"
    return t.status


def _repeats(trials) -> int:
    """Trials of a setting and length measured before (what the noise is estimated from)."""
    seen, repeats = set(), 0
    for t in trials:
        if t.status != "ok" or t.no_effect:
            continue
        k = (_key(t.setting), t.steps)
        repeats += k in seen
        seen.add(k)
    return repeats


def _expected(tuner, steps) -> Optional[float]:
    per_step = getattr(tuner, "per_step_s", None)
    if not per_step:
        return None
    return (getattr(tuner, "overhead_s", 0.0) or 0.0) + per_step * steps


def _gain(t, ref) -> Optional[float]:
    if t is None or ref is None or not t.samples_per_s or not ref.samples_per_s:
        return None
    return t.samples_per_s / ref.samples_per_s - 1


def _key(setting) -> str:
    return repr(sorted((setting or {}).items()))


def _safe(fn, default=None):
    try:
        return fn()
    except Exception:
        return default


def _bar(share, width, style) -> Text:
    """A bar of `share` (0..1) `width` long: drawn part and rest in glyphs of their own, so a
    terminal without colours still shows it."""
    done = int(round(min(max(share, 0.0), 1.0) * width))
    text = Text("━" * done, style=style, no_wrap=True)
    text.append("─" * (width - done), style="dim")
    return text


def _panel(title, lines) -> Panel:
    return Panel(Group(*lines), title=title, title_align="left", box=box.ROUNDED,
                 padding=(0, 1), height=len(lines) + 2)


def _timer(seconds) -> str:
    """A running trial's time: tenths of a second under a minute (trials are short)."""
    return f"{seconds:.1f} s" if seconds < 60 else _clock(seconds)


def _clock(seconds) -> str:
    s = int(max(seconds or 0, 0))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else \
        f"{s // 60}:{s % 60:02d}"
