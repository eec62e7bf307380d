"""Paddle 3's training steps timed on the GPU with CUDA events (sources/device_clock.py through
sources/paddle/hooks.py, gpu.py and loaders.py), in-process on the real paddle. This CPU build
has no GPU: paddle.device's Event, current_stream and is_current_stream_capturing are replaced
by a simulated device timeline (tests/test_device_time.py's), the place is called
CUDAPlace(0), and the training itself runs on the CPU. tests/test_paddle_gpu_real.py runs the
same on a real GPU."""

from types import SimpleNamespace

import numpy as np
import pytest

paddle = pytest.importorskip("paddle")

from paddletune.sources.paddle import gpu  # noqa: E402
from paddletune.sources.paddle import hooks as hooks_module  # noqa: E402
from paddletune.sources.paddle.source import PaddleSource  # noqa: E402
from test_device_time import Device  # noqa: E402
from test_paddle_source import static_regression  # noqa: E402

IDLE_S, BUSY_S = 0.002, 0.008  # the device's idle and busy time per simulated step


class Samples(paddle.io.Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return np.full((4,), i / self.n, "float32"), np.array([i % 2], "int64")


@pytest.fixture
def device(monkeypatch):
    """A simulated GPU behind paddle.device's CUDA calls (one stream), the job's place
    CUDAPlace(0)."""
    device = Device()
    stream = SimpleNamespace(stream_base=SimpleNamespace(raw_stream=0x7F00))
    monkeypatch.setattr(gpu, "has_gpu", lambda: True)
    monkeypatch.setattr(hooks_module, "place_name", lambda text: "CUDAPlace(0)")
    monkeypatch.setattr(paddle.device, "Event", lambda enable_timing=False: device.event())
    monkeypatch.setattr(paddle.device, "current_stream", lambda where=None: stream)
    monkeypatch.setattr(paddle.device, "is_current_stream_capturing", lambda: False)
    monkeypatch.delenv("PADDLETUNE_OVERRIDES", raising=False)
    paddle.disable_static()
    yield device
    paddle.disable_static()


def started():
    source = PaddleSource()
    source.begin()
    sent = []
    source.subscribe("device_time", sent.append)
    source.subscribe("step_end", lambda record: None)
    return source, sent


def assert_split(final, steps):
    """`steps` steps timed, each split into IDLE_S idle and BUSY_S busy."""
    assert final["place"] == "CUDAPlace(0)"
    assert final["steps"] == steps and final["copied"] == steps
    assert final["last_step"] == steps
    assert final["cycle_s"] == pytest.approx(steps * (IDLE_S + BUSY_S))
    assert final["idle_s"] == pytest.approx(steps * IDLE_S)
    assert final["busy_s"] == pytest.approx(steps * BUSY_S)


def test_a_batch_handed_over_marks_the_steps_start(device):
    """paddle's buffered reader copies the batch to the GPU in its thread: the handover is
    the step's start (as it is for a host batch, before its copy)."""
    source, sent = started()
    model = paddle.nn.Linear(4, 2)
    optimizer = paddle.optimizer.Adam(0.01, parameters=model.parameters())
    loader = paddle.io.DataLoader(Samples(64), batch_size=4)
    with source.running():
        for x, y in loader:  # (the handover: marked at device.at)
            loss = paddle.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            device.at += BUSY_S  # the step's kernels
            optimizer.step()  # its end
            optimizer.clear_grad()
            device.at += IDLE_S  # the host between steps
            device.done = device.at  # the device caught up
    assert [t["steps"] for t in sent] == [1, 2, 5, 10, 15]  # 16 steps, the first untimed
    assert_split(sent[-1], 15)


def cuda(tensor, device_id=None, blocking=True):
    """Tensor.cuda on this build, which has no GPU to copy to (named as paddle's: the clock
    reads a copy's target by the method's name)."""
    return tensor


def test_a_host_batch_is_marked_at_its_handover_not_at_a_later_copy(device, monkeypatch):
    monkeypatch.setattr(paddle.Tensor, "cuda", cuda)
    source, sent = started()
    model = paddle.nn.Linear(4, 2)
    optimizer = paddle.optimizer.SGD(0.1, parameters=model.parameters())
    loader = paddle.io.DataLoader(Samples(24), batch_size=4, use_buffer_reader=False)
    with source.running():
        for x, y in loader:  # the handover marks the start, at device.at
            out = model(x)  # (x reaches the GPU as the op's input: no copy call)
            device.at += BUSY_S / 2  # kernels queued before the label's copy...
            y = y.cuda()  # ...which marks nothing: they are busy, not idle
            loss = paddle.nn.functional.cross_entropy(out, y)
            loss.backward()
            device.at += BUSY_S / 2
            optimizer.step()
            optimizer.clear_grad()
            device.at += IDLE_S
            device.done = device.at
    assert_split(sent[-1], 5)


def test_without_a_dataloader_the_first_copy_marks_the_start_not_a_dtype_conversion(
        device, monkeypatch):
    monkeypatch.setattr(paddle.Tensor, "cuda", cuda)
    source, sent = started()
    model = paddle.nn.Linear(4, 2)
    optimizer = paddle.optimizer.SGD(0.1, parameters=model.parameters())
    batches = [(paddle.ones([4, 4]), paddle.zeros([4, 1], "int64")) for _ in range(6)]
    with source.running():
        for x, y in batches:
            device.at += IDLE_S / 2
            x = x.to("float32")  # a conversion on the host: no mark
            device.at += IDLE_S / 2
            x, y = x.cuda(), y.cuda()  # the first copy marks; the second does not
            loss = paddle.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            device.at += BUSY_S
            optimizer.step()
            optimizer.clear_grad()
            device.done = device.at
    assert_split(sent[-1], 5)


def test_a_static_graph_run_marks_the_start_as_it_takes_its_feed(device, monkeypatch):
    run = paddle.static.Executor.run

    def busy_run(exe, *args, **kwargs):  # the device works through the run
        out = run(exe, *args, **kwargs)
        device.at += BUSY_S
        return out
    monkeypatch.setattr(paddle.static.Executor, "run", busy_run)
    source, sent = started()
    with source.running():
        paddle.enable_static()
        main, startup, loss = static_regression()
        exe = paddle.static.Executor(paddle.CPUPlace())
        exe.run(startup)  # (not a step: ends none)
        feed = {"x": np.ones((3, 4), "float32"), "y": np.zeros((3, 1), "float32")}
        for _ in range(7):
            device.at += IDLE_S
            exe.run(main, feed=feed, fetch_list=[loss])
            device.done = device.at
        paddle.disable_static()
    assert_split(sent[-1], 6)


def test_a_failing_cuda_call_stops_the_timing_not_the_script(monkeypatch):
    monkeypatch.setattr(hooks_module, "place_name", lambda text: "CUDAPlace(0)")
    monkeypatch.setattr(gpu, "has_gpu", lambda: True)  # but paddle's CUDA calls all fail
    source, sent = started()
    model = paddle.nn.Linear(4, 2)
    optimizer = paddle.optimizer.SGD(0.1, parameters=model.parameters())
    with source.running():
        for x, y in paddle.io.DataLoader(Samples(12), batch_size=4):
            paddle.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
            optimizer.clear_grad()
    assert sent == []


def test_a_copys_target_gpu():
    to, cuda = paddle.Tensor.to, paddle.Tensor.cuda
    assert gpu.target_device(to, ("gpu:1",), {}) == 1
    assert gpu.target_device(to, ("cuda:2", "float16"), {}) == 2
    assert gpu.target_device(to, (), {"device": "gpu:0", "blocking": False}) == 0
    assert gpu.target_device(to, ("gpu",), {}) == 0  # (paddle's current device: not a GPU)
    assert gpu.target_device(cuda, (3,), {}) == 3
    assert gpu.target_device(cuda, (), {}) == 0
    assert gpu.target_device(to, ("float16",), {}) is None
    assert gpu.target_device(to, (paddle.float16,), {}) is None
    assert gpu.target_device(to, ("cpu",), {}) is None
    assert gpu.target_device(to, (paddle.CPUPlace(),), {}) is None
    assert gpu.target_device(to, (paddle.zeros([1]),), {}) is None  # (a host tensor's place)


def test_paddles_streams_are_equal_when_they_wrap_the_same_cuda_stream(monkeypatch):
    handles = iter([0x10, 0x10, 0x20])
    monkeypatch.setattr(paddle.device, "current_stream", lambda where: SimpleNamespace(
        stream_base=SimpleNamespace(raw_stream=next(handles))))
    first, again, other = (gpu.CurrentStream(0) for _ in range(3))
    assert first == again and first != other and first.stream is not again.stream
