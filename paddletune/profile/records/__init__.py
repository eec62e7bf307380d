"""Every record a profile holds, as a typed class (schema 2): what crosses from measurement to
analysis. A profile file is JSON Lines; each line is one record, `{"type": KIND, ...fields}`
(and, for the kinds with variants, a discriminator field: an event's `kind`, a reader,
memory or scheduler record's `what`, a sample's `probe`).

Per-step records (Step, MemoryStep, SchedStep) are NamedTuples: the probes make one per
training step, and a NamedTuple costs a sixth of a frozen dataclass to build. Everything else
is a frozen dataclass. Field units are in the names (`_s` seconds, `_bytes`, `_percent`,
`share` a fraction) and in the types (schema.Seconds, schema.Bytes, ...).

Each class's docstring lists its fields under "Fields:"; docs/profile-format.md is generated
from these classes (paddletune/profile/docs.py) and a test keeps the two identical. The
modules: header, steps (steps, programs, op times, the windows of a long job's tail),
samples, events, reader, memory, sched (and every probe's own record).
"""

from ..schema import Names
from .events import (AppliedOverride, CompiledEvent, CudaGraphEvent, DeviceTimeEvent,
                     DistributedEvent, ErrorEvent, Event, ExitEvent, GcHeapEvent, GcPauseEvent,
                     ModelEvent,
                     NanInfEvent, NoEffect,
                     OverridesEvent,
                     ProbeUnavailableEvent, ProducerSoloEvent, SettingsEvent, SpeedTestEvent,
                     StepLimitEvent)
from .header import (Command, CpuInfo, CupyInfo, Env, GpuDevice, GpuInfo, Header, Knob,
                     MemoryInfo, NumpyInfo, Options, SourceInfo, Terms)
from .memory import MemoryOom, MemoryPeak, MemoryPool, MemoryStep, MemoryTrace, MemoryTraceOp
from .reader import (LoaderConfig, ReaderEnd, ReaderInterval, ReaderStart, StepCost,
                     WorkerCounts)
from .samples import GpuSample, SampleWindow, Stats, SystemSample, WorkerSample
from .sched import ProbeRecord, SchedDrop, SchedStep
from .steps import (STICKY, STICKY_START, Dist, MemoryWindow, OpsRecord, OpTime, OpTotal,
                    Program, ProgramOp, SchedWindow, Sketch, Step, StepWindow)

SCHEMA_VERSION = 2
DISCRIMINATORS = {"event": "kind", "reader": "what", "memory": "what", "sched": "what",
                  "sample": "probe"}
RECORDS = (Header, Step, Program, OpsRecord, StepWindow, SystemSample, GpuSample,
           WorkerSample, SampleWindow, Event, ExitEvent, ErrorEvent, StepLimitEvent,
           NanInfEvent, ProbeUnavailableEvent, SpeedTestEvent, OverridesEvent, ReaderStart,
           ReaderEnd, ReaderInterval, MemoryStep, MemoryPeak, MemoryTrace, MemoryOom,
           MemoryPool, SchedStep, SchedDrop, ProbeRecord, CompiledEvent, DistributedEvent,
           CudaGraphEvent, ProducerSoloEvent, ModelEvent, SettingsEvent, DeviceTimeEvent,
           GcPauseEvent, GcHeapEvent)
EVENTS = (Event, ExitEvent, ErrorEvent, StepLimitEvent, NanInfEvent, ProbeUnavailableEvent,
          SpeedTestEvent, OverridesEvent, CompiledEvent, DistributedEvent, CudaGraphEvent,
          ProducerSoloEvent, ModelEvent, SettingsEvent, DeviceTimeEvent, GcPauseEvent,
          GcHeapEvent)
SCOPE_EVENTS = (CompiledEvent, DistributedEvent)  # what limits what a profile covers
SAMPLES = (SystemSample, GpuSample, WorkerSample)

__all__ = ["AppliedOverride", "Command", "CompiledEvent", "CpuInfo", "CudaGraphEvent", "CupyInfo",
           "DISCRIMINATORS", "DeviceTimeEvent",
           "Dist", "DistributedEvent", "EVENTS", "Env", "ErrorEvent", "Event", "ExitEvent",
           "GcHeapEvent", "GcPauseEvent", "GpuDevice", "GpuInfo", "GpuSample", "Header", "Knob",
           "LoaderConfig", "MemoryInfo",
           "MemoryOom", "MemoryPeak", "MemoryPool", "MemoryStep", "MemoryTrace", "MemoryTraceOp",
           "MemoryWindow", "ModelEvent", "Names", "NanInfEvent", "NoEffect", "NumpyInfo",
           "OpTime", "OpTotal",
           "OpsRecord", "Options", "OverridesEvent", "ProbeRecord", "ProbeUnavailableEvent",
           "ProducerSoloEvent", "Program", "ProgramOp", "RECORDS", "ReaderEnd", "ReaderInterval",
           "ReaderStart",
           "SAMPLES", "SCHEMA_VERSION", "SCOPE_EVENTS", "STICKY", "STICKY_START", "SampleWindow",
           "SchedDrop", "SchedStep", "SchedWindow", "SettingsEvent", "Sketch", "SourceInfo",
           "SpeedTestEvent",
           "Stats", "Step", "StepCost", "StepLimitEvent", "StepWindow", "SystemSample", "Terms",
           "WorkerCounts", "WorkerSample"]
