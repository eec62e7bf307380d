"""`paddletune profile / report / advise` on PyTorch jobs, end to end in real subprocesses
(`python -m paddletune`), each reaped whatever happens (conftest's `procs`)."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[1]
INPUT_HEAVY = REPO / "examples" / "torch" / "input_heavy.py"
# One intra-op thread: on a 2-core machine shared with another busy process, torch's OpenMP
# threads spin against it and a 0.4 ms MLP step becomes ~70 ms (the job turns compute-bound
# for a reason unrelated to what the test checks).
ENV = {**os.environ, "COLUMNS": "200", "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
ENV.pop("PADDLETUNE_OVERRIDES", None)
for name in ("FORCE_COLOR", "TTY_COMPATIBLE", "NO_COLOR"):
    ENV.pop(name, None)

RAISES_AFTER_5 = """
import torch
from torch import nn

torch.manual_seed(0)
model = nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
data = torch.utils.data.TensorDataset(torch.randn(64, 4))
for step, (x,) in enumerate(torch.utils.data.DataLoader(data, batch_size=4)):
    if step == 5:
        raise RuntimeError("boom after 5 steps")
    loss = model(x).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""

SPAWNED_EACH_EPOCH = """
import torch
import torch.multiprocessing as mp
from torch import nn


def main():
    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(1024, 16), torch.randn(1024, 1))
    loader = torch.utils.data.DataLoader(data, batch_size=32, shuffle=True, num_workers=2)
    model = nn.Linear(16, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(2):
        for x, y in loader:  # (its workers spawned again each epoch)
            loss = (model(x) - y).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


if __name__ == "__main__":
    mp.set_start_method("spawn", force=True)
    main()
"""


def cli(procs, *args, timeout=120, env=None):
    return procs.run([sys.executable, "-m", "paddletune", *map(str, args)], timeout,
                     cwd=REPO, env=env or ENV, stdout=subprocess.PIPE,
                     stderr=subprocess.PIPE, text=True)


def header(path: Path) -> dict:
    with open(path) as f:
        record = json.loads(f.readline())
    assert record["type"] == "header"
    return record


def records(path: Path, kind: str) -> list:
    with open(path) as f:
        return [r for r in map(json.loads, f) if r.get("type") == kind]


def report_json(procs, path: Path) -> dict:
    result = cli(procs, "report", "--json", path)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_input_heavy_is_input_bound_and_advised_in_torch_code(procs, tmp_path):
    out = tmp_path / "p.jsonl"
    result = cli(procs, "profile", "--out", out, "--steps", 80, INPUT_HEAVY)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert header(out)["source"]["framework"] == "torch"
    assert len(records(out, "step")) == 80
    # the hooks' own time on the training thread, beside the probes' (TorchHooks.own_s)
    (hooks,) = [r for r in records(out, "probe") if r["name"] == "hooks"]
    loop_s = sum(r["wall_s"] + r.get("gap_s", 0.0) for r in records(out, "step"))
    assert hooks["in_step"] and 0.0 < hooks["overhead_s"] < 0.2 * loop_s, (hooks, loop_s)
    summary = report_json(procs, out)
    assert summary["verdict"]["kind"] in ("highly-input-bound", "moderately-input-bound"), \
        summary["verdict"]
    assert summary["n_steps"] == 80
    advice = cli(procs, "advise", out)
    assert advice.returncode == 0, advice.stderr
    text = advice.stdout
    assert "torch.utils.data.DataLoader(" in text, text
    workers = [int(n) for n in re.findall(r"num_workers=(\d+)", text)]
    assert workers and max(workers) >= 1, text


def test_the_profile_holds_the_models_census_and_the_report_shows_it(procs, tmp_path):
    out = tmp_path / "p.jsonl"
    result = cli(procs, "profile", "-q", "--out", out, "--steps", 20,
                 REPO / "examples" / "torch" / "mlp.py")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (census,) = [e for e in records(out, "event") if e.get("kind") == "model"]
    assert census["modules"]["Linear"] >= 2 and census["params"]["float32"] > 0, census
    assert not census.get("autocast") and "capability" not in census  # (defaults: not written)
    report = cli(procs, "report", out)
    assert report.returncode == 0, report.stderr
    assert "Model (first training step): leaf module calls in the first step: Linear" in \
        " ".join(report.stdout.split()), report.stdout


