"""--ops for an eager framework through its own profiler (torch.profiler, paddle.profiler):
the profiler records WINDOW training steps at a time, and each op it saw is announced as one
op_end of its step when the window closes. Pure Python: the framework's Recorder starts,
stops and reads its profiler (sources/torch/profiler_ops.py, sources/paddle/profiler_ops.py).

What an op is: a top-level operator (one the framework ran for the script, not one inside
another), with its role (forward, backward, update) and its host span; on a GPU, its kernels'
device time (timing "cupti": the profilers read the GPU's work through CUPTI), and an op that
launched no kernel is left out.

A window records WINDOW + 1 steps and announces the first WINDOW: a framework's range around
the optimizer's update may also hold the step hooks (paddletune's, which end the step and
stop the profiler), so the last step's update can be cut off; for the same reason an op ends
by its step's end.

A window costs the job: the profiler records each operator (about 1 µs per op on the CPU), and
stopping it and reading its events takes milliseconds. That reading is left out of the step
times (StepTimer.pause: the next step starts after it, and StepEnd.paused_s carries it to the
ops probe's overhead). The first window opens after FIRST_STEP steps; the steps between two
windows are as many as keep the reading under BUDGET of the job's time, but at least WINDOW
and at most as many as the job has run so far (so a job of fast steps still gets windows late
in its run, past a long warm-up: 10-19, 42-51, 106-115, 234-243, ...). The profilers record no
op id, so an op is known by its type and its rank among the step's ops of that type (by
start), the index that pair got when first seen.

Both frameworks run one profiler at a time: a script that starts its own gets it (the
framework's hooks put `guard` around what starts one, or call `stop_for_good`). Our open
window is closed first (its ops announced) and op timing stops for the rest of the job, the
reason sent as a scope event (the report's `Ops: N/A`); so it does when ours cannot start."""

import bisect
import gc
import math
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Protocol, Tuple

from ...profile.records import ProbeUnavailableEvent
from .bus import Bus, OpEnd
from .loaders import error_detail
from .steps import StepTimer

WINDOW = 10  # steps per profiler window
FIRST_STEP = 10  # steps before the first window opens
BUDGET = 0.05  # the windows' reading: at most this share of the job's time
FORWARD, BACKWARD, OPTIMIZE = 0, 1, 2  # OpEnd.role, as the Fluid op roles number them
MESSAGE_MAX = 200  # characters of a profiler's error kept in the reason

_perf = time.perf_counter


@dataclass
class TopOp:
    """A top-level op: its type, role and host span (the profiler's clock, ns); its kernels'
    device time (GPU)."""

    type: str
    role: int
    thread: int
    start_ns: int
    end_ns: int
    device_ns: int = 0
    first_device_ns: Optional[int] = None

    def add_kernel(self, start_ns: int, end_ns: int):
        self.device_ns += max(end_ns - start_ns, 0)
        if self.first_device_ns is None or start_ns < self.first_device_ns:
            self.first_device_ns = start_ns


@dataclass(frozen=True)
class Window:
    """A window's steps on the job's clock: it opened at `t_open` (a step's end, perf_counter
    seconds); `ends` is each step it recorded, (step, its end, its begin: after the
    evaluation passes left out of it), in order. `anchor_ns` and `anchor_t` are one moment on
    the profiler's clock and on perf_counter's."""

    t_open: float
    ends: Tuple[Tuple[int, float, float], ...]
    anchor_ns: int
    anchor_t: float


def clock_offset(start_ns: int, end_ns: int, t_before: float, t_inside: float,
                 t_after: float) -> float:
    """The profiler's clock less perf_counter's, in seconds, from an anchor range it recorded
    over [start_ns, end_ns]: entered between `t_before` and `t_inside` and left between
    `t_inside` and `t_after` (perf_counter), each end bounds the offset; the middle of what
    both allow (a thread taken off its core at one end widens that end's bounds, and the
    other's decide: the range's middle would move by half the delay, and a window's ops by
    whole steps)."""
    start_s, end_s = start_ns / 1e9, end_ns / 1e9
    low = max(start_s - t_inside, end_s - t_after)
    high = min(start_s - t_before, end_s - t_inside)
    if low > high:  # (the clocks' resolutions disagree by a little: the range's middle)
        return (start_s + end_s) / 2 - t_inside
    return (low + high) / 2


ANCHOR_TRIES = 3  # anchors recorded as a window opens; the tightest is the clocks' link


def tightest(anchored: Callable[[str], Tuple[float, float, float]],
             base: str) -> Tuple[str, Tuple[float, float, float]]:
    """(name, (t_before, t_inside, t_after)) of the anchor, of ANCHOR_TRIES recorded by
    `anchored(name)` (named `base#i`), read between the closest perf_counter readings: a
    thread taken off its core at both ends of one would move a window's ops by the delay (a
    step's last ops into the next step, on a loaded machine)."""
    best = None
    for i in range(ANCHOR_TRIES):
        name = f"{base}#{i}"
        around = anchored(name)
        if best is None or around[2] - around[0] < best[1][2] - best[1][0]:
            best = (name, around)
    return best


