"""The reader rules (#2-#5, #18) and #1's deferral to them: each fired and not fired."""

import pytest

from paddletune.advisors import advise, input, reader, sequences
from paddletune.advisors.base import post_pass
from paddletune.profile import load
from profiles import make_profile, reader_records, step_records, system_samples
from test_advisors import ids, only
from test_render_reader import speed_test_profile
from test_summary_reader import two_datasets

CORES_4 = {"cpu": {"model": "Test CPU", "logical_cores": 4, "physical_cores": 4,
                   "usable_cores": 4}}
CORES_2 = {"cpu": {"model": "Test CPU", "logical_cores": 2, "physical_cores": 2,
                   "usable_cores": 2}}
READER_RULES = [reader.reader_starved, reader.speed_test_ceiling, reader.double_buffer_off,
                sequences.long_sequence_outliers]


def profile_with(tmp_path, steps, env=CORES_4, machine_percent=25.0, system=True,
                 extra=(), **per_batch):
    """`steps` fed by one DataLoader (reader_records(**per_batch)); system samples where the
    process keeps one core busy and the machine `machine_percent` of all cores."""
    samples = system_samples(cpu_percent=100.0, cpu_total_percent=machine_percent) \
        if system else []
    records = reader_records(steps, **per_batch) + samples + list(extra)
    return load(make_profile(tmp_path / "p.jsonl", steps=steps, env=env, extra=records))


def starved(tmp_path, **kw):
    """A 12 ms step waiting 29 ms per step for a 41 ms-per-batch thread producer."""
    steps = step_records(wall_s=0.012, gap_s=0.030)
    per_batch = {"wait_s": 0.029, "empty_ratio": 0.9, "produce_s": 0.041, "cpu_s": 0.037,
                 "fill": 0, **kw}
    return profile_with(tmp_path, steps, **per_batch)


# --- #2 / #5 the queue runs empty: how many workers -----------------------------------------------
ONE_WORKER = {"workers": (0,), "config": {"num_workers": 1}}


def test_starved_reader_gets_a_computed_worker_count(tmp_path):
    a = only(advise(starved(tmp_path, **ONE_WORKER), READER_RULES), "reader-starved")
    assert (a.severity, a.confidence, a.source) == ("high", "high", 2)
    assert a.title == "Reader-starved: the queue was empty in 90% of the pops"
    assert a.evidence == (
        "the queue of DataLoader#0 (capacity 8, 1 worker process) was empty in 90% of 30 "
        "pops; the loop waited 29.00 ms per step, 69% of its 42.00 ms step; producer "
        "41.00 ms/batch (CPU 37.00 ms) vs compute 13.00 ms/step (cycle - wait); 3.0 of 4 "
        "cores idle.")
    f = a.figures
    # 4 cores less the trainer's measured 1.02 (at least one core is kept for it) are free;
    # but the trainer waits 69% of its step: its work keeps 0.31 of a core busy, and the
    # workers get the 3.7 cores it leaves
    assert (f["workers_needed"], f["worker_cap"], f["workers"]) == (4, 4, 4)
    assert f["free_cores"] == pytest.approx(2.98) and f["suggested_capacity"] == 8
    assert f["room_cores"] == pytest.approx(4 - 0.31, abs=0.01)
    assert a.change.splitlines()[0] == ("loader = fluid.io.DataLoader.from_generator("
                                        "feed_list=[img, label], capacity=8, num_workers=4)")
    assert "fluid.io.get_worker_info()" in a.change
    # 4 workers would make a step's batch in 10.25 ms, but the trainer's 13 ms and their
    # 37 ms of CPU per step need 14.71 ms of the 4 cores time-shared at 85%
    cpu_bound_s = (0.013 + 0.037) / (4 * 0.85)
    assert f["cpu_bound"] and f["predicted_cycle_s"] == pytest.approx(cpu_bound_s)
    assert a.expected_speedup == pytest.approx(0.042 / cpu_bound_s)
    assert a.expected_gain == (
        "up to 2.86x steps/s (42.00 ms -> 14.71 ms per step) with 4 worker(s); the no-data "
        "ceiling is 77 steps/s; the cores bound it: the trainer's 13.00 ms and the producers' "
        "37.00 ms of CPU per step share the 4.0 core(s) other processes leave")


def test_io_bound_producer_needs_little_cpu_per_worker(tmp_path):
    a = only(advise(starved(tmp_path, cpu_s=0.001), READER_RULES), "reader-starved")
    assert (a.figures["workers"], a.figures["worker_cap"]) == (4, 16)
    assert a.expected_speedup == pytest.approx(0.042 / 0.013)


def test_unknown_cores_do_not_cap_the_workers(tmp_path):
    steps = step_records(wall_s=0.012, gap_s=0.030)
    p = profile_with(tmp_path, steps, env={"cpu": {}}, system=False, wait_s=0.029,
                     empty_ratio=0.9, produce_s=0.041, cpu_s=0.037, fill=0, **ONE_WORKER)
    a = only(advise(p, READER_RULES), "reader-starved")
    assert (a.figures["workers"], a.figures["cores"]) == (4, None)
    assert a.evidence.endswith("(cycle - wait).")


def test_a_sleeping_producer_is_not_held_back_by_other_processes(tmp_path):
    """A thread producer that sleeps 20 ms a batch for 0.3 ms of CPU, feeding a 0.4 ms step,
    on 2 cores other processes keep 1.9 busy: the cores they leave (0.1) would run one
    worker (the sizing before 2026-11-29 said so, and "low": 1.0x), but a worker wanting
    0.1 of a core is under its fair part of the cores (CFS: the job's 9 threads beside
    the others' 2 get 1.6 cores), so the scheduler serves each, and 8 workers (4 per core,
    the most) make a step's batch every 2.5 ms. A producer that keeps a core busy is not
    given a busy process's core (the test below)."""
    steps = step_records(wall_s=0.0004, gap_s=0.0200)
    records = reader_records(steps, wait_s=0.0199, empty_ratio=1.0, produce_s=0.020,
                             cpu_s=0.0003, fill=0)
    samples = system_samples(cpu_percent=8.0, cpu_total_percent=99.0)
    p = load(make_profile(tmp_path / "p.jsonl", steps=steps, env=CORES_2,
                          extra=records + samples))
    a = only(advise(p, READER_RULES), "reader-starved")
    f = a.figures
    assert f["other_processes_cores"] == pytest.approx(1.9, abs=0.06)
    assert f["room_shared"] and f["usable_cores"] == pytest.approx(2 * 9 / 11, rel=0.02)
    assert f["workers"] == 8 and a.severity == "high"
    assert a.expected_speedup == pytest.approx(0.0204 / (0.020 / 8), rel=0.05)
    assert "the scheduler gives the job's threads beside other processes run 8" in \
        a.expected_gain


def test_fair_share_of_the_cores_beside_other_processes():
    from paddletune.advisors.producers import fair_share_cores
    assert fair_share_cores(2, 1.9, 9) == pytest.approx(2 * 9 / 11)  # 2 busy others
    assert fair_share_cores(2, 0.3, 3) == pytest.approx(1.7)  # no busy other: what is left
    assert fair_share_cores(4, 1.0, 1) == pytest.approx(3.0)  # what is left is more
    assert fair_share_cores(2, 3.0, 2) == pytest.approx(2 * 2 / 5)  # (others over the cores)


def test_no_free_core_says_what_is_achievable(tmp_path):
    steps = step_records(wall_s=0.012, gap_s=0.030)
    p = profile_with(tmp_path, steps, env=CORES_2, machine_percent=100.0, wait_s=0.029,
                     empty_ratio=0.9, produce_s=0.041, cpu_s=0.037, fill=0, **ONE_WORKER)
    a = only(advise(p, READER_RULES), "reader-starved")
    assert a.figures["free_cores"] < 0.1 and a.figures["workers"] == 1
    assert a.change.startswith("# no core is free for more reader workers: 0.0 of the 2 cores "
                               "once the trainer and other processes are served, and a worker "
                               "needs 0.90 of one.\n# Make each batch cheaper")
    assert a.expected_gain == ("none from more workers on these cores; the no-data ceiling is "
                               "77 steps/s, which 4 workers would reach")
    assert a.evidence.endswith("0.0 of 2 cores idle, other processes busy on 1.0.")


