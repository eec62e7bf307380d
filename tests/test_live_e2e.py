"""`paddletune profile --live` for real: in a tmux terminal (100 x 30) the dashboard shows
its panels while the job runs and the report follows a clean exit; Ctrl-C stops the job and
the profile is complete; without a terminal, plain status lines go to stderr."""

import os
import shlex
import subprocess
import sys
import textwrap
import time

import pytest

from tmuxpane import needs_tmux

from paddletune.profile import load

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JOB = '''
import sys, time
import numpy as np
import runtime as fluid

main, startup = fluid.Program(), fluid.Program()
with fluid.program_guard(main, startup):
    x = fluid.data("x", [None, 32])
    loss = fluid.layers.mean(fluid.layers.fc(fluid.layers.fc(x, 64, act="relu"), 1))
    fluid.optimizer.SGD(0.01).minimize(loss)
exe = fluid.Executor(fluid.CPUPlace())
exe.run(startup)
steps = int(sys.argv[1])
for step in range(steps if steps > 0 else 10 ** 9):
    batch = np.random.rand(16, 32).astype("float32")
    time.sleep(0.004)  # the loop's own work outside exe.run
    exe.run(main, feed={"x": batch}, fetch_list=[loss])
    if step % 100 == 0:
        print(f"step {step}", flush=True)
print("done", flush=True)
'''

def live_command(tmp_path, steps, *options):
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(JOB))
    env = f"PYTHONPATH={shlex.quote(REPO)}"
    return (f"{env} {shlex.quote(sys.executable)} -m paddletune profile --live --interval 0.2 "
            f"--out run.jsonl {' '.join(options)} job.py -- {steps}")


PANELS = ("Throughput (last", "Step time", "Reader queue", "Memory (pool, host, GPU)", "CPU",
          "Top ops", "Verdict and advice")


@needs_tmux
def test_live_dashboard_in_a_terminal_and_a_clean_exit(tmp_path, tmux):
    tmux.start(live_command(tmp_path, 600, "--total-steps", "600"))
    screen = tmux.wait_for(lambda s: "step 1" in s and "steps/s ·" in s and "Compute" in s
                           or "input-bound" in s, what="the dashboard with figures")
    lines = screen.splitlines()
    assert lines[0].startswith("paddletune live · job.py 600 · running")
    assert "of 600 (" in lines[1] and "ETA " in lines[1]
    assert "script output: " in lines[1]
    for title in PANELS:
        assert title in screen, title
    assert "N/A — no DataLoader/PyReader" in screen  # a panel without data says so
    assert max(len(line) for line in lines) <= 100 and len(lines) <= 30
    tmux.tmux("resize-window", "-t", "t", "-x", "80", "-y", "24")  # the 80 x 24 minimum
    small = tmux.wait_for(lambda s: "╭─ Throughput" in s and "─╮╭─ Step time" in s
                          and len(s.splitlines()[2]) == 80, what="a frame 80 wide")
    assert "Verdict and advice" in small and small.rstrip().splitlines()[-1].startswith("■ ok")
    final = tmux.wait_for(lambda s: "EXIT=" in s, what="the job's end")
    history = tmux.history()
    assert "EXIT=0" in final
    assert "paddletune report · job.py 600" in history  # the report, on the normal screen
    assert f"paddletune: the script's output is in {tmp_path / 'run.log'}" in history
    assert "step 100" not in history  # the script's output went to the log
    log = (tmp_path / "run.log").read_text()
    assert "step 500" in log and log.rstrip().endswith("done")
    profile = load(tmp_path / "run.jsonl")
    assert profile.complete and profile.summary.n_steps == 600
    assert profile.options.live is True and profile.options.total_steps == 600
    dash = profile.probes["dashboard"]
    assert dash.in_step is False and dash.details["frames"] >= 4
    assert dash.details["error"] is None
    assert "dashboard" in profile.summary.overhead


@needs_tmux
def test_ctrl_c_stops_the_job_and_keeps_the_profile(tmp_path, tmux):
    tmux.start(live_command(tmp_path, 0))  # runs until stopped
    tmux.wait_for(lambda s: "steps/s ·" in s, what="the dashboard")
    tmux.tmux("send-keys", "-t", "t", "C-c")
    final = tmux.wait_for(lambda s: "ECHO=" in s, what="the job's end")
    assert "EXIT=130" in final  # died by SIGINT, as Python does
    _terminal_left_as_it_was(tmux, final)
    history = tmux.history()
    assert "paddletune report · job.py 0" in history and "exit 130 (interrupted)" in history
    profile = load(tmp_path / "run.jsonl")
    assert profile.complete and profile.summary.exit.reason == "interrupted"
    assert profile.summary.n_steps > 0
    assert "KeyboardInterrupt" in (tmp_path / "run.log").read_text()


