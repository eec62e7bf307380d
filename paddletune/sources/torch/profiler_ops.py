"""--ops for a PyTorch job: torch.profiler in windows of training steps (the schedule, the
costs and the one-profiler rule: sources/eager/op_windows.py), read as torch.profiler's own
tables list the ops.

What an op is: a top-level operator of the training thread: the forward's `aten::linear`,
`aten::relu`, `aten::cross_entropy_loss`; the backward's autograd nodes (`AddmmBackward0`,
`AccumulateGrad`: the engine's `evaluate_function` events, on whichever thread the engine runs
them); the optimizer's `Adam.step` and `Adam.zero_grad` (torch.optim's own annotations, each
one op: the step's range also holds the step hooks, paddletune's included). The script's own
`record_function` ranges are looked through (their ops are listed). The DataLoader's work is
the step's read time: it is not recorded (`unrecorded`), or where this torch cannot switch
that off, its `enumerate(DataLoader)` range is left out when read. Other threads' ops (a
pin-memory thread) are left out too. On a GPU each op's time is its kernels' (CUPTI,
through torch.profiler): the kernels each launched, found by correlation.

A script's own profiler (torch.profiler.profile, torch.autograd.profiler.profile, emit_nvtx,
emit_itt) goes through STARTS_A_PROFILER, which the hooks guard. Kineto, torch.profiler's
engine, prints two lines to stderr at each start and stop: silenced (`_quiet_kineto`)."""

import bisect
import os
import time
from typing import Dict, Iterable, List, NamedTuple, Tuple

import torch

from ..eager.bus import OpEnd
from ..eager.op_windows import (BACKWARD, FORWARD, OPTIMIZE, TopOp, Window, clock_offset,
                                ops_of_window, tightest)

ANCHOR = "paddletune::ops_window"  # our range, its start on both clocks
AUTOGRAD = "autograd::engine::evaluate_function: "
OPTIMIZER = "Optimizer."  # torch.optim's ranges: "Optimizer.step#Adam.step"
LOADER = "enumerate(DataLoader)"
# what torch.autograd.profiler calls as a profiler starts: kineto's profilers prepare their
# session (replacing an open one) first; emit_nvtx and emit_itt only call the hook
STARTS_A_PROFILER = ("_prepare_profiler", "_run_on_profiler_start")
DEVICE_WORK = ("kernel", "gpu_memcpy", "gpu_memset")

_perf = time.perf_counter


# --- the events as read from the profiler -----------------------------------------------------
class HostEvent(NamedTuple):
    """One operator or range torch.profiler recorded on a host thread."""

    name: str
    thread: int
    start_ns: int
    end_ns: int
    range: bool  # a record_function range (torch.optim's, the DataLoader's, the script's)
    correlation: int = 0  # what the device work it launched links to (read on a GPU only)


class DeviceWork(NamedTuple):
    """One kernel, copy or memset on the device, and the host operator that launched it."""

    start_ns: int
    end_ns: int
    launched_by: int  # a HostEvent's correlation


def read_events(events: Iterable, device: bool) -> Tuple[List[HostEvent], List[DeviceWork]]:
    """The kineto events of a stopped profiler (`prof.profiler.kineto_results.events()`);
    the device's work (and what launched it) only with `device`."""
    host, work = [], []
    for e in events:
        kind = e.activity_type()
        if kind == "cpu_op" or kind == "user_annotation":
            host.append(HostEvent(e.name(), e.start_thread_id(), e.start_ns(), e.end_ns(),
                                  kind == "user_annotation",
                                  e.correlation_id() if device else 0))
        elif device and kind in DEVICE_WORK:
            work.append(DeviceWork(e.start_ns(), e.end_ns(), e.linked_correlation_id()))
    return host, work


# --- the ops of a window ----------------------------------------------------------------------
def op_kind(name: str) -> Tuple[str, int]:
    """The op type a top-level event is listed under, and its role."""
    if name.startswith(AUTOGRAD):
        return name[len(AUTOGRAD):].rsplit("::", 1)[-1], BACKWARD
    if name.startswith(OPTIMIZER):
        return name.split("#", 1)[-1], OPTIMIZE
    return name, FORWARD


def top_level(host: List[HostEvent], training_thread: int) -> List[TopOp]:
    """The top-level ops (see the module), by start. Ranges are looked through, except
    torch.optim's (one op each) and the DataLoader's (left out with what it holds)."""
    out = []
    for thread, events in _by_thread(host).items():
        covered_until = -1  # the end of the op or left-out range holding what comes next
        for e in events:
            if e.start_ns < covered_until or e.name.startswith(ANCHOR):
                continue
            if e.range and e.name.startswith(LOADER):
                covered_until = e.end_ns
                continue
            if e.range and not e.name.startswith(OPTIMIZER):
                continue  # the script's own range: its ops are listed
            if thread != training_thread and not e.name.startswith(AUTOGRAD):
                continue
            covered_until = e.end_ns
            kind, role = op_kind(e.name)
            out.append(TopOp(kind, role, thread, e.start_ns, e.end_ns))
    out.sort(key=lambda op: op.start_ns)
    return out


