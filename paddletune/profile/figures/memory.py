"""The summary's memory-pool figures: peaks against the capacity, by category and phase, where the
traced step peaked, the peak-against-batch model."""

from dataclasses import dataclass
from typing import Literal, Optional, Tuple

from ..records import MemoryOom
from ..schema import Bytes, Count, Id, Number, Seconds, Share


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
      alloc_retries             allocations retried after freeing the cache (PyTorch CUDA)
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
    alloc_retries: Count = 0
    batch_points: Tuple[Tuple[Count, Bytes], ...] = ()
    feed_points: Tuple[Tuple[Bytes, Bytes], ...] = ()
    at_step_peak: Optional[StepPeak] = None
    batch_model: Optional[ModelFigures] = None
    feed_model: Optional[ModelFigures] = None
    traced_programs: Tuple[Id, ...] = ()

    @property
    def caching_allocator(self) -> bool:
        """PyTorch's CUDA caching allocator (its strategy "caching (...)"): its cudaMalloc
        calls are counted, not timed, and its fragmentation is inactive split blocks."""
        return (self.strategy or "").startswith("caching")
