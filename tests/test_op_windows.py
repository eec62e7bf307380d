"""The profiler windows behind --ops on PyTorch and Paddle 3 (sources/eager/op_windows.py),
with a fake recorder: when windows open and close, what their reading costs the steps, and
how a failing or foreign profiler ends them."""

from paddletune.sources.eager import op_windows as ow
from paddletune.sources.eager.bus import Bus, OpEnd
from paddletune.sources.eager.steps import StepTimer


class FakeRecorder:
    name = "fake.profiler"

    def __init__(self, fail_start=False, fail_stop=False):
        self.fail_start, self.fail_stop = fail_start, fail_stop
        self.started, self.stopped = [], []

    def start(self, device):
        if self.fail_start:
            raise RuntimeError("another profiler is running")
        self.started.append(device)
        return 100.0

    def stop(self, t_open, ends, t_anchor, slots):
        if self.fail_stop:
            raise RuntimeError("the trace is corrupt")
        self.stopped.append(ends)
        return [OpEnd(0, step, 0, "op", 0, t, t) for step, t, _ in ends]


def _job(steps, recorder, place="CPUPlace"):
    bus, got = Bus(), {"op_end": [], "scope": [], "step_end": []}
    for name, sink in got.items():
        bus.subscribe(name, sink.append)
    timer = StepTimer(bus)
    timer.reset(t_start=0.0)
    windows = ow.OpWindows(bus, timer, recorder)
    for _ in range(steps):
        timer.step_done(place)
        windows.step_ended(timer.steps - 1, timer.last_end, place)
    return windows, got


def test_the_first_window_opens_after_ten_steps_and_announces_ten():
    recorder = FakeRecorder()
    windows, got = _job(25, recorder, place="CUDAPlace(0)")
    assert recorder.started == [True]  # (the GPU's work too, on a CUDA place)
    [ends] = recorder.stopped
    assert [step for step, _, _ in ends] == list(range(10, 20))  # 10-20 recorded, 10-19 read
    assert [op.step for op in got["op_end"]] == list(range(10, 20))
    assert windows.steps_to_wait >= ow.WINDOW and not windows.recording
    paused = {e.step: e.paused_s for e in got["step_end"] if e.paused_s}
    assert set(paused) == {10, 21}  # the opening and the reading, left out of the next step


def test_a_profiler_that_cannot_start_ends_the_windows_with_the_reason():
    recorder = FakeRecorder(fail_start=True)
    windows, got = _job(40, recorder)
    [why] = got["scope"]
    assert why.probe == "ops" and "fake.profiler could not start" in why.message
    assert "another profiler is running" in why.message and got["op_end"] == []


def test_a_reading_that_fails_ends_the_windows_with_the_reason():
    windows, got = _job(40, FakeRecorder(fail_stop=True))
    [why] = got["scope"]
    assert "fake.profiler failed: RuntimeError: the trace is corrupt" in why.message
    assert not windows.recording and got["op_end"] == []


def test_a_scripts_own_profiler_closes_the_open_window_once_and_says_why():
    recorder = FakeRecorder()
    windows, got = _job(15, recorder)
    assert windows.recording
    calls = []
    start = windows.guard(lambda *args: calls.append(args), "Fake")
    start("the script's")
    start("the script's again")
    assert calls == [("the script's",), ("the script's again",)]  # the script's go on
    assert [[s for s, _, _ in ends] for ends in recorder.stopped] == [[10, 11, 12, 13, 14]]
    [why] = got["scope"]
    assert "the script starts its own profiler, and Fake runs one at a time" in why.message
    windows.step_ended(99, 1.0, "CPUPlace")
    assert not windows.recording and recorder.started == [False]


def test_our_own_start_is_not_the_scripts():
    recorder = FakeRecorder()
    windows, _ = _job(5, recorder)
    calls = []
    start = windows.guard(lambda: calls.append(1), "Fake")
    windows.starting = True  # (as OpWindows._open sets it around the recorder's start)
    start()
    assert calls == [1] and windows.unavailable is None


def test_a_quiet_stop_records_the_reason_without_a_scope_event():
    windows, got = _job(5, FakeRecorder())
    windows.stop_for_good("the other graph's profiler", announce=False)
    assert got["scope"] == [] and "the other graph's profiler" in windows.unavailable
