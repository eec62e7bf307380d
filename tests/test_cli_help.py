"""`paddletune --help` and every command's help at 80 and 120 columns: defaults shown, flags
shown as flags, descriptions reflowed (not broken at the docstrings' line ends), nothing cut
off with an ellipsis, the knob names of `tune`, and lines within the width."""

import re

import pytest
import typer
from typer.testing import CliRunner

from paddletune.cli import app
from paddletune.cli_help import (TUNE_KNOBS, TUNE_KNOBS_GPU, TUNE_KNOBS_TORCH,
                                 TUNE_KNOBS_TORCH_WORKERS, default_text, reflow, summary)
from paddletune.tune import space as sp
from test_tune import fake_profile

WIDTHS = (80, 120)
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
GROUP = typer.main.get_command(app)
COMMANDS = sorted(GROUP.commands)


@pytest.fixture(autouse=True)
def plain_help(monkeypatch):
    """typer's help console, made colourless and sized by COLUMNS whatever the caller's
    environment says (CI may force colour or a terminal width)."""
    from typer import rich_utils
    for name, value in (("FORCE_TERMINAL", False), ("COLOR_SYSTEM", None), ("MAX_WIDTH", None)):
        if hasattr(rich_utils, name):
            monkeypatch.setattr(rich_utils, name, value)


def help_text(width, *command):
    result = CliRunner().invoke(app, [*command, "--help"], prog_name="paddletune",
                                env={"COLUMNS": str(width), "TERMINAL_WIDTH": None,
                                     "FORCE_COLOR": None, "NO_COLOR": None})
    assert result.exit_code == 0, result.output
    return ANSI.sub("", result.stdout)


def flat(text):
    """The help with the panels' borders removed and every run of white space one space:
    a phrase wrapped over lines reads as one."""
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", text).split())


def options(name):
    return [p for p in GROUP.commands[name].params if p.param_type_name == "option"]


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_help_fits_the_width_and_cuts_nothing(command, width):
    text = help_text(width, *([command] if command else []))
    assert max(len(line) for line in text.splitlines()) <= width
    assert "…" not in text  # typer cuts a word too long for its column with an ellipsis
    assert "<bool>" not in text and "<str>" not in text  # flags and arguments: no type


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("command", COMMANDS)
def test_every_default_is_shown(command, width):
    text = flat(help_text(width, command))
    for param in options(command):
        shown = default_text(param).strip()
        if shown:
            assert shown in text, (command, param.name)
    assert text.count("[default:") >= sum(bool(default_text(p)) for p in options(command))


@pytest.mark.parametrize("command, option, default", [
    ("profile", "--warmup", "[default: detected]"),
    ("profile", "--total-steps", "[default: --steps]"),
    ("profile", "--interval", "[default: 0.5]"),
    ("profile", "--out", "[default: a new file in ./paddletune-runs/, named "
                         "<time>-<script>.jsonl]"),
    ("report", "PROFILE", "[default: the newest in ./paddletune-runs/]"),
    ("export", "PROFILE", "[default: the newest in ./paddletune-runs/]"),
    ("export", "--format", "[default: chrome]"),
    ("tune", "--budget", "[default: 5m]"),
    ("tune", "--trial-timeout", "[default: 5x its expected time, at least 30 s]"),
    ("watch", "--refresh", "[default: 4]"),
])
def test_described_defaults_read_whole(command, option, default):
    for width in WIDTHS:
        text = flat(help_text(width, command))
        assert default in text, (width, option)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("command", COMMANDS)
def test_flags_are_shown_as_flags(command, width):
    lines = help_text(width, command).splitlines()
    flags = [(next(o for o in p.opts if o.startswith("--")), p.help) for p in options(command)
             if p.is_flag] + [("--help", "Show this message and exit.")]
    for name, help_words in flags:
        row = next(line for line in lines if re.match(rf"│ {re.escape(name)}\s", line))
        first_words = " ".join(help_words.split()[:2])
        # the name (and its short form), then straight to the help text: no type or metavar
        assert re.match(rf"│ {re.escape(name)}(\s+-\w)?\s+{re.escape(first_words)}", row), row