def _by_thread(host: List[HostEvent]) -> Dict[int, List[HostEvent]]:
    threads: Dict[int, List[HostEvent]] = {}
    for e in host:
        threads.setdefault(e.thread, []).append(e)
    for events in threads.values():
        events.sort(key=lambda e: (e.start_ns, -e.end_ns))  # an outer range before its ops
    return threads


def add_device_time(tops: List[TopOp], host: List[HostEvent], device: List[DeviceWork]):
    """Each top-level op's kernels: their summed device time and the first one's start (the
    host operator that launched each, found by correlation, lies inside one top-level op)."""
    launched: Dict[int, List[DeviceWork]] = {}
    for work in device:
        launched.setdefault(work.launched_by, []).append(work)
    spans: Dict[int, Tuple[List[int], List[TopOp]]] = {}
    for op in tops:
        starts, ops = spans.setdefault(op.thread, ([], []))
        starts.append(op.start_ns)
        ops.append(op)
    for e in host:
        works = launched.get(e.correlation) if e.correlation else None
        if not works or e.thread not in spans:
            continue
        starts, ops = spans[e.thread]
        k = bisect.bisect_right(starts, e.start_ns) - 1
        if k < 0 or e.start_ns > ops[k].end_ns:
            continue
        for work in works:
            ops[k].add_kernel(work.start_ns, work.end_ns)


class TorchRecorder:
    """torch.profiler, one window at a time (eager/op_windows.py's Recorder)."""

    name = "torch.profiler"

    def __init__(self):
        self.profiler = None
        self.device = False
        self._around = (0.0, 0.0, 0.0)  # perf_counter before, inside and after the anchor
        self._anchor = ANCHOR  # its name (the tightest of a few: op_windows.tightest)

    def start(self, device: bool) -> float:
        activities = [torch.profiler.ProfilerActivity.CPU]
        if device:
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        with _quiet_kineto():
            profiler = torch.profiler.profile(activities=activities)
            profiler.start()
        try:
            self._anchor, self._around = tightest(self._anchored, ANCHOR)
        except Exception:
            profiler.stop()  # (no window without its anchor; the profiler not left on)
            raise
        self.profiler, self.device = profiler, device
        return self._around[1]

    @staticmethod
    def _anchored(name: str) -> Tuple[float, float, float]:
        t_before = _perf()
        with torch.profiler.record_function(name):
            t_anchor = _perf()
        return t_before, t_anchor, _perf()

    def stop(self, t_open: float, ends: Tuple[Tuple[int, float, float], ...], t_anchor: float,
             slots: Dict[Tuple[str, int], int]) -> List[OpEnd]:
        profiler, self.profiler = self.profiler, None
        profiler.stop()
        host, device = read_events(profiler.profiler.kineto_results.events(), self.device)
        anchor = next((e for e in host if e.name == self._anchor), None)
        if anchor is None or not ends:
            return []
        tops = top_level(host, anchor.thread)
        if self.device:
            add_device_time(tops, host, device)
        window = Window(t_open, ends, anchor.start_ns, anchor.start_ns / 1e9 - clock_offset(
            anchor.start_ns, anchor.end_ns, *self._around))
        return ops_of_window(tops, window, slots, self.device)


class unrecorded:
    """torch.profiler records nothing of what runs inside, on this thread (RecordFunction off):
    the DataLoader's work while a window records. Its time is the step's read time, and an
    in-process loader's events are thousands a window (each sample indexed, then stacked):
    they would double what stopping the profiler and reading its events cost. Where this
    torch has no switch, the events are recorded and left out when read (LOADER)."""

    _switch = getattr(torch._C._autograd, "_enable_record_function", None)

    def __enter__(self):
        if self._switch is not None:
            self._switch(False)

    def __exit__(self, *exc):
        if self._switch is not None:
            self._switch(True)
        return False


class _quiet_kineto:
    """Kineto, torch.profiler's engine, prints two lines to stderr each time a profiler
    starts and stops unless KINETO_LOG_LEVEL, read when it first starts, says otherwise:
    set (to 6, above its levels) only for that start when the job has not set it."""

    def __enter__(self):
        self.set = "KINETO_LOG_LEVEL" not in os.environ
        if self.set:
            os.environ["KINETO_LOG_LEVEL"] = "6"

    def __exit__(self, *exc):
        if self.set:
            os.environ.pop("KINETO_LOG_LEVEL", None)
        return False
