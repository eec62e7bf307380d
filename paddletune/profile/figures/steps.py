"""The summary's step figures: distributions, the breakdown and its shares, throughput, the
verdict, the programs, per-op times."""

from dataclasses import dataclass
from typing import ClassVar, Literal, Optional, Tuple

from ..schema import Count, Id, Number, Seconds, Share


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
      compute_wait_s  of compute_s, the training thread's time off its CPU: waiting for the
                 GIL (a producer thread running Python), a core or a lock
                 (records.Step.compute_wait_s). Not a part of the cycle of its own. None:
                 not measured on every steady step (profiles before it, a GPU place, the
                 ParallelExecutor, other frameworks)
      compute_queued_s  of compute_wait_s, the time runnable but waiting for a core
                 (records.Step.compute_queued_s); the rest was blocked. None: not measured
                 on every steady step
    """

    outside_s: Seconds = 0.0
    read_s: Seconds = 0.0
    feed_s: Seconds = 0.0
    compute_s: Seconds = 0.0
    fetch_s: Seconds = 0.0
    compute_wait_s: Optional[Seconds] = None
    compute_queued_s: Optional[Seconds] = None

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


def steps_per_s(steps: float, seconds: float) -> Optional[float]:
    """THE throughput: `steps` over the `seconds` they took, from the first one's start
    (its loop iteration: the gap before its run included) to the last one's end, the
    excluded spans (the speed test's ceiling window) left out. The report, the dashboard,
    `watch`, the advisors and the speed-test section all state this; None without time."""
    return steps / seconds if steps and seconds > 0 else None


def step_time_s(rate: Optional[float]) -> Optional[float]:
    """THE step time: the inverse of the throughput (the mean loop iteration, the cycle)."""
    return 1.0 / rate if rate else None


def input_share(outside_s: float, read_s: float, feed_s: float,
                cycle_s: float) -> Optional[float]:
    """THE input share: the time the device waits for the next batch (outside the runtime +
    waiting for a DataLoader inside the run + feeding) over the loop iteration."""
    return (outside_s + read_s + feed_s) / cycle_s if cycle_s > 0 else None


@dataclass(frozen=True)
class Throughput:
    """How fast the steady steps went (steps_per_s(): `steps` over `seconds`).

    Fields:
      steps_per_s           steps per second (steps / seconds; 1 / the mean cycle)
      batch_size            the median batch size (None: unknown)
      samples_per_s         samples per second (None without batch sizes): every batch a
                            step took (records.Step.sample_count)
      fetch_bytes_per_step  bytes fetched per step
      steps                 the steady steps measured
      seconds               the time they took (the sum of their loop iterations)
      spread                how much the speed moved over the run: the standard deviation of
                            the mean step time of SPREAD_PARTS consecutive parts of the steady
                            steps, over the mean (None: too few steps)
    """

    steps_per_s: Optional[Number] = None
    batch_size: Optional[Count] = None
    samples_per_s: Optional[Number] = None
    fetch_bytes_per_step: Number = 0.0
    steps: Count = 0
    seconds: Seconds = 0.0
    spread: Optional[Share] = None

    @property
    def step_time_s(self) -> Optional[float]:
        """The step time that goes with steps_per_s (its inverse)."""
        return step_time_s(self.steps_per_s)

    @property
    def batches_per_step(self) -> Optional[float]:
        """Samples a step over the median batch size: above 1 where a step takes several
        batches (gradient accumulation); None where unknown."""
        if not self.batch_size or not self.samples_per_s or not self.steps_per_s:
            return None
        return self.samples_per_s / self.steps_per_s / self.batch_size


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
class DeviceFigures:
    """The steady steps as the GPU ran them, timed with CUDA events (PyTorch on a GPU;
    records.DeviceTimeEvent): where the host's clock sees a step wait for its batch, the
    device may still be busy with the step before.

    Fields:
      place         the device
      scope         "steady": the steady steps' (from the first total past the warm-up);
                    "all": every timed step (no total fell inside the steady steps)
      steps         steps timed
      cycle_s       their mean device time, one step's end to the next's
      copied_steps  of them, those whose start was marked (the DataLoader's batch handed
                    over, or the first host-to-device copy): split into idle and busy
      idle_share    of those steps' device time, the GPU idle: from the previous step's end
                    until the step's start was marked (waiting for the host: the
                    DataLoader, the loop's Python)
      busy_s        the mean device time from a step's start mark to its end (kernels, and
                    the gaps between them the host left)
    """

    place: str
    scope: Literal["steady", "all"] = "steady"
    steps: Count = 0
    cycle_s: Optional[Seconds] = None
    copied_steps: Count = 0
    idle_share: Optional[Share] = None
    busy_s: Optional[Seconds] = None


@dataclass(frozen=True)
class EvalLoader:
    """One DataLoader's passes that ran between two training steps (evaluation).

    Fields:
      loader   its id
      name     its name
      passes   such passes
      batches  their batches
      total_s  their time, left out of the steps
      read_s   of it, the loop's waits for their batches
      workers  its worker processes (0: the loop makes its batches)
    """

    loader: Id
    name: Optional[str]
    passes: Count
    batches: Count
    total_s: Seconds
    read_s: Seconds
    workers: Count = 0

    @property
    def per_pass_s(self) -> float:
        return self.total_s / self.passes if self.passes else 0.0

    @property
    def wait_share(self) -> Optional[float]:
        """The waits' share of the passes' time (None: no time)."""
        return self.read_s / self.total_s if self.total_s > 0 else None


@dataclass(frozen=True)
class EvalFigures:
    """The DataLoader passes that began and ended between two training steps, no step
    ending while they ran: an evaluation or validation loop over its own DataLoader. Their
    time is left out of the steps (records.ReaderEnd.eval_s), so the steps' figures are the
    training's own; here is what they cost the run.

    Fields:
      passes    such passes, of every loader
      total_s   their time
      read_s    of it, the loop's waits for their batches
      share     their time's share of the run (the job's duration)
      loaders   each loader's
    """

    passes: Count
    total_s: Seconds
    read_s: Seconds
    share: Optional[Share] = None
    loaders: Tuple[EvalLoader, ...] = ()

    @property
    def wait_share(self) -> Optional[float]:
        return self.read_s / self.total_s if self.total_s > 0 else None


@dataclass(frozen=True)
class GcFigures:
    """Python's garbage collector on the training thread: its pauses of 5 ms or more
    (records.GcPauseEvent; PyTorch and Paddle 3 jobs).

    Fields:
      pauses       pauses inside the steady steps
      full         of them, full collections (generation 2)
      pause_s      their total time
      share        that over the steady steps' time
      max_s        the longest
      max_t_s      when it began
      run_pauses   pauses in the whole run (the setup and evaluation too)
      run_pause_s  their total time
      more         of them, pauses past the 2,000 recorded (counted, not placed in time)
      full_s       the full collections' time (of pause_s)
      heap_loop    the objects the collector tracked at the first step's end (the run's
                   first count): the heap the loop starts with (records.GcHeapEvent; None:
                   not counted)
      heap_last    at the latest count after it, after a full collection (None: none)
    """

    pauses: Count
    full: Count
    pause_s: Seconds
    share: Optional[Share]
    max_s: Optional[Seconds]
    max_t_s: Optional[Number]
    run_pauses: Count
    run_pause_s: Seconds
    more: Count = 0
    full_s: Seconds = 0.0
    heap_loop: Optional[Count] = None
    heap_last: Optional[Count] = None


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
      timing   "host", "cuda_event" or "cupti" (the last two: device time)
      by_type  op types by time, most first
      top      the 10 single ops that took most time
    """

    steps: Count
    total_s: Seconds
    timing: str = "host"
    by_type: Tuple[OpTypeFigures, ...] = ()
    top: Tuple[SingleOpFigures, ...] = ()
