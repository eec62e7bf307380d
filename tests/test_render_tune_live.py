"""`paddletune tune`'s live display (render/tune_live.py): frames drawn from a tuner's state
on a fixed-width recording console; the display stops cleanly on Ctrl-C with its last
frame kept; not a terminal, the line per trial stays; and for real in a tmux terminal
(100 x 30): the panel redraws in place while trials run, and Ctrl-C leaves its final
frame above the ranked table and the terminal sane."""

import io
import os
import re
import shlex
import shutil
import sys
import threading
import time

import pytest
from rich.console import Console

from tmuxpane import needs_tmux

from paddletune.render import tune as tune_view
from paddletune.render.tune_live import TuneLive
from paddletune.tune.search import TuneOptions, Tuner
from paddletune.tune.trials import IdleOverride, Trial

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JOB = os.path.join(REPO, "tests", "tunejob.py")


def make_trial(index, setting, phase, steps, rate=None, ci=None, status="ok",
               no_effect=(), message=None):
    label = " ".join(f"{k}={v}" for k, v in setting.items()) or "baseline"
    return Trial(index, dict(setting), label, phase, steps, status=status,
                 samples_per_s=rate, ci=ci, no_effect=list(no_effect), message=message,
                 wall_s=2.0)


class Clock:
    def __init__(self, now=1000.0):
        self.now = now

    def __call__(self):
        return self.now


def run_trials(view, tuner, trials, space_after=3):
    """Drive `view` as the Tuner does: started, appended, done (space() after the
    baseline's repeats)."""
    for t in trials:
        if len(tuner.trials) == space_after:
            view.space(tuner)
        view.trial_started(tuner, t.label, t.phase, t.steps)
        view.clock.now += t.wall_s
        tuner.trials.append(t)
        view.trial_done(tuner, t)


def fake_tuner(budget_s=300.0, elapsed_s=75.0):
    """A real Tuner (its comparisons: the noise) with no runner: trials are given."""
    tuner = Tuner(None, TuneOptions(budget_s=budget_s))
    tuner.elapsed_s = lambda: elapsed_s
    tuner.steps0, tuner.per_step_s, tuner.overhead_s = 40, 0.02, 1.5
    return tuner


BASELINES = [make_trial(1, {}, "baseline", 40, 1000.0, 30.0),
             make_trial(2, {}, "baseline", 40, 1010.0, 25.0),
             make_trial(3, {}, "baseline", 40, 990.0, 28.0)]
SEARCH = [make_trial(4, {"num_workers": 1}, "advice:reader", 40, 1100.0, 30.0),
          make_trial(5, {"num_workers": 2}, "advice:all", 40, 1300.0, 30.0),
          make_trial(6, {"num_workers": 2}, "advice:all", 80, 1290.0, 20.0),
          make_trial(7, {"num_workers": 2, "capacity": 64}, "knob:capacity", 40,
                     status="oom", message="out of memory at batch 16"),
          make_trial(8, {"num_workers": 2, "use_double_buffer": False},
                     "knob:use_double_buffer", 40, 1280.0, 25.0,
                     no_effect=[IdleOverride("reader", "use_double_buffer", "no-loader",
                                             "no DataLoader/PyReader")]),
          make_trial(9, {"num_workers": 2, "capacity": 16}, "knob:capacity", 40,
                     status="timeout", message="still running after 30 s: killed")]


def state(width=100):
    """A tuning 75 s into 300: three baselines, num_workers=2 accepted, an out-of-memory,
    a no-effect and a hung trial, and trial #10 running for 1.2 s."""
    tuner = fake_tuner()
    view = TuneLive(Console(), "train.py --epochs 1", 300.0, clock=Clock())
    run_trials(view, tuner, BASELINES + SEARCH[:3])
    view.accepted(tuner, SEARCH[2], BASELINES[2])
    tuner.incumbent = {"num_workers": 2}
    run_trials(view, tuner, SEARCH[3:])
    view.trial_started(tuner, "num_workers=2 capacity=8", "knob:capacity", 80)
    view.clock.now += 1.2
    return view, tuner


def draw(view, width=100, height=30) -> str:
    console = Console(record=True, width=width, file=io.StringIO())
    console.print(view.frame(width, height))
    return console.export_text()


