"""The training steps as the GPU ran them (CUDA events; sources/device_clock.py DeviceSteps with
PyTorch's binding, sources/torch/gpu.py TORCH_CUDA; the summary's device figures, the report's
line). There is no GPU here: DeviceSteps runs on events of a simulated device timeline
(tests/test_torch_gpu_real.py runs it on a real one; tests/test_paddle_device_time.py drives it
through Paddle's hooks), and the summary and report on synthetic profiles."""

import math
from dataclasses import replace

import pytest

from paddletune.profile import load
from paddletune.sources import device_clock
from paddletune.sources.device_clock import DeviceClock, DeviceSteps
from paddletune.sources.torch import gpu
from profiles import make_profile, source_info, step_records
from test_render_reader import render


class Device:
    """A device timeline: each event completes at the time the test queues it at."""

    def __init__(self):
        self.at = 0.0  # when the next recorded event completes on the device
        self.done = 0.0  # the device has run everything queued before this time
        self.made = 0

    def event(self):
        self.made += 1
        return FakeEvent(self)


class FakeEvent:
    def __init__(self, device):
        self.device, self.t = device, None

    def record(self, stream):
        self.t = self.device.at

    def query(self):
        return self.t <= self.device.done

    def synchronize(self):
        self.device.done = max(self.device.done, self.t)

    def elapsed_time(self, later):
        assert self.query() and later.query(), "elapsed_time needs both events done"
        return (later.t - self.t) * 1e3


def _run(steps, idle_s, busy_s, lag=1, copy_every=1):
    """`steps` training steps on a device that idles `idle_s` before each step's first copy
    and is busy `busy_s` after it; the host reads the events `lag` steps behind the device.
    Returns (the totals sent, the device)."""
    device, sent = Device(), []
    clock = DeviceSteps(0, sent.append, new_event=device.event, stream=lambda: None)
    t = 0.0
    for step in range(steps):
        t += idle_s
        device.at = t
        if step % copy_every == 0:
            clock.mark_start()
            clock.mark_start()  # (a second copy of the same step marks nothing)
        t += busy_s
        device.at = t
        clock.step_ended(step)
        device.done = t - lag * (idle_s + busy_s) + 1e-12
    clock.close()
    return sent, device


def test_idle_and_busy_time_per_step_from_the_events():
    sent, device = _run(30, idle_s=0.002, busy_s=0.008)
    final = sent[-1]
    assert final["steps"] == 29 and final["copied"] == 29 and final["last_step"] == 29
    assert final["cycle_s"] == pytest.approx(29 * 0.010)
    assert final["idle_s"] == pytest.approx(29 * 0.002)
    assert final["busy_s"] == pytest.approx(29 * 0.008)
    assert final["place"] == "CUDAPlace(0)"
    assert device.made <= 8  # events are recorded again once read, not made per step


def test_totals_are_sent_at_growing_step_counts_and_read_without_waiting():
    sent, _ = _run(60, idle_s=0.001, busy_s=0.004, lag=3)
    counts = [t["steps"] for t in sent]
    assert counts[:-1] == [1, 2, 5, 10, 20, 50] and counts[-1] == 59
    assert [device_clock._next_write(n) for n in (0, 1, 4, 5, 99, 100)] == [
        1, 2, 5, 10, 100, 200]


def test_a_long_job_also_gets_a_total_after_every_30_s_of_device_time():
    sent, _ = _run(400, idle_s=0.05, busy_s=0.2)  # 0.25 s steps: 30 s is 120 steps
    counts = [t["steps"] for t in sent]
    assert counts == [1, 2, 5, 10, 20, 50, 100, 200, 320, 399], counts
    # (up to 200 the step schedule; 320: 120 steps (30 s) after the last; 399: the end)
    sent, _ = _run(450, idle_s=0.05, busy_s=0.3)  # 30 s: 86 steps
    counts = [t["steps"] for t in sent]
    assert counts == [1, 2, 5, 10, 20, 50, 100, 186, 272, 358, 444, 449], counts
    # (no write at 200 right after 186: the step schedule starts again at twice the count)


