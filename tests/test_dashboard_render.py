"""The live dashboard's panels: exact text from a fixed-width, colourless recording console
over canned profile streams (a busy reader-starved job, an empty stream, N/A cases), the
plain line, and the `watch` command through the CLI runner."""

import io

import pytest

from rich.console import Console
from typer.testing import CliRunner

from paddletune.cli import app
from paddletune.live.follow import Follower
from paddletune.live.window import LiveModel
from paddletune.render.dashboard import (Screen, plain_line, render_dashboard, sparkline,
                                         stacked_bar)
from profiles import (make_profile, memory_records, nvml_samples, ops_records_in_steps,
                      reader_records, sched_records, step_records, system_samples)


def frame(state, width=80, height=24):
    console = Console(file=io.StringIO(), width=width, height=height, record=True,
                      force_terminal=False, color_system=None)
    console.print(render_dashboard(state, width, height))
    return [line.rstrip() for line in console.export_text().splitlines()]


def box(lines, title):
    """The text inside the panel whose title starts with `title`."""
    for i, line in enumerate(lines):
        col = line.find("╭─ " + title)
        if col >= 0:
            end = line.index("╮", col)
            inside = []
            for below in lines[i + 1:]:
                cell = below[col:end + 1]
                if cell.startswith("╰"):
                    return [c[2:-1].rstrip() for c in inside]
                inside.append(cell)
    raise AssertionError(f"no panel {title!r} in:\n" + "\n".join(lines))


def model_of(path):
    model = LiveModel()
    model.add(Follower(path).poll())
    return model


def busy_state(tmp_path, now=10.2):
    """A reader-starved job with 2 workers, --ops, memory, 4 cores, 400 of 1000 steps."""
    steps = step_records(n_steps=400, wall_s=0.020, gap_s=0.005)
    extra = (reader_records(steps, wait_s=0.004, empty_ratio=0.6, fill=1, produce_s=0.045,
                            config={"num_workers": 2}, intervals=20)
             + system_samples(n=20, interval_s=0.5, per_core_percent=[97.0, 88.0, 35.0, 12.0])
             + memory_records(steps, capacity=64 << 20)
             + ops_records_in_steps(steps, [("conv2d", 0.009), ("conv2d_grad", 0.008),
                                            ("relu", 0.001)]))
    path = make_profile(tmp_path / "busy.jsonl", steps=steps, extra=extra, exit_reason=None,
                        summary=False, options={"ops": True, "total_steps": 1000},
                        env={"cpu": {"usable_cores": 4, "logical_cores": 4}})
    model = model_of(path)
    model.refresh_advice(now)
    return model.state(now, live=True)


BUSY_80x24 = [
    'paddletune live · train.py · running',
    'elapsed 10.20 s · step 400 of 1,000 (40%) · ETA 15.00 s',
    '╭─ Throughput (last 10 s) ─────────────╮╭─ Step time 25.20 ms (mean of 400) ───╮',
    '│ 40.0 steps/s · 2,560 samples/s       ││ ▓▓▓▓▓▓▒████████████████████████████· │',
    '│ ▆█████████                           ││ ▓ wait 16%  ▒ feed 2%  █ compute 77% │',
    '│ history: 10 s, max 41 steps/s        ││ ░ fetch 1%  · other 4%               │',
    '╰──────────────────────────────────────╯╰──────────────────────────────────────╯',
    '╭─ Reader DataLoader#0 (2 workers) ────╮╭─ Memory (pool, host, GPU) ───────────╮',
    '│ fill ██░░░░░░░░░░░░ 1.0 of 8 12%     ││ alloc 3.0 MiB · reserved 4.0 MiB     │',
    '│ empty 60% of 400 pops · 4.00 ms/pop  ││ peak 8.0 MiB 12.5% of 64.0 MiB pool  │',
    '│ fill over time ▂▂▂▂▂▂▂▂▂▂▂▂▂▂▂▂▂▂▂▂  ││ RSS 219.0 MiB · 8.0 GiB free         │',
    '╰──────────────────────────────────────╯╰──────────────────────────────────────╯',
    '╭─ CPU ────────────────────────────────╮╭─ Top ops (per step, 400 steps) ──────╮',
    '│ process 114% of 400% · machine 50%   ││ conv2d               9.00 ms 50.0%   │',
    '│ cores ██▃▁ (4, mean 58%)             ││ conv2d_grad          8.00 ms 44.4%   │',
    '│ threads 4 · BLAS 1 · load 1.00       ││ relu                 1.00 ms  5.6%   │',
    '╰──────────────────────────────────────╯╰──────────────────────────────────────╯',
    '╭─ Verdict and advice (last 30 s, computed 0 ms ago) ──────────────────────────╮',
    '│ Highly input-bound: 22.0% of each 25.00 ms step waits for input (5.00 ms     │',
    '│ outside the runtime + 0.50 ms feeding), 77.2% computes.                      │',
    '│ ● medium Reader-starved: the queue was empty in 60% of the pops — up to 1.1… │',
    '╰──────────────────────────────────────────────────────────────────────────────╯',
    '■ ok ■ watch ■ problem ■ no data · Ctrl-C stops watching',
]


