"""The range every predicted speedup is stated with (advisors/ranges.py): the model's error at
the card's confidence, widened by how much the run's speed moved (Throughput.spread), or the
bounds a rule set; and the spread itself, measured over consecutive parts of the run."""

import json

import pytest
from profiles import make_profile, step_records
from rich.console import Console

from paddletune.advisors import Advice
from paddletune.advisors.base import post_pass
from paddletune.advisors.ranges import MODEL_ERROR, model_error, range_text, with_range
from paddletune.profile import load
from paddletune.render.advice import advice_json, render_advice


def card(speedup=1.5, confidence="high", expected_range=None, **figures):
    return Advice(id="input-bound", title="t", severity="high", evidence="e", change="c",
                  expected_gain=f"up to {speedup}x", confidence=confidence,
                  expected_speedup=speedup, expected_range=expected_range, figures=figures)


def test_a_point_prediction_gets_the_model_error_around_it():
    a = with_range(card(1.5, "high"), spread=None)
    low, high = a.expected_range
    assert MODEL_ERROR["high"] == 0.3  # bench_advice's largest error at high confidence
    assert low == pytest.approx(1.5 / 1.3) and high == pytest.approx(1.5 / 0.7)
    assert 1.5 / low - 1 == pytest.approx(1 - 1.5 / high)  # |P / M - 1| the same at both ends
    assert a.figures["range"]["basis"] == "model" and a.figures["range"]["run_spread"] is None
    lower = with_range(card(1.5, "low"), spread=None).expected_range
    assert lower[0] < low and lower[1] > high  # less confidence: a wider range


def test_a_run_whose_speed_moved_widens_the_range():
    assert model_error("high", 0.10) == pytest.approx((0.3 ** 2 + 2 * 0.1 ** 2) ** 0.5)
    steady, moving = (with_range(card(2.0), s).expected_range for s in (0.0, 0.10))
    assert moving[0] < steady[0] and moving[1] > steady[1]
    assert model_error("low", 5.0) == 0.8  # capped: the range's low end stays positive


def test_a_rules_own_bounds_are_kept():
    a = with_range(card(1.4, expected_range=(1.4, None)), spread=0.05)
    assert a.expected_range == (1.4, None) and a.figures["range"]["basis"] == "bounds"
    assert range_text(a) == "1.40x steps/s or more (a lower bound; no upper bound measured)"
    b = with_range(card(1.4, expected_range=(1.4, 2.1)), spread=None)
    assert range_text(b).startswith("1.40x-2.10x steps/s")


def test_no_prediction_no_range():
    a = Advice(id="gc-off", title="t", severity="high", evidence="e", change="c",
               expected_gain="the peak drops", confidence="high")
    assert with_range(a, 0.1) is a and range_text(a) is None


def _profile(tmp_path, walls):
    steps = step_records(n_steps=len(walls), wall_s=0.01, warmup=0)
    for row, wall in zip(steps[1:], walls):
        row["wall_s"], row["compute_s"] = wall, wall - row["feed_s"] - row["fetch_s"]
    t = steps[1]["t"]
    for row in steps[1:]:
        row["t"], t = t, t + row["wall_s"]
    return load(make_profile(tmp_path / "p.jsonl", steps=steps))


def test_spread_is_the_parts_mean_step_times_spread(tmp_path):
    even = _profile(tmp_path, [0.010] * 101).summary.throughput
    assert even.steps == 100 and even.spread == pytest.approx(0.0, abs=1e-9)
    # the last fifth of the steady run (the first step is the warm-up) 50% slower: five
    # parts' means 10, 10, 10, 10, 15 ms
    walls = [0.010] * 81 + [0.015] * 20
    moved = _profile(tmp_path, walls).summary.throughput
    walls = walls[1:]
    means = [0.010] * 4 + [0.015]
    mean = sum(walls) / len(walls)
    sd = (sum((m - mean) ** 2 for m in means) / 4) ** 0.5
    assert moved.spread == pytest.approx(sd / mean, rel=0.02)
    assert _profile(tmp_path, [0.010] * 30).summary.throughput.spread is None  # too few


def test_advise_states_the_range_on_the_card_and_in_json(tmp_path):
    profile = _profile(tmp_path, [0.010] * 80 + [0.012] * 20)
    spread = profile.summary.throughput.spread
    [a] = post_pass([card(1.5, "medium")], profile)
    error = model_error("medium", spread)
    assert a.expected_range == pytest.approx((1.5 / (1 + error), 1.5 / (1 - error)))
    row = json.loads(advice_json([a]))[0]
    assert row["expected_range"] == pytest.approx(list(a.expected_range))
    console = Console(width=200, record=True)
    render_advice([a], console)
    text = console.export_text()
    assert f"Range: {a.expected_range[0]:.2f}x-{a.expected_range[1]:.2f}x steps/s" in text
    assert f"this run's speed moved {spread:.1%} between its parts" in text


def test_within_a_range_and_a_lower_bound():
    from paddletune.advisors.ranges import within
    assert within((1.2, 2.0), 1.5) is True and within((1.2, 2.0), 2.1) is False
    assert within((1.63, None), 1.54) is False and within((1.63, None), 9.0) is True
    assert within(None, 1.5) is None and within((1.2, 2.0), None) is None


def memory_card(predicted=15 * 2**20, basis="replay", **figures):
    return Advice(id="gc-off", title="t", severity="high", evidence="e", change="c",
                  expected_gain="step peak 20 MiB -> ~15 MiB", confidence="high",
                  figures={"predicted_peak_bytes": predicted, "peak_basis": basis, **figures})


def test_a_predicted_peak_gets_its_basis_error_around_it():
    from paddletune.advisors.ranges import PEAK_ERROR
    a = with_range(memory_card(), spread=0.2)  # (the run's speed has nothing to do with it)
    low, high = a.expected_peak_range
    assert (low, high) == pytest.approx((15 * 2**20 / 1.1, 15 * 2**20 / 0.9))
    assert a.expected_range is None and a.figures["peak_range"]["basis"] == "replay"
    wide = with_range(memory_card(basis="one point"), None).expected_peak_range
    assert wide[0] < low and wide[1] > high and PEAK_ERROR["one point"] > PEAK_ERROR["replay"]
    # a fitted model that missed its own points by 25%: the range is at least that wide
    missed = with_range(memory_card(basis="fit", model={"max_error": 0.25}), None)
    assert missed.expected_peak_range == pytest.approx((15 * 2**20 / 1.25, 15 * 2**20 / 0.75))


def test_no_predicted_peak_or_no_basis_no_peak_range():
    for a in (memory_card(predicted=None), memory_card(basis=None), card()):
        assert with_range(a, None).expected_peak_range is None


def test_the_card_and_json_state_the_peak_range():
    a = with_range(memory_card(), None)
    row = json.loads(advice_json([a]))[0]
    assert row["expected_peak_range"] == pytest.approx(list(a.expected_peak_range))
    console = Console(width=200, record=True)
    render_advice([a], console)
    text = console.export_text()
    assert "Range: step peak 13.6 MiB-16.7 MiB (a replayed step, within 10%" in text
    # a card with a predicted speedup and a predicted peak states both
    both = with_range(Advice(**{**memory_card().__dict__, "expected_speedup": 1.2}), None)
    console = Console(width=200, record=True)
    render_advice([both], console)
    text = console.export_text()
    assert "steps/s (high-confidence predictions" in text and "Range: step peak 13.6" in text
