"""The training steps as the GPU ran them, timed with the device's own timing events (CUDA
events), for any framework: an event recorded on the device's current stream where each
training step ends, and one where the next step's input reaches the device (its first
host-to-device copy, or before it the DataLoader handing the loop its batch; a static-graph
run taking its feed). The
events are read later without waiting (query), folded into totals (idle: the previous step's
end to the next step's mark, the GPU waiting for the host; busy: the rest) and sent as
records.DeviceTimeEvent's fields at 1, 2, 5, 10, 20, 50, ... timed steps, after every
WRITE_EVERY_S of the device's step time (a long job's live view keeps moving: the dashboard
reads the latest two totals), and at the end.

Imports no framework: a framework binds it (DeviceBinding: how to make a timing event, the
current stream of device n, whether a graph capture is under way, where a copy goes;
sources/torch/gpu.py TORCH_CUDA, sources/paddle/gpu.py paddle_cuda())."""

from collections import deque
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Protocol

WRITE_AT = (1, 2, 5)  # device_time totals written at 1, 2, 5, 10, 20, 50, ... steps
WRITE_EVERY_S = 30.0  # and whenever the steps since the last write took this much device time


class TimingEvent(Protocol):
    """What the clock needs of a framework's timing event (torch.cuda.Event's names)."""

    def record(self, stream) -> None: ...

    def query(self) -> bool: ...  # whether the device has reached it (never waits)

    def synchronize(self) -> None: ...  # waits until the device reaches it

    def elapsed_time(self, end: "TimingEvent") -> float: ...  # milliseconds until `end`


@dataclass(frozen=True)
class DeviceBinding:
    """A framework's side of the clock."""

    new_event: Callable[[], TimingEvent]  # a new timing event
    current_stream: Callable[[int], object]  # device n's current stream (compared with ==)
    capturing: Callable[[], bool]  # whether a CUDA graph is being captured now
    # the device index a host tensor's copy method call (`method`, args, kwargs) copies to,
    # None when it copies to no device (a dtype conversion on the host)
    copy_target: Callable[[Callable, tuple, dict], Optional[int]]


class DeviceClock:
    """DeviceSteps for each device the training steps run on, made as a step first ends on
    it (the first step, a warm-up, is not timed); `send` gets their totals. It runs inside
    the script's own calls (the optimizer's step, a tensor's copy, the DataLoader's next
    batch): nothing it does may raise there, so a failure stops the timing (the totals so
    far are kept), and nothing is recorded while a CUDA graph is being captured."""

    def __init__(self, send: Callable[[dict], None], binding: DeviceBinding):
        self.send, self.binding = send, binding
        self.devices: Dict[int, "DeviceSteps"] = {}
        self.failed = False

    @property
    def waiting(self) -> bool:
        """Whether some device waits for its next step's start to be marked."""
        return not self.failed and any(steps.waiting for steps in self.devices.values())

    def copy_queued(self, method, args, kwargs):
        """A host tensor's copy method is about to run (`method(tensor, *args, **kwargs)`,
        the copy wrapper's callback, sources/device_copies.py): the first copy to a device
        after its step's end marks the next step's start."""
        self.mark_start(self.binding.copy_target, method, args, kwargs)

    def mark_start(self, device_of: Callable[..., Optional[int]], *args):
        """The next step's input reaches the device `device_of(*args)` names now (None: no
        device): on a device waiting for its mark, this marks the step's start. `device_of`
        is called only while some device waits (a step's later marks cost one check)."""
        if self.waiting:
            self._guarded(self._mark, device_of, args)

    def mark_waiting(self):
        """The next step's input was handed to the loop now (a DataLoader's batch): marks
        the step's start on each device still waiting for its mark."""
        if self.waiting:
            self._guarded(self._mark_waiting)

    def _mark_waiting(self):
        for steps in self.devices.values():
            if steps.waiting:
                steps.mark_start()

    def _mark(self, device_of, args):
        steps = self.devices.get(device_of(*args))
        if steps is not None:
            steps.mark_start()

    def step_ended(self, device: int, step: int):
        """The training step `step` queued its last kernels on `device`."""
        if self.failed:
            return
        steps = self.devices.get(device)
        if steps is None:
            steps = self.devices[device] = steps_on(self.binding, device, self.send)
        self._guarded(steps.step_ended, step)

    def _guarded(self, action, *args):
        try:
            if not self.binding.capturing():
                action(*args)
        except Exception:  # noqa: BLE001  (the script's step goes on untimed)
            self.failed = True

    def close(self):
        for steps in self.devices.values():
            try:
                steps.close()
            except Exception:  # noqa: BLE001  (a failed device fails the wait too)
                pass


