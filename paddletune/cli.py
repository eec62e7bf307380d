"""The `paddletune` command line: one small typer command per task, each delegating to a module.

To add a command, write a function decorated with `@app.command()` that parses its options
and hands the work to the module that owns it (measurement, analysis or `render/`); keep the
logic out of this file. Errors the user can fix (a bad FLAGS_* value, a bad option) are
printed to stderr as one line, never as a traceback, and end with exit code 2.
"""

import os
import sys
from pathlib import Path
from typing import Annotated, List, NoReturn, Optional

import typer

from . import __version__

EXIT_USAGE = 2  # bad input the user can fix (a FLAGS_* value, an option): click's usage code

app = typer.Typer(
    name="paddletune",
    add_completion=False,
    # Tracebacks stay plain Python ones, so a failure reads the same as without paddletune.
    pretty_exceptions_enable=False,
)


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    """Print `paddletune: <message>` to stderr (control characters escaped: a message may
    quote a file's contents) and exit with `code`."""
    from .render.fmt import clean
    typer.echo(f"paddletune: {clean(message)}", err=True)
    raise typer.Exit(code)


def import_runtime():
    """Import `runtime` (which reads the FLAGS_* environment) as a CLI should, before
    anything that imports it (the session's probes do): an invalid FLAGS_* value ends the
    command with its message and exit code 2; each warning raised while importing (an
    unknown FLAGS_* name) is printed once to stderr."""
    from .runtime_import import BadFlag, import_runtime_or_say
    try:
        return import_runtime_or_say(lambda line: typer.echo(line, err=True))
    except BadFlag as err:
        fail(str(err))


def _print_version(value: bool):
    if value:
        typer.echo(f"paddletune {__version__}")
        raise typer.Exit()


@app.callback(invoke_without_command=True)
def _root(
    ctx: typer.Context,
    version: Annotated[bool, typer.Option(
        "--version", callback=_print_version, is_eager=True,
        help="Print the version and exit.")] = False,
):
    """Measure where training time and memory go, and say what to change."""
    if ctx.invoked_subcommand is None:  # bare `paddletune`: show what it can do
        typer.echo(ctx.get_help())
        raise typer.Exit()


@app.command()
def flags(
    pattern: Annotated[Optional[str], typer.Argument(
        help="Show only flags whose name contains this text (case-insensitive).")] = None,
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print a JSON list for scripts instead of the table.")] = False,
    changed: Annotated[bool, typer.Option(
        "--changed", help="Show only flags whose value differs from the default.")] = False,
):
    """List the runtime's FLAGS: type, default, current value and its source, status, doc."""
    from .render import flags as flags_view
    registry = import_runtime().FLAGS
    rows = flags_view.select(registry, pattern, changed)
    matched = not pattern or flags_view.select(registry, pattern)
    if as_json:
        typer.echo(flags_view.to_json(rows))
    elif matched:
        flags_view.print_flags(rows, changed_only=changed)
    if not matched:
        fail(f"no flag name contains {pattern!r}{flags_view.suggest(registry, pattern)}",
             code=1)


_PASSTHROUGH = {"allow_extra_args": True, "ignore_unknown_options": True,
                "allow_interspersed_args": False}


