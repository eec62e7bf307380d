"""The tuner's trial process (`python -m paddletune.trialrun`, `paddletune profile --quiet`
without the command line's parser) and the FLAGS_* check that comes first in it and in
`paddletune profile`/`report`: real subprocesses."""

import os
import signal
import subprocess
import sys

import pytest

from paddletune.profile import load
from paddletune.trialrun import parse
from test_profile_cli import TIMEOUT_S, _start_endless, write_script


def trialrun(tmp_path, *argv, env=None):
    cmd = [sys.executable, "-m", "paddletune.trialrun", *argv]
    return subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True,
                          timeout=TIMEOUT_S, env=env)


def test_parse():
    assert parse(["--steps", "40", "--out", "p.jsonl", "train.py", "--", "--lr", "0.1"]) == (
        "train.py", ["--lr", "0.1"], False, "p.jsonl", 40, None, None)
    assert parse(["--steps", "9", "--duration", "1.5", "--out", "p", "-m", "pkg.train",
                  "--", "-v"]) == ("pkg.train", ["-v"], True, "p", 9, 1.5, None)
    assert parse(["--steps", "1", "--out", "p", "t.py", "a"])[1] == ["a"]
    assert parse(["--steps", "90", "--speed-test", "20", "--out", "p", "t.py"])[6] == 20


@pytest.mark.parametrize("argv", [
    [], ["--steps", "4", "t.py"], ["--out", "p", "t.py"], ["--steps", "x", "--out", "p", "t.py"],
    ["--steps", "0", "--out", "p", "t.py"], ["--quiet", "--steps", "4", "--out", "p", "t.py"],
    ["--steps", "4", "--out", "p", "--duration", "-1", "t.py"],
    ["--steps", "90", "--speed-test", "0", "--out", "p", "t.py"]])
def test_parse_refuses(argv):
    with pytest.raises(ValueError):
        parse(argv)


def test_a_trial_writes_the_profile_quietly_without_the_cli_modules(tmp_path):
    script = write_script(tmp_path, "train(None)\n")
    probe = ("import sys; import paddletune.trialrun as t; "
             f"rc = t.main(['--steps', '12', '--out', 'p.jsonl', {str(script)!r}]); "
             "print([m for m in ('typer', 'rich', 'pydantic') if m in sys.modules], rc)")
    proc = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True,
                          text=True, timeout=TIMEOUT_S)
    assert proc.stdout == "[] 0\n" and proc.stderr == ""
    prof = load(tmp_path / "p.jsonl")
    assert prof.complete and prof.summary.n_steps == 12
    assert prof.summary.exit.reason == "step_limit"


@pytest.mark.parametrize("call, status, stderr", [
    ("sys.exit(3)", 3, ""), ("sys.exit('cannot go on')", 1, "cannot go on\n")])
def test_the_exit_status_is_the_scripts(tmp_path, call, status, stderr):
    script = write_script(tmp_path, f"train(4)\n{call}\n")
    proc = trialrun(tmp_path, "--steps", "100", "--out", "p.jsonl", str(script))
    assert (proc.returncode, proc.stderr) == (status, stderr)
    assert load(tmp_path / "p.jsonl").summary.exit.status == status


def test_a_missing_script_or_bad_options_are_one_line_and_exit_2(tmp_path):
    proc = trialrun(tmp_path, "--steps", "4", "--out", "p.jsonl", "missing.py")
    assert proc.returncode == 2
    assert proc.stderr == "paddletune: can't open file 'missing.py': no such file\n"
    proc = trialrun(tmp_path, "--steps", "4", "missing.py")
    assert proc.returncode == 2 and proc.stderr.startswith("paddletune: give --steps, --out")
    assert "usage: python -m paddletune.trialrun" in proc.stderr


@pytest.mark.parametrize("sig, status, reason", [
    (signal.SIGINT, -signal.SIGINT, "interrupted"),  # Ctrl-C: dies by SIGINT, as Python
    (signal.SIGTERM, 143, "terminated")])  # the tuner's timeout: the profile is kept
def test_signals_end_the_trial_as_profile_does_with_the_profile_written(tmp_path, procs, sig,
                                                                        status, reason):
    proc = _start_endless(tmp_path, procs, [sys.executable, "-m", "paddletune.trialrun",
                                            "--steps", "1000000", "--out", "p.jsonl"])
    proc.send_signal(sig)
    proc.communicate(timeout=TIMEOUT_S)
    assert proc.returncode == status
    prof = load(tmp_path / "p.jsonl")
    assert prof.complete and prof.summary.exit.reason == reason


