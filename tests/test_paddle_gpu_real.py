"""Paddle 3's steps timed with CUDA events on a real GPU (skipped without a CUDA build of Paddle
and a device: CPU CI; the logic is tested on a simulated device in
tests/test_paddle_device_time.py): Paddle's events and streams under sources/device_clock.py
against a loop whose idle time is known, then the same through the Paddle source's hooks, a
dynamic-graph loop on a DataLoader and a static-graph one."""

import time

import numpy as np
import pytest

paddle = pytest.importorskip("paddle")

from test_paddle_device_time import started  # noqa: E402
from test_paddle_source import static_regression  # noqa: E402

pytestmark = pytest.mark.skipif(
    not paddle.device.is_compiled_with_cuda() or paddle.device.cuda.device_count() == 0,
    reason="needs a CUDA build of Paddle with a device")

SLEEP_S = 0.004  # the host late with each step's input: the device idles at least this


class Samples(paddle.io.Dataset):
    def __len__(self):
        return 512

    def __getitem__(self, i):
        return np.full((1024,), i / 512, "float32"), np.array([i % 2], "int64")


@pytest.fixture(autouse=True)
def on_the_gpu(monkeypatch):
    monkeypatch.delenv("PADDLETUNE_OVERRIDES", raising=False)
    paddle.disable_static()
    paddle.set_device("gpu:0")
    yield
    paddle.disable_static()


def assert_idle_time(final, steps):
    print("device totals", final)
    assert final["place"] == "CUDAPlace(0)"
    assert final["steps"] == steps and final["copied"] == steps, final
    assert final["idle_s"] / final["copied"] >= 0.8 * SLEEP_S, final
    assert final["busy_s"] > 0 and final["cycle_s"] == pytest.approx(
        final["idle_s"] + final["busy_s"], rel=1e-6)


def test_paddles_cuda_events_split_each_step_into_idle_and_busy():
    from paddletune.sources.device_clock import steps_on
    from paddletune.sources.paddle import gpu
    sent = []
    clock = steps_on(gpu.paddle_cuda(), 0, sent.append)
    weights = paddle.randn([2048, 2048])
    batch = paddle.randn([512, 2048]).cpu()
    steps = 60
    for step in range(steps):
        time.sleep(SLEEP_S)
        clock.mark_start()
        x = batch.cuda()
        for _ in range(20):
            x = paddle.tanh(x @ weights)
        clock.step_ended(step)
        paddle.device.synchronize()  # (as a loss.item() would)
    clock.close()
    assert_idle_time(sent[-1], steps - 1)


def test_a_dynamic_graph_loop_through_the_hooks():
    """The DataLoader's batches come on the GPU (its buffered reader copies them): the
    handover marks each step's start; a batch on the host would be marked by its copy."""
    source, sent = started()
    model = paddle.nn.Sequential(paddle.nn.Linear(1024, 2048), paddle.nn.Tanh(),
                                 paddle.nn.Linear(2048, 2))
    optimizer = paddle.optimizer.Adam(1e-3, parameters=model.parameters())
    places = []
    with source.running():
        for x, y in paddle.io.DataLoader(Samples(), batch_size=16):
            places.append(str(x.place))
            x, y = x.cuda(), y.cuda()  # (nothing to copy when already on the GPU)
            loss = paddle.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            optimizer.clear_grad()
            loss.item()
            time.sleep(SLEEP_S)
    print("batches on", sorted(set(places)))
    assert_idle_time(sent[-1], 31)


def test_a_static_graph_loop_through_the_hooks():
    source, sent = started()
    with source.running():
        paddle.enable_static()
        main, startup, loss = static_regression(features=1024, hidden=2048)
        exe = paddle.static.Executor(paddle.CUDAPlace(0))
        exe.run(startup)
        feed = {"x": np.ones((64, 1024), "float32"), "y": np.zeros((64, 1), "float32")}
        for _ in range(30):
            time.sleep(SLEEP_S)
            exe.run(main, feed=feed, fetch_list=[loss])
        paddle.disable_static()
    assert_idle_time(sent[-1], 29)