def test_a_gil_bound_reader_thread_moves_to_a_worker_process(tmp_path):
    a = only(advise(starved(tmp_path), READER_RULES), "reader-starved")
    assert "producer 41.00 ms/batch (CPU 37.00 ms)" in a.evidence
    f = a.figures  # a worker does the thread's 37 ms of CPU without waiting for the GIL
    assert f["gil_bound_thread"] and f["worker_s_per_step"] == pytest.approx(0.037)
    assert (f["workers_needed"], f["workers"]) == (3, 3)
    lines = a.change.splitlines()
    assert lines[0] == ("loader = fluid.io.DataLoader.from_generator(feed_list=[img, label], "
                        "capacity=8, num_workers=3)")
    assert lines[1].startswith("# the reader thread computes 90% of its time, holding the GIL")
    # a lower bound: the thread's 37 ms were measured while it took turns at the GIL
    assert a.expected_gain.startswith("at least 2.86x steps/s (42.00 ms -> 14.71 ms per step) "
                                      "with 3 worker process(es), the training loop no longer "
                                      "waiting for the GIL; the no-data ceiling is 77 steps/s "
                                      "(a lower bound: ")
    # and what measures it from above
    assert f["speedup_max"] is None
    assert a.expected_range == (f["speedup"], None)  # stated as a bound, not a model error
    assert ("; `paddletune profile --speed-test train.py` measures the step without the "
            "thread, the gain's upper bound") in a.expected_gain


def test_a_speed_test_bounds_a_gil_bound_threads_gain_from_above(tmp_path):
    """The speed test replays batches while the thread waits on the full queue: its step is
    the step without the thread, so cycle / that step bounds the gain of moving the thread
    out (measured on examples/input_pipeline.py: at least 1.37x, at most 2.47x; one worker
    process gave 2.16x)."""
    path = speed_test_profile(tmp_path, ceiling_wall_s=0.010, thread_cpu_s=0.037, gap_s=0.030,
                              wait_s=0.029, empty_ratio=0.9, fill=0)
    a = only(advise(load(path), READER_RULES), "reader-starved")
    f = a.figures
    assert f["gil_bound_thread"] and f["consumer_source"] == "speed test"
    assert f["speedup_max"] == pytest.approx(f["cycle_s"] / f["consumer_s_per_step"])
    assert f["speedup"] < f["speedup_max"]
    assert (f"; at most {f['speedup_max']:.2f}x, the step without the thread that the speed "
            f"test measured (11.00 ms)") in a.expected_gain
    assert a.expected_gain.startswith(f"at least {f['speedup']:.2f}x")
    assert a.expected_range == (f["speedup"], f["speedup_max"])


def test_a_gil_bound_thread_moves_out_even_without_a_free_core(tmp_path):
    steps = step_records(wall_s=0.012, gap_s=0.030)
    p = profile_with(tmp_path, steps, env=CORES_2, machine_percent=100.0, wait_s=0.029,
                     empty_ratio=0.9, produce_s=0.041, cpu_s=0.037, fill=0)
    a = only(advise(p, READER_RULES), "reader-starved")
    assert a.figures["workers"] == 1 and "num_workers=1" in a.change.splitlines()[0]
    # the other processes leave one core: the trainer's 13 ms and the thread's 37 ms of CPU
    # per step cannot run in less than 50 ms there, wherever the batches are made
    assert a.figures["cpu_bound_cycle_s"] == pytest.approx(0.050 / 0.85, rel=0.05)
    # but the thread's 37 ms were measured while it took turns at the GIL: inflated, they
    # bound nothing, and the advice says so instead of "none"
    assert a.expected_speedup is None
    assert a.expected_gain == (
        "not predictable from these figures: the thread's CPU time and the step were "
        "measured while the two took turns at the GIL, which inflates both, so the cores look "
        "fuller than they are; the no-data ceiling is 77 steps/s")


def test_workers_the_other_processes_leave_no_core_for_gain_nothing(tmp_path):
    """The same, made by one worker process (not inflated): none on these cores."""
    steps = step_records(wall_s=0.012, gap_s=0.030)
    p = profile_with(tmp_path, steps, env=CORES_2, machine_percent=100.0, wait_s=0.029,
                     empty_ratio=0.9, produce_s=0.041, cpu_s=0.037, fill=0, **ONE_WORKER)
    a = only(advise(p, READER_RULES), "reader-starved")
    assert a.expected_gain.startswith("none")


def test_the_cores_bound_the_predicted_step(tmp_path):
    """Two cores, nothing else running, a trainer that waits for its one worker most of the
    step (0.3 of a core): 2 workers of 0.9 core each would make a step's batch in 20.5 ms,
    but with the trainer's 13 ms they need 50 ms of CPU per step: 29.4 ms on 2 cores
    time-shared at 85%."""
    steps = step_records(wall_s=0.012, gap_s=0.030)
    records = reader_records(steps, wait_s=0.029, empty_ratio=0.9, produce_s=0.041,
                             cpu_s=0.037, fill=0, **ONE_WORKER)
    samples = system_samples(cpu_percent=30.0, cpu_total_percent=15.0)
    p = load(make_profile(tmp_path / "p.jsonl", steps=steps, env=CORES_2,
                          extra=records + samples))
    a = only(advise(p, READER_RULES), "reader-starved")
    assert (a.figures["workers"], a.figures["cpu_bound"]) == (2, True)
    assert a.figures["predicted_cycle_s"] == pytest.approx(0.050 / 1.7, rel=0.02)
    assert a.expected_speedup == pytest.approx(0.042 * 1.7 / 0.050, rel=0.02)
    assert "the cores bound it: the trainer's 13.00 ms and the producers' 37.00 ms of CPU " \
        "per step share the 2.0 core(s) other processes leave" in a.expected_gain


def test_the_trainers_wait_for_a_core_is_not_its_cpu(tmp_path):
    """The same job on 2 math threads, whose training thread was runnable but waiting for a
    core for 6 ms of each step's ops (its worker and its math threads had the cores): the
    trainer's CPU per step without data is 13 - 6 = 7 ms, and the cores' bound (7 + 37) / 1.7
    = 25.9 ms, not (13 + 37) / 1.7. The cores it keeps busy beside the workers are at most
    its 7 ms over that fastest step: 0.27 of one, leaving 1.73 cores, 1.92 workers' worth
    of batches from 2 workers."""
    from profiles import worker_samples
    steps = step_records(wall_s=0.012, gap_s=0.030)
    for row in steps:
        if not row["startup"]:
            row["compute_wait_s"], row["compute_queued_s"] = 0.007, 0.006
    records = reader_records(steps, wait_s=0.029, empty_ratio=0.9, produce_s=0.041,
                             cpu_s=0.037, fill=0, **ONE_WORKER) + \
        worker_samples(workers=1, cores=0.9) + \
        system_samples(cpu_percent=105.0, cpu_total_percent=97.5, blas_threads=2)
    p = load(make_profile(tmp_path / "p.jsonl", steps=steps, env=CORES_2, extra=records))
    a = only(advise(p, READER_RULES), "reader-starved")
    f = a.figures
    assert f["trainer_cpu_s_per_step"] == pytest.approx(0.007)
    assert f["producing_workers"] == pytest.approx((2 - 0.007 / (0.044 / 1.7)) / 0.9,
                                                   abs=0.02)
    assert (f["workers"], f["cpu_bound"]) == (2, True)
    assert f["predicted_cycle_s"] == pytest.approx(0.044 / 1.7, rel=0.02)
    assert "the cores bound it: the trainer's 7.00 ms and the producers' 37.00 ms of CPU " \
        "per step share the 2.0 core(s) other processes leave" in a.expected_gain
    # a profile from before the wait was measured: the step without data stands for it
    unmeasured = load(make_profile(tmp_path / "q.jsonl", steps=step_records(
        wall_s=0.012, gap_s=0.030), env=CORES_2, extra=records))
    b = only(advise(unmeasured, READER_RULES), "reader-starved")
    assert b.figures["trainer_cpu_s_per_step"] is None
    assert b.figures["predicted_cycle_s"] == pytest.approx(0.050 / 1.7, rel=0.02)


def test_a_trainer_busy_with_blas_threads_is_told_so_when_workers_lack_cores(tmp_path):
    steps = step_records(wall_s=0.012, gap_s=0.030)
    samples = system_samples(cpu_percent=180.0, cpu_total_percent=95.0, blas_threads=2)
    p = load(make_profile(tmp_path / "p.jsonl", steps=steps, env=CORES_2, extra=reader_records(
        steps, wait_s=0.029, empty_ratio=0.9, produce_s=0.041, cpu_s=0.037, fill=0,
        **ONE_WORKER) + samples))
    a = only(advise(p, READER_RULES), "reader-starved")
    assert a.figures["trainer_cores"] == pytest.approx(1.82, abs=0.05)
    # 1.3 cores left beside the trainer's work, 0.9 of one a worker: a second worker
    # time-shares what the first leaves, 1.44 workers' worth of batches in all
    assert a.figures["producing_workers"] == pytest.approx(1.44, abs=0.05)
    assert "num_workers=2" in a.change.splitlines()[0]
    assert "# 2 BLAS threads + 2 worker(s) on 2 cores: during each op the workers wait. Give " \
           "NumPy's BLAS 1 thread(s) (check the step time after):\n" in a.change
    assert a.change.endswith("# export OPENBLAS_NUM_THREADS=1")


