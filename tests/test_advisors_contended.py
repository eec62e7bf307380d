"""#21's cpu-contended on constructed PyTorch profiles: the intra-op threads fit the cores but
not what other processes leave, and the training thread is preempted every step (the system
probe's involuntary context switches of the main thread x the step time)."""

import pytest

pytest.importorskip("torch")  # the header declares the PyTorch source

from paddletune.advisors import advise, threads  # noqa: E402
from paddletune.profile import load  # noqa: E402
from profiles import make_profile, source_info, step_records, system_samples  # noqa: E402
from test_advisors import ids, only  # noqa: E402

CORES_2 = {"cpu": {"model": "Test CPU", "logical_cores": 2, "physical_cores": 2,
                   "usable_cores": 2}}


def contended(tmp_path, wall_s=0.040, machine=100.0, involuntary=90.0, blas=2):
    """A 2-core machine at `machine`% while this process used ~half a core: other processes
    busy on ~1.5 cores; `blas` intra-op threads."""
    samples = system_samples(cpu_percent=50.0, cpu_total_percent=machine, blas_threads=blas,
                             ctx_involuntary_per_s=involuntary)
    return load(make_profile(tmp_path / "p.jsonl", steps=step_records(wall_s=wall_s),
                             env=CORES_2, extra=samples, source=source_info("torch")))


def test_threads_beyond_the_cores_others_leave_get_one_thread(tmp_path):
    a = only(advise(contended(tmp_path), [threads.cpu_threads]), "cpu-contended")
    assert (a.source, a.severity, a.confidence) == (21, "medium", "medium")
    f = a.figures
    assert f["other_processes_cores"] == pytest.approx(1.48, abs=0.01)
    assert f["preempted_per_step"] == pytest.approx(3.6)
    assert f["suggested_blas_threads"] == 1
    assert a.change.splitlines() == ["export OMP_NUM_THREADS=1",
                                     "# or in the script, before training: "
                                     "torch.set_num_threads(1)"]
    assert "preempted 3.6 times per step" in a.evidence
    assert a.expected_speedup is None and "not predicted" in a.expected_gain
    assert "OMP_NUM_THREADS=1 paddletune profile" in a.expected_gain


@pytest.mark.parametrize("why, kw", [
    ("rarely preempted", {"involuntary": 20.0}),  # 0.8 per 40 ms step
    ("the cores are free", {"machine": 25.0}),  # others ~0: both threads fit
    ("one thread already", {"blas": 1}),
])
def test_cpu_contended_stays_silent(tmp_path, why, kw):
    assert "cpu-contended" not in ids(advise(contended(tmp_path, **kw),
                                             [threads.cpu_threads])), why


def speed_tested(tmp_path, threads_wall_s, one_wall_s, wall_s=0.040, config=None,
                 cpu_s=0.004, produce_s=0.005):
    """contended()'s job with a DataLoader and a speed test: steps 20-29 without data at the
    job's 2 threads (`threads_wall_s` + a 1 ms gap), steps 30-39 without data at 1; each
    batch made in `produce_s`, `cpu_s` of it CPU."""
    from paddletune.profile.records import SpeedTestEvent
    from profiles import reader_records
    steps = step_records(n_steps=50, wall_s=wall_s, gap_s=0.010)
    t = steps[1]["t"]
    for i, st in enumerate(steps[1:]):
        if 20 <= i < 30:
            st["wall_s"], st["gap_s"] = threads_wall_s, 0.001
        elif 30 <= i < 40:
            st["wall_s"], st["gap_s"] = one_wall_s, 0.001
        st["t"] = t
        t += st["wall_s"] + st["gap_s"]
    switches = [SpeedTestEvent(steps[k]["t"] - 1e-4, phase, step)
                for k, phase, step in ((11, "baseline", 10), (21, "ceiling", 20),
                                       (31, "one_thread", 30), (41, "done", 40))]
    samples = system_samples(cpu_percent=50.0, cpu_total_percent=100.0, blas_threads=2,
                             ctx_involuntary_per_s=90.0)
    records = reader_records(steps, cpu_s=cpu_s, produce_s=produce_s, wait_s=0.008,
                             empty_ratio=0.9, fill=0, workers=(-1,), config=config)
    return load(make_profile(tmp_path / "p.jsonl", steps=steps, env=CORES_2,
                             options={"speed_test": 10}, source=source_info("torch"),
                             extra=switches + records + samples))