def test_a_flag_takes_no_value():
    result = CliRunner().invoke(app, ["profile", "--ops=true", "train.py"])
    assert result.exit_code == 2 and "does not take a value" in result.output


@pytest.mark.parametrize("width", WIDTHS)
def test_the_command_list_gives_each_summary_on_one_line(width):
    lines = help_text(width).splitlines()
    for name in COMMANDS:
        short = GROUP.commands[name].short_help
        assert any(re.match(rf"│ {name}\s+{re.escape(short)}\s*│$", line) for line in lines), \
            (name, short)


@pytest.mark.parametrize("command", COMMANDS)
def test_descriptions_are_reflowed_not_broken_at_the_docstrings_line_ends(command):
    """Each prose paragraph of a command's description fills the lines it takes: a line
    ends early only at the paragraph's end (examples keep their own lines)."""
    width = 120
    text = help_text(width, command)
    description = [line.rstrip() for line in text.split("╭")[0].splitlines()[3:]]
    paragraphs = [p.splitlines() for p in "\n".join(description).split("\n\n") if p.strip()]
    assert paragraphs, text
    for lines in paragraphs:
        if lines[0].strip().endswith(":"):  # Examples: one per line
            continue
        for line, following in zip(lines, lines[1:]):
            next_word = following.split()[0]
            assert len(line) + 1 + len(next_word) > width - 2, (line, following)
    doc = flat(reflow(GROUP.commands[command].callback.__doc__ or "").replace("\\[", "["))
    assert flat(text).startswith(flat(f"Usage: paddletune {command}")) and doc[:60] in flat(text)


@pytest.mark.parametrize("width", WIDTHS)
def test_tune_help_lists_the_knobs_and_the_space_help_whole(width):
    text = flat(help_text(width, "tune"))
    for knob in TUNE_KNOBS:
        assert knob in text, knob
    assert ("--space SPEC Change the knobs (repeatable): NAME=V1,V2 tries those values, -NAME "
            "leaves a knob or a section out, only=NAME,NAME keeps just those. The knob names "
            "are listed above.") in text


def test_the_knobs_in_the_help_are_the_knobs_tune_builds():
    assert tuple(sp.build_space(fake_profile()).knobs) == TUNE_KNOBS


def test_the_pytorch_knobs_in_the_help_are_the_knobs_tune_builds_for_it():
    from dataclasses import replace
    from paddletune.profile.records import SourceInfo
    base = fake_profile(workers=2, capacity=4)
    torch_job = replace(base, header=replace(base.header, source=SourceInfo("torch")))
    knobs = tuple(sp.build_space(torch_job).knobs)  # (its DataLoader has workers)
    assert tuple(k for k in knobs if k not in TUNE_KNOBS_TORCH_WORKERS) == TUNE_KNOBS_TORCH
    assert set(TUNE_KNOBS_TORCH_WORKERS) <= set(knobs)
    gpu_names = {row[0] for table in (sp.CUDNN_SEARCH, sp.TF32) for row in table.values()}
    assert gpu_names | {sp.CONF_VAR} == set(TUNE_KNOBS_GPU)


@pytest.mark.parametrize("width", WIDTHS)
def test_tune_help_lists_the_frameworks_knobs(width):
    text = flat(help_text(width, "tune"))
    assert "PyTorch and Paddle 3 jobs: " + ", ".join(TUNE_KNOBS_TORCH) in text
    assert "PyTorch's " + ", ".join(TUNE_KNOBS_TORCH_WORKERS) + " where its DataLoader has " \
        "workers" in text
    for knob in TUNE_KNOBS_GPU:
        assert knob in text, knob


@pytest.mark.parametrize("command", ["profile", "tune"])
def test_usage_says_the_scripts_arguments_follow_it(command):
    assert f"Usage: paddletune {command} [OPTIONS] [SCRIPT] [--] [ARGS]..." in \
        help_text(120, command)


def test_summary_and_reflow():
    doc = """First line
    goes on.

    A paragraph
    over two lines with [brackets].

    Examples:
      one --a
      two --b
    """
    assert summary(doc) == "First line goes on."
    assert reflow(doc).split("\n\n") == [
        "First line goes on.", "A paragraph over two lines with \\[brackets].",
        "Examples:\n  one --a\n  two --b"]
