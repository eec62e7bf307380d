"""The loader's small parts: the batch record, the GIL switch-interval sharing of thread
producers, and the GPU double-buffer stage."""

import sys
import threading

import numpy as np

from ..flags import FLAGS
from .blocking_queue import BlockingQueue, QueueClosed

JOIN_S = 2.0  # how long a stage's thread may take to exit
GIL_SWITCH_INTERVAL_S = 0.0005  # while a thread producer runs (see loader.py's docstring)


class Batch:
    __slots__ = ("arrays", "index", "worker", "produce_s", "cpu_s", "nbytes")

    def __init__(self, arrays, index, worker, produce_s, cpu_s=None):
        self.arrays, self.index, self.worker, self.produce_s = arrays, index, worker, produce_s
        self.cpu_s = cpu_s
        self.nbytes = sum(getattr(a, "nbytes", 0) for a in arrays)


class GilSharing:
    """Lowers the GIL switch interval while at least one thread-producer pass runs, and puts
    the previous value back after the last one (unless someone else changed it meanwhile)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.active = 0
        self.saved = None

    def begin(self):
        with self.lock:
            if self.active == 0:
                current = sys.getswitchinterval()
                if current > GIL_SWITCH_INTERVAL_S:
                    self.saved = current
                    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
            self.active += 1
        return True

    def end(self):
        with self.lock:
            self.active -= 1
            if self.active == 0 and self.saved is not None:
                if abs(sys.getswitchinterval() - GIL_SWITCH_INTERVAL_S) < 1e-7:
                    sys.setswitchinterval(self.saved)
                self.saved = None


GIL_SHARING = GilSharing()


class DeviceStage:
    """use_double_buffer on a GPU place: a thread that takes host batches from the queue,
    copies them to the device on a stream of its own and keeps up to two ready, as Paddle's
    BufferedReader does.

    Each array goes through a pinned (page-locked) staging buffer of this stage (one per
    array of a batch, reused, grown when a batch is larger): a copy from pinned memory is a
    true asynchronous DMA, one from pageable memory is staged by the driver and blocks. Before
    a batch's copies (after its device arrays are allocated) the stage's stream waits for an
    event recorded on the compute (null) stream, so the copies start after the compute work
    already submitted: a device block that the consumer freed (and CuPy's pool hands back to
    this stream) is never overwritten while a kernel may still read it. The stage waits for its stream before handing the batch
    over, so the consumer reads complete arrays on whatever stream it computes, and the
    staging buffers are free again. Device arrays come from CuPy's own pool (stream-aware; the
    pool of memory/device.py assumes one stream). `copies` counts the batches moved.
    """

    def __init__(self, host_queue, place):
        from ..backend import cupy_status
        self.cupy = cupy_status()[0]
        self.device_id = getattr(place, "device_id", 0) or 0
        self.host = host_queue
        self.queue = BlockingQueue(2)
        self.staging = []  # pinned host buffers, one per array of a batch
        self.copies = 0
        self.thread = threading.Thread(target=self._run, daemon=True, name="double-buffer")
        self.thread.start()

    def _run(self):
        cupy = self.cupy
        try:
            with cupy.cuda.Device(self.device_id):
                stream = cupy.cuda.Stream(non_blocking=True)
                while True:
                    try:
                        batch, _ = self.host.pop(peek=FLAGS.get("reader_queue_speed_test_mode"))
                    except QueueClosed:
                        break
                    moved = Batch(self._to_device(stream, batch.arrays), batch.index,
                                  batch.worker, batch.produce_s)
                    self.copies += 1
                    if not self.queue.push(moved):
                        return
        except BaseException as err:  # noqa: B036  (handed to the consumer)
            self.queue.kill(err)
            return
        self.queue.close()

    def _to_device(self, stream, arrays):
        """The batch's arrays on the device, copied on `stream` through the pinned buffers."""
        cupy = self.cupy
        hosts = [np.ascontiguousarray(array) for array in arrays]
        with stream:  # CuPy's pool: blocks of this stream's arena
            out = [cupy.empty(host.shape, host.dtype) for host in hosts]
        # The fence is recorded after the allocations: a block the consumer freed is handed out
        # again only after that free, which came after the consumer launched the kernels that
        # read it; so the copies below wait for those kernels. (A fence recorded before the
        # allocations could miss kernels launched between it and the free.)
        fence = cupy.cuda.Event(disable_timing=True)
        fence.record(cupy.cuda.Stream.null)
        stream.wait_event(fence)
        for slot, (host, device) in enumerate(zip(hosts, out)):
            pinned = self._pinned(slot, host)
            pinned[...] = host
            device.set(pinned, stream=stream)
        stream.synchronize()
        return out

    def _pinned(self, slot, host):
        """A view of pinned staging buffer `slot` shaped like `host` (grown when too small)."""
        if slot == len(self.staging):
            self.staging.append(None)
        buffer = self.staging[slot]
        if buffer is None or buffer.size() < host.nbytes:
            buffer = self.staging[slot] = self.cupy.cuda.alloc_pinned_memory(max(host.nbytes, 1))
        return np.frombuffer(buffer, host.dtype, host.size).reshape(host.shape)

    def close(self):
        self.queue.close()
        self.thread.join(JOIN_S)
