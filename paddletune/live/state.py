"""What the dashboard draws: each panel's figures as a frozen dataclass, and `LiveState`, the
whole frame (computed by figures.py from a LiveModel; drawn by paddletune/render/dashboard.py).
A panel's figures are None where the stream has nothing for it yet; the definitions are in
figures.py."""

from dataclasses import dataclass
from typing import Optional, Tuple

from ..profile import records as r
from ..profile.figures import DeviceFigures, Verdict

WHOLE_RUN = "steady steps, whole run"  # the summary's figures: the report's, advise's


@dataclass(frozen=True)
class Status:
    """The job's state (figures.py, `status`):
      waiting         no header yet
      running
      reader stalled  records come, but no batch for a while, and the loader the loop
                      reads from has an empty queue its producer pushes nothing into
      evaluating      no training step for a while, and a pass of a DataLoader that never
                      fed a step runs since the last one: an evaluation loop
      no step         records come, but no training step for a while (a long step, an
                      evaluation the records do not show yet, or a stuck loop)
      stalled         no new record for a while (the process lives)
      died            the job's process is gone without its exit record (killed)
      finished        its exit record
      cut short       a file (not followed live) that ended without one

    idle_s: time since the newest record (None: waiting or finished); exit: the exit record;
    quiet_s: time since the last step (since the pass began, before any) for "reader
    stalled" and "no step", since the evaluation's pass began for "evaluating"; loader: the
    stalled or evaluating loader's name; pid: the job's process id.
    """

    state: str
    idle_s: Optional[float] = None
    exit: Optional[r.ExitEvent] = None
    quiet_s: Optional[float] = None
    loader: Optional[str] = None
    pid: Optional[int] = None


@dataclass(frozen=True)
class Progress:
    """Steps done of the job's total (--total-steps, else --steps), and the time left."""

    steps: int = 0
    total: Optional[int] = None
    total_from: Optional[str] = None
    eta_s: Optional[float] = None


@dataclass(frozen=True)
class Throughput:
    """The main program's rate over `span_s`, the per-second history, samples so far;
    `scope`: what the rate covers when not the last `span_s` seconds (WHOLE_RUN: the
    summary's steady throughput, the report's)."""

    steps_per_s: Optional[float]
    samples_per_s: Optional[float]
    batch_size: Optional[int]
    span_s: float
    history: Tuple[float, ...]
    samples: int
    scope: Optional[str] = None

    @property
    def label(self) -> str:
        return self.scope or f"last {self.span_s:.0f} s"


@dataclass(frozen=True)
class StepTime:
    """Mean seconds per main step over the window: `parts` ((name, seconds) for wait, feed,
    compute, fetch, other), their sum `cycle_s`, `n` steps; `wait_from`: "reader" (an
    iterable DataLoader's waits), "run" (a non-iterable one's, inside exe.run) or None;
    `scope`: None for the window's steps, WHOLE_RUN for the summary's steady steps (then
    `cycle_s` is the report's step time, 1 / its steps/s). Of the compute, as the report's
    "of it off the CPU" and "waiting for a core" (figures.steps.Breakdown): `off_cpu_s`, the
    training thread's time off its CPU, and `queued_s`, of it runnable but waiting for a
    core (None: not measured)."""

    n: int
    cycle_s: float
    parts: Tuple[Tuple[str, float], ...]
    wait_from: Optional[str]
    scope: Optional[str] = None
    off_cpu_s: Optional[float] = None
    queued_s: Optional[float] = None


@dataclass(frozen=True)
class DeviceNow:
    """The steps as the GPU ran them (CUDA events: records.DeviceTimeEvent's running totals),
    with the report's definitions (profile/device_figures.py). `scope` says which steps
    `figures` covers:
      "latest"   those between the latest two totals (device_figures.latest_start): steps
                 `first_step` to `last_step`, counted from 1
      "first"    every step of the only total so far (warm-up included), or of the latest
                 when a speed test lies between it and the one before (as the report's "all")
      WHOLE_RUN  the job's summary, once in: the report's own figures (its steady steps, or
                 every timed step: `figures.scope`)
    `figures` None: N/A, `reason` says why (no total, on a machine with a GPU).
    LiveState.device is None on a machine without a GPU: no device line (a CPU job)."""

    figures: Optional[DeviceFigures] = None
    first_step: Optional[int] = None
    last_step: Optional[int] = None
    scope: Optional[str] = None
    reason: Optional[str] = None


