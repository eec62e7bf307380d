"""`paddletune report / advise / export / env` through typer's CliRunner (the real subprocess
runs are in test_profile_cli.py)."""

import json

import pytest
from typer.testing import CliRunner

from paddletune.cli import app
from profiles import make_profile, step_records

PLAIN_ENV = {"COLUMNS": "100", "FORCE_COLOR": None, "TTY_COMPATIBLE": None, "NO_COLOR": None}


@pytest.fixture
def runner():
    return CliRunner()


@pytest.fixture
def input_bound(tmp_path):
    return make_profile(tmp_path / "slow.jsonl", steps=step_records(gap_s=0.006))


def test_report_renders_the_verdict(runner, input_bound):
    result = runner.invoke(app, ["report", str(input_bound)], env=PLAIN_ENV)
    assert result.exit_code == 0, result.output
    assert "Highly input-bound" in result.stdout and "\x1b" not in result.stdout


def test_report_json_is_the_summary(runner, input_bound):
    result = runner.invoke(app, ["report", "--json", str(input_bound)])
    assert result.exit_code == 0
    assert json.loads(result.stdout)["verdict"]["kind"] == "highly-input-bound"


def test_report_and_advise_default_to_the_newest_run(runner, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["advise"])
    assert result.exit_code == 1 and "no profile found in ./paddletune-runs/" in result.stderr
    (tmp_path / "paddletune-runs").mkdir()
    make_profile(tmp_path / "paddletune-runs" / "a.jsonl", steps=step_records(gap_s=0.006))
    result = runner.invoke(app, ["advise", "--json"])
    assert result.exit_code == 0, result.output
    advice = json.loads(result.stdout)
    assert advice[0]["id"] == "input-bound" and advice[0]["severity"] == "high"
    for key in ("title", "evidence", "change", "expected_gain", "confidence"):
        assert advice[0][key]


def test_advise_json_states_each_predicted_speedups_range(runner, input_bound):
    advice = json.loads(runner.invoke(app, ["advise", "--json", str(input_bound)]).stdout)
    predicted = [a for a in advice if a["expected_speedup"] is not None]
    assert predicted  # (a synthetic input-bound run: the prediction does not hang on load)
    for a in predicted:
        low, high = a["expected_range"]
        assert low < a["expected_speedup"] < high
        assert a["figures"]["range"]["basis"] == "model"


def test_advise_text(runner, input_bound):
    result = runner.invoke(app, ["advise", str(input_bound)], env=PLAIN_ENV)
    assert result.exit_code == 0
    assert "DataLoader.from_generator" in result.stdout


def test_corrupt_profile_is_a_one_line_error(runner, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"type": "header", "schema": 99}\n')
    for command in ("report", "advise", "export"):
        result = runner.invoke(app, [command, str(bad)])
        assert result.exit_code == 1
        assert "newer paddletune" in result.stderr and "Traceback" not in result.stderr


def test_export_chrome(runner, input_bound, tmp_path):
    out = tmp_path / "t.json"
    result = runner.invoke(app, ["export", str(input_bound), "--out", str(out)])
    assert result.exit_code == 0, result.output
    trace = json.loads(out.read_text())
    assert {e["ph"] for e in trace["traceEvents"]} >= {"M", "X"}
    result = runner.invoke(app, ["export", str(input_bound), "--format", "pprof"])
    assert result.exit_code == 2 and "supported: chrome" in result.stderr


def test_export_defaults_to_the_newest_run(runner, tmp_path, monkeypatch):
    """As report, advise and watch do: no PROFILE means the newest in ./paddletune-runs/, and
    the trace goes beside it."""
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["export"])
    assert result.exit_code == 1 and "no profile found in ./paddletune-runs/" in result.stderr
    runs = tmp_path / "paddletune-runs"
    runs.mkdir()
    make_profile(runs / "a.jsonl", steps=step_records(gap_s=0.006))
    result = runner.invoke(app, ["export"])
    assert result.exit_code == 0, result.output
    assert "wrote paddletune-runs/a.trace.json" in result.stderr
    assert json.loads((runs / "a.trace.json").read_text())["traceEvents"]


def test_env_lists_the_machine(runner):
    result = runner.invoke(app, ["env"], env=PLAIN_ENV)
    assert result.exit_code == 0, result.output
    assert "Python" in result.stdout and "NumPy" in result.stdout
    info = json.loads(runner.invoke(app, ["env", "--json"]).stdout)
    assert info["cpu"]["logical_cores"] >= 1 and "flags" in info


def test_profile_needs_a_target(runner):
    result = runner.invoke(app, ["profile"])
    assert result.exit_code == 2 and "give the training script" in result.stderr


def test_load_warnings_come_first_one_line_each_and_sanitised(runner, input_bound, tmp_path):
    with open(input_bound, "a", encoding="utf-8") as f:
        f.write(json.dumps({"type": "future\x1b[2J\nx", "x": 1}) + "\n")  # a newer kind
    out = tmp_path / "t.json"
    for command in (["report"], ["report", "--json"], ["advise", "--json"],
                    ["export", "--out", str(out)]):
        result = runner.invoke(app, [command[0], str(input_bound), *command[1:]], env=PLAIN_ENV)
        assert result.exit_code == 0, (command, result.output)
        first, *rest = result.stderr.splitlines()
        assert first.startswith(f"paddletune: warning: {input_bound}:")
        assert "skipped 1 record of kind 'future\\x1b[2J\\nx'" in first
        assert "\x1b" not in result.stderr
        assert not any(line.startswith("paddletune: warning:") for line in rest)
    assert json.loads(runner.invoke(app, ["report", "--json", str(input_bound)]).stdout)


def test_report_prints_no_escape_sequence_from_the_profile(runner, tmp_path):
    hostile = make_profile(tmp_path / "p.jsonl", steps=step_records(gap_s=0.006),
                           command={"argv": ["train.py", "\x1b]0;owned\x07", "\x1b[2J"],
                                    "script": "train.py"})
    result = runner.invoke(app, ["report", str(hostile)], env=PLAIN_ENV)
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.stdout and "\x07" not in result.stdout
    assert "train.py '\\x1b]0;owned\\x07' '\\x1b[2J'" in result.stdout
