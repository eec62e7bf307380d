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
    cupy = np

    def __init__(self):
        self.products = []

    def matmul(self, a, b, workspace):
        assert workspace.nbytes == gemm.WORKSPACE_BYTES
        self.products.append(("matrices", a.shape, b.shape))
        return a @ b

    def matmul_stacked(self, a, b, workspace):
        assert workspace.nbytes == gemm.WORKSPACE_BYTES
        self.products.append(("stacks", a.shape, b.shape))
        return a @ b


def test_only_products_of_floats_go_to_the_capturing_cublas():
    blas, rng = Recorder(), np.random.default_rng(1)
    floats, doubles = rng.standard_normal((3, 4)).astype("float32"), rng.standard_normal((4, 2))
    with gemm.capturing(blas):
        gemm.matmul(floats, floats.T)
        gemm.matmul(doubles.T, doubles)
        gemm.matmul(np.ones((2, 3, 4)), np.ones((4, 5)))
        gemm.matmul(floats, doubles)  # mixed dtypes: left to `@`
        gemm.matmul(np.ones((2, 3), "int64"), np.ones((3, 2), "int64"))  # integers: `@`
        gemm.matmul(np.ones(3), np.ones((3, 2)))  # a vector: `@`
    np.testing.assert_allclose(gemm.matmul(floats, floats.T), floats @ floats.T)  # after: `@`
    assert blas.products == [("matrices", (3, 4), (4, 3)), ("matrices", (2, 4), (4, 2)),
                             ("stacks", (2, 3, 4), (4, 5))]


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


def stacks(rng, dtype):
    """{name: (a, b)} of stacked products NumPy broadcasts: the cases attention and grouped
    convolutions bring, in the layouts their views have."""
    def r(*shape):
        return rng.standard_normal(shape).astype(dtype)
    by_heads = r(4, 2, 5, 3)  # (heads, batch, m, k): its transpose does not merge into a stack
    return {"stack @ stack": (r(3, 5, 4), r(3, 4, 2)),
            "stack @ matrix": (r(3, 5, 4), r(4, 2)),
            "matrix @ stack": (r(5, 4), r(3, 4, 2)),
            "transposed slices": (r(3, 4, 5).swapaxes(-1, -2), r(3, 2, 4).swapaxes(-1, -2)),
            "attention": (r(2, 4, 5, 3), r(2, 4, 3, 6)),
            "broadcast heads": (r(1, 4, 5, 3), r(2, 1, 3, 6)),
            "unmergeable": (by_heads.transpose(1, 0, 2, 3), r(2, 4, 3, 6)),
            "empty stack": (r(0, 5, 4), r(0, 4, 2))}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_stacked_products_are_one_strided_batched_gemm_each(fake_cublas, dtype):
    fake, blas = fake_cublas
    host = stacks(np.random.default_rng(4), dtype)
    gemms = blas.lib.gemms
    outs = captured_stacks(fake, blas, host)
    assert blas.lib.gemms - gemms == len(host) - 1  # one call each (none for the empty stack)
    for name, (a, b) in host.items():
        np.testing.assert_allclose(outs[name].get(), a @ b, rtol=1e-5, err_msg=name)


def captured_stacks(xp, blas, host):
    """{name: the product of each of `stacks`' pairs}, captured into one graph through `blas`
    (a gemm.Cublas) from device copies laid out as the host arrays are, launched, waited for."""
    device = {name: (xp.asarray(np.ascontiguousarray(a)), xp.asarray(np.ascontiguousarray(b)))
              for name, (a, b) in host.items()}
    device["transposed slices"] = tuple(  # (views of C-order stacks, as the host ones are)
        xp.asarray(np.ascontiguousarray(x.swapaxes(-1, -2))).swapaxes(-1, -2)
        for x in host["transposed slices"])
    stream = xp.cuda.Stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        with gemm.capturing(blas) as capture:
            outs = {name: gemm.matmul(a, b) for name, (a, b) in device.items()}
        graph = stream.end_capture()
        graph.launch()
    stream.synchronize()
    assert capture.workspace is not None  # (alive until the launch is done, as a graph's is)
    return outs
