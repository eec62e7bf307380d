"""The Chrome trace exporter: structure, nesting, counters, the aggregated tail, strict JSON,
writing in place."""

import dataclasses
import json
import math
import os

import pytest

from paddletune.export import json_safe, to_chrome_trace, write_chrome_trace
from paddletune.export import chrome
from paddletune.profile import load
from profiles import (EAGER_SOURCE, eager_step_records, make_profile, nvml_samples,
                      ops_records_in_steps, step_records, system_samples)

OPS = [("mul", 0.004), ("elementwise_add", 0.001), ("relu", 0.0005)]


@pytest.fixture
def profile(tmp_path):
    steps = step_records(n_steps=6, gap_s=0.002)
    extra = [*ops_records_in_steps(steps, OPS), *system_samples(n=3),
             *nvml_samples(n=2, gpus=(0, 1)),
             {"type": "event", "t": 0.12, "kind": "nan_inf", "message": "op mul produced NaN"},
             {"type": "event", "t": 0.13, "kind": "error", "exception": "ValueError",
              "message": "bad"}]
    return load(make_profile(tmp_path / "p.jsonl", steps=steps, extra=extra,
                             command={"argv": ["examples/mlp.py", "--epochs", "1"],
                                      "script": "/abs/examples/mlp.py"}))


def events(trace, ph=None, tid=None):
    return [e for e in trace["traceEvents"]
            if (ph is None or e["ph"] == ph) and (tid is None or e["tid"] == tid)]


def thread_ids(trace):
    return {e["args"]["name"]: e["tid"] for e in events(trace, "M")
            if e["name"] == "thread_name"}


def test_top_level_and_every_event_has_the_required_fields(profile):
    trace = to_chrome_trace(profile)
    assert trace["displayTimeUnit"] == "ms"
    assert trace["otherData"]["profile"] == profile.path
    assert trace["otherData"]["t0_unix"] == profile.header.t0_unix_s
    for e in trace["traceEvents"]:
        assert {"ph", "ts", "pid", "tid", "name"} <= set(e), e
        assert e["ts"] >= 0
        if e["ph"] == "X":
            assert e["dur"] >= 0


def test_metadata_names_the_process_and_rows(profile):
    trace = to_chrome_trace(profile)
    meta = events(trace, "M")
    names = {(e["name"], e["args"].get("name")) for e in meta}
    assert ("process_name", "paddletune: mlp.py") in names
    assert list(thread_ids(trace)) == ["steps", "outside runtime", "ops", "events"]
    sort = {e["tid"]: e["args"]["sort_index"] for e in meta if e["name"] == "thread_sort_index"}
    assert sort == {tid: tid for tid in thread_ids(trace).values()}


def test_steps_are_complete_events_in_microseconds(profile):
    trace = to_chrome_trace(profile)
    tids = thread_ids(trace)
    steps = [e for e in events(trace, "X", tids["steps"]) if e["cat"] in ("step", "startup")]
    assert [e["name"] for e in steps] == ["step 0 (program 0)"] + [
        f"step {i} (program 1)" for i in range(6)]
    first = steps[1]
    record = profile.steps[1]
    assert first["ts"] == pytest.approx(record.t_s * 1e6)
    assert first["dur"] == pytest.approx(record.wall_s * 1e6)
    assert first["args"]["wall_ms"] == pytest.approx(50.0)
    assert first["args"]["feed_ms"] == pytest.approx(0.5)
    assert first["args"]["batch_size"] == 64 and first["args"]["startup"] is False
    assert steps[0]["args"]["startup"] is True and steps[0]["cat"] == "startup"


def test_segments_nest_inside_their_step(profile):
    trace = to_chrome_trace(profile)
    row = events(trace, "X", thread_ids(trace)["steps"])
    steps = [e for e in row if e["cat"] != "segment"]
    for step in steps:
        inside = [e for e in row if e["cat"] == "segment"
                  and step["ts"] <= e["ts"] and e["ts"] + e["dur"] <= step["ts"] + step["dur"]]
        expected = ["compute"] if step["cat"] == "startup" else ["feed", "compute", "fetch"]
        assert [e["name"] for e in inside] == expected
        assert all(a["ts"] + a["dur"] <= b["ts"] + 1e-6 for a, b in zip(inside, inside[1:]))
    assert len(row) == len(steps) + 1 + 3 * (len(steps) - 1)


