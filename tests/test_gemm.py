"""runtime/gemm.py on the CPU: how a row-major operand is described to column-major cuBLAS
(checked by doing cuBLAS's column-major GEMM on the operands' own memory with NumPy), and which
products go to the runtime's own cuBLAS while a capture is under way. The product on a real
GPU is tests/test_cuda_graph_real.py's; the capture path on the strict fake,
tests/test_cuda_graph.py's."""

import numpy as np
import pytest

from runtime import gemm


def column_major(x, op: gemm.Operand, rows: int, cols: int):
    """op(X) of the (rows, cols) matrix cuBLAS reads from x's memory with leading dimension
    op.ld: stored column-major as (rows, cols) for OP_N, as (cols, rows) for OP_T."""
    stored = (rows, cols) if op.op == gemm.OP_N else (cols, rows)
    item = x.itemsize
    matrix = np.lib.stride_tricks.as_strided(x, shape=stored, strides=(item, op.ld * item))
    return matrix if op.op == gemm.OP_N else matrix.T


def cublas_gemm(a, b):
    """What cublas<t>gemm computes with gemm_call's arguments, on a's and b's memory."""
    (m, k), n = a.shape, b.shape[1]
    call = gemm.gemm_call(gemm.operand(a), gemm.operand(b), m, n, k)
    assert (call.m, call.n, call.k, call.ldc) == (n, m, k, max(1, n))
    # cuBLAS refuses a leading dimension below the stored matrix's rows (INVALID_VALUE)
    assert call.lda >= max(1, n if call.transa == gemm.OP_N else k)
    assert call.ldb >= max(1, k if call.transb == gemm.OP_N else m)
    first = column_major(b, gemm.Operand(call.transa, call.lda), n, k)
    second = column_major(a, gemm.Operand(call.transb, call.ldb), k, m)
    return (first @ second).T  # column-major C^T (n, m) read back row-major


def layouts(matrix):
    wide = np.zeros((matrix.shape[0], matrix.shape[1] + 3), matrix.dtype)
    wide[:, :matrix.shape[1]] = matrix
    tall = np.zeros((matrix.shape[1], matrix.shape[0] + 2), matrix.dtype)
    tall[:, :matrix.shape[0]] = matrix.T
    return {"C": matrix.copy(), "F": np.asfortranarray(matrix),
            "row stride": wide[:, :matrix.shape[1]],
            "transposed with a stride": tall[:, :matrix.shape[0]].T}


@pytest.mark.parametrize("shape", [(5, 3, 4), (1, 6, 2), (7, 1, 3), (4, 5, 1)])
def test_every_layout_is_read_by_cublas_as_the_matrix_it_is(shape):
    m, k, n = shape
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    for a_name, a_view in layouts(a).items():
        for b_name, b_view in layouts(b).items():
            np.testing.assert_allclose(cublas_gemm(a_view, b_view), a @ b, rtol=1e-12,
                                       err_msg=f"{a_name} @ {b_name}")


def test_an_operand_cublas_cannot_read_is_left_to_be_copied():
    x = np.zeros((4, 10))[:, ::2]
    assert gemm.operand(x) is None
    assert gemm.operand(np.zeros((4, 10))[::2]) == gemm.Operand(gemm.OP_N, 20)


class Recorder:
    def __init__(self):
        self.products = []

    cupy = np

    def matmul(self, a, b, workspace):
        assert workspace.nbytes == gemm.WORKSPACE_BYTES
        self.products.append((a.shape, b.shape))
        return a @ b


def test_only_products_of_float_matrices_go_to_the_capturing_cublas():
    blas, rng = Recorder(), np.random.default_rng(1)
    floats, doubles = rng.standard_normal((3, 4)).astype("float32"), rng.standard_normal((4, 2))
    with gemm.capturing(blas):
        gemm.matmul(floats, floats.T)
        gemm.matmul(doubles.T, doubles)
        gemm.matmul(floats, doubles)  # mixed dtypes: left to `@`
        gemm.matmul(np.ones((2, 3, 4)), np.ones((2, 4, 5)))  # a stack: left to `@`
        gemm.matmul(np.ones((2, 3), "int64"), np.ones((3, 2), "int64"))
    np.testing.assert_allclose(gemm.matmul(floats, floats.T), floats @ floats.T)  # after: `@`
    assert blas.products == [((3, 4), (4, 3)), ((2, 4), (4, 2))]


@pytest.fixture
def fake_cublas(monkeypatch):
    """gemm.Cublas itself on the strict fake CuPy and its stand-in cuBLAS library."""
    import fakecupy
    fake = fakecupy.FakeCupy(strict_kernels=True)
    fakecupy.inject(monkeypatch, fake)
    return fake, gemm.capture_blas(fake)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_runtimes_cublas_captures_every_layout_and_replays_it(fake_cublas, dtype):
    """Through gemm.Cublas (its handle, workspace, stream and GEMM arguments), inside a
    capture: every layout of both operands, one cuBLAS cannot read as it lies (copied first),
    and an empty inner dimension; the graph's launch recomputes them from the inputs' current
    values."""
    fake, blas = fake_cublas
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((5, 3)).astype(dtype), rng.standard_normal((3, 4)).astype(dtype)
    spread = np.zeros((5, 6), dtype)
    spread[:, ::2] = a
    a_views = {name: fake.asarray(v) for name, v in layouts(a).items()}
    a_views["neither"] = fake.asarray(spread)[:, ::2]
    assert gemm.operand(a_views["neither"]) is None
    b_views = {name: fake.asarray(v) for name, v in layouts(b).items()}
    outs, (empty,) = captured_products(fake, blas, a_views, b_views, [((2, 0), (0, 3))], dtype)
    for key, out in outs.items():
        np.testing.assert_allclose(out.get(), a @ b, rtol=1e-6, err_msg=str(key))
    assert empty.get().shape == (2, 3) and not empty.get().any()


def captured_products(xp, blas, a_views, b_views, ones_shapes, dtype):
    """Captured into one graph through `blas` (a gemm.Cublas) on a stream of its own, then
    launched and waited for: {(a name, b name): the product of each pair of views}, and the
    product of ones of each pair of `ones_shapes`."""
    stream = xp.cuda.Stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        with gemm.capturing(blas) as capture:
            outs = {(x, y): gemm.matmul(xv, yv) for x, xv in a_views.items()
                    for y, yv in b_views.items()}
            ones = [gemm.matmul(xp.ones(shape_a, dtype), xp.ones(shape_b, dtype))
                    for shape_a, shape_b in ones_shapes]
        graph = stream.end_capture()
        graph.launch()
    stream.synchronize()
    assert capture.workspace is not None  # (alive until the launch is done, as a graph's is)
    return outs, ones