def test_a_gil_bound_thread_on_two_cores_also_gets_one_blas_thread(tmp_path):
    steps = step_records(wall_s=0.012, gap_s=0.030)
    samples = system_samples(cpu_percent=150.0, cpu_total_percent=90.0, blas_threads=2)
    p = load(make_profile(tmp_path / "p.jsonl", steps=steps, env=CORES_2, extra=reader_records(
        steps, wait_s=0.029, empty_ratio=0.9, produce_s=0.041, cpu_s=0.037, fill=0) + samples))
    a = only(advise(p, READER_RULES), "reader-starved")
    lines = a.change.splitlines()
    # 1.2 workers' worth of cores left (1.08 cores, 0.9 of one a worker): a second worker
    # makes 20% more batches
    assert a.figures["producing_workers"] == pytest.approx(1.22, abs=0.05)
    assert "num_workers=2" in lines[0] and lines[-1] == "# export OPENBLAS_NUM_THREADS=1"


def test_blas_threads_that_fit_beside_the_workers_are_left_alone(tmp_path):
    a = only(advise(starved(tmp_path), READER_RULES), "reader-starved")  # 4 cores, BLAS 1
    assert "BLAS" not in a.change


def test_workers_that_keep_up_on_average_get_a_larger_queue(tmp_path):
    a = only(advise(starved(tmp_path, produce_s=0.020, swings=2, workers=(0, 1),
                            config={"num_workers": 2}), READER_RULES), "reader-starved")
    assert a.figures["workers_needed"] == 2
    assert a.change == ("loader = fluid.io.DataLoader.from_generator(feed_list=[img, label], "
                        "capacity=16)\n# the producer keeps up on average: a larger queue "
                        "absorbs its bursts")
    assert "it swung 6 times from full to empty" in a.evidence


def full_queue(tmp_path, gap_s=0.005, **kw):
    """Well fed: the queue stays full, no pop waits; the loop spends `gap_s` on its own."""
    return profile_with(tmp_path, step_records(gap_s=gap_s), fill=8, **kw)


def test_a_queue_that_stays_full_gets_no_reader_advice(tmp_path):
    found = advise(full_queue(tmp_path))
    assert not [i for i in ids(found) if i.startswith(("reader", "input", "double", "long"))]
    assert all(a.severity != "high" for a in found)


def test_too_few_steps_or_a_mild_wait_give_no_starved_advice(tmp_path):
    few = profile_with(tmp_path, step_records(n_steps=4, gap_s=0.030), wait_s=0.029,
                       empty_ratio=0.9)
    assert reader.reader_starved(few) is None
    mild = profile_with(tmp_path, step_records(gap_s=0.0003), wait_s=0.0003, empty_ratio=0.9)
    assert reader.reader_starved(mild) is None  # 3% of the step: not visible


def test_a_bursty_producer_slower_than_the_step_is_starved_though_most_pops_find_a_batch(
        tmp_path):
    """A producer 3.15x slower than the step (41 ms a batch, 13 ms a step) whose waits fall
    on a few pops (a slow file now and then): 20% of the pops found the queue empty, below the 30% that counts alone, but
    the queue cannot stay filled and the loop waits 69% of its step: starved all the same.
    The same pops with a producer that keeps up: no advice."""
    a = only(advise(starved(tmp_path, empty_ratio=0.2), READER_RULES), "reader-starved")
    assert a.title == "Reader-starved: the producer is 3.15x slower than the step"
    assert "was empty in 20% of 30 pops" in a.evidence and a.figures["workers"] == 3
    fast = starved(tmp_path, empty_ratio=0.2, produce_s=0.010, cpu_s=0.002)
    assert reader.reader_starved(fast) is None


def test_input_bound_defers_to_the_reader_rules(tmp_path):
    p = starved(tmp_path)
    assert p.summary.verdict.kind == "highly-input-bound"
    assert input.input_bound(p) is None
    no_loader = load(make_profile(tmp_path / "q.jsonl", steps=step_records(gap_s=0.030)))
    assert input.input_bound(no_loader).id == "input-bound"


# --- #3 the speed test ----------------------------------------------------------------------------
def test_speed_test_quantifies_what_data_costs(tmp_path):
    a = only(advise(load(speed_test_profile(tmp_path)), READER_RULES), "reader-data-cost")
    assert (a.severity, a.source, a.confidence) == ("medium", 3, "high")
    assert a.title == "Data costs 67% of the throughput (speed test)"
    assert a.evidence == (
        "with FLAGS_reader_queue_speed_test_mode on (the queue peeked, never popped) the job "
        "ran 200.0 steps/s (12,800 samples/s) against 66.7 steps/s (4,267 samples/s) in the "
        "baseline window: data costs 67% of your throughput; ceiling 12,800 samples/s.")
    assert a.expected_speedup == pytest.approx(3.0)
    assert a.change.startswith("loader = fluid.io.DataLoader.from_generator(feed_list=[img, "
                               "label], capacity=8, num_workers=1)")


def test_speed_test_within_10_percent_gives_nothing(tmp_path):
    p = load(speed_test_profile(tmp_path, ceiling_wall_s=0.0139))
    assert p.summary.speed_test.ratio < 1.1
    assert reader.speed_test_ceiling(p) is None


def test_a_speed_test_is_suggested_only_for_a_suspicious_reader(tmp_path):
    a = reader.speed_test_ceiling(starved(tmp_path))
    assert (a.id, a.severity) == ("reader-speed-test", "info")
    assert a.change == "paddletune profile --speed-test --steps 60 train.py"
    assert reader.speed_test_ceiling(full_queue(tmp_path)) is None


LOOP_MADE = {"num_workers": 0, "producer": "loop", "capacity": 0}


def test_no_speed_test_for_a_loop_that_makes_its_own_batches_and_hardly_waits(tmp_path):
    """num_workers=0: the loop makes each batch as it asks, so every pop "finds the queue
    empty"; a 1% wait is no data cost in question (s27's s04: a 243 ms step waiting 1.9 ms,
    the card quoting "empty in 100% of the pops")."""
    steps = step_records(wall_s=0.099, gap_s=0.001)
    p = profile_with(tmp_path, steps, config=LOOP_MADE, wait_s=0.001, empty_ratio=1.0,
                     fill=0)
    f = p.summary.main_loader
    assert f.config.made_in == "loop" and f.empty_ratio == 1.0 and f.wait.share < 0.02
    assert reader.speed_test_ceiling(p) is None


def test_a_loop_made_wait_gets_a_speed_test_without_the_empty_queue(tmp_path):
    steps = step_records(wall_s=0.009, gap_s=0.001)
    p = profile_with(tmp_path, steps, config=LOOP_MADE, wait_s=0.001, empty_ratio=1.0,
                     fill=0)
    a = reader.speed_test_ceiling(p)
    assert (a.id, a.severity) == ("reader-speed-test", "info")
    assert a.evidence == ("the loop makes its own batches (num_workers=0) and waited 10% of "
                          "its step for them; a speed test measures what data costs.")
    assert a.figures["empty_ratio"] is None


def test_an_often_empty_queue_with_a_negligible_wait_gets_no_speed_test(tmp_path):
    """A queue empty at half the pops whose waits add up to 0.5% of the step: nothing to
    measure."""
    steps = step_records(wall_s=0.0199, gap_s=0.0001)
    p = profile_with(tmp_path, steps, wait_s=0.0001, empty_ratio=0.5, fill=0)
    f = p.summary.main_loader
    assert f.empty_ratio >= 0.5 and f.wait.share < 0.01
    assert reader.speed_test_ceiling(p) is None


# --- #4 the double buffer -------------------------------------------------------------------------
def test_double_buffer_off_with_a_visible_copy(tmp_path):
    p = full_queue(tmp_path, copy_s=0.001, config={"use_double_buffer": False})
    a = only(advise(p, READER_RULES), "double-buffer-off")
    assert (a.severity, a.source) == ("medium", 4)
    assert a.evidence == ("DataLoader#0 runs with use_double_buffer=False and copies each batch "
                          "to the device on the training thread: 1.00 ms per step, 6.7% of the "
                          "15.00 ms step.")
    assert a.change == ("loader = fluid.io.DataLoader.from_generator(feed_list=[img, label], "
                        "capacity=8, use_double_buffer=True)")
    assert a.expected_speedup == pytest.approx(15 / 14)


