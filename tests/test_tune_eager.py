"""`paddletune tune` on PyTorch jobs: the space built from a PyTorch profile (the knobs its
DataLoader and threads take, none of the Fluid runtime's), the settings written as PyTorch
code, and a trial that imposes a PyTorch-only override (the runtime must not judge it)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from paddletune.profile import load  # noqa: E402
from paddletune.tune import space as sp  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "COLUMNS": "200"}
ENV.pop("PADDLETUNE_OVERRIDES", None)
JOB = """
import torch
from torch import nn
data = torch.utils.data.TensorDataset(torch.randn(512, 8), torch.randint(0, 2, (512,)))
loader = torch.utils.data.DataLoader(data, batch_size=16, shuffle=True)
model = nn.Linear(8, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(3):
    for x, y in loader:
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
print("loader", loader.num_workers, loader.batch_size)
"""


def _run(procs, args, env=None):
    return procs.run([sys.executable, "-m", *args], 180, cwd=REPO, env=env or ENV,
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.fixture
def torch_profile(procs, tmp_path):
    script = tmp_path / "job.py"
    script.write_text(JOB)
    out = tmp_path / "p.jsonl"
    result = _run(procs, ["paddletune", "profile", "-q", "--out", str(out), str(script)])
    assert result.returncode == 0, result.stderr
    return load(out), script


def test_a_pytorch_space_has_its_dataloader_and_thread_knobs(torch_profile):
    profile, _ = torch_profile
    space = sp.build_space(profile)
    assert space.framework == "torch"
    knobs = space.knobs
    assert {"num_workers", "prefetch_factor", "persistent_workers", "batch_size",
            "blas_threads"} <= set(knobs)
    for fluid_only in ("capacity", "use_double_buffer", "num_threads",
                       "FLAGS_eager_delete_tensor_gb", "fuse_all_optimizer_ops"):
        assert fluid_only not in knobs, fluid_only
    assert knobs["blas_threads"].key == "OMP_NUM_THREADS"
    assert knobs["batch_size"].current == 16
    setting = {"num_workers": 2, "persistent_workers": True, "blas_threads": 1}
    env = sp.to_env(setting, space)
    assert json.loads(env["PADDLETUNE_OVERRIDES"]) == {
        "reader": {"num_workers": 2, "persistent_workers": True}}
    assert env["OMP_NUM_THREADS"] == "1"
    lines = sp.code_lines(setting, space)
    assert lines[0] == ("torch.utils.data.DataLoader(dataset, num_workers=2, "
                        "persistent_workers=True)")
    assert any(line.startswith("torch.set_num_threads(1)") for line in lines)
    for line in lines:
        compile(line, "code_lines", "exec")


def test_a_trial_takes_an_override_only_pytorch_knows(procs, torch_profile, tmp_path):
    """The embedded runtime checks PADDLETUNE_OVERRIDES against its own keys when imported;
    for a PyTorch trial it must not (prefetch_factor is not one of them)."""
    _, script = torch_profile
    out = tmp_path / "trial.jsonl"
    env = {**ENV, "PADDLETUNE_OVERRIDES": json.dumps(
        {"reader": {"num_workers": 1, "prefetch_factor": 4, "batch_size": 32}})}
    result = _run(procs, ["paddletune.trialrun", "--steps", "20", "--out", str(out),
                          str(script)], env=env)
    assert result.returncode == 0, result.stderr
    with open(out) as f:
        rows = list(map(json.loads, f))
    start = [r for r in rows if r.get("type") == "reader" and r.get("what") == "start"][0]
    assert (start["config"]["num_workers"], start["config"]["batch_size"]) == (1, 32)
    assert start["config"]["prefetch_factor"] == 4
    event = [r for r in rows if r.get("kind") == "overrides"][0]
    assert sorted((a["key"], a["value"], a.get("was")) for a in event["applied"]) == [
        ("batch_size", 32, 16), ("num_workers", 1, 0), ("prefetch_factor", 4, None)]