def test_busy_job_at_the_80x24_minimum(tmp_path):
    assert frame(busy_state(tmp_path)) == BUSY_80x24


def test_a_larger_terminal_gets_more_lines_per_panel_and_the_full_legend(tmp_path):
    lines = frame(busy_state(tmp_path), 100, 30)
    assert len(lines) == 30
    assert box(lines, "Step time") == [
        "▓▓▓▓▓▓▓▒████████████████████████████████████··",
        "▓ wait 4.00 ms 16%  ▒ feed 0.50 ms 2%",
        "█ compute 19.50 ms 77%  ░ fetch 0.20 ms 1%",
        "· other 1.00 ms 4%", ""]
    assert box(lines, "Reader")[3] == "39.7 batches/s · producer 45.00 ms/batch"
    assert box(lines, "Memory")[3] == "GPU N/A — no NVIDIA driver"
    assert box(lines, "Throughput")[3] == "batch 64 · 25,600 samples so far"
    assert box(lines, "Verdict")[2].startswith(
        "● medium Reader-starved: the queue was empty in 60% of the pops — up to 1.19x")


def test_a_terminal_resized_down_to_20_columns_still_draws(tmp_path):
    """A terminal narrowed to 20 columns (or 5 x 3) gets a frame within its width, not a
    crash of the dashboard (which would leave the job without its view)."""
    state = busy_state(tmp_path)
    for width, height in ((20, 10), (20, 24), (5, 3)):
        lines = frame(state, width, height)
        assert lines and all(len(line) <= width for line in lines), (width, lines)


def test_plain_line_for_a_non_terminal(tmp_path):
    assert plain_line(busy_state(tmp_path)) == (
        "paddletune live: 10.20 s · step 400 of 1,000 (40%) · ETA 15.00 s · 40.0 steps/s · "
        "2,560 samples/s · wait 16% feed 2% compute 77% fetch 1% other 4% · queue 1.00/8 "
        "empty 60% · pool peak 8.0 MiB · RSS 219.0 MiB · highly-input-bound")


EMPTY_80x24 = [
    'paddletune live · (waiting for the profile header) · waiting for the profile',
    'elapsed 0 ms · step 0',
    '╭─ Throughput ─────────────────────────╮╭─ Step time ──────────────────────────╮',
    '│ N/A — no training step yet           ││ N/A — no training step in the window │',
    '│                                      ││                                      │',
    '│                                      ││                                      │',
    '╰──────────────────────────────────────╯╰──────────────────────────────────────╯',
    '╭─ Reader queue ───────────────────────╮╭─ Memory (pool, host, GPU) ───────────╮',
    '│ N/A — no DataLoader/PyReader:        ││ N/A — no pool figures until a        │',
    '│ feeding is synchronous               ││ training step ends                   │',
    '│                                      ││ RSS N/A — no system sample yet       │',
    '╰──────────────────────────────────────╯╰──────────────────────────────────────╯',
    '╭─ CPU ────────────────────────────────╮╭─ Top ops ────────────────────────────╮',
    '│ N/A — no system sample yet           ││ N/A — per-op timing is off: profile  │',
    '│                                      ││ with --ops                           │',
    '│                                      ││                                      │',
    '╰──────────────────────────────────────╯╰──────────────────────────────────────╯',
    '╭─ Verdict and advice (last 30 s) ─────────────────────────────────────────────╮',
    '│ N/A — first computed once training steps arrive (every 5 s)                  │',
    '│                                                                              │',
    '│                                                                              │',
    '╰──────────────────────────────────────────────────────────────────────────────╯',
    '■ ok ■ watch ■ problem ■ no data · Ctrl-C stops watching',
]


