"""The `paddletune` command line: one small typer command per task, each delegating to a module.

To add a command, write a function decorated with `@app.command()` that parses its options
and hands the work to the module that owns it (measurement, analysis or `render/`); keep the
logic out of this file. Errors the user can fix (a bad FLAGS_* value, a bad option) are
printed to stderr as one line, never as a traceback, and end with exit code 2.
"""

import sys
import warnings
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


def main(argv=None):
    """Console-script entry point (`paddletune`, `python -m paddletune`)."""
    app(args=argv, prog_name="paddletune")
