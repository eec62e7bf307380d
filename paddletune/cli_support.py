"""What the `paddletune` commands share (paddletune/cli.py): one-line errors, the runtime
imported first, the newest profile loaded with its warnings, the training target and its
arguments, and the consoles the views print on.

Errors the user can fix (a bad FLAGS_* value, a bad option) are printed to stderr as one
line, never as a traceback, and end with exit code 2 (click's usage code); a profile that
cannot be read ends with exit code 1.
"""

import os
import sys
from typing import NoReturn

import typer

EXIT_USAGE = 2  # bad input the user can fix (a FLAGS_* value, an option): click's usage code
EXIT_NOT_FOUND = 1  # a profile or record that is missing or cannot be read


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    """Print `paddletune: <message>` to stderr (control characters escaped: a message may
    quote a file's contents) and exit with `code`."""
    from .render.fmt import clean
    typer.echo(f"paddletune: {clean(message)}", err=True)
    raise typer.Exit(code)


def import_runtime(framework: str = "fluid"):
    """Import `runtime` (which reads the FLAGS_* environment) as a CLI should, before
    anything that imports it (the session's probes do): an invalid FLAGS_* value ends the
    command with its message and exit code 2; each warning raised while importing (an
    unknown FLAGS_* name) is printed once to stderr. For a job of another `framework` the
    FLAGS_* variables are that framework's: the runtime reads none of them."""
    from .runtime_import import BadFlag, import_runtime_or_say
    try:
        return import_runtime_or_say(lambda line: typer.echo(line, err=True),
                                     hide_flags=framework != "fluid")
    except BadFlag as err:
        fail(str(err))


def resolve_framework(script: str, module: bool, framework: str) -> str:
    """The framework the job trains with: `framework` as given, or (auto) read from the
    script's imports; one line and exit 2 when it cannot be told or is not installed."""
    from .sources.detect import DetectError, resolve
    try:
        return resolve(framework, script, module)
    except DetectError as err:
        fail(str(err))


def console(stderr=False):
    """A rich console for the views: no syntax highlighting of numbers and paths."""
    from rich.console import Console
    return Console(stderr=stderr, highlight=False)


def load_or_fail(path):
    """The profile at `path` (default: the newest run); what loading skipped or repaired is
    printed first, one `paddletune: warning: ...` line each on stderr."""
    from .profile import ProfileError, latest, load
    try:
        loaded = load(path if path is not None else latest())
    except ProfileError as err:
        fail(str(err), code=EXIT_NOT_FOUND)
    warn_each(loaded.warnings)
    return loaded


def warn_each(warnings):
    """One `paddletune: warning: ...` line on stderr per warning (a newline in one escaped)."""
    from .render.fmt import clean
    for warning in warnings:
        typer.echo(f"paddletune: warning: {clean(warning)}".replace("\n", "\\n"), err=True)


def target(ctx: typer.Context, script, module, command):
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


def check_module(name):
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
