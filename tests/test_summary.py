"""Summary figures: warm-up detection, distribution, breakdown, throughput, verdict classes,
op totals."""

import pytest

from paddletune.profile import summarize as S
from paddletune.profile.figures import GpuFigures, SampleStats, SystemFigures
from paddletune.profile import load
from profiles import make_profile, ops_records, step_records


def test_warmup_detection():
    assert S.detect_warmup([]) == 0
    assert S.detect_warmup([5.0]) == 1
    assert S.detect_warmup([9.0, 1.0, 1.0, 1.0]) == 1  # the compile step only
    assert S.detect_warmup([9.0, 4.0, 2.0, 1.0, 1.0, 1.0, 1.0, 1.0]) == 3
    assert S.detect_warmup([9.0, 1.4, 1.0, 1.0]) == 1  # within 1.5x: settled
    assert S.detect_warmup([10.0] * 3 + [1.0] * 3) == 3  # never more than half


def test_distribution_matches_numpy():
    np = pytest.importorskip("numpy")
    values = [0.3, 0.1, 0.7, 0.2, 0.9, 0.4]
    d = S.distribution(values)
    assert d.p50 == pytest.approx(np.percentile(values, 50))
    assert d.p90 == pytest.approx(np.percentile(values, 90))
    assert d.p99 == pytest.approx(np.percentile(values, 99))
    assert d.cv == pytest.approx(np.std(values) / np.mean(values))
    assert (d.min, d.max, d.n) == (0.1, 0.9, 6)


@pytest.mark.parametrize("gap_s, kind", [(0.0, "compute-bound"), (0.001, "moderately-input-bound"),
                                         (0.004, "highly-input-bound")])
def test_verdict_thresholds(tmp_path, gap_s, kind):
    # step wall 10 ms with 0.2 ms feed: input share = (gap + 0.2 ms) / (10 ms + gap)
    p = load(make_profile(tmp_path / "p.jsonl", steps=step_records(gap_s=gap_s, feed_s=0.0002)))
    s = p.summary
    assert s.verdict.kind == kind
    assert s.input_share == pytest.approx((gap_s + 0.0002) / (0.010 + gap_s))
    assert f"{s.input_share:.1%}" in s.verdict.text


def test_too_few_steps_and_no_steps(tmp_path):
    few = load(make_profile(tmp_path / "a.jsonl", steps=step_records(n_steps=4)))
    assert few.summary.verdict.kind == "too-few-steps"
    assert "3 steady-state" in few.summary.verdict.text
    none = load(make_profile(tmp_path / "b.jsonl", steps=step_records(n_steps=0)))
    assert none.summary.n_steps == 0
    assert "no training steps observed" in none.summary.verdict.text
    assert none.summary.step_s is None


def test_breakdown_and_throughput(tmp_path):
    p = load(make_profile(tmp_path / "p.jsonl",
                          steps=step_records(n_steps=21, gap_s=0.002, batch_size=32)))
    s = p.summary
    assert (s.warmup_steps, s.steady_steps) == (1, 20)
    assert s.breakdown_s.outside_s == pytest.approx(0.002)
    assert s.breakdown_s.compute_s == pytest.approx(0.010 - 0.0005 - 0.0002)
    assert sum(s.shares.part(p) for p in s.breakdown_s.PARTS) == pytest.approx(1.0)
    assert s.throughput.steps_per_s == pytest.approx(1 / 0.012)
    assert s.throughput.samples_per_s == pytest.approx(32 / 0.012)


def test_explicit_warmup_option_wins(tmp_path):
    p = load(make_profile(tmp_path / "p.jsonl", options={"warmup": 5}))
    assert p.summary.warmup_steps == 5 and p.summary.steady_steps == 35


def test_main_program_is_the_one_that_ran_most(tmp_path):
    steps = step_records(n_steps=30) + step_records(n_steps=3, program=7)[1:]
    p = load(make_profile(tmp_path / "p.jsonl", steps=steps))
    assert p.summary.main_program == 1 and p.summary.n_steps == 30