def test_the_frame_shows_header_running_trial_best_so_far_last_trials_and_accepted():
    view, _ = state()
    text = draw(view)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 100 and len(lines) <= 29
    # header: the script, elapsed of the budget with its bar, trials done / failed, phase
    assert lines[0] == "paddletune tune · train.py --epochs 1 · running · phase knob:capacity"
    assert lines[1].startswith("elapsed 1:15 of 5:00 ━━━━━━━━━━───")
    assert lines[1].endswith(" 25% · 9 trials done · 3 failed")
    # the running trial: its number, setting, phase, steps, its timer and expected time
    assert "╭─ Running ─" in lines[2] and "╭─ Best so far ─" in lines[2]
    assert "│ #10 num_workers=2 capacity=8 " in lines[3]
    assert "│ knob:capacity · 80 steps " in lines[4]
    assert re.search(r"│ \S 1\.2 s of ~3\.1 s ━+─+ ", lines[5]), lines[5]
    # the best so far: setting, samples/s, gain vs the first baseline +- its interval, noise
    assert "│ num_workers=2 (accepted at #6) " in lines[3]
    assert re.search(r"│ 1,290 samples/s · \+29\.0% ±\d\.\d% vs baseline ", lines[4]), lines[4]
    assert re.search(r"│ noise ±\d\.\d%/trial \(2 repeats\) · gains count > \+\d\.\d% ", lines[5])
    # the last trials, failures visible by name; the best setting's rows marked
    assert "╭─ Last trials (1 earlier) · * the best so far ─" in text
    header = next(line for line in lines if "samples/s" in line and "setting" in line)
    for column in ("#", "setting", "phase", "steps", "samples/s", "±", "vs base", "status"):
        assert column in header
    rows = {line.split()[1]: line for line in lines if re.match(r"│ +\d+  ", line)}
    assert re.search(r"│ +2  baseline +baseline +40 +1,010 +±2\.5% +\+1\.0% +ok ", rows["2"])
    assert re.search(r"│ +5  \* num_workers=2 +advice:all +40 +1,300 +±2\.3% +\+30\.0% +ok ",
                     rows["5"])
    assert re.search(r"7  num_workers=2 capacity=64 +knob:capacity +40 +— +— +— +oom ", rows["7"])
    assert re.search(r"knob:use_double… +40 +1,280 +±2\.0% +\+28\.0% +no effect", rows["8"])
    assert re.search(r"knob:capacity +40 +— +— +— +timeout ", rows["9"])
    assert "1  baseline" not in text  # 8 rows: the first baseline scrolled off
    # the accepted change, and how to stop
    assert "✓ accepted #6 num_workers=2  +29.0% vs baseline" in text
    assert lines[-1].startswith("Ctrl-C stops and keeps the best so far")


def test_the_first_baseline_is_base_and_before_anything_ran_the_frame_says_so():
    tuner = fake_tuner(elapsed_s=0.4)
    view = TuneLive(Console(), "train.py", 90.0, clock=Clock())
    text = draw(view)
    assert "paddletune tune · train.py · running · phase baseline" in text
    assert "elapsed 0:00 of 1:30" in text and "0 trials done · 0 failed" in text
    assert "starting the baseline…" in text and "nothing measured yet" in text
    assert "accepted: nothing yet" in text
    run_trials(view, tuner, BASELINES[:1])
    text = draw(view)
    assert re.search(r"1  baseline +baseline +40 +1,000 +±3\.0% +base +ok", text)
    assert "the job's own settings (nothing beat them yet)" in text
    assert "1,000 samples/s · the baseline" in text
    assert "1 trial done" in text


def test_a_narrow_terminal_stacks_the_panels_and_keeps_the_status_column():
    view, _ = state()
    text = draw(view, width=70, height=40)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 70
    assert sum("╭─ Running ─" in line or "╭─ Best so far ─" in line for line in lines) == 2
    assert re.search(r"7  num_workers=2 capacity… +— +— +— +oom ", text)  # no phase, steps
    assert "no effect" in text and "timeout" in text


def test_phase_follows_the_race_not_the_incumbents_reruns():
    tuner = fake_tuner()
    view = TuneLive(Console(), "train.py", 300.0, clock=Clock())
    run_trials(view, tuner, BASELINES)
    view.space(tuner)
    assert view.stage == "advice"
    view.trial_started(tuner, "batch_size=32", "batch:verify", 40)
    assert view.stage == "batch"
    view.trial_started(tuner, "num_workers=1", "knob:num_workers", 40)
    view.trial_started(tuner, "baseline", "baseline", 80)  # the incumbent, re-measured
    assert view.stage == "knob:num_workers"
    view.trial_started(tuner, "baseline", "final", 80)
    assert view.stage == "final"


def test_ctrl_c_stops_the_display_cleanly_and_its_last_frame_stays():
    """Live on a (forced) terminal: a KeyboardInterrupt inside `with` stops the refresh
    thread, shows the cursor again, and the last frame says the tuning was interrupted and
    which trial was cut short."""
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=100, height=30,
                      color_system=None)
    tuner = fake_tuner()
    view = TuneLive(console, "train.py", 300.0, hz=20, clock=Clock())
    with pytest.raises(KeyboardInterrupt):
        with view:
            run_trials(view, tuner, BASELINES + SEARCH[:3])
            view.trial_started(tuner, "num_workers=2 capacity=8", "knob:capacity", 80)
            time.sleep(0.2)  # a few auto refreshes while the trial "runs"
            tuner.status, tuner.stop_reason = "interrupted", "interrupted (Ctrl-C)"
            raise KeyboardInterrupt
    assert view.live is None
    assert not [t for t in threading.enumerate() if type(t).__name__ == "_RefreshThread"]
    written = out.getvalue()
    assert written.endswith("\x1b[?25h")  # the cursor is shown again, last
    assert "\x1b[?25l" in written  # (hidden while it ran)
    last = written[written.rindex("paddletune tune · "):]
    assert "paddletune tune · train.py · interrupted · phase knob:capacity" in last
    assert "#7 num_workers=2 capacity=8" in last and "stopped after 0.0 s (not counted)" in last
    assert "ended: interrupted (Ctrl-C) · the ranked settings follow" in last


