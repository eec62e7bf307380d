"""End-to-end `paddletune profile` runs in real subprocesses: the script runs exactly as under
`python`, its exit paths and signals give Python's status, and the profile survives them all
(docs/reliability.md cases 16-21, 25)."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from paddletune.profile import load
from paddletune.profile.figures import ExitFigures
from paddletune.profile.summarize import training_steps

REPO = Path(__file__).resolve().parents[1]
TIMEOUT_S = 120

# A small training loop; `STEP_HOOK(step)` lets each test make a step misbehave.
TRAIN = '''
import sys, time
import numpy as np
import runtime as fluid

def build():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [None, 4])
        y = fluid.data("y", [None, 1])
        pred = fluid.layers.fc(fluid.layers.log(x), 1)
        loss = fluid.layers.mean(fluid.layers.square_error_cost(pred, y))
        fluid.optimizer.SGD(0.01).minimize(loss)
    return main, startup, loss

def train(n_steps, hook=lambda step, x: x):
    main, startup, loss = build()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    rng = np.random.default_rng(0)
    step = 0
    while n_steps is None or step < n_steps:
        x = rng.uniform(0.5, 2.0, (8, 4)).astype("float32")
        x = hook(step, x)
        exe.run(main, feed={"x": x, "y": x[:, :1]}, fetch_list=[loss])
        step += 1
    return step
'''


def write_script(tmp_path, body, name="train.py"):
    path = tmp_path / name
    path.write_text(TRAIN + textwrap.dedent(body))
    return path


def profile(tmp_path, *argv, cwd=None, **kwargs):
    cmd = [sys.executable, "-m", "paddletune", "profile", "--interval", "0.05", *argv]
    return subprocess.run(cmd, cwd=cwd or tmp_path, capture_output=True, text=True,
                          timeout=TIMEOUT_S, **kwargs)


def test_profile_writes_a_readable_profile_and_report(tmp_path):
    script = write_script(tmp_path, "train(30)\nprint('trained')\n")
    out = tmp_path / "p.jsonl"
    proc = profile(tmp_path, "--out", str(out), str(script))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "trained\n"  # the script's stdout is its own
    prof = load(out)
    assert prof.complete and not prof.truncated
    assert prof.summary.n_steps == 30
    assert prof.summary.exit == ExitFigures(status=0, reason="returned", message=None)
    assert prof.env.cpu.logical_cores >= 1
    assert prof.system, "the system probe sampled nothing"
    assert f"profile written to {out}" in proc.stderr
    assert "bound" in proc.stderr or "Too few" in proc.stderr  # the verdict is reported


def test_argv_name_and_path_are_as_under_python(tmp_path):
    script = tmp_path / "show.py"
    script.write_text("import sys, json\n"
                      "print(json.dumps([sys.argv, __name__, sys.path[0]]))\n")
    proc = profile(tmp_path, "-q", "--out", "p.jsonl", str(script), "--", "--lr", "0.1", "-v")
    assert proc.returncode == 0, proc.stderr
    argv, name, path0 = json.loads(proc.stdout)
    assert argv == [str(script), "--lr", "0.1", "-v"]
    assert name == "__main__"
    assert path0 == str(tmp_path)


def test_options_after_the_script_belong_to_the_script(tmp_path):
    script = tmp_path / "show.py"
    script.write_text("import sys\nprint(sys.argv[1:])\n")
    proc = profile(tmp_path, "-q", "--out", "p.jsonl", str(script), "--steps", "3")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "['--steps', '3']\n"


def test_script_raising_on_step_3_prints_pythons_traceback(tmp_path):
    script = write_script(tmp_path, """
        def boom(step, x):
            if step == 3:
                raise ValueError("bad batch at step 3")
            return x
        train(10, boom)
        """)
    proc = profile(tmp_path, "-q", "--out", "p.jsonl", str(script))
    plain = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                           text=True, timeout=TIMEOUT_S)
    assert proc.returncode == plain.returncode == 1
    assert proc.stderr.startswith(plain.stderr), proc.stderr  # then paddletune's own lines
    prof = load(tmp_path / "p.jsonl")
    assert prof.summary.n_steps == 3
    assert prof.summary.exit.reason == "exception"
    (error,) = prof.events_of("error")
    assert error.exception == "ValueError" and "train.py" in error.where


@pytest.mark.parametrize("call, status, stderr", [
    ("sys.exit(3)", 3, ""), ("sys.exit('cannot go on')", 1, "cannot go on\n"),
    ("sys.exit()", 0, ""), ("sys.exit(None)", 0, "")])
def test_sys_exit_status_is_the_scripts(tmp_path, call, status, stderr):
    script = write_script(tmp_path, f"train(4)\n{call}\n")
    proc = profile(tmp_path, "-q", "--out", "p.jsonl", str(script))
    assert proc.returncode == status
    assert proc.stderr == stderr
    prof = load(tmp_path / "p.jsonl")
    assert prof.complete and prof.summary.exit.status == status
    assert prof.summary.n_steps == 4


def test_os_exit_leaves_a_profile_readable_to_its_last_flush(tmp_path):
    script = write_script(tmp_path, "import os\ntrain(5)\ntime.sleep(1.2)\nos._exit(5)\n")
    proc = profile(tmp_path, "-q", "--out", "p.jsonl", str(script))
    assert proc.returncode == 5
    prof = load(tmp_path / "p.jsonl")
    assert not prof.complete
    assert prof.summary.n_steps == 5  # computed at load
    assert prof.summary.exit.reason == "unknown"


def _start_endless(tmp_path, procs, command=None, body=None):
    """An endless training loop (or `body`, which prints "running" when it runs) under
    `command` (default: `paddletune profile -q --out p.jsonl`), once it has run 20 steps;
    started through the `procs` fixture (a process group of its own, SIGINT at its default,
    killed whatever the test's end)."""
    script = write_script(tmp_path, body or """
        def announce(step, x):
            if step == 20:
                print("running", flush=True)
            return x
        train(None, announce)
        """)
    command = command or [sys.executable, "-m", "paddletune", "profile", "-q",
                          "--interval", "0.05", "--out", "p.jsonl"]
    proc = procs.popen([*command, str(script)], cwd=tmp_path, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "running\n"
    return proc


def test_sigint_keeps_the_profile_and_dies_by_sigint(tmp_path, procs):
    proc = _start_endless(tmp_path, procs)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=TIMEOUT_S)
    assert proc.returncode == -signal.SIGINT, stderr  # a shell shows 130
    assert "KeyboardInterrupt" in stderr
    prof = load(tmp_path / "p.jsonl")
    assert prof.complete and prof.summary.exit.reason == "interrupted"
    assert prof.summary.n_steps >= 20


@pytest.mark.parametrize("sig, status", [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_sigterm_and_sighup_keep_the_profile(tmp_path, procs, sig, status):
    """SIGTERM (a scheduler, `kill`) and SIGHUP (the terminal or ssh session closed) finish
    the profile, exit record and summary included, and exit as a shell reports them."""
    proc = _start_endless(tmp_path, procs)
    proc.send_signal(sig)
    proc.communicate(timeout=TIMEOUT_S)
    assert proc.returncode == status
    prof = load(tmp_path / "p.jsonl")
    assert prof.complete and prof.summary.exit.reason == "terminated"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
@pytest.mark.parametrize("child_end", ["sys.exit(0)", "raise ValueError('in the child')"])
def test_a_forked_child_that_returns_into_paddletune_leaves_the_profile_alone(tmp_path,
                                                                           child_end):
    """A process the script forks ends through sys.exit or an exception, so it returns into
    paddletune's session as the parent will: it must end as Python would, without a second
    exit record, summary or report, and without writing to the profile."""
    script = write_script(tmp_path, f"""
        import os
        train(5)
        child = os.fork()
        if child == 0:
            time.sleep(0.3)  # the parent's probes write meanwhile
            {child_end}
        _, status = os.waitpid(child, 0)
        print("child status", os.waitstatus_to_exitcode(status), flush=True)
        train(5)
        """)
    proc = profile(tmp_path, "--out", "p.jsonl", str(script))
    assert proc.returncode == 0, proc.stderr
    expected = 0 if child_end.startswith("sys.exit") else 1
    assert f"child status {expected}" in proc.stdout
    assert proc.stderr.count("paddletune report") == 1
    prof = load(tmp_path / "p.jsonl")  # every line whole: nothing interleaved
    assert prof.complete and len(prof.events_of("exit")) == 1
    assert prof.events_of("exit")[0].status == 0 and not prof.events_of("error")
    assert len([s for s in prof.steps if not s.startup]) == 10  # two programs, 5 steps each


def test_steps_option_stops_the_job_cleanly(tmp_path):
    script = write_script(tmp_path, "train(None)\n")
    proc = profile(tmp_path, "-q", "--steps", "7", "--out", "p.jsonl", str(script))
    assert proc.returncode == 0, proc.stderr
    prof = load(tmp_path / "p.jsonl")
    assert prof.summary.n_steps == 7
    assert prof.summary.exit.reason == "step_limit"


def test_duration_option_stops_the_job_cleanly(tmp_path):
    """--duration 0.4s on an endless job: it stops at the first step to end 0.4 s after the
    first one did; with --steps too, whichever comes first."""
    script = write_script(tmp_path, "train(None)\n")
    proc = profile(tmp_path, "-q", "--duration", "0.4s", "--out", "p.jsonl", str(script))
    assert proc.returncode == 0, proc.stderr
    prof = load(tmp_path / "p.jsonl")
    assert prof.summary.exit.reason == "step_limit"
    train = training_steps(prof.steps)  # the first ones; a fast job's later steps are windows
    last = max([s.end_s for s in train] + [w.t_s for w in prof.windows
                                           if w.program == train[0].program])
    assert 0.39 <= last - train[0].end_s < 0.4 + 0.5  # one step past the limit at most
    [event] = prof.events_of("step_limit")
    assert "(--duration 0.4s)" in event.message
    proc = profile(tmp_path, "-q", "--duration", "1h", "--steps", "5", "--out", "q.jsonl",
                   str(script))
    assert proc.returncode == 0 and load(tmp_path / "q.jsonl").summary.n_steps == 5
    proc = profile(tmp_path, "--duration", "soon", str(script))
    assert proc.returncode == 2 and "--duration 'soon': give a duration" in proc.stderr


def test_script_that_never_runs_the_runtime(tmp_path):
    script = tmp_path / "idle.py"
    script.write_text("print('hello')\n")
    proc = profile(tmp_path, "--out", "p.jsonl", str(script))
    assert proc.returncode == 0
    assert "no training steps observed" in proc.stderr.lower()
    assert load(tmp_path / "p.jsonl").summary.verdict.kind == "too-few-steps"


@pytest.mark.parametrize("make, message", [
    (lambda d: d / "missing.py", "can't open file"),
    (lambda d: d, "is a directory"),
    (lambda d: (d / "bin.py").write_bytes(b"\x7fELF\0\0") and d / "bin.py", "not a Python")])
def test_bad_script_fails_before_anything_runs(tmp_path, make, message):
    proc = profile(tmp_path, "--out", "p.jsonl", str(make(tmp_path)))
    assert proc.returncode == 2
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "p.jsonl").exists()


@pytest.mark.parametrize("out", ["outdir", "/dev/null/p.jsonl"])
def test_bad_output_path_fails_before_the_script_starts(tmp_path, out):
    (tmp_path / "outdir").mkdir()
    script = tmp_path / "touch.py"
    script.write_text("open('ran', 'w').close()\n")
    proc = profile(tmp_path, "--out", out, str(script))
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("paddletune: ") and "Traceback" not in proc.stderr
    assert not (tmp_path / "ran").exists()


def test_module_with_relative_imports_and_chdir(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "helper.py").write_text(TRAIN)
    (pkg / "train.py").write_text("import os, sys\nfrom . import helper\n"
                                  "os.chdir(os.path.dirname(__file__))\n"
                                  "print(__name__, sys.argv[1:])\nhelper.train(6)\n")
    proc = profile(tmp_path, "-q", "--out", "p.jsonl", "-m", "pkg.train", "--", "a")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "__main__ ['a']\n"
    assert load(tmp_path / "p.jsonl").summary.n_steps == 6  # written where it was asked


def test_spawned_worker_defined_in_the_script_runs(tmp_path):
    script = tmp_path / "spawn.py"
    script.write_text(textwrap.dedent("""
        import multiprocessing as mp

        def square(x):
            return x * x

        if __name__ == "__main__":
            with mp.get_context("spawn").Pool(2) as pool:
                print(sum(pool.map(square, range(5))))
        """))
    proc = profile(tmp_path, "-q", "--out", "p.jsonl", str(script))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "30\n"


def test_check_nan_names_the_op_and_step(tmp_path):
    script = write_script(tmp_path, """
        import numpy as np
        def poison(step, x):
            if step == 7:
                x[0, 0] = -1.0  # log(-1) = NaN
            return x
        train(20, poison)
        """)
    proc = profile(tmp_path, "-q", "--check-nan", "--out", "p.jsonl", str(script))
    assert proc.returncode == 1
    assert "FLAGS_check_nan_inf: op log" in proc.stderr and "at step 7" in proc.stderr
    prof = load(tmp_path / "p.jsonl")
    (event,) = prof.events_of("nan_inf")
    assert (event.op_type, event.step, event.n_nan) == ("log", 7, 1)
    assert event.inputs == ("x",)
    assert prof.summary.n_steps == 7


def test_json_summary_on_stdout_and_ops(tmp_path):
    script = write_script(tmp_path, "train(25)\nprint('script output')\n")
    proc = profile(tmp_path, "--json", "--ops", "--out", "p.jsonl", str(script))
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["n_steps"] == 25 and "script output" in proc.stderr
    types = {row["type"] for row in summary["ops"]["by_type"]}
    assert {"mul", "log", "sgd"} <= types
    assert abs(sum(row["share"] for row in summary["ops"]["by_type"]) - 1.0) < 1e-6
    assert "ops" in summary["overhead"] and "step" in summary["overhead"]


def test_report_advise_and_export_read_the_saved_profile(tmp_path):
    script = write_script(tmp_path, "train(20)\n")
    assert profile(tmp_path, "-q", "--ops", str(script)).returncode == 0
    runs = list((tmp_path / "paddletune-runs").glob("*-train.jsonl"))
    assert len(runs) == 1  # the default output path
    cli = [sys.executable, "-m", "paddletune"]
    report = subprocess.run(cli + ["report", str(runs[0])], cwd=tmp_path, capture_output=True,
                            text=True, timeout=TIMEOUT_S)
    assert report.returncode == 0 and "step" in report.stdout.lower(), report.stderr
    advise = subprocess.run(cli + ["advise", "--json"], cwd=tmp_path, capture_output=True,
                            text=True, timeout=TIMEOUT_S)  # default: the newest profile
    assert advise.returncode == 0, advise.stderr
    assert isinstance(json.loads(advise.stdout), list)
    export = subprocess.run(cli + ["export", str(runs[0]), "--format", "chrome"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=TIMEOUT_S)
    assert export.returncode == 0, export.stderr
    trace = json.loads(runs[0].with_suffix(".trace.json").read_text())
    assert any(e.get("ph") == "X" for e in trace["traceEvents"])


def test_report_of_a_corrupt_profile_names_the_line(tmp_path):
    good = tmp_path / "good.jsonl"
    script = write_script(tmp_path, "train(5)\n")
    assert profile(tmp_path, "-q", "--out", str(good), str(script)).returncode == 0
    lines = good.read_text().splitlines(keepends=True)
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(lines[:2]) + "{not json\n" + "".join(lines[2:]))
    proc = subprocess.run([sys.executable, "-m", "paddletune", "report", str(bad)],
                          capture_output=True, text=True, timeout=TIMEOUT_S)
    assert proc.returncode == 1
    assert f"{bad}:3: corrupt profile record" in proc.stderr and "Traceback" not in proc.stderr


def test_sigkill_leaves_a_profile_readable_to_its_last_full_line(tmp_path, procs):
    proc = _start_endless(tmp_path, procs)
    time.sleep(2.5)  # flushes happen every 0.5 s (at most 1 s late when starved)
    proc.kill()
    proc.communicate(timeout=TIMEOUT_S)
    prof = load(tmp_path / "p.jsonl")
    assert not prof.complete and prof.summary.n_steps >= 20
    assert prof.summary.exit.reason == "unknown"


def test_a_ctrl_c_the_script_catches_lets_it_go_on_as_under_python(tmp_path, procs):
    """A script that catches KeyboardInterrupt (a "stop and save" loop) goes on after it as
    under plain Python: only a second Ctrl-C soon after the first ends the job at once."""
    proc = _start_endless(tmp_path, procs, body="""
        def announce(step, x):
            if step == 20:
                print("running", flush=True)
            return x
        try:
            train(None, announce)
        except KeyboardInterrupt:
            print("saving", flush=True)
            train(30)
            print("saved", flush=True)
        """)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=TIMEOUT_S)
    assert proc.returncode == 0, err
    assert out == "saving\nsaved\n"
    assert load(tmp_path / "p.jsonl").summary.exit.reason == "returned"


@pytest.mark.skipif(not os.access("/dev/full", os.W_OK), reason="needs a writable /dev/full")
@pytest.mark.parametrize("tail, status", [("", 0), ("sys.exit(4)\n", 4)])
def test_disk_full_warns_once_and_keeps_the_result(tmp_path, tail, status):
    script = write_script(tmp_path, f"train(10)\nprint('done')\n{tail}")
    proc = profile(tmp_path, "--out", "/dev/full", str(script))
    assert proc.returncode == status
    assert proc.stdout == "done\n"
    assert proc.stderr.count("No space left on device") == 1, proc.stderr
    assert "Traceback" not in proc.stderr


def test_load_refuses_a_device(tmp_path):
    from paddletune.profile import ProfileError
    with pytest.raises(ProfileError, match="not a regular file"):
        load("/dev/null")
