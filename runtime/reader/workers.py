"""Reader worker processes, the trainer's side: start them, take their batches in a fixed
order, notice when one fails or dies, and stop them without leaving anything behind.

Used by `DataLoader.from_generator(num_workers=N)` (and `use_multiprocess=True`: one worker)
and by `paddle.reader.multiprocess_reader`.

How it works:
* Workers are forked (the `fork` start method, Linux), so the generator may be any callable,
  a closure or a lambda included: nothing is pickled to start them. Every worker starts with
  the same Python `random` and NumPy global RNG state (a fresh base seed per pass, from the
  trainer's `random`); the first get_worker_info() call reseeds a worker with
  `WorkerInfo.seed` (base + id). Each worker's BLAS runs one thread.
* A worker runs ahead by `prefetch` items (2, like PyTorch's prefetch_factor). Each item has
  a slot: with shared memory, a memfd buffer (anonymous, never named in /dev/shm, freed by the
  kernel when the last process using it exits, so even a SIGKILL leaks nothing) that the
  trainer maps once and copies the batch out of, on the reader thread, before handing the
  slot back. Without shared memory (or for non-array items) items are pickled through a pipe.
* Order: round robin, item k comes from worker k mod N (a worker that finished leaves the
  rotation), so a generator that shards itself with `range(info.id, n, info.num_workers)`
  gives exactly its single-process order. `order="arrival"` takes items as they come.
* A worker's warnings (warn_trainer) and PADDLETUNE_OVERRIDES records (a regrouped batch
  size: runtime/overrides.py) reach the trainer with its items, at its turns.
* Failures reach the trainer as exceptions, at the failing item's turn: the worker's own
  exception (rebuilt even when it cannot be unpickled) with the worker's traceback as a note;
  a worker that died (signal, os._exit) is reported with its pid and signal; no hang.
* close() sends worker_main.STOP_SIGNAL (the worker closes the generator, so its `finally`
  blocks run), and SIGKILL after GRACE_S; every process is reaped, also at interpreter exit.
  Workers leave SIGINT and SIGTERM to the trainer (a Ctrl-C or a preemption SIGTERM sent to
  the process group lets the trainer finish its steps and stop them) and exit on their own
  within PARENT_POLL_S when the trainer dies. They are not daemonic, so a generator may start
  processes of its own (multiprocess_reader inside a worker).
* Forking while another trainer thread runs a multi-threaded OpenBLAS call can hang in
  OpenBLAS's fork handler (not in this code); set its thread count to 1 if that happens.
"""

import atexit
import contextlib
import errno
import gc
import os
import pickle
import random
import signal
import threading
import time
import warnings
import weakref
from multiprocessing.connection import wait
from multiprocessing.reduction import recv_handle

import numpy as np

from .. import overrides
from ..errors import ReaderWorkerError, add_note, reader_exit_error
from . import worker_main

__all__ = ["WorkerPool", "ReaderWorkerError", "PREFETCH", "GRACE_S"]

PREFETCH = 2  # items each worker prepares ahead
GRACE_S = 0.5  # how long a stopped worker may take to exit before SIGKILL
POLL_S = 0.1  # the longest the reader thread sleeps before checking for close()


class Item:
    """One item from a worker: `value` (a list of arrays for a DataLoader batch), the worker's
    number, and what producing it cost there (wall and CPU seconds)."""

    __slots__ = ("value", "worker", "produce_s", "cpu_s")

    def __init__(self, value, worker, produce_s, cpu_s):
        self.value, self.worker, self.produce_s, self.cpu_s = value, worker, produce_s, cpu_s

    @property
    def arrays(self):
        return self.value


class _Worker:
    """The trainer's handle on one worker process."""

    def __init__(self, index, proc, conn):
        self.index, self.proc, self.conn = index, proc, conn
        self.maps = {}  # slot -> the trainer's mapping of the worker's shared buffer
        self.exited = False


