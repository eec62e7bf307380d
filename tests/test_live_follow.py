"""The live data side: the follower reads complete lines of a growing profile, the window
model's figures (throughput, ETA, breakdown, reader, memory), the rolling advice, and
`paddletune watch` following a file another process appends to."""

import json
import subprocess
import sys
import threading
import time

import pytest

from paddletune import profile as prof
from paddletune.live.follow import Follower
from paddletune.live.loop import LiveLoop, follow_until_done
from paddletune.live.window import LiveModel
from profiles import (make_profile, memory_records, reader_records, step_records,
                      system_samples)


def lines_of(records):
    return "".join(json.dumps(r) + "\n" for r in records)


def header():
    return prof.header_record({"argv": ["train.py"]}, {"steps": 100}, {}, t0_unix=1.7e9)


# --- the follower --------------------------------------------------------------------------------
def test_follower_waits_for_the_file_and_reads_only_complete_lines(tmp_path):
    path = tmp_path / "p.jsonl"
    f = Follower(path)
    assert f.poll() == [] and not f.exists
    text = lines_of([header(), {"type": "event", "t": 1.0, "kind": "x"}])
    path.write_text(text[:-10])  # the second line cut mid-write
    assert [r["type"] for r in f.poll()] == ["header"] and f.exists
    with open(path, "a") as out:
        out.write(text[-10:])
    assert f.poll() == [{"type": "event", "t": 1.0, "kind": "x"}]
    assert f.poll() == [] and f.at_end and f.n_records == 2


