"""The profile file: writer (background flush, failure isolation) and load() (truncation,
corruption, newer schema, summary computed when missing)."""

import json

import pytest

from paddletune import profile as prof
from profiles import make_profile, step_records


def test_roundtrip_keeps_every_record_kind(tmp_path):
    extra = [{"type": "sample", "probe": "system", "t": 0.2, "rss_bytes": 10},
             {"type": "event", "t": 0.3, "kind": "note", "message": "hi"},
             {"type": "probe", "name": "step", "available": True, "reason": None,
              "overhead_s": 0.001, "in_step": True, "result": {}},
             {"type": "ops", "program": 1, "step": 3, "ops": [[0, "mul", 0.1, 0.001]]},
             {"type": "from-the-future", "t": 1.0}]
    p = prof.load(make_profile(tmp_path / "p.jsonl", extra=extra))
    assert p.complete and not p.truncated
    assert len(p.steps) == 41 and p.samples["system"][0]["rss_bytes"] == 10
    assert p.events_of("note")[0]["message"] == "hi"
    assert p.probes["step"]["overhead_s"] == 0.001 and p.ops[0]["step"] == 3
    with pytest.raises(Exception):  # frozen
        p.header = {}


def test_truncated_last_line_is_ignored_and_summary_computed(tmp_path):
    path = make_profile(tmp_path / "p.jsonl", summary=False, exit_reason=None)
    text = path.read_text()
    path.write_text(text[:-25])  # killed mid-write
    p = prof.load(path)
    assert p.truncated and not p.complete
    assert p.summary["n_steps"] == 39  # the last step record was cut
    assert p.summary["exit"]["reason"] == "unknown"


def test_corrupt_line_is_an_error_naming_it(tmp_path):
    path = make_profile(tmp_path / "p.jsonl")
    lines = path.read_text().splitlines(keepends=True)
    lines[4] = '{"type": "step", oops\n'
    path.write_text("".join(lines))
    with pytest.raises(prof.ProfileError, match=r"p\.jsonl:5: corrupt profile record"):
        prof.load(path)


@pytest.mark.parametrize("content, message", [
    ('{"type": "step"}\n', "not a paddletune profile"),
    ("", "not a paddletune profile"),
    ('[1, 2]\n', "corrupt profile record")])
def test_not_a_profile(tmp_path, content, message):
    path = tmp_path / "x.jsonl"
    path.write_text(content)
    with pytest.raises(prof.ProfileError, match=message):
        prof.load(path)


def test_newer_schema_is_refused_with_upgrade_hint(tmp_path):
    path = make_profile(tmp_path / "p.jsonl")
    lines = path.read_text().splitlines(keepends=True)
    header = json.loads(lines[0])
    header["schema"] = prof.SCHEMA_VERSION + 1
    path.write_text(json.dumps(header) + "\n" + "".join(lines[1:]))
    with pytest.raises(prof.ProfileError, match="newer paddletune.*upgrade"):
        prof.load(path)


def test_missing_and_directory(tmp_path):
    with pytest.raises(prof.ProfileError, match="no such profile"):
        prof.load(tmp_path / "nope.jsonl")
    with pytest.raises(prof.ProfileError, match="is a directory"):
        prof.load(tmp_path)


def test_writer_flushes_in_the_background(tmp_path):
    w = prof.ProfileWriter(tmp_path / "w.jsonl", flush_interval_s=0.02)
    w.submit({"type": "header", "schema": 1})
    import time
    deadline = time.time() + 5
    while time.time() < deadline and not (tmp_path / "w.jsonl").read_text():
        time.sleep(0.01)
    assert json.loads((tmp_path / "w.jsonl").read_text())["schema"] == 1
    w.close()
    w.close()  # idempotent


def test_writer_failure_warns_once_and_never_raises(tmp_path):
    warnings = []
    w = prof.ProfileWriter(tmp_path / "w.jsonl", flush_interval_s=60, warn=warnings.append)

    class Full:
        def write(self, text):
            raise OSError(28, "No space left on device")

        def flush(self):
            pass

        def close(self):
            pass

    w._file = Full()
    for _ in range(3):
        w.submit({"type": "step"})
        w.flush()
    w.close()
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