def test_an_empty_stream_keeps_every_panel_and_says_why(tmp_path):
    lines = frame(LiveModel().state(0.0))
    assert lines == EMPTY_80x24


def test_the_eta_line_before_and_after_the_header_arrives(tmp_path):
    """The first frame of `profile --live --total-steps N` comes before the profile's header
    (which holds N): it must not say that no total was given."""
    assert frame(LiveModel().state(0.0, mode="live"))[1] == "elapsed 0 ms · step 0"
    path = make_profile(tmp_path / "p.jsonl", steps=[], exit_reason=None, summary=False,
                        options={"total_steps": 3000})
    started = model_of(path)
    assert frame(started.state(0.2, mode="live"))[1] == \
        "elapsed 200 ms · step 0 of 3,000 (0%) · ETA —"
    unknown = model_of(make_profile(tmp_path / "q.jsonl", steps=[], exit_reason=None,
                                    summary=False))
    assert frame(unknown.state(0.2, mode="live"))[1] == \
        "elapsed 200 ms · step 0 · ETA N/A (no --total-steps/--steps)"


def test_steps_only_na_panels_and_a_failed_exit(tmp_path):
    path = make_profile(tmp_path / "p.jsonl", exit_status=1, exit_reason="exception",
                        extra=[{"type": "event", "t": 0.5, "kind": "error",
                                "message": "ValueError: bad batch"}])
    loop_model = model_of(path)
    lines = frame(loop_model.state(loop_model.now(), mode="live"))
    assert lines[0] == "paddletune live · train.py · finished: exit 1 (exception)"
    assert lines[1] == "elapsed 550 ms · step 40"
    assert box(lines, "Reader queue") == ["N/A — no DataLoader/PyReader:",
                                          "feeding is synchronous", ""]
    assert box(lines, "Memory") == ["N/A — no pool figures until a",
                                    "training step ends", "RSS N/A — no system sample yet"]
    assert box(lines, "CPU") == ["N/A — no system sample yet", "", ""]
    assert box(lines, "Top ops") == ["N/A — per-op timing is off: profile", "with --ops", ""]
    assert lines[-1] == "■ ok ■ watch ■ problem ■ no data · Ctrl-C stops the job (profile kept)"


def test_memory_pressure_gpus_and_the_parallel_panel(tmp_path):
    steps = step_records()
    oom = {"capacity": 10 << 20, "requested": 1 << 20, "op": "mul"}
    extra = (memory_records(steps, step_peak=9 << 20, capacity=10 << 20, oom=oom)
             + nvml_samples(gpus=(0, 1)) + system_samples() + sched_records(steps))
    model = model_of(make_profile(tmp_path / "p.jsonl", steps=steps, extra=extra))
    lines = frame(model.state(model.now()), 100, 30)
    assert box(lines, "Memory") == [
        "alloc 3.0 MiB · reserved 4.0 MiB",
        "peak 9.0 MiB 90.0% of 10.0 MiB pool · OOM",
        "RSS 204.0 MiB · 8.0 GiB free",
        "GPU 0 4.0 GiB of 16.0 GiB · util 80%",
        "GPU 1 4.0 GiB of 16.0 GiB · util 81%"][:len(box(lines, "Memory"))]
    assert box(lines, "ParallelExecutor (40 steps)")[:3] == [
        "2 places · 4 threads · AllReduce",
        "busy 25% · concurrency 1.10 · ready 0.50",
        "scheduling 11% of the step · 0 scope drops"]


