"""`paddletune profile --live`: the usual session, with the dashboard following the profile
it writes (the same file `report` reads later: no second data path).

On a terminal the script's own output (its stdout and stderr, file descriptors 1 and 2, so
worker processes and C code too) goes to a log file next to the profile, `<profile>.log`
(`<profile>.output.log` for a profile named *.log), whose path the dashboard shows; the
dashboard draws on the terminal that stdout was. Elsewhere (a pipe, a CI log) nothing is
redirected and the dashboard prints a plain one-line summary to stderr every few seconds. The
loop's measured cost is written into the profile as the "dashboard" probe record (background
overhead), before the summary.
"""

import os
import sys
from contextlib import contextmanager
from pathlib import Path

from .. import session
from ..profile import writing_path
from ..profile.paths import replaceable
from ..profile.records import ProbeRecord
from .loop import LiveLoop

LIVE_HZ = 4.0


def log_path_for(profile_path) -> Path:
    """`<profile>.log` (the profile's suffix replaced), or `<profile>.output.log` when that
    is the profile itself (`-o run.log`; compared ignoring case, as a case-insensitive file
    system does), so the script's output never overwrites the profile."""
    profile = Path(profile_path)
    log = profile.with_suffix(".log")
    if log.name.casefold() == profile.name.casefold():
        log = profile.with_suffix(".output.log")
    return log


def run_live(options, screen, redirect: bool, hz: float = LIVE_HZ):
    """Run the session with `screen` (open(file)/draw(state)/close()) drawing the dashboard.
    Returns (Outcome, cost dict, the log path or None)."""
    path = session.prepare(options)
    log = log_path_for(path) if redirect else None
    log_now = writing_path(log) if log else None  # an earlier log is replaced only at the end
    extra = {"log_path": str(log_now) if log else None, "mode": "live"}
    with _output_to(log_now) as terminal:
        screen.open(terminal)
        loop = LiveLoop(writing_path(path), screen.draw, hz, extra=extra)
        stopped = {}

        def on_stop(submit):
            stopped.update(loop.stop())
            submit(_probe_record(stopped))
            if getattr(screen, "alternate", False):  # give the terminal back before the
                screen.close()  # summary: a second Ctrl-C from there on kills at once

        def on_kill():  # a second Ctrl-C: the terminal back before the process ends
            loop.stop()
            screen.close()

        loop.start()
        try:
            outcome = session.run(options, path, on_stop=on_stop, on_kill=on_kill)
        finally:
            if not stopped:
                stopped.update(loop.stop())
            loop.follower.moved_to(path)  # the profile took its final name
            screen.close(_final_state(loop))
    if log_now is not None and log_now != log and replaceable(log):
        os.replace(log_now, log)
    return outcome, stopped, log


def _final_state(loop):
    """The state at the job's end (the profile is complete now), for a last plain line."""
    if loop.error is not None:
        return loop.last_state
    loop.draw = lambda state: None
    try:
        return loop.frame()
    except Exception:  # noqa: BLE001
        return loop.last_state


def _probe_record(cost: dict) -> ProbeRecord:
    """The "dashboard" probe record: the loop's cost (LiveLoop.cost()) as its overhead, the
    whole of it as details."""
    return ProbeRecord(name="dashboard", available=True, reason=cost["error"],
                       overhead_s=cost["cpu_s"], in_step=False, details=cost)


@contextmanager
def _output_to(log):
    """fds 1 and 2 to `log` (None: unchanged); yields a file on the original stdout."""
    sys.stdout.flush()
    sys.stderr.flush()
    if log is None:
        yield sys.stderr
        return
    saved = os.dup(1), os.dup(2)
    terminal = os.fdopen(os.dup(saved[0]), "w", encoding="utf-8", errors="replace")
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0),
                 0o644)
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        yield terminal
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for f in (fd, *saved):
            os.close(f)
        terminal.close()
