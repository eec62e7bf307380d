"""Whole-step CUDA graphs: on a GPU place a step of a fixed feed shape is captured once and then
replayed with one launch.

Why: a small model's step on a GPU is bound by the host (13-28 us of Python and launch per CuPy
call against kernels of a few us). A static program runs the same kernels on the same shapes every
step, which is what CUDA graphs were made for (Paddle: BuildStrategy.allow_cuda_graph_capture /
FLAGS_new_executor_use_cuda_graph; PyTorch: torch.cuda.graphs).

How, per executor, program plan and feed signature (the fed arrays' shapes and dtypes):

- Steps 1 and 2 of a signature run eagerly: CuPy compiles its kernels and the pool warms up.
- Step 3 is captured (CuPy's stream capture, relaxed mode, on a stream of the executor's own) and
  then launched. The fed arrays are first copied into input arrays of the graph's own (a
  replay writes each feed into them: never into the caller's arrays). The capture runs the
  plan's ops with a pool of the graph's own serving their arrays: its memory is taken from the
  place's pool (tagged "cuda_graph"), serves nothing else and gives nothing back while the
  graph lives, so the addresses the graph was built with stay its own. The graph's memory goes
  back when it is dropped: the program changed, the executor closed or died, or the executor
  already held MAX_GRAPHS graphs (the least recently replayed is dropped). A persistable
  variable the step rewrites into a new array (an update that is not in place) is copied back
  into the array it was read from at the end of the capture, so the scope keeps one array per
  variable and the graph reads this step's output at the next replay. CuPy refuses its cuBLAS
  under capture, so the step's matrix products go to a cuBLAS handle of the runtime's own
  (runtime/gemm.py). At its end the graph copies each fetch and each kernel check's flag (an
  out-of-range label) into pinned host memory (`_host_copy`).
- Later steps copy the feed into the captured input arrays, launch the graph on the current
  stream, wait for it once and read the fetches and the checks from those host copies (no
  device-to-host copy of their own). A step holds the executor's lock from feed to fetch
  (threads sharing an executor share those buffers).
- An eager step of the same executor (another feed shape's warm-up, a timed step) writes an
  out-of-place update into the array the graph reads too, so it does not invalidate the graph.

What runs eagerly instead, with the reason kept (`reasons()`; the cuda_graph event, which the
profile keeps): startup programs; control flow, LoD, random ops, host callbacks (py_func,
print), a fed persistable variable, CUPY_ENABLE_UMP=1; anything the capture refuses (a host
synchronisation, a host-to-device copy inside an op, a product gemm.py does not take such as
one of integers: CuPy raises, the capture is abandoned and the plan runs eagerly from then
on); a scope variable the graph reads replaced from outside (another program wrote it) more than
MAX_INVALIDATIONS times. Per step, without giving up the graph: FLAGS_check_nan_inf (every
step), and per-op timing (`--ops`: the op_end event needs each op's time; one step in
OPS_EVERY of a captured signature runs eagerly with its ops timed, the others replay, so the
profile's op figures come from eager steps and its step times mostly from replays).
FLAGS_new_executor_use_cuda_graph=0 turns capture off (Paddle's name; its default there is
off, here on).
"""

from __future__ import annotations

import dataclasses
import os
import threading
import weakref
from typing import Dict, List, Optional, Tuple

import numpy as np

from . import device_checks, events, gemm, memory
from .flags import FLAGS
from .memory.pool import Pool
from .ops.registry import get_op_def

EAGER_STEPS = 2  # steps of a feed signature run before it is captured
MAX_INVALIDATIONS = 3  # a graph rebuilt this often for outside writes is given up
OPS_EVERY = 10  # with per-op timing (--ops) one replay in this many runs eagerly, ops timed
MAX_GRAPHS = 8  # graphs an executor holds (each holds a step's memory): the least recently
# replayed one is dropped for a new one
HOST_OPS = frozenset({"py_func", "print"})  # ops that call back into Python on the host
CAPTURE = "capture"  # Graphs.lookup: capture this step


@dataclasses.dataclass
class Refusal:
    """Why a plan (or one feed signature of it) runs eagerly."""
    reason: str


