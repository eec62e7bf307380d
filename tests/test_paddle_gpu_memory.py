"""Paddle 3's GPU allocator figures (sources/paddle/gpu.py) through the Paddle source's hooks,
in-process on the real paddle. This CPU build has no GPU: paddle.device.cuda's counters and
the device are faked, the training step itself runs on the CPU. The memory probe turns the
events into the records the report and the memory advice read."""

import numpy as np
import pytest

paddle = pytest.importorskip("paddle")

from paddletune.probes.base import Clock  # noqa: E402
from paddletune.probes.memory import MemoryProbe, oom_record  # noqa: E402
from paddletune.profile import records as r  # noqa: E402
from paddletune.sources.paddle import hooks as hooks_module  # noqa: E402
from paddletune.sources.paddle import source as source_module  # noqa: E402
from paddletune.sources.paddle.source import PaddleSource  # noqa: E402

GIB = 1 << 30


class Device:
    """paddle.device.cuda's counters for one fake 80 GiB device, allocated growing."""

    def __init__(self):
        self.allocated = 2 * GIB

    def install(self, monkeypatch):
        cuda = paddle.device.cuda
        monkeypatch.setattr(cuda, "memory_allocated", lambda d: self.allocated)
        monkeypatch.setattr(cuda, "memory_reserved", lambda d: self.allocated + GIB)
        monkeypatch.setattr(cuda, "max_memory_allocated", lambda d: self.allocated)
        monkeypatch.setattr(cuda, "max_memory_reserved", lambda d: self.allocated + GIB)
        monkeypatch.setattr(cuda, "get_device_properties",
                            lambda d: type("Props", (), {"total_memory": 80 * GIB})())


@pytest.fixture
def on_gpu(monkeypatch):
    device = Device()
    device.install(monkeypatch)
    monkeypatch.setattr(hooks_module, "place_name", lambda text: "CUDAPlace(0)")
    monkeypatch.setattr(source_module, "_has_cuda", lambda: True)  # (Source.may_send)
    paddle.disable_static()
    return device


def test_each_dynamic_step_sends_the_allocators_figures(on_gpu):
    source = PaddleSource()
    source.begin()
    payloads, records = [], []
    source.subscribe("memory_step", payloads.append)
    probe = MemoryProbe(records.append, Clock(), source)
    probe.start()
    model = paddle.nn.Linear(4, 2)
    optimizer = paddle.optimizer.SGD(0.1, parameters=model.parameters())
    with source.running():
        for _ in range(3):
            model(paddle.to_tensor(np.ones((8, 4), "float32"))).mean().backward()
            optimizer.step()
            optimizer.clear_grad()
            on_gpu.allocated += GIB
    probe.stop()
    assert [p.step for p in payloads] == [0, 1, 2]
    first = payloads[0]
    assert (first.place, first.capacity, first.allocated, first.reserved) == (
        "CUDAPlace(0)", 80 * GIB, 2 * GIB, 3 * GIB)
    assert first.fragmentation is None and first.requests == first.system_allocs == 0
    steps = [x for x in records if isinstance(x, r.MemoryStep)]
    assert [s.allocated_bytes for s in steps] == [2 * GIB, 3 * GIB, 4 * GIB]
    (pool,) = [x for x in records if isinstance(x, r.MemoryPool)]
    assert pool.place == "CUDAPlace(0)" and pool.strategy == "auto_growth"
    assert pool.peak_allocated_bytes == 4 * GIB and pool.fragmentation is None


def test_an_out_of_memory_error_sends_the_request_and_what_was_held(on_gpu, monkeypatch):
    monkeypatch.setattr(paddle, "get_device", lambda: "gpu:0")
    source = PaddleSource()
    source.begin()
    seen = []
    source.subscribe("memory_oom", seen.append)
    message = ("ResourceExhaustedError: Out of memory error on GPU 0. Cannot allocate "
               "1.500000GB memory on GPU 0, 78.000000GB memory has been allocated and "
               "available memory is only 512.000000MB.")
    source.out_of_memory(MemoryError(message))
    record = oom_record(1.0, seen[0])
    assert (record.place, record.requested_bytes, record.allocated_bytes,
            record.reserved_bytes, record.capacity_bytes) == (
        "CUDAPlace(0)", int(1.5 * GIB), 2 * GIB, 3 * GIB, 80 * GIB)


def test_nothing_is_read_on_the_cpu(monkeypatch):
    def fail(*args):
        raise AssertionError("a CUDA counter was read on the CPU")
    monkeypatch.setattr(paddle.device.cuda, "memory_allocated", fail)
    source = PaddleSource()
    source.begin()
    payloads = []
    source.subscribe("memory_step", payloads.append)
    source.subscribe("memory_oom", payloads.append)
    model = paddle.nn.Linear(4, 2)
    optimizer = paddle.optimizer.SGD(0.1, parameters=model.parameters())
    with source.running():
        model(paddle.to_tensor(np.ones((8, 4), "float32"))).mean().backward()
        optimizer.step()
    source.out_of_memory(MemoryError("out of memory"))
    assert payloads == []