def test_steps_without_a_copy_count_in_the_cycle_only():
    sent, _ = _run(21, idle_s=0.003, busy_s=0.007, copy_every=2)
    final = sent[-1]
    assert final["steps"] == 20 and final["copied"] == 10
    assert final["cycle_s"] == pytest.approx(20 * 0.010)
    # a step without its copy's event: its idle time is counted in the cycle only
    assert final["idle_s"] == pytest.approx(10 * 0.003)
    assert final["busy_s"] == pytest.approx(10 * 0.007)


def test_a_host_copy_to_a_device_is_told_from_a_dtype_conversion():
    import torch
    to, cuda = torch.Tensor.to, torch.Tensor.cuda
    assert gpu.target_device(to, ("cuda:1",), {}) == 1
    assert gpu.target_device(to, (torch.device("cuda", 2),), {}) == 2
    assert gpu.target_device(to, (3,), {}) == 3
    assert gpu.target_device(to, (), {"device": "cuda:0", "non_blocking": True}) == 0
    assert gpu.target_device(cuda, (1,), {}) == 1
    assert gpu.target_device(to, (torch.float16,), {}) is None
    assert gpu.target_device(to, ("cpu", torch.float16), {}) is None
    assert gpu.target_device(to, (torch.zeros(1),), {}) is None


# --- the summary and the report ---------------------------------------------------------------
def _totals(rows, place="CUDAPlace(0)"):
    """device_time events from (t, steps, last_step, cycle_s, copied, idle_s, busy_s)."""
    return [{"type": "event", "kind": "device_time", "t": t, "place": place, "steps": n,
             "last_step": last, "cycle_s": cycle, "copied": copied, "idle_s": idle,
             "busy_s": busy} for t, n, last, cycle, copied, idle, busy in rows]


def _profile(tmp_path, rows, name="p.jsonl", **steps):
    records = step_records(**steps)
    for row in records:
        row["place"] = "CUDAPlace(0)"
    return load(make_profile(tmp_path / name, steps=records, extra=_totals(rows),
                             source=source_info("torch")))


# warm-up: step 1 (of 0-39) 5x slower; the totals' steps 1-4 are the warm-up's and a few more
ROWS = [(0.15, 1, 1, 0.050, 1, 0.040, 0.010), (0.16, 2, 2, 0.060, 2, 0.041, 0.019),
        (0.19, 5, 5, 0.090, 5, 0.044, 0.046), (0.25, 10, 10, 0.140, 10, 0.049, 0.091),
        (0.5, 39, 39, 0.430, 39, 0.078, 0.352)]


def test_the_summary_takes_the_steady_steps_between_two_totals(tmp_path):
    profile = _profile(tmp_path, ROWS)
    d = profile.summary.device
    assert profile.summary.warmup_steps == 1  # step 0: the steady steps are 1-39
    # the first total after which only steady steps remain: the one up to step 1 (its
    # cycle runs from step 0's end to step 1's); the summary's are steps 2-39
    assert d.scope == "steady" and d.place == "CUDAPlace(0)"
    assert d.steps == 38 and d.copied_steps == 38
    assert d.cycle_s == pytest.approx((0.430 - 0.050) / 38)
    assert d.idle_share == pytest.approx((0.078 - 0.040) / (0.430 - 0.050))
    assert d.busy_s == pytest.approx((0.352 - 0.010) / 38)


def test_one_total_only_counts_every_step(tmp_path):
    d = _profile(tmp_path, ROWS[-1:]).summary.device
    assert d.scope == "all" and d.steps == 39
    assert d.idle_share == pytest.approx(0.078 / 0.430)


def test_no_device_figures_without_totals(tmp_path):
    assert _profile(tmp_path, []).summary.device is None


