"""The profile file: writer (background flush, failure isolation), load() (truncation,
corruption, newer schema, records that do not fit their class, unknown kinds, v1 profiles,
summary computed when missing) and the frozen Profile it returns."""

import json
import time

import pytest

from paddletune import profile as prof
from paddletune.profile import records as r
from paddletune.profile.codec import from_json, to_json
from paddletune.profile.schema import FrozenDict, SchemaError
from profiles import DiskFullFile, make_profile, step_records


def test_roundtrip_keeps_every_record_kind(tmp_path):
    extra = [{"type": "sample", "probe": "system", "t": 0.2, "rss_bytes": 10},
             {"type": "event", "t": 0.3, "kind": "note", "message": "hi"},
             {"type": "probe", "name": "step", "available": True, "reason": None,
              "overhead_s": 0.001, "in_step": True, "result": {}},
             {"type": "ops", "program": 1, "step": 3, "ops": [[0, "mul", 0.1, 0.001]]}]
    p = prof.load(make_profile(tmp_path / "p.jsonl", extra=extra))
    assert p.complete and not p.truncated and p.warnings == ()
    assert len(p.steps) == 41 and p.system[0].rss_bytes == 10
    assert p.events_of("note")[0].message == "hi"
    assert p.probes["step"].overhead_s == 0.001 and p.ops[0].step == 3
    assert p.ops[0].ops == (r.OpTime(0, "mul", 0.1, 0.001),)
    with pytest.raises(Exception):  # frozen
        p.header = {}


def test_every_record_class_survives_encode_and_decode():
    step = r.Step(0.5, 1, 2, 3, 0.01, 0.001, 0.008, 0.001, 0.002, 64, 100, 4, fetch=("loss",),
                  feed=("x",), startup=False, place="CPUPlace")
    interval = r.ReaderInterval(0.0, 0.5, 3, 1, pops=4, wait_hist={-30: 4},
                                workers={-1: r.WorkerCounts(4, 0.1, 0.05)},
                                cost={640: r.StepCost(4, 0.02)}, shapes={"x": {"64x10": 4}})
    trace = r.MemoryTrace(0.1, 1, 1, True, False, ops=(r.MemoryTraceOp(0, "mul", 0, 10, 5),),
                          inplace_candidates={2: (("b", "a"),)})
    for record in (step, interval, trace, r.ExitEvent(1.0, 0, "returned", 40),
                   r.SchedStep(0.1, 1, 1, 0, 2, 4, "AllReduce", 0.01, (0.005, 0.004))):
        assert from_json(json.loads(json.dumps(to_json(record)))) == record


def test_loaded_records_are_frozen_all_the_way_down(tmp_path):
    from profiles import reader_records
    steps = step_records()
    p = prof.load(make_profile(tmp_path / "p.jsonl", steps=steps,
                               extra=reader_records(steps)))
    interval = p.records("reader", r.ReaderInterval)[0]
    assert isinstance(interval.wait_hist, FrozenDict)
    with pytest.raises(TypeError):
        interval.wait_hist[0] = 1
    with pytest.raises(TypeError):
        p.summary.reader.loaders[0].shapes["img"] = None
    assert isinstance(p.steps[1].fetch, tuple)


def test_truncated_last_line_is_ignored_and_summary_computed(tmp_path):
    path = make_profile(tmp_path / "p.jsonl", summary=False, exit_reason=None)
    text = path.read_text()
    path.write_text(text[:-25])  # killed mid-write
    p = prof.load(path)
    assert p.truncated and not p.complete
    assert p.summary.n_steps == 39  # the last step record was cut
    assert p.summary.exit.reason == "unknown"


def test_corrupt_line_is_an_error_naming_it(tmp_path):
    path = make_profile(tmp_path / "p.jsonl")
    lines = path.read_text().splitlines(keepends=True)
    lines[4] = '{"type": "step", oops\n'
    path.write_text("".join(lines))
    with pytest.raises(prof.ProfileError, match=r"p\.jsonl:5: corrupt profile record"):
        prof.load(path)


def test_a_record_that_does_not_fit_is_skipped_with_a_warning_naming_line_and_field(tmp_path):
    path = make_profile(tmp_path / "p.jsonl")
    lines = path.read_text().splitlines(keepends=True)
    bad = json.loads(lines[5])
    bad["wall_s"] = "fast"
    lines[5] = json.dumps(bad) + "\n"
    path.write_text("".join(lines))
    p = prof.load(path)
    assert len(p.steps) == 40 and len(p.warnings) == 1
    assert "p.jsonl:6: skipped 1 record of kind 'step'" in p.warnings[0]
    assert "field wall_s: expected a number, got 'fast'" in p.warnings[0]


