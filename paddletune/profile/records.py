"""Every record a profile holds, as a typed class (schema 2): what crosses from measurement to
analysis. A profile file is JSON Lines; each line is one record, `{"type": KIND, ...fields}`
(and, for the kinds with variants, a discriminator field: an event's `kind`, a reader,
memory or scheduler record's `what`, a sample's `probe`).

Per-step records (Step, MemoryStep, SchedStep) are NamedTuples: the probes make one per
training step, and a NamedTuple costs a sixth of a frozen dataclass to build. Everything else
is a frozen dataclass. Field units are in the names (`_s` seconds, `_bytes`, `_percent`,
`share` a fraction) and in the types (schema.Seconds, schema.Bytes, ...).

Each class's docstring lists its fields under "Fields:"; docs/profile-format.md is generated
from these classes (paddletune/profile/docs.py) and a test keeps the two identical.
"""

from dataclasses import dataclass
from typing import ClassVar, Dict, Literal, NamedTuple, Optional, Tuple

from .schema import (EMPTY, Bytes, Count, Id, Json, Number, Percent, Scalar, Seconds, Share,
                     TimeS)

SCHEMA_VERSION = 2
Names = Tuple[str, ...]


# --- header --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Command:
    """How the job was started.

    Fields:
      argv    the script (or module) and its arguments, as typed
      module  True for `-m MODULE`
      script  the script's absolute path (None for a module)
      cwd     the working directory
      python  the interpreter
    """

    argv: Names = ()
    module: bool = False
    script: Optional[str] = None
    cwd: Optional[str] = None
    python: Optional[str] = None


@dataclass(frozen=True)
class Options:
    """The profiling session's options.

    Fields:
      steps          --steps: stop after this many training steps
      duration_s     --duration: stop at the first step ending this long after the first
      warmup         --warmup: steps excluded from the steady state (None: detected)
      ops            --ops: every op timed
      interval_s     seconds between background samples
      fluid_compat   --fluid-compat: `import paddle.fluid` loaded the embedded runtime
      check_nan      --check-nan
      speed_test     --speed-test: steps in each speed-test window (None: no speed test)
      live           --live: the dashboard followed the profile
      total_steps    --total-steps: the job's total, for the dashboard's ETA
      head_steps     training steps per program recorded in full before the tail is
                     aggregated into windows
      overrides_env  {variable: value} of the settings imposed through the environment
    """

    steps: Optional[Count] = None
    duration_s: Optional[Seconds] = None
    warmup: Optional[Count] = None
    ops: bool = False
    interval_s: Seconds = 0.5
    fluid_compat: bool = False
    check_nan: bool = False
    speed_test: Optional[Count] = None
    live: bool = False
    total_steps: Optional[Count] = None
    head_steps: Count = 1000
    overrides_env: Optional[Dict[str, str]] = None


@dataclass(frozen=True)
class NumpyInfo:
    """NumPy and the BLAS library behind it.

    Fields:
      version       NumPy's version
      blas          the BLAS family and version ("OpenBLAS 0.3.27")
      blas_path     the BLAS library file
      blas_threads  the BLAS thread count when the job started
    """

    version: Optional[str] = None
    blas: Optional[str] = None
    blas_path: Optional[str] = None
    blas_threads: Optional[Count] = None


@dataclass(frozen=True)
class CpuInfo:
    """The processor.

    Fields:
      model           the CPU's name
      logical_cores   logical cores of the machine
      physical_cores  physical cores of the machine
      usable_cores    cores this process may run on (its affinity)
    """

    model: Optional[str] = None
    logical_cores: Optional[Count] = None
    physical_cores: Optional[Count] = None
    usable_cores: Optional[Count] = None

    @property
    def cores(self) -> Optional[int]:
        """The cores the job can use (usable, else logical), None when unknown."""
        return self.usable_cores or self.logical_cores or None


@dataclass(frozen=True)
class MemoryInfo:
    """The machine's memory.

    Fields:
      total_bytes      installed
      available_bytes  available when the job started
    """

    total_bytes: Optional[Bytes] = None
    available_bytes: Optional[Bytes] = None


@dataclass(frozen=True)
class GpuDevice:
    """One GPU as NVML lists it.

    Fields:
      index               NVML's index
      name                the model
      uuid                its UUID
      memory_total_bytes  its memory
      driver              the driver version
    """

    index: Optional[Id] = None
    name: Optional[str] = None
    uuid: Optional[str] = None
    memory_total_bytes: Optional[Bytes] = None
    driver: Optional[str] = None