class WorkerPool:
    """Run `sources[i](info)` in worker process i; iterate to get their items in order."""

    def __init__(self, sources, name, use_shared_memory=True, order="round_robin",
                 prefetch=PREFETCH, what="reader worker"):
        if order not in ("round_robin", "arrival"):
            raise ValueError(f"order must be 'round_robin' or 'arrival', got {order!r}")
        self.name, self.order, self.what = name, order, what
        self._closing = False
        self._iterating = False
        self._reaped = self._released = False
        self._lock = threading.Lock()
        use_shm = bool(use_shared_memory) and hasattr(os, "memfd_create")
        seed = random.getrandbits(31)
        self._workers = []
        worker_main.prepare_trainer()
        _LIVE_POOLS.add(self)
        try:
            for index, source in enumerate(sources):
                info = worker_main.WorkerInfo(index, len(sources), seed + index, name)
                self._workers.append(self._start(index, source, info, use_shm, prefetch))
        except OSError as err:
            self.close()
            if err.errno in (errno.EMFILE, errno.ENFILE):
                raise ReaderWorkerError(self._too_many_files(len(self._workers))) from err
            raise
        except BaseException:
            self.close()
            raise

    def _start(self, index, source, info, use_shm, prefetch):
        ctx = _fork_context(self.name)
        conn, child_conn = ctx.Pipe(duplex=True)
        proc = ctx.Process(target=_child, name=f"{self.name}-worker{index}",
                           args=(source, child_conn, conn, info, use_shm, prefetch,
                                 os.getpid()))
        with warnings.catch_warnings(), _frozen_for_the_child(), _stop_signal_blocked():
            warnings.filterwarnings("ignore", ".*fork.*", DeprecationWarning)  # 3.12+
            proc.start()
        child_conn.close()
        return _Worker(index, proc, conn)

    def _too_many_files(self, index):
        soft, target = _descriptor_limits()
        return (f"cannot start {self.what} {index} of {self.name}: too many open files (the "
                f"process's limit, RLIMIT_NOFILE, is {soft}; each worker needs about 4 file "
                f"descriptors). {_RAISE_LIMIT.format(target=target)}; or use fewer workers")

    def _no_descriptor(self, worker):
        soft, target = _descriptor_limits()
        return (f"{self.name}: the trainer has run out of file descriptors (too many open "
                f"files: the process's limit, RLIMIT_NOFILE, is {soft}) and cannot take the "
                f"shared-memory buffer {self.what} {worker.index} (pid {worker.proc.pid}) "
                f"sends with the next batch. Something in the job keeps many files open, or "
                f"the limit is low. {_RAISE_LIMIT.format(target=target)}; or pass "
                f"use_shared_memory=False")

    @property
    def pids(self):
        return [w.proc.pid for w in self._workers]

    # --- receiving ---------------------------------------------------------------------------
    def __iter__(self):
        self._iterating = True
        try:
            live = [w for w in self._workers]
            turn = 0
            while live:
                turn %= len(live)
                candidates = [live[turn]] if self.order == "round_robin" else \
                    live[turn:] + live[:turn]
                got = self._receive(candidates)
                if got is None:
                    return  # close() was called
                worker, message = got
                if message[0] == "item":
                    yield self._unpack(worker, message)
                    turn = live.index(worker) + 1
                elif message[0] == "end":
                    turn = live.index(worker)
                    live.remove(worker)
                else:  # "error"
                    raise self._rebuild(worker, message[1])
        finally:
            with self._lock:
                self._iterating = False
                release = self._reaped
            if release:
                self._release()

    def _receive(self, candidates):
        """(worker, message): the next item/end/error message of the first candidate that
        has one; None once close() is called. Raises ReaderWorkerError for a dead worker."""
        while not self._closing:
            for worker in candidates:
                if self._pending(worker):
                    message = self._read(worker)
                    if message is not None:
                        return worker, message
                    break  # a slot or warning was handled: look again
                if worker.exited and not self._closing:
                    raise self._death(worker)
            else:
                self._wait(candidates)
        return None

    def _pending(self, worker):
        try:
            return worker.conn.poll(0)
        except (OSError, EOFError):
            return False

    def _wait(self, candidates):
        sentinels = {w.proc.sentinel: w for w in self._workers if not w.exited}
        try:
            ready = wait([w.conn for w in candidates] + list(sentinels), POLL_S)
        except (OSError, ValueError):  # closed under us by close()
            return
        for obj in ready:
            if obj in sentinels:
                sentinels[obj].exited = True
        if not ready:  # a process the generator started may hold the sentinel open
            for worker in sentinels.values():
                worker.exited = not worker.proc.is_alive()

    def _read(self, worker):
        """The next message; a new shared buffer or a warning is handled here (None)."""
        try:
            message = worker.conn.recv()
        except (EOFError, OSError):
            worker.exited = True  # gone mid-message
            if self._closing:
                return None
            raise self._death(worker) from None
        if message[0] == "slot":
            _, slot, size = message
            try:
                fd = recv_handle(worker.conn)
            except (EOFError, OSError, RuntimeError) as err:
                if _out_of_descriptors(err):  # the trainer's, not the worker's, doing
                    raise ReaderWorkerError(self._no_descriptor(worker)) from err
                worker.exited = True
                if self._closing:
                    return None
                raise self._death(worker) from None
            worker.maps[slot] = _map(fd, size)
            return None
        if message[0] == "warn":
            warnings.warn(message[1], RuntimeWarning, stacklevel=2)
            return None
        if message[0] == "override":  # a record of PADDLETUNE_OVERRIDES made in the worker
            overrides.accept(message[1], message[2])
            return None
        return message

    def _unpack(self, worker, message):
        _, slot, payload, produce_s, cpu_s = message
        kind, data = payload
        if kind == "shm":
            buf = worker.maps[slot]
            data = [np.ndarray(v[1], v[0], buffer=buf, offset=v[2]).copy() if k == "nd" else v
                    for k, v in data]
        try:
            worker.conn.send(("free", slot))
        except OSError:
            pass  # the worker is gone: its turn reports it
        return Item(data, worker.index, produce_s, cpu_s)

    # --- failures ----------------------------------------------------------------------------
    def _rebuild(self, worker, d):
        err = _unpickle(d.get("pickled")) or _from_class(d) or ReaderWorkerError(
            f"{d['type']}: {d['message']}")
        if not isinstance(err, Exception):  # SystemExit, KeyboardInterrupt: not the job's end
            err = reader_exit_error(f"{d['type']}({d['message']})",
                                    f"{self.what} {worker.index} of {self.name}")
        trace = d["traceback"].rstrip("\n")
        return add_note(err, f"--- the traceback in {self.what} {worker.index} (pid "
                             f"{worker.proc.pid}) of {self.name} ---\n{trace}")

    def _death(self, worker):
        worker.proc.join(1.0)
        code = worker.proc.exitcode
        who = f"{self.what} {worker.index} (pid {worker.proc.pid}) of {self.name}"
        if code is None:
            return ReaderWorkerError(f"{who} closed its channel but is still running")
        if code < 0:
            return ReaderWorkerError(f"{who} was killed by signal {_signal_text(-code)} "
                                     f"while preparing data{_signal_hint(-code)}")
        return ReaderWorkerError(f"{who} exited with status {code} before its data was "
                                 f"complete (os._exit in the generator, or killed by "
                                 f"another process?)")

    # --- stopping ----------------------------------------------------------------------------
    def close(self):
        """Stop every worker (SIGTERM, then SIGKILL after GRACE_S) and reap it. Idempotent;
        safe from any thread while another one iterates."""
        with self._lock:
            if self._closing:
                return
            self._closing = True
        _LIVE_POOLS.discard(self)
        for w in self._workers:
            if w.proc.is_alive():
                _signal(w.proc, worker_main.STOP_SIGNAL)
        deadline = time.monotonic() + GRACE_S
        for w in self._workers:
            w.proc.join(max(0.0, deadline - time.monotonic()))
        for w in self._workers:
            if w.proc.is_alive():
                w.proc.kill()
                w.proc.join(5.0)
            _kill_group(w.proc.pid)  # what the generator started and left running
        with self._lock:
            self._reaped = True
            release = not self._iterating
        if release:
            self._release()

    def _release(self):
        """Close the channels, mappings and process handles (once every process is reaped
        and no thread iterates)."""
        with self._lock:
            if self._released:
                return
            self._released = True
        for w in self._workers:
            w.conn.close()
            for buf in w.maps.values():
                _close_map(buf)
            w.maps.clear()
            if w.proc.exitcode is not None:
                w.proc.close()

    def __del__(self):
        if not self.__dict__.get("_closing", True):
            self.close()