BAD_FLAG = {"FLAGS_check_nan_inf": "maybe"}


@pytest.mark.parametrize("command", [
    ["-m", "paddletune.trialrun", "--steps", "4", "--out", "p.jsonl"],
    ["-m", "paddletune", "profile", "-q", "--steps", "4"],
    ["-m", "paddletune", "profile", "-q", "--duration", "1s"]])
def test_a_bad_flag_value_is_one_line_and_exit_2_before_the_script_runs(tmp_path, command):
    """The runtime reads FLAGS_* once, on import: before the session's probes import it (they
    did first in `profile`, which then ended with FlagError's traceback and status 1)."""
    script = write_script(tmp_path, "print('ran')\n")
    proc = subprocess.run([sys.executable, *command, str(script)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=TIMEOUT_S,
                          env={**os.environ, **BAD_FLAG})
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("paddletune: environment variable FLAGS_check_nan_inf=")
    assert len(proc.stderr.splitlines()) == 1 and "Traceback" not in proc.stderr


def test_report_with_a_bad_flag_value_is_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "paddletune", "report", "nothing.jsonl"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=TIMEOUT_S,
                          env={**os.environ, **BAD_FLAG})
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1
    assert "FLAGS_check_nan_inf" in proc.stderr and "Traceback" not in proc.stderr


def test_an_unknown_flag_is_one_warning_and_the_trial_runs(tmp_path):
    script = write_script(tmp_path, "train(None)\n")
    proc = trialrun(tmp_path, "--steps", "3", "--out", "p.jsonl", str(script),
                    env={**os.environ, "FLAGS_no_such_flag": "1"})
    assert proc.returncode == 0
    assert proc.stderr == ("paddletune: warning: unknown flag FLAGS_no_such_flag in the "
                           "environment is ignored\n")


def test_a_trial_keeps_every_step_in_full_for_its_throughput_interval(tmp_path):
    """A trial longer than a profile's default head (1000 steps in full, then windows) keeps
    all its steps (trialrun.HEAD_STEPS): the tuner's steady steps and batch-means interval
    cover the whole trial, and the trial measures as ok."""
    from paddletune.profile.summarize import training_steps
    from paddletune.trialrun import HEAD_STEPS
    from paddletune.tune.trials import Trial, measure, steady_steps, throughput_ci
    script = write_script(tmp_path, "train(None)\n")
    proc = trialrun(tmp_path, "--steps", "1200", "--out", "p.jsonl", str(script))
    assert proc.returncode == 0, proc.stderr
    prof = load(tmp_path / "p.jsonl")
    assert prof.options.head_steps == HEAD_STEPS and prof.windows == ()
    assert len(training_steps(prof.steps)) == prof.summary.n_steps == 1200
    steady = steady_steps(prof)
    assert len(steady) == prof.summary.steady_steps == 1200 - prof.summary.warmup_steps
    rate, ci = throughput_ci(steady)
    assert rate > 0 and ci is not None
    trial = Trial(1, {}, "baseline", "baseline", 1200)
    measure(trial, tmp_path / "p.jsonl", 0, False, 60, {})
    assert trial.status == "ok" and trial.steady_steps == len(steady), trial.message
    assert trial.samples_per_s == pytest.approx(rate) and trial.se is not None


def test_a_trial_imports_nothing_from_the_working_directory(tmp_path):
    """`python -m paddletune.trialrun` put the working directory first on sys.path: a
    psutil.py planted there ran in every trial. The tuner's launcher does not (the script's
    own directory is on the path, as under `python train.py`)."""
    from paddletune.tune.trials import TrialRunner
    work, scripts = tmp_path / "work", tmp_path / "scripts"
    work.mkdir()
    scripts.mkdir()
    for name in ("psutil", "numpy", "typing_extensions"):
        (work / f"{name}.py").write_text(f"open({str(tmp_path / 'planted')!r}, 'a')"
                                         f".write({name!r})\nraise SystemExit(9)\n")
    script = write_script(scripts, "import helper\ntrain(None)\n")
    (scripts / "helper.py").write_text("HELP = 1\n")
    runner = TrialRunner(str(script), [], tmp_path / "trials")
    old = os.getcwd()
    os.chdir(work)
    try:
        proc = subprocess.run(runner.command(12, tmp_path / "p.jsonl"), capture_output=True,
                              text=True, timeout=TIMEOUT_S)
    finally:
        os.chdir(old)
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "planted").exists()
    assert load(tmp_path / "p.jsonl").summary.n_steps == 12