def steps_on(binding: DeviceBinding, device: int, send: Callable[[dict], None]
             ) -> "DeviceSteps":
    """DeviceSteps of `device`, its events made and recorded as `binding` says."""
    return DeviceSteps(device, send, binding.new_event,
                       lambda: binding.current_stream(device))


# --- the steps as the device ran them ------------------------------------------------------------
class DeviceSteps:
    """Timing events on one device's current stream: one where each training step ends
    (after the optimizer step queued its kernels), one where the next step's start is marked
    (its first host-to-device copy, or what the framework marks instead). Read without
    waiting (query) as later steps end, folded into totals (records.DeviceTimeEvent's fields)
    sent through `send` at growing step counts and by close(). `new_event` makes a timing
    event, `stream` gives the device's current stream (tests pass their own)."""

    def __init__(self, device: int, send: Callable[[dict], None],
                 new_event: Callable[[], TimingEvent], stream: Callable[[], object]):
        self.device, self.send = device, send
        self._new_event, self._stream = new_event, stream
        self._spare: List = []  # events done with, to record again
        self._pending = deque()  # (step, start event or None, end event), oldest first
        self._start = None  # this step's start mark's event
        self._end_stream = None  # the stream the step's end was recorded on
        self._last_end = None  # the newest end event read
        self.steps = self.copied = self.last_step = 0
        self.cycle_s = self.idle_s = self.busy_s = 0.0
        self._next_write = 1
        self._cycle_written = 0.0  # cycle_s at the latest write

    @property
    def waiting(self) -> bool:
        """Whether the next step's start is still to be marked."""
        return self._start is None and self._pending is not None

    def mark_start(self):
        """The step's input reaches the device now (a host-to-device copy is about to be
        queued): the step's first mark is its start, when it is made on the stream the
        steps end on (a prefetcher's copy on a side stream says nothing of when that
        stream's work can begin)."""
        if self._start is None and self._pending is not None:
            stream = self._stream()
            if self._end_stream is None or stream == self._end_stream:
                self._start = self._record(stream)

    def step_ended(self, step: int):
        """The training step `step` queued its last kernels."""
        if self._pending is None:
            return
        self._end_stream = self._stream()
        self._pending.append((step, self._start, self._record(self._end_stream)))
        self._start = None
        self._read(block=False)

    def close(self):
        """Waits for the last step's end on the device, sends the totals, stops."""
        if self._pending is None:
            return
        try:
            self._read(block=True)
        finally:
            self._pending = None
        if self.steps:
            self.send(self._totals())

    def _record(self, stream):
        event = self._spare.pop() if self._spare else self._new_event()
        event.record(stream)
        return event

    def _read(self, block: bool):
        pending = self._pending
        while pending:
            step, start, end = pending[0]
            if block:
                end.synchronize()
                if start is not None:
                    start.synchronize()
            elif not (end.query() and (start is None or start.query())):
                return
            pending.popleft()
            self._fold(step, start, end)

    def _fold(self, step, start, end):
        last = self._last_end
        if last is not None:
            cycle = last.elapsed_time(end) / 1e3  # (milliseconds)
            self.steps += 1
            self.cycle_s += cycle
            self.last_step = step
            if start is not None:
                idle = min(max(last.elapsed_time(start) / 1e3, 0.0), cycle)
                self.copied += 1
                self.idle_s += idle
                self.busy_s += cycle - idle
            self._spare.append(last)
        if start is not None:
            self._spare.append(start)
        self._last_end = end
        due = self.cycle_s - self._cycle_written >= WRITE_EVERY_S
        if self.steps >= self._next_write or due:
            self.send(self._totals())
            self._cycle_written = self.cycle_s
            while self._next_write < 2 * self.steps:  # (after a timed write too: never
                self._next_write = _next_write(self._next_write)  # two writes close by)

    def _totals(self) -> dict:
        return {"place": f"CUDAPlace({self.device})", "steps": self.steps,
                "last_step": self.last_step, "cycle_s": round(self.cycle_s, 9),
                "copied": self.copied, "idle_s": round(self.idle_s, 9),
                "busy_s": round(self.busy_s, 9)}


def _next_write(count: int) -> int:
    """The step count after `count` in 1, 2, 5, 10, 20, 50, ..."""
    scale = 1
    while True:
        for mantissa in WRITE_AT:
            if mantissa * scale > count:
                return mantissa * scale
        scale *= 10
