"""`paddletune tune` for real: trials are `paddletune profile` subprocesses of tests/tunejob.py,
a job whose best settings are known (see its docstring); they hold on a busy 2-core machine
because the job's costs are waits. Short trials and small budgets keep this file under a
minute."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from typer.testing import CliRunner

from paddletune.cli import app

REPO = Path(__file__).resolve().parents[1]
JOB = str(REPO / "tests" / "tunejob.py")


def tune(tmp_path, *argv, env=None, **kwargs):
    cmd = [sys.executable, "-m", "paddletune", "tune", "--out", str(tmp_path / "t.tune.json"),
           *argv]
    full_env = {k: v for k, v in os.environ.items() if k != "PADDLETUNE_OVERRIDES"}
    full_env.update({"COLUMNS": "120", "OPENBLAS_NUM_THREADS": "1", **(env or {})})
    return subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, env=full_env,
                          timeout=180, **kwargs)


def test_tune_finds_the_reader_optimum(tmp_path):
    # workers 0-2: on a machine with cores to spare, more workers tie with 2 (the job's
    # producer waits, it does not compute), and the known optimum is the smallest count
    run = tune(tmp_path, "--budget", "45s", "--trial-steps", "100", "--keep-batch-size",
               "--space", "only=num_workers,capacity", "--space", "num_workers=0,1,2", JOB)
    assert run.returncode == 0, run.stderr
    record = json.loads((tmp_path / "t.tune.json").read_text())
    best = record["best"]["setting"]
    assert best.get("num_workers") == 2 and best.get("capacity", 2) >= 16, record["ranking"]
    assert record["final"]["speedup"] > 1.3
    assert "Best: num_workers=2 capacity=" in run.stdout
    assert "export PADDLETUNE_OVERRIDES='{\"reader\":{\"num_workers\":2,\"capacity\":" \
        in run.stdout
    assert "fluid.io.DataLoader.from_generator(..., num_workers=2, capacity=" in run.stdout
    assert "#1   0:0" in run.stderr and "baseline" in run.stderr  # the live progress lines
    trial_profile = Path(record["trials"][1]["profile"])
    assert trial_profile.exists() and trial_profile.parent.name == "t.trials"
    report = CliRunner().invoke(app, ["report", str(tmp_path / "t.tune.json")],
                                env={"COLUMNS": "120"})
    assert report.exit_code == 0 and "Speedup:" in report.output


def test_out_of_memory_and_a_hang_do_not_stop_the_batch_search(tmp_path):
    """FLAGS_cpu_memory_limit_mb=15, and a loss over every pair of samples (--pairs: memory
    grows faster than the batch, so the memory model's line through one batch's peak promises
    too much): the model's first guess (~189) runs out of memory; the next guesses bisect it
    (~102, which fits) and fit a line to the peaks (~165), and batches of 150 or more hang
    (killed at --trial-timeout; as a batch too large for its workers' shared memory would):
    the largest batch verified to run, below the one that hung, wins: with 50 ms of waits per
    batch and per step, a batch of 102 runs ~1.5x the samples/s of 64 (with 15 ms, the pairs'
    matmul, 2.6x a batch of 64's, weighed enough on a loaded machine for 64 to win once in
    4 runs). (Without --pairs the
    model's first guess fits: the job's memory is linear in the batch and the model knows it.)"""
    # --trial-timeout is the hang's deadline, and every trial's: a batch that runs must end
    # within it (start-up included) however loaded the machine (5 s killed the baseline as
    # hung in 4 of 6 runs at a load of ~10 on 2 cores); the budget is only an upper bound
    run = tune(tmp_path, "--budget", "90s", "--trial-steps", "20", "--trial-timeout", "20",
               "--max-batch-size", "1024", "--space", "only=batch_size", JOB, "--",
               "--hidden", "4096", "--in-dim", "8", "--burst-every", "0", "--pairs", "4",
               "--batch-ms", "50", "--step-ms", "50", "--hang-when", "batch_size>=150",
               env={"FLAGS_cpu_memory_limit_mb": "15"})
    assert run.returncode == 0, run.stderr
    record = json.loads((tmp_path / "t.tune.json").read_text())
    statuses = [(t["setting"].get("batch_size"), t["status"]) for t in record["trials"]]
    assert any(status == "oom" for _, status in statuses), statuses
    assert any(status == "timeout" and batch >= 150 for batch, status in statuses), statuses
    best = record["best"]["setting"]["batch_size"]
    ran = [batch for batch, status in statuses if status == "ok" and batch]
    assert best == max(ran) and 64 < best < 150, (statuses, record["ranking"])
    assert "scale the learning rate" in run.stdout
    assert any(r["status"] == "oom" for r in record["ranking"])
    assert any(r["status"] == "timeout" for r in record["ranking"])


def test_ctrl_c_prints_and_saves_the_best_so_far(tmp_path):
    out = tmp_path / "t.tune.json"
    env = {k: v for k, v in os.environ.items() if k != "PADDLETUNE_OVERRIDES"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "paddletune", "tune", "--out", str(out), "--budget", "10m",
         "--trial-steps", "40", "--keep-batch-size", "--space", "only=num_workers,capacity",
         JOB], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**env, "COLUMNS": "120"})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        time.sleep(0.2)
        try:
            if len(json.loads(out.read_text())["trials"]) >= 3:
                break
        except (OSError, ValueError):
            pass
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130, stderr
    record = json.loads(out.read_text())
    assert record["status"] == "interrupted" and record["stop_reason"] == "interrupted (Ctrl-C)"
    assert len(record["trials"]) >= 3
    assert "Settings, best first" in stdout and "Best:" in stdout
    assert "tuning record written to" in stderr
    # no trial process is left behind
    time.sleep(0.5)
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert str(out.with_name("t.trials")) not in ps


def test_sigterm_ends_tuning_like_ctrl_c_and_kills_the_trial(tmp_path):
    """A trial runs in a session of its own: a SIGTERM to the tuner (CI cancel, `timeout`)
    must take it down too, and the record must say why the tuning stopped."""
    out = tmp_path / "t.tune.json"
    env = {k: v for k, v in os.environ.items() if k != "PADDLETUNE_OVERRIDES"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "paddletune", "tune", "--out", str(out), "--budget", "10m",
         "--trial-steps", "40", "--keep-batch-size", JOB], cwd=tmp_path,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    trials = out.with_name("t.trials")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not list(trials.glob("trial-*.log")):
        time.sleep(0.1)
    time.sleep(0.5)  # a trial is running
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=30)
    assert proc.returncode == 130
    record = json.loads(out.read_text())
    assert record["status"] == "interrupted"
    assert record["stop_reason"] == "interrupted (signal SIGTERM)"
    time.sleep(0.5)
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert str(trials) not in ps


def test_a_bad_overrides_variable_is_not_tunes_error_and_bad_flags_are_one_line(tmp_path):
    env = {**os.environ, "FLAGS_eager_delete_tensor_gb": "abc"}
    done = subprocess.run([sys.executable, "-m", "paddletune", "tune", "--budget", "5s", JOB],
                          cwd=tmp_path, capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "FLAGS_eager_delete_tensor_gb" in done.stderr
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLAGS_")}
    env["PADDLETUNE_OVERRIDES"] = '{"bogus": 1}'
    done = subprocess.run([sys.executable, "-m", "paddletune", "tune", "--budget", "5s",
                           "--out", "/proc/no/x.tune.json", JOB], cwd=tmp_path,
                          capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr  # as profile's --out
    assert "cannot write the tuning record" in done.stderr and "bogus" not in done.stderr


def test_tune_a_module(tmp_path):
    """`tune -m PACKAGE.MODULE`: trials run it as `python -m` would (from the current folder);
    the record and its report say -m; a module that is not there is one line, exit 2."""
    package = tmp_path / "jobpkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "train.py").write_text(
        f"import runpy\nrunpy.run_path({JOB!r}, run_name='__main__')\n")
    run = tune(tmp_path, "--budget", "20s", "--trial-steps", "40", "--keep-batch-size",
               "--space", "only=num_workers", "-m", "jobpkg.train", "--", "--burst-every", "0")
    assert run.returncode == 0, run.stderr
    record = json.loads((tmp_path / "t.tune.json").read_text())
    assert record["command"]["module"] is True and record["command"]["script"] == "jobpkg.train"
    assert record["trials"][0]["status"] == "ok", record["trials"][0]
    assert "paddletune tune -m jobpkg.train --burst-every 0" in run.stdout
    missing = tune(tmp_path, "-m", "jobpkg.nothing_here")
    assert missing.returncode == 2
    assert missing.stderr.strip() == ("paddletune: no module named 'jobpkg.nothing_here': run "
                                      "from the folder that holds it, or install it")


def test_memory_objective_finds_the_lower_peak_for_real(tmp_path):
    """The job runs with GC off (FLAGS_eager_delete_tensor_gb=-1): under --objective memory the
    tuner turns it back on (a lower peak at about the same samples/s) and says by how much."""
    run = tune(tmp_path, "--budget", "40s", "--trial-steps", "40", "--keep-batch-size",
               "--objective", "memory", "--floor", "0.8",
               "--space", "only=FLAGS_eager_delete_tensor_gb", JOB, "--", "--burst-every", "0",
               "--hidden", "512",
               env={"FLAGS_eager_delete_tensor_gb": "-1"})
    assert run.returncode == 0, run.stderr
    record = json.loads((tmp_path / "t.tune.json").read_text())
    assert record["best"]["setting"] == {"FLAGS_eager_delete_tensor_gb": 0.0}, record["ranking"]
    final = record["final"]
    assert final["peak_bytes"] < final["baseline_peak_bytes"]
    assert "Best: FLAGS_eager_delete_tensor_gb=0.0" in run.stdout
    assert "export FLAGS_eager_delete_tensor_gb=0.0" in run.stdout


def test_an_output_folder_fails_before_any_trial_runs(tmp_path):
    """`tune --out DIR` said so only after its baseline trial; like `profile --out DIR` it
    fails before anything runs."""
    script = tmp_path / "job.py"
    script.write_text("raise SystemExit('a trial ran')\n")
    folder = tmp_path / "records"
    folder.mkdir()
    run = subprocess.run([sys.executable, "-m", "paddletune", "tune", "--out", str(folder),
                          str(script)], cwd=tmp_path, capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 2  # bad input, as profile's --out
    assert f"--out {folder} is a directory" in run.stderr and "Traceback" not in run.stderr
    assert not list(tmp_path.glob("*.trials")) and not list(folder.iterdir())
