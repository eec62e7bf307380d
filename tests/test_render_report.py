"""The report view: exact text from a fixed-width, colourless console, and summary_json."""

import dataclasses
import json

import pytest
from rich.console import Console

from paddletune.profile import load, records, write_records
from paddletune.profile.schema import encode
from paddletune.render.report import bar, command_line, render_report, summary_json
from profiles import (EAGER_SOURCE, eager_step_records, make_profile, nvml_samples,
                      ops_records_in_steps, reader_records, sched_records, step_records,
                      system_samples)

OPS = [("mul", 0.004), ("elementwise_add", 0.001), ("relu", 0.0005), ("mul_grad", 0.003)]
ENV_4_CORES = {"cpu": {"model": "Test CPU", "logical_cores": 8, "physical_cores": 4,
                       "usable_cores": 4}}


def render(path, width=100, **kwargs):
    console = Console(width=width, record=True, force_terminal=False, color_system=None)
    render_report(load(path), console, **kwargs)
    return [line.rstrip() for line in console.export_text().splitlines()]


def when(path):
    created = load(path).header.created  # local time of the test machine
    return created[:10] + " " + created[11:19]


def test_compute_bound_report(tmp_path):
    path = make_profile(tmp_path / "p.jsonl", steps=step_records(feed_s=0.0001))
    lines = render(path)
    assert lines[:2] == ["paddletune report · train.py",
                         f"{when(path)} · ran 550 ms · exit 0 (returned)"]
    assert lines[3:5] == ["Verdict: Compute-bound: 1.0% of each 10.00 ms step waits for input "
                          "(0.00 ms outside the runtime +",
                          "0.10 ms feeding), 97.0% computes."]
    assert lines[6:11] == [
        "Steps: 40 measured · 1 warm-up excluded (50 ms) · 39 steady (program 1)",
        "step time (ms)    mean     p50     p90     p99     max   CV",
        "───────────────────────────────────────────────────────────",
        "Executor.run     10.00   10.00   10.00   10.00   10.00   0%",
        "loop iteration   10.00   10.00   10.00   10.00   10.00   0%"]
    assert "Throughput: 100.0 steps/s · 6,400 samples/s (batch size 64)" in lines
    i = lines.index("outside the runtime    0.00     0.0%")
    assert lines[i - 2].split() == ["Time", "per", "step", "ms", "share"]
    assert lines[i + 1:i + 5] == ["feed                   0.10     1.0%   ▎",
                                  "compute                9.70    97.0%   " + "█" * 23 + "▎",
                                  "fetch                  0.20     2.0%   ▌",
                                  "loop iteration        10.00   100.0%"]
    assert "No training steps observed" not in "\n".join(lines)


def test_the_breakdown_shows_the_training_threads_time_off_its_cpu(tmp_path):
    """Under compute, where the runtime measured them: the thread's time off its CPU while
    its ops ran and, of it, waiting for a core; a profile without them shows no such row."""
    steps = step_records(feed_s=0.0001)
    for row in steps:
        row["compute_wait_s"], row["compute_queued_s"] = 0.004, 0.001
    lines = render(make_profile(tmp_path / "p.jsonl", steps=steps))
    i = lines.index("compute                   9.70    97.0%   " + "█" * 23 + "▎")
    assert lines[i + 1:i + 4] == ["  of it off the CPU       4.00    40.0%",
                                  "    waiting for a core    1.00    10.0%",
                                  "fetch                     0.20     2.0%   ▌"]
    plain = render(make_profile(tmp_path / "q.jsonl", steps=step_records(feed_s=0.0001)))
    assert not [line for line in plain if "off the CPU" in line or "for a core" in line]


def test_input_bound_report_shows_the_time_outside_the_runtime(tmp_path):
    path = make_profile(tmp_path / "p.jsonl", steps=step_records(gap_s=0.010))
    text = "\n".join(render(path, width=200))
    assert ("Verdict: Highly input-bound: 52.5% of each 20.00 ms step waits for input "
            "(10.00 ms outside the runtime + 0.50 ms feeding), 46.5% computes.") in text
    assert "outside the runtime   10.00    50.0%   ████████████\n" in text
    assert "loop iteration   20.00   20.00   20.00   20.00   20.00   0%" in text
    assert "Throughput: 50.0 steps/s · 3,200 samples/s (batch size 64)" in text


