"""paddletune.profile.memory_model on hand-made traces and points: the GC / inplace replay and
the `fixed + per_sample x batch` fit (the advisors' tests check both against real runs)."""

import pytest

from paddletune.profile.figures import ByCategory, MemoryFigures
from paddletune.profile.memory_figures import feed_model, feed_points
from paddletune.profile.memory_model import HEADROOM, MemoryModel, fit, fixed_bytes, simulate
from paddletune.profile.records import MemoryStep, MemoryTrace
from paddletune.profile.schema import decode

MB = 1 << 20


def chain_trace(gc, inplace):
    """x (fed, 1 MB) -> a = scale(x) -> b = relu(a) -> c = relu(b) -> loss = mean(c), as the
    executor would trace it with these settings. relu may write into its input."""
    live = {"x": MB}  # the fed input is not a temporary
    ops, frees_at = [], {1: ["a"], 2: ["b"], 3: ["c"]}
    for index, (typ, out, src) in enumerate([("scale", "a", "x"), ("relu", "b", "a"),
                                             ("relu", "c", "b"), ("mean", "loss", "c")]):
        before = sum(live.values())
        granted = inplace and typ == "relu"
        size = 64 if out == "loss" else MB
        peak = before + (0 if granted else size)
        if granted:
            live[out] = live.pop(src)
        else:
            live[out] = size
        frees = frees_at.get(index, []) if gc else []
        for name in frees:
            live.pop(name, None)
        ops.append({"index": index, "type": typ, "tag": "activations", "before": before,
                    "peak": peak, "after": sum(live.values()),
                    "outputs": {out: 0 if granted else size}, "frees": frees,
                    "inplace": [out] if granted else []})
    return decode(MemoryTrace, {
        "t_s": 0.0, "program": 1, "gc": gc, "inplace": inplace, "step": 1, "batch_size": 8,
        "ops": ops, "last_value_use": {"a": 1, "b": 2, "c": 3, "loss": 3},
        "inplace_candidates": {"1": [["b", "a"]], "2": [["c", "b"]]}})


SETTINGS = [(False, False), (True, False), (True, True), (False, True)]


@pytest.mark.parametrize("measured", SETTINGS)
@pytest.mark.parametrize("wanted", SETTINGS)
def test_replay_of_any_setting_matches_tracing_that_setting(measured, wanted):
    truth = max(op.peak for op in chain_trace(*wanted).ops)
    assert simulate(chain_trace(*measured), *wanted)["step_peak"] == truth


def test_replay_figures_by_phase():
    out = simulate(chain_trace(False, False), True, True)
    assert out["step_peak"] == 2 * MB + 64 and out["phase_peaks"] == {"activations": 2 * MB + 64}
    assert out["peak_op"] == {"index": 3, "type": "mean"}
    assert out["largest_live"] == [["c", MB], ["loss", 64]]
    assert simulate(chain_trace(False, False), False, False)["step_peak"] == 4 * MB + 64


def test_fit_through_growing_points_ignores_the_flat_ones():
    points = [(16, 10 * MB), (32, 10 * MB), (256, 12 * MB), (512, 16 * MB), (1024, 24 * MB)]
    model = fit(points, fixed_hint=5 * MB)
    assert model.how == "fit" and model.floor == 10 * MB
    assert model.per_unit == pytest.approx(MB / 64)
    assert model.fixed == pytest.approx(8 * MB)
    assert model.peak(16) == 10 * MB and model.peak(2048) == pytest.approx(40 * MB)
    assert model.error() == pytest.approx(0.0, abs=1e-9)
    # 90% of 100 MB = 90 MB: (90 - 8) MB / (1/64 MB) samples
    assert abs(model.largest(100 * MB) - (100 * MB * (1 - HEADROOM) - 8 * MB) / (MB / 64)) <= 1