def test_a_header_that_does_not_fit_is_an_error(tmp_path):
    path = make_profile(tmp_path / "p.jsonl")
    lines = path.read_text().splitlines(keepends=True)
    header = json.loads(lines[0])
    header["env"]["cpu"]["usable_cores"] = "two"
    lines[0] = json.dumps(header) + "\n"
    path.write_text("".join(lines))
    with pytest.raises(prof.ProfileError, match=r"p\.jsonl:1: the header does not fit.*"
                                                r"env\.cpu\.usable_cores"):
        prof.load(path)


def test_unknown_record_kinds_are_skipped_and_unknown_events_kept(tmp_path):
    extra = [{"type": "from-the-future", "t": 1.0}, {"type": "from-the-future", "t": 2.0},
             {"type": "sample", "probe": "tpu", "t": 1.0},
             {"type": "event", "t": 0.5, "kind": "checkpoint", "message": "saved"}]
    p = prof.load(make_profile(tmp_path / "p.jsonl", extra=extra))
    assert p.events_of("checkpoint")[0].message == "saved"
    assert len(p.warnings) == 2
    assert any("skipped 2 records of kind 'from-the-future'" in w for w in p.warnings)
    assert any("'sample tpu'" in w for w in p.warnings)


def test_a_summary_record_that_does_not_fit_is_computed_again(tmp_path):
    path = make_profile(tmp_path / "p.jsonl")
    lines = path.read_text().splitlines(keepends=True)
    summary = json.loads(lines[-1])
    summary["n_steps"] = -3
    lines[-1] = json.dumps(summary) + "\n"
    path.write_text("".join(lines))
    p = prof.load(path)
    assert p.complete and p.summary.n_steps == 40
    assert "kind 'summary'" in p.warnings[0]


@pytest.mark.parametrize("content, message", [
    ('{"type": "step"}\n', "not a paddletune profile"),
    ("", "is empty: its job is starting"),
    ("\n\n", "not a paddletune profile"),
    ('[1, 2]\n', "not a paddletune profile"),
    ('\x00\x01\x02binary\n', "binary data, not a paddletune profile")])
def test_not_a_profile(tmp_path, content, message):
    path = tmp_path / "x.jsonl"
    path.write_text(content)
    with pytest.raises(prof.ProfileError, match=message):
        prof.load(path)


def test_deep_nesting_is_a_clear_error(tmp_path):
    path = make_profile(tmp_path / "p.jsonl")
    with open(path, "a") as f:
        f.write('{"type": "event", "t": 1, "kind": "x", "inputs": ' + "[" * 100000 +
                "]" * 100000 + "}\n")
        f.write('{"type": "event", "t": 2, "kind": "x"}\n')
    with pytest.raises(prof.ProfileError, match="nested too deeply"):
        prof.load(path)


def test_newer_schema_is_refused_with_upgrade_hint(tmp_path):
    path = make_profile(tmp_path / "p.jsonl")
    lines = path.read_text().splitlines(keepends=True)
    header = json.loads(lines[0])
    header["schema"] = prof.SCHEMA_VERSION + 1
    path.write_text(json.dumps(header) + "\n" + "".join(lines[1:]))
    with pytest.raises(prof.ProfileError, match="newer paddletune.*upgrade"):
        prof.load(path)


def test_a_v1_profile_is_converted_on_read(tmp_path):
    """A schema-1 profile (plain dicts: `t`, `pass`, memory figures without `_bytes`, the
    memory probe's `result`, a v1 summary) loads, its summary computed again."""
    from profiles import DEFAULT_ENV, memory_records, reader_records
    steps = step_records()
    header = {"type": "header", "schema": 1, "tool": "paddletune 0.0.9", "t0_unix": 1.7e9,
              "pid": 1, "command": {"argv": ["train.py"]}, "env": DEFAULT_ENV,
              "options": {"warmup": None, "out": "x.jsonl"}}
    v1 = [header, *steps, *reader_records(steps), *memory_records(steps),
          {"type": "event", "t": 1.0, "kind": "exit", "status": 0, "reason": "returned"},
          {"type": "summary", "n_steps": "whatever v1 wrote"}]
    p = prof.load(prof.write_records(tmp_path / "v1.jsonl", v1))
    assert p.complete and p.warnings == () and p.header.t0_unix_s == 1.7e9
    s = p.summary
    assert s.n_steps == 40 and s.reader.loaders[0].batches == 30
    assert s.memory.capacity_bytes == 1 << 30 and s.memory.strategy == "auto_growth"
    assert p.records("reader", r.ReaderStart)[0].pass_no == 1


def test_missing_and_directory(tmp_path):
    with pytest.raises(prof.ProfileError, match="no such profile"):
        prof.load(tmp_path / "nope.jsonl")
    with pytest.raises(prof.ProfileError, match="is a directory"):
        prof.load(tmp_path)


def _header():
    return prof.header_record({"argv": ["t.py"]}, {}, {}, t0_unix=1.7e9)