def ops_of_window(tops: List[TopOp], window: Window, slots: Dict[Tuple[str, int], int],
                  device: bool) -> List[OpEnd]:
    """The OpEnd of each top-level op (by start) that started inside one of the window's
    steps, on the step's clock, ending by the step's end; with `device`, its kernels' time
    (ops without any are left out). An op that started before its step began ran in an
    evaluation pass left out of the step (StepEnd.eval_s): left out here too."""
    t_ends = [end[1] for end in window.ends]
    out, ranks, current = [], {}, None
    for op in tops:
        t_start = window.anchor_t + (op.start_ns - window.anchor_ns) / 1e9
        k = bisect.bisect_left(t_ends, t_start)
        if t_start <= window.t_open or k == len(t_ends) or t_start < window.ends[k][2]:
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
        else:
            t_end = min(t_start + (op.end_ns - op.start_ns) / 1e9, t_ends[k])
            out.append(OpEnd(0, step, index, op.type, op.role, t_start, t_end))
    return out


class Recorder(Protocol):
    """A framework's profiler, one window at a time."""

    name: str  # "torch.profiler"

    def start(self, device: bool) -> float:
        """Start recording (the GPU's work too with `device`); returns perf_counter at the
        anchor: a moment the read events find again (`stop`). Raises when it cannot."""

    def stop(self, t_open: float, ends: Tuple[Tuple[int, float], ...], t_anchor: float,
             slots: Dict[Tuple[str, int], int]) -> List[OpEnd]:
        """Stop recording and read the window's ops (ops_of_window). Raises on failure."""


@dataclass
class OpWindows:
    """`recorder`'s windows over the training steps, their ops announced on `bus`."""

    bus: Bus
    timer: StepTimer
    recorder: Recorder
    slots: Dict[Tuple[str, int], int] = field(default_factory=dict)
    unavailable: Optional[str] = None
    recording: bool = False
    t_open: float = 0.0
    t_anchor: float = 0.0
    ends: List[Tuple[int, float, float]] = field(default_factory=list)
    steps_to_wait: int = FIRST_STEP
    starting: bool = False  # our own profiler is starting (not the script's)

    def guard(self, original: Callable, framework: str) -> Callable:
        """`original` (what starts a `framework` profiler) wrapped: a script's own profiler
        closes ours for good before it starts."""
        windows = self

        def start_a_profiler(*args, **kwargs):
            if not windows.starting:
                windows.stop_for_good(f"the script starts its own profiler, and {framework} "
                                      f"runs one at a time")
            return original(*args, **kwargs)

        start_a_profiler.__wrapped__ = original
        return start_a_profiler

    def stop_for_good(self, reason: str, announce: bool = True):
        """The script starts its own profiler (`reason`): the open window is closed, and no
        other opens; with `announce`, the profile says why (a scope event)."""
        self.close()
        if not self.unavailable:
            self._give_up(reason, announce)

    def step_ended(self, step: int, t_end: float, place: str):
        """The training step `step` ended at `t_end` (its StepEnd already sent)."""
        if self.unavailable:
            return
        if not self.recording:
            self.steps_to_wait -= 1
            if self.steps_to_wait <= 0:
                self._paused(self._open, t_end, place.startswith("CUDA"))
            return
        self.ends.append((step, t_end, self.timer.last_begin))
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
        self.starting = True
        try:
            t_anchor = self.recorder.start(device)
        except Exception as err:  # noqa: BLE001  (a script's profiler already runs)
            self._give_up(f"{self.recorder.name} could not start ({error_detail(err)[:MESSAGE_MAX]}); does "
                          f"the script run its own? One profiler runs at a time")
            return
        finally:
            self.starting = False
        self.recording, self.t_open, self.t_anchor, self.ends = True, t_open, t_anchor, []

    def close(self):
        """Stop the window's profiler and announce its ops (also at the job's end)."""
        if not self.recording:
            return
        ends, self.recording, self.ends = tuple(self.ends), False, []
        t_close = _perf()
        try:
            ops = self.recorder.stop(self.t_open, ends[:WINDOW], self.t_anchor, self.slots)
        except Exception as err:  # noqa: BLE001
            self._give_up(f"{self.recorder.name} failed: {error_detail(err)[:MESSAGE_MAX]}")
            return
        for op in ops:
            self.bus.emit("op_end", op)
        recorded_s = ends[-1][1] - self.t_open if ends else 0.0
        self.steps_to_wait = gap(len(ends), recorded_s, _perf() - t_close, self.timer.steps)

    def _give_up(self, reason: str, announce: bool = True):
        """No more op timing in this job; the profile says why (a scope event)."""
        self.unavailable = f"the op times: {reason}"
        if announce:
            self.bus.emit("scope", ProbeUnavailableEvent(0.0, "ops", self.unavailable))


def gap(steps: int, recorded_s: float, reading_s: float, steps_done: int) -> int:
    """Steps until the next window: enough that reading a window (`reading_s`, after `steps`
    steps that took `recorded_s`) stays under BUDGET of the job's time, but no more than the
    job has run so far (`steps_done`: a job's later steps always get windows, its warm-up may
    be long), and at least WINDOW."""
    if steps <= 0 or recorded_s <= 0:
        return WINDOW
    within_budget = math.ceil(reading_s / (BUDGET * recorded_s / steps)) - steps
    return max(WINDOW, min(within_budget, steps_done))
