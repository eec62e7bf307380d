"""The writer's step encoder (codec.StepCompressor) against the generic one (codec.to_json):
the same line for every kind of value a step holds (the usual step's text: the same keys,
order, types and numbers), its times rounded to the nanosecond and its sticky fields left out
while they repeat; a step that no line can hold (a non-finite
time the schema takes no null for) is left out, and the steps after it load right."""

import json
import random
import re

import numpy as np
import pytest

from paddletune.profile import header_record, load
from paddletune.profile import records as r
from paddletune.profile.codec import (StepCompressor, StepFiller, from_json, to_json,
                                     unwritable)
from paddletune.profile.writer import ProfileWriter

_SECONDS = ("t_s", "wall_s", "feed_s", "compute_s", "fetch_s", "gap_s", "read_s",
            "compute_wait_s", "compute_queued_s")


def generic(step: r.Step) -> dict:
    """The step as to_json writes it, its times rounded to the nanosecond."""
    out = to_json(step)
    for name in _SECONDS:
        if out.get(name) is not None:
            out[name] = round(out[name], 9)
    return out


def line(obj) -> str:
    return json.dumps(obj, separators=(",", ":"))  # (raises on a NumPy scalar left in)


STEPS = [
    r.Step(0.123456789123, 0, 0, 0, 0.0003000000001, 0.0, 0.00025, 0.0, None, 128, 1024, 8,
           0.00001234567891, 2, 17, ("loss",), ("x", "y"), False, "CPUPlace"),
    r.Step(1.5, 3, 1, 7, 0.5, 1e-9, 0.25, 0.125, 0.01, None, 0, 0, 0.0, None),
    r.Step(2.0, 0, 0, 1, 0.001, 0.0, 0.0005, 0.0, float("nan"), 64, 0, 0, -0.0, 0,
           startup=True, place="CUDAPlace(0)", exemplar="slow", slot=3),
    r.Step(2.5, 0, 0, 3, 0.002, 0.0, 0.0015, 0.0, 0.001, 64, 0, 0, 0.0, 0,
           place="CPUPlace", compute_wait_s=0.000412345678912, compute_queued_s=1.5e-5,
           samples=256),
    r.Step(np.float64(3.0000000001234), np.int64(0), 0, 2, np.float32(0.5), 0.0, 0.25, 0.0,
           np.float64(0.001), np.int64(32), np.int64(0), 0, np.float32(0.0), 1,
           fetch=["loss"], startup=np.bool_(False), place="CPUPlace"),
]


def test_a_step_is_written_as_the_generic_encoder_writes_it():
    for step in STEPS:
        fast = StepCompressor().compress(step)
        assert line(fast) == line(generic(step)), step  # same keys, order, values, types


def test_a_step_with_a_non_finite_time_is_left_out_and_the_next_keeps_its_fields(tmp_path):
    good = STEPS[0]
    bad = good._replace(step=1, t_s=0.5, wall_s=float("nan"), place="CUDAPlace(0)")
    after = good._replace(step=2, t_s=0.75)
    compressor = StepCompressor()
    assert compressor.compress(good) is not None
    assert compressor.compress(bad) is None and unwritable(bad) and not unwritable(good)
    assert not unwritable(STEPS[2])  # (a non-finite gap_s is written as null)
    assert unwritable(good._replace(read_s=np.float32("inf")))
    assert "place" not in compressor.compress(after)  # the same as the last step written
    warned = []
    writer = ProfileWriter(tmp_path / "p.jsonl", warn=warned.append)
    writer.submit(header_record({"argv": ["t.py"]}, {}, {}, 1.7e9))
    for step in (good, bad, after):
        writer.submit(step)
    writer.finish()
    assert writer.unwritable_steps == 1 and "not a number" in warned[0]
    profile = load(tmp_path / "p.jsonl")
    assert not profile.warnings  # (the summary too: the step is not in it)
    steps = profile.steps
    assert [s.step for s in steps] == [0, 2]
    assert all((s.n_ops, s.fetch, s.feed, s.place) == (17, ("loss",), ("x", "y"), "CPUPlace")
               for s in steps)


def test_an_optional_non_finite_time_is_written_as_null():
    out = StepCompressor().compress(STEPS[2])
    assert out["gap_s"] is None and from_json(out).gap_s is None
    out = StepCompressor().compress(STEPS[0]._replace(compute_wait_s=float("nan")))
    assert out["compute_wait_s"] is None and from_json(out).compute_wait_s is None