class _PoolSource:
    """The graph pool's 'system allocator': blocks of the place's pool, tagged cuda_graph, so
    the place's figures (reserved, allocated, peaks) include the graph's memory."""

    def __init__(self, pool):
        self.pool, self.cupy = pool, pool.system.cupy
        self.last_error = None

    def alloc(self, nbytes):
        addr = self.pool.alloc(nbytes, "cuda_graph")
        if not addr:
            self.last_error = f"the place's pool refused {nbytes} bytes"
        return addr or 0

    def free(self, addr):
        self.pool.free(addr)

    def memset(self, addr, value, nbytes):
        self.pool.system.memset(addr, value, nbytes)

    def mem_info(self):
        return self.pool.system.mem_info()

    def total_bytes(self):
        return self.pool.system.total_bytes()


class GraphPool(Pool):
    """A graph's own pool. While its graph lives it gives no chunk back to the place's pool,
    not even a wholly free one: the captured kernels hold every address it ever handed out
    (a block freed and reused inside the capture is still the graph's). Once the graph is
    dropped (retired) every block that comes back gives its wholly free chunks back."""

    gives_back = False
    retired = False

    def free(self, addr):
        super().free(addr)
        if self.retired:
            self.release_cached()
            if self.reserved == 0:
                _forget_retired(self)

    def retire(self):
        if self.retired:
            return
        self.retired = self.gives_back = True
        self.release_cached()
        if self.reserved:
            with _RETIRED_LOCK:
                _RETIRED.append(self)


def graph_pool(place_pool):
    """A pool of one graph's own: grows on demand from `place_pool`, serves only the capture."""
    pool = GraphPool(_PoolSource(place_pool), "auto_growth", place_pool.capacity,
                     name=f"{place_pool.name} CUDA graph")
    pool.device_id = place_pool.device_id
    pool.freed, pool.waiting = threading.Condition(), 0
    return pool


@dataclasses.dataclass
class Captured:
    """One captured step: the graph and the arrays whose addresses it holds."""
    graph: object
    pool: Pool
    feeds: List[Tuple[int, object]]  # (slot, input array the feed is copied into)
    reads: List[Tuple[int, object, object]]  # (slot, scope variable, array the graph reads)
    writes: List[Tuple[int, object]]  # (slot, array the scope keeps after a replay)
    fetches: List[Tuple[int, object]]  # (slot, array the graph leaves the fetch in)
    host_fetches: List[Optional[np.ndarray]]  # per fetch, the host copy the graph makes or None
    checks: list  # the kernels' deferred checks (device_checks), re-armed at each replay
    nbytes: int
    workspace: object = None  # its matrix products' cuBLAS workspace (gemm.py), or None

    def fetched_values(self):
        """After a replay and the stream's wait: each fetch's host copy where the graph made
        one (no device-to-host copy of its own to wait for), else its device array."""
        return [array if host is None else host
                for (_, array), host in zip(self.fetches, self.host_fetches)]

    def current(self, reads):
        """True while the scope variables `reads` ((slot, variable) pairs, the plan's binding
        in this step's scope) hold the arrays the graph reads."""
        if len(reads) != len(self.reads):
            return False
        return all(holder is mine and holder.value is array
                   for (_, holder), (_, mine, array) in zip(reads, self.reads))

    def close(self):
        self.graph = None
        self.pool.retire()


_RETIRED: List[Pool] = []  # graph pools of dropped graphs whose arrays are not all dead yet
_RETIRED_LOCK = threading.Lock()  # (pools are retired from finalizers too)


def _forget_retired(pool):
    with _RETIRED_LOCK:
        if pool in _RETIRED:
            _RETIRED.remove(pool)


def _retire_all(pools):
    """An executor's graphs die with it (weakref.finalize), closed or not."""
    for pool in list(pools):
        pool.retire()
    pools.clear()


def static_refusal(plan) -> Optional[str]:
    """Why `plan` cannot be captured at all, judged from its ops (None: it may be)."""
    if plan.is_startup:
        return "a startup program runs once"
    if plan.control_steps:
        return "control flow (while, conditional_block) decides on the host"
    if plan.lod_mode:
        return "LoD sequences change shape with the batch"
    if plan.persistable_feeds:
        return "a persistable variable is fed"
    if os.environ.get("CUPY_ENABLE_UMP") == "1":
        return ("CUPY_ENABLE_UMP=1: CuPy may hand a host buffer to a kernel without copying it, "
                "and a graph would keep its address")
    for step in plan.steps:
        opdef = get_op_def(step.type)
        if opdef.random:
            return (f"op {step.type} draws random numbers on the host (a replay would repeat "
                    f"them)")
        if step.type in HOST_OPS:
            return f"op {step.type} calls back into Python on the host"
    return None