def test_double_buffer_on_or_no_copy_gives_nothing(tmp_path):
    on = full_queue(tmp_path, copy_s=0.001)
    assert reader.double_buffer_off(on) is None
    no_copy = profile_with(tmp_path, step_records(gap_s=0.005), fill=8,
                           config={"use_double_buffer": False})
    assert reader.double_buffer_off(no_copy) is None


# --- #18 long-sequence outliers -------------------------------------------------------------------
OUTLIERS = {"words": {"64x100": 19, "64x5000": 1}, "label": {"64x1": 20}}
LONG_COST = {6400: [95, 95 * 0.010], 320000: [5, 5 * 0.200]}


def sequences_profile(tmp_path, shapes=OUTLIERS, cost=LONG_COST):
    return profile_with(tmp_path, step_records(gap_s=0.001), fill=8, shapes=shapes, cost=cost,
                        config={"feed": ["words", "label"]})


def test_long_sequence_outliers_that_slow_their_steps(tmp_path):
    a = only(advise(sequences_profile(tmp_path), READER_RULES), "long-sequence-outliers")
    assert (a.severity, a.source) == ("medium", 18)
    assert a.title == "A few long batches of 'words' cost 51% of the compute"
    assert a.evidence == (
        "'words' dim 1 varies from 100 to 5,000 (p50 100, p95 100: the max is 50.0x the p95); "
        "the 5 of 100 steps on batches above the p95 size took 200.00 ms of compute each "
        "against 10.00 ms for the others (20.0x), 51% of all compute time.")
    assert a.change.splitlines()[0] == ("MAX_LEN = 100  # the p95 of 'words' dim 1 measured in "
                                        "this run")
    assert "if sample[0].shape[0] <= MAX_LEN:" in a.change
    assert a.expected_speedup == pytest.approx(0.011 / (0.011 - 5 * 0.190 / 100))


def test_long_batches_cost_what_every_steady_step_adds_when_more(tmp_path):
    """The per-size costs hold 5 long steps in 100 (9.5 ms a step over the typical 10 ms);
    the steady steps' mean compute says the long batches add 15 ms: that is the saving."""
    p = profile_with(tmp_path, step_records(wall_s=0.025, gap_s=0.001), fill=8,
                     shapes=OUTLIERS, cost=LONG_COST, config={"feed": ["words", "label"]})
    a = only(advise(p, READER_RULES), "long-sequence-outliers")
    s = p.summary
    excess_s = s.breakdown_s.compute_s - 0.010
    assert excess_s > 5 * 0.190 / 100
    assert a.expected_speedup == pytest.approx(s.cycle_s.mean / (s.cycle_s.mean - excess_s))


def test_no_outliers_or_steps_that_do_not_follow_give_nothing(tmp_path):
    flat_cost = {6400: [95, 0.95], 320000: [5, 0.05]}
    assert sequences.long_sequence_outliers(sequences_profile(tmp_path, cost=flat_cost)) is None
    even = {"words": {"64x100": 10, "64x150": 10}, "label": {"64x1": 20}}
    assert sequences.long_sequence_outliers(sequences_profile(tmp_path, shapes=even)) is None


# --- #7 worker memory: copy-on-read ---------------------------------------------------------------
def workers_profile(tmp_path, growth, workers=4, available=8 * 2 ** 30, start_method=None):
    from profiles import worker_samples
    steps = step_records(gap_s=0.001)
    # 5 intervals of 8 batches: whole batches per worker (schema 2 counts them as integers)
    records = reader_records(steps, fill=8, workers=tuple(range(workers)), intervals=5,
                             config={"num_workers": workers,
                                     "start_method": start_method}) + \
        worker_samples(workers=workers, growth=growth) + \
        system_samples(mem_available_bytes=available)
    return load(make_profile(tmp_path / "p.jsonl", steps=steps, env=CORES_4, extra=records))


def test_copy_on_read_growth_gets_numpy_advice(tmp_path):
    from paddletune.advisors import worker_memory
    a = only(advise(workers_profile(tmp_path, 300 * 2 ** 20), [worker_memory.worker_copy_on_read]),
             "worker-copy-on-read")
    assert (a.severity, a.source, a.confidence) == ("medium", 7, "high")  # 1.2 GiB in all
    assert a.title == "Reader workers copy the dataset: +300.0 MiB each"
    assert a.evidence.startswith("each of the 4 worker process(es) of DataLoader#0 grew its "
                                 "private memory (USS) by 300.0 MiB during a pass (max 300.0 "
                                 "MiB), 1.2 GiB in all, with 8.0 GiB available")
    assert "np.asarray" in a.change and a.expected_gain.startswith("up to 1.2 GiB less memory")


def test_small_growth_or_no_workers_gives_no_copy_on_read_advice(tmp_path):
    from paddletune.advisors import worker_memory
    rule = worker_memory.worker_copy_on_read
    assert rule(workers_profile(tmp_path, 5 * 2 ** 20)) is None  # an idle worker's few MiB
    assert rule(full_queue(tmp_path)) is None
    low = rule(workers_profile(tmp_path, 80 * 2 ** 20, workers=2))
    assert low.severity == "low"  # 160 MiB of 8 GiB


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_workers_that_were_not_forked_copy_nothing_on_read(tmp_path, method):
    """A spawned worker's growth is its new interpreter's imports (145 MiB with torch),
    not the trainer's pages: no copy-on-read advice; a forked one's still gets it."""
    from paddletune.advisors import worker_memory
    rule = worker_memory.worker_copy_on_read
    assert rule(workers_profile(tmp_path, 145 * 2 ** 20, workers=2, start_method=method)) \
        is None
    forked = rule(workers_profile(tmp_path, 145 * 2 ** 20, workers=2, start_method="fork"))
    assert forked.id == "worker-copy-on-read"


def test_the_workers_own_cpu_is_not_taken_for_other_processes(tmp_path):
    from profiles import worker_samples
    steps = step_records(wall_s=0.012, gap_s=0.030)
    p = profile_with(tmp_path, steps, env=CORES_2, machine_percent=100.0, wait_s=0.029,
                     empty_ratio=0.9, produce_s=0.041, cpu_s=0.037, fill=0,
                     extra=worker_samples(workers=1, cores=0.9), **ONE_WORKER)
    a = only(advise(p, READER_RULES), "reader-starved")
    # machine 2.0 busy = trainer 1.02 + its worker 0.9 + others 0.08: 0.9 cores free
    assert a.figures["other_processes_cores"] == pytest.approx(0.08, abs=0.01)
    assert a.figures["free_cores"] == pytest.approx(0.9, abs=0.01)


def test_a_trainer_that_mostly_waits_lends_its_core_to_the_workers(tmp_path):
    """2 cores, nothing else running; the trainer keeps 0.12 of a core busy (its 12 ms step
    of every 42) and the thread producer 0.88: a second worker time-shares the trainer's
    core (the free-core count alone, which keeps a whole core for the trainer, allows 1)."""
    steps = step_records(wall_s=0.012, gap_s=0.030)
    p = profile_with(tmp_path, steps, env=CORES_2, machine_percent=50.0, wait_s=0.029,
                     empty_ratio=0.9, produce_s=0.041, cpu_s=0.037, fill=0)
    a = only(advise(p, READER_RULES), "reader-starved")
    f = a.figures
    assert f["free_cores"] == pytest.approx(1.0)
    assert (f["workers_needed"], f["worker_cap"], f["workers"]) == (3, 2, 2)
    # 2 cores less the trainer's own (the process's 1.0 less the thread's 37 ms of CPU per
    # batch at the pops' rate): about 1.86
    assert f["room_cores"] == pytest.approx(1.86, abs=0.03)
    assert "num_workers=2" in a.change.splitlines()[0]
    assert a.expected_gain.endswith("reaching it takes 3 workers, but the 1.9 core(s) the "
                                    "trainer leaves (it waits most of its step) run 2: make "
                                    "each batch cheaper too")