def test_a_script_that_raises_keeps_its_profile(procs, tmp_path):
    script = tmp_path / "boom.py"
    script.write_text(RAISES_AFTER_5)
    out = tmp_path / "b.jsonl"
    result = cli(procs, "profile", "--out", out, script)
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]
    assert "boom after 5 steps" in result.stderr
    assert header(out)["source"]["framework"] == "torch"
    assert len(records(out, "step")) == 5
    summary = report_json(procs, out)
    assert summary["n_steps"] == 5
    assert summary["exit"]["status"] == 1
    assert summary["exit"]["reason"] == "exception"
    assert "boom after 5 steps" in summary["exit"]["message"]


WORKER_RAISES = """
import torch

class Records(torch.utils.data.Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        if i == 40:
            raise ValueError(f"corrupt record {i}: bad header")
        return torch.full((4,), float(i))

if __name__ == "__main__":
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for x in torch.utils.data.DataLoader(Records(), batch_size=8, num_workers=2):
        model(x).pow(2).mean().backward()
        optimizer.step()
"""


def test_a_worker_error_keeps_its_culprit_in_the_profile(procs, tmp_path):
    """A DataLoader worker's exception, raised again in the training loop by PyTorch
    ("Caught ValueError in DataLoader worker process N."): the profile's error and exit
    keep the worker's own error and its __getitem__ line, not only the re-raise's."""
    script = tmp_path / "worker_raises.py"
    script.write_text(WORKER_RAISES)
    out = tmp_path / "w.jsonl"
    result = cli(procs, "profile", "--out", out, script)
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]
    (error,) = [r for r in records(out, "event") if r["kind"] == "error"]
    assert error["message"].startswith("Caught ValueError in DataLoader worker process")
    assert error["message"].endswith("ValueError: corrupt record 40: bad header"), error
    assert error["where"].startswith(str(script)) and error["where"].endswith(
        "in __getitem__"), error
    summary = report_json(procs, out)
    assert "corrupt record 40" in summary["exit"]["message"]
    assert summary["n_steps"] == 5


def test_framework_torch_on_a_script_without_torch(procs, tmp_path):
    script = tmp_path / "plain.py"
    script.write_text('print("no torch here")\n')
    out = tmp_path / "c.jsonl"
    result = cli(procs, "profile", "--framework", "torch", "--out", out, script)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "no torch here" in result.stdout
    assert header(out)["source"]["framework"] == "torch"
    summary = report_json(procs, out)
    assert summary["n_steps"] == 0
    assert summary["verdict"]["kind"] == "too-few-steps"
    report = cli(procs, "report", out)
    assert report.returncode == 0, report.stderr
    assert "no training steps observed" in report.stdout.lower()


# torch "not installed": `sys.modules["torch"] = None` makes importlib.util.find_spec("torch")
# return None in the CLI's process, without touching any file.
MISSING_TORCH = ("import sys; sys.modules['torch'] = None; sys.argv = ['paddletune'] + "
                 "sys.argv[1:]; from paddletune.cli import main; main()")