def test_segments_are_clipped_to_a_step_shorter_than_its_parts(tmp_path):
    steps = step_records(n_steps=2)
    steps[1]["compute_s"] = steps[1]["wall_s"] * 2  # measured parts exceed the wall time
    trace = to_chrome_trace(load(make_profile(tmp_path / "p.jsonl", steps=steps)))
    row = events(trace, "X", thread_ids(trace)["steps"])
    step = next(e for e in row if e["name"] == "step 0 (program 1)")
    end = step["ts"] + step["dur"]
    segments = [e for e in row if e["cat"] == "segment" and e["ts"] >= step["ts"]
                and e["ts"] < end]
    assert [e["name"] for e in segments] == ["feed", "compute"]
    assert segments[-1]["ts"] + segments[-1]["dur"] == pytest.approx(end)


def test_outside_runtime_gaps_end_where_the_next_step_starts(profile):
    trace = to_chrome_trace(profile)
    gaps = events(trace, "X", thread_ids(trace)["outside runtime"])
    steps = {e["args"].get("before_step"): e for e in gaps}
    assert len(gaps) == 6 and set(steps) == set(range(6))
    records = [s for s in profile.steps if not s.startup]
    for record in records:
        gap = steps[record.step]
        assert gap["ts"] + gap["dur"] == pytest.approx(record.t_s * 1e6)
        assert gap["dur"] == pytest.approx(2000.0)


def test_ops_row(profile):
    trace = to_chrome_trace(profile)
    ops = events(trace, "X", thread_ids(trace)["ops"])
    assert len(ops) == 6 * len(OPS)
    assert [e["name"] for e in ops[:3]] == ["mul", "elementwise_add", "relu"]
    assert ops[1]["args"] == {"index": 1, "program": 1, "step": 0}
    assert ops[1]["dur"] == pytest.approx(1000.0)


def test_events_are_instants(profile):
    trace = to_chrome_trace(profile)
    instants = events(trace, "i")
    assert [e["name"] for e in instants] == ["nan_inf", "error: ValueError",
                                             "exit 0 (returned)"]
    assert all(e["s"] == "t" and e["tid"] == thread_ids(trace)["events"] for e in instants)
    assert instants[0]["ts"] == pytest.approx(120000.0)
    assert instants[0]["args"]["message"] == "op mul produced NaN"


def test_counters_from_samples(profile):
    trace = to_chrome_trace(profile)
    counters = events(trace, "C")
    by_name = {}
    for e in counters:
        by_name.setdefault(e["name"], []).append(e)
    assert set(by_name) == {"CPU % (process)", "RSS MiB", "threads", "GPU 0 util %",
                            "GPU 1 util %", "GPU 0 memory MiB", "GPU 1 memory MiB"}
    assert [e["args"] for e in by_name["RSS MiB"]] == [{"rss": 200.0}, {"rss": 201.0},
                                                        {"rss": 202.0}]
    assert by_name["GPU 1 util %"][0]["args"] == {"util": 81.0}
    assert by_name["GPU 0 memory MiB"][1]["args"] == {"used": 3072.0, "this process": 1024.0}
    assert [e["ts"] for e in by_name["threads"]] == pytest.approx([1e5, 2e5, 3e5])


def test_a_new_counter_is_one_entry(profile, monkeypatch):
    monkeypatch.setattr(chrome, "COUNTERS", chrome.COUNTERS + (
        chrome.Counter("system", "load (1 min)", (("load", "load1", 1.0),)),))
    load1 = [e for e in events(to_chrome_trace(profile), "C") if e["name"] == "load (1 min)"]
    assert load1[0] == {"ph": "C", "name": "load (1 min)", "ts": 100000.0,
                        "pid": load1[0]["pid"], "tid": 0, "args": {"load": 1.0}}
    assert len(load1) == 3


def test_reader_queue_and_worker_memory_counters(tmp_path):
    from profiles import reader_records, worker_samples
    steps = step_records(n_steps=8)
    extra = reader_records(steps, intervals=2, fill=3, empty_ratio=0.5, workers=(0, 1),
                           config={"num_workers": 2}) + worker_samples(workers=2, n=2,
                                                                       growth=2 ** 20)
    trace = to_chrome_trace(load(make_profile(tmp_path / "p.jsonl", steps=steps, extra=extra)))
    counters = events(trace, "C")
    queue = [e for e in counters if e["name"] == "DataLoader 0 queue"]
    assert [e["args"] for e in queue] == [{"fill": 3.0, "empty pops": 2}] * 2
    uss = [e for e in counters if e["name"] == "DataLoader 0 worker 1 USS MiB"]
    assert [e["args"] for e in uss] == [{"uss": 8.0}, {"uss": 9.0}]