@app.command(context_settings=_PASSTHROUGH)
def profile(
    ctx: typer.Context,
    script: Annotated[Optional[str], typer.Argument(
        help="The training script; what follows it (or `--`) is passed to it.",
        show_default=False)] = None,
    module: Annotated[Optional[str], typer.Option(
        "-m", "--module", help="Run a module as `python -m MODULE` would.")] = None,
    out: Annotated[Optional[str], typer.Option(
        "--out", "-o", help="Profile file [default: ./paddletune-runs/<time>-<script>.jsonl]",
        show_default=False)] = None,
    steps: Annotated[Optional[int], typer.Option(
        "--steps", min=1, help="Stop the job cleanly after N training steps.")] = None,
    duration: Annotated[Optional[str], typer.Option(
        "--duration", help="Stop the job cleanly at the first training step to end this long "
        "(90s, 5m, 1h) after the first one ended; with --steps, whichever comes first.",
        show_default=False)] = None,
    warmup: Annotated[Optional[int], typer.Option(
        "--warmup", min=0, help="Steps excluded from steady-state figures [default: detected]",
        show_default=False)] = None,
    ops: Annotated[bool, typer.Option("--ops", help="Time every op (costs a few %).")] = False,
    interval: Annotated[float, typer.Option(
        "--interval", min=0.01, help="Seconds between system/GPU samples.")] = 0.5,
    fluid_compat: Annotated[bool, typer.Option(
        "--fluid-compat", help="Make `import paddle.fluid` load paddletune's runtime.")] = False,
    check_nan: Annotated[bool, typer.Option(
        "--check-nan", help="Turn on FLAGS_check_nan_inf: stop at the first op making NaN/Inf."
    )] = False,
    speed_test: Annotated[bool, typer.Option(
        "--speed-test", help="Measure the no-data ceiling: after the warm-up, N steps as usual, "
        "then N steps with FLAGS_reader_queue_speed_test_mode on (the reader queue is never "
        "popped), then off again. Needs a DataLoader/PyReader.")] = False,
    speed_test_steps: Annotated[int, typer.Option(
        "--speed-test-steps", min=1, help="N, the steps in each --speed-test window.")] = 20,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print no report.")] = False,
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print the summary as JSON on stdout (the script's stdout goes to "
                       "stderr).")] = False,
    live: Annotated[bool, typer.Option(
        "--live", help="Show the live dashboard while the job runs (the script's output "
        "goes to PROFILE.log, or PROFILE.output.log for a PROFILE named *.log); not a "
        "terminal: a status line on stderr every 5 s.")] = False,
    total_steps: Annotated[Optional[int], typer.Option(
        "--total-steps", min=1, help="The job's total training steps, for the dashboard's "
        "ETA [default: --steps]", show_default=False)] = None,
):
    """Run a training script as Python would, measure where its step time goes, write the
    profile and print the report. Exits with the script's own exit status."""
    target, args = _target(ctx, script, module, "profile")
    import_runtime()  # first: the session's probes import it
    duration_s = None
    if duration is not None:
        from .tune import parse_duration
        try:
            duration_s = parse_duration(duration, "--duration")
        except ValueError as err:
            fail(str(err))
    from . import session
    options = session.Options(target, args, module is not None, out, steps, warmup,
                              duration_s, ops, interval, fluid_compat, check_nan,
                              speed_test_steps if speed_test else None,
                              stdout_to_stderr=as_json, live=live, total_steps=total_steps)
    if live and as_json:
        fail("--live draws the dashboard and --json prints JSON on stdout: use one of them")
    try:
        outcome = _run_live(options) if live else session.run(options)
    except session.SessionError as err:
        fail(str(err))
    _after_profile(outcome, quiet, as_json)


def _run_live(options):
    """The session with the dashboard following its profile (paddletune/live/runner.py)."""
    from .live.runner import run_live
    from .render import dashboard
    tty = sys.stdout.isatty()
    screen = dashboard.Screen() if tty else dashboard.PlainLines()
    outcome, cost, log = run_live(options, screen, redirect=tty)
    if cost.get("error"):
        typer.echo(f"paddletune: warning: the dashboard stopped: {cost['error']} (the job "
                   f"and its profile are unaffected)", err=True)
    if log is not None:
        typer.echo(f"paddletune: the script's output is in {log}", err=True)
    return outcome


def _after_profile(outcome, quiet, as_json):
    """Report, then leave as the script would have: its status, or death by SIGINT."""
    from .profile import ProfileError, load
    loaded = None
    if outcome.write_error is None:  # else the writer already warned; the job's status stands
        try:
            loaded = load(outcome.path)
        except ProfileError as err:
            _warn_each([str(err)])
    if loaded is not None and (as_json or not quiet):
        from .render import report as report_view
        if as_json:
            typer.echo(report_view.summary_json(loaded))
        else:
            report_view.render_report(loaded, _console(stderr=True))
    if not quiet and outcome.write_error is None:
        typer.echo(f"paddletune: profile written to {outcome.path}", err=True)
    from .session import die_if_interrupted
    die_if_interrupted(outcome)
    raise typer.Exit(outcome.status)


