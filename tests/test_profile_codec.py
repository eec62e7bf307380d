"""The writer's step encoder (codec.StepCompressor) against the generic one (codec.to_json):
the same object for every kind of value a step holds, its times rounded to the nanosecond and
its sticky fields left out while they repeat."""

import math

import numpy as np

from paddletune.profile import records as r
from paddletune.profile.codec import StepCompressor, StepFiller, from_json, to_json

_SECONDS = ("t_s", "wall_s", "feed_s", "compute_s", "fetch_s", "gap_s", "read_s")


def generic(step: r.Step) -> dict:
    """The step as to_json writes it, its times rounded to the nanosecond."""
    out = to_json(step)
    for name in _SECONDS:
        if out.get(name) is not None:
            out[name] = round(out[name], 9)
    return out


STEPS = [
    r.Step(0.123456789123, 0, 0, 0, 0.0003000000001, 0.0, 0.00025, 0.0, None, 128, 1024, 8,
           0.00001234567891, 2, 17, ("loss",), ("x", "y"), False, "CPUPlace"),
    r.Step(1.5, 3, 1, 7, 0.5, 1e-9, 0.25, 0.125, 0.01, None, 0, 0, 0.0, None),
    r.Step(2.0, 0, 0, 1, float("nan"), 0.0, float("inf"), 0.0, 0.002, 64, 0, 0, 0.0, 0,
           startup=True, place="CUDAPlace(0)", exemplar="slow", slot=3),
    r.Step(np.float64(3.0000000001234), 0, 0, 2, np.float32(0.5), 0.0, 0.25, 0.0,
           np.float64(0.001), np.int64(32), 0, 0, 0, 1, fetch=["loss"], place="CPUPlace"),
]


def test_a_step_is_encoded_as_the_generic_encoder_writes_it():
    for step in STEPS:
        fast = StepCompressor().compress(step)
        assert fast == generic(step), step
        assert list(fast) == list(generic(step))  # (the same key order: the same line)


def test_non_finite_times_are_written_as_null():
    out = StepCompressor().compress(STEPS[2])
    assert out["wall_s"] is None and out["compute_s"] is None
    assert all(not isinstance(v, float) or math.isfinite(v) for v in out.values())


def test_the_sticky_fields_are_left_out_while_they_repeat_and_filled_back_on_load():
    compressor, filler = StepCompressor(), StepFiller()
    first = STEPS[0]
    same = first._replace(step=1, t_s=0.5)
    other_place = first._replace(step=2, t_s=0.75, place="CUDAPlace(0)")
    other_program = first._replace(program=5, step=0)
    lines = [compressor.compress(s) for s in (first, same, other_place, other_program)]
    assert {"n_ops", "fetch", "feed", "place"} <= set(lines[0])
    assert not {"n_ops", "fetch", "feed", "startup", "place"} & set(lines[1])
    assert lines[2]["place"] == "CUDAPlace(0)" and "n_ops" not in lines[2]
    assert {"n_ops", "fetch", "feed", "place"} <= set(lines[3])  # a program's first step
    loaded = [filler.fill(from_json(line)) for line in lines]
    assert [(s.n_ops, s.fetch, s.feed, s.place) for s in loaded] == [
        (17, ("loss",), ("x", "y"), "CPUPlace"), (17, ("loss",), ("x", "y"), "CPUPlace"),
        (17, ("loss",), ("x", "y"), "CUDAPlace(0)"), (17, ("loss",), ("x", "y"), "CPUPlace")]