def test_not_a_terminal_keeps_one_line_per_trial():
    """Pipes and logs (and --plain) get TuneProgress: a line as each trial ends, nothing
    redrawn."""
    out = io.StringIO()
    console = Console(file=out, width=120)
    progress = tune_view.progress_view(console, "train.py", 300.0, live=True)
    assert isinstance(progress, tune_view.TuneProgress)
    forced = Console(file=io.StringIO(), force_terminal=True)  # FORCE_COLOR into a file
    assert isinstance(tune_view.progress_view(forced, "t", 1.0), tune_view.TuneProgress)
    tuner = fake_tuner()
    with progress:
        for t in BASELINES + SEARCH:
            progress.trial_started(tuner, t.label, t.phase, t.steps)
            tuner.trials.append(t)
            progress.trial_done(tuner, t)
    lines = out.getvalue().splitlines()
    assert len(lines) == len(BASELINES + SEARCH)
    assert lines[0].startswith("  #1   ") and "baseline" in lines[0]
    assert "oom: out of memory at batch 16" in lines[6]
    assert "no effect (reader.use_double_buffer" in lines[7]
    assert "timeout: still running after 30 s" in lines[8]
    assert "\x1b" not in out.getvalue() and "\r" not in out.getvalue()


# --- for real, in a terminal -------------------------------------------------------------------
def _trials_done(screen) -> int:
    found = re.search(r"· (\d+) trials? done", screen)
    return int(found.group(1)) if found else 0


@needs_tmux
def test_live_tune_in_a_terminal_then_ctrl_c(tmp_path, tmux):
    shutil.copy(JOB, tmp_path / "tunejob.py")  # a short title, whatever the checkout's path
    command = (f"env -u PADDLETUNE_OVERRIDES PYTHONPATH={shlex.quote(REPO)} "
               f"OPENBLAS_NUM_THREADS=1 {shlex.quote(sys.executable)} -m paddletune tune "
               f"--out t.tune.json --budget 2m --trial-steps 40 --keep-batch-size "
               f"--space only=num_workers,capacity tunejob.py")
    tmux.start(command)
    screen = tmux.wait_for(lambda s: _trials_done(s) >= 4 and "s of ~" in s,
                           what="the live panel, four trials done and one running")
    lines = screen.splitlines()
    assert lines[0].startswith("paddletune tune · tunejob.py · running · phase ")
    # (minutes too: on a loaded machine four trials can take more than one)
    assert re.match(r"elapsed \d+:\d\d of 2:00 [━─]+ +\d+% · \d+ trials done · \d+ failed",
                    lines[1]), lines[1]
    assert "╭─ Running ─" in lines[2] and "╭─ Best so far ─" in lines[2]
    assert re.search(r"│ [\d,]+ samples/s · ", lines[4]), lines[4]
    assert "noise ±" in lines[5]
    assert "╭─ Last trials" in screen and "samples/s" in screen
    assert re.search(r"│ +1  baseline +baseline +40 +[\d,]+ +±[\d.]+% +base +ok", screen)
    assert max(len(line) for line in lines) <= 100
    # it redraws while the tuner waits on a trial (the spinner, the timer, the elapsed time):
    # a new frame with no trial done since (a trial's end redraws too); waited for, not
    # slept on: a loaded machine can hold the 4 Hz refresh back past a fixed 0.5 s
    done = _trials_done(screen)
    tmux.wait_for(lambda s: s != screen and _trials_done(s) == done,
                  what="a redraw while the same trial runs")
    tmux.tmux("send-keys", "-t", "t", "C-c")
    final = tmux.wait_for(lambda s: "EXIT=" in s, what="the tuning's end")
    assert "EXIT=130" in final
    history = tmux.history()
    # one frame on the normal screen (redrawn in place, not scrolled), the final one, then
    # the ranked table and the record's path
    assert history.count("paddletune tune · ") == 1
    frame_at = history.index("paddletune tune · tunejob.py · interrupted · phase ")
    assert "ended: interrupted (Ctrl-C) · the ranked settings follow" in history
    assert frame_at < history.index("Settings, best first") < history.index(
        "tuning record written to")
    assert tmux.tmux("display", "-p", "-t", "t", "#{cursor_flag}").stdout.strip() == "1"
