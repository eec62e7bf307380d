"""No earlier output is destroyed before its replacement is complete: a profile (or --live log)
at a path that already holds one is written beside it and renamed over it only once complete;
a symbolic link planted at the path is replaced, never written through; a device is never
renamed over. Real subprocesses, reaped by the `procs` fixture."""

import os
import signal
import sys
import time
from pathlib import Path

from paddletune import profile as prof
from paddletune.profile import records as r
from paddletune.profile.paths import replaceable, writing_path
from profiles import DiskFullFile
from test_profile_cli import TIMEOUT_S, write_script


def profile_cmd(*argv):
    return [sys.executable, "-m", "paddletune", "profile", "-q", "--interval", "0.05", *argv]


def run_profile(procs, tmp_path, *argv):
    """`paddletune profile -q ARGV` to its end; its CompletedProcess (output captured)."""
    import subprocess
    done = procs.run(profile_cmd(*argv), TIMEOUT_S, cwd=tmp_path, stdout=subprocess.PIPE,
                     stderr=subprocess.PIPE, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def test_a_rerun_keeps_the_earlier_profile_until_its_own_is_complete(tmp_path, procs):
    script = write_script(tmp_path, "train(30)\n")
    out = tmp_path / "p.jsonl"
    run_profile(procs, tmp_path, "--out", str(out), str(script))
    first = out.read_bytes()
    endless = write_script(tmp_path, """
        def announce(step, x):
            if step == 20:
                print("running", flush=True)
            return x
        train(None, announce)
        """, name="endless.py")
    import subprocess
    proc = procs.popen(profile_cmd("--out", str(out), str(endless)), cwd=tmp_path,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "running\n"
    assert out.read_bytes() == first  # the new run writes beside it meanwhile
    part = out.with_name(f"p.jsonl.{proc.pid}.part")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and b'"type":"step"' not in part.read_bytes():
        time.sleep(0.05)  # its first flush
    watched = procs.run([sys.executable, "-m", "paddletune", "watch", "--once", "--plain",
                         str(out)], TIMEOUT_S, cwd=tmp_path, stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE, text=True)
    assert "steps/s" in watched.stdout and "finished" not in watched.stdout, watched  # live
    os.killpg(proc.pid, signal.SIGKILL)  # killed: the earlier profile is still whole
    proc.communicate(timeout=TIMEOUT_S)
    assert out.read_bytes() == first and prof.load(out).complete
    assert prof.load(part).summary.n_steps >= 20  # and the killed run's, readable beside it
    assert prof.latest(tmp_path) == out  # report/advise never take a part file for newest
    watched = procs.run([sys.executable, "-m", "paddletune", "watch", "--once", "--plain",
                         str(out)], TIMEOUT_S, cwd=tmp_path, stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE, text=True)
    assert "finished: exit 0" in watched.stdout  # the killed run's part is not live
    run_profile(procs, tmp_path, "--out", str(out), str(script))
    assert out.read_bytes() != first and prof.load(out).complete  # replaced once complete
    assert not list(tmp_path.glob("p.jsonl.*.part"))[1:]  # only the killed run's remains


def test_a_symlink_planted_at_the_path_is_replaced_not_written_through(tmp_path, procs):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    out = tmp_path / "p.jsonl"
    out.symlink_to(victim)
    script = write_script(tmp_path, "train(12)\n")
    run_profile(procs, tmp_path, "--out", str(out), str(script))
    assert victim.read_text() == "precious\n"
    assert not out.is_symlink() and prof.load(out).summary.n_steps == 12


def test_a_writer_that_cannot_write_keeps_the_earlier_profile(tmp_path):
    out = tmp_path / "p.jsonl"
    out.write_text("the earlier profile\n")
    warnings = []
    w = prof.ProfileWriter(writing_path(out), flush_interval_s=60, warn=warnings.append,
                           final=out)
    w._file = DiskFullFile()
    w.submit(prof.header_record({"argv": ["t.py"]}, {}, {}, 1.7e9))
    w.submit(r.Event(0.1))
    assert w.finish() is None and w.failed
    assert out.read_text() == "the earlier profile\n"
    assert len(warnings) == 1


def test_where_a_profile_is_written(tmp_path):
    missing, empty, full = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    empty.write_text("")
    full.write_text("x")
    assert writing_path(missing) == missing and writing_path(empty) == empty
    assert writing_path(full) == full.with_name(f"c.{os.getpid()}.part")
    link = tmp_path / "l"
    link.symlink_to(full)
    assert writing_path(link) == link.with_name(f"l.{os.getpid()}.part")
    assert writing_path(Path("/dev/null")) == Path("/dev/null")  # never beside a device
    assert replaceable(full) and replaceable(link) and replaceable(missing)
    assert not replaceable(Path("/dev/null"))


def test_the_live_log_of_an_earlier_run_is_kept_until_the_new_one_is_complete(tmp_path, procs):
    """`--live` on a terminal sends the script's output to <profile>.log; an earlier run's log
    there is replaced when the job ends, not emptied when it starts."""
    script = write_script(tmp_path, """
        import os
        print("new output", flush=True)
        with open(os.environ["SEEN"], "w") as seen:  # what the log held while the job ran
            seen.write(open(os.environ["LOG"]).read())
        train(12)
        """)
    out, log = tmp_path / "p.jsonl", tmp_path / "p.log"
    log.write_text("the earlier run's output\n")
    runner = (
        "import sys; from paddletune import session; from paddletune.live.runner import run_live\n"
        "class Screen:\n"
        "    def open(self, f): pass\n"
        "    def draw(self, state): pass\n"
        "    def close(self, state=None): pass\n"
        f"o = session.Options({str(script)!r}, out={str(out)!r}, live=True)\n"
        "outcome, cost, log = run_live(o, Screen(), redirect=True)\n"
        "print('done', outcome.status, log, file=sys.__stderr__)\n")
    import subprocess
    seen = tmp_path / "seen.txt"
    done = procs.run([sys.executable, "-c", runner], TIMEOUT_S, cwd=tmp_path,
                     env={**os.environ, "LOG": str(log), "SEEN": str(seen)},
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert "done 0" in done.stderr, done.stderr
    assert seen.read_text() == "the earlier run's output\n"
    assert "new output" in log.read_text() and "earlier" not in log.read_text()
    assert prof.load(out).summary.n_steps == 12


def test_a_process_left_running_is_reaped_by_the_fixture(procs):
    """The `procs` fixture kills what a test started (here: on purpose, an endless child)."""
    proc = procs.popen([sys.executable, "-c", "import time; time.sleep(60)"])
    time.sleep(0.1)
    procs.reap()
    assert proc.wait(timeout=10) == -signal.SIGKILL


def test_sealing_a_profile_at_once(tmp_path):
    """A job about to be killed (a second Ctrl-C): what is queued and its exit record are
    written, the open windows closed and the file renamed into place, without a summary
    (load computes it); a writer whose file is busy past the timeout is left alone."""
    out = tmp_path / "p.jsonl"
    out.write_text("the earlier profile\n")
    w = prof.ProfileWriter(writing_path(out), flush_interval_s=60, final=out)
    w.submit(prof.header_record({"argv": ["train.py"]}, {}, {}, 0.0))
    exit_record = r.ExitEvent(t_s=1.0, status=130, reason="interrupted")
    with w._lock:  # another thread writing meanwhile
        assert w.seal([exit_record], timeout_s=0.05) is False
    assert out.read_text() == "the earlier profile\n"
    assert w.seal([exit_record]) is True
    loaded = prof.load(out)
    assert list(loaded.events_of("exit")) == [exit_record] and not loaded.complete
    assert loaded.summary.exit.reason == "interrupted"
