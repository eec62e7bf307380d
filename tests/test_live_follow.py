"""The live data side: the follower reads complete lines of a growing profile, the window
model's figures (throughput, ETA, breakdown, reader, memory), the rolling advice, and
`paddletune watch` following a file another process appends to."""

import json
import subprocess
import sys
import threading
import time
from dataclasses import replace

import pytest

from paddletune import profile as prof
from paddletune.live.follow import Follower
from paddletune.live.loop import LiveLoop, follow_until_done
from paddletune.live.figures import STALLED_S
from paddletune.live.state import Progress
from paddletune.live.window import LiveModel
from paddletune.profile import records as rec
from paddletune.profile.codec import to_json
from profiles import (READER_BATCH, READER_CONFIG, make_profile, memory_records,
                      reader_interval, reader_records, step_records, system_samples, typed)


def json_of(record):
    """A record's line as JSON (typed records through the codec, dicts as they are)."""
    return record if isinstance(record, dict) else to_json(record)


def lines_of(records):
    return "".join(json.dumps(json_of(r)) + "\n" for r in records)


def header():
    return prof.header_record({"argv": ["train.py"]}, {"steps": 100}, {}, t0_unix=1.7e9)


# --- the follower --------------------------------------------------------------------------------
def test_follower_waits_for_the_file_and_reads_only_complete_lines(tmp_path):
    path = tmp_path / "p.jsonl"
    f = Follower(path)
    assert f.poll() == [] and not f.exists
    text = lines_of([header(), {"type": "event", "t_s": 1.0, "kind": "x"}])
    path.write_text(text[:-10])  # the second line cut mid-write
    assert [type(r) for r in f.poll()] == [rec.Header] and f.exists
    with open(path, "a") as out:
        out.write(text[-10:])
    assert f.poll() == [rec.Event(t_s=1.0, kind="x")]
    assert f.poll() == [] and f.at_end and f.n_records == 2


