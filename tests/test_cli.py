"""The `paddletune` CLI: each command through typer's CliRunner, plus real subprocess runs."""

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from paddletune import __version__
from paddletune.cli import app
from paddletune.render import flags as view
from runtime.flags import FLAGS, FlagRegistry, in_range, set_flags

REPO = Path(__file__).resolve().parents[1]
# A non-terminal run at 80 columns whatever the caller's terminal says.
PLAIN_ENV = {"COLUMNS": "80", "FORCE_COLOR": None, "TTY_COMPATIBLE": None, "NO_COLOR": None}
ANSI_ESCAPE = "\x1b"


@pytest.fixture
def runner():
    return CliRunner()


def invoke(runner, *args, env=None):
    return runner.invoke(app, list(args), env={**PLAIN_ENV, **(env or {})},
                         prog_name="paddletune")


@pytest.fixture
def restore_flags():
    saved = {f.name: (f.value, f.source) for f in FLAGS}
    yield
    for f in FLAGS:
        if (f.value, f.source) != saved[f.name]:
            FLAGS.set(f.name, *saved[f.name])


@pytest.fixture
def fresh_runtime_import():
    """Make the next `import runtime` run from scratch (reading the environment again);
    afterwards put the original modules back so other tests keep the same classes."""
    def ours(name):
        return name == "runtime" or name.startswith("runtime.")
    saved = {name: module for name, module in sys.modules.items() if ours(name)}
    for name in saved:
        del sys.modules[name]
    yield
    for name in [name for name in sys.modules if ours(name)]:
        del sys.modules[name]
    sys.modules.update(saved)


# --- through the CliRunner --------------------------------------------------------------------

def test_version(runner):
    result = invoke(runner, "--version")
    assert result.exit_code == 0
    assert result.stdout == f"paddletune {__version__}\n"


def test_no_command_prints_help(runner):
    result = invoke(runner)
    assert result.exit_code == 0
    assert "Usage: paddletune [OPTIONS] COMMAND [ARGS]..." in result.stdout
    assert "flags" in result.stdout and "--version" in result.stdout


