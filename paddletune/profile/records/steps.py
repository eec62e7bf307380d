"""Steps and programs: one record per step recorded in full, the programs' ops and op times, and
the windows that aggregate a long job's later steps."""

from dataclasses import dataclass
from typing import ClassVar, Dict, Literal, NamedTuple, Optional, Tuple

from ..schema import EMPTY, Bytes, Count, Id, Names, Number, Scalar, Seconds, TimeS


class Step(NamedTuple):
    """One step: an Executor.run (a training step, or a startup program's run).

    The rarely changing fields (n_ops, fetch, feed, startup, place) are written only when
    they differ from the same executor and program's previous step; loading fills them in.

    Fields:
      t_s          when the run began
      program      the program's id
      executor     the executor's id
      step         the run's number for this executor and program, from 0
      wall_s       the run's time: read + feed + compute + fetch
      feed_s       converting and copying the feed to the device
      compute_s    running the ops (on a GPU: until the device finished)
      fetch_s      copying the fetched values back to the host
      gap_s        from the same executor's previous run's end to this run's start: the
                   loop's time outside the runtime (None for the first run)
      batch_size   samples in the batch (None: unknown)
      feed_bytes   bytes fed
      fetch_bytes  bytes fetched
      read_s       waiting inside the run for a non-iterable DataLoader's batch
      queue        the DataLoader queue's fill as the step's batch was taken
      n_ops        ops in the program
      fetch        the variables fetched
      feed         the variables fed
      startup      a startup program's run (it initialises persistables)
      place        the device ("CPUPlace", "CUDAPlace(0)")
      exemplar     "slow" (one of the slowest steps) or "sample" (a reservoir sample),
                   for a step of the aggregated tail written in full; None otherwise
      slot         a reservoir sample's slot: a later sample in the same slot replaces it
      compute_wait_s  of compute_s, the training thread's time off its CPU (compute_s less
                   its thread CPU time, time.thread_time): waiting for a core, or blocked
                   (the GIL while a producer thread runs Python, a lock). None: not
                   measured (profiles before it, a GPU place, the ParallelExecutor, other
                   frameworks)
      compute_queued_s  of compute_wait_s, the time runnable but waiting for a core (Linux's
                   run_delay, /proc/thread-self/schedstat); the rest was blocked. None: not
                   measured, or not readable there
      samples      the samples of all the step's batches, where it took several (gradient
                   accumulation: batch_size is its latest batch's); None: batch_size's
    """

    KIND = "step"
    t_s: TimeS
    program: Id
    executor: Id
    step: Count
    wall_s: Seconds
    feed_s: Seconds
    compute_s: Seconds
    fetch_s: Seconds
    gap_s: Optional[Seconds] = None
    batch_size: Optional[Count] = None
    feed_bytes: Bytes = 0
    fetch_bytes: Bytes = 0
    read_s: Seconds = 0.0
    queue: Optional[Count] = None
    n_ops: Optional[Count] = None
    fetch: Optional[Names] = None
    feed: Optional[Names] = None
    startup: Optional[bool] = None
    place: Optional[str] = None
    exemplar: Optional[Literal["slow", "sample"]] = None
    slot: Optional[Count] = None
    compute_wait_s: Optional[Seconds] = None
    compute_queued_s: Optional[Seconds] = None
    samples: Optional[Count] = None

    @property
    def sample_count(self) -> int:
        """The samples the step trained on (0: unknown)."""
        return self.samples if self.samples is not None else (self.batch_size or 0)

    @property
    def cycle_s(self) -> float:
        """What one loop iteration cost: the run and the time outside it before it."""
        return self.wall_s + (self.gap_s or 0.0)

    @property
    def end_s(self) -> float:
        return self.t_s + self.wall_s


STICKY = ("n_ops", "fetch", "feed", "startup", "place")


STICKY_START = {"n_ops": None, "fetch": (), "feed": (), "startup": False, "place": None}


@dataclass(frozen=True)
class ProgramOp:
    """One op of a compiled program.

    Fields:
      type     the op type ("mul", "softmax_with_cross_entropy")
      role     Paddle's op role bits (forward 0, backward 1, optimize 2, loss 256, ...)
      inputs   {slot: [variable names]}
      outputs  {slot: [variable names]}
      attrs    the few attributes advice reads (use_cudnn, global_pooling, pooling_type)
    """

    type: str
    role: Count = 0
    inputs: Dict[str, Names] = EMPTY
    outputs: Dict[str, Names] = EMPTY
    attrs: Dict[str, Scalar] = EMPTY


@dataclass(frozen=True)
class Program:
    """A program the job compiled, with its ops.

    Fields:
      t_s        when it was compiled
      program    its id
      compile_s  how long compiling took
      ops        its global block's ops, in order
    """

    KIND: ClassVar[str] = "program"
    t_s: TimeS
    program: Id
    compile_s: Seconds = 0.0
    ops: Tuple[ProgramOp, ...] = ()


class OpTime(NamedTuple):
    """One op's time in a step (written as a 4-item array).

    Fields:
      index  the op's position in the program (a ParallelExecutor's gradient-combining
             op, which the program does not have: that of the op it runs after)
      type   the op type
      t_s    when it began
      dur_s  how long it took
    """

    JSON_ARRAY = True
    index: Count
    type: str
    t_s: TimeS
    dur_s: Seconds