@dataclass(frozen=True)
class ReaderNow:
    """The busiest DataLoader's queue over the window."""

    name: str
    capacity: Optional[int]
    workers: int
    passes: int
    pass_ended: Optional[str]
    pops: int = 0
    fill_mean: Optional[float] = None
    fill_share: Optional[float] = None
    empty_ratio: Optional[float] = None
    wait_per_pop_s: Optional[float] = None
    batches_per_s: Optional[float] = None
    produce_per_batch_s: Optional[float] = None
    fill_history: Tuple[Optional[float], ...] = ()
    made_in: str = "thread"  # thread | loop | workers (LoaderConfig.made_in)


@dataclass(frozen=True)
class GpuNow:
    """One GPU's newest sample (or its window's last values)."""

    gpu: int
    used: Optional[float]
    total: Optional[float]
    util: Optional[float]
    proc: Optional[float]


@dataclass(frozen=True)
class MemoryNow:
    """The memory pool, the host and the GPUs. `allocated`/`reserved`: at the newest step
    recorded in full (None once steps come only as windows); `step_peak`: the window's
    largest step peak; `capacity_from`: pool | FLAGS_cpu_memory_limit_mb | machine."""

    allocated: Optional[int] = None
    reserved: Optional[int] = None
    peak_allocated: Optional[int] = None
    peak_reserved: Optional[int] = None
    step_peak: Optional[int] = None
    capacity: Optional[int] = None
    capacity_from: Optional[str] = None
    ooms: int = 0
    pool_seen: bool = False
    rss: Optional[float] = None
    available: Optional[float] = None
    gpus: Tuple[GpuNow, ...] = ()
    gpu_reason: Optional[str] = None


@dataclass(frozen=True)
class CpuNow:
    """The newest system sample (or its window's last values); `cores` the job can use."""

    sampled: bool
    cores: Optional[int] = None
    process: Optional[float] = None
    total: Optional[float] = None
    per_core: Tuple[float, ...] = ()
    threads: Optional[float] = None
    blas_threads: Optional[float] = None
    load1: Optional[float] = None
    steal: Optional[float] = None
    workers: int = 0


@dataclass(frozen=True)
class OpLine:
    """One op type's time per step and share of all op time."""

    type: str
    per_step_s: float
    share: float


@dataclass(frozen=True)
class OpsNow:
    """--ops: the op types taking most time per main step over the window."""

    enabled: bool
    steps: int = 0
    top: Tuple[OpLine, ...] = ()


@dataclass(frozen=True)
class ParallelNow:
    """The ParallelExecutor over the window."""

    places: int
    threads: int
    reduce: str
    steps: int
    concurrency: Optional[float]
    ready_mean: Optional[float]
    busy_share: Optional[float]
    sched_share: Optional[float]
    drops: int


@dataclass(frozen=True)
class AdviceLine:
    severity: str
    title: str
    gain: str


@dataclass(frozen=True)
class LiveAdvice:
    """The rolling verdict and advice, computed at `t_s` (profile clock) over the window;
    `error`: the advisors failed (the dashboard goes on)."""

    t_s: float
    verdict: Optional[Verdict] = None
    advice: Tuple[AdviceLine, ...] = ()
    error: Optional[str] = None
    cost_s: float = 0.0
    verdict_scope: Optional[str] = None  # WHOLE_RUN: the summary's verdict, not the window's


@dataclass(frozen=True)
class LiveState:
    """One frame: every panel's figures at `now_s` (profile clock), and the loop's extras
    (`cost`: LiveLoop.cost(), `writer`: alive | gone | unknown, `log_path`: the script's
    output, `mode`: live | watch)."""

    title: str
    path: str
    now_s: float
    window_s: float
    status: Status
    progress: Progress
    memory: MemoryNow
    cpu: CpuNow
    ops: OpsNow
    throughput: Optional[Throughput] = None
    breakdown: Optional[StepTime] = None
    device: Optional[DeviceNow] = None
    reader: Optional[ReaderNow] = None
    parallel: Optional[ParallelNow] = None
    advice: Optional[LiveAdvice] = None
    notes: Tuple[str, ...] = ()
    cost: Optional[dict] = None
    writer: Optional[str] = None
    log_path: Optional[str] = None
    mode: Optional[str] = None
