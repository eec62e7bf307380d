"""A loaded profile: its header, summary and kept records, frozen (paddletune.profile.load
builds it; the report, the advisors, the dashboard, the tuner and the exporters read it)."""

from dataclasses import dataclass, replace
from typing import Mapping, Optional, Tuple

from . import records as r
from .codec import event_kind
from .figures import Summary
from .schema import EMPTY


@dataclass(frozen=True)
class Profile:
    """A profile's records by kind, each tuple in file order.

    steps: the steps recorded in full (each program's first head_steps, startup runs,
    speed-test windows); windows: the later steps aggregated; exemplars: the slowest and a
    reservoir sample of those later steps, in full. A profile cut short (killed) has
    complete False; truncated says its last line was cut off mid-write; warnings lists what
    loading skipped or repaired."""

    path: str
    header: r.Header
    summary: Summary
    steps: Tuple[r.Step, ...] = ()
    windows: Tuple[r.StepWindow, ...] = ()
    exemplars: Tuple[r.Step, ...] = ()
    ops: Tuple[r.OpsRecord, ...] = ()
    programs: Mapping[int, r.Program] = EMPTY
    system: Tuple[r.SystemSample, ...] = ()
    gpu: Tuple[r.GpuSample, ...] = ()
    workers: Tuple[r.WorkerSample, ...] = ()
    sample_windows: Tuple[r.SampleWindow, ...] = ()
    events: tuple = ()
    probes: Mapping[str, r.ProbeRecord] = EMPTY
    reader: tuple = ()
    memory: tuple = ()
    sched: tuple = ()
    complete: bool = True
    truncated: bool = False
    warnings: Tuple[str, ...] = ()

    @property
    def env(self) -> r.Env:
        return self.header.env

    @property
    def options(self) -> r.Options:
        return self.header.options

    @property
    def command(self) -> r.Command:
        return self.header.command

    @property
    def source(self) -> r.SourceInfo:
        """The header's source; its step named by Terms.graph_step where the framework names
        a static graph's steps apart (Paddle 3's Executor.run against a dynamic graph's
        optimizer.step) and the job's first training step ran a program (its ops counted)."""
        source = self.header.source
        terms = source.terms
        if terms.graph_step is not None and self.runs_programs:
            return replace(source, terms=replace(terms, step=terms.graph_step))
        return source

    @property
    def runs_programs(self) -> bool:
        """Whether the job's training steps ran programs (the embedded runtime's, Paddle's
        static graph: the first one's ops counted), which the report and the trace name,
        rather than an eager framework's optimizer steps."""
        first = next((s for s in self.steps if not s.startup), None)
        return first is not None and first.n_ops is not None

    def events_of(self, kind: str) -> list:
        """The events of one kind ("exit", "error", "speed_test", ...), in order."""
        return [e for e in self.events if event_kind(e) == kind]

    def last_event(self, kind: str):
        found = self.events_of(kind)
        return found[-1] if found else None

    def records(self, family: str, cls) -> list:
        """The records of class `cls` among one family ("reader", "memory", "sched")."""
        return [x for x in getattr(self, family) if isinstance(x, cls)]

    def program_ops(self, program: Optional[int]) -> Tuple[r.ProgramOp, ...]:
        """A program's ops ((): not recorded)."""
        record = self.programs.get(program) if program is not None else None
        return record.ops if record is not None else ()