@dataclass(frozen=True)
class OpsRecord:
    """Every op's time in one step (--ops).

    Fields:
      program  the program's id
      step     the step's number
      timing   "host" (wall clock around each op), "cuda_event" (device time, CUDA events)
               or "cupti" (device time: the op's kernels, torch.profiler on a GPU)
      ops      the ops' times, in the order they ran
    """

    KIND: ClassVar[str] = "ops"
    program: Id
    step: Count
    timing: str = "host"
    ops: Tuple[OpTime, ...] = ()


class Sketch(NamedTuple):
    """A mergeable quantile sketch of positive values (written as a 3-item array): bucket
    i holds the values in (g^(i-1), g^i] with g = (1 + a) / (1 - a), a = sketch.ACCURACY,
    so every quantile comes back within a relative error of a.

    Fields:
      offset  the first bucket's index
      counts  values per bucket from `offset` on; a negative number -k skips k empty buckets
      zeros   values at or below sketch.MIN_VALUE
    """

    JSON_ARRAY = True
    offset: Id
    counts: Tuple[Id, ...]
    zeros: Count = 0


class Dist(NamedTuple):
    """One quantity's streaming figures over many steps (written as a 6-item array).

    Fields:
      n       values counted
      sum     their sum
      m2      their sum of squared deviations from the mean (Chan's merge)
      min     the smallest
      max     the largest
      sketch  their quantile sketch
    """

    JSON_ARRAY = True
    n: Count
    sum: Number
    m2: Number
    min: Number
    max: Number
    sketch: Sketch


class MemoryWindow(NamedTuple):
    """The memory probe's per-step figures aggregated over a window.

    Fields:
      n                  memory steps counted
      step_peak_bytes    the highest step peak
      phase_peaks        {category: the highest allocation while it ran}
      requests           pool requests
      system_allocs      underlying (system) allocations
      system_alloc_s     time in them
      batch_peaks        {batch size: the highest step peak seen at it}
      feed_peaks         {bytes fed: the highest step peak seen with it} (at most 64)
    """

    n: Count
    step_peak_bytes: Bytes
    phase_peaks: Dict[str, Bytes] = EMPTY
    requests: Count = 0
    system_allocs: Count = 0
    system_alloc_s: Seconds = 0.0
    batch_peaks: Dict[int, Bytes] = EMPTY
    feed_peaks: Dict[int, Bytes] = EMPTY


class SchedWindow(NamedTuple):
    """The ParallelExecutor's per-step figures aggregated over a window.

    Fields:
      n               steps counted
      wall_s          their total time
      busy_s          each thread's time in kernels
      ops             op instances run
      sched_s         the threads' time in the scheduler
      ready_mean_sum  the steps' mean ready-queue lengths, summed
      ready_max       the longest ready queue
      concurrency_sum  the steps' concurrency, summed
      combine_s       time in gradient combining ops
      spread_sum      the steps' straggler spread (place finish spread over the step), summed
      spread_n        steps with a spread
      places          places of the last step
      threads         threads of the last step
      reduce          reduce strategy of the last step
      drop_every      num_iteration_per_drop_scope of the last step
      fused           {fusion pass: ops replaced} of the last step
    """

    n: Count
    wall_s: Seconds
    busy_s: Tuple[Seconds, ...]
    ops: Count
    sched_s: Seconds
    ready_mean_sum: Number
    ready_max: Count
    concurrency_sum: Number
    combine_s: Seconds
    spread_sum: Number
    spread_n: Count
    places: Count
    threads: Count
    reduce: str
    drop_every: Count
    fused: Dict[str, Count] = EMPTY


class OpTotal(NamedTuple):
    """One op's total time over a window (written as a 4-item array).

    Fields:
      index    the op's position in the program
      type     the op type
      total_s  its time summed over the window's steps
      count    how many times it ran
    """

    JSON_ARRAY = True
    index: Count
    type: str
    total_s: Seconds
    count: Count


@dataclass(frozen=True)
class StepWindow:
    """A program's training steps over [t0_s, t_s), aggregated: written for the steps after
    the first `head_steps` of each program, once per window, instead of one record each.

    Fields:
      t0_s         the window's start
      t_s          its end
      program      the program's id
      n            steps aggregated
      samples      the samples they trained on summed (Step.sample_count)
      batch_sizes  {batch size: steps}
      parts        {part: Dist} for wall, cycle (wall + outside), feed, compute, fetch,
                   outside (the gap before the run), read, compute_wait and compute_queued
                   (over the steps that measured them: Step.compute_wait_s and
                   compute_queued_s; their n says how many)
      feed_bytes   bytes fed, summed
      fetch_bytes  bytes fetched, summed
      queue_first  the DataLoader queue's fill at the window's first step
      queue_last   and at its last
      memory       the memory probe's figures of these steps
      sched        the ParallelExecutor's figures of these steps
      ops          the ops' times of these steps (--ops)
      op_steps     steps whose op times were counted
      timing       how those op times were taken ("host", "cuda_event" or "cupti")
    """

    KIND: ClassVar[str] = "window"
    t0_s: TimeS
    t_s: TimeS
    program: Id
    n: Count
    samples: Count = 0
    batch_sizes: Dict[int, Count] = EMPTY
    parts: Dict[str, Dist] = EMPTY
    feed_bytes: Bytes = 0
    fetch_bytes: Bytes = 0
    queue_first: Optional[Count] = None
    queue_last: Optional[Count] = None
    memory: Optional[MemoryWindow] = None
    sched: Optional[SchedWindow] = None
    ops: Tuple[OpTotal, ...] = ()
    op_steps: Count = 0
    timing: Optional[str] = None