@pytest.mark.parametrize("framework", [None, "torch"])
def test_torch_missing_is_a_clear_error(procs, tmp_path, framework):
    script = tmp_path / "train.py"
    script.write_text(RAISES_AFTER_5 if framework is None else 'print("hi")\n')
    out = tmp_path / "d.jsonl"
    chosen = ["--framework", framework] if framework else []
    result = procs.run([sys.executable, "-c", MISSING_TORCH, "profile", *chosen, "--out",
                        str(out), str(script)], 120, cwd=REPO, env=ENV,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "PyTorch, which is not installed" in result.stderr
    assert "pip install" in result.stderr
    assert not out.exists()


def test_an_unsupported_torch_version_is_one_line_before_anything_runs(procs, tmp_path):
    """A torch older than 2.0 (a fake package on PYTHONPATH that says 1.13.1 and has nothing
    else: a real 1.13 lacks the optimizer step hooks the source imports) is refused with the
    supported range, exit status 2 as docs/frameworks.md says, no traceback, nothing run."""
    fake = tmp_path / "old" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text('__version__ = "1.13.1+cpu"\n')
    script = tmp_path / "train.py"
    script.write_text('import torch\nprint("the script ran")\n')
    out = tmp_path / "e.jsonl"
    env = {**ENV, "PYTHONPATH": f"{fake.parent}{os.pathsep}{REPO}"}
    result = cli(procs, "profile", "--out", out, script, env=env)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.splitlines() == [
        "paddletune: torch: paddletune supports PyTorch 2.0 and later; this is torch "
        "1.13.1+cpu: pip install 'torch>=2.0'"], result.stderr
    assert "the script ran" not in result.stdout
    assert not out.exists()


def test_a_workers_hand_over_is_measured_and_the_override_changes_the_strategy(procs,
                                                                                tmp_path):
    """examples/torch/mlp.py with one worker (through the overrides): each batch's hand-over
    is a part of its wait, in the profile's reader figures and its report; the sharing
    strategy the overrides set is the one the pass ran with."""
    from paddletune.profile import load
    mlp = REPO / "examples" / "torch" / "mlp.py"
    for strategy in ("file_descriptor", "file_system"):
        out = tmp_path / f"{strategy}.jsonl"
        env = {**ENV, "PADDLETUNE_OVERRIDES": json.dumps(
            {"reader": {"num_workers": 1},
             "multiprocessing": {"sharing_strategy": strategy}})}
        result = cli(procs, "profile", "--out", out, mlp, "--steps", 120, env=env)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        f = load(out).summary.main_loader
        assert f.config.num_workers == 1 and f.config.sharing_strategy == strategy
        assert 0 < f.handover_s_per_pop < f.wait.mean_s, f
        assert "hand-over" in result.stdout + result.stderr


def test_spawned_workers_started_every_epoch_are_advised_to_be_kept(procs, tmp_path):
    """multiprocessing's spawn start method, the DataLoader's workers not kept: each epoch's
    iter() returns at once and the loop waits seconds in its first next() while two new
    interpreters import torch. That wait is the pass's start-up (iter() alone took
    milliseconds), advised away with persistent_workers=True; the workers' memory growth
    (the interpreter's) is not taken for the dataset's copy-on-read."""
    script = tmp_path / "spawned.py"
    script.write_text(SPAWNED_EACH_EPOCH)
    out = tmp_path / "p.jsonl"
    result = cli(procs, "profile", "--out", out, script, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    starts = [r for r in records(out, "reader") if r["what"] == "start"]
    assert [r["pass_no"] for r in starts] == [1, 2]
    for r in starts:
        assert r["config"]["start_method"] == "spawn"
        assert r["first_wait_s"] > 0.3 > r["startup_s"], r
    advice = cli(procs, "advise", "--json", out)
    assert advice.returncode == 0, advice.stderr
    cards = json.loads(advice.stdout)
    (card,) = [a for a in cards if a["id"] == "worker-start-per-pass"]
    fig = card["figures"]
    assert fig["in_first_batch"] and fig["suggested_persistent_workers"], fig
    assert fig["later_s"] > 0.3 and fig["saved_share"] > 0.05, fig
    assert "num_workers=2, persistent_workers=True" in card["change"], card
    assert card["expected_speedup"] > 1.0
    assert not [a for a in cards if a["id"] == "worker-copy-on-read"], cards
    report = " ".join(cli(procs, "report", out).stdout.split())
    assert "2 worker processes (spawn)" in report and "first batch's wait" in report, report


def test_an_evaluation_loop_is_left_out_of_the_steps_and_advised(procs, tmp_path):
    """examples/torch/train_eval.py: after each epoch an evaluation loop over a second
    DataLoader whose samples wait on a simulated read. Its passes run between training
    steps: no step holds one, the report states what they cost, and advise gives that
    DataLoader workers."""
    out = tmp_path / "p.jsonl"
    result = cli(procs, "profile", "--out", out, REPO / "examples" / "torch" / "train_eval.py",
                 "--", "--epochs", 3, "--train-samples", 1024, "--eval-samples", 512,
                 "--read-ms", 0.2)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    starts = {(r["loader"], r["pass_no"]): r["t_s"] for r in records(out, "reader")
              if r["what"] == "start"}
    ends = [r for r in records(out, "reader") if r["what"] == "end"]
    passes = [r for r in ends if r.get("eval_s") is not None]
    assert [(r["loader"], r["batches"]) for r in passes] == [(1, 2)] * 3, ends
    assert all(r.get("eval_s") is None for r in ends if r["loader"] == 0)
    steps = records(out, "step")
    assert len(steps) == 3 * 1024 // 64
    for p in passes:  # no training step spans an evaluation pass
        begin = starts[(1, p["pass_no"])]
        assert p["eval_s"] >= 0.5 * (p["t_s"] - begin), p
        assert not [s for s in steps if s["t_s"] < begin and s["t_s"] + s["wall_s"] > p["t_s"]]
    summary = report_json(procs, out)
    evaluation = summary["evaluation"]
    assert evaluation["passes"] == 3 and evaluation["loaders"][0]["loader"] == 1
    assert evaluation["read_s"] > 0.5 * evaluation["total_s"], evaluation
    report = cli(procs, "report", out)
    assert "Evaluation: 3 DataLoader passes ran between training steps" in \
        " ".join(report.stdout.split()), report.stdout
    advice = cli(procs, "advise", "--json", out)
    assert advice.returncode == 0, advice.stderr
    (card,) = [a for a in json.loads(advice.stdout) if a["id"] == "evaluation-input"]
    assert card["figures"]["suggested_workers"] >= 1
    assert "eval_loader = torch.utils.data.DataLoader(dataset, batch_size=256, num_workers=" \
        in card["change"], card


def test_an_evaluation_loop_that_breaks_early_is_left_out_of_the_steps(procs, tmp_path):
    """examples/torch/train_eval.py --eval-batches 2: each evaluation reads its loader's
    first batches under no_grad and breaks. Each pass ends as the loop turns back to
    training ("left"; the last, after which the script ends, ends with the job), no
    training step spans one, and the summary counts them."""
    out = tmp_path / "p.jsonl"
    result = cli(procs, "profile", "--out", out, REPO / "examples" / "torch" / "train_eval.py",
                 "--", "--epochs", 3, "--train-samples", 1024, "--eval-samples", 2048,
                 "--read-ms", 0.2, "--eval-batches", 2, "--eval-workers", 1)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    reader = records(out, "reader")
    starts = {(r["loader"], r["pass_no"]): r["t_s"] for r in reader if r["what"] == "start"}
    left = [r for r in reader if r.get("eval_s") is not None]
    assert [(r["loader"], r["what"], r["batches"]) for r in left] == \
        [(1, "left", 3)] * 2 + [(1, "end", 3)], reader
    steps = records(out, "step")
    assert len(steps) == 3 * 1024 // 64
    for p in left:
        begin = starts[(1, p["pass_no"])]
        assert p["eval_s"] >= 0.9 * (p["t_s"] - begin) and p["eval_read_s"] > 0, p
        assert not [s for s in steps if s["t_s"] < begin and s["t_s"] + s["wall_s"] > p["t_s"]]
    evaluation = report_json(procs, out)["evaluation"]
    assert evaluation["passes"] == 3 and evaluation["loaders"][0]["batches"] == 9


def test_a_lightning_trainer_is_profiled_with_its_validation_left_out(procs, tmp_path):
    """examples/torch/lightning_trainer.py: PyTorch Lightning's Trainer runs the loop (the
    optimizer steps through a closure). Its steps are the optimizer's, its validation (the
    sanity check, then limit_val_batches batches after each epoch, without gradients and
    stopped before the DataLoader's end) is left out of them, and the samples a second
    count the training batches only."""
    pytest.importorskip("pytorch_lightning")
    out = tmp_path / "p.jsonl"
    result = cli(procs, "profile", "--out", out,
                 REPO / "examples" / "torch" / "lightning_trainer.py", "--", "--epochs", 2,
                 "--train-samples", 1024, "--limit-val-batches", 3, "--read-ms", 0.1)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert header(out)["source"]["framework"] == "torch"
    steps = records(out, "step")
    assert len(steps) == 2 * 1024 // 64
    reader = records(out, "reader")
    starts = {(r["loader"], r["pass_no"]): r["t_s"] for r in reader if r["what"] == "start"}
    validation = [r for r in reader if r.get("eval_s") is not None]
    assert len(validation) == 3 and len({r["loader"] for r in validation}) == 1, reader
    assert [r["what"] for r in validation[:2]] == ["left", "left"], validation
    for p in validation:
        begin = starts[(p["loader"], p["pass_no"])]
        assert not [s for s in steps if s["t_s"] < begin and s["t_s"] + s["wall_s"] > p["t_s"]]
    summary = report_json(procs, out)
    assert summary["evaluation"]["passes"] == 3
    assert summary["throughput"]["batch_size"] == 64
    assert summary["reader"]["main"] != validation[0]["loader"]


CPU_AUTOCAST = """
import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 4))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
data = torch.utils.data.TensorDataset(torch.randn(2048, 64), torch.randint(0, 4, (2048,)))
for epoch in range(2):
    for x, y in torch.utils.data.DataLoader(data, batch_size=32, shuffle=True):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""


def test_cpu_autocast_without_its_kernels_is_advised_off_and_the_override_does_it(procs,
                                                                                 tmp_path):
    import torch
    if torch.ops.mkldnn._is_mkldnn_bf16_supported():
        pytest.skip("this CPU has oneDNN's bfloat16 kernels: the autocast is not slow here")
    script = tmp_path / "train.py"
    script.write_text(CPU_AUTOCAST)
    out = tmp_path / "p.jsonl"
    result = cli(procs, "profile", "-q", "--out", out, "--steps", 40, script)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (census,) = [e for e in records(out, "event") if e.get("kind") == "model"]
    assert census["cpu_autocast"] == "bfloat16" and census["cpu_kernels"] is False
    advice = cli(procs, "advise", "--json", out)
    assert advice.returncode == 0, advice.stderr
    (card,) = [a for a in json.loads(advice.stdout) if a["id"] == "cpu-autocast-slow"]
    assert "enabled=cpu_bf16" in card["change"] and card["expected_speedup"] > 1.0
    env = {**ENV, "PADDLETUNE_OVERRIDES": '{"backends": {"cpu_autocast": false}}'}
    off = tmp_path / "off.jsonl"
    result = cli(procs, "profile", "-q", "--out", off, "--steps", 40, script, env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (census,) = [e for e in records(off, "event") if e.get("kind") == "model"]
    assert not census.get("autocast") and not census.get("cpu_autocast")
    (overrides,) = [e for e in records(off, "event") if e.get("kind") == "overrides"]
    assert [(a["key"], a["value"]) for a in overrides["applied"]] == [("cpu_autocast", False)]


PIN_MEMORY_FILTERED = """
import warnings
import torch
warnings.filterwarnings("ignore", category=UserWarning,
                        module=r"torch\\.utils\\.data\\.dataloader")
loader = torch.utils.data.DataLoader(torch.arange(40.).view(20, 2), batch_size=2,
                                     pin_memory=True)
w = torch.zeros(2, requires_grad=True)
optimizer = torch.optim.SGD([w], lr=0.1)
for b in loader:
    loss = ((b @ w) - 1).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""


def test_a_frameworks_warning_names_its_own_module_as_under_python(procs, tmp_path):
    """PyTorch warns of pin_memory without a GPU from inside its DataLoader iterator's
    __init__, which the source wraps: the warning names torch's module (the script's filter
    on it silences it) and, unfiltered, the same file and line as under `python`."""
    import torch
    if torch.accelerator.is_available():
        pytest.skip("an accelerator is found: PyTorch does not warn")
    script = tmp_path / "train.py"
    script.write_text(PIN_MEMORY_FILTERED)
    result = cli(procs, "profile", "-q", "--out", tmp_path / "p.jsonl", script)
    assert result.returncode == 0 and "pin_memory" not in result.stderr, result.stderr
    script.write_text(PIN_MEMORY_FILTERED.replace('"ignore", category', '"default", category'))
    plain = procs.run([sys.executable, str(script)], 120, cwd=tmp_path, env=ENV,
                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    result = cli(procs, "profile", "-q", "--out", tmp_path / "p.jsonl", script)
    assert result.returncode == 0, result.stderr
    (said,) = [line for line in plain.stderr.splitlines() if "pin_memory" in line]
    assert "dataloader.py" in said and said in result.stderr.splitlines(), result.stderr


def test_a_warning_made_an_error_has_pythons_traceback(procs, tmp_path):
    """`python -W error`: PyTorch's pin_memory warning raises inside its DataLoader
    iterator's __init__, which the source wraps; the traceback printed is Python's, without
    paddletune's wrapper frames (helper-44: it ended in paddletune/warn_frames.py)."""
    import torch
    if torch.accelerator.is_available():
        pytest.skip("an accelerator is found: PyTorch does not warn")
    script = tmp_path / "train.py"
    script.write_text("import torch\n"
                      "loader = torch.utils.data.DataLoader(torch.arange(4.).view(2, 2), "
                      "pin_memory=True)\n"
                      "for b in loader:\n"
                      "    pass\n")
    plain = procs.run([sys.executable, "-W", "error", str(script)], 120, cwd=tmp_path,
                      env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    result = procs.run([sys.executable, "-W", "error", "-m", "paddletune", "profile", "-q",
                        "--out", str(tmp_path / "p.jsonl"), str(script)], 120, cwd=REPO,
                       env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert plain.returncode == result.returncode == 1, result.stderr
    traceback_of = [line for line in plain.stderr.splitlines() if line.strip()]
    assert traceback_of[-1].startswith("UserWarning: 'pin_memory'")
    assert traceback_of == [line for line in result.stderr.splitlines() if line.strip()][
        -len(traceback_of):]
    assert "paddletune" not in "".join(result.stderr.splitlines()[-len(traceback_of):])
