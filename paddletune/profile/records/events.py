"""Events: something happened (the job ended or raised, a limit stopped it, NaN/Inf, the speed
test switched, what the overrides changed)."""

from dataclasses import dataclass
from typing import ClassVar, Dict, Literal, Optional, Tuple

from ..schema import EMPTY, Bytes, Count, Id, Names, Scalar, Seconds, TimeS


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
      more        --check-nan-continue's last record: the outputs found after the first
                  MAX_NAN_EVENTS, counted only (0 on the others)
      steps_with  the training steps that had NaN/Inf (on that last record)
      last_step   the last of them (on that last record)
      found_in    where the module's NaN/Inf already were as it ran (PyTorch): inputs (an
                  op before it, outside any module, made them), parameters (its weights:
                  an earlier update diverged); None: it made them, or not known
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
    more: Count = 0
    steps_with: Count = 0
    last_step: Optional[Count] = None
    found_in: Optional[Literal["inputs", "parameters"]] = None


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
               no-data ceiling), solo (a producer thread timed alone at the next batch:
               ProducerSoloEvent), one_thread (the ceiling again with one math thread) or
               done
      step     training steps so far
      message  what changed
      cpu_s    the process's CPU time (all its threads) at the switch, since it started
               (None: not measured)
      thread_cpu_s  the training thread's CPU time at the switch (None: not measured, or
               switched from another thread)
    """

    KIND: ClassVar[str] = "event"
    WHAT: ClassVar[str] = "speed_test"
    t_s: TimeS
    phase: Literal["baseline", "ceiling", "solo", "one_thread", "done"] = "baseline"
    step: Count = 0
    message: Optional[str] = None
    cpu_s: Optional[Seconds] = None
    thread_cpu_s: Optional[Seconds] = None


@dataclass(frozen=True)
class ProducerSoloEvent:
    """--speed-test timed a DataLoader's producer thread alone: the training loop took the
    queued batches and a few more at once, waiting while the thread made them (its batches
    then went to the next steps in order).

    Fields:
      t_s              when the last of them arrived
      loader           the loader's id
      pass_no          its pass
      batches          batches made while the loop waited
      s_per_batch      the thread's time per batch, alone
      cpu_s_per_batch  its CPU time per batch, alone (None: not measured)
      message          the same in one sentence
    """

    KIND: ClassVar[str] = "event"
    WHAT: ClassVar[str] = "producer_solo"
    t_s: TimeS
    loader: Id = 0
    pass_no: Count = 0
    batches: Count = 0
    s_per_batch: Seconds = 0.0
    cpu_s_per_batch: Optional[Seconds] = None
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


@dataclass(frozen=True)
class CompiledEvent:
    """The script compiled a model or a function (PyTorch's torch.compile or
    Module.compile). The steps, the DataLoader and the threads are measured as usual; what
    happens inside the compiled graph is not.

    Fields:
      t_s        when torch.compile was called
      target     what was compiled: the module's class, or the function's name
      backend    the compiler backend ("inductor", "eager", ...)
      mode       torch.compile's mode (None: its default)
      fullgraph  torch.compile's fullgraph
      hidden     the options of this session that cannot see inside the graph, or change
                 it: "ops" (--ops), "check_nan" (--check-nan): their per-module hooks split
                 the compiled graph at every module
      message    the same in one sentence
    """

    KIND: ClassVar[str] = "event"
    WHAT: ClassVar[str] = "compiled"
    t_s: TimeS
    target: str = "?"
    backend: Optional[str] = None
    mode: Optional[str] = None
    fullgraph: bool = False
    hidden: Names = ()
    message: Optional[str] = None


@dataclass(frozen=True)
class DistributedEvent:
    """The script joined a distributed job (torch.distributed.init_process_group) or wrapped
    a model in DistributedDataParallel: the profile covers this process, one rank, only.

    Fields:
      t_s         when the call returned
      call        init_process_group | DistributedDataParallel
      backend     the process group's backend ("gloo", "nccl", ...; None: unknown)
      rank        this process's rank (None: unknown)
      world_size  the processes in the job (None: unknown)
      module      the wrapped module's class (DistributedDataParallel)
      message     the same in one sentence
    """

    KIND: ClassVar[str] = "event"
    WHAT: ClassVar[str] = "distributed"
    t_s: TimeS
    call: str = "init_process_group"
    backend: Optional[str] = None
    rank: Optional[Count] = None
    world_size: Optional[Count] = None
    module: Optional[str] = None
    message: Optional[str] = None


@dataclass(frozen=True)
class CudaGraphEvent:
    """A GPU program of the embedded runtime was captured into a CUDA graph for one feed shape
    (its later steps of that shape replay it with one launch), or runs eagerly, with the reason.

    Fields:
      t_s          when
      program      the program's id
      captured     True: captured, its steps replay; False: its steps run eagerly
      graph_bytes  device memory the graph holds (0 when eager)
      feed         the fed arrays' shapes ("32x784, 32x1")
      message      the same in one sentence, with the reason when eager
    """

    KIND: ClassVar[str] = "event"
    WHAT: ClassVar[str] = "cuda_graph"
    t_s: TimeS
    program: Optional[Id] = None
    captured: bool = False
    graph_bytes: Bytes = 0
    feed: str = ""
    message: Optional[str] = None


@dataclass(frozen=True)
class SettingsEvent:
    """The settings the header lists beside the machine (Env.flags: Paddle's FLAGS, PyTorch's
    thread counts and GPU math settings) that the job changed before its first training step
    ended, read again then: the header took them before the script ran, and a script sets
    them before its loop. A loaded profile's env.flags holds these values (profile/load.py).

    Fields:
      t_s      when the first training step ended
      flags    the settings that changed, with their values then
      message  the same in one sentence
    """

    KIND: ClassVar[str] = "event"
    WHAT: ClassVar[str] = "settings"
    t_s: TimeS
    flags: Dict[str, Scalar] = EMPTY
    message: Optional[str] = None


@dataclass(frozen=True)
class ModelEvent:
    """What the model is made of, seen once as the job's first training step ran (PyTorch: a
    forward hook on every module, Paddle 3: on every layer's call, until the first optimizer
    step ends, then removed): the advice that depends on the model (cuDNN autotuning, TF32,
    mixed precision, channels_last, a float64 model) reads it.

    Fields:
      t_s                 when the first training step ended
      modules             the leaf modules called, by class ("Conv2d": 4 calls; a Paddle
                          static-graph program's forward ops, by type: "conv2d": 4)
      params              the optimizer's parameter elements by dtype ("float32": 669706)
      autocast            whether a leaf module ran under torch.autocast (Paddle:
                          paddle.amp.auto_cast; a static program: a convolution or matrix
                          product computes in float16 or bfloat16)
      conv_channels_last  whether every convolution's 4-D input was channels_last (Paddle:
                          every 2-D convolution layer's data_format NHWC; None: no
                          convolution ran on one)
      capability          the GPU's compute capability the parameters live on ("8.0"; None:
                          not a GPU)
      settings            the framework's GPU math settings as the first step ended, the
                          script's own included ("torch.backends.cudnn.benchmark": false;
                          empty on the CPU)
      graph               "static" for a Paddle static-graph program's census (its changes
                          are written as static-graph code); None otherwise
      message             the same in one sentence
      pairs               the leaf calls that ran back to back, by class, counted
                          ("Softmax>CrossEntropyLoss": 1; at most 64 distinct pairs; Paddle's
                          CrossEntropyLoss(use_softmax=False) named so): the fused-loss
                          advice reads them
      cpu_autocast        the dtype a leaf module computed in under the CPU's autocast
                          (PyTorch: torch.autocast("cpu"); "bfloat16"); None: none ran
                          under it (or not recorded: Paddle)
      cpu_kernels         whether this CPU has oneDNN's kernels for that dtype (PyTorch:
                          torch.ops.mkldnn._is_mkldnn_bf16_supported, AVX-512 or AMX; without
                          them the products run on slow reference kernels); None: unknown
    """

    KIND: ClassVar[str] = "event"
    WHAT: ClassVar[str] = "model"
    t_s: TimeS
    modules: Dict[str, Count] = EMPTY
    params: Dict[str, Count] = EMPTY
    autocast: bool = False
    conv_channels_last: Optional[bool] = None
    capability: Optional[str] = None
    settings: Dict[str, Scalar] = EMPTY
    message: Optional[str] = None
    graph: Optional[Literal["static"]] = None
    pairs: Dict[str, Count] = EMPTY
    cpu_autocast: Optional[str] = None
    cpu_kernels: Optional[bool] = None


@dataclass(frozen=True)
class GcPauseEvent:
    """Python's garbage collector paused the training thread (a PyTorch or Paddle 3 job): one
    collection on that thread of at least 5 ms. A full collection (generation 2) scans every
    object the interpreter tracks, some 400,000 after torch.compile: 200-480 ms on a 2-core
    machine. Every thread waits for it (it holds the GIL).

    Fields:
      t_s         when it began
      pause_s     how long it ran
      generation  the generation it collected (2: a full collection; -1 below)
      collected   the objects it freed
      more        0; in the last such record of a run that had more than 2,000 pauses, how
                  many came after those (pause_s their total time, t_s the run's end)
      message     None (the summary's gc figures and the report say it)
    """

    KIND: ClassVar[str] = "event"
    WHAT: ClassVar[str] = "gc_pause"
    t_s: TimeS
    pause_s: Seconds = 0.0
    generation: int = 0
    collected: Count = 0
    more: Count = 0
    message: Optional[str] = None


@dataclass(frozen=True)
class GcHeapEvent:
    """The objects Python's garbage collector tracks, counted on the training thread (a
    PyTorch or Paddle 3 job) at the first training step's end (the heap the loop starts
    with) and at the step ends after the 1st, 2nd, 4th, 8th... full collection (at most 12
    counts a run): what a full collection scans, and how much of it was there before the
    loop (what `gc.freeze()` there would take out of every later scan). A count walks the
    whole heap (20-130 ms for 0.3-1.2 million objects on a 2-core VM); its time is left out
    of the step after it.

    Fields:
      t_s       when it was counted
      objects   the objects tracked then (len(gc.get_objects()))
      read_s    how long counting them took
      full      the full collections on the training thread before it (the run's first
                count is the first step's end's, whatever collections ran before it)
      message   None
    """

    KIND: ClassVar[str] = "event"
    WHAT: ClassVar[str] = "gc_heap"
    t_s: TimeS
    objects: Count = 0
    read_s: Seconds = 0.0
    full: Count = 0
    message: Optional[str] = None


@dataclass(frozen=True)
class DeviceTimeEvent:
    """The training steps as the GPU ran them, timed with CUDA events (PyTorch or Paddle 3 on
    a GPU): an event recorded on the device's stream where each step ended (the optimizer
    step's kernels queued) and where the next one started: the first of its DataLoader batch
    handed over and its first host-to-device copy (Paddle's static graph: the run's
    start). The device reaches the start's event when
    it has nothing left of the step before: what lies between the two is the GPU idle,
    waiting for the host (its DataLoader, its Python); what lies after it, until the step's
    end, is the device busy with the step (gaps between kernels the host queued late
    included). Totals since the first step after the first, written at growing step counts
    (1, 2, 5, 10, 20, 50, ...), after every 30 s of the device's step time, and as the job
    ends: the difference of two is the steps between them (the summary takes the steady
    steps').

    Fields:
      t_s        when written
      place      the device ("CUDAPlace(0)")
      steps      steps timed so far (each from the previous step's end to its own)
      last_step  the last of them (the source's step count, from 0)
      cycle_s    their device time, end to end
      copied     of them, the steps with a host-to-device copy, or Paddle's mark in its place
                 (those split into idle + busy)
      idle_s     the GPU idle before those steps' first copies (or marks)
      busy_s     the GPU busy with those steps, from the copy to the end
      message    None (the figures are in the summary's device section)
    """

    KIND: ClassVar[str] = "event"
    WHAT: ClassVar[str] = "device_time"
    t_s: TimeS
    place: str = ""
    steps: Count = 0
    last_step: Count = 0
    cycle_s: Seconds = 0.0
    copied: Count = 0
    idle_s: Seconds = 0.0
    busy_s: Seconds = 0.0
    message: Optional[str] = None
