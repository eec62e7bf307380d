"""Advice #29, worker-hand-over (advisors/handover.py): a PyTorch job whose workers' batches
cost the loop a visible share of its step to take over once made; the tune knob and the
override it is measured through (tune/space.py, tune/proposals.py)."""

import json
import re

import pytest

from paddletune.advisors import advise
from paddletune.advisors.handover import FILE_SYSTEM_SHARE, worker_hand_over
from paddletune.advisors.prefetch import prefetch_depth
from paddletune.profile import load
from paddletune.tune import space as sp
from paddletune.tune.proposals import _change
from profiles import make_profile, reader_records, source_info, step_records, system_samples

pytest.importorskip("torch")  # (the PyTorch source's declaration: its knobs)

CORES_2 = {"cpu": {"model": "Test CPU", "logical_cores": 2, "physical_cores": 2,
                   "usable_cores": 2}}
STEP_S, WAIT_S, HANDOVER_S, MAKE_S = 0.006, 0.0028, 0.0024, 0.0012


def job(tmp_path, framework="torch", handover_s=HANDOVER_S, strategy="file_descriptor",
        make_s=MAKE_S):
    """One worker that keeps the queue filled; each 6 ms step waits 2.8 ms for its batch,
    `handover_s` of it taking the batch over from the worker."""
    steps = step_records(wall_s=STEP_S, gap_s=0.0)
    config = {"num_workers": 1, "producer": "workers", "capacity": 2, "prefetch_factor": 2,
              "persistent_workers": False, "sharing_strategy": strategy}
    per_batch = {"wait_s": WAIT_S, "handover_s": handover_s, "empty_ratio": 0.0,
                 "produce_s": make_s, "cpu_s": make_s * 0.9, "fill": 1, "workers": (0,),
                 "config": config}
    extra = reader_records(steps, **per_batch) + system_samples(cpu_percent=100.0,
                                                                cpu_total_percent=60.0)
    return load(make_profile(tmp_path / f"{framework}.jsonl", steps=steps, env=CORES_2,
                             extra=extra, source=source_info(framework)))


def test_file_descriptor_hand_over_is_advised_file_system(tmp_path):
    profile = job(tmp_path)
    f = profile.summary.main_loader
    assert f.handover_s_per_pop == pytest.approx(HANDOVER_S)
    a = worker_hand_over(profile)
    assert a is not None and a.id == "worker-hand-over" and a.source == 29
    cycle = profile.summary.cycle_s.mean
    share = HANDOVER_S / cycle
    assert a.figures["share"] == pytest.approx(share) and a.severity == "medium"
    assert a.figures["suggested_strategy"] == "file_system"
    predicted = cycle - (1 - FILE_SYSTEM_SHARE) * HANDOVER_S
    assert a.expected_speedup == pytest.approx(cycle / predicted)
    lines = a.change.splitlines()
    assert lines[:2] == ["import torch.multiprocessing",
                         "torch.multiprocessing.set_sharing_strategy('file_system')  # at the "
                         "start, before the DataLoader makes its workers"]
    # a worker makes a batch in less than its hand-over: the loop making them is named too
    assert "num_workers=0" in lines[2] and a.figures["in_loop_cheaper"]
    assert "file_descriptor sharing" in a.evidence
    assert _change("worker-hand-over", a.figures) == {"sharing_strategy": "file_system"}


def test_the_hand_over_is_not_a_wait_for_a_batch_not_ready(tmp_path):
    """The waits less their hand-over are short: prefetch_factor is not advised for them
    (before the hand-over was measured, every such pop counted as a batch not ready)."""
    profile = job(tmp_path)
    assert profile.summary.main_loader.wait.waited_pops == 0
    assert prefetch_depth(profile) is None
    assert "worker-hand-over" in [a.id for a in advise(profile)]


def test_file_system_already_leaves_the_loop_making_its_batches(tmp_path):
    profile = job(tmp_path, strategy="file_system")
    a = worker_hand_over(profile)
    assert a.figures["suggested_strategy"] is None and a.figures["suggested_workers"] == 0
    cycle = profile.summary.cycle_s.mean
    assert a.expected_speedup == pytest.approx(cycle / (cycle - WAIT_S + MAKE_S))
    assert a.change.splitlines()[0].endswith("num_workers=0)")
    assert _change("worker-hand-over", a.figures) == {"num_workers": 0}
    # a worker slower than the hand-over: nothing to change
    assert worker_hand_over(job(tmp_path, strategy="file_system", make_s=0.004)) is None


def test_a_small_hand_over_is_not_advised(tmp_path):
    assert worker_hand_over(job(tmp_path, handover_s=0.0002)) is None  # 3% of the step
    assert worker_hand_over(job(tmp_path, handover_s=0.0)) is None


def test_the_sharing_strategy_is_a_knob_of_a_torch_job_with_workers(tmp_path):
    profile = job(tmp_path)
    space = sp.build_space(profile, keep_batch_size=True)
    knob = space.knobs["sharing_strategy"]
    assert (knob.section, knob.values, knob.current) == (
        "multiprocessing", ("file_descriptor", "file_system"), "file_descriptor")
    setting = {"sharing_strategy": "file_system"}
    assert json.loads(sp.to_env(setting, space)["PADDLETUNE_OVERRIDES"]) == {
        "multiprocessing": {"sharing_strategy": "file_system"}}
    assert sp.code_lines(setting, space) == [
        "torch.multiprocessing.set_sharing_strategy('file_system')  # before the DataLoader "
        "makes its workers"]


def test_the_report_shows_the_hand_over_beside_the_waits(tmp_path):
    from rich.console import Console
    from paddletune.render.report import render_report
    console = Console(width=100, record=True, force_terminal=False, color_system=None)
    render_report(job(tmp_path), console)
    text = " ".join(console.export_text().split())
    assert ("hand-over 2.40 ms per batch taking it from a worker process once made (its "
            "tensors' storage, 86% of the mean wait; the percentiles above leave it out)"
            ) in text, text
    p50, p90 = map(float, re.search(r"p50 ([\d.]+) · p90 ([\d.]+)", text).groups())
    assert p50 <= p90 < 0.5  # ms: the waits less their hand-over (0.4 ms, log-binned)


def test_a_setting_left_without_workers_drops_its_worker_only_knobs(tmp_path):
    """The sharing strategy (and prefetch_factor) change nothing without workers: a setting
    that takes them away keeps neither (a trial of it would measure num_workers=0 alone)."""
    space = sp.build_space(job(tmp_path), keep_batch_size=True)
    assert sp.needs_workers(space.knobs["sharing_strategy"])
    assert sp.needs_workers(space.knobs["prefetch_factor"])
    assert not sp.needs_workers(space.knobs["num_workers"])
    best = sp.merged({}, {"sharing_strategy": "file_system", "prefetch_factor": 4}, space)
    assert sp.merged(best, {"num_workers": 0}, space) == {"num_workers": 0}
    assert sp.merged(best, {"num_workers": 2}, space) == {**best, "num_workers": 2}
    assert sp.code_lines({"num_workers": 0}, space) == [
        "torch.utils.data.DataLoader(dataset, num_workers=0)  # without prefetch_factor and "
        "persistent_workers (they need workers)"]
