"""The `paddletune` command line: one small typer command per task, each delegating to a module.

To add a command, write a function registered with `@command()` that parses its options and
hands the work to the module that owns it (measurement, analysis or `render/`); keep the logic
out of this file. Its docstring is its help: a one-line summary (the command list shows it),
then paragraphs (paddletune/cli_help.py reflows them). Document the command and each option
in docs/guide.md: tests/test_docs.py fails when the guide and the CLI disagree. Errors the
user can fix are one line on stderr and exit code 2 (paddletune/cli_support.py).
"""

import sys
from pathlib import Path
from typing import Annotated, List, Optional

import typer

from . import __version__
from .cli_help import (TUNE_KNOBS, TUNE_KNOBS_GPU, TUNE_KNOBS_TORCH, TUNE_KNOBS_TORCH_WORKERS,
                       TUNE_KNOBS_TORCH_CPU_AUTOCAST, TUNE_SECTIONS, HelpCommand, HelpGroup,
                       reflow, summary)
from .cli_run import (after_profile, is_tune_record, print_record, report_tune, run_live,
                      run_tune_search, seconds, tune_options)
from .cli_support import (EXIT_NOT_FOUND, console, fail, import_runtime, load_or_fail,
                          resolve_framework, target)

app = typer.Typer(
    name="paddletune",
    cls=HelpGroup,
    rich_markup_mode="rich",
    add_completion=False,
    # Tracebacks stay plain Python ones, so a failure reads the same as without paddletune.
    pretty_exceptions_enable=False,
)

# a command that runs a script passes what follows the script (or `--`) to it
_PASSTHROUGH = {"allow_extra_args": True, "ignore_unknown_options": True,
                "allow_interspersed_args": False}
_NEWEST = "the newest in ./paddletune-runs/"


def command(fill=None, **settings):
    """`@app.command()` with the help taken from the docstring (cli_help.reflow/summary),
    its `{name}` fields filled from `fill`."""
    def register(fn):
        doc = fn.__doc__.format(**fill) if fill else fn.__doc__
        return app.command(cls=HelpCommand, help=reflow(doc), short_help=summary(doc),
                           **settings)(fn)
    return register


def _print_version(value: bool):
    if value:
        typer.echo(f"paddletune {__version__}")
        raise typer.Exit()


@app.callback(invoke_without_command=True, help=reflow(
    """Find out why neural-network training is slow or runs out of memory, and what to change.

    Start with `paddletune profile train.py`, then `paddletune advise`. The guide:
    docs/guide.md."""))
def _root(
    ctx: typer.Context,
    version: Annotated[bool, typer.Option(
        "--version", callback=_print_version, is_eager=True,
        help="Print the version and exit.")] = False,
):
    if ctx.invoked_subcommand is None:  # bare `paddletune`: show what it can do
        typer.echo(ctx.get_help())
        raise typer.Exit()


