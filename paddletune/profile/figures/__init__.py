"""The summary: every figure the report, the advisors, the dashboard and the tuner read, as
typed classes. It is computed from the records (paddletune/profile/summarize.py), online by
the writer as the job runs and again on load for a profile cut short, and written as the
profile's last record.

Definitions (all per training step of the main program: the non-startup program that ran the
most steps; warm-up steps and the speed test's ceiling window excluded):
  wall     one run: read + feed + compute + fetch
  outside  the gap between the previous run's end and this run's start: data preparation in
           a synchronous loop, waiting for an iterable DataLoader's batch, logging, Python
  cycle    wall + outside: what one iteration of the training loop costs
  input    outside + read + feed: time the device waits for the next batch (TensorFlow
           Profiler's "input")
"""

from .memory import ByCategory, MemoryFigures, ModelFigures, PeakOp, PhasePeaks, StepPeak
from .reader import (ConsumerFigures, DimFigures, Growth, LoaderError, LoaderFigures,
                     LongBatches, Occupancy, PassStarts, ProcessFigures, ProducerAlone,
                     ProducerFigures, ReaderFigures, ShapeFigures, SpeedTestFigures,
                     WaitFigures, WindowRate, WorkerFigures, WorkerProcess)
from .steps import (Breakdown, DeviceFigures, Distribution, EvalFigures, EvalLoader,
                    GcFigures, OpFigures, OpTypeFigures, ProgramSteps, Shares, SingleOpFigures,
                    Throughput, Verdict, VerdictKind)
from .summary import Summary
from .system import (DropFigures, ExitFigures, GpuFigures, ParallelFigures, ProbeOverhead,
                     SampleStats, SystemFigures)

__all__ = ["Breakdown", "ByCategory", "ConsumerFigures", "DeviceFigures", "DimFigures",
           "Distribution", "EvalFigures", "EvalLoader", "GcFigures",
           "DropFigures", "ExitFigures", "GpuFigures", "Growth", "LoaderError", "LoaderFigures",
           "LongBatches", "MemoryFigures", "ModelFigures", "Occupancy", "OpFigures",
           "OpTypeFigures", "ParallelFigures", "PassStarts", "PeakOp", "PhasePeaks",
           "ProbeOverhead",
           "ProcessFigures", "ProducerAlone", "ProducerFigures", "ProgramSteps",
           "ReaderFigures", "SampleStats",
           "ShapeFigures", "Shares", "SingleOpFigures", "SpeedTestFigures", "StepPeak",
           "Summary", "SystemFigures", "Throughput", "Verdict", "VerdictKind", "WaitFigures",
           "WindowRate", "WorkerFigures", "WorkerProcess"]