def test_the_speed_tests_one_thread_step_predicts_the_gain(tmp_path):
    """The speed test ran the step without data with the job's 2 threads (29 + 1 ms) and with
    1 (4 + 1 ms): one thread saves 25 ms of each step; the data side stays."""
    profile = speed_tested(tmp_path, threads_wall_s=0.029, one_wall_s=0.004)
    st = profile.summary.speed_test
    assert st.ceiling.cycle_s == pytest.approx(0.030) and st.one_thread.cycle_s == \
        pytest.approx(0.005)
    a = only(advise(profile, [threads.cpu_threads]), "cpu-contended")
    cycle = profile.summary.cycle_s.mean
    assert a.figures["preempted_per_step"] >= threads.SEVERE_PREEMPTED_PER_STEP
    assert a.severity == "high"  # (preempted 4 times a step or more, one thread faster)
    assert a.expected_speedup == pytest.approx(cycle / (cycle - 0.025))
    assert a.figures["predicted_cycle_s"] == pytest.approx(cycle - 0.025)
    assert a.figures["measured_by"] == "speed test"
    assert a.expected_gain.startswith(f"{cycle / (cycle - 0.025):.2f}x (")
    assert a.expected_gain.endswith("and the data side stays as it is; when the other "
                                    "processes stop, more threads may pay again")
    assert "without data in 30.00 ms with 2 math threads and in 5.00 ms with 1" in \
        a.expected_gain
    from paddletune.advisors.base import post_pass
    low, high = post_pass([a], profile)[0].expected_range  # the model's error around it
    assert low < a.expected_speedup < high


def test_a_training_thread_preempted_four_times_a_step_or_more_makes_the_card_high(tmp_path):
    """3.6 preemptions a step: medium (above); 4.5 (a 50 ms step at 90 a second): high, as
    the sweep's 12-85 a step that one thread made 3.2-46x faster; no faster by the speed
    test: low, however often."""
    a = only(advise(contended(tmp_path, wall_s=0.050), [threads.cpu_threads]),
             "cpu-contended")
    assert a.figures["preempted_per_step"] == pytest.approx(4.5)
    assert a.severity == "high"
    # a 1 s step preempted 5 times (5 a second, a mildly loaded machine): medium
    (tmp_path / "slow").mkdir()
    slow = only(advise(contended(tmp_path / "slow", wall_s=1.0, involuntary=5.0),
                       [threads.cpu_threads]), "cpu-contended")
    assert slow.figures["preempted_per_step"] == pytest.approx(5.0)
    assert slow.severity == "medium"


def test_one_thread_measured_no_faster_leaves_the_card_low(tmp_path):
    profile = speed_tested(tmp_path, threads_wall_s=0.029, one_wall_s=0.031)
    a = only(advise(profile, [threads.cpu_threads]), "cpu-contended")
    assert a.severity == "low" and a.expected_speedup < 1.0
    assert a.expected_gain.startswith("none measured: the speed test ran")


def test_without_a_speed_test_a_loader_job_is_told_to_run_one(tmp_path):
    from profiles import reader_records
    steps = step_records(wall_s=0.040)
    samples = system_samples(cpu_percent=50.0, cpu_total_percent=100.0, blas_threads=2,
                             ctx_involuntary_per_s=90.0)
    profile = load(make_profile(tmp_path / "p.jsonl", steps=steps, env=CORES_2,
                                source=source_info("torch"),
                                extra=samples + reader_records(steps)))
    a = only(advise(profile, [threads.cpu_threads]), "cpu-contended")
    assert a.expected_speedup is None
    assert "`paddletune profile --speed-test train.py` measures the step without data with " \
           "1 math thread as well" in a.expected_gain


def test_batches_the_loop_makes_shrink_with_the_step(tmp_path):
    """num_workers=0: the loop makes its batches with the same math threads, so the whole
    step shrinks as the no-data step did (30 -> 5 ms: 6x)."""
    profile = speed_tested(tmp_path, threads_wall_s=0.029, one_wall_s=0.004,
                           config={"producer": "loop"})
    a = only(advise(profile, [threads.cpu_threads]), "cpu-contended")
    assert a.expected_speedup == pytest.approx(6.0)
    assert "the loop makes its batches with the same threads, so they shrink alike" in \
        a.expected_gain


def test_the_data_cost_card_predicts_its_change_at_one_math_thread(tmp_path):
    """reader-data-cost writes the worker plan's change, which sets one math thread beside a
    busy worker: its gain is the speed test's ceiling with one thread (46 ms a step without
    data), not the ceiling at the job's two (21 ms), which it still names."""
    from paddletune.advisors import reader
    from paddletune.advisors.producers import fewer_blas_threads
    profile = speed_tested(tmp_path, threads_wall_s=0.020, one_wall_s=0.045, cpu_s=0.020,
                           produce_s=0.022)  # (a worker busy on most of a core)
    st = profile.summary.speed_test
    f = profile.summary.main_loader
    assert fewer_blas_threads(reader.worker_plan(profile, f)) == 1
    a = only(advise(profile, [reader.speed_test_ceiling]), "reader-data-cost")
    assert a.expected_speedup == pytest.approx(
        st.one_thread.steps_per_s / st.baseline.steps_per_s)
    assert a.expected_speedup < st.ratio
    assert a.expected_gain.startswith(f"up to {a.expected_speedup:.2f}x (")
    assert "the ceiling with one math thread, which the change sets; " \
           f"{st.ratio:.2f}x with the job's own threads" in a.expected_gain
    assert "OMP_NUM_THREADS=1" in a.change
