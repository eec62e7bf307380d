"""Whole-step CUDA graphs on a real GPU (runtime/cuda_graph.py): a classifier with the fused
kernels (cross entropy, accuracy, momentum) is captured and replayed and trains as the eager
steps do; a wrong label in a replayed step still names its op. Skipped (cleanly) where CuPy or a
GPU is not usable; tests/test_cuda_graph.py covers the same logic on the strict fake CuPy."""

import numpy as np
import pytest

import runtime as fluid
from runtime import backend
from runtime.errors import OpRuntimeError

from fakecupy import restore_gpu_flags  # noqa: F401  (autouse: the flags back after each test)

cupy = backend.cupy_status()[0]
pytestmark = pytest.mark.skipif(cupy is None, reason=f"needs CuPy and a GPU: "
                                                     f"{backend.cupy_status()[2]}")
STEPS = 12


def _build():
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 5
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", [64])
        y = fluid.layers.data("y", [1], dtype="int64")
        h = fluid.layers.fc(fluid.layers.fc(x, 128, act="relu"), 128, act="relu")
        logits = fluid.layers.fc(h, 10)
        loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(logits, y))
        acc = fluid.layers.accuracy(fluid.layers.softmax(logits), y)
        fluid.optimizer.Momentum(0.05, 0.9).minimize(loss)
    return main, startup, loss, acc


def _feeds(bad_at=None):
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal((64, 64)).astype("float32") for _ in range(STEPS)]
    feeds = [{"x": x, "y": x[:, :10].argmax(1)[:, None].astype("int64")}  # learnable
             for x in xs]
    if bad_at is not None:
        feeds[bad_at]["y"][7, 0] = 10
    return feeds


def _train(capture, feeds):
    fluid.set_flags({"FLAGS_new_executor_use_cuda_graph": capture})
    with fluid.unique_name.guard():
        main, startup, loss, acc = _build()
    exe = fluid.Executor(fluid.CUDAPlace(0))
    out = []
    with fluid.scope_guard(fluid.Scope()):
        exe.run(startup)
        for feed in feeds:
            values = exe.run(main, feed=feed, fetch_list=[loss, acc])
            out.append([float(v.reshape(-1)[0]) for v in values])
    return np.array(out), exe


def test_a_captured_classifier_trains_as_the_eager_one():
    feeds = _feeds()
    eager, _ = _train(False, feeds)
    captured, exe = _train(True, feeds)
    assert exe._graphs.reasons() == {} and len(exe._graphs.captured()) == 1
    graph, = exe._graphs.captured()  # its fetches and label check read from host copies
    assert graph.checks and all(isinstance(flag, np.ndarray) for _, flag, _ in graph.checks)
    assert all(isinstance(host, np.ndarray) for host in graph.host_fetches)
    np.testing.assert_allclose(captured, eager, rtol=1e-5, atol=1e-6)
    assert captured[-1, 0] < captured[0, 0]


def test_a_wrong_label_in_a_replayed_step_names_its_op():
    with pytest.raises(OpRuntimeError, match="softmax_with_cross_entropy.*label value 10"):
        _train(True, _feeds(bad_at=STEPS - 2))


def _device_layouts(host):
    """The same matrix as CuPy holds it in each layout a kernel hands gemm.matmul: those of
    tests/test_gemm.py, one starting inside its buffer (data.ptr past the start), one cuBLAS
    cannot read as it lies."""
    from test_gemm import layouts
    views = {name: cupy.asarray(v) if name != "F" else cupy.asfortranarray(cupy.asarray(v))
             for name, v in layouts(host).items()}
    rows, cols = host.shape
    padded = cupy.zeros((rows + 1, cols + 2), host.dtype)
    padded[1:, 2:] = cupy.asarray(host)
    views["offset"] = padded[1:, 2:]
    every_other = cupy.zeros((rows, 2 * cols), host.dtype)
    every_other[:, ::2] = cupy.asarray(host)
    views["neither"] = every_other[:, ::2]
    return views


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("m,k,n", [(37, 19, 23), (1, 6, 5), (6, 1, 4), (5, 7, 1)])
def test_products_captured_through_the_runtimes_cublas_match_numpy(dtype, m, k, n):
    """Every operand layout, captured into one graph through gemm.Cublas (CuPy refuses its
    own cuBLAS there) and replayed, equals NumPy's product; empty dimensions too."""
    from runtime import gemm
    rng = np.random.default_rng(3)
    a_host, b_host = (rng.standard_normal((m, k)).astype(dtype),
                      rng.standard_normal((k, n)).astype(dtype))
    a_views, b_views = _device_layouts(a_host), _device_layouts(b_host)
    from test_gemm import captured_products
    outs, empties = captured_products(cupy, gemm.capture_blas(cupy), a_views, b_views,
                                      [((4, 0), (0, 5)), ((0, 3), (3, 5)), ((4, 3), (3, 0))],
                                      dtype)
    tolerance = 1e-4 if dtype == "float32" else 1e-10
    for key, out in outs.items():
        np.testing.assert_allclose(cupy.asnumpy(out), a_host @ b_host, rtol=tolerance,
                                   atol=tolerance, err_msg=str(key))
    assert [e.shape for e in empties] == [(4, 5), (0, 5), (4, 0)]
    assert not cupy.asnumpy(empties[0]).any()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_stacked_products_captured_through_the_runtimes_cublas_match_numpy(dtype):
    """Stacks of matrices (attention's products, grouped convolutions: NumPy's broadcasting of
    the leading dimensions), each one strided-batched GEMM inside the capture."""
    from runtime import gemm
    from test_gemm import captured_stacks, stacks
    host = stacks(np.random.default_rng(4), dtype)
    outs = captured_stacks(cupy, gemm.capture_blas(cupy), host)
    tolerance = 1e-4 if dtype == "float32" else 1e-10
    for name, (a, b) in host.items():
        np.testing.assert_allclose(cupy.asnumpy(outs[name]), a @ b, rtol=tolerance,
                                   atol=tolerance, err_msg=name)