@pytest.mark.parametrize("steps, why", [
    ([], "the script never called Executor.run."),
    (step_records(n_steps=0), "the script only ran startup programs (1 run of program 0)."),
])
def test_no_training_steps_is_said_plainly(tmp_path, steps, why):
    path = make_profile(tmp_path / "p.jsonl", steps=steps)
    text = " ".join(render(path, width=200))
    assert "Verdict: Too few steps to tell: no training steps observed." in text
    assert f"No training steps observed: {why}" in text
    assert "Steps:" not in text and "Time per step" not in text


def test_killed_profile_is_flagged(tmp_path):
    path = make_profile(tmp_path / "p.jsonl", exit_reason=None, summary=False)
    lines = render(path)
    assert lines[1] == f"{when(path)} · ran 540 ms · no exit record"
    assert lines[2] == ("Incomplete profile: the job was killed or the profiler crashed (no "
                        "exit record; no summary record);")
    assert "Steps: 40 measured · 1 warm-up excluded (50 ms) · 39 steady (program 1)" in lines


def test_truncated_last_line_is_flagged(tmp_path):
    path = make_profile(tmp_path / "p.jsonl", exit_reason=None, summary=False)
    with open(path, "a", encoding="utf-8") as f:
        f.write('{"type": "step", "t": 0.5, "wal')
    text = " ".join(render(path, width=200))
    assert "(no exit record; no summary record; the last line was cut off)" in text


def test_nonzero_exit_is_shown_with_its_message(tmp_path):
    path = make_profile(tmp_path / "p.jsonl", exit_status=1, exit_reason="exception")
    assert render(path)[1] == f"{when(path)} · ran 550 ms · exit 1 (exception)"
    events = [{"type": "event", "t": 0.2, "kind": "error", "exception": "ValueError",
               "message": "bad shape"},
              {"type": "event", "t": 0.56, "kind": "exit", "status": 1, "reason": "exception",
               "message": "ValueError: bad shape"}]  # the summary's "exit" is computed from it
    path = make_profile(tmp_path / "q.jsonl", extra=events, exit_reason=None)
    assert load(path).summary.exit.message == "ValueError: bad shape"
    lines = render(path)
    assert lines[1].endswith("exit 1 (exception): ValueError: bad shape")
    assert "Events: error at 200 ms: bad shape" in lines


def test_ops_and_system_samples(tmp_path):
    steps = step_records(feed_s=0.0001)
    extra = [*ops_records_in_steps(steps, OPS), *system_samples(steal_percent=2.0),
             {"type": "probe", "name": "step", "available": True, "reason": None,
              "overhead_s": 0.001, "in_step": True, "result": {}},
             {"type": "probe", "name": "system", "available": True, "reason": None,
              "overhead_s": 0.002, "in_step": False, "result": {}}]
    path = make_profile(tmp_path / "p.jsonl", steps=steps, extra=extra, env=ENV_4_CORES)
    lines = render(path, top_ops=2)
    i = lines.index("Op types (top 2 by time, 39 steady steps)")
    assert lines[i + 1:i + 5] == ["type       total ms   calls   mean µs   share",
                                  "─" * 45,
                                  "mul          156.00      39   4,000.0   47.1%",
                                  "mul_grad     117.00      39   3,000.0   35.3%"]
    assert lines[i + 5] == ""
    assert lines[i + 6] == "Single ops"
    assert lines[i + 9:i + 11] == ["#0 mul          156.00      39   4,000.0   47.1%",
                                   "#3 mul_grad     117.00      39   3,000.0   35.3%"]
    j = lines.index("System")
    assert lines[j + 1:j + 8] == [
        "CPU (process)  mean 97% · peak 99% of 400% (4 usable cores)",
        "CPU (machine)  mean 50% · peak 50%",
        "memory         peak RSS 204.0 MiB · 8.0 GiB available",
        "threads        peak 4 · BLAS threads 1",
        "load (1 min)   mean 1.00 · peak 1.00",
        "CPU steal      mean 2.0% · peak 2.0% (time taken by other VMs)",
        "GPU            N/A — no NVIDIA driver"]
    text = " ".join(lines)
    assert "Probe overhead: step 0.23% (of the training loop's time); system 0.36% " \
        "(background, of the job's wall time)" in text


def test_gpu_rows_one_per_device(tmp_path):
    path = make_profile(tmp_path / "p.jsonl", extra=nvml_samples(gpus=(0, 1)))
    lines = render(path, width=120)
    assert ("GPU 0          util mean 80% · peak 80% · memory peak 4.0 GiB of 16.0 GiB · "
            "this process 1.0 GiB · peak 250 W, 70 °C") in lines
    assert any(line.startswith("GPU 1          util mean 81% · peak 81%") for line in lines)
    assert not any(line.startswith("GPU   ") for line in lines)


