"""Background samples (system, GPU, DataLoader workers) and the windows that aggregate them after
a probe's first samples."""

from dataclasses import dataclass
from typing import ClassVar, Dict, NamedTuple, Optional, Tuple

from ..schema import EMPTY, Bytes, Count, Id, Number, Percent, Seconds, TimeS


@dataclass(frozen=True)
class SystemSample:
    """The system probe's sample of the process and the machine.

    Fields:
      t_s                    when it was taken
      cpu_percent            the process's CPU since the previous sample (100 = one core)
      cpu_total_percent      the machine's busy share of all cores
      per_core_percent       each core's busy share
      rss_bytes              the process's resident memory
      threads                the job's threads (BLAS's too)
      ctx_switches_per_s     the process's context switches per second
      ctx_involuntary_per_s  of which involuntary (preempted)
      load1                  the 1-minute load average
      steal_percent          CPU time taken by the hypervisor for other VMs
      iowait_percent         CPU time waiting for I/O
      mem_available_bytes    the machine's available memory
      blas_threads           NumPy's BLAS threads now
    """

    KIND: ClassVar[str] = "sample"
    WHAT: ClassVar[str] = "system"
    t_s: TimeS
    cpu_percent: Optional[Percent] = None
    cpu_total_percent: Optional[Percent] = None
    per_core_percent: Optional[Tuple[Optional[Percent], ...]] = None
    rss_bytes: Optional[Bytes] = None
    threads: Optional[Count] = None
    ctx_switches_per_s: Optional[Number] = None
    ctx_involuntary_per_s: Optional[Number] = None
    load1: Optional[Number] = None
    steal_percent: Optional[Percent] = None
    iowait_percent: Optional[Percent] = None
    mem_available_bytes: Optional[Bytes] = None
    blas_threads: Optional[Count] = None


@dataclass(frozen=True)
class GpuSample:
    """The NVML probe's sample of one GPU.

    Fields:
      t_s               when it was taken
      gpu               NVML's index
      util_percent      share of time a kernel ran
      mem_util_percent  share of time memory was read or written
      mem_used_bytes    device memory in use (all processes)
      mem_total_bytes   device memory
      proc_mem_bytes    device memory of this process
      sm_clock_mhz      the SM clock
      mem_clock_mhz     the memory clock
      power_w           power draw
      power_limit_w     the enforced power limit
      temperature_c     the GPU's temperature
      throttle          why the clocks are held down now ([] none; None: not reported)
    """

    KIND: ClassVar[str] = "sample"
    WHAT: ClassVar[str] = "nvml"
    t_s: TimeS
    gpu: Id
    util_percent: Optional[Percent] = None
    mem_util_percent: Optional[Percent] = None
    mem_used_bytes: Optional[Bytes] = None
    mem_total_bytes: Optional[Bytes] = None
    proc_mem_bytes: Optional[Bytes] = None
    sm_clock_mhz: Optional[Number] = None
    mem_clock_mhz: Optional[Number] = None
    power_w: Optional[Number] = None
    power_limit_w: Optional[Number] = None
    temperature_c: Optional[Number] = None
    throttle: Optional[Tuple[str, ...]] = None


@dataclass(frozen=True)
class WorkerSample:
    """The workers probe's sample of one DataLoader worker process.

    Fields:
      t_s        when it was taken
      loader     the loader's id
      pass_no    the loader's pass, from 1
      worker     the worker's index
      pid        its process id
      uss_bytes  its private memory (copy-on-read growth shows here)
      rss_bytes  its resident memory
      cpu_s      its CPU time so far (user + system)
    """

    KIND: ClassVar[str] = "sample"
    WHAT: ClassVar[str] = "workers"
    t_s: TimeS
    loader: Id
    pass_no: Count
    worker: Count
    pid: Id
    uss_bytes: Bytes
    rss_bytes: Bytes
    cpu_s: Seconds


class Stats(NamedTuple):
    """One sampled field over a window (written as a 6-item array).

    Fields:
      n      samples with a value
      mean   their mean
      min    the smallest
      max    the largest
      first  the first sample's value
      last   the last sample's value
    """

    JSON_ARRAY = True
    n: Count
    mean: Number
    min: Number
    max: Number
    first: Number
    last: Number


@dataclass(frozen=True)
class SampleWindow:
    """A probe's samples over [t0_s, t_s] aggregated: written, after each probe's first
    samples, once per window instead of one record per sample.

    Fields:
      t0_s     the window's first sample's time
      t_s      its last sample's time
      probe    "system", "nvml" or "workers"
      key      the sampled entity: a GPU's index, a worker's pid (None for the system)
      n        samples aggregated
      fields   {field: Stats} for every numeric field of the probe's samples
      labels   {field: value} of the entity's fixed fields (a worker's loader, pass_no,
               worker)
      reasons  {reason: samples listing it}: a GPU's clock-throttle reasons
      reasons_n  samples that reported throttle reasons at all
    """

    KIND: ClassVar[str] = "sample_window"
    t0_s: TimeS
    t_s: TimeS
    probe: str
    n: Count
    key: Optional[Id] = None
    fields: Dict[str, Stats] = EMPTY
    labels: Dict[str, Id] = EMPTY
    reasons: Dict[str, Count] = EMPTY
    reasons_n: Count = 0
