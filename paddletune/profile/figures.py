"""The summary: every figure the report, the advisors, the dashboard and the tuner read, as
typed classes. It is computed from the records (paddletune/profile/summarize.py), online by
the writer as the job runs and again on load for a profile cut short, and written as the
profile's last record.

Definitions (all per training step of the main program: the non-startup program that ran the
most steps; warm-up steps and the speed test's ceiling window excluded):
  wall     one run: read + feed + compute + fetch
  outside  the gap between the previous run's end and this run's start: data preparation in
           a synchronous loop, waiting for an iterable DataLoader's batch, logging, Python
  cycle    wall + outside: what one iteration of the training loop costs
  input    outside + read + feed: time the device waits for the next batch (TensorFlow
           Profiler's "input")
"""

from dataclasses import dataclass
from typing import ClassVar, Dict, Literal, Optional, Tuple

from .records import LoaderConfig, MemoryOom
from .schema import EMPTY, Bytes, Count, Id, Number, Seconds, Share, TimeS

VerdictKind = Literal["compute-bound", "moderately-input-bound", "highly-input-bound",
                      "too-few-steps"]


@dataclass(frozen=True)
class Distribution:
    """A quantity's distribution over the steady steps (exact over the steps recorded in
    full; within sketch.ACCURACY over aggregated ones).

    Fields:
      mean  the mean
      p50   the median
      p90   the 90th percentile
      p99   the 99th percentile
      min   the smallest
      max   the largest
      cv    the coefficient of variation (standard deviation / mean)
      n     values
    """

    mean: Number
    p50: Number
    p90: Number
    p99: Number
    min: Number
    max: Number
    cv: Number
    n: Count


@dataclass(frozen=True)
class Breakdown:
    """Mean seconds per steady step in each part of the loop.

    Fields:
      outside_s  outside the runtime (the loop's own time, a synchronous loop's data)
      read_s     waiting inside the run for a non-iterable DataLoader's batch
      feed_s     feeding (converting and copying the batch to the device)
      compute_s  computing
      fetch_s    fetching results back to the host
    """

    outside_s: Seconds = 0.0
    read_s: Seconds = 0.0
    feed_s: Seconds = 0.0
    compute_s: Seconds = 0.0
    fetch_s: Seconds = 0.0

    PARTS: ClassVar[Tuple[str, ...]] = ("outside", "read", "feed", "compute", "fetch")

    def part(self, name: str) -> float:
        return getattr(self, f"{name}_s")


@dataclass(frozen=True)
class Shares:
    """Each part's share of the mean loop iteration.

    Fields:
      outside  outside the runtime
      read     waiting for a DataLoader inside the run
      feed     feeding
      compute  computing
      fetch    fetching
    """

    outside: Share = 0.0
    read: Share = 0.0
    feed: Share = 0.0
    compute: Share = 0.0
    fetch: Share = 0.0

    def part(self, name: str) -> float:
        return getattr(self, name)


@dataclass(frozen=True)
class Throughput:
    """How fast the steady steps went.

    Fields:
      steps_per_s           steps per second (1 / the mean cycle)
      batch_size            the median batch size (None: unknown)
      samples_per_s         samples per second (None without batch sizes)
      fetch_bytes_per_step  bytes fetched per step
    """

    steps_per_s: Optional[Number] = None
    batch_size: Optional[Count] = None
    samples_per_s: Optional[Number] = None
    fetch_bytes_per_step: Number = 0.0


@dataclass(frozen=True)
class Verdict:
    """Input-bound or compute-bound, with the numbers (TensorFlow Profiler's classes).

    Fields:
      kind         compute-bound | moderately-input-bound | highly-input-bound |
                   too-few-steps
      input_share  the input's share of the step
      text         the verdict in one sentence
    """

    kind: VerdictKind
    input_share: Optional[Share] = None
    text: str = ""


@dataclass(frozen=True)
class ProgramSteps:
    """How often one program ran.

    Fields:
      program  its id
      startup  a startup program
      steps    its runs
    """

    program: Id
    startup: bool
    steps: Count


