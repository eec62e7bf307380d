"""End-to-end: every example script runs as a real subprocess (`python examples/x.py ...`),
exits 0 and prints a `final:` line that meets a threshold; `--place gpu` without a GPU stops
with a one-line message and exit code 2."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

import runtime as fluid

REPO = Path(__file__).resolve().parents[1]
TIMEOUT_S = 120


def run_script(name, *argv):
    return subprocess.run([sys.executable, str(REPO / "examples" / f"{name}.py"), *argv],
                          cwd=REPO, capture_output=True, text=True, timeout=TIMEOUT_S)


def final_metrics(stdout):
    """{'loss': float, 'accuracy': float (classifiers only)} from the `final:` line."""
    finals = [line for line in stdout.splitlines() if line.startswith("final:")]
    assert len(finals) == 1, f"expected one 'final:' line in:\n{stdout}"
    return {key: float(value) for key, value in re.findall(r"(\w+)=(\S+)", finals[0])}


def test_fit_a_line_script():
    proc = run_script("fit_a_line", "--steps", "300", "--log-every", "100")
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"^step +100  loss \d+\.\d{4}$", proc.stdout, re.M), proc.stdout
    assert final_metrics(proc.stdout).keys() == {"loss"}
    assert final_metrics(proc.stdout)["loss"] < 0.05  # noise floor 0.01


@pytest.mark.parametrize("optimizer", ["momentum", "adam"])
def test_mlp_script(optimizer):
    proc = run_script("mlp", "--steps", "150", "--hidden", "256,128", "--optimizer", optimizer)
    assert proc.returncode == 0, proc.stderr
    assert final_metrics(proc.stdout)["accuracy"] > 0.85


def test_cnn_script():
    proc = run_script("cnn", "--steps", "200", "--batch-norm")
    assert proc.returncode == 0, proc.stderr
    assert final_metrics(proc.stdout)["accuracy"] > 0.8


@pytest.mark.parametrize("dense", [False, True], ids=["sparse", "dense"])
def test_word2vec_script(dense):
    argv = ["--steps", "300", "--dict-size", "500"] + (["--dense"] if dense else [])
    proc = run_script("word2vec", *argv)
    assert proc.returncode == 0, proc.stderr
    first_loss = float(re.search(r"^step +0  loss (\S+)$", proc.stdout, re.M).group(1))
    metrics = final_metrics(proc.stdout)
    assert metrics["loss"] < 0.7 * first_loss
    assert metrics["accuracy"] > 0.3  # chance is 1/500


@pytest.mark.skipif(fluid.is_compiled_with_cuda(), reason="a GPU is available here")
@pytest.mark.parametrize("name", ["fit_a_line", "mlp", "cnn", "word2vec", "input_pipeline"])
def test_gpu_place_without_a_gpu_is_a_one_line_error(name):
    proc = run_script(name, "--place", "gpu", "--steps", "1")
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and re.search(r"CuPy|GPU", lines[0]), proc.stderr
    assert "final:" not in proc.stdout


def test_input_pipeline_script_learns_the_same_through_every_reader():
    finals = {}
    for reader in (["--reader", "sync"], ["--reader", "loader"],
                   ["--reader", "loader", "--num-workers", "2"]):
        proc = run_script("input_pipeline", *reader, "--steps", "150", "--decode-us", "5",
                          "--log-every", "0")
        assert proc.returncode == 0, proc.stderr
        finals[" ".join(reader)] = final_metrics(proc.stdout)
    assert all(m["accuracy"] > 0.9 for m in finals.values()), finals
    assert len({tuple(m.values()) for m in finals.values()}) == 1, finals  # same batches
