"""The live dashboard: panels drawn from a `paddletune.live` LiveState, the full-screen
terminal view, and the plain one-line form for a non-terminal.

Colours (each also has a word or glyph, so a colourless terminal loses nothing):
  green   fine: compute-bound, queue mostly full, memory under 70% of the capacity
  yellow  worth a look: moderately input-bound, queue under half full, memory 70-85%,
          no new record for 10 s
  red     a problem: highly input-bound, most pops found the queue empty, memory at 85% or
          more (memory pressure, as the advisors define it) or out of memory, exit != 0
  dim     no data (N/A, with the reason)
Step-time segments: ▓ wait (red), ▒ feed (yellow), █ compute (green), ░ fetch (blue),
· other (magenta).
"""

import os
import sys
import time
from pathlib import Path

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from .dashboard_panels import (SEGMENTS, _line, _num2, _rate, _share, advice_panel,
                               breakdown_panel, cpu_panel, device_plain, memory_panel,
                               ops_panel, parallel_panel, reader_panel, sparkline,
                               stacked_bar, throughput_panel)
from ..live.state import LiveState, Progress, Status
from .fmt import NA, duration, finite, ms, nbytes

__all__ = ["SEGMENTS", "PlainLines", "Screen", "plain_line", "render_dashboard", "sparkline",
           "stacked_bar", "watch"]

MIN_WIDTH, MIN_HEIGHT = 80, 24
ADVICE_LINES = 3  # the verdict and two advice lines


