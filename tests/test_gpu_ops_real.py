"""Every op case's kernels and the example models on a real GPU through CuPy, against the CPU's
NumPy results: the checks tests/test_gpu_strict.py makes against the strict fake, here with real
kernels (cuBLAS, CuPy's reductions, the fused CUDA kernels of runtime/ops/fused.py), so with
float rounding as the tolerance. Plus what only a real device shows: the fused kernels agree with
the generic CuPy path, and an out-of-range label raises when the step's work is done, naming the
op. Skipped (cleanly) where CuPy or a GPU is not usable."""

import numpy as np
import pytest

import opcheck
import runtime as fluid
from fakecupy import restore_gpu_flags  # noqa: F401  (autouse: the flags back after each test)
from runtime import backend
from runtime.errors import OpRuntimeError
from runtime.ops import fused
from test_gpu_strict import (GRAD_CASES, _assert_same, _train, cnn_model, forward_on_device,
                             grads_on_device, mlp_model, word2vec_model)

cupy = backend.cupy_status()[0]
pytestmark = pytest.mark.skipif(cupy is None, reason=f"needs CuPy and a GPU: "
                                                     f"{backend.cupy_status()[2]}")
RTOL64, ATOL64 = 1e-9, 1e-12  # the op cases are float64: reduction order and FMA, no more


@pytest.fixture(params=["fused", "generic"])
def kernels(request, monkeypatch):
    """Each check with the fused CUDA kernels and with the generic CuPy path."""
    monkeypatch.setattr(fused, "ENABLED", [request.param == "fused"])
    return request.param


def _to_host(value):
    from runtime.tensor import SelectedRows
    if isinstance(value, list):
        return [_to_host(v) for v in value]
    if isinstance(value, SelectedRows):
        return SelectedRows(_to_host(value.ids), _to_host(value.value), value.full_height)
    if isinstance(value, cupy.ndarray):
        return cupy.asnumpy(value)
    return value


def _on_gpu(value, what):
    from runtime.tensor import SelectedRows
    if isinstance(value, list):
        for i, v in enumerate(value):
            _on_gpu(v, f"{what}[{i}]")
    elif isinstance(value, SelectedRows):
        _on_gpu(value.value, what)
    elif value is not None:
        assert isinstance(value, cupy.ndarray), f"{what} is a {type(value).__name__}, not on " \
                                                f"the GPU"


@pytest.mark.parametrize("c", opcheck.CASES, ids=[c.id for c in opcheck.CASES])
def test_every_forward_kernel_matches_numpy_on_the_gpu(kernels, monkeypatch, c):
    want, got = forward_on_device(cupy, monkeypatch, c)
    for slot, value in want.items():
        _on_gpu(got[slot], f"{c.id} {slot}")
        _assert_same(_to_host(got[slot]), value, f"{c.id} {slot}", RTOL64, ATOL64)


@pytest.mark.parametrize("c", GRAD_CASES, ids=[c.id for c in GRAD_CASES])
def test_every_grad_kernel_matches_numpy_on_the_gpu(kernels, monkeypatch, c):
    want, got = grads_on_device(cupy, monkeypatch, c)
    for slot, value in want.items():
        _on_gpu(got[slot], f"{c.id} {slot}")
        _assert_same(_to_host(got[slot]), value, f"{c.id} {slot}", RTOL64, ATOL64)


# --- the models, float32 ------------------------------------------------------------------------
def _compare(build, feeds):
    cpu = _train(fluid.CPUPlace(), build, feeds)
    gpu = _train(fluid.CUDAPlace(0), build, feeds)
    np.testing.assert_allclose(gpu, cpu, rtol=1e-4, atol=1e-5)
    assert gpu[-1] < gpu[0]
    return gpu


@pytest.mark.parametrize("optimizer", ["momentum", "adam"])
def test_mlp_trains_alike_on_the_gpu(kernels, optimizer):
    _compare(*mlp_model(optimizer, n_train=512, hidden=(64, 32), batch=64, steps=10))


def test_cnn_with_batch_norm_trains_alike_on_the_gpu(kernels):
    _compare(*cnn_model())


@pytest.mark.parametrize("is_sparse,optimizer", [(True, "sgd"), (False, "adam"),
                                                 (True, "momentum"), (False, "sgd")])
def test_word2vec_embeddings_train_alike_on_the_gpu(kernels, is_sparse, optimizer):
    _compare(*word2vec_model(is_sparse, optimizer))


def _swce_program(n_classes, ignore_index=-100, hidden=0):
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 11
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = fluid.data(name="x", shape=[None, 6], dtype="float32")
        y = fluid.data(name="y", shape=[None, 1], dtype="int64")
        h = fluid.layers.fc(input=x, size=hidden, act="relu") if hidden else x
        logits = fluid.layers.fc(input=h, size=n_classes)
        loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(
            logits=logits, label=y, ignore_index=ignore_index))
        fluid.optimizer.Momentum(learning_rate=0.1, momentum=0.9,
                                 use_nesterov=True).minimize(loss)
    return main, startup, loss


@pytest.mark.parametrize("n_classes", [1, 3, 300])  # one, a few, more than a block's threads
def test_softmax_cross_entropy_with_ignored_rows_trains_alike(kernels, n_classes):
    rng = np.random.default_rng(12)
    x = rng.normal(size=(32, 6)).astype(np.float32)
    y = rng.integers(0, n_classes, (32, 1)).astype(np.int64)
    y[::7] = -1  # ignored rows
    feeds = [{"x": x, "y": y}] * 6  # one batch again and again: the loss must fall

    def build():
        return _swce_program(n_classes, ignore_index=-1, hidden=16)
    cpu = _train(fluid.CPUPlace(), build, feeds)
    gpu = _train(fluid.CUDAPlace(0), build, feeds)
    np.testing.assert_allclose(gpu, cpu, rtol=1e-4, atol=1e-5)
    if n_classes == 1:  # a single class costs nothing
        assert gpu == [0.0] * 6
    else:
        assert gpu[-1] < gpu[0]


def test_an_out_of_range_label_raises_when_the_step_is_done_naming_the_op(kernels):
    main, startup, loss = _swce_program(4)
    exe = fluid.Executor(fluid.CUDAPlace(0))
    x = np.ones((8, 6), np.float32)
    y = np.array([[0], [1], [2], [3], [7], [0], [1], [1]], np.int64)
    with fluid.scope_guard(fluid.Scope()):
        exe.run(startup)
        with pytest.raises(OpRuntimeError, match=r"softmax_with_cross_entropy.*label value 7 "
                                                 r"\(at row 4\) is out of range \[0, 4\)"):
            exe.run(main, feed={"x": x, "y": y}, fetch_list=[loss])
        y[4] = 2  # the next step with good labels runs: nothing is left pending
        value, = exe.run(main, feed={"x": x, "y": y}, fetch_list=[loss])
        assert np.isfinite(value).all()


def test_fused_kernels_are_in_use_on_the_gpu():
    assert fused.kernels(cupy) is not None
    assert fused.kernels(np) is None