# --- reader --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class WaitFigures:
    """The loop's waits for a loader's batches.

    Fields:
      mean_s      mean wait per pop
      p50_s       median wait per pop (from the log histogram)
      p90_s       90th percentile
      max_s       the longest
      total_s     all of them
      per_step_s  per training step (the pops paired with each step)
      share       of the loop's time (per step / cycle, else total / span)
    """

    mean_s: Optional[Seconds] = None
    p50_s: Optional[Seconds] = None
    p90_s: Optional[Seconds] = None
    max_s: Seconds = 0.0
    total_s: Seconds = 0.0
    per_step_s: Optional[Seconds] = None
    share: Optional[Share] = None


@dataclass(frozen=True)
class Occupancy:
    """The queue's fill.

    Fields:
      mean         mean batches queued
      min          fewest
      max          most
      capacity     the queue's capacity
      full_share   share of the samples with the queue full
      empty_share  share with it empty
      n            samples
      source       "samples" (the 10 ms sampler, time-weighted) or "pops" (the size each
                   pop saw)
    """

    mean: Number
    min: Count
    max: Count
    capacity: Optional[Count]
    full_share: Share
    empty_share: Share
    n: Count
    source: Literal["samples", "pops"]


@dataclass(frozen=True)
class ProducerFigures:
    """The loader's producers.

    Fields:
      producers        the thread or worker processes
      s_per_batch      one producer's time per batch
      cpu_s_per_batch  its CPU time per batch
      cpu_share        CPU time / time (a thread computing most of its time holds the GIL)
      rate_per_s       batches per second all producers make
      put_wait_share   share of the time producers were blocked on a full queue
    """

    producers: Count
    s_per_batch: Optional[Seconds] = None
    cpu_s_per_batch: Optional[Seconds] = None
    cpu_share: Optional[Share] = None
    rate_per_s: Optional[Number] = None
    put_wait_share: Optional[Share] = None


@dataclass(frozen=True)
class WorkerFigures:
    """One producer's batches.

    Fields:
      worker           its index (-1: the loader's thread)
      batches          batches it made
      s_per_batch      its time per batch
      cpu_s_per_batch  its CPU time per batch
    """

    worker: Id
    batches: Count
    s_per_batch: Optional[Seconds] = None
    cpu_s_per_batch: Optional[Seconds] = None


@dataclass(frozen=True)
class ConsumerFigures:
    """The training loop as the loader's consumer.

    Fields:
      s_per_batch       the loop's time per batch when not waiting for one
      rate_per_s        batches per second it could take if data were free
      actual_per_s      batches per second it took
      batches_per_step  batches per training step
    """

    s_per_batch: Optional[Seconds] = None
    rate_per_s: Optional[Number] = None
    actual_per_s: Optional[Number] = None
    batches_per_step: Optional[Number] = None


@dataclass(frozen=True)
class DimFigures:
    """A feed dimension that varies from batch to batch.

    Fields:
      dim  its position
      min  the smallest size
      p50  the median
      p95  the 95th percentile
      max  the largest
    """

    dim: Count
    min: Count
    p50: Count
    p95: Count
    max: Count


@dataclass(frozen=True)
class ShapeFigures:
    """The shapes one feed variable's batches had.

    Fields:
      batches      batches counted
      rank_varies  the number of dimensions varies
      shape        the most common shape, None where a dimension varies
      varying      the varying dimensions
    """

    batches: Count
    rank_varies: bool
    shape: Tuple[Optional[Count], ...] = ()
    varying: Tuple[DimFigures, ...] = ()