def test_nan_values_give_strict_json(tmp_path):
    nan = float("nan")
    steps = step_records(n_steps=4)
    steps[2]["wall_s"], steps[3]["feed_s"], steps[3]["t"] = nan, float("inf"), nan  # steps 1, 2
    extra = [*system_samples(n=2, cpu_percent=nan),
             {"type": "event", "t": 0.2, "kind": "nan_inf", "inputs": ["loss"],
              "message": "loss"}]
    profile = load(make_profile(tmp_path / "p.jsonl", steps=steps, extra=extra))
    assert [s.step for s in profile.steps] == [0, 0, 3]  # loading skips the broken records
    assert any("skipped 2 records of kind 'step'" in w for w in profile.warnings)
    trace = to_chrome_trace(profile)
    assert "NaN" not in json.dumps(trace, allow_nan=False)
    typed = list(profile.steps)  # records built in memory (the live window's) are not checked
    typed[1] = typed[1]._replace(wall_s=nan)
    typed[2] = typed[2]._replace(feed_s=float("inf"), t_s=nan)
    trace = to_chrome_trace(dataclasses.replace(profile, steps=tuple(typed)))
    text = json.dumps(trace, allow_nan=False)
    assert "NaN" not in text and "Infinity" not in text
    assert not [e for e in events(trace) if e["name"] == "step 3 (program 1)"]  # no time
    broken = next(e for e in events(trace, "X") if e["name"] == "step 0 (program 1)")
    assert broken["dur"] == 0.0 and broken["args"]["wall_ms"] is None
    nan_event = next(e for e in events(trace, "i") if e["name"] == "nan_inf")
    assert nan_event["args"]["inputs"] == ["loss"]
    assert not [e for e in events(trace, "C") if e["name"] == "CPU % (process)"]


def test_write_and_read_back(profile, tmp_path):
    out = write_chrome_trace(profile, tmp_path / "trace.json")
    assert out == tmp_path / "trace.json"
    with open(out, encoding="utf-8") as f:
        assert json.load(f) == json.loads(json.dumps(to_chrome_trace(profile)))
    umask = os.umask(0)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask  # as a file the user writes
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.jsonl", "trace.json"]