def step_refusal() -> Optional[str]:
    """Why this step runs eagerly though its plan is captured (None: it may replay)."""
    if not FLAGS.get("new_executor_use_cuda_graph"):
        return "FLAGS_new_executor_use_cuda_graph is off"
    if FLAGS.get("check_nan_inf"):
        return "FLAGS_check_nan_inf checks each op's output on the host"
    return None


def signature(checked):
    """The feed signature: each fed array's shape and dtype."""
    return tuple((getattr(v, "shape", None), getattr(v, "dtype", type(v))) for v in checked)


@dataclasses.dataclass
class Capture:
    """Executor._graph_for's answer: capture this step (feed signature `sig`)."""
    sig: tuple


@dataclasses.dataclass
class Replay:
    """Executor._graph_for's answer: replay `captured`."""
    captured: Captured


class Graphs:
    """An executor's captured steps, per (plan, feed signature)."""

    def __init__(self, xp, place):
        self.xp, self.place = xp, place
        self._seen: Dict[tuple, int] = {}
        self._graphs: Dict[tuple, object] = {}  # key -> Captured | Refusal
        self._invalidated: Dict[tuple, int] = {}
        self._stream = None
        self._pools: List[GraphPool] = []  # of the graphs held: retired when this dies
        self._finalizer = weakref.finalize(self, _retire_all, self._pools)
        self._used: Dict[tuple, int] = {}  # key -> last replay's tick (least recent: dropped)
        self._timed: Dict[tuple, int] = {}  # key -> steps looked up while op_end is listened
        self._tick = 0
        self.lock = threading.RLock()  # a step's feed, launch and fetch use shared buffers
        self._read_arrays: Dict[int, int] = {}  # id(array a graph reads) -> graphs reading it

    def captured(self):
        """The graphs held now."""
        return [g for g in self._graphs.values() if isinstance(g, Captured)]

    def reasons(self):
        """{feed signature key: reason} of every plan that runs eagerly."""
        return {key: g.reason for key, g in self._graphs.items() if isinstance(g, Refusal)}

    def lookup(self, plan, sig):
        """The Captured to replay, CAPTURE when this step should be captured, or None (eager).
        The caller checks step_refusal() first."""
        key = (plan, sig)
        found = self._graphs.get(key)
        if isinstance(found, Refusal):
            return None
        if found is not None:
            self._tick += 1
            self._used[key] = self._tick
            if events.op_end.subs:
                timed = self._timed[key] = self._timed.get(key, 0) + 1
                if timed % OPS_EVERY == 0:
                    return None  # an eager step, each op timed (--ops)
            return found
        seen = self._seen[key] = self._seen.get(key, 0) + 1
        if seen <= EAGER_STEPS:
            return None
        reason = static_refusal(plan)
        if reason is not None:
            self._refuse(plan, sig, reason)
            return None
        return CAPTURE

    def drop(self, plan, sig, reason=None):
        """Forget the graph of (plan, sig); with `reason`, run it eagerly from now on."""
        key = (plan, sig)
        found = self._graphs.pop(key, None)
        self._used.pop(key, None)
        if isinstance(found, Captured):
            self._unpin(found)
            if found.pool in self._pools:
                self._pools.remove(found.pool)
            found.close()
        if reason is not None:
            self._refuse(plan, sig, reason)

    def _refuse(self, plan, sig, reason):
        self._graphs[(plan, sig)] = Refusal(reason)
        _emit(plan, sig, False, 0, reason)

    def _pin(self, captured):
        for _, _, array in captured.reads:
            self._read_arrays[id(array)] = self._read_arrays.get(id(array), 0) + 1

    def _unpin(self, captured):
        for _, _, array in captured.reads:
            left = self._read_arrays.get(id(array), 0) - 1
            if left > 0:
                self._read_arrays[id(array)] = left
            else:
                self._read_arrays.pop(id(array), None)

    def keep_arrays(self, writes, env):
        """After an eager step of this executor: a persistable it rewrote into a new array,
        whose old array a graph reads, is copied into the old one instead (so the graph
        reads this step's value and the scope keeps one array per variable)."""
        if not self._read_arrays:
            return
        xp = self.xp
        for slot, holder in writes:
            old, new = holder.value, env[slot]
            if (old is not new and id(old) in self._read_arrays
                    and isinstance(new, xp.ndarray) and isinstance(old, xp.ndarray)
                    and old.shape == new.shape and old.dtype == new.dtype):
                old[...] = new
                env[slot] = old

    def _make_room(self):
        """At most MAX_GRAPHS graphs: drop the least recently replayed."""
        held = [k for k, g in self._graphs.items() if isinstance(g, Captured)]
        while len(held) >= MAX_GRAPHS:
            oldest = min(held, key=lambda k: self._used.get(k, 0))
            held.remove(oldest)
            self.drop(*oldest)
            self._seen[oldest] = 0  # seen anew: eager steps first, then captured again

    def forget(self, plan=None):
        """Drop the graphs of `plan` (None: of every plan)."""
        for key in [k for k in self._graphs if plan is None or k[0] is plan]:
            self.drop(*key)
        for table in (self._seen, self._invalidated, self._timed):
            for key in [k for k in table if plan is None or k[0] is plan]:
                del table[key]

    def invalidate(self, plan, sig, why="the scope's variables it reads were replaced from "
                                        "outside the graph (another program writes them)"):
        """The graph cannot serve (the scope no longer holds the arrays it reads; the capture
        ran out of memory): capture again at the next step, or give up after
        MAX_INVALIDATIONS times."""
        key = (plan, sig)
        count = self._invalidated[key] = self._invalidated.get(key, 0) + 1
        self._seen[key] = EAGER_STEPS  # capture again at the next step
        self.drop(plan, sig, None if count < MAX_INVALIDATIONS else f"{why}, {count} times")

    def stream(self):
        if self._stream is None:
            self._stream = self.xp.cuda.Stream(non_blocking=True)
        return self._stream

    def capture(self, plan, sig, env, reads, writes, run_ops):
        """Capture one step of `plan` (its inputs in `env`); the Captured, or None with the
        plan marked eager (the reason kept) when CuPy refused something in it."""
        self._make_room()
        place_pool = memory.pool_for(self.place)
        work = list(env)
        with memory.serving(place_pool, "reader"):  # inputs of the graph's own, not the
            inputs = [(slot, self.xp.array(env[slot], copy=True, order="C"))  # caller's (a
                      for slot, _ in plan.feed_slots]  # replay writes into them)
        for slot, array in inputs:
            work[slot] = array
        pool = graph_pool(place_pool)
        stream = self.stream()
        device_checks.clear()
        try:
            blas = gemm.capture_blas(self.xp)  # cuBLAS of the runtime's own: CuPy's refuses
            with stream:
                stream.begin_capture()
                try:
                    with memory.serving(pool, "cuda_graph"), gemm.capturing(blas) as products:
                        run_ops(plan, work)
                        copied = _copy_back(self.xp, work, reads, writes)
                        host_fetches = [_host_copy(self.xp, work[slot], stream)
                                        for slot in plan.fetch_slots]
                        checks = [_host_check(self.xp, check, stream)
                                  for check in device_checks.snapshot()]
                except BaseException:
                    _abandon(stream)
                    raise
                graph = stream.end_capture()
        except Exception as err:  # noqa: BLE001  (what CuPy raised names the culprit)
            device_checks.clear()
            pool.retire()
            if isinstance(err, MemoryError):  # may fit later: try again, a few times
                self.invalidate(plan, sig, f"the capture ran out of memory ({_describe(err)})")
            else:
                self.drop(plan, sig, f"the capture failed: {_describe(err)}")
            return None
        device_checks.clear()
        kept = {slot for slot, _ in writes}
        captured = Captured(
            graph=graph, pool=pool,
            feeds=inputs,
            reads=[(slot, holder, env[slot]) for slot, holder in reads],
            writes=[(slot, copied.get(slot, work[slot])) for slot in sorted(kept)],
            fetches=[(slot, work[slot]) for slot in plan.fetch_slots],
            host_fetches=host_fetches, checks=checks, nbytes=pool.reserved,
            workspace=products.workspace)
        bad = _uncapturable_value(captured, self.xp)
        if bad:
            captured.close()
            self.drop(plan, sig, bad)
            return None
        self._graphs[(plan, sig)] = captured
        self._pools.append(pool)
        self._pin(captured)
        self._tick += 1
        self._used[(plan, sig)] = self._tick
        _emit(plan, sig, True, captured.nbytes, None)
        return captured

    def feed(self, captured, env, checked):
        """Copy the checked feed values into the graph's input arrays (on the current stream);
        the bytes fed."""
        fed = 0
        for (slot, target), value in zip(captured.feeds, checked):
            if isinstance(value, self.xp.ndarray):
                _copy_on_device(self.xp, value, target)
            else:
                target.set(np.ascontiguousarray(value))
            env[slot] = target
            fed += target.nbytes
        return fed

    @staticmethod
    def launch(captured, env):
        """Launch the graph on the current stream and put its outputs in `env`."""
        captured.graph.launch()
        for slot, _, array in captured.reads:
            env[slot] = array
        for slot, array in captured.writes:
            env[slot] = array
        for slot, array in captured.fetches:
            env[slot] = array
        device_checks.rearm(captured.checks)