def test_op_totals_over_steady_steps(tmp_path):
    extra = ops_records(range(10), [("mul", 0.003), ("relu", 0.001), ("mul", 0.001)])
    p = load(make_profile(tmp_path / "p.jsonl", steps=step_records(n_steps=10), extra=extra))
    ops = p.summary.ops
    assert ops.steps == 9  # step 0 is warm-up
    assert [r.type for r in ops.by_type] == ["mul", "relu"]
    assert ops.by_type[0].share == pytest.approx(0.8)
    assert ops.by_type[0].count == 18
    top = ops.top[0]
    assert (top.index, top.type, top.count) == (0, "mul", 9)
    assert (top.total_s, top.mean_s, top.share) == pytest.approx((0.027, 0.003, 0.6))


def test_samples_aggregate_numbers_only(tmp_path):
    extra = [{"type": "sample", "probe": "system", "t": t, "rss_bytes": r, "load1": None,
              "per_core_percent": [1, 2], "steal_percent": float("nan")}
             for t, r in [(0.1, 100), (0.2, 300)]]
    s = load(make_profile(tmp_path / "p.jsonl", extra=extra)).summary.system
    assert s == SystemFigures(rss_bytes=SampleStats(mean=200, min=100, max=300, last=300, n=2))


def test_gpu_samples_are_summarised_per_gpu(tmp_path):
    extra = [{"type": "sample", "probe": "nvml", "t": 0.1 * i, "gpu": g, "util_percent": u}
             for i, (g, u) in enumerate([(0, 10), (1, 90), (0, 30), (1, 70)])]
    s = load(make_profile(tmp_path / "p.jsonl", extra=extra)).summary
    assert s.system is None
    assert s.gpus == (GpuFigures(0, util_percent=SampleStats(20, 10, 30, 30, 2)),
                      GpuFigures(1, util_percent=SampleStats(80, 70, 90, 70, 2)))



def test_gpu_throttle_reasons_are_summarised_as_shares(tmp_path):
    extra = [{"type": "sample", "probe": "nvml", "t": 0.1 * i, "gpu": 0, "util_percent": 50,
              "throttle": reasons}
             for i, reasons in enumerate([["hw_thermal"], ["hw_thermal", "sw_power_cap"], [],
                                          None])]
    s = load(make_profile(tmp_path / "p.jsonl", extra=extra)).summary
    assert s.gpus[0].throttle == {"hw_thermal": 2 / 3, "sw_power_cap": 1 / 3}

def test_steps_with_non_finite_times_are_skipped(tmp_path):
    """A step whose run time is NaN is left out (with a warning naming it); an infinite gap
    before a step reads as not measured: the step counts, with its run time as its cycle."""
    steps = step_records(n_steps=20, feed_s=0.0002)
    steps[5]["wall_s"] = float("nan")
    steps[6]["gap_s"] = float("inf")
    p = load(make_profile(tmp_path / "p.jsonl", steps=steps))
    s = p.summary
    assert s.n_steps == 19 and s.verdict.kind == "compute-bound"
    assert s.cycle_s.mean == pytest.approx(0.010)
    assert len(p.warnings) == 1 and "skipped 1 record of kind 'step'" in p.warnings[0]
    assert "field wall_s: expected a finite number" in p.warnings[0]


def test_duration_of_a_killed_job_reaches_its_last_record(tmp_path):
    extra = [{"type": "sample", "probe": "system", "t": 9.5, "rss_bytes": 1}]
    p = load(make_profile(tmp_path / "p.jsonl", extra=extra, exit_reason=None, summary=False))
    assert p.summary.duration_s == 9.5


def gc_pause(t, pause_s, generation=2):
    return {"type": "event", "kind": "gc_pause", "t": t, "pause_s": pause_s,
            "generation": generation, "collected": 0}


