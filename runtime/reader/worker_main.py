"""What runs inside a reader worker process: the user's generator, batches written to shared
memory, and the messages to the trainer (see `workers.py` for the protocol).

Everything here runs in the forked child. It imports nothing the trainer has not imported
before forking (an import lock held by another trainer thread at fork time would never be
released here), touches no lock of the trainer's (no events, no profile writer) and never
imports a GPU library.

Each worker leads a process group of its own (the processes its generator starts join it), so
that a worker whose trainer died, or that the trainer stops, takes them with it.

Signals: the trainer stops a worker with STOP_SIGNAL (SIGUSR1), blocked from before the fork
until its handler is in place. SIGINT and SIGTERM get handlers that do nothing: Ctrl-C and a
SIGTERM sent to the whole process group (a preempted job) are the trainer's to handle, and it
stops its workers; programs the generator starts get the default handlers back on exec.
"""

import collections
import contextlib
import mmap
import os
import pickle
import random
import signal
import threading
import time
import traceback
from multiprocessing.reduction import ForkingPickler, send_handle

import numpy as np

from .. import overrides

ALIGN = 64  # byte alignment of each array inside a slot
_PAGE = mmap.PAGESIZE
PARENT_POLL_S = 0.2  # how often a worker checks that the trainer is still alive

_current_info = None  # this process's WorkerInfo (None in the trainer)
_conn = None  # this worker's channel to the trainer
_fallocate = getattr(os, "posix_fallocate", None)  # tests swap it to inject ENOSPC


class WorkerInfo:
    """What `fluid.io.get_worker_info()` returns inside a reader worker process.

    id           this worker's number, 0 .. num_workers-1
    num_workers  how many workers the DataLoader runs
    seed         this worker's seed. The first get_worker_info() call seeds Python's `random`
                 and NumPy's global RNG with it, so workers that shard themselves do not
                 repeat each other's random augmentations; until then every worker has the
                 same RNG state (an unsharded generator yields the same stream in each)
    name         the DataLoader's name
    """

    def __init__(self, id, num_workers, seed, name):  # noqa: A002  (Paddle's field name)
        self.id, self.num_workers, self.seed, self.name = id, num_workers, seed, name
        self.consulted = False  # the generator asked for it (so it shards itself)

    def consult(self):
        """The first get_worker_info() call: the generator is worker-aware, so its random
        numbers may now differ between workers (seeded with `seed`). Until then every worker
        has the same RNG state, so a generator that does not shard itself makes the same
        stream in each of them and the strided fallback stays a permutation."""
        if not self.consulted:
            self.consulted = True
            _seed(self.seed)

    def __repr__(self):
        return (f"WorkerInfo(id={self.id}, num_workers={self.num_workers}, seed={self.seed}, "
                f"name={self.name!r})")


def get_worker_info():
    """Inside a DataLoader worker process: its WorkerInfo (id, num_workers, seed, name); in
    the trainer process: None. A generator shards itself with it, e.g.
    `for i in range(info.id, n, info.num_workers)`."""
    info = _current_info
    if info is not None:
        info.consult()
    return info


STOP_SIGNAL = signal.SIGUSR1  # the trainer's "stop now" (reset, end of pass, exit)


def warn_trainer(text):
    """From inside a worker: a RuntimeWarning the trainer shows (once per call)."""
    if _conn is not None:
        with _channel():
            _conn.send(("warn", text))


def _override_to_trainer(kind, entry):
    """A PADDLETUNE_OVERRIDES record made here (a regrouped batch size, or why not): the
    trainer's runtime.overrides keeps it (it reads it at this worker's next turn)."""
    if _conn is not None:
        with _channel():
            _conn.send(("override", kind, entry))


class _Stop(BaseException):
    """STOP_SIGNAL from the trainer: leave quietly."""


class _ChannelGone(BaseException):
    """The trainer closed our channel (it has gone, or stopped reading): leave quietly."""


# --- the worker's main loop --------------------------------------------------------------------
def run(source, conn, info, use_shm, prefetch, parent_pid):
    """The worker process's target: produce items from `source(info)` until it ends, the
    trainer stops us, or it fails (the failure is sent, not printed)."""
    global _current_info, _conn
    try:
        _settle_process(info, parent_pid)
        _current_info, _conn = info, conn
        overrides.forward_to(_override_to_trainer)
        _produce(source, conn, info, use_shm, prefetch)
    except _Stop:
        pass
    finally:  # multiprocessing's own exit path must not be interrupted either
        signal.pthread_sigmask(signal.SIG_BLOCK, {STOP_SIGNAL})


