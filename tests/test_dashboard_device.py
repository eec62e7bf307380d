"""The dashboard's device line: the steps as the GPU ran them (CUDA events, device_time
totals) in the Step time panel, on the fixed-width recording console of
test_dashboard_render.py: the latest two totals while the job runs, the summary's (the
report's) figures once it is in, N/A and why on a machine with a GPU but no totals (where the
panel has a spare line), and no line at all on a machine without a GPU."""

import io
from dataclasses import replace

import pytest
from typer.testing import CliRunner

from paddletune.cli import app
from paddletune.live.state import WHOLE_RUN
from paddletune.live.window import LiveModel
from paddletune.profile import load, records as r
from paddletune.profile.device_figures import between, latest_start
from paddletune.render.dashboard import plain_line, watch
from test_render_reader import render
from profiles import make_profile, source_info, step_records
from test_dashboard_render import box, busy_state, frame, model_of

GPU_ENV = {"gpu": {"available": True, "driver": "550.54",
                   "devices": [{"index": 0, "name": "Test GPU",
                                "memory_total_bytes": 16 << 30}]}}
WRITTEN_AT = (1, 2, 5, 10, 20)  # the source's schedule, up to step 20 of a 40-step job


def device_totals(written_at=WRITTEN_AT, end=None, copies=True):
    """device_time events as DeviceSteps writes them: each step (index 1 on) 10 ms on the
    device, the first five idle 6 ms waiting for the host, the later ones 2 ms (20%)."""
    rows, cycle, idle, copied = [], 0.0, 0.0, 0
    counts = list(written_at) + ([end] if end else [])
    for n in range(1, max(counts) + 1):
        cycle += 0.010
        idle += (0.006 if n <= 5 else 0.002) if copies else 0.0
        copied += 1 if copies else 0
        if n in counts:
            rows.append({"type": "event", "kind": "device_time", "t": 0.1 + 0.011 * n,
                         "place": "CUDAPlace(0)", "steps": n, "last_step": n,
                         "cycle_s": round(cycle, 9), "copied": copied,
                         "idle_s": round(idle, 9), "busy_s": round(cycle - idle, 9)
                         if copies else 0.0})
    return rows


def gpu_job(tmp_path, extra, name="gpu.jsonl", running=True, framework="torch", env=GPU_ENV):
    steps = step_records(n_steps=40)
    for row in steps[1:]:
        row["place"] = "CUDAPlace(0)"
    return make_profile(tmp_path / name, steps=steps, extra=extra, env=env,
                        source=source_info(framework),
                        exit_reason=None if running else "returned", summary=not running)


def device_row(lines):
    """The Step time panel's device line."""
    return next(row for row in box(lines, "Step time") if row.startswith("GPU"))


def running_state(path, **extra):
    model = model_of(path)
    return model.state(model.last_t + 0.05, live=True, **extra)


# --- while the job runs: the latest two totals -----------------------------------------------
def test_the_latest_two_totals_at_the_80x24_minimum(tmp_path):
    state = running_state(gpu_job(tmp_path, device_totals()))
    d = state.device
    assert (d.scope, d.first_step, d.last_step) == ("latest", 12, 21)
    assert d.figures.steps == 10 and d.figures.idle_share == pytest.approx(0.2)
    assert d.figures.busy_s == pytest.approx(0.008)
    lines = frame(state)
    # the device line takes the legend's second row: the panel has three at 24 lines
    assert box(lines, "Step time 11.00 ms (mean of 40)") == [
        "▒██████████████████████████████████░", "▓ wait 0%  ▒ feed 5%  █ compute 94%",
        "GPU idle 20.0% · busy 8.00 ms"], "\n".join(lines)
    # the rest of the frame as without the device's figures
    cpu_like = frame(replace(state, device=None))
    assert [i for i, (a, b) in enumerate(zip(lines, cpu_like)) if a != b] == [5]


def test_wider_terminals_say_which_steps(tmp_path):
    state = running_state(gpu_job(tmp_path, device_totals()))
    step_time = box(frame(state, 100, 30), "Step time")
    assert step_time[1:] == ["▓ wait 0.00 ms 0%  ▒ feed 0.50 ms 5%",
                             "█ compute 10.30 ms 94%  ░ fetch 0.20 ms 2%",
                             "· other 0.00 ms 0%", "GPU idle 20.0% · busy 8.00 ms (steps 12–21)"]
    assert device_row(frame(state, 150, 30)) == \
        "GPU (steps 12–21): idle 20.0% of each 10.00 ms step, busy 8.00 ms"
    assert device_row(frame(state, 90, 30)) == "GPU idle 20.0% of 10.00 ms · busy 8.00 ms"
    assert device_row(frame(state, 200, 30)) == (
        "GPU (steps 12–21): idle 20.0% of each 10.00 ms step waiting for the host, busy "
        "8.00 ms")


def test_the_first_total_alone_counts_the_warm_up(tmp_path):
    state = running_state(gpu_job(tmp_path, device_totals(written_at=(1,))))
    assert state.device.scope == "first" and state.device.figures.steps == 1
    assert device_row(frame(state, 120, 30)) == \
        "GPU idle 60.0% · busy 4.00 ms (1 step, warm-up included)"


