"""The summary record: every figure computed from a profile's records."""

from dataclasses import dataclass
from typing import ClassVar, Dict, Optional, Tuple

from ..schema import EMPTY, Count, Id, Seconds, Share
from .memory import MemoryFigures
from .reader import LoaderFigures, ReaderFigures, SpeedTestFigures
from .steps import (Breakdown, DeviceFigures, Distribution, EvalFigures, GcFigures, OpFigures,
                    ProgramSteps, Shares, Throughput, Verdict)
from .system import ExitFigures, GpuFigures, ParallelFigures, ProbeOverhead, SystemFigures


@dataclass(frozen=True)
class Summary:
    """Every figure computed from the records: the profile's last record.

    Fields:
      n_steps                    training steps of the main program
      main_program               the main program's id
      warmup_steps               warm-up steps excluded
      warmup_s                   their time, from the first one's start to the last one's
                                 end (a compile in the first step: torch.compile's, a
                                 static graph's), None without warm-up steps
      steady_steps               steady steps the figures cover
      aggregated_steps           of the steady steps, those recorded in windows
      speed_test_steps_excluded  steps of the speed test excluded: its windows, and the steps
                                 after them that drained what the queue filled meanwhile
      programs                   every program and its runs
      duration_s                 how long the job ran
      step_s                     the run's time (Executor.run)
      cycle_s                    the loop iteration's time
      breakdown_s                mean seconds per step in each part
      shares                     each part's share of the cycle
      input_share                outside + read + feed over the cycle
      throughput                 steps and samples per second
      verdict                    input- or compute-bound
      evaluation                 DataLoader passes between training steps (evaluation),
                                 left out of the steps
      reader                     the DataLoaders
      speed_test                 --speed-test's windows
      memory                     the memory pool
      parallel                   the ParallelExecutor
      ops                        per-op timing (--ops)
      system                     the system probe's samples
      gpus                       each GPU's samples
      device                     the steady steps as the GPU ran them (CUDA events)
      gc                         Python's garbage collector's pauses on the training thread
      overhead                   {probe: its cost}
      exit                       how the job ended
    """

    KIND: ClassVar[str] = "summary"
    n_steps: Count = 0
    main_program: Optional[Id] = None
    warmup_steps: Count = 0
    warmup_s: Optional[Seconds] = None
    steady_steps: Count = 0
    aggregated_steps: Count = 0
    speed_test_steps_excluded: Count = 0
    programs: Tuple[ProgramSteps, ...] = ()
    duration_s: Seconds = 0.0
    step_s: Optional[Distribution] = None
    cycle_s: Optional[Distribution] = None
    breakdown_s: Optional[Breakdown] = None
    shares: Optional[Shares] = None
    input_share: Optional[Share] = None
    throughput: Optional[Throughput] = None
    verdict: Verdict = Verdict("too-few-steps", None, "Too few steps to tell.")
    evaluation: Optional[EvalFigures] = None
    reader: Optional[ReaderFigures] = None
    speed_test: Optional[SpeedTestFigures] = None
    memory: Optional[MemoryFigures] = None
    parallel: Optional[ParallelFigures] = None
    ops: Optional[OpFigures] = None
    system: Optional[SystemFigures] = None
    gpus: Tuple[GpuFigures, ...] = ()
    device: Optional[DeviceFigures] = None
    gc: Optional[GcFigures] = None
    overhead: Dict[str, ProbeOverhead] = EMPTY
    exit: ExitFigures = ExitFigures()

    @property
    def main_loader(self) -> Optional[LoaderFigures]:
        """The figures of the training loop's DataLoader (ReaderFigures.main: the one that
        delivered the most batches, or another whose waits held the steps back far more; an
        evaluation loader only where no other ran), None without one that delivered any."""
        f = self.reader.main_loader if self.reader else None
        return f if f is not None and f.batches else None