def _emit(plan, sig, captured, nbytes, reason):
    if events.cuda_graph.subs:
        events.cuda_graph.emit(events.GraphRecord(
            plan.program._uid, captured, nbytes, tuple(shape for shape, _ in sig), reason))


def _copy_on_device(xp, value, target):
    """A fed device array's elements into the graph's input array `target` (C order, the same
    shape) on the current stream: one cudaMemcpyAsync where `value` lies alike on the same
    device (CuPy's elementwise copy costs a kernel launch's host time), else CuPy's copy."""
    if (value.dtype == target.dtype and value.shape == target.shape and value.size
            and value.flags.c_contiguous and value.data.device_id == target.data.device_id):
        cuda = xp.cuda.runtime
        cuda.memcpyAsync(target.data.ptr, value.data.ptr, target.nbytes,
                         cuda.memcpyDeviceToDevice, xp.cuda.get_current_stream().ptr)
    else:
        target[...] = value


def _host_copy(xp, array, stream):
    """Inside the capture, at its end: a host array in pinned memory that the graph copies
    `array` into, so that once the step's stream is waited for, the host reads it with no
    device-to-host copy of its own (each such copy is another wait of 8-15 us on an H200).
    cudaMemcpyAsync itself: CuPy's get() refuses while the stream captures, though CUDA
    captures a copy into pinned memory. None for what is not a contiguous device array (read
    from the device as before)."""
    if not isinstance(array, xp.ndarray) or array.size == 0 or not array.flags.c_contiguous:
        return None
    pinned = xp.cuda.alloc_pinned_memory(array.nbytes)
    host = np.frombuffer(pinned, array.dtype, array.size).reshape(array.shape)
    cuda = xp.cuda.runtime
    cuda.memcpyAsync(host.ctypes.data, array.data.ptr, array.nbytes, cuda.memcpyDeviceToHost,
                     stream.ptr)
    return host


