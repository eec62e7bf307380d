"""The tuning record's file: a default path no two runs share (claimed with O_EXCL), and a
save that is atomic and durable (temporary file, fsync, rename)."""

import os
import threading
import time

import pytest

from paddletune import profile as prof
from paddletune.tune import record as rec


@pytest.fixture
def same_second(monkeypatch):
    """Every run starts in the same second."""
    monkeypatch.setattr(time, "strftime", lambda fmt, *args: "20260101-120000")


def test_runs_started_in_the_same_second_get_their_own_record(tmp_path, same_second):
    runs = tmp_path / "runs"
    first = rec.default_path("x/train.py", runs)
    second = rec.default_path("x/train.py", runs)  # before the first saved anything
    assert first.name == "20260101-120000-train.tune.json"
    assert second.name == "20260101-120000-train-2.tune.json"
    assert first.is_file() and second.is_file()  # claimed: no later run takes them


def test_concurrent_default_paths_are_unique(tmp_path, same_second):
    runs = tmp_path / "runs"
    paths, start = [], threading.Barrier(8)

    def claim(default_path, name):
        start.wait()
        paths.append(default_path(name, runs))

    threads = [threading.Thread(target=claim, args=(f, "train.py"))
               for f in (rec.default_path, prof.default_path) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(paths)) == 8 and all(p.parent == runs for p in paths)


def test_unwritable_runs_folder_is_an_os_error(tmp_path):
    blocker = tmp_path / "runs"
    blocker.write_text("")  # a file where the folder should be
    with pytest.raises(OSError):
        rec.default_path("train.py", blocker)


def test_save_fsyncs_a_temporary_file_then_renames_it(tmp_path, monkeypatch):
    path = tmp_path / "r.tune.json"
    calls = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append("fsync"), real_fsync(fd))[1])
    monkeypatch.setattr(os, "replace", lambda a, b: (calls.append(("replace", os.path.dirname(
        a), os.fspath(b))), real_replace(a, b))[1])
    rec.save({"type": rec.KIND, "n": 1}, path)
    assert calls == ["fsync", ("replace", str(tmp_path), str(path))]
    assert rec.load(path)["n"] == 1 and os.listdir(tmp_path) == ["r.tune.json"]


def test_a_crash_mid_save_leaves_the_previous_record_and_no_debris(tmp_path, monkeypatch):
    path = tmp_path / "r.tune.json"
    rec.save({"type": rec.KIND, "n": 1}, path)

    def crash(fd):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(os, "fsync", crash)
    with pytest.raises(OSError):
        rec.save({"type": rec.KIND, "n": 2, "trials": ["x" * 100000]}, path)
    assert rec.load(path)["n"] == 1 and os.listdir(tmp_path) == ["r.tune.json"]


def test_a_claimed_record_not_yet_written_says_so(tmp_path):
    path = rec.default_path("train.py", tmp_path)
    with pytest.raises(rec.RecordError, match="it is empty"):
        rec.load(path)
