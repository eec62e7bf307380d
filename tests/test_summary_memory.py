"""Memory figures of the summary, from hand-built profiles."""

import pytest

from paddletune.profile import load
from paddletune.profile.figures import ByCategory, PhasePeaks
from paddletune.profile.memory_figures import batch_points
from paddletune.profile.records import MemoryStep
from profiles import make_profile, memory_records, step_records

MB = 1 << 20


def summary(tmp_path, steps=None, **kw):
    steps = steps or step_records()
    path = make_profile(tmp_path / "p.jsonl", steps=steps, extra=memory_records(steps, **kw))
    return load(path).summary.memory


def test_peaks_capacity_categories_and_phases(tmp_path):
    m = summary(tmp_path, step_peak=8 * MB, capacity=64 * MB, system_allocs=2,
                system_alloc_s=0.001)
    assert m.capacity_bytes == 64 * MB and m.strategy == "auto_growth"
    assert m.peak_allocated_bytes == 8 * MB and m.peak_reserved_bytes == 16 * MB
    assert m.peak_allocated_share == pytest.approx(0.125)
    assert m.peak_reserved_share == pytest.approx(0.25)
    assert m.reserved_per_allocated == pytest.approx(2.0)
    assert m.by_category_at_peak == ByCategory(parameters=MB, optimizer_state=MB,
                                               activations=2 * MB, gradients=MB,
                                               optimizer=3 * MB, reader=0, other=0)
    assert m.phase_peaks == PhasePeaks(forward_bytes=5 * MB, backward_bytes=7 * MB,
                                       optimizer_bytes=8 * MB)
    assert m.scope == "steady" and m.steps == 39  # the warm-up step left out
    assert m.system_allocs_per_step == 2 and m.requests_per_step == 80
    assert m.system_alloc_s_per_step == pytest.approx(0.001)
    assert m.system_alloc_share == pytest.approx(0.1)  # of a 10 ms cycle
    assert m.fragmentation == 0.25 and m.cached_free_bytes == MB
    assert m.gc is True and m.inplace is False
    assert m.oom is None and m.batch_points == ((64, 8 * MB),)


def test_oom_figures(tmp_path):
    oom = {"place": "CPUPlace", "requested": 4 * MB, "allocated": 60 * MB, "reserved": 62 * MB,
           "capacity": 64 * MB, "peak": 60 * MB, "free": 2 * MB, "op_type": "mul",
           "op_index": 7, "batch_size": 64, "fit_batch_size": 48, "by_tag": {}, "largest": []}
    m = summary(tmp_path, oom=oom)
    assert m.ooms == 1
    assert m.oom.op_type == "mul" and m.oom.fit_batch_size == 48
    assert m.oom.requested_bytes == 4 * MB


def test_no_memory_records_gives_none(tmp_path):
    assert load(make_profile(tmp_path / "p.jsonl")).summary.memory is None


def test_batch_points_keep_the_highest_peak_per_batch_size():
    rows = [MemoryStep(0.0, 1, 0, 0, 0, peak, batch_size=batch)
            for batch, peak in [(32, 5), (64, 9), (32, 6), (None, 1)]]
    assert batch_points(rows) == ((32, 6), (64, 9))