def _console(stderr=False):
    from rich.console import Console
    return Console(stderr=stderr, highlight=False)


def _load_or_fail(path):
    """The profile at `path` (default: the newest run); what loading skipped or repaired is
    printed first, one `paddletune: warning: ...` line each on stderr."""
    from .profile import ProfileError, latest, load
    try:
        loaded = load(path if path is not None else latest())
    except ProfileError as err:
        fail(str(err), code=1)
    _warn_each(loaded.warnings)
    return loaded


def _warn_each(warnings):
    """One `paddletune: warning: ...` line on stderr per warning (a newline in one escaped)."""
    from .render.fmt import clean
    for warning in warnings:
        typer.echo(f"paddletune: warning: {clean(warning)}".replace("\n", "\\n"), err=True)


@app.command()
def report(
    profile_path: Annotated[Optional[str], typer.Argument(
        metavar="PROFILE", help="A profile file, or a tuning record (.tune.json) [default: "
        "the newest profile in ./paddletune-runs/]", show_default=False)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
    top: Annotated[int, typer.Option("--top", min=1, help="How many ops to list.")] = 10,
):
    """Render a saved profile or tuning record (nothing is re-run)."""
    if profile_path is not None:
        import_runtime()  # paddletune.tune imports it (a bad FLAGS_* value: one line)
        if _is_tune_record(profile_path):
            _report_tune(profile_path, as_json)
            return
    from .render import report as report_view
    loaded = _load_or_fail(profile_path)
    if as_json:
        typer.echo(report_view.summary_json(loaded))
    else:
        report_view.render_report(loaded, _console(), top_ops=top)


def _is_tune_record(path):
    from .tune.record import is_record
    return is_record(path)


def _report_tune(path, as_json):
    import json
    from .render import tune as tune_view
    from .tune.record import RecordError, load
    try:
        record = load(path)
    except RecordError as err:
        fail(str(err), code=1)
    if as_json:
        typer.echo(json.dumps(record, indent=2, default=str))
    else:
        tune_view.render_record(record, _console())


@app.command()
def advise(
    profile_path: Annotated[Optional[str], typer.Argument(
        metavar="PROFILE", help="A profile file [default: the newest in ./paddletune-runs/]",
        show_default=False)] = None,
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print a JSON array, most important first.")] = False,
):
    """Ranked advice from a profile: what to change, the evidence, the expected gain."""
    from .advisors import advise as run_advisors
    from .render import advice as advice_view
    loaded = _load_or_fail(profile_path)
    advices = run_advisors(loaded)
    if as_json:
        typer.echo(advice_view.advice_json(advices))
    else:
        advice_view.render_advice(advices, _console())


@app.command()
def export(
    profile_path: Annotated[str, typer.Argument(metavar="PROFILE", help="A profile file.")],
    fmt: Annotated[str, typer.Option("--format", "-f", help="Output format: chrome.")] = "chrome",
    out: Annotated[Optional[str], typer.Option(
        "--out", "-o", help="Output file [default: PROFILE with .trace.json]",
        show_default=False)] = None,
):
    """Export a profile as a timeline: Chrome Trace Event JSON (Perfetto, chrome://tracing)."""
    from .export import chrome
    if fmt != "chrome":
        fail(f"unknown --format {fmt!r}; supported: chrome")
    loaded = _load_or_fail(profile_path)
    target = out or str(Path(profile_path).with_suffix(".trace.json"))
    try:
        chrome.write_chrome_trace(loaded, target)
    except OSError as err:
        fail(f"cannot write {target}: {err.strerror or err}", code=1)
    typer.echo(f"paddletune: wrote {target} (open it in https://ui.perfetto.dev or "
               f"chrome://tracing)", err=True)


@app.command()
def watch(
    profile_path: Annotated[Optional[str], typer.Argument(
        metavar="PROFILE", help="A profile file, being written or finished [default: the "
        "newest in ./paddletune-runs/]", show_default=False)] = None,
    refresh: Annotated[float, typer.Option(
        "--refresh", min=0.5, max=10.0, help="Frames per second.")] = 4.0,
    window: Annotated[float, typer.Option(
        "--window", min=2.0, help="Seconds of records the panels and advice cover.")] = 30.0,
    once: Annotated[bool, typer.Option(
        "--once", help="Print one frame of what is there now and exit.")] = False,
    plain: Annotated[bool, typer.Option(
        "--plain", help="Plain status lines instead of the full-screen view (the default "
        "when stdout is not a terminal).")] = False,
):
    """Follow a profile that `paddletune profile` is writing (from another terminal, like
    `tail -f`) and draw the live dashboard; a finished profile shows its last window.
    Ends when the job's exit record arrives, or on Ctrl-C."""
    from .profile import ProfileError, latest
    from .render import dashboard
    try:
        path = Path(profile_path) if profile_path is not None else latest()
    except ProfileError as err:
        fail(str(err), code=1)
    if path.is_dir() or (profile_path is not None and not path.exists() and once):
        fail(f"{path}: not a profile file", code=1)
    dashboard.watch(path, refresh, window, once, plain or not sys.stdout.isatty())


@app.command(context_settings=_PASSTHROUGH)
def tune(
    ctx: typer.Context,
    script: Annotated[Optional[str], typer.Argument(
        help="The training script; what follows it (or `--`) is passed to it.",
        show_default=False)] = None,
    module: Annotated[Optional[str], typer.Option(
        "-m", "--module", help="Tune a module run as `python -m MODULE` would.")] = None,
    budget: Annotated[str, typer.Option(
        "--budget", help="Wall-clock time for the whole search: 90s, 10m, 1h.")] = "5m",
    objective: Annotated[str, typer.Option(
        "--objective", help="throughput (samples/s) or memory (the lowest peak memory "
        "keeping --floor of the baseline samples/s).")] = "throughput",
    floor: Annotated[float, typer.Option(
        "--floor", min=0.0, max=1.0, help="--objective memory: the share of the baseline "
        "samples/s a setting must keep.")] = 0.95,
    space: Annotated[Optional[List[str]], typer.Option(
        "--space", help="Restrict or extend the knobs (repeatable): NAME=V1,V2 sets a "
        "knob's values (also FLAGS_x=.. or reader./exec_strategy./build_strategy.KEY=..); "
        "-NAME or -SECTION leaves them out.")] = None,
    max_batch_size: Annotated[Optional[int], typer.Option(
        "--max-batch-size", min=1, help="Largest batch size to try [default: 8x the "
        "job's, and what the memory model says fits]", show_default=False)] = None,
    keep_batch_size: Annotated[bool, typer.Option(
        "--keep-batch-size", help="Never change the batch size (your convergence depends "
        "on it).")] = False,
    trial_steps: Annotated[Optional[int], typer.Option(
        "--trial-steps", min=10, help="Steps of the shortest trials; later rungs double it "
        "[default: about 1.5 s of steps]", show_default=False)] = None,
    trial_timeout: Annotated[Optional[float], typer.Option(
        "--trial-timeout", min=1.0, help="Seconds before a trial counts as hung [default: "
        "5x its expected time, at least 30]", show_default=False)] = None,
    out: Annotated[Optional[str], typer.Option(
        "--out", "-o", help="Tuning record [default: ./paddletune-runs/<time>-<script>"
        ".tune.json]", show_default=False)] = None,
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print the tuning record as JSON on stdout.")] = False,
    plain: Annotated[bool, typer.Option(
        "--plain", help="A line per trial instead of the live display (the default when "
        "stdout or stderr is not a terminal).")] = False,
):
    """Find faster settings by measured trials: each a `paddletune profile --steps N`
    subprocess with settings imposed through the environment (no code change). Prints the
    ranked settings, the winner as exports and code lines, and the speedup; saves a tuning
    record that `paddletune report` renders. Ctrl-C stops and keeps the best so far."""
    # tune imposes its own overrides on each trial (and runs none of the user's: the record
    # says so), so a bad value of the variable is not this command's error
    user_overrides = os.environ.pop("PADDLETUNE_OVERRIDES", None)
    import_runtime()  # a bad FLAGS_* value: one line and exit 2, before anything runs
    if user_overrides is not None:
        os.environ["PADDLETUNE_OVERRIDES"] = user_overrides
    from .tune import SpaceError, TuneError, TuneOptions, parse_duration
    from .tune import tune as run_tune
    script, args = _target(ctx, script, module, "tune")
    if objective not in ("throughput", "memory"):
        fail(f"--objective {objective!r}: use throughput or memory")
    if module is None and not Path(script).is_file():
        fail(f"can't open file '{script}': no such file")
    if module is not None:
        _check_module(module)
    try:
        options = TuneOptions(budget_s=parse_duration(budget), objective=objective,
                              floor=floor, trial_steps=trial_steps,
                              trial_timeout_s=trial_timeout, max_batch_size=max_batch_size,
                              keep_batch_size=keep_batch_size, specs=tuple(space or ()))
    except ValueError as err:
        fail(str(err))
    import_runtime()
    from .render import tune as tune_view
    console = _console(stderr=True)
    title = " ".join(["-m " + script if module is not None else script, *args])
    progress = tune_view.progress_view(console, title, options.budget_s,
                                       live=not plain and sys.stdout.isatty())
    try:
        with progress:  # the live display stops (its last frame kept) before what follows
            tuner, path = run_tune(script, args, options, out, progress=progress,
                                   module=module is not None)
    except (TuneError, SpaceError) as err:
        fail(str(err), code=1)
    except OSError as err:  # the record or the trials' folder cannot be written
        fail(f"cannot write the tuning record: {err}", code=1)
    from .tune.record import load as load_record
    record = load_record(path)
    if as_json:
        import json
        typer.echo(json.dumps(record, indent=2, default=str))
    else:
        tune_view.render_record(record, _console())
    typer.echo(f"paddletune: tuning record written to {path}", err=True)
    if tuner.status == "interrupted":
        raise typer.Exit(130)


def _target(ctx, script, module, command):
    """(the script or -m module, the arguments passed to it): with -m, a SCRIPT argument is
    the module's first argument; a leading `--` is dropped."""
    args = list(ctx.args)
    if module is not None:
        if script is not None:
            args.insert(0, script)
        script = module
    elif script is None:
        fail(f"give the training script (paddletune {command} train.py -- ARGS) or -m MODULE")
    return script, args[1:] if args[:1] == ["--"] else args


def _check_module(name):
    """`-m NAME` must name an importable module (checked here, not by a crashed baseline)."""
    import importlib.util
    sys.path.insert(0, os.getcwd())  # as `python -m` has it
    try:
        found = importlib.util.find_spec(name) is not None
    except (ImportError, ValueError) as err:
        fail(f"no module named {name!r} ({err})")
    finally:
        sys.path.remove(os.getcwd())
    if not found:
        fail(f"no module named {name!r}: run from the folder that holds it, or install it")


@app.command()
def env(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
):
    """What this machine looks like to paddletune: Python, NumPy/BLAS, cores, GPU, FLAGS."""
    import json
    import_runtime()
    from .env import collect_env, format_env
    info = collect_env()
    if as_json:
        typer.echo(json.dumps(info, indent=2, default=str))
        return
    width = max(len(label) for label, _ in format_env(info))
    for label, value in format_env(info):
        typer.echo(f"{label:<{width}}  {value}")


def main(argv=None):
    """Console-script entry point (`paddletune`, `python -m paddletune`)."""
    app(args=argv, prog_name="paddletune")
