"""The memory probe's records: the pool per training step, its peaks, a traced step, out-of-memory
details, and its state at the end."""

from dataclasses import dataclass
from typing import ClassVar, Dict, NamedTuple, Optional, Tuple

from ..schema import EMPTY, Bytes, Count, Id, Names, Seconds, Share, TimeS


class MemoryStep(NamedTuple):
    """A training step's memory-pool figures.

    Fields:
      t_s              when the step began
      program          the program's id
      step             the step's number
      allocated_bytes  allocated at the step's end
      reserved_bytes   reserved from the system at its end
      step_peak_bytes  the highest allocation during the step
      phase_peaks      {category: the highest allocation while its ops ran}
      requests         pool requests during the step
      system_allocs    underlying (system) allocations during the step
      system_alloc_s   time in them
      batch_size       the step's batch size
      feed_bytes       bytes fed
    """

    KIND = "memory"
    WHAT = "step"
    t_s: TimeS
    program: Id
    step: Count
    allocated_bytes: Bytes
    reserved_bytes: Bytes
    step_peak_bytes: Bytes
    phase_peaks: Dict[str, Bytes] = EMPTY
    requests: Count = 0
    system_allocs: Count = 0
    system_alloc_s: Seconds = 0.0
    batch_size: Optional[Count] = None
    feed_bytes: Bytes = 0


@dataclass(frozen=True)
class MemoryPeak:
    """The pool's all-time peak rose.

    Fields:
      t_s                   when
      program               the program running
      step                  its step
      peak_allocated_bytes  the new peak
      peak_reserved_bytes   the reserved peak
      by_tag                {category: bytes} allocated at the peak
    """

    KIND: ClassVar[str] = "memory"
    WHAT: ClassVar[str] = "peak"
    t_s: TimeS
    program: Id
    step: Count
    peak_allocated_bytes: Bytes
    peak_reserved_bytes: Bytes = 0
    by_tag: Dict[str, Bytes] = EMPTY


@dataclass(frozen=True)
class MemoryTraceOp:
    """One op of a traced step.

    Fields:
      index    its position in the program
      type     its type
      tag      its memory category
      before   pool bytes before it
      peak     the highest during it
      after    after it, its frees applied
      outputs  {output: bytes it holds of its own} (0: a view or an inplace reuse)
      frees    the variables freed after it
      inplace  its outputs granted an input's buffer
    """

    index: Count
    type: str
    before: Bytes
    peak: Bytes
    after: Bytes
    tag: Optional[str] = None
    outputs: Dict[str, Bytes] = EMPTY
    frees: Names = ()
    inplace: Names = ()


@dataclass(frozen=True)
class MemoryTrace:
    """One step of a program traced op by op, so other GC/inplace settings can be replayed.

    Fields:
      t_s                  when
      program              the program's id
      step                 the traced step
      batch_size           its batch size
      gc                   garbage collection was on (FLAGS_eager_delete_tensor_gb >= 0)
      inplace              inplace reuse was on
      persistable_bytes    bytes of persistables
      ops                  every op
      last_value_use       {temporary: index of the last op needing its value}
      inplace_candidates   {op index: [[output, input]] pairs inplace may let share}
    """

    KIND: ClassVar[str] = "memory"
    WHAT: ClassVar[str] = "trace"
    t_s: TimeS
    program: Id
    step: Count
    gc: bool
    inplace: bool
    batch_size: Optional[Count] = None
    persistable_bytes: Bytes = 0
    ops: Tuple[MemoryTraceOp, ...] = ()
    last_value_use: Dict[str, Count] = EMPTY
    inplace_candidates: Dict[int, Tuple[Tuple[str, str], ...]] = EMPTY


@dataclass(frozen=True)
class MemoryOom:
    """A pool refused a request: out of memory.

    Fields:
      t_s              when
      place            the device
      requested_bytes  what was asked for
      allocated_bytes  allocated then
      reserved_bytes   reserved then
      capacity_bytes   the pool's capacity
      peak_bytes       the pool's peak so far
      free_bytes       capacity not reserved plus cached free blocks
      op_type          the failing op
      op_index         its position
      batch_size       the step's batch size
      fit_batch_size   the runtime's estimate of the largest batch that fits
      by_tag           {category: bytes} allocated then
      largest          [[variable, bytes]] the largest live variables
      phase            the failing op's memory category
      gc               garbage collection was on
      inplace          inplace reuse was on
    """

    KIND: ClassVar[str] = "memory"
    WHAT: ClassVar[str] = "oom"
    t_s: TimeS
    place: Optional[str] = None
    requested_bytes: Optional[Bytes] = None
    allocated_bytes: Optional[Bytes] = None
    reserved_bytes: Optional[Bytes] = None
    capacity_bytes: Optional[Bytes] = None
    peak_bytes: Optional[Bytes] = None
    free_bytes: Optional[Bytes] = None
    op_type: Optional[str] = None
    op_index: Optional[Count] = None
    batch_size: Optional[Count] = None
    fit_batch_size: Optional[Count] = None
    by_tag: Dict[str, Bytes] = EMPTY
    largest: Tuple[Tuple[str, Bytes], ...] = ()
    phase: Optional[str] = None
    gc: Optional[bool] = None
    inplace: Optional[bool] = None


@dataclass(frozen=True)
class MemoryPool:
    """The pool's state when the memory probe stopped.

    Fields:
      t_s                   when
      place                 the device
      strategy              FLAGS_allocator_strategy
      capacity_bytes        the pool's capacity
      peak_allocated_bytes  its all-time allocated peak
      peak_reserved_bytes   its all-time reserved peak
      allocated_bytes       allocated now
      reserved_bytes        reserved now
      by_tag_at_peak        {category: bytes} at the allocated peak
      by_tag                {category: bytes} now
      cached_free_bytes     freed blocks kept for reuse
      fragmentation         1 - largest free block / cached free bytes (PyTorch's caching
                            allocator: inactive split-block bytes / reserved bytes)
      gc                    garbage collection on
      inplace               inplace reuse on
      steps                 training steps measured
      startup_runs          startup runs measured
      requests              pool requests, all steps
      system_allocs         underlying allocations, all steps
      system_alloc_s        time in them
      ooms                  requests refused
      retries               allocations retried after the device refused a new segment: the
                            allocator freed its cached blocks (a device sync) and tried
                            again (PyTorch's num_alloc_retries, the job's whole run)
    """

    KIND: ClassVar[str] = "memory"
    WHAT: ClassVar[str] = "pool"
    t_s: TimeS
    place: Optional[str] = None
    strategy: Optional[str] = None
    capacity_bytes: Optional[Bytes] = None
    peak_allocated_bytes: Optional[Bytes] = None
    peak_reserved_bytes: Optional[Bytes] = None
    allocated_bytes: Optional[Bytes] = None
    reserved_bytes: Optional[Bytes] = None
    by_tag_at_peak: Dict[str, Bytes] = EMPTY
    by_tag: Dict[str, Bytes] = EMPTY
    cached_free_bytes: Optional[Bytes] = None
    fragmentation: Optional[Share] = None
    gc: Optional[bool] = None
    inplace: Optional[bool] = None
    steps: Count = 0
    startup_runs: Count = 0
    requests: Count = 0
    system_allocs: Count = 0
    system_alloc_s: Seconds = 0.0
    ooms: Count = 0
    retries: Count = 0