@dataclass(frozen=True)
class LongBatches:
    """Steps on batches larger than the 95th percentile against the rest.

    Fields:
      steps               steps counted
      p95_elements        the 95th percentile batch size in elements
      max_elements        the largest
      long_steps          steps on larger batches
      long_compute_s      their mean compute time
      typical_compute_s   the others' mean compute time
      slowdown            long / typical
      long_share          the long steps' share of all compute time
    """

    steps: Count
    p95_elements: Count
    max_elements: Count
    long_steps: Count
    long_compute_s: Seconds
    typical_compute_s: Seconds
    slowdown: Optional[Number] = None
    long_share: Optional[Share] = None


@dataclass(frozen=True)
class Growth:
    """A growth over the workers.

    Fields:
      mean  their mean
      max   the largest
    """

    mean: Number
    max: Number


@dataclass(frozen=True)
class WorkerProcess:
    """One worker index's memory and CPU over its passes.

    Fields:
      worker            its index
      uss_growth_bytes  the largest private-memory growth in a pass
      uss_max_bytes     its largest private memory
      cores             the cores it kept busy (mean over passes)
    """

    worker: Id
    uss_growth_bytes: Number
    uss_max_bytes: Bytes
    cores: Optional[Number] = None


@dataclass(frozen=True)
class ProcessFigures:
    """A loader's worker processes.

    Fields:
      workers           worker indices seen
      uss_growth_bytes  their private-memory growth (copy-on-read)
      uss_max_bytes     the largest private memory
      cores             cores they kept busy, summed
      per_worker        each worker
    """

    workers: Count
    uss_growth_bytes: Growth
    uss_max_bytes: Bytes
    cores: Optional[Number] = None
    per_worker: Tuple[WorkerProcess, ...] = ()


@dataclass(frozen=True)
class LoaderFigures:
    """One DataLoader's queue, waits, producers and consumer over the steady steps.

    Fields:
      loader          its id
      name            its name
      config          its settings
      passes          passes it ran
      scope           "steady" (the intervals of the steady steps) or "all"
      span_s          the time its intervals cover
      batches         batches the loop took
      pushes          batches pushed
      peeks           batches peeked at (speed test)
      empty_pops      pops that found the queue empty
      empty_ratio     their share of the pops
      wait            the loop's waits
      occupancy       the queue's fill
      timeline        [[t_s, mean fill]] over time (at most 48 points)
      producer        the producers
      workers         each producer
      consumer        the loop as consumer
      swings          drains from full to empty
      oscillating     it swung at least 3 times
      copy_s_per_pop  host-to-device copy on the loop's thread per batch
      shapes          {feed variable: its shapes}
      long_batches    steps on the largest batches against the rest
      processes       its worker processes' memory and CPU
    """

    loader: Id
    name: Optional[str]
    config: LoaderConfig
    passes: Count
    scope: Literal["steady", "all"]
    span_s: Seconds
    batches: Count
    pushes: Count
    peeks: Count
    empty_pops: Count
    empty_ratio: Optional[Share]
    wait: WaitFigures
    occupancy: Optional[Occupancy]
    timeline: Tuple[Tuple[TimeS, Number], ...]
    producer: ProducerFigures
    workers: Tuple[WorkerFigures, ...]
    consumer: ConsumerFigures
    swings: Count
    oscillating: bool
    copy_s_per_pop: Optional[Seconds] = None
    shapes: Dict[str, ShapeFigures] = EMPTY
    long_batches: Optional[LongBatches] = None
    processes: Optional[ProcessFigures] = None


@dataclass(frozen=True)
class LoaderError:
    """A DataLoader pass that failed.

    Fields:
      loader  its id
      detail  what happened
    """

    loader: Id
    detail: str = ""


@dataclass(frozen=True)
class ReaderFigures:
    """Every DataLoader of the job.

    Fields:
      loaders  each loader's figures
      main     the loader that delivered the most batches
      errors   failed passes
    """

    loaders: Tuple[LoaderFigures, ...]
    main: Optional[Id] = None
    errors: Tuple[LoaderError, ...] = ()

    @property
    def main_loader(self) -> Optional[LoaderFigures]:
        """The main loader's figures (the training loop's), None without loaders."""
        return next((f for f in self.loaders if f.loader == self.main),
                    self.loaders[0] if self.loaders else None)