def test_a_step_without_the_compute_wait_loads_without_it():
    """Profiles written before Step.compute_wait_s: their steps load, the field None."""
    out = StepCompressor().compress(STEPS[0])
    assert "compute_wait_s" not in out and from_json(out).compute_wait_s is None
    assert "compute_queued_s" not in out and from_json(out).compute_queued_s is None
    out = StepCompressor().compress(STEPS[3])
    assert out["compute_wait_s"] == 0.000412346
    assert from_json(out).compute_wait_s == pytest.approx(0.000412346)


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
    loaded = [filler.fill(from_json(obj)) for obj in lines]
    assert [(s.n_ops, s.fetch, s.feed, s.place) for s in loaded] == [
        (17, ("loss",), ("x", "y"), "CPUPlace"), (17, ("loss",), ("x", "y"), "CPUPlace"),
        (17, ("loss",), ("x", "y"), "CUDAPlace(0)"), (17, ("loss",), ("x", "y"), "CPUPlace")]


@pytest.mark.parametrize("value", [np.float32(0.25), np.int64(7)])
def test_numpy_scalars_become_json_numbers(value):
    step = STEPS[1]._replace(compute_s=value, batch_size=value if isinstance(value, np.int64)
                             else None)
    assert line(StepCompressor().compress(step)) == line(generic(step))


def random_step(rng: random.Random, i: int) -> r.Step:
    """A step of plain Python values, each field set or not at random (times non-finite,
    negative zero or zero among them)."""
    maybe = lambda value: value if rng.random() < 0.5 else None  # noqa: E731
    return r.Step(
        rng.random() * 100, rng.randrange(3), rng.randrange(2), i, rng.random() / 10,
        rng.choice([0.0, rng.random() / 100]), rng.random() / 10, rng.choice([0.0, 1e-5]),
        rng.choice([None, float("nan"), float("inf"), rng.random() / 1000, 0.0]),
        maybe(rng.randrange(1, 512)), rng.choice([0, 4096]), rng.choice([0, 4]),
        rng.choice([0.0, -0.0, rng.random() / 100]), maybe(rng.randrange(9)),
        maybe(rng.randrange(40)), maybe(("loss",)), maybe(("x", "y")),
        rng.choice([None, True, False]), maybe(rng.choice(["CPUPlace", "CUDAPlace(0)"])),
        rng.choice([None, "slow", "sample"]), maybe(rng.randrange(32)),
        rng.choice([None, float("nan"), 0.0, rng.random() / 1000]),
        rng.choice([None, float("inf"), 0.0, rng.random() / 10000]),
        maybe(rng.randrange(1, 2048)))


def test_a_step_of_plain_values_is_written_as_the_generic_encoder_writes_it():
    """Every mix of set and unset fields of a step of plain Python values (the writer's
    usual step) compresses to the generic encoder's line."""
    rng = random.Random(5)
    for i in range(500):
        step = random_step(rng, i)
        assert line(StepCompressor().compress(step)) == line(generic(step)), step
    bad = STEPS[0]._replace(read_s=float("nan"))
    assert StepCompressor().compress(bad) is None


def parsed(text: str) -> list:
    """A line's keys, in order, with each value's type and value."""
    return [(key, type(value), value) for key, value in json.loads(text).items()]


def test_the_usual_steps_text_holds_what_the_generic_path_writes():
    """A step whose sticky fields repeat the previous step's is written as formatted text
    (times with nine decimals): the same keys, order, types and numbers as the generic
    path's line; any other step (the program's first, a changed sticky field, a value of
    another type) as the generic path's line itself."""
    rng = random.Random(7)
    formatted = 0
    for i in range(500):
        first = random_step(rng, i)
        step = random_step(rng, i + 1)._replace(
            program=first.program, executor=first.executor, n_ops=first.n_ops,
            fetch=first.fetch, feed=first.feed, startup=first.startup, place=first.place)
        compressor, reference = StepCompressor(), StepCompressor()
        assert compressor.text(first) == (None if unwritable(first) else line(generic(first)))
        reference.compress(first)
        expected = reference.compress(step)
        text = compressor.text(step)
        if expected is None:
            assert text is None, step
            continue
        assert parsed(text) == parsed(line(expected)), step
        formatted += bool(re.search(r'"t_s":[0-9]+\.[0-9]{9},', text))
    assert formatted > 300  # (most took the formatted path: the test cannot pass without it)
    numpy_step = STEPS[4]  # (NumPy values: the generic path's line, even when repeated)
    compressor, reference = StepCompressor(), StepCompressor()
    for _ in range(2):
        assert compressor.text(numpy_step) == line(reference.compress(numpy_step))
