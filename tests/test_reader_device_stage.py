"""The reader's GPU double buffer (runtime/reader/stages.py DeviceStage) against the fake CuPy:
batches reach the device through reused pinned buffers, on a stream of the stage's own, after
a fence on the compute stream, and complete before the consumer gets them."""

import numpy as np
import pytest

import fakecupy
import runtime as fluid
from runtime.reader.blocking_queue import BlockingQueue, QueueClosed
from runtime.reader.stages import Batch, DeviceStage


def _staged(monkeypatch, batches):
    fake = fakecupy.FakeCupy()
    fakecupy.inject(monkeypatch, fake)
    host = BlockingQueue(len(batches) + 1)
    for batch in batches:
        host.push(batch)
    host.close()
    stage = DeviceStage(host, fluid.CUDAPlace(0))
    out = []
    while True:
        try:
            batch, _ = stage.queue.pop()
        except QueueClosed:
            break
        out.append(batch)
    stage.close()
    return fake, stage, out


def test_batches_go_through_reused_pinned_buffers_on_the_stages_stream(monkeypatch):
    batches = [Batch([np.full((4, 3), i, np.float32), np.arange(4, dtype=np.int64)], i, None,
                     0.001) for i in range(3)]
    fake, stage, out = _staged(monkeypatch, batches)
    assert [b.index for b in out] == [0, 1, 2] and stage.copies == 3
    assert all(isinstance(a, fakecupy.FakeArray) for b in out for a in b.arrays)
    assert np.array_equal(out[1].arrays[0].host, np.full((4, 3), 1, np.float32))
    assert np.array_equal(out[2].arrays[1].host, np.arange(4))
    # every copy from pinned memory, on one non-blocking stream of the stage's own
    assert len(fake.copies) == 6 and all(pinned for _, pinned, _ in fake.copies)
    streams = {id(stream) for _, _, stream in fake.copies}
    assert len(streams) == 1 and fake.copies[0][2].non_blocking
    # before each batch, the stage's stream waits for the compute (null) stream's work
    assert len(fake.stream_waits) == 3
    assert all(stream is fake.copies[0][2] and event.stream is fake.cuda.Stream.null
               for stream, event in fake.stream_waits)
    # and for its own copies before handing the batch over
    assert len(fake.stream_syncs) == 3
    assert fake.pinned_allocs == [48, 32]  # one buffer per array, allocated once


def test_the_fence_is_recorded_after_the_batchs_allocations(monkeypatch):
    """A device block the consumer freed comes back from the pool only after that free, itself
    after the kernels that read it were launched: a fence recorded after the allocations covers
    them, one recorded before could miss some."""
    batches = [Batch([np.ones((4, 3), np.float32), np.arange(4, dtype=np.int64)], i, None, 0.0)
               for i in range(2)]
    fake, _, _ = _staged(monkeypatch, batches)
    kinds = [kind for kind, _ in fake.order]
    assert kinds == ["alloc", "alloc", "record", "wait"] * 2
    assert all(stream is fake.cuda.Stream.null for kind, stream in fake.order if kind == "record")


def test_a_larger_batch_grows_its_pinned_buffer(monkeypatch):
    batches = [Batch([np.zeros((n, 8), np.float32)], i, None, 0.0)
               for i, n in enumerate((4, 2, 64))]
    fake, _, out = _staged(monkeypatch, batches)
    assert [b.arrays[0].shape for b in out] == [(4, 8), (2, 8), (64, 8)]
    assert fake.pinned_allocs == [128, 2048]  # (CuPy's pinned pool rounds 128 up to 512)


def test_a_failing_copy_reaches_the_consumer(monkeypatch):
    fake = fakecupy.FakeCupy()
    fakecupy.inject(monkeypatch, fake)

    def broken(size):
        raise MemoryError("pinned memory exhausted")

    fake.cuda.alloc_pinned_memory = broken
    host = BlockingQueue(2)
    host.push(Batch([np.zeros(3, np.float32)], 0, None, 0.0))
    stage = DeviceStage(host, fluid.CUDAPlace(0))
    with pytest.raises(MemoryError, match="pinned memory exhausted"):
        stage.queue.pop()
    stage.close()
    host.close()