# --- speed test ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class WindowRate:
    """One speed-test window's throughput.

    Fields:
      steps          steps in it
      cycle_s        their mean cycle
      steps_per_s    steps per second
      samples_per_s  samples per second (None without batch sizes)
    """

    steps: Count
    cycle_s: Seconds
    steps_per_s: Number
    samples_per_s: Optional[Number] = None


@dataclass(frozen=True)
class SpeedTestFigures:
    """--speed-test: the baseline window against the no-data ceiling.

    Fields:
      window_steps  steps per window asked for
      has_loader    a DataLoader ran (the ceiling needs one)
      reached       the last phase reached: baseline | ceiling | done
      complete      the ceiling window ran all its steps
      baseline      the baseline window
      ceiling       the ceiling window
      ratio         ceiling / baseline steps per second
      data_share    1 - baseline / ceiling: what data costs of the throughput
    """

    window_steps: Optional[Count] = None
    has_loader: bool = False
    reached: Optional[str] = None
    complete: bool = False
    baseline: Optional[WindowRate] = None
    ceiling: Optional[WindowRate] = None
    ratio: Optional[Number] = None
    data_share: Optional[Number] = None


# --- memory --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PhasePeaks:
    """The highest allocation while each phase's ops ran.

    Fields:
      forward_bytes    activations
      backward_bytes   gradients
      optimizer_bytes  the optimizer's temporaries
    """

    forward_bytes: Optional[Bytes] = None
    backward_bytes: Optional[Bytes] = None
    optimizer_bytes: Optional[Bytes] = None


@dataclass(frozen=True)
class PeakOp:
    """The op at which a replayed step peaked.

    Fields:
      index  its position
      type   its type
    """

    index: Count
    type: str


@dataclass(frozen=True)
class StepPeak:
    """Where the traced step of the main program peaked.

    Fields:
      program       the program
      step          the traced step
      op            the op at the peak
      largest_live  [[temporary, bytes]] the largest live at the peak
    """

    program: Id
    step: Count
    op: Optional[PeakOp] = None
    largest_live: Tuple[Tuple[str, Bytes], ...] = ()


@dataclass(frozen=True)
class ModelFigures:
    """Peak memory as max(floor, fixed + per_unit x), fitted to the measured peaks.

    Fields:
      fixed_bytes               what does not grow with x
      per_unit_bytes            what each unit (sample, byte fed) adds
      unit                      "sample" or "feed byte"
      floor_bytes               the lowest measured peak
      how                       "fit" (least squares) or "one point" (fixed part given)
      points                    [[x, peak bytes]] measured
      max_error                 the largest relative miss on its own points
      headroom                  share of the capacity a recommended x leaves free
      largest_batch             the largest x leaving the headroom free
      largest_batch_peak_bytes  its predicted peak
    """

    fixed_bytes: Number
    per_unit_bytes: Number
    unit: str
    floor_bytes: Number
    how: str
    points: Tuple[Tuple[Number, Number], ...]
    max_error: Number
    headroom: Optional[Share] = None
    largest_batch: Optional[Count] = None
    largest_batch_peak_bytes: Optional[Number] = None


@dataclass(frozen=True)
class ByCategory:
    """Bytes allocated per category at the pool's peak.

    Fields:
      parameters       the model's weights
      optimizer_state  the optimizer's accumulators
      activations      forward temporaries
      gradients        backward temporaries
      optimizer        the update's temporaries
      reader           batches the reader holds
      other            the rest
    """

    parameters: Bytes = 0
    optimizer_state: Bytes = 0
    activations: Bytes = 0
    gradients: Bytes = 0
    optimizer: Bytes = 0
    reader: Bytes = 0
    other: Bytes = 0


