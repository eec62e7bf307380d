"""The summary's ParallelExecutor figures, background samples (system, GPU), the probes' cost and
how the job ended."""

from dataclasses import dataclass
from typing import Dict, Literal, Optional, Tuple

from ..schema import EMPTY, Bytes, Count, Id, Number, Seconds, Share


@dataclass(frozen=True)
class DropFigures:
    """The ParallelExecutor's local-scope drops.

    Fields:
      every           num_iteration_per_drop_scope
      count           drops
      wall_s_mean     a drop's mean time
      share           drops' cost / all training steps' time
      held_bytes_max  the most bytes a drop freed
      variables_max   the most variables a drop freed
      step_excess_s   the extra time of a step that drops and the step after it over two
                      steady steps without a drop (None: too few of either, or within the
                      noise)
      cost_s_mean     a drop's cost: the larger of its own time and step_excess_s
    """

    every: Optional[Count] = None
    count: Count = 0
    wall_s_mean: Optional[Seconds] = None
    share: Optional[Share] = None
    held_bytes_max: Optional[Bytes] = None
    variables_max: Optional[Count] = None
    step_excess_s: Optional[Seconds] = None
    cost_s_mean: Optional[Seconds] = None


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
      share       an in-step probe's: of the training loop's time (every step's loop
                  iteration); a background probe's: of the job's wall time (None: no
                  time to divide by)
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
