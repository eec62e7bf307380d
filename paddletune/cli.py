"""The `paddletune` command line: one small typer command per task, each delegating to a module.

To add a command, write a function decorated with `@app.command()` that parses its options
and hands the work to the module that owns it (measurement, analysis or `render/`); keep the
logic out of this file. Errors the user can fix (a bad FLAGS_* value, a bad option) are
printed to stderr as one line, never as a traceback, and end with exit code 2.
"""

import sys
import warnings
from pathlib import Path
from typing import Annotated, NoReturn, Optional

import typer

from . import __version__
from .render import flags as flags_view

EXIT_USAGE = 2  # bad input the user can fix (a FLAGS_* value, an option): click's usage code

app = typer.Typer(
    name="paddletune",
    add_completion=False,
    # Tracebacks stay plain Python ones, so a failure reads the same as without paddletune.
    pretty_exceptions_enable=False,
)


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    """Print `paddletune: <message>` to stderr and exit with `code`."""
    typer.echo(f"paddletune: {message}", err=True)
    raise typer.Exit(code)


def import_runtime():
    """Import `runtime` (which reads the FLAGS_* environment) as a CLI should.

    An invalid FLAGS_* value ends the command with its message and exit code 2; each
    warning raised while importing (an unknown FLAGS_* name) is printed once to stderr.
    """
    with warnings.catch_warnings(record=True) as caught:
        try:
            import runtime
        except Exception as err:
            errors = sys.modules.get("runtime.errors")  # imported before the flags are read
            if errors is None or not isinstance(err, errors.FlagError):
                raise
            fail(str(err))
    for message in dict.fromkeys(str(w.message) for w in caught):
        typer.echo(f"paddletune: warning: {message}", err=True)
    return runtime


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
):
    """Run a training script as Python would, measure where its step time goes, write the
    profile and print the report. Exits with the script's own exit status."""
    from . import session
    args = list(ctx.args)
    if module is not None:
        if script is not None:
            args.insert(0, script)
        target = module
    elif script is None:
        fail("give the training script (paddletune profile train.py -- ARGS) or -m MODULE")
    else:
        target = script
    if args[:1] == ["--"]:
        args = args[1:]
    import_runtime()
    options = session.Options(target, args, module is not None, out, steps, warmup, ops,
                              interval, fluid_compat, check_nan,
                              speed_test_steps if speed_test else None,
                              stdout_to_stderr=as_json)
    try:
        outcome = session.run(options)
    except session.SessionError as err:
        fail(str(err))
    _after_profile(outcome, quiet, as_json)


def _after_profile(outcome, quiet, as_json):
    """Report, then leave as the script would have: its status, or death by SIGINT."""
    from .profile import ProfileError, load
    from .render import report as report_view
    loaded = None
    if outcome.write_error is None:  # else the writer already warned; the job's status stands
        try:
            loaded = load(outcome.path)
        except ProfileError as err:
            typer.echo(f"paddletune: warning: {err}", err=True)
    if loaded is not None and as_json:
        typer.echo(report_view.summary_json(loaded))
    elif loaded is not None and not quiet:
        report_view.render_report(loaded, _console(stderr=True))
    if not quiet and outcome.write_error is None:
        typer.echo(f"paddletune: profile written to {outcome.path}", err=True)
    if outcome.reason == "interrupted":
        import os
        import signal
        sys.stdout.flush()
        sys.stderr.flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    raise typer.Exit(outcome.status)


def _console(stderr=False):
    from rich.console import Console
    return Console(stderr=stderr, highlight=False)


def _load_or_fail(path):
    from .profile import ProfileError, latest, load
    try:
        return load(path if path is not None else latest())
    except ProfileError as err:
        fail(str(err), code=1)


@app.command()
def report(
    profile_path: Annotated[Optional[str], typer.Argument(
        metavar="PROFILE", help="A profile file [default: the newest in ./paddletune-runs/]",
        show_default=False)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
    top: Annotated[int, typer.Option("--top", min=1, help="How many ops to list.")] = 10,
):
    """Render a saved profile (nothing is re-run)."""
    from .render import report as report_view
    loaded = _load_or_fail(profile_path)
    if as_json:
        typer.echo(report_view.summary_json(loaded))
    else:
        report_view.render_report(loaded, _console(), top_ops=top)


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