def test_one_point_uses_the_fixed_hint_and_is_conservative_when_flat():
    model = fit([(64, 20 * MB)], fixed_hint=12 * MB)
    assert model.how == "one point" and model.per_unit == pytest.approx(8 * MB / 64)
    flat = fit([(16, 10 * MB), (32, 10 * MB)], fixed_hint=8 * MB)  # slope from batch 32
    assert flat.how == "one point" and flat.per_unit == pytest.approx(2 * MB / 32)
    assert fit([(64, 20 * MB)]) is None  # no fixed part known
    assert fit([(64, 10 * MB)], fixed_hint=12 * MB) is None  # peak below the fixed part
    assert fit([]) is None


def test_out_of_memory_raises_the_slope_and_nothing_fits_below_the_fixed_part():
    model = MemoryModel(8 * MB, MB / 64, "sample", ((256, 12 * MB),), "one point")
    raised = model.at_least(1024, 40 * MB)
    assert raised.peak(1024) == pytest.approx(40 * MB) and "raised" in raised.how
    assert model.at_least(64, 9 * MB) is model
    assert model.largest(8 * MB) is None


def test_fixed_bytes_counts_parameter_gradients_once_more():
    figures = MemoryFigures(by_category_at_peak=ByCategory(parameters=100, optimizer_state=50))
    assert fixed_bytes(figures) == 250
    assert fixed_bytes(MemoryFigures()) is None


def _memory_step(feed_bytes, step_peak):
    return MemoryStep(0.0, 1, 0, 0, 0, step_peak, feed_bytes=feed_bytes or 0)


def test_feed_points_keep_the_highest_peak_per_size_and_thin_evenly():
    steps = [_memory_step(b, p) for b, p in [(10, 5), (10, 7), (20, 9), (None, 3), (30, 11)]]
    assert feed_points(steps) == ((10, 7), (20, 9), (30, 11))
    many = [_memory_step(i, i) for i in range(1, 201)]
    thinned = feed_points(many, most=5)
    assert len(thinned) == 5 and thinned[0] == (1, 1) and thinned[-1] == (200, 200)


def test_summary_feed_model_only_when_bytes_fed_vary_more_than_the_batch():
    m = MemoryFigures(by_category_at_peak=ByCategory(parameters=MB),
                      batch_points=((32, 10 * MB),),
                      feed_points=((1000, 4 * MB), (2000, 5 * MB), (4000, 7 * MB)))
    f = feed_model(m)
    assert f.unit == "feed byte" and f.how == "fit"
    assert f.per_unit_bytes == pytest.approx(MB / 1000)
    assert feed_model(MemoryFigures(by_category_at_peak=m.by_category_at_peak,
                                    batch_points=m.batch_points,
                                    feed_points=((1000, 4 * MB),))) is None


def test_one_step_model_scales_only_what_grows_with_the_batch():
    """A batch-64 step peaking in the update (parameters 2 MiB, state 2 MiB, their gradients
    2 MiB, update temporaries 1.5 MiB): only the activations (forward 4.5 MiB: 0.5 above the
    persistables) and their gradients scale; the runtime's OOM estimate uses the same
    formula."""
    from paddletune.profile.figures import PhasePeaks
    from paddletune.profile.memory_model import batch_fit, one_step_per_sample
    from runtime.exec_memory import _one_step_per_sample

    m = MemoryFigures(by_category_at_peak=ByCategory(parameters=2 * MB, optimizer_state=2 * MB),
                      phase_peaks=PhasePeaks(4.5 * MB, 6.2 * MB, 7.5 * MB),
                      batch_points=((64, 7.5 * MB),), capacity_bytes=64 * MB)
    model = batch_fit(m)
    assert model.how == "one point" and model.fixed == 4 * MB
    assert model.per_unit == pytest.approx(1.5 * 0.5 * MB / 64)  # not (7.5 - 6) MiB / 64
    assert model.peak(64) == 7.5 * MB  # the measured peak stays the floor
    args = (64, 4.5 * MB, 6.2 * MB, 4 * MB, 2 * MB)
    assert _one_step_per_sample(*args) == one_step_per_sample(*args)
    assert one_step_per_sample(64, 4.5 * MB, None, 4 * MB, 2 * MB) == 0.5 * MB / 64  # eval