def test_follower_skips_bad_lines_and_restarts_on_a_rewritten_file(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text(lines_of([header()]) + "not json\n[1, 2]\n" +
                    lines_of([{"type": "event", "t": 2.0, "kind": "y"}]))
    f = Follower(path)
    assert [r["type"] for r in f.poll()] == ["header", "event"] and f.bad_lines == 2
    path.write_text(lines_of([header()]))  # a new run writes the same path: shorter
    assert [r["type"] for r in f.poll()] == ["header"] and f.restarted == 1


# --- the model -----------------------------------------------------------------------------------
def model_of(path, window_s=30.0):
    model = LiveModel(window_s)
    model.add(Follower(path).poll())
    return model


def test_throughput_eta_and_history_over_the_last_ten_seconds(tmp_path):
    steps = step_records(n_steps=240, wall_s=1 / 16, warmup=0, t_start=0.01)  # 16/s for 15 s
    path = make_profile(tmp_path / "p.jsonl", steps=steps, exit_reason=None, summary=False,
                        options={"total_steps": 500})
    model = model_of(path)
    state = model.state(15.01)
    tp = state["throughput"]
    assert tp["steps_per_s"] == pytest.approx(16.0) and tp["span_s"] == pytest.approx(10.0)
    assert tp["samples_per_s"] == pytest.approx(16.0 * 64) and tp["batch_size"] == 64
    assert tp["history"] == [15] + [16] * 14  # complete seconds 0..14
    assert state["progress"] == {"steps": 240, "total": 500, "total_from": "--total-steps",
                                 "eta_s": pytest.approx(260 / 16)}
    assert state["status"]["state"] == "running"
    assert model.state(30.0)["status"]["state"] == "stalled"  # nothing new for 15 s
    assert model.state(30.0)["throughput"]["steps_per_s"] == 0.0


def test_the_window_drops_old_records_and_steps_total_comes_from_steps(tmp_path):
    steps = step_records(n_steps=300, wall_s=0.05, warmup=0, t_start=0.0)
    path = make_profile(tmp_path / "p.jsonl", steps=steps, exit_reason=None, summary=False,
                        options={"steps": 400})
    model = model_of(path, window_s=5.0)
    state = model.state(15.0)
    assert state["breakdown"]["n"] == 100  # the last 5 s of steps
    assert state["progress"]["total_from"] == "--steps"
    assert state["progress"]["steps"] == 300  # all-time


def test_breakdown_splits_the_loaders_wait_from_the_rest_of_the_gap(tmp_path):
    steps = step_records(gap_s=0.005)
    extra = reader_records(steps, wait_s=0.004, empty_ratio=0.9, fill=1)
    state = model_of(make_profile(tmp_path / "p.jsonl", steps=steps, extra=extra)).state(1.0)
    parts = dict(state["breakdown"]["parts"])
    assert parts["wait"] == pytest.approx(0.004) and parts["other"] == pytest.approx(0.001)
    assert state["breakdown"]["wait_from"] == "reader"
    r = state["reader"]
    assert (r["fill_mean"], r["fill_share"], r["empty_ratio"]) == (1.0, 0.125, 0.9)
    assert r["pops"] == 40 and r["wait_per_pop_s"] == pytest.approx(0.004)


def test_memory_figures_and_capacity_sources(tmp_path):
    steps = step_records()
    extra = memory_records(steps, capacity=64 << 20) + system_samples()
    m = model_of(make_profile(tmp_path / "p.jsonl", steps=steps, extra=extra)).state(1.0)
    m = m["memory"]
    assert (m["allocated"], m["peak_allocated"], m["capacity"], m["capacity_from"]) == (
        3 << 20, 8 << 20, 64 << 20, "pool")
    assert m["rss"] == 204 * 2 ** 20  # the newest system sample
    env = {"flags": {"FLAGS_cpu_memory_limit_mb": 100}, "memory": {"total_bytes": 1 << 33}}
    bare = model_of(make_profile(tmp_path / "q.jsonl", env=env)).state(1.0)["memory"]
    assert (bare["capacity"], bare["capacity_from"], bare["pool_seen"]) == (
        100 << 20, "FLAGS_cpu_memory_limit_mb", False)


def test_rolling_advice_runs_the_advisors_on_the_window(tmp_path):
    steps = step_records(n_steps=200, gap_s=0.010, warmup=0)
    model = model_of(make_profile(tmp_path / "p.jsonl", steps=steps))
    advice = model.refresh_advice(model.now())
    assert advice["error"] is None and advice["verdict"]["kind"] == "highly-input-bound"
    assert advice["advice"] and advice["advice"][0]["severity"] in ("high", "medium", "low")
    window = model.window_profile(model.now())
    assert window.summary["n_steps"] == 200 and window.options.get("warmup") is None


def test_a_new_header_resets_the_model(tmp_path):
    model = model_of(make_profile(tmp_path / "p.jsonl"))
    assert model.step_counts
    model.add([header()])
    assert not model.step_counts and model.header["options"] == {"steps": 100}


# --- following a growing file --------------------------------------------------------------------
def append_slowly(path, records, pause_s=0.02, chunk=7):
    """Write `records` to `path` a few at a time, cutting lines mid-way now and then."""
    text = lines_of(records)
    with open(path, "w") as out:
        for i in range(0, len(text), 997):
            out.write(text[i:i + 997])
            out.flush()
            time.sleep(pause_s)


def job_records(n_steps=100):
    steps = step_records(n_steps=n_steps, wall_s=0.01)
    end = steps[-1]["t"] + 0.02
    head = {**header(), "t0_unix": time.time()}  # a job that is running now
    return [head, *steps, *system_samples(n=3),
            {"type": "event", "t": end, "kind": "exit", "status": 0, "reason": "returned",
             "message": None}]


def test_the_loop_follows_a_file_being_appended_until_the_exit_record(tmp_path):
    path = tmp_path / "p.jsonl"
    drawn = []
    writer = threading.Thread(target=append_slowly, args=(path, job_records()))
    writer.start()
    loop = follow_until_done(LiveLoop(path, drawn.append, hz=50), sleep=time.sleep)
    writer.join()
    assert loop.model.finished and loop.model.step_counts[1] == 100
    assert len(drawn) >= 3  # frames while it grew
    assert drawn[-1]["status"]["state"] == "finished"
    assert drawn[-1]["progress"]["steps"] == 100
    assert loop.cost()["frames"] == len(drawn) and loop.cost()["cpu_s"] > 0


def test_watch_follows_a_profile_another_process_appends(tmp_path):
    path = tmp_path / "p.jsonl"
    script = tmp_path / "writer.py"
    records = job_records()
    script.write_text(
        "import json, sys, time\n"
        f"records = json.loads({json.dumps(json.dumps(records))})\n"
        "with open(sys.argv[1], 'w') as out:\n"
        "    for i, r in enumerate(records):\n"
        "        out.write(json.dumps(r) + '\\n'); out.flush()\n"
        "        if i % 20 == 0: time.sleep(0.1)\n")
    watcher = subprocess.Popen([sys.executable, "-m", "paddletune", "watch", str(path),
                                "--plain", "--refresh", "5"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    time.sleep(0.5)  # the watcher starts before the file exists
    subprocess.run([sys.executable, str(script), str(path)], check=True, timeout=60)
    out, err = watcher.communicate(timeout=60)
    assert watcher.returncode == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("paddletune live: ")
    assert lines[-1].startswith("paddletune live: ")
    assert "step 100 of 100 (100%)" in lines[-1]
    assert lines[-1].endswith("finished: exit 0 (returned)")