@command(context_settings=_PASSTHROUGH)
def profile(
    ctx: typer.Context,
    script: Annotated[Optional[str], typer.Argument(
        metavar="SCRIPT", help="The training script; what follows it (or `--`) is passed to "
        "it.")] = None,
    module: Annotated[Optional[str], typer.Option(
        "-m", "--module", metavar="MODULE", help="Run a module as `python -m MODULE` "
        "would.")] = None,
    out: Annotated[Optional[str], typer.Option(
        "--out", "-o", metavar="PATH", help="The profile file. [default: a new file in "
        "./paddletune-runs/, named <time>-<script>.jsonl]")] = None,
    steps: Annotated[Optional[int], typer.Option(
        "--steps", min=1, metavar="N", help="Stop the job cleanly after N training "
        "steps.")] = None,
    duration: Annotated[Optional[str], typer.Option(
        "--duration", metavar="TIME", help="Stop the job cleanly at the first step to end "
        "TIME (90s, 5m, 1h) after the first step; with --steps, whichever comes "
        "first.")] = None,
    warmup: Annotated[Optional[int], typer.Option(
        "--warmup", min=0, metavar="N", help="Steps left out of the steady-state figures. "
        "[default: detected]")] = None,
    ops: Annotated[bool, typer.Option("--ops", help="Time every op (costs a few %).")] = False,
    interval: Annotated[float, typer.Option(
        "--interval", min=0.01, metavar="SECONDS", help="Time between system, GPU and "
        "DataLoader worker samples (at the default, the workers' stretch to keep within 5% "
        "of a core).")] = 0.5,
    fluid_compat: Annotated[bool, typer.Option(
        "--fluid-compat", help="Make `import paddle.fluid` load paddletune's "
        "runtime.")] = False,
    check_nan: Annotated[bool, typer.Option(
        "--check-nan", help="Stop at the first op that makes NaN or Inf, and name it "
        "(FLAGS_check_nan_inf).")] = False,
    check_nan_continue: Annotated[bool, typer.Option(
        "--check-nan-continue", help="Like --check-nan, but training goes on: each op output "
        "with NaN or Inf is printed and recorded, to see which ops and steps make "
        "them.")] = False,
    speed_test: Annotated[bool, typer.Option(
        "--speed-test", help="Measure the no-data ceiling: after the warm-up, N steps as "
        "usual, then N steps that re-read the queue's head batch instead of popping it; "
        "then a reader thread timed alone on 8 batches, and with several math threads N "
        "steps more re-reading with one. Needs a DataLoader or PyReader.")] = False,
    speed_test_steps: Annotated[int, typer.Option(
        "--speed-test-steps", min=1, metavar="N", help="The steps in each --speed-test "
        "window.")] = 20,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print no report.")] = False,
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print the summary as JSON on stdout (the script's stdout goes to "
        "stderr).")] = False,
    live: Annotated[bool, typer.Option(
        "--live", help="Draw the live dashboard while the job runs; the script's output "
        "goes to a log file beside the profile. Not on a terminal: a status line on stderr "
        "every 5 s.")] = False,
    total_steps: Annotated[Optional[int], typer.Option(
        "--total-steps", min=1, metavar="N", help="The job's total training steps, for the "
        "dashboard's ETA. [default: --steps]")] = None,
    framework: Annotated[str, typer.Option(
        "--framework", metavar="NAME", help="What the script trains with: torch, paddle "
        "(PaddlePaddle 2.x/3.x), fluid (paddletune's runtime, Paddle 1.x programs) or auto: "
        "read from the script's imports.")] = "auto",
):
    """Run a training script and report where its time and memory go.

    The script runs as `python SCRIPT ARGS` would run it; the profile is written while it
    runs, and the command exits with the script's own exit status.

    Examples:
      paddletune profile train.py -- --lr 0.1
      paddletune profile --steps 300 --ops examples/mlp.py
      paddletune profile --live --total-steps 3000 train.py -- --steps 3000
    """
    script, args = target(ctx, script, module, "profile")
    framework = resolve_framework(script, module is not None, framework)
    import_runtime(framework)  # first: the session's probes import it
    if live and as_json:
        fail("--live draws the dashboard and --json prints JSON on stdout: use one of them")
    from . import session
    options = session.Options(script, args, module is not None, out, steps, warmup,
                              seconds(duration, "--duration"), ops, interval, fluid_compat,
                              check_nan, speed_test_steps if speed_test else None,
                              stdout_to_stderr=as_json, live=live, total_steps=total_steps,
                              check_nan_continue=check_nan_continue, framework=framework)
    try:
        outcome = run_live(options) if live else session.run(options)
    except session.SessionError as err:
        fail(str(err))
    after_profile(outcome, quiet, as_json)