def test_garbage_collection_pauses_in_the_steady_steps(tmp_path):
    """Pauses of the training thread's collector (5 ms or more): those inside the steady
    steps' loop iterations against their time; one during the warm-up step and one after the
    last step count in the run's only. The report says them below the throughput."""
    steps = step_records(n_steps=40, wall_s=0.010)  # steps from 0.1 s, the first 5x slower
    pauses = [gc_pause(0.11, 0.030), gc_pause(0.2, 0.008, generation=1), gc_pause(0.3, 0.02),
              gc_pause(0.6, 0.1)]
    profile = load(make_profile(tmp_path / "p.jsonl", steps=steps, extra=pauses))
    g = profile.summary.gc
    assert (g.pauses, g.full, g.run_pauses, g.more) == (2, 1, 4, 0)
    assert g.pause_s == pytest.approx(0.028) and g.run_pause_s == pytest.approx(0.158)
    assert g.share == pytest.approx(0.028 / (39 * 0.010))
    assert g.max_s == pytest.approx(0.02) and g.max_t_s == pytest.approx(0.3)
    from io import StringIO
    from rich.console import Console
    from paddletune.render.report import render_report
    console = Console(file=StringIO(), width=300)
    render_report(profile, console)
    out = console.file.getvalue()
    assert ("Garbage collection: Python's collector paused the training thread 2 times for 5 "
            "ms or more, 1 of them full: 28 ms, 7.2% of the steady steps' time, the longest "
            "20.00 ms at 300 ms (counted in the steps' time).") in out
    assert "gc_pause at" not in out  # (not listed again among the events)
    # one 7 ms pause in a long run: 0.1% of the steps, no line
    quiet = load(make_profile(tmp_path / "r.jsonl", steps=step_records(n_steps=600),
                              extra=[gc_pause(0.3, 0.007)]))
    console = Console(file=StringIO(), width=300)
    render_report(quiet, console)
    assert quiet.summary.gc.pauses == 1 and "Garbage collection" not in console.file.getvalue()
    assert load(make_profile(tmp_path / "q.jsonl", steps=steps)).summary.gc is None


def gc_heap(t, objects, full):
    return {"type": "event", "kind": "gc_heap", "t": t, "objects": objects, "read_s": 0.05,
            "full": full}


def test_the_heap_the_loop_starts_with_and_the_latest_count(tmp_path):
    """The first step's count is the loop's heap, whatever collections ran before it (an
    L-BFGS step's closures: its `full` 1); the latest count after a full collection is the
    last; the full collections' time apart."""
    steps = step_records(n_steps=40, wall_s=0.010)
    extra = [gc_pause(0.2, 0.008, generation=1), gc_pause(0.3, 0.02), gc_pause(0.4, 0.03),
             gc_heap(0.12, 400_000, 1), gc_heap(0.31, 450_000, 2), gc_heap(0.41, 500_000, 4)]
    g = load(make_profile(tmp_path / "p.jsonl", steps=steps, extra=extra)).summary.gc
    assert (g.full, g.heap_loop, g.heap_last) == (2, 400_000, 500_000)
    assert g.full_s == pytest.approx(0.05) and g.pause_s == pytest.approx(0.058)
    alone = load(make_profile(tmp_path / "q.jsonl", steps=steps,
                              extra=extra[:3] + extra[3:4])).summary.gc
    assert (alone.heap_loop, alone.heap_last) == (400_000, None)


def test_pauses_past_the_cap_are_counted_in_the_runs(tmp_path):
    steps = step_records(n_steps=40, wall_s=0.010)
    more = {**gc_pause(0.6, 2.5, generation=-1), "more": 300}
    g = load(make_profile(tmp_path / "p.jsonl", steps=steps,
                          extra=[gc_pause(0.3, 0.02), more])).summary.gc
    assert (g.pauses, g.run_pauses, g.more) == (1, 301, 300)
    assert g.run_pause_s == pytest.approx(2.52)
