"""Hostile profiles: thousands of randomly mutated profiles (wrong types, NaN and infinity,
huge and tiny numbers, escape sequences, deep nesting, missing and extra fields, cut lines)
go through load, the summary, advise, the report, the JSON summary, the Chrome export and the
live dashboard (`watch`) with zero tracebacks: each either loads (and every consumer copes)
or fails with a ProfileError that names the file.

PADDLETUNE_FUZZ_CASES sets the number of mutated profiles (default 1500)."""

import io
import json
import math
import os
import random

import pytest
from rich.console import Console

from paddletune import profile as prof
from paddletune.advisors import advise
from paddletune.export.chrome import to_chrome_trace
from paddletune.profile import records as r
from paddletune.render import advice as advice_view
from paddletune.render import dashboard
from paddletune.render.report import render_report, summary_json
from profiles import (make_profile, memory_records, nvml_samples, ops_records_in_steps,
                      program_record, reader_records, sched_records, step_records,
                      system_samples, worker_samples)

CASES = int(os.environ.get("PADDLETUNE_FUZZ_CASES", "1500"))
ESCAPES = ("\x1b[2J", "\x1b]0;owned\x07", "\x9b31m", "\r\x00", "[bold]x[/]", "%s%n{0}")
NUMBERS = (0, -1, 1e-300, 1e300, 10 ** 18, 2 ** 62 - 1, -(2 ** 62), 0.5, 3.0, float("nan"),
           float("inf"), float("-inf"), 1e308 * 10)


def rich_profile(path):
    """A profile with a record of every kind the session writes."""
    steps = step_records(n_steps=40, gap_s=0.002)
    ops = [("mul", 0.003), ("softmax", 0.001), ("cross_entropy", 0.001), ("sgd", 0.0005)]
    program = program_record([("mul", {"X": ["x"], "Y": ["w"]}, {"Out": ["h"]}),
                              ("softmax", {"X": ["h"]}, {"Out": ["p"]}),
                              ("cross_entropy", {"X": ["p"], "Label": ["y"]}, {"Y": ["l"]})])
    extra = ([program] + ops_records_in_steps(steps, ops) + reader_records(steps) +
             memory_records(steps) + sched_records(steps, drops=[(9, (0.002, 3 << 20))]) +
             system_samples() + nvml_samples(gpus=(0, 1)) + worker_samples() +
             [{"type": "event", "t": 0.3, "kind": "nan_inf", "op_type": "log", "op_index": 3,
               "output": "l", "inputs": ["p", "y"], "n_nan": 1, "n_inf": 0, "step": 5},
              {"type": "event", "t": 0.35, "kind": "speed_test", "phase": "baseline",
               "step": 10}])
    return make_profile(path, steps=steps, extra=extra, options={"ops": True})


def long_profile(path):
    """A profile whose tail is aggregated: windows, exemplars and sample windows."""
    w = prof.ProfileWriter(path, flush_interval_s=60, head_steps=20)
    w.submit(prof.header_record({"argv": ["long.py"]}, {"head_steps": 20}, {}, 1.7e9))
    t = 0.0
    for i in range(400):
        w.submit(r.Step(t, 1, 1, i, 0.003 + 0.001 * (i % 7 == 0), 0.0003, 0.0025, 0.0001,
                        0.0002 if i else None, 32, startup=False, place="CPUPlace"))
        w.submit(r.MemoryStep(t, 1, i, 1 << 20, 2 << 20, 3 << 20, {"activations": 1 << 20},
                              10, 1, 0.0001, 32, 4096))
        if i % 3 == 0:
            w.submit(r.SystemSample(t, cpu_percent=90.0, rss_bytes=1 << 28, threads=4))
        t += 0.0032
    w.submit(r.ExitEvent(t, 0, "returned", 400))
    w.finish()
    return path


@pytest.fixture(scope="module")
def bases(tmp_path_factory):
    d = tmp_path_factory.mktemp("bases")
    return [p.read_text().splitlines() for p in (rich_profile(d / "rich.jsonl"),
                                                 long_profile(d / "long.jsonl"))]