def test_the_report_shows_the_device_beside_the_hosts_wait(tmp_path):
    # the host waits 50% of each step for input; the device idles 10%
    rows = [(0.15, 2, 2, 0.02, 2, 0.002, 0.018), (0.5, 39, 39, 0.39, 39, 0.039, 0.351)]
    profile = _profile(tmp_path, rows, feed_s=0.005)
    text = " ".join(" ".join(render(profile.path)).split())
    assert ("On the GPU (CUDA events, 37 steady steps): idle 10.0% of each 10.00 ms step "
            "waiting for the host, busy 9.00 ms from the step's start (its batch or first "
            "copy) to its end; the "
            "host's 50.0% waiting for input overlapped the device's work on the step before"
            ) in text, text
    assert "device_time" not in text  # (not listed among the events)


def test_the_summary_round_trips_through_the_profile_file(tmp_path):
    profile = _profile(tmp_path, ROWS)
    again = load(profile.path)
    assert again.summary.device == profile.summary.device
    assert not math.isnan(again.summary.device.idle_share)


# --- data-side advice bounded by the device --------------------------------------------------
def test_data_side_advice_is_bounded_by_the_devices_idle_time(tmp_path):
    from paddletune import advisors
    from paddletune.advisors import input as input_rules
    # a synchronous loop: 50% of the host's step between steps; the GPU idled only 10%
    rows = [(0.15, 2, 2, 0.02, 2, 0.002, 0.018), (0.5, 39, 39, 0.39, 39, 0.039, 0.351)]
    profile = _profile(tmp_path, rows, gap_s=0.010)
    (advice,) = advisors.advise(profile, [input_rules.input_bound])
    assert advice.expected_speedup == pytest.approx(1 / 0.9)
    assert advice.figures["speedup_before_device_cap"] > 1.5
    assert "at most 1.11x on this GPU: it idled 10.0% of each step" in advice.expected_gain
    low, high = advice.expected_range
    assert high == pytest.approx(1 / 0.9) and low < high
    # without the device's figures the same job is predicted the host's whole gain
    bare = load(make_profile(tmp_path / "bare.jsonl", steps=step_records(gap_s=0.010),
                             source=source_info("torch")))
    (host_only,) = advisors.advise(bare, [input_rules.input_bound])
    assert host_only.expected_speedup == pytest.approx(
        advice.figures["speedup_before_device_cap"])
    assert "device_cap" not in host_only.figures


def test_no_device_bound_when_each_step_takes_several_batches(tmp_path):
    """Gradient accumulation: 4 DataLoader batches per training step. The device's idle time
    is measured only before the step's first batch; the waits for the other three fall in
    what it counts busy: its idle share bounds nothing."""
    from paddletune import advisors
    from paddletune.advisors import device as device_rules
    from profiles import reader_records
    # the GPU idled 10% of each step; the loop waited 8 ms for each batch, the queue empty
    rows = [(0.15, 2, 2, 0.02, 2, 0.002, 0.018), (0.5, 39, 39, 0.39, 39, 0.039, 0.351)]
    steps = step_records(gap_s=0.010)
    for row in steps:
        row["place"] = "CUDAPlace(0)"

    def profile_of(name, batches_per_step):
        reader = reader_records(steps, wait_s=0.008, empty_ratio=0.9)
        for row in reader:
            if row.get("what") == "interval":
                row["pops"] = row["pushes"] = row["steps"] * batches_per_step
        return load(make_profile(tmp_path / name, steps=steps, extra=reader + _totals(rows),
                                 source=source_info("torch")))

    def data_side(profile):
        return [a for a in advisors.advise(profile) if a.id in device_rules.DATA_SIDE
                and a.expected_speedup is not None]

    single = profile_of("single.jsonl", 1)
    assert single.summary.main_loader.consumer.batches_per_step == 1
    assert device_rules.device_cap(single) == pytest.approx(1 / 0.9)
    assert data_side(single) and all(a.figures.get("device_cap") == pytest.approx(1 / 0.9)
                                     for a in data_side(single))
    accumulating = profile_of("accumulating.jsonl", 4)
    assert accumulating.summary.main_loader.consumer.batches_per_step == 4
    assert accumulating.summary.device.idle_share == pytest.approx(0.1)
    assert device_rules.device_cap(accumulating) is None
    advice = data_side(accumulating)
    assert advice and not any("device_cap" in a.figures for a in advice)
    assert max(a.expected_speedup for a in advice) > 1 / 0.9