def test_spinning_math_threads_do_not_keep_the_workers_core(tmp_path):
    """A PyTorch-style step (the loop reads each batch itself: 8 of its 9 ms wait inside the
    DataLoader) whose process shows 1.7 cores busy: the batch's 8 ms of CPU and, beyond the
    trainer's 1 ms of work on 2 math threads, threads spinning while they wait. The workers'
    room counts the trainer's work (at most 2 threads x its 11% of the step), not the spin:
    2 workers, with the advice to give the math library 1 thread."""
    steps = step_records(wall_s=0.009, feed_s=0.0, fetch_s=0.0)
    for row in steps:
        if not row["startup"]:
            row["read_s"] = row["wall_s"] * 8 / 9
            row["compute_s"] = row["wall_s"] - row["read_s"]
    samples = system_samples(cpu_percent=170.0, cpu_total_percent=86.0, blas_threads=2)
    p = load(make_profile(tmp_path / "p.jsonl", steps=steps, env=CORES_2, extra=reader_records(
        steps, config={"num_workers": 0, "producer": "loop", "capacity": 0}, wait_s=0.008,
        empty_ratio=1.0, produce_s=0.008, cpu_s=0.008, fill=0) + samples))
    a = only(advise(p, READER_RULES), "reader-starved")
    f = a.figures
    assert f["trainer_cores"] > 0.7  # measured: the spinning threads count there
    assert (f["worker_cap"], f["workers"]) == (2, 2)
    assert "num_workers=2" in a.change.splitlines()[0]
    assert a.change.endswith("# export OPENBLAS_NUM_THREADS=1")


# --- #5 a thread producer that keeps up but holds the GIL --------------------------------------
GIL_RULES = [reader.reader_starved, reader.reader_thread_gil, reader.speed_test_ceiling]


def full_queue_thread(tmp_path, cpu_s, waited=None, env=CORES_4, machine_percent=33.0,
                      **kw):
    """A 20 ms step (19.8 ms in the runtime) whose thread producer keeps the queue full,
    computing `cpu_s` per batch; 4 cores (`env`), the process busy 1.3 of them. `waited`: each
    step's (compute_wait_s, compute_queued_s), the training thread's time off its CPU while
    computing and, of it, waiting for a core (None: a profile from before they were
    measured)."""
    steps = step_records(wall_s=0.0198, gap_s=0.0002)
    if waited is not None:
        for row in steps:
            if not row["startup"]:
                row["compute_wait_s"], row["compute_queued_s"] = waited
    records = reader_records(steps, wait_s=0.0001, empty_ratio=0.0, produce_s=cpu_s * 1.2,
                             cpu_s=cpu_s, fill=8, **kw)
    samples = system_samples(cpu_percent=130.0, cpu_total_percent=machine_percent)
    return load(make_profile(tmp_path / "p.jsonl", steps=steps, env=env,
                             extra=records + samples))


def test_a_thread_that_keeps_up_but_holds_the_gil_moves_to_a_worker(tmp_path):
    a = only(advise(full_queue_thread(tmp_path, cpu_s=0.008), GIL_RULES),
             "reader-thread-gil")
    assert (a.severity, a.confidence, a.source) == ("medium", "medium", 5)
    assert a.title == "The reader thread holds the GIL 40% of each step"
    assert "computes 8.00 ms per step in Python, 40% of the 20.00 ms step" in a.evidence
    assert a.change.splitlines()[0] == ("loader = fluid.io.DataLoader.from_generator("
                                        "feed_list=[img, label], capacity=8, num_workers=1)")
    assert "fluid.io.get_worker_info()" in a.change
    # at most the thread's 8 ms less, plus the worker's hand-over of the batch
    assert a.figures["predicted_cycle_s"] == pytest.approx(0.012 + reader.WORKER_BATCH_S)
    assert a.expected_speedup == pytest.approx(0.020 / (0.012 + reader.WORKER_BATCH_S))
    assert "paddletune profile --speed-test" in a.expected_gain


@pytest.mark.parametrize("waited_s", [0.004, 0.008, 0.011])
def test_the_gil_card_predicts_from_the_time_the_loop_waited_off_its_cpu(tmp_path, waited_s):
    """Where the runtime measured the training thread off its CPU while its ops ran (blocked
    for the GIL, or waiting for a core the thread took), a worker process takes that time
    from the step: the prediction follows it, below and above the thread's own 8 ms of CPU,
    and is an estimate (the model's range), no longer a lower bound."""
    queued_s = 0.001
    p = full_queue_thread(tmp_path, cpu_s=0.008, waited=(waited_s, queued_s))
    b = p.summary.breakdown_s
    assert (b.compute_wait_s, b.compute_queued_s) == pytest.approx((waited_s, queued_s))
    a = only(advise(p, GIL_RULES), "reader-thread-gil")
    predicted_s = 0.020 - waited_s + reader.WORKER_BATCH_S
    assert a.figures["compute_wait_s"] == pytest.approx(waited_s)
    assert a.figures["consumer_source"] == "cycle - off-CPU wait"
    assert not a.figures["cpu_bound"]
    assert a.figures["predicted_cycle_s"] == pytest.approx(predicted_s)
    assert a.expected_speedup == pytest.approx(0.020 / predicted_s)
    assert not a.expected_gain.startswith("at least")
    assert (f"off its CPU {waited_s * 1e3:.2f} ms per step while its ops ran, "
            f"{waited_s / 0.020:.0%} of the step ({(waited_s - queued_s) * 1e3:.2f} ms "
            f"blocked, for the GIL; 1.00 ms waiting for a core)") in a.evidence
    assert a.expected_range is None  # a point prediction: `advise` states the model's error
    stated = only(post_pass(advise(p, GIL_RULES), p), "reader-thread-gil")
    low, high = stated.expected_range
    assert stated.figures["range"]["basis"] == "model" and low < a.expected_speedup < high
    assert "paddletune profile --speed-test" in a.expected_gain


def test_the_gil_card_is_bounded_by_the_cores_beside_the_wait(tmp_path):
    """The step less the wait is the loop's own CPU path; on two cores the worker's CPU and
    the trainer's share them, and that bounds the step (not the wait alone)."""
    four = full_queue_thread(tmp_path, cpu_s=0.008, waited=(0.011, 0.006))
    (tmp_path / "two").mkdir()
    two = full_queue_thread(tmp_path / "two", cpu_s=0.008, waited=(0.011, 0.006),
                            env=CORES_2, machine_percent=66.0)
    a, b = (only(advise(p, GIL_RULES), "reader-thread-gil") for p in (four, two))
    assert not a.figures["cpu_bound"] and b.figures["cpu_bound"]
    assert a.figures["predicted_cycle_s"] == pytest.approx(0.009 + reader.WORKER_BATCH_S)
    assert b.figures["predicted_cycle_s"] == pytest.approx(b.figures["cpu_bound_cycle_s"])
    assert a.expected_speedup > b.expected_speedup > 1.0
    assert "the cores bound it" in b.expected_gain


def test_the_gil_card_without_the_wait_stays_a_lower_bound(tmp_path):
    """A profile from before the compute wait was measured advises as before: the thread's
    CPU time off the step, at least."""
    old = full_queue_thread(tmp_path, cpu_s=0.008)
    assert old.summary.breakdown_s.compute_wait_s is None
    a = only(advise(old, GIL_RULES), "reader-thread-gil")
    assert a.figures["compute_wait_s"] is None
    assert a.figures["predicted_cycle_s"] == pytest.approx(0.012 + reader.WORKER_BATCH_S)
    assert a.expected_gain.startswith("at least")
    assert a.expected_range[0] == pytest.approx(a.expected_speedup)


def test_a_thread_the_loop_hardly_waits_for_is_left_alone(tmp_path):
    """The thread computes 40% of the step, but the training thread was hardly ever off its
    CPU while its ops ran (they let the GIL go, and the thread ran meanwhile): no gain."""
    p = full_queue_thread(tmp_path, cpu_s=0.008, waited=(0.0003, 0.0))
    assert "reader-thread-gil" not in ids(advise(p, GIL_RULES))


def test_a_thread_with_little_python_work_is_left_alone(tmp_path):
    assert "reader-thread-gil" not in ids(advise(full_queue_thread(tmp_path, cpu_s=0.001),
                                                 GIL_RULES))


def test_the_gil_rule_defers_to_workers_and_to_a_measured_ceiling(tmp_path):
    workers = full_queue_thread(tmp_path, cpu_s=0.008, **ONE_WORKER)
    assert "reader-thread-gil" not in ids(advise(workers, GIL_RULES))
    path = speed_test_profile(tmp_path / "st", thread_cpu_s=0.008)
    measured = load(path)
    assert measured.summary.speed_test is not None
    assert "reader-thread-gil" not in ids(advise(measured, GIL_RULES))
    # the same profile without its speed test gets the advice
    unmeasured = load(speed_test_profile(tmp_path / "no-st", thread_cpu_s=0.008,
                                         speed_test=False))
    assert "reader-thread-gil" in ids(advise(unmeasured, GIL_RULES))