def _produce(source, conn, info, use_shm, prefetch):
    sender = _Sender(conn, use_shm, prefetch)
    items, produced = None, 0
    try:
        items = iter(source(info))
        while True:
            slot = sender.free_slot()
            t0, c0 = time.perf_counter(), time.process_time()
            try:
                item = next(items)
            except StopIteration:
                break
            sender.send_item(item, slot, time.perf_counter() - t0, time.process_time() - c0)
            produced += 1
        sender.send(("end", produced))
    except (_Stop, _ChannelGone):
        pass  # the trainer stopped us or has gone (the generator's own OSErrors are sent)
    except BaseException as err:  # noqa: B036  (sent to the trainer, which raises it)
        _send_error(conn, err)
    finally:
        _close_quietly(items)
        sender.release()


def _settle_process(info, parent_pid):
    """Signals, RNG seeds, BLAS threads and a watchdog for a freshly forked worker (the
    modules used here were imported by the trainer before it forked: prepare_trainer)."""
    try:  # a process group of its own: what the generator starts can be stopped with us
        os.setpgid(0, 0)
    except OSError:
        pass
    signal.signal(signal.SIGINT, _ignore)
    signal.signal(signal.SIGTERM, _ignore)
    signal.signal(STOP_SIGNAL, _on_stop)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {STOP_SIGNAL})
    from .. import events  # the trainer's probes must not hear a worker
    for channel in events.CHANNELS.values():
        channel.subs = []
    _seed(info.seed - info.id)  # the same in every worker until the generator consults info
    try:
        from ..blas import set_blas_threads
        set_blas_threads(1)  # N workers x BLAS threads would oversubscribe the cores
    except Exception:  # BLAS unknown: leave it
        pass
    threading.Thread(target=_watch_parent, args=(parent_pid,), daemon=True).start()


def prepare_trainer():
    """In the trainer, before forking: import (and cache) what a worker uses, so that no
    worker ever imports while another trainer thread might hold an import lock."""
    import numpy.random  # noqa: F401  (NumPy 2 loads it lazily)
    from .. import events  # noqa: F401
    from ..blas import numpy_blas
    numpy_blas()  # finds the library now: no dlopen in the child


def _seed(seed):
    random.seed(seed)
    np.random.seed(seed % (1 << 32))


def _ignore(signum, frame):
    pass


def _on_stop(signum, frame):
    raise _Stop()


def _watch_parent(parent_pid):
    """Exit when the trainer dies (SIGKILL leaves no one to send us SIGTERM), and take
    whatever the generator started with us: our process group."""
    while True:
        time.sleep(PARENT_POLL_S)
        if os.getppid() != parent_pid:
            if os.getpgid(0) == os.getpid():
                os.killpg(os.getpid(), signal.SIGKILL)
            os._exit(0)


def _close_quietly(items):
    close = getattr(items, "close", None)
    if close is not None:
        try:
            close()
        except BaseException:  # noqa: B036  (the generator's own cleanup failed: nothing to do)
            pass


# --- sending -----------------------------------------------------------------------------------
class _Sender:
    """The worker's side of the channel: `prefetch` slots (credits), each a shared-memory
    buffer the trainer copies out of and hands back."""

    def __init__(self, conn, use_shm, prefetch):
        self.conn, self.use_shm = conn, use_shm
        self.free = collections.deque(range(prefetch))
        self.slots = [_Slot(i) for i in range(prefetch)] if use_shm else []

    def send(self, message):
        with _channel():
            self.conn.send(message)

    def free_slot(self):
        """A slot the trainer is not reading; waits for one to come back."""
        with _channel():
            while self.conn.poll(0) or not self.free:
                message = self.conn.recv()
                if message[0] == "free":
                    self.free.append(message[1])
        return self.free.popleft()

    def send_item(self, item, slot, produce_s, cpu_s):
        payload = self._encode(item, slot)
        try:  # pickled here, so a failure is the item's fault, not the channel's
            blob = ForkingPickler.dumps(("item", slot, payload, produce_s, cpu_s))
        except Exception as err:
            raise _unpicklable(err) from None
        with _channel():
            self.conn.send_bytes(blob)

    def _encode(self, item, slot):
        if not self.use_shm or not isinstance(item, list):
            return ("pickle", item)
        layout, size = _layout(item)
        buf = self.slots[slot]
        if buf.ensure(max(size, 1)):  # a slot even for all-empty arrays
            self.send(("slot", slot, buf.size))
            with _channel():
                send_handle(self.conn, buf.fd, os.getppid())
        for (kind, value), array in zip(layout, item):
            if kind == "nd":
                dtype, shape, offset = value
                np.ndarray(shape, dtype, buffer=buf.map, offset=offset)[...] = array
        return ("shm", [(kind, value) if kind == "nd" else (kind, array)
                        for (kind, value), array in zip(layout, item)])

    def release(self):
        for slot in self.slots:
            slot.close()