# --- mutations -----------------------------------------------------------------------------------
def paths(value, prefix=()):
    """Every (path, value) inside a parsed JSON value."""
    yield prefix, value
    if isinstance(value, dict):
        for k, v in value.items():
            yield from paths(v, prefix + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from paths(v, prefix + (i,))


def odd_value(rng, old):
    """A value that may fit the field's type but is odd, or one that does not fit at all."""
    kind = rng.randrange(9)
    if kind == 0:
        return rng.choice(NUMBERS)
    if kind == 1:
        return rng.choice(ESCAPES) + (old if isinstance(old, str) else "")
    if kind == 2 and isinstance(old, (int, float)) and not isinstance(old, bool):
        return old * rng.choice((0, -1, 10 ** 9, 1e-9))
    if kind == 3:
        deep = "x"
        for _ in range(rng.randrange(1, 60)):
            deep = [deep] if rng.random() < 0.5 else {"k": deep}
        return deep
    if kind == 4:
        return rng.choice(([], {}, "", None, True, False, "12", [1, 2, 3]))
    if kind == 5 and isinstance(old, list):
        return old * rng.randrange(0, 40)
    if kind == 6 and isinstance(old, dict):
        return {**old, rng.choice(("extra", "t_s", "99", "-1", "")): rng.choice(NUMBERS)}
    if kind == 7 and isinstance(old, str):
        return old * rng.randrange(0, 200)
    return rng.choice(NUMBERS + ESCAPES + (None, [], {}))


def mutate(rng, lines):
    """A copy of a profile's lines with one to three mutations."""
    lines = list(lines)
    for _ in range(rng.randrange(1, 4)):
        i = rng.randrange(len(lines))
        if rng.random() < 0.05:  # damage the line itself
            line = lines[i]
            cut = rng.randrange(len(line) + 1)
            lines[i] = rng.choice((line[:cut], line[:cut] + "\x00\xff" + line[cut:], ""))
            continue
        try:
            record = json.loads(lines[i])
        except ValueError:
            continue  # a line damaged by an earlier mutation
        where = list(paths(record))
        path, old = rng.choice(where[1:] or where)
        if path and rng.random() < 0.15:
            parent = record
            for key in path[:-1]:
                parent = parent[key]
            if isinstance(parent, dict):
                parent.pop(path[-1])
            else:
                parent.pop(path[-1])
        elif path:
            parent = record
            for key in path[:-1]:
                parent = parent[key]
            parent[path[-1]] = odd_value(rng, old)
        lines[i] = json.dumps(record)
    return lines


# --- the consumers -------------------------------------------------------------------------------
def consume(path):
    """Everything a user can point at a profile; returns how far it got."""
    try:
        profile = prof.load(path)
    except prof.ProfileError as err:
        assert str(path) in str(err) or "profile" in str(err)
        return "refused"
    console = Console(file=io.StringIO(), width=100, color_system=None)
    render_report(profile, console)
    json.loads(summary_json(profile))
    advices = advise(profile)
    errors = [a for a in advices if a.id == "advisor-error"]
    assert not errors, errors[0].evidence
    advice_view.render_advice(advices, console)
    json.dumps(to_chrome_trace(profile), allow_nan=False)
    watch(path)
    return "read"


def watch(path):
    """`paddletune watch --once` on the profile: the full view, then the plain line."""
    for plain in (False, True):
        out = io.StringIO()
        loop = dashboard.watch(path, once=True, plain=plain, file=out)
        assert loop.error is None and out.getvalue()


def test_mutated_profiles_never_raise_a_traceback(tmp_path, bases):
    rng = random.Random(20261124)
    seen = {"refused": 0, "read": 0}
    for case in range(CASES):
        base = bases[case % len(bases)]
        path = tmp_path / f"case{case % 7}.jsonl"
        path.write_text("\n".join(mutate(rng, base)) + "\n")
        try:
            seen[consume(path)] += 1
        except Exception as err:  # report the case, not just the error
            raise AssertionError(f"case {case}: {type(err).__name__}: {err}\n"
                                 f"{path.read_text()[:3000]}") from err
    assert seen["read"] > CASES // 3 and seen["refused"] > 0, seen


def test_the_bases_themselves_read_cleanly(tmp_path, bases):
    for i, lines in enumerate(bases):
        path = tmp_path / f"base{i}.jsonl"
        path.write_text("\n".join(lines) + "\n")
        assert consume(path) == "read"
        assert prof.load(path).warnings == ()
        assert not math.isnan(prof.load(path).summary.duration_s)