def alone(s_per_batch, cpu_s_per_batch, loader=0):
    """The speed test's timing of the reader thread alone (its solo phase)."""
    from paddletune.profile.records import ProducerSoloEvent
    return ProducerSoloEvent(t_s=0.9, loader=loader, pass_no=1, batches=8,
                             s_per_batch=s_per_batch, cpu_s_per_batch=cpu_s_per_batch)


def test_a_thread_timed_alone_gets_an_estimate(tmp_path):
    """The speed test measured the step without the thread (5 ms: 4 ms + its gap) and timed
    the thread alone: 5 ms a batch against 8 ms of CPU beside the trainer. One worker
    process makes a batch within the step; the trainer's step (plus the worker's hand-over)
    and the worker's CPU share the 2 cores: an estimate, no longer a lower bound."""
    path = speed_test_profile(tmp_path, thread_cpu_s=0.008, extra=[alone(0.005, 0.0048)])
    advices = advise(load(path), GIL_RULES)
    assert "reader-data-cost" not in ids(advices)  # the card below gives the ceiling
    a = only(advices, "reader-thread-gil")
    f = a.figures
    assert f["consumer_source"] == "speed test" and f["workers"] == 1
    # the thread's CPU alone (a worker has an interpreter of its own), not the 8 ms beside
    # the trainer
    assert f["worker_s_per_step"] == pytest.approx(0.0048)
    assert f["producer_cpu_measured_s"] == pytest.approx(0.008)
    step_s = 0.005 + reader.WORKER_BATCH_S
    assert f["cpu_bound"] and f["predicted_cycle_s"] == pytest.approx((step_s + 0.0048) / 1.7)
    assert a.expected_speedup == pytest.approx(0.015 / f["predicted_cycle_s"])
    assert f["speedup_max"] == pytest.approx(0.015 / step_s)
    assert a.expected_gain == (
        "2.56x steps/s (15.00 ms -> 5.85 ms per step) with the loop no longer waiting for "
        "the GIL (from the speed test: the step without the thread, 5.15 ms with a worker's "
        "hand-over, and the thread timed alone, 5.00 ms (4.80 ms of CPU) per step against "
        "8.00 ms of CPU beside the trainer; a worker process takes the lower CPU time, "
        "4.80 ms); at most 2.91x, the step without the thread that the speed test measured (5.15 ms); the "
        "cores bound it: the trainer's 5.15 ms and the producers' 4.80 ms of CPU per step "
        "share the 2.0 core(s) other processes leave")


def test_a_worker_is_sized_on_the_lower_of_the_threads_cpu_times(tmp_path):
    """Alone, the thread took 24 ms a batch, 20 ms of it on the CPU; beside the trainer, over
    the whole run, it used 18 ms of CPU a batch: the same work, which sharing the process
    only makes dearer, so a worker process is sized on 18 ms."""
    path = speed_test_profile(tmp_path, ceiling_wall_s=0.010, thread_cpu_s=0.018,
                              gap_s=0.030, wait_s=0.029, empty_ratio=0.9, fill=0,
                              extra=[alone(0.024, 0.020)])
    a = only(advise(load(path), READER_RULES), "reader-starved")
    assert a.figures["worker_s_per_step"] == pytest.approx(0.018)
    assert a.figures["producer_alone_cpu_s_per_step"] == pytest.approx(0.020)
    assert ("the thread timed alone, 24.00 ms (20.00 ms of CPU) per step against 18.00 ms of "
            "CPU beside the trainer; a worker process takes the lower CPU time, 18.00 ms)"
            ) in a.expected_gain


def test_a_starved_thread_timed_alone_gets_workers_sized_from_that_timing(tmp_path):
    path = speed_test_profile(tmp_path, ceiling_wall_s=0.010, thread_cpu_s=0.037,
                              gap_s=0.030, wait_s=0.029, empty_ratio=0.9, fill=0,
                              extra=[alone(0.024, 0.020)])
    advices = advise(load(path), READER_RULES)
    assert "reader-data-cost" not in ids(advices)
    a = only(advices, "reader-starved")
    f = a.figures  # 24 ms alone, 20 ms of it on the CPU (what a worker process takes: the
    # thread waited for the trainer's other threads) against an 11 ms step without data:
    # 2 workers, but the one free core of 2 runs one
    assert f["worker_s_per_step"] == pytest.approx(0.020)
    assert (f["workers_needed"], f["workers"]) == (2, 1)
    assert a.expected_speedup == pytest.approx(0.040 / 0.020)
    assert a.expected_gain.startswith("up to 2.00x steps/s (40.00 ms -> 20.00 ms per step)")
    assert ("and the thread timed alone, 24.00 ms (20.00 ms of CPU) per step against "
            "37.00 ms of CPU beside the trainer; a worker process takes the lower CPU time, "
            "20.00 ms)") in a.expected_gain
    assert "producer 44.40 ms/batch (CPU 37.00 ms)" in a.evidence  # what the run measured
    # another loader's timing is not this one's
    other = speed_test_profile(tmp_path / "other", ceiling_wall_s=0.010, thread_cpu_s=0.037,
                               gap_s=0.030, wait_s=0.029, empty_ratio=0.9, fill=0,
                               extra=[alone(0.024, 0.020, loader=5)])
    assert "timed alone" not in only(advise(load(other), READER_RULES),
                                     "reader-starved").expected_gain


def test_a_trainer_that_waits_in_its_step_leaves_the_cores_to_the_workers(tmp_path):
    """The ceiling window's process CPU says the trainer's step (11 ms) used 2 ms of CPU:
    the cores bound the workers' CPU with those 2 ms, not the whole step; CPU above the
    step would be spinning math threads, and is not counted."""
    from test_summary_reader import speed_test_events
    def advised(cpu_at_done, thread_cpu_s=(None, None, None)):
        steps = step_records(wall_s=0.012, gap_s=0.030)
        t = steps[1]["t"]
        for i, st in enumerate(steps[1:]):
            if 20 <= i < 30:
                st["wall_s"], st["gap_s"] = 0.010, 0.001
            st["t"] = t
            t += st["wall_s"] + st["gap_s"]
        events = speed_test_events(steps[11]["t"] - 1e-4, steps[21]["t"] - 1e-4,
                                   steps[31]["t"] - 1e-4, cpu_s=(0.0, 1.0, cpu_at_done),
                                   thread_cpu_s=thread_cpu_s)
        per_batch = {"cpu_s": 0.018, "produce_s": 0.020, "wait_s": 0.029,
                     "empty_ratio": 0.9, "fill": 0}
        path = make_profile(tmp_path / f"{cpu_at_done}.jsonl", steps=steps, env=CORES_2,
                            options={"speed_test": 10},
                            extra=events + reader_records(steps, **per_batch)
                            + [alone(0.018, 0.018)])
        return only(advise(load(path), READER_RULES), "reader-starved").figures
    waits = advised(1.0 + 10 * 0.002)  # 2 ms of CPU per 11 ms step
    assert waits["trainer_cpu_s_per_step"] == pytest.approx(0.002 + reader.WORKER_BATCH_S)
    assert waits["cpu_bound_cycle_s"] == pytest.approx((0.00215 + 0.018) / (2 * 0.85))
    spins = advised(1.0 + 10 * 0.020)  # 2 cores busy: counted as one core's worth
    assert spins["trainer_cpu_s_per_step"] is None
    assert spins["cpu_bound_cycle_s"] == pytest.approx((0.01115 + 0.018) / (2 * 0.85))
    # one math thread: the training thread's CPU (3 ms a step) is the trainer's; the
    # process's 20 ms also counted the reader thread filling the queue the window peeked at
    filling = advised(1.0 + 10 * 0.020, thread_cpu_s=(0.0, 0.5, 0.5 + 10 * 0.003))
    assert filling["blas_threads"] == 1
    assert filling["trainer_cpu_s_per_step"] == pytest.approx(0.003 + reader.WORKER_BATCH_S)


