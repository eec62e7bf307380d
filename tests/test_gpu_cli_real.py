"""`paddletune profile / report / advise` on a real GPU, end to end in real subprocesses: the
embedded runtime on CUDAPlace(0) (CuPy) and a PyTorch job on CUDA. Each skips cleanly where its
framework cannot reach a GPU (CPU CI); the logic they cross is covered on fakes elsewhere
(tests/test_memory_device.py, tests/test_cuda_graph.py, tests/test_torch_source.py)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from paddletune.profile import load
from paddletune.profile import records as r
from runtime import backend

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "COLUMNS": "200",
       "PYTHONPATH": os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH"))))}
ENV.pop("PADDLETUNE_OVERRIDES", None)


def _torch_cuda_missing():
    try:
        import torch
    except ImportError:
        return "PyTorch is not installed"
    return None if torch.cuda.is_available() else "this PyTorch sees no CUDA device"


CUPY_MISSING = None if backend.cupy_status()[0] is not None else backend.cupy_status()[2]
TORCH_MISSING = _torch_cuda_missing()


def cli(procs, *args, timeout=300):
    result = procs.run([sys.executable, "-m", "paddletune", *map(str, args)], timeout,
                       cwd=REPO, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True)
    print(result.stdout[-4000:], result.stderr[-2000:])  # the figures, for the device's log
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def device_memory_steps(path: Path) -> list:
    steps = load(path).records("memory", r.MemoryStep)
    assert steps, "no memory record"
    return steps


@pytest.mark.skipif(CUPY_MISSING is not None, reason=f"needs CuPy and a GPU: {CUPY_MISSING}")
def test_the_runtime_mlp_on_the_gpu_is_profiled_captured_and_advised(procs, tmp_path):
    out = tmp_path / "runtime.jsonl"
    cli(procs, "profile", "--out", out, "--steps", 120, REPO / "examples" / "mlp.py", "--",
        "--place", "gpu", "--steps", 160)
    memory = device_memory_steps(out)
    assert all(m.reserved_bytes > 0 and m.step_peak_bytes >= m.allocated_bytes > 0
               for m in memory)
    summary = json.loads(cli(procs, "report", "--json", out).stdout)
    assert summary["n_steps"] == 120
    graphs = load(out).events_of("cuda_graph")
    assert any(g.captured and g.graph_bytes > 0 for g in graphs), graphs  # training captured
    cli(procs, "advise", out)


@pytest.mark.skipif(TORCH_MISSING is not None, reason=f"needs torch with CUDA: {TORCH_MISSING}")
def test_a_torch_job_on_cuda_gets_the_caching_allocators_figures_and_advice(procs, tmp_path):
    out = tmp_path / "torch.jsonl"
    result = cli(procs, "profile", "--out", out, REPO / "examples" / "torch" / "mlp.py", "--",
                 "--device", "cuda", "--steps", 200)
    assert "accuracy" in result.stdout + result.stderr  # it ran whole: it learned (its assert)
    memory = device_memory_steps(out)
    assert all(m.reserved_bytes >= m.allocated_bytes > 0 for m in memory)
    assert max(m.step_peak_bytes for m in memory) > 0
    summary = json.loads(cli(procs, "report", "--json", out).stdout)
    assert summary["n_steps"] == 200
    device = summary["device"]  # the steady steps timed with CUDA events
    assert device["place"] == "CUDAPlace(0)" and device["scope"] == "steady", device
    assert device["steps"] >= 100 and device["copied_steps"] == device["steps"], device
    assert 0.0 <= device["idle_share"] < 1.0 and device["busy_s"] > 0, device
    import torch
    census = load(out).last_event("model")  # the model's census, with the device's capability
    major, minor = torch.cuda.get_device_capability(0)
    assert census.capability == f"{major}.{minor}" and census.modules.get("Linear"), census
    assert census.params.get("float32") and not census.autocast, census
    advice = json.loads(cli(procs, "advise", "--json", out).stdout)
    ids = {a["id"] for a in advice}
    if (major, minor) >= (7, 0):  # a float32 MLP without autocast on Tensor Cores
        assert "mixed-precision" in ids, ids
    if (major, minor) >= (8, 0) and not torch.backends.cuda.matmul.allow_tf32:
        assert "tf32-matmul" in ids, ids