def test_gpu_row_shows_the_power_limit_and_throttling(tmp_path):
    samples = nvml_samples(n=4)
    for i, sample in enumerate(samples):
        sample.update(power_limit_w=300.0, throttle=["sw_power_cap"] if i < 3 else [])
    lines = render(make_profile(tmp_path / "p.jsonl", extra=samples), width=200)
    assert any(line.startswith("GPU 0 ") and line.endswith(
        "peak 250 W of 300 W, 70 °C · clocks held down: sw power cap 75% of samples")
        for line in lines), lines


def test_hint_names_the_profile(tmp_path):
    path = make_profile(tmp_path / "p.jsonl")
    lines = render(path, width=200)
    assert lines[-3:] == ["Next: ranked advice, and a timeline for Perfetto "
                          "(https://ui.perfetto.dev):",
                          f"  paddletune advise {path}",
                          f"  paddletune export {path}"]


def test_hint_commands_fit_80_columns_whole(tmp_path, monkeypatch):
    """A profile in ./paddletune-runs/ is named relative to the working folder, so each
    command stays on one line of an 80-column terminal."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "paddletune-runs").mkdir()
    path = make_profile(tmp_path / "paddletune-runs" / "20261124-220435-input_pipeline.jsonl")
    lines = render(path, width=80)
    shown = "paddletune-runs/20261124-220435-input_pipeline.jsonl"
    assert lines[-2:] == [f"  paddletune advise {shown}", f"  paddletune export {shown}"]
    assert max(len(line) for line in lines[-3:]) <= 80


@pytest.mark.parametrize("width", [80, 120])
def test_fits_the_width(tmp_path, width):
    steps = step_records()
    extra = [*ops_records_in_steps(steps, OPS), *system_samples(), *nvml_samples(gpus=(0, 1))]
    path = make_profile(tmp_path / "p.jsonl", steps=steps, extra=extra, env=ENV_4_CORES)
    lines = render(path, width=width)
    assert max(len(line) for line in lines) <= width
    assert sum(line.startswith("Verdict: ") for line in lines) == 1


def test_verdict_is_coloured_by_kind(tmp_path):
    path = make_profile(tmp_path / "p.jsonl", steps=step_records(gap_s=0.010))
    console = Console(width=100, record=True, force_terminal=True, color_system="standard")
    render_report(load(path), console)
    assert "\x1b[1;31mHighly input-bound" in console.export_text(styles=True)


def test_old_or_partial_summary_does_not_crash(tmp_path):
    path = make_profile(tmp_path / "p.jsonl", summary=False)
    with open(path, "a", encoding="utf-8") as f:  # a summary with only a step count
        f.write(json.dumps({"type": "summary", "n_steps": 3,
                            "step_s": None, "throughput": {"steps_per_s": None},
                            "shares": None, "overhead": {}}) + "\n")
    text = "\n".join(render(path))
    assert "Verdict: Too few steps to tell." in text  # the typed summary's default verdict
    assert "Steps: 3 measured · 0 warm-up excluded · 0 steady\n" in text
    assert "Executor.run        —     —     —     —     —    —" in text
    assert "Throughput: — steps/s (batch size unknown)" in text
    assert "Op types" not in text and "Single ops" not in text and "Probe overhead" not in text


def test_an_old_summary_that_does_not_fit_is_recomputed(tmp_path):
    path = make_profile(tmp_path / "p.jsonl", summary=False)
    with open(path, "a", encoding="utf-8") as f:  # a summary from an older writer
        f.write(json.dumps({"type": "summary", "n_steps": 3, "verdict": None, "exit": None,
                            "breakdown_s": {"feed": None}, "shares": None,
                            "ops": {"by_type": [{"type": "mul"}]},
                            "samples": {"system": {}}, "overhead": {"x": {}}}) + "\n")
    profile = load(path)
    assert profile.complete and len(profile.warnings) == 1
    assert "skipped 1 record of kind 'summary'" in profile.warnings[0]
    text = "\n".join(render(path))
    assert "Steps: 40 measured · 1 warm-up excluded (50 ms) · 39 steady (program 1)" in text
    assert "Verdict: Moderately input-bound" in text and "Op types" not in text


def test_summary_json_is_strict_sorted_and_complete(tmp_path):
    steps = step_records()
    steps[5]["wall_s"] = float("nan")
    path = make_profile(tmp_path / "p.jsonl", steps=steps)
    profile = load(path)
    text = summary_json(profile)
    data = json.loads(text)
    assert list(data) == sorted(data)
    # every figure written, those at their default (0, null) too
    assert data == json.loads(json.dumps(encode(profile.summary, defaults=True)))
    assert set(data) == {f.name for f in dataclasses.fields(profile.summary)}
    assert data["n_steps"] == 39  # the step with a NaN time is skipped, not averaged in
    assert abs(data["step_s"]["mean"] - 0.010) < 1e-12 and "NaN" not in text
    assert data["step_s"]["p99"] == pytest.approx(0.010)
    assert data["breakdown_s"]["compute_s"] == pytest.approx(0.0093)
    assert data["verdict"]["kind"] == "moderately-input-bound"
    odd = dataclasses.replace(profile.summary, input_share=float("nan"))
    object.__setattr__(profile, "summary", odd)
    assert json.loads(summary_json(profile))["input_share"] is None


def test_aggregated_steps_are_said_in_the_steps_line(tmp_path):
    path = make_profile(tmp_path / "p.jsonl", options={"head_steps": 10})
    profile = load(path)
    assert profile.windows and profile.summary.aggregated_steps == 30
    text = " ".join(render(path, width=200))
    assert ("Steps: 40 measured · 1 warm-up excluded (50 ms) · 39 steady (program 1) · 30 of them "
            "from aggregated windows (after each program's first 10 steps)") in text
    assert "Executor.run     10.00   10.00   10.00   10.00   10.00   0%" in text
    assert "from aggregated windows" not in " ".join(render(make_profile(tmp_path / "q.jsonl")))


def test_parallel_section(tmp_path):
    steps = step_records()
    extra = sched_records(steps, drops=((10, (0.002, 4 << 20)),),
                          fused={"fuse_all_reduce_ops": 5})
    lines = render(make_profile(tmp_path / "p.jsonl", steps=steps, extra=extra), width=200)
    start = next(i for i, line in enumerate(lines) if line.startswith("Parallel:"))
    section = lines[start:lines.index("", start)]
    assert section[0] == "Parallel: ParallelExecutor · 2 place(s) · 4 thread(s) · AllReduce"
    rows = dict(line.split("  ", 1) for line in section[1:])
    rows = {label: value.strip() for label, value in rows.items()}
    assert rows["cpu threads"] == "4 executor x 1 BLAS = 4 on 2 usable cores (oversubscribed)"
    assert rows["combine"].startswith("gradient all-reduce 1.00 ms per step")
    assert rows["drop scope"].startswith("every 100 steps: 1 drop(s), 2.00 ms each")
    assert rows["fused"] == "fuse_all_reduce_ops replaced 5 ops"


HOSTILE = "\x1b]0;owned\x07"  # sets the terminal's title
CLEAR = "\x1b[2J"  # clears the screen


def test_text_from_the_profile_never_reaches_the_terminal_raw(tmp_path):
    steps = step_records(gap_s=0.005)
    extra = [*reader_records(steps, config={"name": f"loader{CLEAR}"},
                             shapes={f"img{HOSTILE}": {"64x784": 1}, "[/bold]": {"64x1": 1}}),
             {"type": "event", "t": 0.2, "kind": "error", "exception": "ValueError",
              "message": f"bad {CLEAR}shape"},
             {"type": "event", "t": 0.56, "kind": "exit", "status": 1, "reason": "exception",
              "message": f"ValueError: {HOSTILE}"}]
    path = make_profile(tmp_path / "p.jsonl", steps=steps, extra=extra, exit_reason=None,
                        command={"argv": ["train.py", HOSTILE, CLEAR], "script": "train.py"})
    console = Console(width=200, record=True, force_terminal=False, color_system=None)
    render_report(load(path), console)
    text = console.export_text()
    assert "\x1b" not in text and "\x07" not in text
    assert "paddletune report · train.py '\\x1b]0;owned\\x07' '\\x1b[2J'" in text
    assert "Events: error at 200 ms: bad \\x1b[2Jshape" in text
    assert "exit 1 (exception): ValueError: \\x1b]0;owned\\x07" in text
    assert "Reader: loader\\x1b[2J · thread producer" in text
    assert "shape img\\x1b]0;owned\\x07" in text and "shape [/bold]" in text


def test_bar_and_command_line():
    assert bar(1.0, width=4) == "████"
    assert bar(0.5 + 1 / 16, width=4) == "██▎"
    assert bar(0.0) == bar(None) == bar(float("nan")) == ""
    assert command_line(records.Command(argv=("train.py", "--lr", "0.1 0.2"))) == \
        "train.py --lr '0.1 0.2'"
    assert command_line(records.Command(argv=("pkg.train",), module=True)) == "-m pkg.train"
    assert command_line(records.Command(script="/abs/train.py")) == "/abs/train.py"
    assert command_line(records.Command()) == command_line(None) == "?"


def test_a_bare_header_renders(tmp_path):
    path = write_records(tmp_path / "p.jsonl", [{"type": "header", "schema": 1}])
    lines = render(path)
    assert lines[:2] == ["paddletune report · ?", "unknown time · ran 0 ms · no exit record"]
    assert "No training steps observed: the script never called Executor.run." in " ".join(lines)
    assert "GPU            N/A — no NVML samples recorded" in lines


def test_an_eager_jobs_steps_name_no_program_and_its_wait_by_the_loader(tmp_path):
    lines = render(make_profile(tmp_path / "t.jsonl", steps=eager_step_records(),
                                source=EAGER_SOURCE))
    head = next(line for line in lines if line.startswith("Steps: "))
    assert head == "Steps: 40 measured · 1 warm-up excluded (10 ms) · 39 steady", head  # no program
    (wait,) = [line for line in lines if line.startswith("DataLoader wait ")]
    assert wait.split()[2:4] == ["6.00", "60.0%"], wait
    assert not [line for line in lines if line.startswith("reader wait")]


def test_a_step_of_several_batches_says_how_many_and_counts_their_samples(tmp_path):
    """Gradient accumulation: each step took 4 batches of 64 (Step.samples 256): samples/s
    counts them all, the batch size stays 64, and the line says so."""
    steps = eager_step_records(n_steps=40, wall_s=0.010, gap_s=0.0)
    for s in steps:
        s["samples"] = 256
    lines = render(make_profile(tmp_path / "p.jsonl", steps=steps, source=EAGER_SOURCE))
    (line,) = [x for x in lines if x.startswith("Throughput:")]
    assert line == ("Throughput: 100.0 steps/s · 25,600 samples/s (batch size 64 · 4.0 batches "
                    "a step)")


def test_the_throughput_says_whose_samples_where_the_training_loaders_differ(tmp_path):
    """Two loaders read every step, 16 labeled and 64 unlabeled samples a batch (FixMatch):
    the samples are the first loader's, and the main loader (the one that held the steps back)
    is named with its own batch size; one batch size says nothing more."""
    steps = step_records(n_steps=40, wall_s=0.010, batch_size=16)
    labeled = reader_records(steps, config={"batch_size": 16}, wait_s=0.001)
    unlabeled = reader_records(steps, config={"name": "DataLoader#1", "batch_size": 64},
                               loader=1, wait_s=0.004)
    lines = render(make_profile(tmp_path / "p.jsonl", steps=steps,
                                extra=labeled + unlabeled), width=300)
    [text] = [line for line in lines if line.startswith("Throughput")]
    assert text.endswith("samples/s (batch size 16); samples are those of the first loader "
                         "each step reads, while the main loader, DataLoader#1, reads 64 a "
                         "batch")
    same = reader_records(steps, config={"name": "DataLoader#1", "batch_size": 16}, loader=1,
                          wait_s=0.004)
    lines = render(make_profile(tmp_path / "q.jsonl", steps=steps, extra=labeled + same),
                   width=300)
    [text] = [line for line in lines if line.startswith("Throughput")]
    assert text.endswith("samples/s (batch size 16)")


def test_the_throughput_names_a_loader_read_beside_the_main_one_whose_samples_it_leaves_out(
        tmp_path):
    """helper-40's s05: a labeled loader (32 a batch) is the main one, and each step also
    reads an unlabeled batch of 192: the samples are the main loader's, and the line says
    the other's were read too, not counted (it said nothing)."""
    steps = step_records(n_steps=40, wall_s=0.010, batch_size=32)
    labeled = reader_records(steps, config={"batch_size": 32}, wait_s=0.004)
    unlabeled = reader_records(steps, config={"name": "DataLoader#1", "batch_size": 192},
                               loader=1, wait_s=0.001)
    lines = render(make_profile(tmp_path / "p.jsonl", steps=steps,
                                extra=labeled + unlabeled), width=300)
    [text] = [line for line in lines if line.startswith("Throughput")]
    assert text.endswith("samples/s (batch size 32); samples are those of DataLoader#0, the "
                         "main loader; each step also read DataLoader#1 192 a batch, not "
                         "counted")