@pytest.mark.parametrize("fail_at", ["serialise", "rename"])
def test_a_failed_write_leaves_no_partial_trace(profile, tmp_path, monkeypatch, fail_at):
    out = tmp_path / "p.trace.json"
    out.write_text("the previous trace")
    if fail_at == "serialise":
        monkeypatch.setattr(chrome, "to_chrome_trace", lambda _p: {"x": float("nan")})
        error = ValueError
    else:
        def refuse(_src, _dst):
            raise OSError(28, "No space left on device")
        monkeypatch.setattr(chrome.os, "replace", refuse)
        error = OSError
    with pytest.raises(error):
        write_chrome_trace(profile, out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.jsonl", "p.trace.json"]
    assert out.read_text() == "the previous trace"


def test_empty_profile_still_has_a_named_process(tmp_path):
    profile = load(make_profile(tmp_path / "p.jsonl", steps=[], exit_reason=None,
                                summary=False))
    trace = to_chrome_trace(profile)
    assert [e["name"] for e in trace["traceEvents"]] == ["process_name", "process_sort_index"]
    json.dumps(trace, allow_nan=False)


def test_json_safe():
    value = {"a": [1.0, float("nan"), (float("-inf"), 2)], "b": {"c": float("inf")}, "d": "x"}
    assert json_safe(value) == {"a": [1.0, None, [None, 2]], "b": {"c": None}, "d": "x"}
    assert not math.isnan(json_safe(0.5))


def partial_overlaps(trace):
    """Pairs of X events on one row that overlap without nesting (viewers mis-draw them)."""
    bad, rows = [], {}
    for e in events(trace, "X"):
        rows.setdefault((e["pid"], e["tid"]), []).append(e)
    for row in rows.values():
        open_ends = []  # ends of the enclosing events, innermost last
        for e in sorted(row, key=lambda e: (e["ts"], -e["dur"])):
            while open_ends and open_ends[-1] <= e["ts"] + 1e-6:
                open_ends.pop()
            if open_ends and e["ts"] + e["dur"] > open_ends[-1] + 1e-6:
                bad.append(e)
            open_ends.append(e["ts"] + e["dur"])
    return bad


def test_rows_nest_properly(profile):
    assert partial_overlaps(to_chrome_trace(profile)) == []


def test_memory_pool_counter_track(tmp_path):
    from profiles import memory_records
    steps = step_records(n_steps=3)
    trace = to_chrome_trace(load(make_profile(tmp_path / "p.jsonl", steps=steps,
                                              extra=memory_records(steps, allocated=2 << 20,
                                                                   step_peak=4 << 20))))
    pool = [e for e in events(trace, "C") if e["name"] == "memory pool MiB"]
    assert len(pool) == 3
    assert pool[0]["args"] == {"allocated": 2.0, "reserved": 3.0, "step peak": 4.0}
    assert pool[0]["ts"] == pytest.approx(steps[1]["t"] * 1e6)


# --- a long job: windows, exemplars, sample windows ----------------------------------------------
def long_job_steps() -> list:
    """300 training steps of 10 ms; step 150 is slow."""
    steps = step_records(n_steps=300)
    slow = steps[151]  # training step 150
    slow["wall_s"], slow["compute_s"] = 0.050, 0.050 - slow["feed_s"] - slow["fetch_s"]
    for later in steps[152:]:
        later["t"] += 0.040
    return steps


@pytest.fixture
def long_job(tmp_path):
    """long_job_steps, the first 10 recorded in full; 300 system samples (the first 240 kept
    in full)."""
    extra = system_samples(n=300, interval_s=0.01)
    return load(make_profile(tmp_path / "p.jsonl", steps=long_job_steps(), extra=extra,
                             options={"head_steps": 10}))


def test_steps_recorded_in_full_are_slices_and_the_tail_is_windows(long_job):
    assert long_job.windows and long_job.exemplars
    trace = to_chrome_trace(long_job)
    tids = thread_ids(trace)
    full = [e for e in events(trace, "X", tids["steps"]) if e["cat"] in ("step", "startup")]
    assert len(full) == 1 + 10
    windows = events(trace, "X", tids["steps (aggregated windows)"])
    assert sum(e["args"]["steps"] for e in windows) == 290
    for e, w in zip(windows, long_job.windows):
        assert e["ts"] == pytest.approx(w.t0_s * 1e6)
        assert e["ts"] + e["dur"] == pytest.approx(w.t_s * 1e6)
        assert e["args"]["wall mean ms"] == pytest.approx(w.parts["wall"].sum / w.n * 1e3)
    last = long_job_steps()[-1]  # the timeline runs to the job's last step's end
    assert windows[-1]["ts"] + windows[-1]["dur"] == pytest.approx(
        (last["t"] + last["wall_s"]) * 1e6)
    assert partial_overlaps(trace) == []


def test_window_counters(long_job):
    trace = to_chrome_trace(long_job)
    rate = [e for e in events(trace, "C") if e["name"] == "steps/s"]
    means = [e for e in events(trace, "C") if e["name"] == "mean step ms"]
    assert len(rate) == len(means) == len(long_job.windows) >= 2
    assert [e["ts"] for e in rate] == pytest.approx([w.t0_s * 1e6 for w in long_job.windows])
    for e, w in zip(means, long_job.windows):
        n_slow = 1 if w.parts["wall"].max > 0.04 else 0
        wall = (0.010 * (w.n - n_slow) + 0.050 * n_slow) / w.n
        assert e["args"]["Executor.run"] == pytest.approx(wall * 1e3)
        assert e["args"]["loop iteration"] == pytest.approx(wall * 1e3)
    assert rate[-1]["args"]["steps/s"] == pytest.approx(100.0, rel=1e-3)


def test_exemplars_have_their_own_row(long_job):
    trace = to_chrome_trace(long_job)
    row = events(trace, "X", thread_ids(trace)["slowest / sampled steps"])
    steps = [e for e in row if e["cat"] == "exemplar"]
    names = [e["name"] for e in steps]
    assert len(names) == len(set(names)) == len({(s.program, s.step) for s in long_job.exemplars})
    slow = next(e for e in steps if e["name"] == "step 150 (program 1)")
    assert slow["args"]["exemplar"] == "slow" and slow["dur"] == pytest.approx(50000.0)
    assert {e["name"] for e in row if e["cat"] == "segment"} == {"feed", "compute", "fetch"}
    assert all(int(e["name"].split()[1]) >= 10 for e in steps)


def test_sample_windows_feed_the_counters_at_their_time(long_job):
    assert len(long_job.system) == 240 and long_job.sample_windows
    trace = to_chrome_trace(long_job)
    cpu = [e for e in events(trace, "C") if e["name"] == "CPU % (process)"]
    assert len(cpu) == 240 + len(long_job.sample_windows)
    assert [e["ts"] for e in cpu] == sorted(e["ts"] for e in cpu)
    last = long_job.sample_windows[-1]
    assert cpu[-1]["ts"] == pytest.approx(last.t_s * 1e6)
    assert cpu[-1]["args"] == {"cpu": pytest.approx(last.fields["cpu_percent"].mean)}


def test_gpu_and_worker_windows_keep_their_track_names(tmp_path):
    from profiles import worker_samples
    extra = nvml_samples(n=250, gpus=(0,), interval_s=0.01) + worker_samples(
        workers=2, n=250, interval_s=0.01)
    profile = load(make_profile(tmp_path / "p.jsonl", extra=extra))
    assert {w.probe for w in profile.sample_windows} == {"nvml", "workers"}
    trace = to_chrome_trace(profile)
    names = {}
    for e in events(trace, "C"):
        names[e["name"]] = names.get(e["name"], 0) + 1
    windows = {probe: sum(1 for w in profile.sample_windows if w.probe == probe)
               for probe in ("nvml", "workers")}
    assert names["GPU 0 util %"] == 240 + windows["nvml"]
    assert names["DataLoader 0 worker 1 USS MiB"] == 240 + windows["workers"] // 2
    assert not [name for name in names if "?" in name]


def test_an_eager_jobs_trace_names_its_steps_and_parts_in_its_frameworks_terms(tmp_path):
    profile = load(make_profile(tmp_path / "t.jsonl", steps=eager_step_records(300),
                                options={"head_steps": 10}, source=EAGER_SOURCE))
    terms = EAGER_SOURCE.terms
    assert not profile.runs_programs
    trace = to_chrome_trace(profile)
    tids = thread_ids(trace)
    assert "between steps" in tids and "outside runtime" not in tids
    row = events(trace, "X", tids["steps"])
    steps = [e for e in row if e["cat"] == "step"]
    assert [e["name"] for e in steps] == [f"step {i}" for i in range(10)]
    first = steps[0]  # its wait for the batch first, then the rest, inside the step
    inside = [e for e in row if e["cat"] == "segment"
              and first["ts"] <= e["ts"] < first["ts"] + first["dur"]]
    assert [e["name"] for e in inside] == ["DataLoader wait", "feed", "compute", "fetch"]
    assert inside[0]["ts"] == first["ts"] and inside[0]["dur"] == pytest.approx(6000.0)
    windows = events(trace, "X", tids["steps (aggregated windows)"])
    assert windows and all(e["name"] == f"{e['args']['steps']} steps" for e in windows)
    means = [e for e in events(trace, "C") if e["name"] == "mean step ms"]
    assert means and all(set(e["args"]) == {terms.step, "loop iteration"} for e in means)


def test_evaluation_passes_have_their_own_row(tmp_path):
    """A DataLoader pass that ran between training steps (ReaderEnd.eval_s) is a slice from
    its start to its end on an "evaluation" row, with the time left out of the steps and
    its waits; a training pass's end (no eval_s) draws nothing there."""
    steps = eager_step_records(n_steps=4)
    config = {"name": "DataLoader#1", "num_workers": 0}
    extra = [{"type": "reader", "what": "start", "t": 1.0, "loader": 1, "pass": 1,
              "config": config},
             {"type": "reader", "what": "end", "t": 1.5, "loader": 1, "pass": 1,
              "batches": 8, "detail": "", "eval_s": 0.5, "eval_read_s": 0.4},
             {"type": "reader", "what": "start", "t": 0.05, "loader": 0, "pass": 1},
             {"type": "reader", "what": "end", "t": 0.2, "loader": 0, "pass": 1,
              "batches": 4, "detail": ""}]
    trace = to_chrome_trace(load(make_profile(tmp_path / "p.jsonl", steps=steps, extra=extra,
                                              source=EAGER_SOURCE)))
    (row,) = [tid for name, tid in thread_ids(trace).items() if name == "evaluation"]
    (slice_,) = events(trace, "X", row)
    assert slice_["name"] == "evaluation (DataLoader#1)" and slice_["cat"] == "evaluation"
    assert slice_["ts"] == pytest.approx(1.0e6) and slice_["dur"] == pytest.approx(0.5e6)
    assert slice_["args"] == {"batches": 8, "left_out_ms": pytest.approx(500.0),
                              "wait_ms": pytest.approx(400.0)}