def test_one_blas_thread_is_planned_on_the_step_measured_with_one(tmp_path):
    """A thread job on 2 cores with 2 BLAS threads: the card gives the trainer one. The
    speed test's one-thread window measured that step (14 ms + its 1 ms gap against 10 + 1
    with two threads): the plan is made on it, and it bounds the whole change."""
    from paddletune.profile.records import SpeedTestEvent
    steps = step_records(n_steps=50, wall_s=0.012, gap_s=0.030)
    t = steps[1]["t"]
    for i, st in enumerate(steps[1:]):
        if 20 <= i < 30:
            st["wall_s"], st["gap_s"] = 0.010, 0.001
        elif 30 <= i < 40:
            st["wall_s"], st["gap_s"] = 0.014, 0.001
        st["t"] = t
        t += st["wall_s"] + st["gap_s"]
    switches = [SpeedTestEvent(steps[k]["t"] - 1e-4, phase, step)
                for k, phase, step in ((11, "baseline", 10), (21, "ceiling", 20),
                                       (31, "one_thread", 30), (41, "done", 40))]
    samples = system_samples(cpu_percent=150.0, cpu_total_percent=90.0, blas_threads=2)
    records = reader_records(steps, cpu_s=0.008, produce_s=0.0096, wait_s=0.029,
                             empty_ratio=0.9, fill=0)
    path = make_profile(tmp_path / "p.jsonl", steps=steps, env=CORES_2,
                        options={"speed_test": 10},
                        extra=switches + records + samples + [alone(0.008, 0.008)])
    profile = load(path)
    assert profile.summary.speed_test.one_thread.cycle_s == pytest.approx(0.015)
    a = only(advise(profile, READER_RULES), "reader-starved")
    f = a.figures
    assert a.change.splitlines()[-1] == "# export OPENBLAS_NUM_THREADS=1"
    assert f["consumer_source"] == "speed test, 1 math thread"
    assert f["consumer_s_per_step"] == pytest.approx(0.015 + reader.WORKER_BATCH_S)
    assert f["speedup_max"] == pytest.approx(f["cycle_s"] / f["consumer_s_per_step"])


def test_waits_that_fill_the_step_fall_back_on_the_steps_own_run(tmp_path):
    """The loader times its waits and the step probe the cycle, over windows that differ a
    little: a wait of 43 ms 'per step' against a 42 ms cycle leaves no step without data;
    the step's own run (feed, compute, fetch: 12 ms) stands in, and the card still reads."""
    steps = step_records(wall_s=0.012, gap_s=0.030)
    p = profile_with(tmp_path, steps, wait_s=0.043, empty_ratio=0.9, produce_s=0.041,
                     cpu_s=0.037, fill=0, **ONE_WORKER)
    a = only(advise(p, READER_RULES), "reader-starved")
    assert a.figures["consumer_source"] == "feed + compute + fetch"
    assert a.figures["consumer_s_per_step"] == pytest.approx(0.012, rel=0.01)
    assert "ceiling is 83 steps/s" in a.expected_gain


def test_batches_the_loop_makes_itself_are_no_gil_contention(tmp_path):
    """PyTorch's num_workers=0: the loop makes each batch while the model waits, so its CPU
    time is not inflated by a thread taking turns at the GIL: the gain is an "up to"."""
    a = only(advise(starved(tmp_path, config={"producer": "loop"}), READER_RULES),
             "reader-starved")
    assert not a.figures["gil_bound_thread"] and a.figures["made_in"] == "loop"
    assert a.expected_gain.startswith("up to ") and "GIL" not in a.expected_gain


def test_the_speed_test_bound_leaves_a_blas_change_out():
    """The speed test's step ran with the trainer's BLAS threads as they were: when the card
    also gives them fewer (their own gain, unmeasured), it bounds the worker's part alone
    (bench_advice's gil-thread job: at most 2.04x from the worker, 2.92x measured with one
    BLAS thread as well)."""
    plan = {"cycle_s": 0.040, "consumer_s_per_step": 0.011, "cores": 2, "trainer_cores": 1.2,
            "workers": 1, "current_workers": 0, "worker_busy_cores": 0.8, "blas_threads": 2}
    crowded = reader._gil_bound_from_above(plan, measured=True)
    assert crowded["speedup_max"] is None
    assert crowded["worker_speedup_max"] == pytest.approx(0.040 / 0.011)
    gain = reader._gil_upper_bound({**plan, **crowded}, "train.py")
    assert gain == ("; at most 3.64x from the worker process alone, the step without the "
                    "thread that the speed test measured (11.00 ms); the fewer BLAS threads "
                    "below may add to it")
    alone = reader._gil_bound_from_above({**plan, "blas_threads": 1}, measured=True)
    assert alone["speedup_max"] == pytest.approx(0.040 / 0.011)
    assert reader._gil_bound_from_above(plan, measured=False) == {
        "speedup_max": None, "worker_speedup_max": None}


def test_a_worker_beyond_the_cores_is_proposed_only_for_a_gain():
    """Workers a core each, 1.4 cores left beside the trainer: the second worker gets 0.4 of
    a core, 40% more batches; with 1.03 cores left it would get 3%, below the 5% that
    counts, and is not proposed."""
    from paddletune.advisors.facts import FreeCores
    from paddletune.advisors.producers import ProducerCost, size_workers
    cost = ProducerCost(wall_s=0.030, cpu_s=0.030, cpu_share=1.0)

    def sizing(room_cores):
        cores = FreeCores(cores=2, free=room_cores, others=0.0, trainer=None, producers=1.0,
                          idle=0.0)
        return size_workers(cores, cost, free_s=0.010, cycle_s=0.040, trainer_bound=None)
    wide = sizing(1.4)
    assert (wide.needed, wide.workers) == (3, 2)
    assert wide.producing == pytest.approx(1.4)
    assert wide.predicted_s == pytest.approx(max(0.030 / 1.4, wide.cpu_bound_s))
    narrow = sizing(1.03)
    assert narrow.workers == 1 and narrow.predicted_s == pytest.approx(0.030)


def loop_profile(tmp_path, steps, per_batch, framework, machine_percent=25.0):
    """`steps` fed by one loader (reader_records(**per_batch)) in a job of `framework`, on 4
    cores the process keeps one of busy (the machine `machine_percent` busy)."""
    from profiles import source_info
    samples = system_samples(cpu_percent=100.0, cpu_total_percent=machine_percent)
    return load(make_profile(tmp_path / f"{framework}.jsonl", steps=steps, env=CORES_4,
                             extra=reader_records(steps, **per_batch) + samples,
                             source=source_info(framework)))


def test_a_torch_loop_making_its_batches_pays_the_workers_transfer(tmp_path):
    """PyTorch passes each batch between processes through shared memory by file
    descriptor: moving the loop's own production into workers adds the trainer's taking
    (to the step without data) and a worker's sending (to its batch), per batch."""
    from paddletune.advisors.producers import WORKER_TRANSFER_S
    steps = step_records(wall_s=0.012, gap_s=0.030)
    per_batch = {"wait_s": 0.029, "empty_ratio": 0.9, "produce_s": 0.041, "cpu_s": 0.037,
                 "fill": 0, "workers": (-1,), "config": {"num_workers": 0}}
    fluid, torch = (loop_profile(tmp_path, steps, per_batch, name)
                    for name in ("fluid", "torch"))
    plain = only(advise(fluid, READER_RULES), "reader-starved")
    moved = only(advise(torch, READER_RULES), "reader-starved")
    taking, sending = WORKER_TRANSFER_S["torch"]
    assert moved.figures["transfer_s_per_batch"] == (taking, sending)
    assert plain.figures["transfer_s_per_batch"] == (0.0, 0.0)
    assert moved.figures["consumer_s_per_step"] == pytest.approx(
        plain.figures["consumer_s_per_step"] + taking)
    # the evidence says what the step without data holds beside the step's own parts,
    # and the ceiling that the step with workers gives is said to be with workers
    own_ms, with_ms = (a.figures["consumer_s_per_step"] * 1e3 for a in (plain, moved))
    assert (f"compute {own_ms:.2f} ms/step (cycle - wait), {with_ms:.2f} ms with workers "
            f"({taking * 1e3:.2f} ms per batch to take it from one)") in moved.evidence, \
        moved.evidence
    assert f"compute {own_ms:.2f} ms/step (cycle - wait);" in plain.evidence, plain.evidence
    assert "ceiling with workers (each batch taken from one)" in moved.expected_gain
    assert "ceiling with workers" not in plain.expected_gain
    # the cores bound both: the CPU per step grows by what both sides pay
    assert moved.figures["predicted_cycle_s"] == pytest.approx(
        plain.figures["predicted_cycle_s"] + (taking + sending) / (4 * 0.85), rel=1e-6)
    assert moved.expected_speedup < plain.expected_speedup


def test_a_loop_making_its_batches_is_told_to_move_them_even_when_one_worker_keeps_up(tmp_path):
    """num_workers=0 with a producer faster than the step: one worker beside the step keeps
    up, so the change is that worker; the loop itself is not a producer that 'keeps up on
    average' (a change that would leave the loader as it is)."""
    steps = step_records(wall_s=0.012, gap_s=0.008)
    p = profile_with(tmp_path, steps, wait_s=0.008, empty_ratio=1.0, produce_s=0.008,
                     cpu_s=0.007, fill=0, workers=(-1,),
                     config={"producer": "loop", "capacity": 0})
    a = only(advise(p, READER_RULES), "reader-starved")
    assert a.figures["made_in"] == "loop" and a.figures["workers_needed"] == 1
    assert "num_workers=1" in a.change
    assert "keeps up on average" not in a.change


