"""The ParallelExecutor's records (the scheduler per step, the local-scope drops) and every
probe's own record."""

from dataclasses import dataclass
from typing import ClassVar, Dict, NamedTuple, Optional, Tuple

from ..schema import EMPTY, Bytes, Count, Id, Json, Number, Seconds, TimeS


class SchedStep(NamedTuple):
    """One data-parallel step's scheduler figures.

    Fields:
      t_s          when it was recorded
      executor     the executor's id
      program      the program's id
      step         the step's number
      places       places (devices) it ran on
      threads      worker threads
      reduce       AllReduce or Reduce
      wall_s       the step's time
      busy_s       each thread's time in kernels
      ops          op instances run (all places)
      sched_s      the threads' time in the scheduler itself
      ready_max    the longest ready queue
      ready_mean   the mean ready queue
      concurrency  op time over wall time (1: one op at a time)
      combine_s    time in gradient combining ops
      place_s      from the step's start to each place's last op
      drop_every   num_iteration_per_drop_scope
      dropped      the step ended with a scope drop
      fused        {fusion pass: ops it replaced}
    """

    KIND = "sched"
    WHAT = "step"
    t_s: TimeS
    executor: Id
    program: Id
    step: Count
    places: Count
    threads: Count
    reduce: str
    wall_s: Seconds
    busy_s: Tuple[Seconds, ...] = ()
    ops: Count = 0
    sched_s: Seconds = 0.0
    ready_max: Count = 0
    ready_mean: Number = 0.0
    concurrency: Number = 0.0
    combine_s: Seconds = 0.0
    place_s: Tuple[Seconds, ...] = ()
    drop_every: Count = 0
    dropped: bool = False
    fused: Dict[str, Count] = EMPTY


@dataclass(frozen=True)
class SchedDrop:
    """The ParallelExecutor dropped its local scopes.

    Fields:
      t_s         when
      executor    the executor's id
      program     the program's id
      step        the step
      wall_s      the drop's time (with its synchronisation)
      held_bytes  bytes the local scopes still held
      variables   variables dropped
    """

    KIND: ClassVar[str] = "sched"
    WHAT: ClassVar[str] = "drop"
    t_s: TimeS
    executor: Id
    program: Id
    step: Count
    wall_s: Seconds = 0.0
    held_bytes: Bytes = 0
    variables: Count = 0


@dataclass(frozen=True)
class ProbeRecord:
    """A probe's own record when it stopped: whether it could measure and what it cost.

    Fields:
      name         the probe
      available    it could measure
      reason       why not, when not
      overhead_s   its own measured cost
      in_step      its cost falls inside the training loop (event callbacks), not in a
                   background thread
      details      the probe's own counters (shown, not analysed)
    """

    KIND: ClassVar[str] = "probe"
    name: str
    available: bool = True
    reason: Optional[str] = None
    overhead_s: Optional[Seconds] = None
    in_step: bool = False
    details: Json = None