# --- the whole screen ----------------------------------------------------------------------------
def render_dashboard(state: LiveState, width: int = MIN_WIDTH,
                     height: int = MIN_HEIGHT) -> Group:
    """The dashboard for a terminal of `width` x `height` (at least 80 x 24 is readable)."""
    width, height = max(width, 40), max(height, 12)
    panels = [throughput_panel, breakdown_panel, reader_panel, memory_panel, cpu_panel,
              ops_panel] + ([parallel_panel] if state.parallel is not None else [])
    rows = (len(panels) + 1) // 2
    advice_lines = ADVICE_LINES + (1 if height >= 30 else 0)
    lines = max(2, (height - 3 - (advice_lines + 2)) // rows - 2)
    inner = width // 2 - 4  # a half-width panel's text width (borders and padding)
    grid = Table.grid(expand=True)
    grid.add_column(ratio=1)
    grid.add_column(ratio=1)
    made = [make(state, lines, inner) for make in panels]
    for i in range(0, len(made), 2):
        grid.add_row(*made[i:i + 2])
    return Group(*header(state, width), grid, advice_panel(state, advice_lines, width - 4),
                 footer(state))


# --- header and footer ---------------------------------------------------------------------------
def header(state: LiveState, width):
    status = state.status
    said = _status_text(status)
    room = width - len("paddletune live ·  · ") - len(said[0])  # the status goes whole
    first = _line(("paddletune live", "bold"), f" · {_fit(state.title or '?', room)} · ", said)
    p = state.progress
    parts = [f"elapsed {duration(state.now_s)}", _steps_text(p), _eta_text(status, p)]
    if state.log_path:
        parts.append(f"script output: {state.log_path}")
    return [first, _line(" · ".join(part for part in parts if part))]


def _fit(title: str, room: int) -> str:
    """`title` cut to `room` characters (no fewer than 12) with an ellipsis."""
    room = max(room, 12)
    return title if len(title) <= room else title[:room - 1] + "…"


def _eta_text(status: Status, p: Progress) -> str:
    """The time left while the job runs: from its total (--total-steps, else --steps) and
    the current rate; "" once it ended, or while the profile's header (which holds the
    total) has not arrived yet."""
    if status.state in ("finished", "cut short", "died", "waiting"):
        return ""
    if p.total:
        return f"ETA {duration(p.eta_s) if finite(p.eta_s) else NA}"
    return "ETA N/A (no --total-steps/--steps)"


# the job goes on (or may)
RUNNING = ("running", "stalled", "reader stalled", "no step", "evaluating")


def _status_text(status: Status):
    kind = status.state
    if kind == "finished":
        e = status.exit
        code, reason = (e.status, e.reason) if e is not None else (None, "unknown")
        return (f"finished: exit {code} ({reason})", "green" if code == 0 else "bold red")
    if kind == "stalled":
        return (f"no new record for {duration(status.idle_s)}", "yellow")
    if kind == "reader stalled":
        return (f"reader stalled: no batch for {duration(status.quiet_s)} ({status.loader}'s "
                f"queue is empty, nothing pushed)", "bold yellow")
    if kind == "no step":
        return (f"no step for {duration(status.quiet_s)}", "yellow")
    if kind == "evaluating":
        return (f"evaluating: {status.loader}'s pass for {duration(status.quiet_s)}, no "
                f"training step meanwhile", "cyan")
    if kind == "died":
        return (f"died: pid {status.pid} is gone, no exit record (SIGKILL? the OOM killer?)",
                "bold red")
    if kind == "waiting":
        return ("waiting for the profile", "dim")
    if kind == "cut short":
        return ("ended without an exit record (killed?)", "bold red")
    return ("running", "green")


def _steps_text(p: Progress):
    done, total = p.steps, p.total
    if total:
        return f"step {done:,} of {total:,} ({min(done / total, 1.0):.0%})"
    return f"step {done:,}"


def footer(state) -> Text:
    stop = ("Ctrl-C stops the job (profile kept)" if state.mode == "live"
            else "Ctrl-C stops watching")
    text = Text(no_wrap=True, overflow="ellipsis")
    for word, style in (("ok", "green"), ("watch", "yellow"), ("problem", "red"),
                        ("no data", "dim")):
        text.append("■ ", style=style)
        text.append(word + " ")
    text.append(f"· {stop}", style="dim")
    return text


# --- plain lines (not a terminal) ----------------------------------------------------------------
def plain_line(state: LiveState) -> str:
    """One line of the main figures, for logs and pipes."""
    p, tp, status = state.progress, state.throughput, state.status
    parts = [f"{duration(state.now_s)}", _steps_text(p)]
    if status.state in RUNNING and p.total and finite(p.eta_s):
        parts.append(f"ETA {duration(p.eta_s)}")
    parts.append(f"{_rate(tp.steps_per_s if tp else None)} steps/s")
    if tp is not None and finite(tp.samples_per_s):
        parts.append(f"{_rate(tp.samples_per_s)} samples/s")
    b = state.breakdown
    if tp is not None and tp.scope:  # the summary's figures: say which, with its step time
        parts[-1] += f" ({tp.scope})"
        if b is not None and b.scope:
            parts.append(f"step {b.cycle_s * 1e3:.2f} ms ({b.scope})")
    if b is not None and b.cycle_s > 0:
        parts.append(" ".join(f"{k} {v / b.cycle_s:.0%}" for k, v in b.parts))
    if state.device is not None and state.device.figures is not None:  # (no N/A: no room)
        parts.append(device_plain(state.device))
    r = state.reader
    if r is not None and r.pops and r.made_in == "loop":  # no queue: each batch made as asked
        parts.append(f"batches made in the loop, {ms(r.wait_per_pop_s)} each")
    elif r is not None and r.pops:
        parts.append(f"queue {_num2(r.fill_mean)}/{r.capacity} empty {_share(r.empty_ratio)}")
    m = state.memory
    if m.pool_seen:
        parts.append(f"pool peak {nbytes(m.peak_allocated)}")
    if finite(m.rss):
        parts.append(f"RSS {nbytes(m.rss)}")
    verdict = state.advice.verdict if state.advice is not None else None
    parts.append(verdict.kind if verdict is not None else "verdict pending")
    if status.state != "running":
        parts.append(_status_text(status)[0])
    return "paddletune live: " + " · ".join(parts)


class PlainLines:
    """The non-terminal dashboard: a plain line every `every_s` seconds, and the last one."""

    def __init__(self, every_s: float = 5.0, clock=time.monotonic):
        self.every_s, self.clock, self.file, self._last = every_s, clock, None, None
        self.printed = None  # the state last printed

    def open(self, file):
        self.file = file

    def draw(self, state):
        now = self.clock()
        if state.status.state == "waiting":
            return  # nothing to say before the profile's header
        if self._last is None or now - self._last >= self.every_s:
            self._last = now
            self._print(state)

    def close(self, state=None):
        if state is not None:
            self._print(state)

    def _print(self, state):
        self.printed = state
        print(plain_line(state), file=self.file, flush=True)


class Screen:
    """The terminal dashboard: the alternate screen, redrawn in place (no clearing, so no
    flicker), sized to the terminal at every frame."""

    alternate = True  # draws on the alternate screen: close it before the job's last words

    def __init__(self, hz: float = 4.0):
        self.hz, self.console, self.live = hz, None, None

    def open(self, file):
        self.console = Console(file=file, force_terminal=True, highlight=False)
        self.live = Live(console=self.console, screen=True, auto_refresh=False,
                         redirect_stdout=False, redirect_stderr=False, transient=True)
        self.live.start()

    def draw(self, state):
        try:
            width, height = os.get_terminal_size(self.console.file.fileno())
            self.console.size = (width, height)
        except (OSError, ValueError, AttributeError):
            width, height = self.console.size
        self.live.update(render_dashboard(state, width, height), refresh=True)

    def close(self, state=None):
        if self.live is not None:
            self.live.stop()
            self.live = None


def final_frame(state, console: Console):
    """The last frame, printed once on the normal screen (`watch`, when the job ended)."""
    width, height = console.size
    console.print(render_dashboard(state, width, max(height, MIN_HEIGHT)))


def watch(path, hz: float = 4.0, window_s: float = 30.0, once: bool = False,
          plain: bool = False, file=None):
    """`paddletune watch`: follow `path` and draw until the job ends or Ctrl-C; the last
    frame (or line) stays on the normal screen. `once`: one frame of what is there now."""
    from ..live.loop import LiveLoop, follow_until_done
    from ..profile.paths import being_written
    file = file or sys.stdout
    console = Console(file=file, highlight=False)
    view = PlainLines() if plain else Screen(hz)
    part = being_written(Path(path))  # a new run at the path of an earlier profile
    loop = LiveLoop(part or path, view.draw if not once else (lambda state: None), hz,
                    window_s, extra={"mode": "watch"}, final_path=path if part else None)
    if once:
        state = loop.frame()
        while not loop.follower.at_end:
            state = loop.frame()
        _last(state, plain, console)
        return loop
    view.open(file)
    try:
        follow_until_done(loop)
    except KeyboardInterrupt:
        pass
    finally:
        view.close()
    if loop.last_state is not None and getattr(view, "printed", None) is not loop.last_state:
        _last(loop.last_state, plain, console)
    return loop


def _last(state, plain, console):
    if plain:
        console.file.write(plain_line(state) + "\n")
        console.file.flush()
    else:
        final_frame(state, console)
