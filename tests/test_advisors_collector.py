"""gc-full-collections (docs/advice.md #32): full garbage collections inside the loop."""

import pytest

from paddletune.advisors import advise, collector
from paddletune.profile import load
from profiles import make_profile, step_records
from test_advisors import ids, only
from test_summary import gc_heap, gc_pause

RULES = [collector.gc_full_collections]


def gc_profile(tmp_path, pauses, heaps=(), name="p.jsonl"):
    """40 steps of 10 ms from 0.1 s (the first 5x slower), with these collections."""
    steps = step_records(n_steps=40, wall_s=0.010)
    return load(make_profile(tmp_path / name, steps=steps,
                             extra=[gc_pause(t, s, g) for t, s, g in pauses] + list(heaps)))


def test_full_collections_of_the_setups_heap_are_frozen_out(tmp_path):
    """Two full collections, 40 ms of the 390 ms of steady steps (10.3%): 400,000 of the
    500,000 objects scanned at the latest count were there at the first step's end, so
    freezing there saves 80% of that time."""
    profile = gc_profile(tmp_path, [(0.2, 0.008, 1), (0.3, 0.02, 2), (0.4, 0.02, 2)],
                         [gc_heap(0.12, 400_000, 0), gc_heap(0.41, 500_000, 2)])
    a = only(advise(profile, RULES), "gc-full-collections")
    share = 0.040 / 0.390
    assert a.figures["full_share"] == pytest.approx(share)
    assert a.figures["setup_share"] == pytest.approx(0.8)
    assert a.expected_speedup == pytest.approx(1 / (1 - share * 0.8))
    assert (a.severity, a.confidence, a.source) == ("medium", "medium", 32)
    assert a.title == "Full garbage collections take 10.3% of the steps"
    assert ("2 full collections of Python's garbage collector ran inside the steady steps: "
            "0.04 s, 10.3% of their time; the longest 20.00 ms.") in a.evidence
    assert "500,000 at the latest count, 80% of them (400,000) there already" in a.evidence
    assert a.change.splitlines()[-2:] == [
        "gc.collect()  # free the setup's garbage first: what is frozen is never freed",
        "gc.freeze()  # what exists now is never scanned again"]
    compile(a.change, "change", "exec")
    assert a.expected_gain.startswith(
        f"up to {a.expected_speedup:.2f}x steps/s: the 10.3% of the steps' time in full "
        f"collections, less the 20% of their scans the loop's own objects make; ")


def test_without_heap_counts_only_the_upper_bound(tmp_path):
    profile = gc_profile(tmp_path, [(0.3, 0.02, 2), (0.4, 0.02, 2)])
    a = only(advise(profile, RULES), "gc-full-collections")
    assert a.expected_speedup is None and a.figures["setup_share"] is None
    assert a.expected_gain.startswith(f"up to {1 / (1 - 0.04 / 0.39):.2f}x steps/s if the full "
                                      f"collections' time went")


def test_a_heap_that_shrank_since_the_loop_began_counts_whole(tmp_path):
    profile = gc_profile(tmp_path, [(0.3, 0.02, 2), (0.4, 0.02, 2)],
                         [gc_heap(0.12, 600_000, 0), gc_heap(0.41, 500_000, 2)])
    a = only(advise(profile, RULES), "gc-full-collections")
    assert a.figures["setup_share"] == 1.0
    assert "full collections, whose scans were of objects there before the loop;" in \
        a.expected_gain


@pytest.mark.parametrize("pauses", [
    [(0.3, 0.1, 2)],  # one full collection: maybe a one-off
    [(0.3, 0.003, 2), (0.4, 0.003, 2), (0.5, 0.1, 1)],  # full ones 1.5% (a younger one long)
    [(0.11, 0.1, 2), (0.12, 0.1, 2), (0.3, 0.006, 2)],  # in the warm-up step, and one after
])
def test_silent_on_a_one_off_little_or_outside_the_steady_steps(tmp_path, pauses):
    assert ids(advise(gc_profile(tmp_path, pauses), RULES)) == []