@contextlib.contextmanager
def _channel():
    """Failures of the channel itself mean the trainer has gone: not the generator's error."""
    try:
        yield
    except (OSError, EOFError) as err:
        raise _ChannelGone() from err


def _layout(arrays):
    """[(kind, info)] per element: ("nd", (dtype, shape, offset)) for plain NumPy arrays,
    ("obj", None) for anything else (pickled); and the bytes the arrays need."""
    layout, offset = [], 0
    for a in arrays:
        if isinstance(a, np.ndarray) and not a.dtype.hasobject:
            offset = -(-offset // ALIGN) * ALIGN
            layout.append(("nd", (a.dtype, a.shape, offset)))
            offset += a.nbytes
        else:
            layout.append(("obj", None))
    return layout, offset


class _Slot:
    """One shared-memory buffer: an anonymous memfd (no name in /dev/shm, so nothing can
    leak: the kernel frees it when the last process holding it goes), grown on demand."""

    def __init__(self, index):
        self.index, self.fd, self.map, self.size = index, None, None, 0

    def ensure(self, nbytes):
        """Make room for `nbytes`; True when a new buffer was made (the trainer needs it)."""
        if nbytes <= self.size:
            return False
        size = max(_PAGE, -(-max(nbytes, self.size * 2 if self.size else 0) // _PAGE) * _PAGE)
        try:
            fd = os.memfd_create(f"paddletune-reader-slot{self.index}", os.MFD_CLOEXEC)
        except OSError as err:
            raise shm_unavailable(err) from None
        try:
            os.ftruncate(fd, size)
            if _fallocate is not None:  # reserve the pages now: a clean ENOSPC, not SIGBUS
                _fallocate(fd, 0, size)
            new_map = mmap.mmap(fd, size)
        except OSError as err:
            os.close(fd)
            raise shm_exhausted(nbytes, err) from None
        self.close()
        self.fd, self.map, self.size = fd, new_map, size
        return True

    def close(self):
        buf, fd = self.map, self.fd
        self.fd, self.map, self.size = None, None, 0  # first: a stop signal may land below
        if buf is not None:
            try:
                buf.close()
                os.close(fd)
            except OSError:
                pass


# --- errors ------------------------------------------------------------------------------------
class SharedMemoryExhausted(MemoryError):
    """A worker could not get the shared memory a batch needs."""


def shm_unavailable(err):
    return OSError(err.errno, f"shared memory is not available here (memfd_create: "
                              f"{err.strerror or err}); pass use_shared_memory=False to send "
                              f"batches through a pipe")


def shm_exhausted(nbytes, err):
    free = _available_bytes()
    free_text = f"{free / 2**20:.1f} MiB available" if free is not None else "unknown free"
    return SharedMemoryExhausted(
        f"out of shared memory: the batch needs {nbytes / 2**20:.1f} MiB "
        f"({free_text}; {err.strerror or err}). Reader workers pass batches through memfd "
        f"shared memory, which counts against RAM and the container's memory limit (not "
        f"/dev/shm's size). Use fewer workers or a smaller batch, free memory, or pass "
        f"use_shared_memory=False to send batches through a pipe instead")


def _available_bytes():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _unpicklable(err):
    return TypeError(f"the item cannot be sent from the worker process to the trainer: "
                     f"pickling it failed with {type(err).__name__}: {err}. Yield NumPy "
                     f"arrays (or other picklable values)")


def _send_error(conn, err):
    """Send `err` with its traceback; it must reach the trainer even when it cannot be
    pickled (or unpickled: an exception whose __init__ takes two required arguments)."""
    text = "".join(traceback.format_exception(type(err), err, err.__traceback__))
    description = {"type": type(err).__name__, "module": type(err).__module__,
                   "qualname": type(err).__qualname__, "message": _safe_str(err),
                   "traceback": text, "pickled": None, "args": None}
    try:
        blob = pickle.dumps(err)
        pickle.loads(blob)
        description["pickled"] = blob
    except Exception:  # rebuilt from its class and args in the trainer, or described
        try:
            description["args"] = pickle.dumps(err.args)
        except Exception:
            pass
    try:
        conn.send(("error", description))
    except (OSError, EOFError):
        pass  # the trainer has gone


def _safe_str(err):
    try:
        return str(err)
    except Exception as inner:  # a broken __str__
        return f"<str() failed: {type(inner).__name__}>"
