"""`paddletune profile --live` and `paddletune watch` on real PyTorch and Paddle 3 jobs (the
examples), end to end in real subprocesses, each reaped whatever happens (conftest's
`procs`): without a terminal the status lines name the steps, the DataLoader's wait and
queue, and the throughput; once the job ends they are the report's figures (one definition:
profile/figures/steps.py), and `watch --once --plain` on the profile prints the same line.
In a tmux terminal, the dashboard of a PyTorch job shows its DataLoader."""

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tmuxpane import needs_tmux

from paddletune.profile import load
from paddletune.live.state import WHOLE_RUN
from paddletune.render.dashboard_panels import _rate

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1",
       "GLOG_minloglevel": "2", "COLUMNS": "200"}
ENV.pop("PADDLETUNE_OVERRIDES", None)
JOBS = {  # framework -> (the example, its arguments, the steps it runs)
    "paddle": (REPO / "examples" / "paddle" / "cnn.py", ("--steps", "60"), 60),
    "torch": (REPO / "examples" / "torch" / "mlp.py", ("--steps", "100"), 100),
}
STATUS = "paddletune live: "


def cli(procs, tmp_path, *args, timeout=240):
    return procs.run([sys.executable, "-m", "paddletune", *map(str, args)], timeout,
                     cwd=tmp_path, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                     text=True)


def live_run(procs, tmp_path, framework):
    """Run the framework's example under `profile --live` without a terminal: (the status
    lines, the profile)."""
    pytest.importorskip(framework)
    script, args, steps = JOBS[framework]
    done = cli(procs, tmp_path, "profile", "--live", "--interval", "0.2", "--total-steps",
               steps, "--out", "run.jsonl", script, *args)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "\x1b" not in done.stderr and "\r" not in done.stderr  # no terminal codes
    status = [line for line in done.stderr.splitlines() if line.startswith(STATUS)]
    assert status, done.stderr[-3000:]
    return status, load(tmp_path / "run.jsonl")


def expected_figures(profile, steps):
    """The parts of the last status line that the report's summary decides."""
    s = profile.summary
    tp = s.throughput
    loader = s.reader.loaders[0]
    return [f"step {steps} of {steps} (100%)",
            f"{_rate(tp.steps_per_s)} steps/s",
            f"{_rate(tp.samples_per_s)} samples/s ({WHOLE_RUN})",
            f"step {tp.step_time_s * 1e3:.2f} ms ({WHOLE_RUN})",
            f"wait {s.breakdown_s.read_s / tp.step_time_s:.0%} ",  # the DataLoader's wait
            f"compute {s.breakdown_s.compute_s / tp.step_time_s:.0%} ",
            ("batches made in the loop, " if loader.config.made_in == "loop"  # no queue
             else f"/{loader.config.capacity} empty "),  # the DataLoader's queue
            s.verdict.kind,
            "finished: exit 0 (returned)"]


@pytest.mark.parametrize("framework", sorted(JOBS))
def test_live_status_lines_and_watch_show_the_reports_figures(framework, procs, tmp_path):
    status, profile = live_run(procs, tmp_path, framework)
    s = profile.summary
    assert profile.complete and profile.source.framework == framework
    assert s.n_steps == JOBS[framework][2]
    assert s.reader is not None and len(s.reader.loaders) == 1  # the DataLoader was seen
    assert s.breakdown_s.read_s > 0  # the loop waited for it, a little, at least
    last = status[-1]
    for part in expected_figures(profile, s.n_steps):
        assert part in last, (part, last)
    assert profile.probes["dashboard"].details["frames"] > 0
    watched = cli(procs, tmp_path, "watch", "--once", "--plain", "run.jsonl", timeout=60)
    assert watched.returncode == 0, watched.stderr
    assert watched.stdout.strip() == last  # the same figures from the profile alone


@needs_tmux
def test_the_dashboard_of_a_torch_job_in_a_terminal(tmp_path, tmux):
    """A PyTorch job's dashboard (100 x 30): its steps and throughput, the step's wait
    for the DataLoader, the DataLoader's own panel (its pops, not the 'no DataLoader'
    placeholder), then the report after a clean exit."""
    pytest.importorskip("torch")
    script = REPO / "examples" / "torch" / "mlp.py"
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in (
        ("PYTHONPATH", str(REPO)), ("OMP_NUM_THREADS", "1")))
    tmux.start(f"{env} {shlex.quote(sys.executable)} -m paddletune profile --live --interval "
               f"0.2 --total-steps 1500 --out run.jsonl {shlex.quote(str(script))} --steps "
               f"1500")
    screen = tmux.wait_for(lambda s: "steps/s ·" in s and "Reader DataLoader#0" in s
                           and " pops · " in s, what="the dashboard with figures")
    assert "Reader DataLoader#0 (made in the loop" in screen  # num_workers=0: no thread
    assert screen.splitlines()[0].startswith("paddletune live · ")
    assert "of 1,500 (" in screen.splitlines()[1]
    assert "▓ wait " in screen and "█ compute " in screen  # the step's parts
    assert "N/A — no DataLoader" not in screen  # the torch DataLoader feeds the panel
    final = tmux.wait_for(lambda s: "EXIT=" in s, timeout_s=180, what="the job's end")
    assert "EXIT=0" in final
    assert "paddletune report · " in tmux.history()
    profile = load(tmp_path / "run.jsonl")
    assert profile.complete and profile.summary.n_steps == 1500
    assert profile.source.framework == "torch"
    assert profile.probes["dashboard"].details["frames"] >= 2