@dataclass(frozen=True)
class GpuInfo:
    """The GPUs NVML sees.

    Fields:
      available  NVML answered and found a GPU
      reason     why not, when not
      driver     the driver version
      devices    every GPU
    """

    available: bool = False
    reason: Optional[str] = None
    driver: Optional[str] = None
    devices: Tuple[GpuDevice, ...] = ()


@dataclass(frozen=True)
class CupyInfo:
    """CuPy, the embedded runtime's GPU backend.

    Fields:
      available  CuPy imported and found a GPU
      version    its version when installed
      devices    GPUs it can use
      reason     why not, when not
    """

    available: bool = False
    version: Optional[str] = None
    devices: Optional[Count] = None
    reason: Optional[str] = None


@dataclass(frozen=True)
class Env:
    """The machine and interpreter the job ran on.

    Fields:
      python          Python's version
      implementation  CPython, PyPy, ...
      executable      the interpreter's path
      platform        the OS
      paddletune      paddletune's version
      numpy           NumPy and its BLAS
      cpu             the processor
      memory          the machine's memory
      gpu             the GPUs NVML sees
      cupy            CuPy
      flags           the FLAGS in force that differ from their defaults (None: unknown)
      env_vars        the thread/device variables and FLAGS_* variables that were set
    """

    python: Optional[str] = None
    implementation: Optional[str] = None
    executable: Optional[str] = None
    platform: Optional[str] = None
    paddletune: Optional[str] = None
    numpy: NumpyInfo = NumpyInfo()
    cpu: CpuInfo = CpuInfo()
    memory: MemoryInfo = MemoryInfo()
    gpu: GpuInfo = GpuInfo()
    cupy: CupyInfo = CupyInfo()
    flags: Optional[Dict[str, Scalar]] = None
    env_vars: Dict[str, str] = EMPTY


@dataclass(frozen=True)
class Knob:
    """A setting of the job that a source declares: its neutral id, its name in the job's
    framework, its value when the job started, and how it is changed there.

    Fields:
      id       the neutral name advice and tuning use ("reader.num_workers",
               "flag.FLAGS_eager_delete_tensor_gb", "threads.blas")
      name     what the framework calls it ("DataLoader(num_workers=...)")
      value    its value when the job started (None: unknown or set later)
      how      the code or environment line that sets it, with {value} to fill in
    """

    id: str
    name: str
    value: Scalar = None
    how: Optional[str] = None


@dataclass(frozen=True)
class Terms:
    """How the report and advice name the parts of a step in the source's framework.

    Fields:
      step     the call one step is timed around ("Executor.run")
      between  the loop's time outside that call ("outside the runtime")
      calls    those calls in a sentence ("exe.run calls")
      loader   the framework's async data loader ("DataLoader")
    """

    step: str = "Executor.run"
    between: str = "outside the runtime"
    calls: str = "exe.run calls"
    loader: str = "DataLoader"


@dataclass(frozen=True)
class SourceInfo:
    """The source the measurements came from: the framework the job trains with.

    Fields:
      framework   the source's name ("fluid": paddletune's embedded runtime)
      version     the framework's version
      steps_from  how training steps are detected ("Executor.run")
      knobs       the settings it declares
      terms       how the report names the parts of a step in this framework
    """

    framework: str = "fluid"
    version: Optional[str] = None
    steps_from: Optional[str] = None
    knobs: Tuple[Knob, ...] = ()
    terms: Terms = Terms()


@dataclass(frozen=True)
class Header:
    """The first line of every profile.

    Fields:
      schema      the profile schema's version (2)
      tool        "paddletune <version>"
      created     the local time the job started (ISO 8601)
      t0_unix_s   the Unix time of the session clock's zero: every `t_s` counts from it
      pid         the job's process id
      command     how the job was started
      options     the session's options
      env         the machine and interpreter
      source      the framework the measurements came from
    """

    KIND: ClassVar[str] = "header"
    schema: int
    tool: str = "paddletune"
    created: Optional[str] = None
    t0_unix_s: Optional[Number] = None
    pid: Optional[Id] = None
    command: Command = Command()
    options: Options = Options()
    env: Env = Env()
    source: SourceInfo = SourceInfo()


