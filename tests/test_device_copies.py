"""Host-to-device copies and host syncs timed by wrapping the tensor methods
(sources/device_copies.py), on the real torch and paddle tensor classes. This machine has no
GPU: the tests declare float64 tensors "on the device", so a .to(float64) is a copy to it and
a float64 tensor's .numpy() / .item() a sync; what the wrappers report and what they undo is
the same as on a GPU (tests/test_gpu_cli_real.py runs PyTorch's on one)."""

import dataclasses

import numpy as np
import pytest


class Timer:
    def __init__(self):
        self.feeds, self.fetches = [], []

    def feed(self, seconds, nbytes=0):
        self.feeds.append((seconds, nbytes))

    def fetch(self, seconds, nbytes=0):
        self.fetches.append((seconds, nbytes))


def _check(kind, make, wide, host_value, methods):
    """`make()` a float32 host tensor, `wide(t)` its copy "to the device", `host_value(t)` a
    sync on it; `methods` the class's methods before, restored by the undo."""
    from paddletune.sources import device_copies
    timer, queued = Timer(), []
    undo = device_copies.time_copies_and_syncs(
        kind, timer, lambda method, args, kwargs: queued.append(method.__name__))
    try:
        x = make()
        device_x = wide(x)  # a copy to the "device": timed, its bytes counted
        wide(device_x)  # already on the device: not a copy
        host_value(x)  # a host tensor's value: no sync
        host_value(device_x)  # a sync
    finally:
        for action in reversed(undo):
            action()
    assert [b for _, b in timer.feeds] == [4 * 3 * 8] and queued == ["to"]
    assert [b for _, b in timer.fetches] == [4 * 3 * 8]
    assert all(s >= 0 for s, _ in timer.feeds + timer.fetches)
    assert {name: kind.cls.__dict__.get(name) for name in methods} == methods


def test_pytorch_tensors():
    torch = pytest.importorskip("torch")
    from paddletune.sources.torch import gpu
    kind = dataclasses.replace(gpu.TORCH_TENSORS, on_device=lambda t: t.dtype == torch.float64)
    methods = {n: torch.Tensor.__dict__.get(n) for n in kind.copies + kind.syncs}
    _check(kind, lambda: torch.ones(4, 3), lambda t: t.to(torch.float64),
           lambda t: t.numpy(), methods)


def test_paddle_tensors():
    paddle = pytest.importorskip("paddle")
    from paddletune.sources.paddle import gpu
    kind = dataclasses.replace(gpu.PADDLE_TENSORS,
                               on_device=lambda t: t.dtype == paddle.float64)
    methods = {n: paddle.Tensor.__dict__.get(n) for n in kind.copies + kind.syncs}
    _check(kind, lambda: paddle.to_tensor(np.ones((4, 3), "float32")),
           lambda t: t.to("float64"), lambda t: t.numpy(), methods)


def test_a_paddle_tolist_is_one_sync():
    """Paddle's Tensor.tolist calls its numpy: the sync is counted once, in numpy."""
    paddle = pytest.importorskip("paddle")
    from paddletune.sources import device_copies
    from paddletune.sources.paddle import gpu
    kind = dataclasses.replace(gpu.PADDLE_TENSORS,
                               on_device=lambda t: t.dtype == paddle.float64)
    timer = Timer()
    undo = device_copies.time_copies_and_syncs(kind, timer)
    try:
        paddle.to_tensor(np.ones((4, 3), "float64")).tolist()
    finally:
        for action in reversed(undo):
            action()
    assert [b for _, b in timer.fetches] == [8 * 12]


def test_paddle_tensors_are_measured_by_shape_and_element_size():
    paddle = pytest.importorskip("paddle")
    from paddletune.sources.paddle import gpu
    assert gpu.PADDLE_TENSORS.nbytes(paddle.ones([5, 2], dtype="float16")) == 20
    assert not gpu.PADDLE_TENSORS.on_device(paddle.ones([1]))  # (a CPU tensor)
    assert gpu.has_gpu() is False  # (this CPU build: the hooks install none of it)