def test_a_copy_on_another_stream_marks_nothing():
    device, sent = Device(), []
    streams = iter(["main", "main", "side", "main", "main", "main", "main"])
    clock = DeviceSteps(0, sent.append, new_event=device.event,
                            stream=lambda: next(streams))
    device.at = 0.010
    clock.step_ended(0)  # (on "main")
    device.at = 0.012
    clock.mark_start()  # on "main": marks step 1's start
    device.at = 0.020
    clock.step_ended(1)
    device.at = 0.021
    clock.mark_start()  # a prefetcher's copy on "side": not step 2's start
    device.at = 0.030
    device.done = 0.030
    clock.step_ended(2)
    clock.close()
    final = sent[-1]
    assert final["steps"] == 2 and final["copied"] == 1
    assert final["idle_s"] == pytest.approx(0.002) and final["busy_s"] == pytest.approx(0.008)


def test_the_clock_never_raises_into_the_script():
    """Whatever fails in the timing (here: this CPU build of torch has no CUDA to ask) stops
    the timing, not the script's optimizer step or copy."""
    clock = DeviceClock(lambda totals: None, gpu.TORCH_CUDA)
    clock.step_ended(0, 0)
    clock.copy_queued(gpu.torch.Tensor.to, ("cuda:0",), {})
    clock.step_ended(0, 1)
    assert clock.failed
    clock.close()


def test_the_clock_reads_a_copys_target_only_while_a_device_waits_for_its_mark(monkeypatch):
    device, targets = Device(), []
    clock = DeviceClock(lambda totals: None, gpu.TORCH_CUDA)
    clock.devices[0] = DeviceSteps(0, lambda totals: None, new_event=device.event,
                                       stream=lambda: None)
    monkeypatch.setattr(gpu.torch.cuda, "is_current_stream_capturing", lambda: False)
    monkeypatch.setattr(gpu, "target_device",
                        lambda method, args, kwargs: targets.append(args) or 0)
    clock.step_ended(0, 0)
    clock.copy_queued(None, ("x",), {})  # the step's first copy: read, marked
    clock.copy_queued(None, ("y",), {})  # its second: not read
    assert targets == [("x",)] and not clock.devices[0].waiting and not clock.failed
    clock.step_ended(0, 1)
    assert clock.devices[0].waiting


def test_a_dataloader_batch_marks_the_start_and_a_later_copy_in_the_step_does_not():
    """PyTorch marks the step's start as its DataLoader batch is handed over
    (DeviceClock.mark_waiting): a copy made after the step queued kernels (a mid-step
    .to('cuda')) must not end the device's idle time there."""
    device = Device()
    clock = DeviceClock(lambda totals: None, gpu.TORCH_CUDA)
    steps = clock.devices[0] = DeviceSteps(0, lambda totals: None, new_event=device.event,
                                           stream=lambda: None)
    clock.binding = replace(clock.binding, capturing=lambda: False,
                            copy_target=lambda method, args, kwargs: 0)
    steps.step_ended(0)
    assert steps.waiting
    clock.mark_waiting()  # the batch: step 1's start
    marked = steps._start
    assert marked is not None and not steps.waiting
    clock.copy_queued(None, ("cuda:0",), {})  # a copy later in the step: no new mark
    assert steps._start is marked and not clock.failed


def test_the_torch_hooks_mark_each_handed_over_batch():
    from paddletune.sources.torch.hooks import TorchHooks
    from paddletune.sources.torch.source import TorchSource
    marks = []
    hooks = TorchHooks(TorchSource())
    hooks._handed_over()  # on the CPU: no clock, nothing to mark
    hooks._device_clock = type("Clock", (), {"mark_waiting": lambda self: marks.append(1)})()
    hooks._handed_over()
    assert marks == [1]
