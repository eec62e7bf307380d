"""--ops for a PyTorch job: torch.profiler records WINDOW training steps at a time, and each
op it saw is announced as one op_end of its step when the window closes.

What an op is: a top-level operator of the training thread, as torch.profiler's tables list
them: the forward's `aten::linear`, `aten::relu`, `aten::cross_entropy_loss`; the backward's
autograd nodes (`AddmmBackward0`, `AccumulateGrad`: the engine's `evaluate_function` events,
on whichever thread the engine runs them); the optimizer's `Adam.step` and `Adam.zero_grad`
(torch.optim's own annotations, each one op). The script's own `record_function` ranges are
looked through (their ops are listed), the DataLoader's `enumerate(DataLoader)` range is left
out (its time is the step's read time), and so are other threads' ops (a pin-memory thread).
On a GPU each op's time is its kernels' device time (CUPTI, through torch.profiler: timing
"cupti"), and an op that launched no kernel is left out; on the CPU it is the op's host time.

A window records WINDOW + 1 steps and announces the first WINDOW: torch.optim's range around
`Adam.step` also holds the step hooks (paddletune's, which end the step and stop the profiler),
so the last step's update is cut off; for the same reason an op ends by its step's end.

A window costs the job: the profiler records each operator (about 1 µs per op on the CPU), and
stopping it and reading its events takes milliseconds. That reading is left out of the step
times (StepTimer.pause: the next step starts after it, and StepEnd.paused_s carries it to the
ops probe's overhead). The first window opens after FIRST_STEP steps; the steps between two
windows are as many as keep the reading under BUDGET of the job's time, but at least WINDOW and
at most as many as the job has run so far (so a job of fast steps still gets windows late in
its run, past a long warm-up: 10-19, 42-51, 106-115, 234-243, ...). torch.profiler records no op id, so an op is known by its type and its rank
among the step's ops of that type (by start), the index that pair got when first seen.

PyTorch runs one profiler at a time: a script that starts its own (torch.profiler.profile,
torch.autograd.profiler.profile, emit_nvtx, emit_itt) gets it (STARTS_A_PROFILER are
patched). Our open window is closed first (its ops announced) and op timing stops for the rest of the job, the reason sent as a
scope event (the report's `Ops: N/A`); so it does when ours cannot start."""

import bisect
import gc
import math
import os
import time
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, NamedTuple, Optional, Tuple

import torch

from ...profile.records import ProbeUnavailableEvent
from ..eager.bus import Bus, OpEnd
from ..eager.steps import StepTimer

WINDOW = 10  # steps per profiler window
FIRST_STEP = 10  # steps before the first window opens
BUDGET = 0.05  # the windows' reading: at most this share of the job's time
ANCHOR = "paddletune::ops_window"  # our range, its start on both clocks
AUTOGRAD = "autograd::engine::evaluate_function: "
OPTIMIZER = "Optimizer."  # torch.optim's ranges: "Optimizer.step#Adam.step"
LOADER = "enumerate(DataLoader)"
# what torch.autograd.profiler calls as a profiler starts: kineto's profilers prepare their
# session (replacing an open one) first; emit_nvtx and emit_itt only call the hook
STARTS_A_PROFILER = ("_prepare_profiler", "_run_on_profiler_start")
DEVICE_WORK = ("kernel", "gpu_memcpy", "gpu_memset")
FORWARD, BACKWARD, OPTIMIZE = 0, 1, 2  # OpEnd.role, as the Fluid op roles number them

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
@dataclass
class TopOp:
    """A top-level op: its type, role and host span; its kernels' device time (GPU)."""

    type: str
    role: int
    thread: int
    start_ns: int
    end_ns: int
    device_ns: int = 0
    first_device_ns: Optional[int] = None


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
            if e.start_ns < covered_until or e.name == ANCHOR:
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
        op = ops[k]
        for work in works:
            op.device_ns += max(work.end_ns - work.start_ns, 0)
            if op.first_device_ns is None or work.start_ns < op.first_device_ns:
                op.first_device_ns = work.start_ns


@dataclass(frozen=True)
class Window:
    """A window's steps on the job's clock: it opened at `t_open` (a step's end, perf_counter
    seconds); `ends` is each step it recorded, (step, its end), in order. `anchor_ns` and
    `anchor_t` are one moment on the profiler's clock and on perf_counter's."""

    t_open: float
    ends: Tuple[Tuple[int, float], ...]
    anchor_ns: int
    anchor_t: float


def ops_of_window(tops: List[TopOp], window: Window, slots: Dict[Tuple[str, int], int],
                  device: bool) -> List[OpEnd]:
    """The OpEnd of each top-level op that started inside one of the window's steps, on the
    step's clock, ending by the step's end; with `device`, its kernels' time (ops without any
    are left out)."""
    t_ends = [t for _, t in window.ends]
    out, ranks, current = [], {}, None
    for op in tops:
        t_start = window.anchor_t + (op.start_ns - window.anchor_ns) / 1e9
        k = bisect.bisect_left(t_ends, t_start)
        if t_start <= window.t_open or k == len(t_ends):
            continue
        step = window.ends[k][0]
        if step != current:
            ranks, current = {}, step
        rank = ranks[op.type] = ranks.get(op.type, -1) + 1
        index = slots.setdefault((op.type, rank), len(slots))
        if device:
            if op.first_device_ns is None:
                continue
            t_begin = window.anchor_t + (op.first_device_ns - window.anchor_ns) / 1e9
            out.append(OpEnd(0, step, index, op.type, op.role, t_begin,
                             t_begin + op.device_ns / 1e9, "cupti"))
        else:  # (torch.optim's range holds the step hooks: cut at the step's end)
            t_end = min(t_start + (op.end_ns - op.start_ns) / 1e9, t_ends[k])
            out.append(OpEnd(0, step, index, op.type, op.role, t_start, t_end))
    return out


