"""Instrumentation hooks: the runtime announces what it does; paddletune's probes listen.

Each event is a Channel. Emitting sites test `channel.subs` (a list) first, so a channel nobody
listens to costs one attribute load and a truth test. A subscriber that raises is removed with a
warning: a broken probe must never break training.

Events and their payloads:
  step_begin(StepBegin)            Executor.run entered
  step_end(StepRecord)             Executor.run finished (timings in seconds, perf_counter clock)
  op_end(OpRecord)                 one op ran (only emitted while someone subscribes; on a GPU
                                   place all of a step's at the end of its ops loop, timed with
                                   CUDA events: see runtime/gpu_timing.py)
  compile(CompileRecord)           a program was compiled into a kernel plan
  nan_inf(dict)                    FLAGS_check_nan_inf found NaN/Inf (op, inputs, step, counts)
  reader_state(ReaderState)        a DataLoader pass started, ended, was reset or failed
  reader_push(ReaderPush)          a batch entered a DataLoader's queue (producer thread)
  reader_pop(ReaderPop)            the consumer took a batch (or peeked at it in speed-test mode)
  reader_solo(ReaderSolo)          a loader asked to time its producer thread alone reports
                                   (GeneratorLoader.measure_producer_alone)
  memory_step(MemoryStepRecord)    a step's pool figures (CPU places; only while subscribed)
  memory_trace(MemoryTrace)        per-op pool figures of one step per plan (its 2nd run)
  memory_oom(dict)                 a pool refused a request (PoolOutOfMemory's details)
  sched_step(SchedStepRecord)      the ParallelExecutor's scheduler figures of one step
  drop_scope(DropScopeRecord)      the ParallelExecutor dropped its local scopes
"""

import warnings
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple


class Channel:
    __slots__ = ("name", "subs")

    def __init__(self, name):
        self.name = name
        self.subs: List[Callable] = []

    def emit(self, payload):
        for fn in tuple(self.subs):
            try:
                fn(payload)
            except Exception as err:  # a probe bug must not stop the job
                self._drop(fn, err)

    def _drop(self, fn, err):
        if fn in self.subs:
            self.subs.remove(fn)
        warnings.warn(f"event subscriber {getattr(fn, '__qualname__', fn)!r} on {self.name!r} "
                      f"raised {type(err).__name__}: {err}; it was unsubscribed",
                      RuntimeWarning, stacklevel=3)

    def __repr__(self):
        return f"<Channel {self.name}: {len(self.subs)} subscriber(s)>"


CHANNELS: Dict[str, Channel] = {}


def channel(name) -> Channel:
    """The channel called `name` (created on first use)."""
    ch = CHANNELS.get(name)
    if ch is None:
        ch = CHANNELS[name] = Channel(name)
    return ch


step_begin = channel("step_begin")
step_end = channel("step_end")
op_end = channel("op_end")
compile = channel("compile")  # noqa: A001  (the event's name)
nan_inf = channel("nan_inf")  # FLAGS_check_nan_inf caught one: a dict of NanInfError's details
reader_state = channel("reader_state")
reader_push = channel("reader_push")
reader_pop = channel("reader_pop")
reader_solo = channel("reader_solo")
memory_step = channel("memory_step")
memory_trace = channel("memory_trace")
memory_oom = channel("memory_oom")
sched_step = channel("sched_step")
drop_scope = channel("drop_scope")
cuda_graph = channel("cuda_graph")  # a GPU step captured into a CUDA graph, or kept eager


class Subscription:
    """Returned by subscribe(); close() (or leaving a `with` block) unsubscribes."""

    def __init__(self, ch, fn):
        self.channel, self.fn = ch, fn

    def close(self):
        if self.fn in self.channel.subs:
            self.channel.subs.remove(self.fn)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def subscribe(name, fn) -> Subscription:
    ch = channel(name)
    ch.subs.append(fn)
    return Subscription(ch, fn)


def subscribers(name) -> int:
    return len(channel(name).subs)


@dataclass
class StepBegin:
    executor_id: int
    program_id: int
    step: int  # per executor and program, from 0
    t_begin: float


