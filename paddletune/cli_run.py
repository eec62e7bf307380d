"""What `paddletune profile`, `report` and `tune` do once their options are parsed
(paddletune/cli.py declares the commands): run the session, live or not, and leave with the
script's status; print a saved tuning record; check the tuning options and run the search
with its progress view."""

import os
import sys
from pathlib import Path
from typing import Optional

import typer

from .cli_support import (EXIT_NOT_FOUND, check_module, console, fail, import_runtime,
                          resolve_framework, warn_each)


# --- profile -------------------------------------------------------------------------------------
def seconds(text: Optional[str], option: str) -> Optional[float]:
    """A duration option (90s, 5m, 1h) in seconds; None when not given."""
    if text is None:
        return None
    from .tune import parse_duration
    try:
        return parse_duration(text, option)
    except ValueError as err:
        fail(str(err))


def run_live(options):
    """The session with the dashboard following its profile (paddletune/live/runner.py)."""
    from .live.runner import run_live as run_session_live
    from .render import dashboard
    tty = sys.stdout.isatty()
    screen = dashboard.Screen() if tty else dashboard.PlainLines()
    outcome, cost, log = run_session_live(options, screen, redirect=tty)
    if cost.get("error"):
        typer.echo(f"paddletune: warning: the dashboard stopped: {cost['error']} (the job "
                   f"and its profile are unaffected)", err=True)
    if log is not None:
        typer.echo(f"paddletune: the script's output is in {log}", err=True)
    return outcome


def after_profile(outcome, quiet, as_json):
    """Report, then leave as the script would have: its status, or death by SIGINT."""
    from .profile import ProfileError, load
    loaded = None
    if outcome.write_error is None:  # else the writer already warned; the job's status stands
        try:
            loaded = load(outcome.path)
        except ProfileError as err:
            warn_each([str(err)])
    if loaded is not None and (as_json or not quiet):
        from .render import report as report_view
        if as_json:
            typer.echo(report_view.summary_json(loaded))
        else:
            report_view.render_report(loaded, console(stderr=True))
    if not quiet and outcome.write_error is None:
        typer.echo(f"paddletune: profile written to {outcome.path}", err=True)
    from .session import die_if_interrupted
    die_if_interrupted(outcome)
    raise typer.Exit(outcome.status)


# --- report --------------------------------------------------------------------------------------
def is_tune_record(path):
    """Whether `path` is a tuning record (.tune.json) rather than a profile."""
    from .tune.record import is_record
    return is_record(path)


def report_tune(path, as_json):
    """`paddletune report RECORD.tune.json`: the record printed, or one line if unreadable."""
    from .tune.record import RecordError, load
    try:
        record = load(path)
    except RecordError as err:
        fail(str(err), code=EXIT_NOT_FOUND)
    print_record(record, as_json)


def print_record(record, as_json):
    """A tuning record as JSON, or as the ranked table and the winner."""
    if as_json:
        import json
        typer.echo(json.dumps(record, indent=2, default=str))
    else:
        from .render import tune as tune_view
        tune_view.render_record(record, console())


# --- tune ----------------------------------------------------------------------------------------
def tune_options(script, module, budget, objective, floor, space, max_batch_size,
                 keep_batch_size, trial_steps, trial_timeout):
    """The search's options, checked before any trial runs (one line and exit 2 if wrong)."""
    # tune imposes its own overrides on each trial (and runs none of the user's: the record
    # says so), so a bad value of the variable is not this command's error
    user_overrides = os.environ.pop("PADDLETUNE_OVERRIDES", None)
    framework = (resolve_framework(script, module is not None, "auto")
                 if module is not None or Path(script).is_file() else "fluid")
    import_runtime(framework)  # a bad FLAGS_* value: one line and exit 2, before anything runs
    if user_overrides is not None:
        os.environ["PADDLETUNE_OVERRIDES"] = user_overrides
    from .tune import TuneOptions, parse_duration
    if objective not in ("throughput", "memory"):
        fail(f"--objective {objective!r}: use throughput or memory")
    if module is None and not Path(script).is_file():
        fail(f"can't open file '{script}': no such file")
    if module is not None:
        check_module(module)
    try:
        return TuneOptions(budget_s=parse_duration(budget), objective=objective,
                           floor=floor, trial_steps=trial_steps,
                           trial_timeout_s=trial_timeout, max_batch_size=max_batch_size,
                           keep_batch_size=keep_batch_size, specs=tuple(space or ()))
    except ValueError as err:
        fail(str(err))


def run_tune_search(script, args, module, options, out, plain):
    """Run the search with its progress view; (the tuner, the record's path)."""
    from .render import tune as tune_view
    from .tune import RecordPathError, SpaceError, TuneError
    from .tune import tune as run_tune
    title = " ".join(["-m " + script if module is not None else script, *args])
    progress = tune_view.progress_view(console(stderr=True), title, options.budget_s,
                                       live=not plain and sys.stdout.isatty())
    try:
        with progress:  # the live display stops (its last frame kept) before what follows
            return run_tune(script, args, options, out, progress=progress,
                            module=module is not None)
    except RecordPathError as err:  # --out: the user's to fix, like profile's --out
        fail(str(err))
    except (TuneError, SpaceError) as err:
        fail(str(err), code=EXIT_NOT_FOUND)
    except OSError as err:  # the record or the trials' folder cannot be written
        fail(f"cannot write the tuning record: {err}", code=EXIT_NOT_FOUND)