_LIVE_POOLS = weakref.WeakSet()  # for the children (to close) and for interpreter exit


@atexit.register
def _close_live_pools():
    """Stop every pool still running when the interpreter exits (before multiprocessing
    joins its non-daemonic children)."""
    for pool in list(_LIVE_POOLS):
        pool.close()

# --- helpers -----------------------------------------------------------------------------------
@contextlib.contextmanager
def _frozen_for_the_child():
    """Fork with every existing object in the GC's permanent generation, then thaw them in
    the trainer only: the worker's garbage collector then never walks (and so never copies
    the pages of) the trainer's objects. Reference counts still copy what the worker reads."""
    if gc.get_freeze_count():  # the user froze objects: leave their freeze alone
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@contextlib.contextmanager
def _stop_signal_blocked():
    """STOP_SIGNAL blocked in the forking thread, so that a worker cannot receive it before
    its handler is in place (it unblocks it then)."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {worker_main.STOP_SIGNAL})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)



def _child(source, conn, trainer_end, info, use_shm, prefetch, parent_pid):
    """The worker's target: first drop what it inherited of the trainer's channels (its own
    channel's other end, every pool's channels and shared buffers), then run."""
    trainer_end.close()
    for pool in list(_LIVE_POOLS):
        for w in pool._workers:
            w.conn.close()
            for buf in w.maps.values():
                _close_map(buf)
            w.maps.clear()
    _LIVE_POOLS.clear()
    worker_main.run(source, conn, info, use_shm, prefetch, parent_pid)


def _close_map(buf):
    try:
        buf.close()
    except BufferError:  # an array still views it: unmapped when that goes
        pass


def _fork_context(name):
    import multiprocessing
    try:
        return multiprocessing.get_context("fork")
    except ValueError:
        raise ReaderWorkerError(f"{name}: reader worker processes need the 'fork' start "
                                f"method, which this platform lacks; use num_workers=0 (a "
                                f"reader thread)") from None


def _map(fd, size):
    import mmap
    try:
        return mmap.mmap(fd, size)
    finally:
        os.close(fd)


_RAISE_LIMIT = ("Raise it before starting the job: `ulimit -n {target}` in the shell, or "
                "resource.setrlimit(resource.RLIMIT_NOFILE, ({target}, hard)) in the script")


def _descriptor_limits():
    """(the soft RLIMIT_NOFILE, the limit to suggest: 4096, or the hard limit below it)."""
    try:
        import resource
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, OSError, ValueError):
        return None, 4096
    return soft, 4096 if hard in (None, -1) or hard >= 4096 else hard


def _out_of_descriptors(err) -> bool:
    """Whether receiving a file descriptor failed because this process has no free one (the
    kernel then drops it: RuntimeError "received 0 items of ancdata", or EMFILE)."""
    if isinstance(err, OSError) and err.errno in (errno.EMFILE, errno.ENFILE):
        return True
    try:
        os.close(os.dup(0))
    except OSError as probe:
        return probe.errno in (errno.EMFILE, errno.ENFILE)
    return False


def _kill_group(pgid):
    """SIGKILL what is left of a worker's process group (nothing, usually): the processes its
    generator started. A group's id is not reused while any of its members lives."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _signal(proc, signum):
    try:
        os.kill(proc.pid, signum)
    except (ProcessLookupError, TypeError):
        pass


def _unpickle(blob):
    if blob is None:
        return None
    try:
        return pickle.loads(blob)
    except Exception:
        return None


def _from_class(d):
    """The exception rebuilt from its class and args without calling __init__ (which may
    need other arguments); None when the class or args are not available here."""
    import importlib
    try:
        cls = importlib.import_module(d["module"])
        for part in d["qualname"].split("."):
            cls = getattr(cls, part)
        if not (isinstance(cls, type) and issubclass(cls, BaseException)) or d["args"] is None:
            return None
        err = cls.__new__(cls)
        err.args = pickle.loads(d["args"])
        return err if str(err) == d["message"] else None
    except Exception:
        return None


def _signal_text(signum):
    try:
        return f"{signal.Signals(signum).name} ({signal.strsignal(signum)})"
    except ValueError:
        return str(signum)


_SIGNAL_HINTS = {
    signal.SIGKILL: "; a SIGKILL nobody sent is usually the kernel's out-of-memory killer "
                    "(see `dmesg`)",
    signal.SIGSEGV: ": native code called by the generator crashed",
    signal.SIGBUS: ": often shared memory ran out; try use_shared_memory=False",
}


def _signal_hint(signum):
    return _SIGNAL_HINTS.get(signum, "")