@dataclass
class StepRecord:
    """What one Executor.run cost. Times are perf_counter seconds. On a GPU place the step's
    stream is synchronised before compute_s ends (runtime/gpu_timing.py)."""

    executor_id: int
    program_id: int
    step: int
    t_begin: float
    t_end: float
    feed_s: float  # converting and checking the feed
    compute_s: float  # running the ops
    fetch_s: float  # copying fetched values out (device->host on GPU)
    batch_size: Optional[int]
    n_ops: int
    feed_bytes: int
    fetch_bytes: int
    fetch_names: Tuple[str, ...]
    place: str
    is_startup: bool  # the program only initialises persistables (no feed, no reads)
    feed_names: Tuple[str, ...] = ()  # the variables fed, in the feed dict's order
    read_s: float = 0.0  # waiting for a non-iterable DataLoader's next batch (inside run)
    compute_wait_s: Optional[float] = None  # of compute_s, the training thread's time off
    # its CPU (compute_s less its time.thread_time): waiting for the GIL, a core or a lock.
    # None: not measured (a GPU place, whose compute_s waits for the device; the
    # ParallelExecutor, whose training thread waits for its scheduler's threads)
    compute_queued_s: Optional[float] = None  # of compute_wait_s, the time runnable but
    # waiting for a core (Linux's run_delay: runtime/thread_clock.py); the rest is blocked
    # (the GIL, a lock). None: not measured, or not readable here

    @property
    def wall_s(self):
        return self.t_end - self.t_begin


@dataclass
class OpRecord:
    program_id: int
    step: int
    index: int
    type: str
    role: int
    t_begin: float
    t_end: float
    timing: str = "host"  # "host": perf_counter around the op; "cuda_event": device time

    @property
    def dur_s(self):
        return self.t_end - self.t_begin


@dataclass
class CompileRecord:
    program_id: int
    n_ops: int
    op_types: Tuple[str, ...]
    compile_s: float
    program: Any = None  # the Program compiled (read its ops; never mutate it)


@dataclass
class GraphRecord:
    """A program's steps of one feed signature were captured into a CUDA graph (captured), or
    run eagerly from now on (reason); runtime/cuda_graph.py."""

    program_id: int
    captured: bool
    graph_bytes: int
    feed_shapes: Tuple[Optional[Tuple[int, ...]], ...]
    reason: Optional[str] = None


@dataclass
class ReaderState:
    """A DataLoader pass changed state. `what`: start | end | reset | error. `config` (on
    start): capacity, iterable, use_double_buffer, num_workers (0: a thread), source kind,
    batch_size, feed names, places, drop_last, use_shared_memory, name, timeout, and
    worker_pids (the pass's worker processes; [] for a thread producer)."""

    loader_id: int
    pass_no: int
    t: float
    what: str
    config: Optional[dict] = None
    detail: str = ""
    batches: int = 0  # batches pushed in this pass so far


@dataclass
class ReaderPush:
    """One batch entered the queue. Emitted on the producer thread."""

    loader_id: int
    pass_no: int
    index: int  # the batch's position in the pass
    worker: int  # -1: the loader's thread; else the worker process's id
    t: float  # when the push completed
    produce_s: float  # generating and converting the batch
    put_wait_s: float  # blocked on a full queue
    size: int  # queue size after the push
    capacity: int
    nbytes: int
    shapes: Tuple[Tuple[int, ...], ...]  # one shape per feed variable
    cpu_s: Optional[float] = None  # CPU time the producer spent on it (thread or worker)


@dataclass
class ReaderPop:
    """The consumer took the batch at the head of the queue. Emitted on the consumer thread."""

    loader_id: int
    pass_no: int
    index: int
    t: float  # when the pop completed
    wait_s: float  # blocked on an empty queue
    size: int  # queue size before the pop (0: the consumer had to wait)
    capacity: int
    speed_test: bool  # peeked without popping (FLAGS_reader_queue_speed_test_mode), or handed
    # over from the batches measure_producer_alone took ahead (not waited for by this pop)
    copy_s: float = 0.0  # moving the batch to the place on the consumer (no double buffer)


