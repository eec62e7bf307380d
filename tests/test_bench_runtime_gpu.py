"""benchmarks/bench_runtime.py --place gpu: a clear message and exit status 2 where CuPy, a GPU or
PyTorch with CUDA is missing; its runtime contender on a fake CuPy; the real comparison only
where a GPU, CuPy and torch with CUDA are all usable (skipped cleanly elsewhere)."""

import json

import numpy as np
import pytest

import fakecupy
from benchscripts import load
from fakecupy import restore_gpu_flags  # noqa: F401  (autouse: the flags back after each test)


@pytest.fixture(scope="module")
def bench():
    return load("bench_runtime.py")


def test_gpu_place_without_cupy_says_why_and_exits_2(bench, monkeypatch, capsys):
    from runtime import backend
    monkeypatch.setattr(backend, "cupy_status", lambda: (None, 0, "CuPy is not installed"))
    assert bench.main(["--place", "gpu"]) == 2
    err = capsys.readouterr().err
    assert "cannot run" in err and "CuPy is not installed" in err


def test_gpu_place_without_torch_says_why_and_exits_2(bench, monkeypatch, capsys):
    fakecupy.inject(monkeypatch, fakecupy.FakeCupy(numpy_kernels=True))
    monkeypatch.setattr(bench, "torch", None)
    assert bench.main(["--place", "gpu"]) == 2
    assert "needs PyTorch" in capsys.readouterr().err


def test_the_runtime_contender_runs_on_the_device_synchronised(bench, monkeypatch):
    fake = fakecupy.FakeCupy(numpy_kernels=True)
    fakecupy.inject(monkeypatch, fake)
    model = bench.RuntimeCudaMLP(fake)
    xs, ys = bench.make_data(16, 2)
    bench.time_steps(model, fake.asarray(xs), fake.asarray(ys), 3)
    assert fake.device_syncs == [0, 0]  # before and after the timed steps
    assert len(fake.stream_syncs) == 1 + 3  # the startup run and one per step
    assert bench.gpu_name(fake) == "Fake GPU"
    assert np.isfinite(model.step(xs[0], ys[0]))


def _real_gpu_missing():
    return load("bench_runtime.py", "bench_runtime_probe").gpu_missing()


MISSING = _real_gpu_missing()


@pytest.mark.skipif(MISSING is not None, reason=f"needs CuPy, a GPU and torch with CUDA: {MISSING}")
def test_real_gpu_comparison_reports_the_gpu_and_the_ratio(bench, capsys):
    assert bench.main(["--place", "gpu", "--steps", "5", "--rounds", "2", "--warmup", "2"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["gpu"] and report["runtime_vs_torch"] > 0
    assert report["captured"] == 1, report["eager_reasons"]


# --- bench_cnn_gpu.py: the ResNet-style CNN race ----------------------------------------------
@pytest.fixture(scope="module")
def cnn_bench():
    return load("bench_cnn_gpu.py")


def test_the_cnn_race_without_cupy_says_why_and_exits_2(cnn_bench, monkeypatch, capsys):
    from runtime import backend
    monkeypatch.setattr(backend, "cupy_status", lambda: (None, 0, "CuPy is not installed"))
    assert cnn_bench.main([]) == 2
    assert "cannot run" in capsys.readouterr().err


def test_the_runtime_cnn_runs_on_the_strict_fake_as_on_the_cpu(cnn_bench, monkeypatch):
    """Every op of the CNN up to the loss captures on the strict fake; the generic cross
    entropy (the fake cannot compile the fused one a GPU runs) reads the labels back, so the
    steps run eagerly there, with that reason."""
    import runtime as fluid
    fake = fakecupy.FakeCupy(strict_kernels=True)
    fakecupy.inject(monkeypatch, fake)
    xs, ys = cnn_bench.make_data(8, 2)
    on_gpu = cnn_bench.RuntimeCNN(fluid.CUDAPlace(0))
    on_gpu.cupy = fake
    on_cpu = cnn_bench.RuntimeCNN(fluid.CPUPlace())
    device = fake.asarray(xs), fake.asarray(ys)
    gpu = [float(on_gpu.step(device[0][i % 2], device[1][i % 2])) for i in range(5)]
    cpu = [float(on_cpu.step(xs[i % 2], ys[i % 2])) for i in range(5)]
    assert gpu == cpu and cpu[-1] < cpu[0]
    reason, = on_gpu.exe._graphs.reasons().values()
    assert "softmax_with_cross_entropy" in reason and "device to host" in reason


@pytest.mark.skipif(MISSING is not None, reason=f"needs CuPy, a GPU and torch with CUDA: {MISSING}")
def test_real_gpu_cnn_race_reports_the_ratio(cnn_bench, capsys):
    assert cnn_bench.main(["--steps", "3", "--rounds", "2", "--warmup", "2"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["runtime_vs_torch"] > 0 and report["torch_benchmark_vs_torch"] > 0