def test_a_finished_pass_and_no_batches_in_the_window(tmp_path):
    steps = step_records()
    extra = reader_records(steps)
    model = model_of(make_profile(tmp_path / "p.jsonl", steps=steps, extra=extra))
    lines = frame(model.state(100.0))  # long after: the intervals left the window
    assert box(lines, "Reader DataLoader#0 (thread)") == ["N/A — pass 1 end", "", ""]
    assert box(lines, "Step time") == ["N/A — no training step in the window", "", ""]


def test_a_loader_whose_batches_the_loop_makes_says_so(tmp_path):
    """PyTorch's num_workers=0: the training loop makes each batch as it asks (the loader's
    `producer` is "loop"), which the panel's title says instead of "thread"."""
    from dataclasses import replace
    state = busy_state(tmp_path)
    state = replace(state, reader=replace(state.reader, workers=0, made_in="loop"))
    lines = frame(state, 100, 30)
    assert any("Reader DataLoader#0 (made in the loop" in line for line in lines), lines


def test_a_long_job_whose_steps_come_as_windows(tmp_path):
    """After each program's first steps, a long job's steps and samples arrive only as
    windows: the panels read them (the pool's per-step figures give way to the window's
    largest step peak; per-core figures are not aggregated)."""
    from test_live_follow import long_job_stream
    records, end, _ = long_job_stream()
    model = LiveModel()
    model.add(records)
    lines = frame(model.state(end), 100, 30)
    assert lines[1] == "elapsed 15.10 s · step 2,803 of 4,000 (70%) · ETA 5.99 s"
    assert box(lines, "Throughput")[:4] == [
        "200.0 steps/s · 6,400 samples/s", "▇█████████████",
        "history: 14 s, max 200 steps/s", "batch 32 · 89,696 samples so far"]
    assert box(lines, "Step time 5.00 ms (mean of 2803)")[1:4] == [
        "▓ wait 0.00 ms 0%  ▒ feed 0.50 ms 10%", "█ compute 3.30 ms 66%  ░ fetch 0.20 ms 4%",
        "· other 1.00 ms 20%"]
    assert box(lines, "Memory")[0] == "step peak 5.0 MiB (largest in the window)"
    assert box(lines, "CPU")[:2] == ["process 400% · machine —", "threads — · BLAS —"]
    assert [row.split()[0] for row in box(lines, "Top ops (per step, 2803 steps)")[:2]] == [
        "mul", "relu"]


def test_bars_and_sparklines():
    bar = stacked_bar([("wait", 0, 0.5), ("feed", 0, 0.0), ("compute", 0, 0.3),
                       ("fetch", 0, 0.0), ("other", 0, 0.2)], 10)
    assert bar.plain == "▓▓▓▓▓███··"
    assert sparkline([0, 5, 10], 10) == "▁▅█"
    assert sparkline([1, 2, 3, 4], 2) == "▆█"  # the newest values fit
    assert sparkline([0, 0], 5) == "▁▁"


def test_the_terminal_screen_uses_the_alternate_screen_and_restores_it(tmp_path):
    out = io.StringIO()
    screen = Screen()
    screen.open(out)
    screen.draw(busy_state(tmp_path))
    screen.close()
    text = out.getvalue()
    assert text.startswith("\x1b[?1049h") and "\x1b[?1049l" in text
    assert "Throughput (last 10 s)" in text and "\x1b[2J" not in text  # no clearing: no flicker


