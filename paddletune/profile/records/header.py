"""The header record: how the job was started, the session's options, the machine, and the
source's declaration (framework, knobs, terms)."""

from dataclasses import dataclass
from typing import ClassVar, Dict, Optional, Tuple

from ..schema import EMPTY, Bytes, Count, Id, Names, Number, Scalar, Seconds


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
      check_nan      --check-nan (or --check-nan-continue)
      check_nan_continue  --check-nan-continue: each NaN/Inf recorded, training went on
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
    check_nan_continue: bool = False
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
      host            the machine's host name (whether the job's pid can be checked here)
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
    host: Optional[str] = None
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
      step        the call one step is timed around, by its name ("Executor.run")
      call        that call as a script writes it ("exe.run")
      between     the loop's time outside that call ("outside the runtime")
      loader      the framework's async data loader ("DataLoader")
      graph_step  where the framework also runs static-graph programs (Paddle): the call
                  such a step is timed around; a loaded profile whose training steps ran a
                  program (their ops counted) names its steps by it (Profile.source), else
                  by `step`
    """

    step: str = "Executor.run"
    call: str = "exe.run"
    between: str = "outside the runtime"
    loader: str = "DataLoader"
    graph_step: Optional[str] = None

    def read_wait(self) -> str:
        """How a step's wait for its batch is named: the embedded runtime's reader inside
        Executor.run, else the framework's loader."""
        return "reader wait in run" if self.step == Terms.step else f"{self.loader} wait"


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