@dataclass(frozen=True)
class MemoryFigures:
    """The memory pool's figures.

    Fields:
      place                     the device
      strategy                  FLAGS_allocator_strategy
      capacity_bytes            the pool's capacity
      peak_allocated_bytes      its allocated peak
      peak_reserved_bytes       its reserved peak
      peak_allocated_share      of the capacity
      peak_reserved_share       of the capacity
      reserved_per_allocated    reserved / allocated at the peaks
      by_category_at_peak       bytes per category at the peak
      phase_peaks               the highest allocation per phase
      step_peak_bytes           the highest step peak of the steady steps
      scope                     "steady" or "all" (too few steady memory records)
      steps                     memory steps counted
      system_allocs_per_step    underlying allocations per steady step
      system_alloc_s_per_step   time in them per step
      system_alloc_share        their share of the step
      requests_per_step         pool requests per step
      fragmentation             1 - largest free block / cached free bytes
      cached_free_bytes         freed blocks kept
      gc                        garbage collection on
      inplace                   inplace reuse on
      oom                       the last out-of-memory error (its record)
      ooms                      out-of-memory errors
      batch_points              [[batch size, highest step peak]]
      feed_points               [[bytes fed, highest step peak]] (at most 64)
      at_step_peak              where the traced step peaked
      batch_model               the peak against the batch size
      feed_model                the peak against the bytes fed
      traced_programs           programs traced op by op
    """

    place: Optional[str] = None
    strategy: Optional[str] = None
    capacity_bytes: Optional[Bytes] = None
    peak_allocated_bytes: Optional[Bytes] = None
    peak_reserved_bytes: Optional[Bytes] = None
    peak_allocated_share: Optional[Share] = None
    peak_reserved_share: Optional[Share] = None
    reserved_per_allocated: Optional[Number] = None
    by_category_at_peak: ByCategory = ByCategory()
    phase_peaks: PhasePeaks = PhasePeaks()
    step_peak_bytes: Optional[Bytes] = None
    scope: Literal["steady", "all"] = "all"
    steps: Count = 0
    system_allocs_per_step: Optional[Number] = None
    system_alloc_s_per_step: Optional[Seconds] = None
    system_alloc_share: Optional[Share] = None
    requests_per_step: Optional[Number] = None
    fragmentation: Optional[Share] = None
    cached_free_bytes: Optional[Bytes] = None
    gc: Optional[bool] = None
    inplace: Optional[bool] = None
    oom: Optional[MemoryOom] = None
    ooms: Count = 0
    batch_points: Tuple[Tuple[Count, Bytes], ...] = ()
    feed_points: Tuple[Tuple[Bytes, Bytes], ...] = ()
    at_step_peak: Optional[StepPeak] = None
    batch_model: Optional[ModelFigures] = None
    feed_model: Optional[ModelFigures] = None
    traced_programs: Tuple[Id, ...] = ()


# --- ParallelExecutor ----------------------------------------------------------------------------
@dataclass(frozen=True)
class DropFigures:
    """The ParallelExecutor's local-scope drops.

    Fields:
      every           num_iteration_per_drop_scope
      count           drops
      wall_s_mean     a drop's mean time
      share           drops' time / all training steps' time
      held_bytes_max  the most bytes a drop freed
      variables_max   the most variables a drop freed
    """

    every: Optional[Count] = None
    count: Count = 0
    wall_s_mean: Optional[Seconds] = None
    share: Optional[Share] = None
    held_bytes_max: Optional[Bytes] = None
    variables_max: Optional[Count] = None


