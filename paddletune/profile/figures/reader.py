"""The summary's DataLoader figures (queue, waits, producers, consumer, shapes, worker processes)
and the speed test's windows."""

import math
from dataclasses import dataclass
from typing import Dict, Literal, Optional, Tuple

from ..records import LoaderConfig
from ..schema import EMPTY, Bytes, Count, Id, Number, Seconds, Share, TimeS


@dataclass(frozen=True)
class WaitFigures:
    """The loop's waits for a loader's batches.

    Fields:
      mean_s      mean wait per pop
      p50_s       median wait per pop (from the log histogram: the wait for the batch to be
                  made, its hand-over from a worker left out where measured)
      p90_s       90th percentile
      max_s       the longest
      total_s     all of them
      per_step_s  per training step (the pops paired with each step)
      share       of the loop's time (per step / cycle, else total / span)
      waited_pops  pops that waited at least 1 ms (reader_figures.LONG_WAIT_S), the
                   measured hand-over left out: for the batch due (PyTorch delivers batches
                   in order, so even where the queue held later ones), or for the rest of
                   its transfer (with the batch due queued: its unpickling, the loop's thread
                   off its core)
    """

    mean_s: Optional[Seconds] = None
    p50_s: Optional[Seconds] = None
    p90_s: Optional[Seconds] = None
    max_s: Seconds = 0.0
    total_s: Seconds = 0.0
    per_step_s: Optional[Seconds] = None
    share: Optional[Share] = None
    waited_pops: Optional[Count] = None


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
class PassStarts:
    """Each pass's start-up: how long the loop's iter() took before the pass's first batch
    request (records.ReaderStart.startup_s), the framework starting the pass's worker
    processes or waking persistent ones; where the workers start inside that first request
    (PyTorch's spawn and forkserver workers: records.ReaderStart.first_wait_s), also the
    wait for the first batch beyond the mean wait of the pass's other batches. The first
    pass always starts them.

    Fields:
      first_s  the first pass's
      later_s  the later passes' mean (None: one pass measured)
      later    the later passes measured
      pass_s   the later passes' mean time from iter() to their end (None: none ended)
      in_first_batch  the start-up holds the first batch's wait beyond the others' (the
               workers started inside the first request)
    """

    first_s: Optional[Seconds]
    later_s: Optional[Seconds] = None
    later: Count = 0
    pass_s: Optional[Seconds] = None
    in_first_batch: bool = False


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
      handover_s_per_pop  of the wait per batch, taking it from a worker process once made
                      (PyTorch's storage hand-over; None: not measured)
      shapes          {feed variable: its shapes}
      long_batches    steps on the largest batches against the rest
      processes       its worker processes' memory and CPU
      pass_starts     its passes' start-up: the loop's iter() before each first batch (and
                      the first batch's wait where the workers start in it)
      evaluation      every pass of it ran between training steps (records.ReaderEnd's
                      eval_s): an evaluation loop's, never the main loader while another ran
      cycle_s         where another training loader fed some of the steady steps (an epoch
                      on another dataset): the mean cycle of the steps inside its intervals,
                      which its wait share and consumer figures are of; None: the main
                      program's steady mean
      steps_share     then, those steps' share of the steady steps' time
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
    handover_s_per_pop: Optional[Seconds] = None
    shapes: Dict[str, ShapeFigures] = EMPTY
    long_batches: Optional[LongBatches] = None
    processes: Optional[ProcessFigures] = None
    pass_starts: Optional[PassStarts] = None
    evaluation: bool = False
    cycle_s: Optional[Seconds] = None
    steps_share: Optional[Share] = None

    @property
    def producer_ratio(self) -> Optional[float]:
        """The producers' batches per second over those the consumer takes when it does not
        wait (below 1: they cannot keep the queue filled); None where either rate is unknown,
        zero or unbounded."""
        made, taken = self.producer.rate_per_s, self.consumer.rate_per_s
        if made is None or taken is None or not (0 < made < math.inf and 0 < taken < math.inf):
            return None
        return made / taken


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
      main     the training loop's: the loader that delivered the most batches, of those
               not only evaluating (LoaderFigures.evaluation) where any other ran; or
               another whose waits held the steps back far more (reader_figures.py)
      errors   failed passes
    """

    loaders: Tuple[LoaderFigures, ...]
    main: Optional[Id] = None
    errors: Tuple[LoaderError, ...] = ()

    @property
    def main_loader(self) -> Optional[LoaderFigures]:
        """The main loader's figures (the training loop's), None without loaders."""
        return self.of(self.main) or (self.loaders[0] if self.loaders else None)

    def of(self, loader: Optional[int]) -> Optional[LoaderFigures]:
        """The figures of the loader `loader` (its id), None if it has none."""
        return next((f for f in self.loaders if f.loader == loader), None)


@dataclass(frozen=True)
class WindowRate:
    """One speed-test window's throughput.

    Fields:
      steps          steps in it
      cycle_s        their mean cycle
      steps_per_s    steps per second
      samples_per_s  samples per second (None without batch sizes)
      cpu_s_per_step  the process's CPU time (all its threads) per step over the window
                      (None: not measured); it also counts a producer thread filling the
                      queue that the ceiling window only peeks at
      thread_cpu_s_per_step  the training thread's CPU time per step over the window (None:
                      not measured): with one math thread, the trainer's own work
    """

    steps: Count
    cycle_s: Seconds
    steps_per_s: Number
    samples_per_s: Optional[Number] = None
    cpu_s_per_step: Optional[Seconds] = None
    thread_cpu_s_per_step: Optional[Seconds] = None


@dataclass(frozen=True)
class ProducerAlone:
    """A DataLoader's producer thread timed alone at the speed test's end (the training loop
    only waiting for its batches).

    Fields:
      loader           the loader's id
      batches          batches timed
      s_per_batch      its time per batch
      cpu_s_per_batch  its CPU time per batch (None: not measured)
    """

    loader: Id
    batches: Count
    s_per_batch: Seconds
    cpu_s_per_batch: Optional[Seconds] = None


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
      producers_alone  each producer thread timed alone after the ceiling window
      one_thread    the ceiling again with one math thread, after the solo phase (None:
                    not run: one thread already, or a framework whose threads cannot be
                    set)
    """

    window_steps: Optional[Count] = None
    has_loader: bool = False
    reached: Optional[str] = None
    complete: bool = False
    baseline: Optional[WindowRate] = None
    ceiling: Optional[WindowRate] = None
    ratio: Optional[Number] = None
    data_share: Optional[Number] = None
    producers_alone: Tuple[ProducerAlone, ...] = ()
    one_thread: Optional[WindowRate] = None

    def alone(self, loader) -> Optional[ProducerAlone]:
        """Loader `loader`'s producer thread timed alone (the last timing), None if not."""
        return next((a for a in reversed(self.producers_alone) if a.loader == loader), None)