def _host_check(xp, check, stream):
    """A deferred check whose flag the graph also copies to the host (`_host_copy`), so that
    re-armed at each replay it is read there."""
    op, flag, explain = check
    host = _host_copy(xp, flag.reshape(-1)[:1], stream)
    return check if host is None else (op, host, explain)


def _copy_back(xp, work, reads, writes):
    """Inside the capture: each persistable the step rewrote into a new array is copied into
    the array it was read from; {slot: that array}."""
    read_arrays = {slot: holder.value for slot, holder in reads}
    copied = {}
    for slot, holder in writes:
        old, new = read_arrays.get(slot), work[slot]
        if old is None or new is old or not isinstance(new, xp.ndarray):
            continue
        if not isinstance(old, xp.ndarray) or old.shape != new.shape or old.dtype != new.dtype:
            raise _Uncapturable(f"{holder.name} changes from {getattr(old, 'shape', None)} "
                                f"{getattr(old, 'dtype', None)} to {new.shape} {new.dtype}")
        old[...] = new
        copied[slot] = old
    return copied


def _abandon(stream):
    """End a capture that failed; CuPy reports it invalidated, which says nothing new."""
    try:
        stream.end_capture()
    except Exception:  # noqa: BLE001
        pass


class _Uncapturable(Exception):
    pass


def _uncapturable_value(captured, xp):
    """A reason when an output is not a plain device array (a LoDTensorArray, SelectedRows:
    their host parts would not follow a replay); None when all are."""
    for slot, array in captured.writes + captured.fetches:
        if array is not None and not isinstance(array, xp.ndarray):
            return f"an output is a {type(array).__name__}, whose host part a replay cannot update"
    return None


def _describe(err):
    if isinstance(err, _Uncapturable):
        return str(err)
    text = str(err).strip().splitlines()
    head = text[0] if text else ""
    return f"{type(err).__name__}: {head}"[:300]