def test_follower_skips_bad_lines_and_restarts_on_a_rewritten_file(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text(lines_of([header()]) + "not json\n[1, 2]\n" +
                    lines_of([{"type": "event", "t_s": 2.0, "kind": "y"}]))
    f = Follower(path)
    assert [type(r) for r in f.poll()] == [rec.Header, rec.Event] and f.bad_lines == 2
    path.write_text(lines_of([header()]))  # a new run writes the same path: shorter
    assert [type(r) for r in f.poll()] == [rec.Header] and f.restarted == 1


# --- the model -----------------------------------------------------------------------------------
def model_of(path, window_s=30.0):
    model = LiveModel(window_s)
    model.add(Follower(path).poll())
    return model


def test_throughput_eta_and_history_over_the_last_ten_seconds(tmp_path):
    steps = step_records(n_steps=240, wall_s=1 / 16, warmup=0, t_start=0.01)  # 16/s for 15 s
    path = make_profile(tmp_path / "p.jsonl", steps=steps, exit_reason=None, summary=False,
                        options={"total_steps": 500})
    model = model_of(path)
    state = model.state(15.01)
    tp = state.throughput
    assert tp.steps_per_s == pytest.approx(16.0) and tp.span_s == pytest.approx(10.0)
    assert tp.samples_per_s == pytest.approx(16.0 * 64) and tp.batch_size == 64
    assert list(tp.history) == [15] + [16] * 14  # complete seconds 0..14
    assert state.progress == Progress(steps=240, total=500, total_from="--total-steps",
                                      eta_s=pytest.approx(260 / 16))
    assert state.status.state == "running"
    assert model.state(30.0).status.state == "stalled"  # nothing new for 15 s
    assert model.state(30.0).throughput.steps_per_s == 0.0


def test_the_window_drops_old_records_and_steps_total_comes_from_steps(tmp_path):
    steps = step_records(n_steps=300, wall_s=0.05, warmup=0, t_start=0.0)
    path = make_profile(tmp_path / "p.jsonl", steps=steps, exit_reason=None, summary=False,
                        options={"steps": 400})
    model = model_of(path, window_s=5.0)
    state = model.state(15.0)
    assert state.breakdown.n == 100  # the last 5 s of steps
    assert state.progress.total_from == "--steps"
    assert state.progress.steps == 300  # all-time


def test_breakdown_splits_the_loaders_wait_from_the_rest_of_the_gap(tmp_path):
    steps = step_records(gap_s=0.005)
    extra = reader_records(steps, wait_s=0.004, empty_ratio=0.9, fill=1)
    state = model_of(make_profile(tmp_path / "p.jsonl", steps=steps, extra=extra)).state(1.0)
    parts = dict(state.breakdown.parts)
    assert parts["wait"] == pytest.approx(0.004) and parts["other"] == pytest.approx(0.001)
    assert state.breakdown.wait_from == "reader"
    r = state.reader
    assert (r.fill_mean, r.fill_share, r.empty_ratio) == (1.0, 0.125, 0.9)
    assert r.pops == 40 and r.wait_per_pop_s == pytest.approx(0.004)


def test_the_reader_shown_is_the_one_the_steps_read_now(tmp_path):
    """An epoch of 60 steps on DataLoader#0, then 30 on DataLoader#1: during the second,
    the reader panel shows DataLoader#1 (DataLoader#0 has more batches over the run)."""
    fast = step_records(n_steps=60, wall_s=0.02, warmup=0, t_start=0.0)
    t = fast[-1]["t"] + fast[-1]["wall_s"]
    slow = step_records(n_steps=30, wall_s=0.1, warmup=0, t_start=t)[1:]
    extra = reader_records(fast, intervals=2) + reader_records(
        slow, config={**READER_CONFIG, "name": "DataLoader#1"}, loader=1, intervals=3,
        wait_s=0.09, empty_ratio=1.0, fill=0)
    model = model_of(make_profile(tmp_path / "p.jsonl", steps=fast + slow, extra=extra))
    r = model.state(t + 3.0).reader
    assert r.name == "DataLoader#1" and r.pops == 30
    assert r.wait_per_pop_s == pytest.approx(0.09)
    early = LiveModel()
    early.add(typed([header(), *fast, *reader_records(fast, intervals=2)]))
    assert early.state(t).reader.name == "DataLoader#0"


def test_memory_figures_and_capacity_sources(tmp_path):
    steps = step_records()
    extra = memory_records(steps, capacity=64 << 20) + system_samples()
    m = model_of(make_profile(tmp_path / "p.jsonl", steps=steps, extra=extra)).state(1.0)
    m = m.memory
    assert (m.allocated, m.peak_allocated, m.capacity, m.capacity_from) == (
        3 << 20, 8 << 20, 64 << 20, "pool")
    assert m.rss == 204 * 2 ** 20  # the newest system sample
    env = {"flags": {"FLAGS_cpu_memory_limit_mb": 100}, "memory": {"total_bytes": 1 << 33}}
    bare = model_of(make_profile(tmp_path / "q.jsonl", env=env)).state(1.0).memory
    assert (bare.capacity, bare.capacity_from, bare.pool_seen) == (
        100 << 20, "FLAGS_cpu_memory_limit_mb", False)


def test_rolling_advice_runs_the_advisors_on_the_window(tmp_path):
    steps = step_records(n_steps=200, gap_s=0.010, warmup=0)
    model = model_of(make_profile(tmp_path / "p.jsonl", steps=steps))
    advice = model.refresh_advice(model.now())
    assert advice.error is None and advice.verdict.kind == "highly-input-bound"
    assert advice.advice and advice.advice[0].severity in ("high", "medium", "low")
    window = model.window_profile(model.now())
    assert window.summary.n_steps == 200 and window.options.warmup is None


def test_a_new_header_resets_the_model(tmp_path):
    model = model_of(make_profile(tmp_path / "p.jsonl"))
    assert model.step_counts
    model.add([header()])
    assert not model.step_counts and model.header.options == rec.Options(steps=100)


# --- a long job: steps after the head come as windows ---------------------------------------------
WALL_S, GAP_S, FEED_S, FETCH_S, BATCH = 0.004, 0.001, 0.0005, 0.0002, 32  # 200 steps/s


def long_job_stream(n_steps=3000, head=1000, sample_every_s=0.05):
    """What the writer makes of a long job at 200 steps/s: an Accumulator keeps each
    program's first `head` steps (and their memory and ops records) in full and folds the
    rest into StepWindows (1 s each early on), closing them as its flushes tick; the system
    samples after the first 240 come as SampleWindows. The last window is still open."""
    from paddletune.profile.accumulate import Accumulator
    acc = Accumulator(head_steps=head)
    out = acc.add(replace(header(), options=rec.Options(total_steps=4000, ops=True)))
    t, next_sample, cpu = 0.1, 0.1, 100.0
    for i in range(n_steps):
        compute = WALL_S - FEED_S - FETCH_S
        out += acc.add(rec.Step(t, 1, 1, i, WALL_S, FEED_S, compute, FETCH_S, GAP_S, BATCH,
                                n_ops=2, fetch=(), feed=(), startup=False, place="CPUPlace"))
        out += acc.add(rec.MemoryStep(t, 1, i, 3 << 20, 4 << 20, (5 << 20) + i))
        out += acc.add(rec.OpsRecord(1, i, "host", (
            rec.OpTime(0, "mul", t + FEED_S, 0.002), rec.OpTime(1, "relu", t + 0.0025, 0.001))))
        t += WALL_S + GAP_S
        while next_sample <= t:
            cpu += 1.0
            out += acc.add(rec.SystemSample(next_sample, cpu_percent=cpu, rss_bytes=1 << 28,
                                            per_core_percent=(50.0, 60.0)))
            next_sample += sample_every_s
        out += acc.tick(t)  # the writer's flush closes the windows whose time is up
    return out, t, cpu


def test_a_long_jobs_windows_keep_throughput_progress_and_breakdown():
    records, end, _ = long_job_stream()
    windows = [x for x in records if isinstance(x, rec.StepWindow)]
    assert windows and all(w.t_s - w.t0_s <= 1.01 for w in windows)  # ~1 s each
    model = LiveModel()
    model.add(records)
    assert model.windowed
    state = model.state(end)
    in_windows = sum(w.n for w in windows)
    assert state.progress == Progress(steps=1000 + in_windows, total=4000,
                                      total_from="--total-steps",
                                      eta_s=pytest.approx((3000 - in_windows) / 200, rel=0.02))
    tp = state.throughput
    assert tp.steps_per_s == pytest.approx(200, rel=0.01) and tp.span_s == pytest.approx(10.0)
    assert tp.samples_per_s == pytest.approx(200 * BATCH, rel=0.01) and tp.batch_size == BATCH
    assert tp.samples == BATCH * (1000 + in_windows)
    assert all(h == pytest.approx(200, rel=0.02) for h in tp.history[2:])  # spread per second
    assert state.status.state == "running"
    model = LiveModel(window_s=5.0)
    model.add(records)
    b = model.state(end).breakdown  # only windows are left in the last 5 s (+ a window)
    assert b.n == sum(w.n for w in windows if w.t_s >= end - 5.0 - model.lag_s(end))
    parts = dict(b.parts)
    assert parts["feed"] == pytest.approx(FEED_S) and parts["fetch"] == pytest.approx(FETCH_S)
    assert parts["compute"] == pytest.approx(WALL_S - FEED_S - FETCH_S)
    assert parts["other"] == pytest.approx(GAP_S) and parts["wait"] == 0.0
    assert b.cycle_s == pytest.approx(WALL_S + GAP_S)


def test_a_long_jobs_windows_feed_ops_memory_and_the_cpu_panel():
    records, end, last_cpu = long_job_stream()
    assert any(isinstance(x, rec.SampleWindow) for x in records)
    model = LiveModel(window_s=5.0)
    model.add(records)
    state = model.state(end)
    assert [(op.type, op.per_step_s) for op in state.ops.top] == [
        ("mul", pytest.approx(0.002)), ("relu", pytest.approx(0.001))]
    assert state.ops.steps == state.breakdown.n
    m = state.memory  # per-step pool figures stopped with the head: the windows' step peak
    assert m.pool_seen and m.allocated is None
    newest = max(w.memory.step_peak_bytes for w in model.windows if w.memory is not None)
    assert m.step_peak == newest and newest > (5 << 20) + 1000
    c = state.cpu  # the newest SampleWindow's last values
    newest_window = [x for x in records if isinstance(x, rec.SampleWindow)][-1]
    assert c.sampled and c.process == newest_window.fields["cpu_percent"].last
    assert c.process < last_cpu and c.per_core == ()  # the open window's samples are unseen
    assert m.rss == 1 << 28


def test_a_quiet_spell_between_windows_is_no_stall_but_a_long_one_is():
    records, end, _ = long_job_stream(n_steps=1500)
    model = LiveModel()
    model.add(records)
    last = model.last_t
    assert model.state(last + STALLED_S + 0.5).status.state == "running"
    assert model.state(last + STALLED_S + model.lag_s(last) + 5).status.state == "stalled"
    later = model.state(last + 60).throughput  # no window for a minute: the rate falls
    assert later.steps_per_s == 0.0


def test_the_rolling_advice_reads_a_windowed_stream():
    records, end, _ = long_job_stream()
    model = LiveModel(window_s=5.0)
    model.add(records)
    window = model.window_profile(end)
    assert window.windows and not window.steps  # the head left the window
    assert window.summary.n_steps == sum(w.n for w in model.windows)
    assert window.options.warmup == 0  # the warm-up is long gone
    assert window.summary.throughput.steps_per_s == pytest.approx(200, rel=0.01)


# --- reading old and compressed streams ----------------------------------------------------------
def test_the_follower_converts_a_schema_1_profile_and_fills_compressed_steps(tmp_path):
    from paddletune.profile.codec import StepCompressor
    v1_lines = [{"type": "header", "schema": 1, "tool": "paddletune 0.9", "t0_unix": 1.7e9,
                 "command": {"argv": ["old.py"]}, "options": {"steps": 40}, "env": {}},
                *step_records(n_steps=3),
                {"type": "probe", "name": "memory", "available": True,
                 "result": {"capacity": 1 << 30, "peak_allocated": 8 << 20}},
                {"type": "wibble", "t": 1.0}]
    f = Follower(tmp_path / "old.jsonl")
    (tmp_path / "old.jsonl").write_text(lines_of(v1_lines))
    got = f.poll()
    assert isinstance(got[0], rec.Header) and got[0].command.argv == ("old.py",)
    assert [s.t_s for s in got if isinstance(s, rec.Step)] == pytest.approx(
        [0.0, 0.1, 0.15, 0.16])
    assert [type(x) for x in got[-2:]] == [rec.MemoryPool, rec.ProbeRecord]
    assert got[-2].capacity_bytes == 1 << 30 and any("'wibble'" in w for w in f.warnings())
    compress = StepCompressor()
    steps = [s._replace(feed=("img",)) for s in typed(step_records(n_steps=3))]
    v2 = [header(), *(compress.compress(s) for s in steps)]
    assert "fetch" not in v2[-1]  # written only when it changes
    (tmp_path / "new.jsonl").write_text(lines_of(v2))
    f = Follower(tmp_path / "new.jsonl")
    got = f.poll()[1:]
    sticky = [(s.n_ops, s.fetch, s.feed, s.startup, s.place) for s in steps]
    assert [(s.n_ops, s.fetch, s.feed, s.startup, s.place) for s in got] == sticky
    assert [s.step for s in got] == [s.step for s in steps] and f.bad_lines == 0


# --- following a growing file --------------------------------------------------------------------
def append_slowly(path, records, pause_s=0.02, chunk=7):
    """Write `records` to `path` a few at a time, cutting lines mid-way now and then."""
    text = lines_of(records)
    with open(path, "w") as out:
        for i in range(0, len(text), 997):
            out.write(text[i:i + 997])
            out.flush()
            time.sleep(pause_s)


def job_records(n_steps=100):
    steps = step_records(n_steps=n_steps, wall_s=0.01)
    end = steps[-1]["t"] + 0.02
    head = replace(header(), t0_unix_s=time.time())  # a job that is running now
    return [head, *typed(steps), *typed(system_samples(n=3)),
            rec.ExitEvent(t_s=end, status=0, reason="returned")]


def test_the_loop_follows_a_file_being_appended_until_the_exit_record(tmp_path):
    path = tmp_path / "p.jsonl"
    drawn = []
    writer = threading.Thread(target=append_slowly, args=(path, job_records()))
    writer.start()
    loop = follow_until_done(LiveLoop(path, drawn.append, hz=50), sleep=time.sleep)
    writer.join()
    assert loop.model.finished and loop.model.step_counts[1] == 100
    assert len(drawn) >= 3  # frames while it grew
    assert drawn[-1].status.state == "finished"
    assert drawn[-1].progress.steps == 100
    assert loop.cost()["frames"] == len(drawn) and loop.cost()["cpu_s"] > 0


def test_watch_follows_a_profile_another_process_appends(tmp_path):
    path = tmp_path / "p.jsonl"
    script = tmp_path / "writer.py"
    records = [json_of(r) for r in job_records()]
    script.write_text(
        "import json, sys, time\n"
        f"records = json.loads({json.dumps(json.dumps(records))})\n"
        "with open(sys.argv[1], 'w') as out:\n"
        "    for i, r in enumerate(records):\n"
        "        out.write(json.dumps(r) + '\\n'); out.flush()\n"
        "        if i % 20 == 0: time.sleep(0.1)\n")
    watcher = subprocess.Popen([sys.executable, "-m", "paddletune", "watch", str(path),
                                "--plain", "--refresh", "5"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    time.sleep(0.5)  # the watcher starts before the file exists
    subprocess.run([sys.executable, str(script), str(path)], check=True, timeout=60)
    out, err = watcher.communicate(timeout=60)
    assert watcher.returncode == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("paddletune live: ")
    assert lines[-1].startswith("paddletune live: ")
    assert "step 100 of 100 (100%)" in lines[-1]
    assert lines[-1].endswith("finished: exit 0 (returned)")


# --- a job that runs on but trains no more -------------------------------------------------------
def quiet_job(pushes_after: int, occupancy_after: dict, quiet_s: float = 20.0):
    """A job of 100 steps (0.05 s each) from an open DataLoader pass, then `quiet_s` seconds
    of reader intervals (one a second) without a step: the sampler still writes. Returns
    (the model, the end of the last step, the end of the quiet spell)."""
    steps = step_records(n_steps=100, wall_s=0.05, warmup=0, t_start=0.0)
    rows = reader_records(steps)[:-1]  # the pass has not ended
    end = steps[-1]["t"] + steps[-1]["wall_s"]
    per = dict(READER_BATCH, shapes={"img": {"64x784": 1}, "label": {"64x1": 1}})
    for k in range(int(quiet_s)):
        interval = reader_interval(end + k, end + k + 1, 0, per)
        interval.update(pushes=pushes_after, occupancy={str(size): n for size, n in
                                                       occupancy_after.items()})
        rows.append(interval)
    model = LiveModel()
    model.add(typed([header(), *steps, *rows]))
    return model, end, end + quiet_s


def test_a_loop_starved_by_a_stuck_reader_shows_reader_stalled():
    """Records keep coming (the queue sampler writes), but the loop has had no batch for
    20 s and the queue was empty at every sample with nothing pushed: "reader stalled",
    naming the loader; the dashboard's status line says so."""
    model, last_step, now = quiet_job(pushes_after=0, occupancy_after={0: 100})
    status = model.state(now).status
    assert status.state == "reader stalled" and status.loader == "DataLoader#0"
    assert status.quiet_s == pytest.approx(now - last_step)
    assert model.state(last_step + STALLED_S - 1).status.state == "running"  # not yet
    from paddletune.render.dashboard import _status_text
    assert _status_text(status)[0] == ("reader stalled: no batch for 20.00 s (DataLoader#0's "
                                       "queue is empty, nothing pushed)")


def test_no_step_with_a_full_queue_is_no_step_not_a_stalled_reader():
    """Batches wait in the queue but no step runs (a long evaluation, a stuck loop): the
    reader is not to blame."""
    model, last_step, now = quiet_job(pushes_after=0, occupancy_after={8: 100})
    status = model.state(now).status
    assert status.state == "no step" and status.quiet_s == pytest.approx(now - last_step)


def test_an_evaluation_pass_running_long_shows_evaluating():
    """After the training steps a second DataLoader's pass begins and runs for 20 s with no
    step: an evaluation loop, named as such (the training loader's pass stays open across
    the steps; the evaluation loader's passes never fed one)."""
    model, last_step, now = quiet_job(pushes_after=4, occupancy_after={0: 100})
    start = {"type": "reader", "what": "start", "t": last_step + 0.01, "loader": 1, "pass": 1,
             "config": {**READER_CONFIG, "name": "DataLoader#1"}}
    model.add(typed([start]))
    status = model.state(now).status
    assert status.state == "evaluating" and status.loader == "DataLoader#1"
    assert status.quiet_s == pytest.approx(now - last_step - 0.01)
    from paddletune.render.dashboard import _status_text
    assert _status_text(status)[0] == ("evaluating: DataLoader#1's pass for 19.99 s, no "
                                       "training step meanwhile")
    # a new pass of the training loader (a new epoch whose first batch is slow) is not one
    model, last_step, now = quiet_job(pushes_after=4, occupancy_after={0: 100})
    model.add(typed([{"type": "reader", "what": "end", "t": last_step, "loader": 0,
                      "pass": 1, "batches": 100, "detail": ""},
                     {**start, "loader": 0, "pass": 2, "config": READER_CONFIG}]))
    assert model.state(now).status.state == "no step"


def test_a_writer_gone_without_an_exit_record_died():
    model, _, now = quiet_job(pushes_after=0, occupancy_after={0: 100}, quiet_s=2)
    status = model.state(now, writer="gone").status
    assert status.state == "died" and status.pid == model.header.pid
    assert model.state(now, writer="alive").status.state == "running"


def test_a_verdict_too_few_steps_to_tell_is_tried_again_within_a_second(tmp_path):
    """The first frames of a job see a handful of steps: "too few steps to tell". The
    verdict is tried again after PENDING_EVERY_S, not the usual 5 s, so a job of a few
    seconds shows one while it runs; once there is a verdict, the usual pace."""
    from paddletune.live.loop import PENDING_EVERY_S
    path = tmp_path / "p.jsonl"
    records = [r for r in job_records(200) if not isinstance(r, rec.ExitEvent)]
    steps = [r for r in records if isinstance(r, rec.Step)]
    path.write_text(lines_of([r for r in records if not isinstance(r, rec.Step)] + steps[:3]))
    loop = LiveLoop(path, lambda state: None, advice_every_s=5.0)
    loop.frame()
    assert loop.advice_runs == 1 and loop.model.advice.verdict.kind == "too-few-steps"
    with open(path, "a") as f:
        f.write(lines_of(steps[3:]))
    loop.frame()
    assert loop.advice_runs == 1  # (not at every frame)
    time.sleep(PENDING_EVERY_S + 0.05)
    loop.frame()
    assert loop.advice_runs == 2 and loop.model.advice.verdict.kind != "too-few-steps"
    time.sleep(PENDING_EVERY_S + 0.05)
    loop.frame()
    assert loop.advice_runs == 2  # a verdict: again after advice_every_s