def test_without_a_terminal_plain_lines_go_to_stderr(tmp_path):
    command = live_command(tmp_path, 300, "--total-steps", "300")
    done = subprocess.run(command, shell=True, cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert "step 200" in done.stdout and "done" in done.stdout  # not redirected
    status = [line for line in done.stderr.splitlines()
              if line.startswith("paddletune live: ")]
    assert status and "step 300 of 300 (100%)" in status[-1]
    assert "\x1b" not in done.stderr and "\r" not in done.stderr  # no terminal codes
    assert status[-1].endswith("finished: exit 0 (returned)")
    assert not (tmp_path / "run.log").exists()
    assert load(tmp_path / "run.jsonl").probes["dashboard"].details["frames"] > 0


@pytest.mark.parametrize("profile, log", [
    ("run.jsonl", "run.log"), ("run", "run.log"), ("run.log", "run.output.log"),
    ("RUN.LOG", "RUN.output.log"), ("run.Log", "run.output.log")])
def test_the_log_is_never_the_profile(profile, log, tmp_path):
    from paddletune.live.runner import log_path_for
    assert log_path_for(tmp_path / profile) == tmp_path / log


LIVE_TO_A_LOG = '''
import sys
from paddletune import session
from paddletune.live.runner import run_live

class Screen:  # the dashboard's interface, drawing nothing
    def open(self, terminal): pass
    def draw(self, state): pass
    def close(self, state=None): pass

options = session.Options("job.py", ["50"], out="run.log", live=True)
outcome, cost, log = run_live(options, Screen(), redirect=True)
print(f"status={outcome.status} log={log}")
'''


def test_a_profile_named_log_keeps_the_scripts_output_apart(tmp_path):
    """`paddletune profile --live -o run.log` on a terminal: the profile is run.log, the
    script's output run.output.log; neither overwrites the other."""
    (tmp_path / "job.py").write_text(textwrap.dedent(JOB))
    done = subprocess.run([sys.executable, "-c", LIVE_TO_A_LOG], cwd=tmp_path, timeout=120,
                          env={**os.environ, "PYTHONPATH": REPO}, capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr
    assert f"status=0 log={tmp_path / 'run.output.log'}" in done.stdout
    profile = load(tmp_path / "run.log")
    assert profile.complete and profile.summary.n_steps == 50
    output = (tmp_path / "run.output.log").read_text()
    assert "step 0" in output and output.rstrip().endswith("done")


LOADER_JOB = '''
import time
import numpy as np
import runtime as fluid

main, startup = fluid.Program(), fluid.Program()
with fluid.program_guard(main, startup):
    x = fluid.data("x", [None, 8])
    loss = fluid.layers.mean(fluid.layers.fc(x, 4))
    fluid.optimizer.SGD(0.01).minimize(loss)
exe = fluid.Executor(fluid.CPUPlace())
exe.run(startup)
GENERATOR
with fluid.program_guard(main, startup):
    loader = fluid.io.DataLoader.from_generator(feed_list=[x], capacity=4)
loader.set_batch_generator(batches)
for data in loader():
    exe.run(main, feed=data, fetch_list=[loss])
'''

STUCK_READER = LOADER_JOB.replace("GENERATOR", '''
def batches():
    for i in range(30):
        yield [np.random.rand(16, 8).astype("float32")]
    print("stuck", flush=True)
    time.sleep(3600)  # a generator stuck on its source (a dead mount, a lock)
''')


def watch_once(tmp_path) -> str:
    done = subprocess.run([sys.executable, "-m", "paddletune", "watch", "--once", "--plain",
                           "run.jsonl"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_watch_says_the_reader_stalled_and_then_that_the_job_died(tmp_path, procs):
    """A job whose reader hangs writes on (the queue sampler), so `no new record` never
    shows: `watch` says the reader stalled, naming the loader, once no batch came for
    STALLED_S; after a SIGKILL (no exit record), that the job died."""
    from paddletune.live.figures import STALLED_S
    (tmp_path / "job.py").write_text(textwrap.dedent(STUCK_READER))
    job = procs.popen([sys.executable, "-m", "paddletune", "profile", "-q", "--out",
                       "run.jsonl", "job.py"], cwd=tmp_path, stdout=subprocess.PIPE,
                      stderr=subprocess.PIPE, text=True)
    assert job.stdout.readline() == "stuck\n"
    deadline = time.monotonic() + STALLED_S + 30
    line = watch_once(tmp_path)
    while "reader stalled" not in line and time.monotonic() < deadline:
        assert "no step" not in line, line  # straight from running to the stall
        time.sleep(1.0)
        line = watch_once(tmp_path)
    assert "reader stalled: no batch for " in line, line
    assert "DataLoader#0's queue is empty" in line
    procs.kill(job)
    line = watch_once(tmp_path)
    assert f"died: pid {job.pid} is gone, no exit record" in line, line


def _terminal_left_as_it_was(tmux, final):
    assert "ECHO=on" in final  # echoing input
    assert tmux.tmux("display", "-p", "-t", "t", "#{cursor_flag}").stdout.strip() == "1"
    assert tmux.tmux("display", "-p", "-t", "t", "#{alternate_on}").stdout.strip() == "0"


@needs_tmux
def test_a_script_that_raises_under_live_leaves_the_terminal_as_it_was(tmp_path, tmux):
    """The job raises while the dashboard draws: the terminal gets its cursor, its normal
    screen and its echo back, the report says exit 1, the traceback is in the log."""
    script = tmp_path / "raising.py"
    script.write_text(textwrap.dedent(JOB).replace(
        '        print(f"step {step}", flush=True)',
        '        print(f"step {step}", flush=True)\n'
        '    if step == 150:\n'
        '        raise ValueError("bad batch at step 150")'))
    env = f"PYTHONPATH={shlex.quote(REPO)}"
    tmux.start(f"{env} {shlex.quote(sys.executable)} -m paddletune profile --live --interval "
               f"0.2 --out run.jsonl raising.py -- 0")
    final = tmux.wait_for(lambda s: "ECHO=" in s, what="the job's end")
    assert "EXIT=1" in final
    _terminal_left_as_it_was(tmux, final)
    assert "exit 1 (exception)" in tmux.history()
    assert "ValueError: bad batch at step 150" in (tmp_path / "run.log").read_text()


@needs_tmux
def test_ctrl_c_in_watch_leaves_the_terminal_as_it_was(tmp_path, tmux, procs):
    (tmp_path / "job.py").write_text(textwrap.dedent(JOB))
    job = procs.popen([sys.executable, "-m", "paddletune", "profile", "-q", "--interval", "0.2",
                       "--out", "run.jsonl", "job.py", "--", "0"], cwd=tmp_path,
                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert job.stdout.readline() == "step 0\n"
    env = f"PYTHONPATH={shlex.quote(REPO)}"
    tmux.start(f"{env} {shlex.quote(sys.executable)} -m paddletune watch run.jsonl")
    tmux.wait_for(lambda s: "steps/s ·" in s, what="the dashboard")
    tmux.tmux("send-keys", "-t", "t", "C-c")
    final = tmux.wait_for(lambda s: "ECHO=" in s, what="watch's end")
    assert "EXIT=0" in final  # Ctrl-C stops watching, not the job
    _terminal_left_as_it_was(tmux, final)
    assert job.poll() is None
    procs.kill(job)


SLOW_CLEANUP = LOADER_JOB.replace("GENERATOR", '''
def batches():
    for i in range(10 ** 6):
        if i == 200:
            print("waiting", flush=True)
            time.sleep(60)  # the reader thread is in here when Ctrl-C comes
        yield [np.random.rand(16, 8).astype("float32")]
''')


@needs_tmux
def test_a_second_ctrl_c_under_live_gives_the_terminal_back_and_seals_the_profile(tmp_path,
                                                                                 tmux):
    """The first Ctrl-C leaves the job waiting on its reader's cleanup; the second ends it at
    once: the terminal is given back first (cursor, normal screen) and the profile gets its
    exit record."""
    (tmp_path / "job.py").write_text(textwrap.dedent(SLOW_CLEANUP))
    env = f"PYTHONPATH={shlex.quote(REPO)}"
    tmux.start(f"{env} {shlex.quote(sys.executable)} -m paddletune profile --live --interval "
               f"0.2 --out run.jsonl job.py")
    log = tmp_path / "run.log"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and "waiting" not in (log.read_text() if log.exists()
                                                             else ""):
        time.sleep(0.1)
    time.sleep(0.5)  # the loop drains the queue and waits on the reader
    tmux.tmux("send-keys", "-t", "t", "C-c")
    time.sleep(0.3)
    tmux.tmux("send-keys", "-t", "t", "C-c")
    final = tmux.wait_for(lambda s: "ECHO=" in s, timeout_s=30, what="the job's end")
    assert "EXIT=130" in final
    _terminal_left_as_it_was(tmux, final)
    exits = load(tmp_path / "run.jsonl").events_of("exit")
    assert [e.reason for e in exits] == ["interrupted"]
    assert exits[0].message.startswith("interrupted twice")