# --- the watch command ---------------------------------------------------------------------------
def test_watch_once_prints_one_frame_of_a_finished_profile(tmp_path):
    path = make_profile(tmp_path / "p.jsonl", extra=system_samples())
    result = CliRunner().invoke(app, ["watch", str(path), "--once"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("paddletune live: 550 ms · step 40 · ")
    assert result.output.rstrip().endswith("finished: exit 0 (returned)")


def test_watch_of_a_finished_profile_replays_it_to_the_end(tmp_path):
    path = make_profile(tmp_path / "p.jsonl", extra=system_samples())
    result = CliRunner().invoke(app, ["watch", str(path), "--plain"])
    assert result.exit_code == 0, result.output
    assert result.output.count("paddletune live: ") == 1  # one line: the job's end


def test_watch_errors(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["watch"])
    assert result.exit_code == 1 and "no profile found" in result.output
    result = CliRunner().invoke(app, ["watch", str(tmp_path), "--once"])
    assert result.exit_code == 1 and "not a profile file" in result.output


def test_live_and_json_do_not_mix(tmp_path):
    script = tmp_path / "t.py"
    script.write_text("print('hi')\n")
    result = CliRunner().invoke(app, ["profile", "--live", "--json", str(script)])
    assert result.exit_code == 2 and "--live" in result.output


def test_reader_workers_copying_the_dataset_show_in_the_advice_panel(tmp_path):
    """Forked reader workers whose private memory grows (copy-on-read of a Python list): the
    live advice panel warns while the job runs, as `advise` does after it."""
    from profiles import worker_samples
    steps = step_records(gap_s=0.001)
    extra = (reader_records(steps, fill=8, workers=(0, 1, 2, 3), intervals=5,
                            config={"num_workers": 4})
             + worker_samples(workers=4, growth=300 * 2 ** 20)
             + system_samples(mem_available_bytes=8 * 2 ** 30))
    path = make_profile(tmp_path / "p.jsonl", steps=steps, extra=extra, exit_reason=None,
                        summary=False, env={"cpu": {"usable_cores": 4, "logical_cores": 4}})
    model = model_of(path)
    now = model.last_t + 0.1
    model.refresh_advice(now)
    panel = " ".join(box(frame(model.state(now), 120, 30), "Verdict"))
    assert "● medium Reader workers copy the dataset: +300.0 MiB each" in panel


def test_the_computes_time_off_the_cpu_shows_where_there_is_room(tmp_path):
    """Steps that measured their training thread's time off its CPU (records.Step
    compute_wait_s, compute_queued_s): under the legend, as the report's rows under compute
    (shares of the step); not at 80 x 24, where the legend takes every row."""
    steps = step_records(n_steps=400, wall_s=0.020, gap_s=0.005)
    for row in steps:
        if not row["startup"]:
            row["compute_wait_s"], row["compute_queued_s"] = 0.006, 0.005
    path = make_profile(tmp_path / "p.jsonl", steps=steps, exit_reason=None, summary=False)
    state = model_of(path).state(10.2, live=True)
    assert (state.breakdown.off_cpu_s, state.breakdown.queued_s) == pytest.approx(
        (0.006, 0.005))
    assert box(frame(state, 100, 30), "Step time")[-1] == (
        "  off CPU 6.00 ms (5.00 ms waiting for a core)")
    assert "  of compute: 6.00 ms 24% off the CPU, 5.00 ms 20% waiting for a core" in box(
        frame(state, 160, 30), "Step time")
    assert box(frame(state, 90, 30), "Step time")[-1] == "  of compute: 6.00 ms 24% off the CPU"
    assert "  off the CPU 6.00 ms 24%" in box(frame(state, 80, 34), "Step time")
    assert "off" not in "\n".join(box(frame(state), "Step time"))


def test_the_time_off_the_cpu_follows_the_window():
    """StepSums: the off-CPU sums count only the steps (and windows) that measured them, and
    leave with them."""
    from paddletune.live.tally import StepSums
    from paddletune.profile.records import Step
    sums = StepSums()
    base = dict(t_s=0.0, program=0, executor=0, step=0, wall_s=0.01, feed_s=0.0,
                compute_s=0.008, fetch_s=0.0, n_ops=1)
    measured = Step(**base, compute_wait_s=0.004, compute_queued_s=0.001)
    unmeasured = Step(**base)
    sums.add_step(measured, 1)
    sums.add_step(unmeasured, 1)
    assert (sums.off_cpu.mean(), sums.queued.mean()) == (0.004, 0.001)
    sums.add_step(measured, -1)
    assert (sums.off_cpu.mean(), sums.queued.mean()) == (None, None)
    sums.add_step(unmeasured, -1)
    assert sums.n == 0 and sums.off_cpu.mean() is None