@dataclass(frozen=True)
class ParallelFigures:
    """The ParallelExecutor's scheduling over the steady steps.

    Fields:
      places            places
      threads           worker threads
      reduce            AllReduce or Reduce
      steps             steps counted
      scope             "steady" or "all"
      wall_s            mean step time
      thread_busy       each thread's busy share
      thread_busy_mean  the threads' mean busy share
      concurrency       mean op concurrency
      ops_per_step      op instances per step
      sched_s_per_op    the scheduler's cost per op
      sched_share       the scheduler's share of the step
      ready_mean        mean ready-queue length
      ready_max         the longest ready queue
      combine_s         gradient combining per step
      combine_share     its share of the step
      straggler_share   mean spread of the places' finishing times over the step
      fused             {fusion pass: ops replaced}
      drop              the local-scope drops
    """

    places: Count
    threads: Count
    reduce: str
    steps: Count
    scope: Literal["steady", "all"]
    wall_s: Seconds
    thread_busy: Tuple[Optional[Share], ...]
    thread_busy_mean: Optional[Share]
    concurrency: Number
    ops_per_step: Number
    sched_s_per_op: Optional[Seconds]
    sched_share: Optional[Share]
    ready_mean: Number
    ready_max: Count
    combine_s: Seconds
    combine_share: Optional[Share]
    straggler_share: Optional[Share]
    fused: Dict[str, Count] = EMPTY
    drop: DropFigures = DropFigures()


# --- ops, samples, overhead, exit ----------------------------------------------------------------
@dataclass(frozen=True)
class OpTypeFigures:
    """One op type's time over the steady steps.

    Fields:
      type     the op type
      total_s  its time
      count    its runs
      mean_s   per run
      share    of all op time
    """

    type: str
    total_s: Seconds
    count: Count
    mean_s: Seconds
    share: Share


@dataclass(frozen=True)
class SingleOpFigures:
    """One op's time over the steady steps.

    Fields:
      index    its position in the program
      type     its type
      total_s  its time
      count    its runs
      mean_s   per run
      share    of all op time
    """

    index: Count
    type: str
    total_s: Seconds
    count: Count
    mean_s: Seconds
    share: Share


@dataclass(frozen=True)
class OpFigures:
    """Per-op timing of the steady steps (--ops).

    Fields:
      steps    steps with op times
      total_s  all op time
      timing   "host" or "cuda_event" (device time)
      by_type  op types by time, most first
      top      the 10 single ops that took most time
    """

    steps: Count
    total_s: Seconds
    timing: str = "host"
    by_type: Tuple[OpTypeFigures, ...] = ()
    top: Tuple[SingleOpFigures, ...] = ()


@dataclass(frozen=True)
class SampleStats:
    """One sampled field over the run.

    Fields:
      mean  the mean
      min   the smallest
      max   the largest
      last  the last value
      n     samples with a value
    """

    mean: Number
    min: Number
    max: Number
    last: Number
    n: Count


@dataclass(frozen=True)
class SystemFigures:
    """The system probe's samples over the run (each None when never sampled).

    Fields:
      cpu_percent            the process's CPU (100 = one core)
      cpu_total_percent      the machine's busy share
      rss_bytes              the process's resident memory
      threads                the job's threads
      ctx_switches_per_s     context switches per second
      ctx_involuntary_per_s  involuntary ones
      load1                  the 1-minute load
      steal_percent          time the hypervisor took
      iowait_percent         time waiting for I/O
      mem_available_bytes    the machine's available memory
      blas_threads           NumPy's BLAS threads
    """

    cpu_percent: Optional[SampleStats] = None
    cpu_total_percent: Optional[SampleStats] = None
    rss_bytes: Optional[SampleStats] = None
    threads: Optional[SampleStats] = None
    ctx_switches_per_s: Optional[SampleStats] = None
    ctx_involuntary_per_s: Optional[SampleStats] = None
    load1: Optional[SampleStats] = None
    steal_percent: Optional[SampleStats] = None
    iowait_percent: Optional[SampleStats] = None
    mem_available_bytes: Optional[SampleStats] = None
    blas_threads: Optional[SampleStats] = None


