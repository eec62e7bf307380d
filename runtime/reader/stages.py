"""The loader's small parts: the batch record, the GIL switch-interval sharing of thread
producers, and the GPU double-buffer stage."""

import sys
import threading

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
    copies them to the device on a non-blocking stream and keeps up to two ready."""

    def __init__(self, host_queue, place):
        from ..backend import cupy_status
        self.cupy = cupy_status()[0]
        self.device_id = getattr(place, "device_id", 0) or 0
        self.host = host_queue
        self.queue = BlockingQueue(2)
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
                    with stream:
                        arrays = [cupy.asarray(a) for a in batch.arrays]
                    stream.synchronize()
                    moved = Batch(arrays, batch.index, batch.worker, batch.produce_s)
                    if not self.queue.push(moved):
                        return
        except BaseException as err:  # noqa: B036  (handed to the consumer)
            self.queue.kill(err)
            return
        self.queue.close()

    def close(self):
        self.queue.close()
        self.thread.join(JOIN_S)