@command()
def report(
    profile_path: Annotated[Optional[str], typer.Argument(
        metavar="PROFILE", help=f"A profile, or a tuning record (.tune.json). [default: "
        f"{_NEWEST}]")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
    top: Annotated[int, typer.Option(
        "--top", min=1, metavar="N", help="How many ops to list.")] = 10,
):
    """Print the report of a saved profile or tuning record again.

    Nothing is re-run: the report is computed from the file."""
    if profile_path is not None:
        import_runtime()  # paddletune.tune imports it (a bad FLAGS_* value: one line)
        if is_tune_record(profile_path):
            report_tune(profile_path, as_json)
            return
    from .render import report as report_view
    loaded = load_or_fail(profile_path)
    if as_json:
        typer.echo(report_view.summary_json(loaded))
    else:
        report_view.render_report(loaded, console(), top_ops=top)


@command()
def advise(
    profile_path: Annotated[Optional[str], typer.Argument(
        metavar="PROFILE", help=f"A profile. [default: {_NEWEST}]")] = None,
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print a JSON array, most important first.")] = False,
):
    """Ranked advice from a profile: what to change, and the gain.

    Each piece of advice quotes the measured evidence and names its entry in the advice
    catalogue, docs/advice.md."""
    from .advisors import advise as run_advisors
    from .advisors.base import post_pass, profile_extent
    from .render import advice as advice_view
    loaded = load_or_fail(profile_path)
    advices = post_pass(run_advisors(loaded), loaded)
    extent = profile_extent(loaded)
    if as_json:  # the array stays the whole of stdout; the warning goes to stderr
        if not extent.complete:
            typer.echo(f"paddletune: {extent.sentence()}", err=True)
        typer.echo(advice_view.advice_json(advices))
    else:
        advice_view.render_advice(advices, console(), extent=extent)


@command()
def export(
    profile_path: Annotated[Optional[str], typer.Argument(
        metavar="PROFILE", help=f"A profile. [default: {_NEWEST}]")] = None,
    fmt: Annotated[str, typer.Option(
        "--format", "-f", metavar="FORMAT", help="The output format: chrome.")] = "chrome",
    out: Annotated[Optional[str], typer.Option(
        "--out", "-o", metavar="PATH", help="The output file. [default: the profile's path "
        "with .trace.json]")] = None,
):
    """Write a profile as a Chrome trace (Perfetto, chrome://tracing).

    The timeline holds the steps and their parts, the ops (with --ops), the reader's queue
    and the memory pool as counters."""
    from .export import chrome
    if fmt != "chrome":
        fail(f"unknown --format {fmt!r}; supported: chrome")
    loaded = load_or_fail(profile_path)
    written = out or str(Path(loaded.path).with_suffix(".trace.json"))
    try:
        chrome.write_chrome_trace(loaded, written)
    except OSError as err:
        fail(f"cannot write {written}: {err.strerror or err}", code=EXIT_NOT_FOUND)
    typer.echo(f"paddletune: wrote {written} (open it in https://ui.perfetto.dev or "
               f"chrome://tracing)", err=True)


@command()
def watch(
    profile_path: Annotated[Optional[str], typer.Argument(
        metavar="PROFILE", help=f"A profile being written, or a finished one. [default: "
        f"{_NEWEST}]")] = None,
    refresh: Annotated[float, typer.Option(
        "--refresh", min=0.5, max=10.0, metavar="FPS", help="Frames per second.")] = 4.0,
    window: Annotated[float, typer.Option(
        "--window", min=2.0, metavar="SECONDS", help="The span of records the panels and "
        "the advice cover.")] = 30.0,
    once: Annotated[bool, typer.Option(
        "--once", help="Print one frame of what is there now and exit.")] = False,
    plain: Annotated[bool, typer.Option(
        "--plain", help="Plain status lines instead of the full-screen view (the default "
        "when stdout is not a terminal).")] = False,
):
    """Draw the live dashboard of a profile being written (or finished).

    Run it from another terminal, like `tail -f`; a finished profile shows its last window.
    It ends when the job's exit record arrives, or on Ctrl-C. The profile is written by
    `paddletune profile`, which draws the same view itself with --live."""
    from .profile import ProfileError, latest
    from .render import dashboard
    try:
        path = Path(profile_path) if profile_path is not None else latest(starting=True)
    except ProfileError as err:
        fail(str(err), code=EXIT_NOT_FOUND)
    if path.is_dir() or (profile_path is not None and not path.exists() and once):
        fail(f"{path}: not a profile file", code=EXIT_NOT_FOUND)
    dashboard.watch(path, refresh, window, once, plain or not sys.stdout.isatty())


@command(context_settings=_PASSTHROUGH, fill={"knobs": ", ".join(TUNE_KNOBS),
                                              "torch_knobs": ", ".join(TUNE_KNOBS_TORCH),
                                              "torch_worker_knobs": ", ".join(
                                                  TUNE_KNOBS_TORCH_WORKERS),
                                              "gpu_knobs": ", ".join(TUNE_KNOBS_GPU),
                                              "cpu_autocast": TUNE_KNOBS_TORCH_CPU_AUTOCAST,
                                              "sections": ", ".join(TUNE_SECTIONS)})
def tune(
    ctx: typer.Context,
    script: Annotated[Optional[str], typer.Argument(
        metavar="SCRIPT", help="The training script; what follows it (or `--`) is passed to "
        "it.")] = None,
    module: Annotated[Optional[str], typer.Option(
        "-m", "--module", metavar="MODULE", help="Tune a module run as `python -m MODULE` "
        "would.")] = None,
    budget: Annotated[str, typer.Option(
        "--budget", metavar="TIME", help="Wall-clock time for the whole search: 90s, 10m, "
        "1h.")] = "5m",
    objective: Annotated[str, typer.Option(
        "--objective", metavar="NAME", help="throughput (samples/s), or memory (the least "
        "peak memory that keeps --floor of the baseline's samples/s).")] = "throughput",
    floor: Annotated[float, typer.Option(
        "--floor", min=0.0, max=1.0, metavar="SHARE", help="With --objective memory: the "
        "share of the baseline's samples/s a setting must keep.")] = 0.95,
    space: Annotated[Optional[List[str]], typer.Option(
        "--space", metavar="SPEC", help="Change the knobs (repeatable): NAME=V1,V2 tries "
        "those values, -NAME leaves a knob or a section out, only=NAME,NAME keeps just "
        "those. The knob names are listed above.")] = None,
    max_batch_size: Annotated[Optional[int], typer.Option(
        "--max-batch-size", min=1, metavar="N", help="The largest batch size to try. "
        "[default: 8x the job's, and what the memory model says fits]")] = None,
    keep_batch_size: Annotated[bool, typer.Option(
        "--keep-batch-size", help="Never change the batch size (your convergence depends "
        "on it).")] = False,
    trial_steps: Annotated[Optional[int], typer.Option(
        "--trial-steps", min=10, metavar="N", help="Steps of the shortest trials; later "
        "rounds of a race double it. [default: about 1.5 s of steps]")] = None,
    trial_timeout: Annotated[Optional[float], typer.Option(
        "--trial-timeout", min=1.0, metavar="SECONDS", help="Time after which a trial "
        "counts as hung. [default: 5x its expected time, at least 30 s]")] = None,
    out: Annotated[Optional[str], typer.Option(
        "--out", "-o", metavar="PATH", help="The tuning record. [default: a new file in "
        "./paddletune-runs/, named <time>-<script>.tune.json]")] = None,
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print the tuning record as JSON on stdout.")] = False,
    plain: Annotated[bool, typer.Option(
        "--plain", help="A line per trial instead of the live display (the default when "
        "stdout or stderr is not a terminal).")] = False,
):
    """Find faster settings by measured trials, without editing code.

    Each trial runs the job as `paddletune profile --steps N` in a subprocess, with a setting
    imposed through the environment. The command prints the ranked settings, the winner as
    `export` lines and as code, and the speedup, and saves a tuning record that `paddletune
    report` prints again. Ctrl-C stops the search and keeps the best so far.

    Knobs (the embedded runtime): {knobs}; and, with --space, any FLAGS_<name>, or
    SECTION.KEY for a field of PADDLETUNE_OVERRIDES. Sections: {sections}.

    PyTorch and Paddle 3 jobs: {torch_knobs} (the intra-op threads), with Paddle's memory
    FLAGS, and PyTorch's {torch_worker_knobs} where its DataLoader has workers, and
    {cpu_autocast} where the model ran under the CPU's autocast to a dtype the CPU has no
    kernels for; on a GPU, where the model was found with them off: {gpu_knobs}.

    Examples:
      paddletune tune --budget 10m train.py -- --epochs 1
      paddletune tune --space only=num_workers,capacity train.py
      paddletune tune --objective memory --floor 0.9 train.py
    """
    script, args = target(ctx, script, module, "tune")
    options = tune_options(script, module, budget, objective, floor, space, max_batch_size,
                            keep_batch_size, trial_steps, trial_timeout)
    tuner, path = run_tune_search(script, args, module, options, out, plain)
    from .tune.record import load as load_record
    print_record(load_record(path), as_json)
    typer.echo(f"paddletune: tuning record written to {path}", err=True)
    if tuner.status == "interrupted":
        raise typer.Exit(130)


@command()
def flags(
    pattern: Annotated[Optional[str], typer.Argument(
        metavar="PATTERN", help="Show only the flags whose name contains this text "
        "(case-insensitive).")] = None,
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print a JSON list for scripts instead of the table.")] = False,
    changed: Annotated[bool, typer.Option(
        "--changed", help="Show only the flags whose value differs from the default.")] = False,
):
    """List the runtime's FLAGS: type, default, current value, its source.

    Each row also says whether the runtime acts on the flag (active) or only records it, and
    what it does. Set a flag as FLAGS_<name>=<value> in the environment."""
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


@command()
def env(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
):
    """Python, NumPy/BLAS, cores, GPU and FLAGS as paddletune sees them."""
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