LEAVING = """\
import atexit

log = open("log.txt", "w")
log.write("written, never closed")


class Marker:
    def __init__(self, name):
        self.name = name

    def __del__(self):
        open(self.name, "w").close()


kept = Marker("global_released")


def at_exit():
    open("at_exit_ran", "w").close()
    lost = Marker("cycle_collected")
    lost.me = lost  # garbage only a collection finds, made after the script's end


atexit.register(at_exit)
"""


@pytest.mark.parametrize("body", ["train(4)\n", "train(None)\n"])  # ends; stopped at --steps
def test_a_trial_leaves_as_a_script_would(tmp_path, body):
    """A trial's process exits as the script's would: its exit handlers run, a file it left
    open is flushed, a global object's __del__ runs, and cyclic garbage made by its exit
    handlers is collected (its __del__ runs). (Freezing the collector at exit saves about
    1 s of a PyTorch trial, but the script's namespace, a cycle, then goes uncollected: the
    file stays empty.)"""
    script = write_script(tmp_path, LEAVING + body)
    proc = trialrun(tmp_path, "--steps", "8", "--out", "p.jsonl", str(script))
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "log.txt").read_text() == "written, never closed"
    for marker in ("at_exit_ran", "global_released", "cycle_collected"):
        assert (tmp_path / marker).exists(), marker
    assert load(tmp_path / "p.jsonl").complete


CYCLE_ORDER = """\
import gc

buffer = None
log = open("log.txt", "w")
buffer = log.buffer  # (the collector's list now has the BufferedWriter before its wrapper)
log.write("written, never closed")
gc.collect()
"""


def test_a_file_left_open_in_a_cycle_keeps_what_was_written(tmp_path):
    """The script's namespace is a cycle, finalized by the collector at exit in its list's
    order; where that order puts the file's BufferedWriter before its TextIOWrapper, the
    writer closes the file before the wrapper's pending text reaches it (CPython gh-62052:
    under `python train.py` this script's log comes out empty). The session flushes the files
    left open after the script's exit handlers, so nothing written is lost."""
    script = write_script(tmp_path, CYCLE_ORDER + "train(4)\n")
    proc = trialrun(tmp_path, "--steps", "8", "--out", "p.jsonl", str(script))
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "log.txt").read_text() == "written, never closed"



def test_flushing_the_files_left_open_skips_what_it_cannot_flush(tmp_path):
    """Open files get their pending writes; a closed file and a detached wrapper are left
    alone, without an error."""
    import io

    from paddletune.open_files import flush_files_left_open
    pending = open(tmp_path / "a.txt", "w")
    pending.write("kept")
    closed = open(tmp_path / "b.txt", "w")
    closed.close()
    detached = io.TextIOWrapper(io.BytesIO())
    detached.detach()
    assert flush_files_left_open() >= 1
    assert (tmp_path / "a.txt").read_text() == "kept"
    pending.close()


def test_a_scripts_traceback_leaves_out_paddletunes_frames_unless_it_raised_there(tmp_path):
    """An error the script (or its framework) raised through paddletune's wrappers is shown
    as Python shows it, without their frames; an error raised in paddletune's own code keeps
    every frame, to show where."""
    import traceback as tb_module

    from paddletune import session
    from paddletune.sources.eager.overrides import parse
    script = tmp_path / "boom.py"
    script.write_text("def boom():\n    raise ValueError('the script')\nboom()\n")
    try:
        session.run_script(str(script))  # (paddletune's frame between the test and the script)
    except ValueError as err:
        files = [f.filename for f in tb_module.extract_tb(
            session._without_wrappers(err.__traceback__))]
    assert files == [__file__, str(script), str(script)]
    try:
        parse("{not json", "torch")
    except ValueError as err:
        files = [f.filename for f in tb_module.extract_tb(
            session._without_wrappers(err.__traceback__))]
    assert files[0] == __file__ and files[-1].endswith("overrides.py")
