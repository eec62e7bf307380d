"""benchmarks/bench_runtime.py on the CPU: the executor-only contender of the overhead line
replays its kernels' recorded outputs (so what it times is the executor's own work)."""

import numpy as np
import pytest

from benchscripts import load


@pytest.fixture(scope="module")
def bench():
    return load("bench_runtime.py", "bench_runtime_cpu")


def test_the_executor_only_contender_replays_its_kernels(bench):
    xs, ys = bench.make_data(4, 3)
    xs = np.ascontiguousarray(xs[:, :, :8])
    ys = ys % 2
    sizes = (8, 8, 2)
    real = bench.RuntimeMLP(sizes)
    real_losses = [real.step(x, y) for x, y in zip(xs, ys)]
    assert len(set(real_losses)) == 3  # the real kernels see each batch
    replayed = bench.ReplayedKernelsMLP(sizes, xs, ys)  # (recorded at its second step)
    losses = [replayed.step(x, y) for x, y in zip(xs, ys)]
    twice = bench.RuntimeMLP(sizes)
    recorded = [twice.step(xs[0], ys[0]) for _ in range(2)][1]
    assert losses == [recorded] * 3