def test_the_plain_line_and_watch_show_the_device(tmp_path):
    path = gpu_job(tmp_path, device_totals())
    assert plain_line(running_state(path)).endswith(
        " · GPU idle 20.0% busy 8.00 ms (steps 12–21) · verdict pending")
    result = CliRunner().invoke(app, ["watch", str(path), "--once"])
    assert result.exit_code == 0, result.output
    assert "GPU idle 20.0% busy 8.00 ms (steps 12–21)" in result.output, result.output


def test_steps_without_a_copy_show_the_device_step_time_only(tmp_path):
    state = running_state(gpu_job(tmp_path, device_totals(copies=False)))
    assert state.device.figures.idle_share is None
    assert box(frame(state), "Step time")[-1] == "GPU 10.00 ms per step (steps 12–21)"
    assert box(frame(state, 60, 24), "Step time")[-1] == "GPU 10.00 ms per step"
    assert device_row(frame(state, 120, 30)) == \
        "GPU 10.00 ms per step (steps 12–21), no copy to split"


def test_a_speed_test_between_the_latest_totals_counts_every_step():
    """As the summary's rule: no starting total written before the speed test's end when
    the last is after it (the replayed batches hide the waits for data); with none left,
    every step counts."""
    totals = [r.DeviceTimeEvent(t, "CUDAPlace(0)", n, n, n * 0.01, n, n * 0.002, n * 0.008)
              for t, n in ((0.1, 10), (0.2, 20), (0.3, 50))]
    assert latest_start(totals, None) is totals[1]
    assert latest_start(totals, (0.05, 0.25)) is None
    assert latest_start(totals, (0.05, 0.15)) is totals[1]
    assert latest_start(totals[:2] + [totals[1]], None) is totals[0]  # (an unchanged end)
    assert between(None, totals[2]).scope == "all" and between(None, totals[2]).steps == 50


# --- once the job ends: the report's figures ---------------------------------------------------
def test_a_finished_job_shows_the_reports_figures(tmp_path):
    path = gpu_job(tmp_path, device_totals(end=39), running=False)
    profile = load(path)
    model = model_of(path)
    state = model.state(model.now(), live=True)
    assert state.device.scope == WHOLE_RUN and state.device.figures == profile.summary.device
    d = profile.summary.device
    assert d.scope == "steady" and d.steps == 38  # the summary's steady steps: 3-40
    report = " ".join(" ".join(render(path)).split())
    assert ("On the GPU (CUDA events, 38 steady steps): idle 24.2% of each 10.00 ms step "
            "waiting for the host, busy 7.58 ms") in report
    assert device_row(frame(state, 200, 30)) == (
        "GPU (38 steady steps): idle 24.2% of each 10.00 ms step waiting for the host, busy "
        "7.58 ms")
    assert box(frame(state), "Step time")[-1] == "GPU idle 24.2% · busy 7.58 ms"
    out = io.StringIO()  # `watch --once` of the finished profile: its last frame
    watch(path, once=True, file=out)
    assert "│ GPU idle 24.2% · busy 7.58 ms" in out.getvalue(), out.getvalue()


# --- no totals ---------------------------------------------------------------------------------
def test_a_cpu_job_has_no_device_line(tmp_path):
    """A machine without a GPU: no device line, no N/A (the CPU dashboard as it was)."""
    state = busy_state(tmp_path)
    assert state.device is None
    assert not any("GPU" in row for row in box(frame(state, 100, 30), "Step time"))
    cpu_torch = running_state(gpu_job(tmp_path, [], name="cpu.jsonl", env={}))
    assert cpu_torch.device is None
    assert "GPU" not in plain_line(cpu_torch)


@pytest.mark.parametrize("framework, reason", [
    ("torch", "no CUDA-event total yet"), ("paddle", "no CUDA-event total yet"),
    ("fluid", "embedded runtime: not timed")])
def test_a_gpu_machine_without_totals_says_why_where_there_is_room(tmp_path, framework,
                                                                   reason):
    state = running_state(gpu_job(tmp_path, [], framework=framework))
    assert state.device.figures is None and state.device.reason == reason
    assert box(frame(state, 100, 30), "Step time")[-1] == f"GPU time N/A — {reason}"
    # at 80 x 24 the legend keeps its rows: an N/A takes no room from figures
    assert box(frame(state), "Step time")[1:] == ["▓ wait 0%  ▒ feed 5%  █ compute 94%",
                                                  "░ fetch 2%  · other 0%"]
    assert "GPU" not in plain_line(state)


def test_a_finished_torch_job_without_totals(tmp_path):
    model = model_of(gpu_job(tmp_path, [], running=False))
    assert model.state(model.now()).device.reason == "no CUDA-event totals"


def test_a_device_line_without_a_step_in_the_window(tmp_path):
    model = model_of(gpu_job(tmp_path, device_totals()))
    lines = frame(model.state(100.0, live=False))  # long after: the steps left the window
    assert box(lines, "Step time") == ["N/A — no training step in the window",
                                       "GPU idle 20.0% · busy 8.00 ms", ""]


def test_the_state_holds_typed_records(tmp_path):
    model = LiveModel()
    assert model.state(0.0).device is None  # no header: nothing to say
    state = running_state(gpu_job(tmp_path, device_totals()))
    assert type(state.device.figures).__name__ == "DeviceFigures"