@dataclass
class ReaderSolo:
    """A loader's producer thread timed while the consumer only waited for its batches
    (nothing else of the process ran): what its batches cost without a trainer beside it.
    Emitted on the consumer thread once the batches taken ahead are handed over (or the pass
    ends); `batches` 0: none was made alone."""

    loader_id: int
    pass_no: int
    t: float  # when the last of them arrived
    batches: int  # batches made while the consumer waited
    produce_s: float  # their producing time, summed
    cpu_s: Optional[float]  # their producer CPU time, summed (None: not measured)


@dataclass
class MemoryStepRecord:
    """A step's memory figures from the place's pool (bytes, seconds)."""

    executor_id: int
    program_id: int
    step: int
    place: str
    strategy: str
    capacity: int
    allocated: int  # at step end
    reserved: int
    step_peak: int  # highest `allocated` during the step
    peak_allocated: int  # since the pool was made
    peak_reserved: int
    phase_peaks: Dict[str, int]  # memory category of the ops -> highest allocated meanwhile
    requests: int  # pool requests during the step
    system_allocs: int  # underlying allocations during the step
    system_alloc_s: float
    by_tag: Dict[str, int]  # allocated per category at step end
    by_tag_at_peak: Dict[str, int]  # allocated per category at the pool's all-time peak
    cached_free: int
    fragmentation: float
    batch_size: Optional[int] = None
    gc: bool = True
    inplace: bool = False


@dataclass
class MemoryTrace:
    """One step of a plan, op by op: pool bytes before, highest during and after each op, and
    the sizes of the variables it wrote and freed, so other GC/inplace settings can be
    simulated. ops: [{index, type, tag, before, peak, after (the op's frees applied),
    outputs: {name: bytes the output holds of its own (0 for a view of an input or an
    inplace reuse)}, frees: [names], inplace: [outputs granted their input's buffer]}].
    Not emitted while per-op timing, FLAGS_check_nan_inf or batched GC is on."""

    program_id: int
    step: int
    batch_size: Optional[int]
    gc: bool
    inplace: bool
    persistable_bytes: int
    ops: List[dict]
    # temporary -> index of the last op needing its value (where GC=0 would free it)
    last_value_use: Dict[str, int]
    # op index -> [[output, input]] pairs an inplace-enabled plan may let share a buffer
    inplace_candidates: Dict[int, List[List[str]]]


@dataclass
class SchedStepRecord:
    """One step of a data-parallel CompiledProgram / ParallelExecutor (seconds, perf_counter
    clock). Emitted right before the step's step_end, only while subscribed.

    busy_s[i]: time worker thread i spent inside kernels (and gradient combining ops);
    ops_run: op instances run (all places); sched_s: time the threads spent in the scheduler
    itself (taking ready ops, releasing dependants) outside kernels; ready_max / ready_mean:
    the ops left waiting in the ready queue, sampled each time a thread took an op (0: none
    waited for a thread); concurrency: sum of op time / wall time (1.0 = one op at a time);
    combine_s: time in the gradient combining ops (all-reduce / reduce / broadcast);
    place_s[p]: from the step's start to the end of place p's last op (stragglers show
    here)."""

    executor_id: int
    program_id: int
    step: int
    num_places: int
    num_threads: int
    reduce_strategy: str  # "AllReduce" or "Reduce"
    wall_s: float
    busy_s: List[float]
    ops_run: int
    sched_s: float
    ready_max: int
    ready_mean: float
    concurrency: float
    combine_s: float
    place_s: List[float]
    num_iteration_per_drop_scope: int
    dropped: bool  # this step ended with a scope drop (its drop_scope event came before)
    fused: Dict[str, int] = None  # fusion pass -> ops it replaced (fuse_all_optimizer_ops...)


@dataclass
class DropScopeRecord:
    """The ParallelExecutor dropped its local scopes (every num_iteration_per_drop_scope
    steps): what they held and how long the drop (with its synchronisation) took."""

    executor_id: int
    program_id: int
    step: int
    t: float
    wall_s: float
    held_bytes: int  # bytes of the temporaries the local scopes still held
    variables: int  # variables dropped