# --- steps ---------------------------------------------------------------------------------------
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
      index  the op's position in the program
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
      timing   "host" (wall clock around each op) or "cuda_event" (device time)
      ops      the ops' times, in the order they ran
    """

    KIND: ClassVar[str] = "ops"
    program: Id
    step: Count
    timing: str = "host"
    ops: Tuple[OpTime, ...] = ()


# --- aggregates of the tail ----------------------------------------------------------------------
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
      samples      their batch sizes summed
      batch_sizes  {batch size: steps}
      parts        {part: Dist} for wall, cycle (wall + outside), feed, compute, fetch,
                   outside (the gap before the run) and read
      feed_bytes   bytes fed, summed
      fetch_bytes  bytes fetched, summed
      queue_first  the DataLoader queue's fill at the window's first step
      queue_last   and at its last
      memory       the memory probe's figures of these steps
      sched        the ParallelExecutor's figures of these steps
      ops          the ops' times of these steps (--ops)
      op_steps     steps whose op times were counted
      timing       how those op times were taken ("host" or "cuda_event")
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


# --- background samples --------------------------------------------------------------------------
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


# --- events --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Event:
    """Something that happened (a kind this version does not know is kept as this).

    Fields:
      t_s      when
      kind     what kind of event
      message  a sentence saying what happened
    """

    KIND: ClassVar[str] = "event"
    t_s: TimeS
    kind: str = "note"
    message: Optional[str] = None


@dataclass(frozen=True)
class ExitEvent:
    """The job ended.

    Fields:
      t_s          when
      status       the exit status `python SCRIPT` would have had
      reason       returned | exit | exception | interrupted | terminated | step_limit
      train_steps  training steps the job ran
      message      how it ended, in words
    """

    KIND: ClassVar[str] = "event"
    WHAT: ClassVar[str] = "exit"
    t_s: TimeS
    status: Optional[Id] = None
    reason: str = "returned"
    train_steps: Count = 0
    message: Optional[str] = None


@dataclass(frozen=True)
class ErrorEvent:
    """The script raised.

    Fields:
      t_s        when
      exception  the exception's class
      where      "file:line in function" of the innermost frame
      oom        the exception means out of memory (any framework's kind)
      message    its first line
    """

    KIND: ClassVar[str] = "event"
    WHAT: ClassVar[str] = "error"
    t_s: TimeS
    exception: str = "Exception"
    where: Optional[str] = None
    oom: bool = False
    message: Optional[str] = None


@dataclass(frozen=True)
class StepLimitEvent:
    """--steps or --duration stopped the job.

    Fields:
      t_s      when
      steps    training steps done
      message  which limit
    """

    KIND: ClassVar[str] = "event"
    WHAT: ClassVar[str] = "step_limit"
    t_s: TimeS
    steps: Count = 0
    message: Optional[str] = None


@dataclass(frozen=True)
class NanInfEvent:
    """--check-nan found NaN or Inf in an op's output.

    Fields:
      t_s       when
      op_type   the op's type
      op_index  its position in the program
      output    the output holding NaN/Inf
      inputs    its inputs' names
      n_nan     NaN values in the output
      n_inf     Inf values in the output
      step      the step
      message   the sentence the report shows
    """

    KIND: ClassVar[str] = "event"
    WHAT: ClassVar[str] = "nan_inf"
    t_s: TimeS
    op_type: Optional[str] = None
    op_index: Optional[Count] = None
    output: Optional[str] = None
    inputs: Names = ()
    n_nan: Count = 0
    n_inf: Count = 0
    step: Optional[Count] = None
    message: Optional[str] = None


@dataclass(frozen=True)
class ProbeUnavailableEvent:
    """A probe could not measure (no GPU, no permission, ...).

    Fields:
      t_s      when
      probe    the probe's name
      message  why
    """

    KIND: ClassVar[str] = "event"
    WHAT: ClassVar[str] = "probe_unavailable"
    t_s: TimeS
    probe: str = "?"
    message: Optional[str] = None


@dataclass(frozen=True)
class SpeedTestEvent:
    """--speed-test switched windows.

    Fields:
      t_s      when
      phase    baseline (queue popped as usual), ceiling (the same batch re-read: the
               no-data ceiling) or done
      step     training steps so far
      message  what changed
    """

    KIND: ClassVar[str] = "event"
    WHAT: ClassVar[str] = "speed_test"
    t_s: TimeS
    phase: Literal["baseline", "ceiling", "done"] = "baseline"
    step: Count = 0
    message: Optional[str] = None


@dataclass(frozen=True)
class AppliedOverride:
    """A setting imposed through the environment that changed what ran.

    Fields:
      section  reader | exec_strategy | build_strategy
      key      the option
      value    the value imposed
      was      the script's own value
    """

    section: str
    key: str
    value: Scalar = None
    was: Scalar = None


@dataclass(frozen=True)
class NoEffect:
    """A setting imposed through the environment that changed nothing.

    Fields:
      section  reader | exec_strategy | build_strategy
      key      the option
      value    the value asked for
      code     why, as a code the tuner acts on: same-value, no-loader,
               no-compiled-program, not-data-parallel, cpu-places, fixed-batch,
               unbatchable, other
      why      why, in words
    """

    section: str
    key: str
    value: Scalar = None
    code: str = "other"
    why: str = ""


@dataclass(frozen=True)
class OverridesEvent:
    """What the overrides variable asked for, what it changed and what had no effect.

    Fields:
      t_s        when (the job's end)
      env        the variable's name
      requested  {section: {key: value}} asked for
      applied    the changes made
      skipped    the requests that changed nothing, with why
      message    the same in one sentence
    """

    KIND: ClassVar[str] = "event"
    WHAT: ClassVar[str] = "overrides"
    t_s: TimeS
    env: str = "PADDLETUNE_OVERRIDES"
    requested: Dict[str, Dict[str, Scalar]] = EMPTY
    applied: Tuple[AppliedOverride, ...] = ()
    skipped: Tuple[NoEffect, ...] = ()
    message: Optional[str] = None


# --- the reader ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class LoaderConfig:
    """A DataLoader's settings as its pass started (the framework's own names).

    Fields:
      name               its name ("DataLoader#0")
      capacity           the queue's length in batches (a prefetch depth)
      iterable           iterated in Python (True) or fed inside the run (False)
      use_double_buffer  batches staged on the device ahead of the step
      num_workers        worker processes (0: a thread in the trainer, or the loop itself)
      use_shared_memory  workers hand batches over in shared memory
      prefetch_factor    batches each worker prepares ahead
      pin_memory         batches copied to page-locked memory
      persistent_workers  workers kept between passes
      source             sample | sample_list | batch: what the script's generator yields
      batch_size         samples per batch (None: unknown)
      feed               the variables it feeds
      places             the devices it feeds
      drop_last          a last partial batch is dropped
      timeout            seconds a pop waits before failing (None: forever)
      worker_pids        the pass's worker processes
    """

    name: Optional[str] = None
    capacity: Optional[Count] = None
    iterable: Optional[bool] = None
    use_double_buffer: Optional[bool] = None
    num_workers: Count = 0
    use_shared_memory: Optional[bool] = None
    prefetch_factor: Optional[Count] = None
    pin_memory: Optional[bool] = None
    persistent_workers: Optional[bool] = None
    source: Optional[str] = None
    batch_size: Optional[Count] = None
    feed: Names = ()
    places: Names = ()
    drop_last: Optional[bool] = None
    timeout: Optional[Number] = None
    worker_pids: Tuple[Id, ...] = ()


@dataclass(frozen=True)
class ReaderStart:
    """A DataLoader pass began.

    Fields:
      t_s      when
      loader   the loader's id
      pass_no  its pass, from 1
      config   its settings
    """

    KIND: ClassVar[str] = "reader"
    WHAT: ClassVar[str] = "start"
    t_s: TimeS
    loader: Id
    pass_no: Count
    config: LoaderConfig = LoaderConfig()


@dataclass(frozen=True)
class ReaderEnd:
    """A DataLoader pass ended, was reset, or failed.

    Fields:
      t_s      when
      loader   the loader's id
      pass_no  its pass
      what     end | reset | error
      batches  batches it delivered
      detail   what happened (the error)
    """

    KIND: ClassVar[str] = "reader"
    t_s: TimeS
    loader: Id
    pass_no: Count
    what: Literal["end", "reset", "error"] = "end"
    batches: Count = 0
    detail: str = ""


class WorkerCounts(NamedTuple):
    """One producer's batches in an interval (written as a 3-item array).

    Fields:
      batches    batches it made
      produce_s  time making them
      cpu_s      CPU time making them
    """

    JSON_ARRAY = True
    batches: Count
    produce_s: Seconds
    cpu_s: Seconds


class StepCost(NamedTuple):
    """Training steps that consumed batches of one size (written as a 2-item array).

    Fields:
      steps      steps
      compute_s  their compute time, summed
    """

    JSON_ARRAY = True
    steps: Count
    compute_s: Seconds


@dataclass(frozen=True)
class ReaderInterval:
    """One DataLoader pass's queue over [t0_s, t_s): what the producers pushed, what the
    loop popped and how full the queue was, counted (never one record per batch).

    Fields:
      t0_s         the interval's start
      t_s          its end
      loader       the loader's id
      pass_no      its pass
      speed_test   the pops were peeks (FLAGS_reader_queue_speed_test_mode)
      pushes       batches pushed
      produce_s    producers' time making them
      cpu_s        producers' CPU time, summed over the batches that reported it
      cpu_n        batches that reported it
      put_wait_s   producers' time blocked on a full queue
      nbytes       bytes pushed
      workers      {producer: its counts} (-1: the loader's thread)
      shapes       {feed variable: {"64x100": batches}}
      pops         batches the loop took
      peeks        batches it peeked at (speed test)
      empty_pops   pops that found the queue empty (the loop waited for a producer)
      wait_s       the loop's time waiting for batches
      wait_max_s   its longest wait
      copy_s       copying batches to the device on the loop's thread
      wait_hist    {bucket: pops}: bucket k holds waits in [10^(k/10), 10^((k+1)/10)) s
      pop_sizes    {queue size at the pop: pops}
      occupancy    {queue size: samples}: the queue's fill sampled every 10 ms
      swings       drains from full to empty
      cost         {elements of the batches a step consumed: its cost}
      steps        training steps that popped batches of this pass
      step_wait_s  the waits of those pops
      programs     {program id: steps}
    """

    KIND: ClassVar[str] = "reader"
    WHAT: ClassVar[str] = "interval"
    t0_s: TimeS
    t_s: TimeS
    loader: Id
    pass_no: Count
    speed_test: bool = False
    pushes: Count = 0
    produce_s: Seconds = 0.0
    cpu_s: Seconds = 0.0
    cpu_n: Count = 0
    put_wait_s: Seconds = 0.0
    nbytes: Bytes = 0
    workers: Dict[int, WorkerCounts] = EMPTY
    shapes: Dict[str, Dict[str, Count]] = EMPTY
    pops: Count = 0
    peeks: Count = 0
    empty_pops: Count = 0
    wait_s: Seconds = 0.0
    wait_max_s: Seconds = 0.0
    copy_s: Seconds = 0.0
    wait_hist: Dict[int, Count] = EMPTY
    pop_sizes: Dict[int, Count] = EMPTY
    occupancy: Dict[int, Count] = EMPTY
    swings: Count = 0
    cost: Dict[int, StepCost] = EMPTY
    steps: Count = 0
    step_wait_s: Seconds = 0.0
    programs: Dict[int, Count] = EMPTY


# --- memory --------------------------------------------------------------------------------------
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
      fragmentation         1 - largest free block / cached free bytes
      gc                    garbage collection on
      inplace               inplace reuse on
      steps                 training steps measured
      startup_runs          startup runs measured
      requests              pool requests, all steps
      system_allocs         underlying allocations, all steps
      system_alloc_s        time in them
      ooms                  requests refused
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


# --- the ParallelExecutor ------------------------------------------------------------------------
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


# --- probes --------------------------------------------------------------------------------------
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


# --- the registry --------------------------------------------------------------------------------
DISCRIMINATORS = {"event": "kind", "reader": "what", "memory": "what", "sched": "what",
                  "sample": "probe"}
RECORDS = (Header, Step, Program, OpsRecord, StepWindow, SystemSample, GpuSample,
           WorkerSample, SampleWindow, Event, ExitEvent, ErrorEvent, StepLimitEvent,
           NanInfEvent, ProbeUnavailableEvent, SpeedTestEvent, OverridesEvent, ReaderStart,
           ReaderEnd, ReaderInterval, MemoryStep, MemoryPeak, MemoryTrace, MemoryOom,
           MemoryPool, SchedStep, SchedDrop, ProbeRecord)
EVENTS = (Event, ExitEvent, ErrorEvent, StepLimitEvent, NanInfEvent, ProbeUnavailableEvent,
          SpeedTestEvent, OverridesEvent)
SAMPLES = (SystemSample, GpuSample, WorkerSample)