def test_writer_flushes_in_the_background(tmp_path):
    w = prof.ProfileWriter(tmp_path / "w.jsonl", flush_interval_s=0.02)
    w.submit(_header())
    deadline = time.time() + 5
    while time.time() < deadline and not (tmp_path / "w.jsonl").read_text():
        time.sleep(0.01)
    assert json.loads((tmp_path / "w.jsonl").read_text())["schema"] == 2
    w.close()
    w.close()  # idempotent


def test_writer_finish_writes_the_summary_of_what_it_kept(tmp_path):
    w = prof.ProfileWriter(tmp_path / "w.jsonl", flush_interval_s=60)
    w.submit(_header())
    for i in range(30):
        w.submit(r.Step(0.01 * i, 1, 1, i, 0.01, 0.0, 0.01, 0.0, 0.0 if i else None, 8,
                        startup=False))
    summary = w.finish()
    assert summary.n_steps == 30
    assert prof.load(tmp_path / "w.jsonl").summary == summary


def test_writer_failure_warns_once_and_never_raises(tmp_path):
    warnings = []
    w = prof.ProfileWriter(tmp_path / "w.jsonl", flush_interval_s=60, warn=warnings.append)
    w._file = DiskFullFile()
    w.submit(_header())
    for _ in range(3):
        w.submit(r.Event(0.1))
        w.flush()
    assert w.finish() is None
    assert len(warnings) == 1 and "No space left" in warnings[0]
    assert w.failed


def test_numpy_values_are_written_as_plain_json(tmp_path):
    import numpy as np
    path = prof.write_records(tmp_path / "n.jsonl", [{"type": "x", "v": np.float32(1.5),
                                                      "n": np.int64(3), "s": (1, 2)}])
    assert json.loads(path.read_text()) == {"type": "x", "v": 1.5, "n": 3, "s": [1, 2]}


def test_latest_picks_the_newest(tmp_path):
    import os
    runs = tmp_path / "runs"
    with pytest.raises(prof.ProfileError, match="paddletune profile"):
        prof.latest(runs)
    runs.mkdir()
    a, b = make_profile(runs / "a.jsonl"), make_profile(runs / "b.jsonl")
    os.utime(a, (1e9, 1e9))
    assert prof.latest(runs) == b
    assert prof.default_path("x/train.py", runs).name.endswith("-train.jsonl")


def test_latest_skips_a_profile_still_empty_unless_following_a_starting_job(tmp_path):
    """A run that is starting (or was killed in its first half second) has an empty profile:
    report/advise take the newest one with records; watch may follow the starting one."""
    import os
    done = make_profile(tmp_path / "done.jsonl")
    os.utime(done, (1e9, 1e9))
    starting = tmp_path / "starting.jsonl"
    starting.write_text("")
    assert prof.latest(tmp_path) == done
    assert prof.latest(tmp_path, starting=True) == starting


def test_schema_errors_name_the_field_path():
    with pytest.raises(SchemaError, match=r"^wait_hist\['x'\]: expected an integer key"):
        from_json({"type": "reader", "what": "interval", "t0_s": 0, "t_s": 1, "loader": 1,
                   "pass_no": 1, "wait_hist": {"x": 1}})
    with pytest.raises(SchemaError, match=r"^ops\[0\]\.type: expected a string"):
        from_json({"type": "program", "t_s": 0, "program": 1, "ops": [{"type": 3}]})
    with pytest.raises(SchemaError, match=r"^batch_size: .* outside"):
        from_json({"type": "step", "t_s": 0, "program": 1, "executor": 1, "step": 0,
                   "wall_s": 1, "feed_s": 0, "compute_s": 1, "fetch_s": 0,
                   "batch_size": -4})


def test_the_settings_the_job_changed_are_the_loaded_env_flags(tmp_path):
    settings = {"type": "event", "kind": "settings", "t": 0.1,
                "flags": {"FLAGS_eager_delete_tensor_gb": 1.0, "FLAGS_new": True},
                "message": "the job set them"}
    env = {"flags": {"FLAGS_eager_delete_tensor_gb": 0.0, "FLAGS_allocator_strategy": "x"}}
    loaded = prof.load(make_profile(tmp_path / "p.jsonl", env=env, extra=[settings]))
    assert dict(loaded.env.flags) == {"FLAGS_eager_delete_tensor_gb": 1.0,
                                      "FLAGS_allocator_strategy": "x", "FLAGS_new": True}
    assert loaded.last_event("settings").message == "the job set them"
    unknown = prof.load(make_profile(tmp_path / "q.jsonl", env={"flags": None},
                                     extra=[settings]))
    assert unknown.env.flags is None  # (nothing to update: the header's are unknown)
    plain = prof.load(make_profile(tmp_path / "r.jsonl", env=env))
    assert dict(plain.env.flags) == env["flags"]