# --- the windows ------------------------------------------------------------------------------
@dataclass
class ProfilerOps:
    """torch.profiler windows over the training steps, their ops announced on `bus`."""

    bus: Bus
    timer: StepTimer
    slots: Dict[Tuple[str, int], int] = field(default_factory=dict)
    unavailable: Optional[str] = None
    profiler: object = None
    device: bool = False  # the open window records the GPU's work
    t_open: float = 0.0
    t_anchor: float = 0.0  # perf_counter inside our range (ANCHOR)
    ends: List[Tuple[int, float]] = field(default_factory=list)
    steps_to_wait: int = FIRST_STEP
    _starting: bool = False

    def guard_start(self, original):
        """The replacement of `original`, one of torch.autograd.profiler's STARTS_A_PROFILER:
        a script's own profiler closes ours for good before it starts."""
        ops = self

        def _run_on_profiler_start(*args, **kwargs):
            if not ops._starting:
                ops.close()
                if not ops.unavailable:
                    ops._give_up("the script starts its own torch profiler, and PyTorch "
                                 "runs one at a time")
            return original(*args, **kwargs)

        return _run_on_profiler_start

    def step_ended(self, step: int, t_end: float, place: str):
        """The training step `step` ended at `t_end` (its StepEnd already sent)."""
        if self.unavailable:
            return
        if self.profiler is None:
            self.steps_to_wait -= 1
            if self.steps_to_wait <= 0:
                self._paused(self._open, t_end, place.startswith("CUDA"))
            return
        self.ends.append((step, t_end))
        if len(self.ends) > WINDOW:
            self._paused(self.close)

    def _paused(self, action, *args):
        """Run `action` between two steps, its time left out of the next step (and without
        the garbage collector, which the window's thousands of events would wake)."""
        t0, collecting = _perf(), gc.isenabled()
        gc.disable()
        try:
            action(*args)
        finally:
            if collecting:
                gc.enable()
            self.timer.pause(_perf() - t0)

    def _open(self, t_open: float, device: bool):
        activities = [torch.profiler.ProfilerActivity.CPU]
        if device:
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        try:
            with _quiet_kineto():
                self._starting = True
                try:
                    profiler = torch.profiler.profile(activities=activities)
                    profiler.start()
                finally:
                    self._starting = False
            with torch.profiler.record_function(ANCHOR):
                t_anchor = _perf()
        except Exception as err:  # noqa: BLE001  (a script's profiler already runs)
            self._give_up(f"torch.profiler could not start ({_first_line(err)}); does the "
                          f"script run its own? PyTorch runs one profiler at a time")
            return
        self.profiler, self.device, self.t_open = profiler, device, t_open
        self.t_anchor, self.ends = t_anchor, []

    def close(self):
        """Stop the window's profiler and announce its ops (also at the job's end)."""
        profiler, ends = self.profiler, self.ends
        self.profiler, self.ends = None, []
        if profiler is None:
            return
        t_close = _perf()
        try:
            profiler.stop()
            host, device = read_events(profiler.profiler.kineto_results.events(), self.device)
        except Exception as err:  # noqa: BLE001
            self._give_up(f"torch.profiler failed: {_first_line(err)}")
            return
        anchor = next((e for e in host if e.name == ANCHOR), None)
        if anchor is not None and ends:
            tops = top_level(host, anchor.thread)
            if self.device:
                add_device_time(tops, host, device)
            window = Window(self.t_open, tuple(ends[:WINDOW]),
                            (anchor.start_ns + anchor.end_ns) // 2,
                            self.t_anchor)
            for op in ops_of_window(tops, window, self.slots, self.device):
                self.bus.emit("op_end", op)
        recorded_s = ends[-1][1] - self.t_open if ends else 0.0
        self.steps_to_wait = self._gap(len(ends), recorded_s, _perf() - t_close,
                                       self.timer.steps)

    @staticmethod
    def _gap(steps: int, recorded_s: float, reading_s: float, steps_done: int) -> int:
        """Steps until the next window: enough that reading a window (`reading_s`, after
        `steps` steps that took `recorded_s`) stays under BUDGET of the job's time, but no more
        than the job has run so far (`steps_done`: a job's later steps always get windows,
        its warm-up may be long), and at least WINDOW."""
        if steps <= 0 or recorded_s <= 0:
            return WINDOW
        within_budget = math.ceil(reading_s / (BUDGET * recorded_s / steps)) - steps
        return max(WINDOW, min(within_budget, steps_done))

    def _give_up(self, reason: str):
        """No more op timing in this job; the profile says why (a scope event)."""
        self.unavailable = f"the op times: {reason}"
        self.bus.emit("scope", ProbeUnavailableEvent(0.0, "ops", self.unavailable))


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


def _first_line(err) -> str:
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0] if lines else ''}"[:200]