@dataclass(frozen=True)
class GpuFigures:
    """One GPU's NVML samples over the run.

    Fields:
      gpu               NVML's index
      util_percent      kernel-busy share
      mem_util_percent  memory-busy share
      mem_used_bytes    device memory in use
      mem_total_bytes   device memory
      proc_mem_bytes    this process's device memory
      sm_clock_mhz      the SM clock
      mem_clock_mhz     the memory clock
      power_w           power draw
      power_limit_w     the power limit
      temperature_c     temperature
      throttle          {reason: share of samples with it} (None: not reported)
    """

    gpu: Id
    util_percent: Optional[SampleStats] = None
    mem_util_percent: Optional[SampleStats] = None
    mem_used_bytes: Optional[SampleStats] = None
    mem_total_bytes: Optional[SampleStats] = None
    proc_mem_bytes: Optional[SampleStats] = None
    sm_clock_mhz: Optional[SampleStats] = None
    mem_clock_mhz: Optional[SampleStats] = None
    power_w: Optional[SampleStats] = None
    power_limit_w: Optional[SampleStats] = None
    temperature_c: Optional[SampleStats] = None
    throttle: Optional[Dict[str, Share]] = None


@dataclass(frozen=True)
class ProbeOverhead:
    """A probe's measured cost.

    Fields:
      overhead_s  its own time
      share       of the time the job ran steps (None: no steps)
      in_step     spent inside the training loop
    """

    overhead_s: Seconds
    share: Optional[Number] = None
    in_step: bool = False


@dataclass(frozen=True)
class ExitFigures:
    """How the job ended.

    Fields:
      status   the exit status (None: no exit record: killed)
      reason   returned | exit | exception | interrupted | terminated | step_limit |
               unknown
      message  in words
    """

    status: Optional[Id] = None
    reason: str = "unknown"
    message: Optional[str] = None


@dataclass(frozen=True)
class Summary:
    """Every figure computed from the records: the profile's last record.

    Fields:
      n_steps                    training steps of the main program
      main_program               the main program's id
      warmup_steps               warm-up steps excluded
      steady_steps               steady steps the figures cover
      aggregated_steps           of the steady steps, those recorded in windows
      speed_test_steps_excluded  steps of the speed test's ceiling window excluded
      programs                   every program and its runs
      duration_s                 how long the job ran
      step_s                     the run's time (Executor.run)
      cycle_s                    the loop iteration's time
      breakdown_s                mean seconds per step in each part
      shares                     each part's share of the cycle
      input_share                outside + read + feed over the cycle
      throughput                 steps and samples per second
      verdict                    input- or compute-bound
      reader                     the DataLoaders
      speed_test                 --speed-test's windows
      memory                     the memory pool
      parallel                   the ParallelExecutor
      ops                        per-op timing (--ops)
      system                     the system probe's samples
      gpus                       each GPU's samples
      overhead                   {probe: its cost}
      exit                       how the job ended
    """

    KIND: ClassVar[str] = "summary"
    n_steps: Count = 0
    main_program: Optional[Id] = None
    warmup_steps: Count = 0
    steady_steps: Count = 0
    aggregated_steps: Count = 0
    speed_test_steps_excluded: Count = 0
    programs: Tuple[ProgramSteps, ...] = ()
    duration_s: Seconds = 0.0
    step_s: Optional[Distribution] = None
    cycle_s: Optional[Distribution] = None
    breakdown_s: Optional[Breakdown] = None
    shares: Optional[Shares] = None
    input_share: Optional[Share] = None
    throughput: Optional[Throughput] = None
    verdict: Verdict = Verdict("too-few-steps", None, "Too few steps to tell.")
    reader: Optional[ReaderFigures] = None
    speed_test: Optional[SpeedTestFigures] = None
    memory: Optional[MemoryFigures] = None
    parallel: Optional[ParallelFigures] = None
    ops: Optional[OpFigures] = None
    system: Optional[SystemFigures] = None
    gpus: Tuple[GpuFigures, ...] = ()
    overhead: Dict[str, ProbeOverhead] = EMPTY
    exit: ExitFigures = ExitFigures()

    @property
    def main_loader(self) -> Optional[LoaderFigures]:
        """The figures of the DataLoader that delivered the most batches, None without one."""
        loaders = [f for f in (self.reader.loaders if self.reader else ()) if f.batches]
        return max(loaders, key=lambda f: f.batches) if loaders else None