@pytest.mark.parametrize("dataset", ["map", "iterable", None])
def test_the_workers_share_note_only_for_a_dataset_that_is_not_map_style(tmp_path, dataset):
    """A map-style Dataset's indices are split among the workers by the sampler: no note;
    an IterableDataset runs whole in every worker, and a style not recorded (the embedded
    runtime's generators, older profiles) may too: the note how each yields its share."""
    steps = step_records(wall_s=0.012, gap_s=0.030)
    per_batch = {"wait_s": 0.029, "empty_ratio": 0.9, "produce_s": 0.041, "cpu_s": 0.037,
                 "fill": 0, "workers": (-1,),
                 "config": {"num_workers": 0, "producer": "loop", "capacity": 0,
                            "dataset": dataset}}
    profile = loop_profile(tmp_path, steps, per_batch, "torch")
    a = only(advise(profile, READER_RULES), "reader-starved")
    assert a.change.startswith("loader = torch.utils.data.DataLoader(dataset, ")
    assert ("torch.utils.data.get_worker_info()" in a.change) == (dataset != "map"), a.change


def test_a_torch_loop_whose_batches_cost_less_than_a_hand_over_keeps_them(tmp_path):
    """A PyTorch loop making a cheap batch (0.5 ms) in its 2.7 ms step: a worker would hand
    it over for about as much (WORKER_TRANSFER_S), so the advice is to keep the batches in
    the loop and make them cheaper, with no worker count for tune to race; the embedded
    runtime's loop, whose hand-over costs nothing measured, is told to move them."""
    from paddletune.advisors.producers import WORKER_TRANSFER_S
    from paddletune.tune.proposals import _change
    steps = step_records(wall_s=0.0027, gap_s=0.0)
    per_batch = {"wait_s": 0.0005, "empty_ratio": 1.0, "produce_s": 0.0005, "cpu_s": 0.0005,
                 "fill": 0, "workers": (-1,),
                 "config": {"num_workers": 0, "producer": "loop", "capacity": 0}}
    fluid, torch = (loop_profile(tmp_path, steps, per_batch, name)
                    for name in ("fluid", "torch"))
    kept = only(advise(torch, READER_RULES), "reader-starved")
    taking = WORKER_TRANSFER_S["torch"][0]
    assert taking > 0.0005 and kept.figures["keep_in_loop"], kept.figures
    assert kept.change.startswith("# keep making the batches in the loop (num_workers=0)")
    assert "num_workers=1" not in kept.change
    assert kept.expected_gain.startswith(
        f"none from workers: taking each batch from one would cost the loop "
        f"{taking * 1e3:.2f} ms"), kept.expected_gain
    assert kept.severity == "low" and _change("reader-starved", kept.figures) == {}
    moved = only(advise(fluid, READER_RULES), "reader-starved")
    assert not moved.figures["keep_in_loop"] and "num_workers=1" in moved.change
    assert _change("reader-starved", moved.figures)["num_workers"] == 1


def test_a_hand_over_dearer_than_the_wait_keeps_the_batches_in_a_busy_machines_loop(tmp_path):
    """The same cheap batches on a machine other processes keep busy (all 4 cores): the
    cores bound the workers, and taking each batch from one (0.75 ms) would also cost the
    loop more than the 0.5 ms it waits: keep them in the loop (helper-34's s06 was told to
    add a worker its own figures said would make the step slower)."""
    steps = step_records(wall_s=0.0027, gap_s=0.0)
    per_batch = {"wait_s": 0.0005, "empty_ratio": 1.0, "produce_s": 0.0005, "cpu_s": 0.0005,
                 "fill": 0, "workers": (-1,),
                 "config": {"num_workers": 0, "producer": "loop", "capacity": 0}}
    busy = loop_profile(tmp_path, steps, per_batch, "torch", machine_percent=100.0)
    kept = only(advise(busy, READER_RULES), "reader-starved")
    assert kept.figures["cpu_bound"] and kept.figures["keep_in_loop"], kept.figures
    assert kept.change.startswith("# keep making the batches in the loop (num_workers=0)")
    # a wait the busy machine inflated past the hand-over, for batches of less CPU than it
    # (helper-39's s09b: 0.78 ms waited for 0.47 ms of CPU against a 0.75 ms hand-over)
    inflated = per_batch | {"wait_s": 0.0009, "produce_s": 0.0009, "cpu_s": 0.0005}
    busy = loop_profile(tmp_path, step_records(wall_s=0.0031, gap_s=0.0), inflated, "torch",
                        machine_percent=100.0)
    assert only(advise(busy, READER_RULES), "reader-starved").figures["keep_in_loop"]
    # a batch dearer than its hand-over, on the same busy machine: the cores bound it
    per_batch |= {"wait_s": 0.002, "produce_s": 0.002, "cpu_s": 0.002}
    dear = loop_profile(tmp_path, step_records(wall_s=0.0042, gap_s=0.0), per_batch, "torch",
                        machine_percent=100.0)
    bound = only(advise(dear, READER_RULES), "reader-starved")
    assert bound.figures["cpu_bound"] and not bound.figures["keep_in_loop"], bound.figures


def test_a_loader_that_fed_part_of_the_steps_is_advised_on_those_steps(tmp_path):
    """An epoch on a slower dataset (DataLoader#1: 40 steps of 40 ms, 30 ms of each waiting)
    after one on a fast one (40 of 10 ms): the advice is for DataLoader#1, its workers sized
    on its own steps (10 ms without data), and the run's speedup is what that saves of the
    whole: those steps are 80% of the training time."""
    profile = two_datasets(tmp_path, env=CORES_4, extra=system_samples(
        cpu_percent=100.0, cpu_total_percent=25.0))
    advice = only(advise(profile), "reader-starved")
    f = advice.figures
    assert "DataLoader#1" in advice.evidence
    assert f["cycle_s"] == pytest.approx(0.040)
    assert f["consumer_s_per_step"] == pytest.approx(0.010, rel=0.1)
    share = 40 * 0.040 / (39 * 0.010 + 40 * 0.040)
    assert f["steps_share"] == pytest.approx(share)
    own = f["loader_speedup"]
    assert 2.5 < own <= 4.0 + 1e-9
    assert f["speedup"] == pytest.approx(1 / ((1 - share) + share / own))
    assert advice.expected_gain.startswith(f"up to {f['speedup']:.2f}x steps/s over the run: ")
    assert "(80% of the training time)" in advice.expected_gain


def test_a_pass_inside_the_optimizers_step_counts_its_batches_per_step(tmp_path):
    """An L-BFGS job's closure reads the whole DataLoader inside step(): the intervals have
    no steps of their own, so the loader's batches and waits a step are its steady batches
    and waits over the steady steps, not one batch (helper-33's s03: "waited 0.00 ms per
    step, 51% of its 994.84 ms step; producer 5.08 ms/batch vs compute 994.84 ms/step")."""
    steps = step_records(n_steps=40, wall_s=0.100)
    batches = step_records(n_steps=400, wall_s=0.010, warmup_factor=1.0)
    per_batch = {"wait_s": 0.005, "empty_ratio": 1.0, "produce_s": 0.005, "cpu_s": 0.004,
                 "fill": 0, "workers": (-1,), "config": {"num_workers": 0, "capacity": 0}}
    records = reader_records(batches, **per_batch)
    for row in records:
        if row["what"] == "interval":
            row.update(steps=0, step_wait_s=0.0, programs={})
    profile = load(make_profile(tmp_path / "p.jsonl", steps=steps, env=CORES_4,
                                extra=records + system_samples(cpu_percent=100.0,
                                                               cpu_total_percent=25.0)))
    s, f = profile.summary, profile.summary.main_loader
    # (the summary's, from the intervals' rates times the cycle: every rule reads them)
    assert f.consumer.batches_per_step == pytest.approx(10, rel=0.05)
    assert f.wait.per_step_s == pytest.approx(0.005 * f.consumer.batches_per_step)
    a = only(advise(profile, READER_RULES), "reader-starved")
    per_step = a.figures["batches_per_step"]
    assert per_step == pytest.approx(10, rel=0.05)  # (10 batches of 10 ms a 100 ms step)
    assert a.figures["wait_per_step_s"] == pytest.approx(0.005 * per_step)
    assert a.figures["producer_s_per_step"] == pytest.approx(0.005 * per_step)
    assert f"for a step's {per_step:.3g} batches" in a.evidence
    assert f.batches / s.steady_steps < 0.8 * per_step  # (its intervals miss some steps)