def test_flags_json_lists_every_flag(runner):
    result = invoke(runner, "flags", "--json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [r["name"] for r in rows] == ["FLAGS_" + f.name for f in FLAGS]
    by_name = {r["name"]: r for r in rows}
    assert by_name["FLAGS_check_nan_inf"] == {
        "name": "FLAGS_check_nan_inf", "type": "bool", "value": FLAGS.get("check_nan_inf"),
        "default": False, "source": FLAGS.flag("check_nan_inf").source,
        "changed": FLAGS.get("check_nan_inf") is not False, "active": True,
        "valid": "true or false", "doc": FLAGS.flag("check_nan_inf").doc}
    gpu = by_name["FLAGS_fraction_of_gpu_memory_to_use"]
    assert (gpu["type"], gpu["default"], gpu["active"]) == ("float", 0.92, True)
    assert gpu["valid"] == "a value in [0.0, 1.0]"
    recorded = by_name["FLAGS_cudnn_exhaustive_search"]  # accepted, takes effect later
    assert (recorded["type"], recorded["default"], recorded["active"]) == ("bool", False, False)


@pytest.mark.parametrize("pattern", ["nan_inf", "NAN_INF", "FLAGS_check_nan"])
def test_flags_pattern_is_a_case_insensitive_substring(runner, pattern):
    result = invoke(runner, "flags", pattern, "--json")
    assert result.exit_code == 0
    assert [r["name"] for r in json.loads(result.stdout)] == ["FLAGS_check_nan_inf",
                                                              "FLAGS_check_nan_inf_level"]


def test_flags_changed_shows_only_changed(runner, restore_flags):
    for f in FLAGS:
        FLAGS.reset(f.name)
    assert invoke(runner, "flags", "--changed").stdout == "No flag differs from its default.\n"
    set_flags({"FLAGS_check_nan_inf": True, "FLAGS_eager_delete_tensor_gb": -1.0})
    rows = json.loads(invoke(runner, "flags", "--changed", "--json").stdout)
    assert [(r["name"], r["value"], r["source"], r["changed"]) for r in rows] == [
        ("FLAGS_eager_delete_tensor_gb", -1.0, "set_flags", True),
        ("FLAGS_check_nan_inf", True, "set_flags", True)]
    table = invoke(runner, "flags", "--changed").stdout
    assert "FLAGS_check_nan_inf" in table and "from set_flags" in table
    assert "FLAGS_paddle_num_threads" not in table


def test_flags_table_is_plain_text_within_80_columns(runner):
    result = invoke(runner, "flags")
    assert result.exit_code == 0
    assert ANSI_ESCAPE not in result.stdout
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    for flag in FLAGS:  # every name whole on one line, with its status
        assert any(f"FLAGS_{flag.name} " in line for line in lines), flag.name
    assert "recorded: validated and stored, takes effect in" in result.stdout


def test_flags_unknown_pattern_fails_with_a_suggestion(runner):
    result = invoke(runner, "flags", "cudnn_exaustive")
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr == ("paddletune: no flag name contains 'cudnn_exaustive' "
                             "(did you mean FLAGS_cudnn_exhaustive_search?)\n")
    assert invoke(runner, "flags", "zzz", "--json").stdout == "[]\n"


def test_invalid_env_flag_exits_2_without_traceback(runner, fresh_runtime_import):
    result = invoke(runner, "flags", env={"FLAGS_fraction_of_gpu_memory_to_use": "2"})
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.startswith("paddletune: environment variable "
                                    "FLAGS_fraction_of_gpu_memory_to_use='2': ")
    assert "[0.0, 1.0]" in result.stderr and "Traceback" not in result.output


# --- the table, as exact text from a fixed-width console --------------------------------------

def sample_registry():
    registry = FlagRegistry()
    registry.define("check_nan_inf", bool, False,
                    "Check every op's outputs for NaN/Inf and stop at the first op that "
                    "produced one, naming it")
    registry.define("fraction_of_gpu_memory_to_use", float, 0.92,
                    "Chunk size of the naive_best_fit GPU pool as a fraction of available "
                    "memory", in_range(0.0, 1.0), implemented=False)
    registry.set("fraction_of_gpu_memory_to_use", "0.5", source="env")
    return registry


EXPECTED_TABLE = """\
┏━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━┳━━━━━━━━━━┓
┃ Flag                                                                   ┃ Value        ┃ Status   ┃
┡━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━╇━━━━━━━━━━┩
│ FLAGS_check_nan_inf                                                    │ False        │ active   │
│ bool, true or false                                                    │ default      │          │
│ Check every op's outputs for NaN/Inf and stop at the first op that     │              │          │
│ produced one, naming it                                                │              │          │
├────────────────────────────────────────────────────────────────────────┼──────────────┼──────────┤
│ FLAGS_fraction_of_gpu_memory_to_use                                    │ 0.5          │ recorded │
│ float, a value in [0.0, 1.0]                                           │ from env     │          │
│ Chunk size of the naive_best_fit GPU pool as a fraction of available   │ default 0.92 │          │
│ memory                                                                 │              │          │
└────────────────────────────────────────────────────────────────────────┴──────────────┴──────────┘
active: used by this runtime. recorded: validated and stored, takes effect in a later release. Set a
flag with FLAGS_<name>=<value> in the environment or fluid.set_flags({'FLAGS_<name>': value}).
"""


def test_table_exact_text_at_100_columns():
    console = Console(width=100, record=True, color_system=None, file=io.StringIO())
    view.print_flags(view.select(sample_registry()), console)
    assert console.export_text() == EXPECTED_TABLE


def test_table_empty_messages():
    console = Console(width=100, record=True, color_system=None, file=io.StringIO())
    view.print_flags([], console, changed_only=True)
    view.print_flags([], console)
    assert console.export_text() == "No flag differs from its default.\nNo flags.\n"


# --- real processes ---------------------------------------------------------------------------

def run(args, env=None):
    environ = {k: v for k, v in os.environ.items() if not k.startswith("FLAGS_")}
    environ.update({k: v for k, v in {**PLAIN_ENV, **(env or {})}.items() if v is not None})
    for key in [k for k, v in PLAIN_ENV.items() if v is None]:
        environ.pop(key, None)
    return subprocess.run(args, env=environ, cwd=REPO, capture_output=True, text=True,
                          timeout=120)


def console_script():
    script = Path(sys.executable).parent / "paddletune"
    found = str(script) if script.exists() else shutil.which("paddletune")
    if not found:
        pytest.fail("the `paddletune` console script is not installed: pip install -e '.[test]'")
    return found


def test_python_m_paddletune_version():
    proc = run([sys.executable, "-m", "paddletune", "--version"])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"paddletune {__version__}\n"


def test_console_script_flags_json():
    proc = run([console_script(), "flags", "--json"])
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert {r["name"] for r in rows} == {"FLAGS_" + f.name for f in FLAGS}
    assert all(r["source"] == "default" for r in rows)


def test_piped_table_has_no_ansi_codes():
    proc = run([sys.executable, "-m", "paddletune", "flags"])
    assert proc.returncode == 0, proc.stderr
    assert ANSI_ESCAPE not in proc.stdout and "FLAGS_check_nan_inf" in proc.stdout


def test_invalid_env_flag_exits_2_in_a_real_process():
    proc = run([sys.executable, "-m", "paddletune", "flags"],
               env={"FLAGS_fraction_of_gpu_memory_to_use": "2"})
    assert proc.returncode == 2
    assert proc.stdout == "" and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("paddletune: environment variable "
                                  "FLAGS_fraction_of_gpu_memory_to_use='2'")
    assert "[0.0, 1.0]" in proc.stderr


def test_unknown_env_flag_warns_once_and_still_works():
    proc = run([sys.executable, "-m", "paddletune", "flags", "nan_inf", "--json"],
               env={"FLAGS_check_nan_in": "1"})
    assert proc.returncode == 0, proc.stderr
    warning = ("paddletune: warning: unknown flag FLAGS_check_nan_in in the environment is "
               "ignored (did you mean FLAGS_check_nan_inf?)\n")
    assert proc.stderr == warning
    assert [r["name"] for r in json.loads(proc.stdout)] == ["FLAGS_check_nan_inf",
                                                            "FLAGS_check_nan_inf_level"]
