"""PADDLETUNE_OVERRIDES (runtime/overrides.py): parsing and its errors, the DataLoader and
strategy hooks, what is recorded as applied, and the profile's overrides record."""

import json
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest

import runtime as fluid
from runtime import overrides
from runtime.errors import FlagError

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def env(monkeypatch):
    """Set PADDLETUNE_OVERRIDES (a dict becomes JSON) for one test; forget what was applied."""
    overrides.reset()

    def set_(value):
        monkeypatch.setenv(overrides.ENV, value if isinstance(value, str) else
                           json.dumps(value))
    yield set_
    monkeypatch.delenv(overrides.ENV, raising=False)
    overrides.requested()  # re-read: nothing requested
    overrides.reset()


@pytest.mark.parametrize("raw, message", [
    ('{"reader": {"num_workers": 2', "is not valid JSON"),
    ('[1, 2]', "must be a JSON object of sections"),
    ('{"readers": {}}', "unknown section 'readers'; known: reader, exec_strategy"),
    ('{"reader": 3}', "section 'reader' must be an object"),
    ('{"reader": {"workers": 2}}', "unknown key reader.workers; known in reader: num_workers"),
    ('{"reader": {"num_workers": -1}}', "invalid value -1 for reader.num_workers: expected "
                                        "an integer >= 0"),
    ('{"reader": {"capacity": true}}', "invalid value true for reader.capacity"),
    ('{"exec_strategy": {"num_threads": "2"}}', 'invalid value "2" for '
                                                'exec_strategy.num_threads'),
    ('{"build_strategy": {"fuse_all_optimizer_ops": 1}}',
     "invalid value 1 for build_strategy.fuse_all_optimizer_ops: expected true or false"),
    ('{"build_strategy": {"reduce_strategy": 2}}', "expected one of 0, 1"),
])
def test_bad_overrides_name_the_variable_and_the_key(raw, message):
    with pytest.raises(FlagError) as err:
        overrides.parse(raw)
    assert str(err.value).startswith("PADDLETUNE_OVERRIDES")
    assert message in str(err.value)


def test_empty_means_nothing():
    assert overrides.parse(None) == {} and overrides.parse("  ") == {}


def test_import_runtime_rejects_a_bad_value_and_the_cli_says_it_in_one_line():
    bad = {**_plain_env(), overrides.ENV: '{"reader": {"bogus": 1}}'}
    run = subprocess.run([sys.executable, "-c", "import runtime"], env=bad, cwd=REPO,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 1 and "unknown key reader.bogus" in run.stderr
    cli = subprocess.run([sys.executable, "-m", "paddletune", "flags", "--json"], env=bad,
                         cwd=REPO, capture_output=True, text=True, timeout=60)
    assert cli.returncode == 2
    assert cli.stderr.startswith("paddletune: PADDLETUNE_OVERRIDES: unknown key reader.bogus")
    assert "Traceback" not in cli.stderr


def _loader(**kwargs):
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        x = fluid.data("x", [None, 2])
        return fluid.io.DataLoader.from_generator(feed_list=[x], **kwargs)


def _samples():
    for i in range(10):
        yield (np.full(2, i, "float32"),)


def test_reader_options_are_overridden_at_construction_and_batch_size_at_the_source(env):
    env({"reader": {"num_workers": 1, "capacity": 16, "use_double_buffer": False,
                    "batch_size": 4}})
    loader = _loader(capacity=2)
    config = loader.config()
    assert (config["capacity"], config["num_workers"], config["use_double_buffer"]) == \
        (16, 1, False)
    assert loader.capacity == 16
    loader.set_sample_generator(_samples, batch_size=3)
    assert loader.config()["batch_size"] == 4
    assert overrides.applied() == [
        {"section": "reader", "key": "capacity", "value": 16, "was": 2},
        {"section": "reader", "key": "num_workers", "value": 1, "was": 0},
        {"section": "reader", "key": "batch_size", "value": 4, "was": 3}]
    # set, but on the loader's CPU place the double buffer does nothing
    assert [s["key"] for s in overrides.skipped()] == ["use_double_buffer"]


def test_every_new_sample_source_gets_the_batch_size(env):
    """Each set_sample_generator is a new source (a new tuple, often at a freed one's
    address): each gets the override."""
    env({"reader": {"batch_size": 4}})
    sizes = []
    for _ in range(10):
        loader = _loader(capacity=2)
        for _ in range(3):
            loader.set_sample_generator(_samples, batch_size=3)
            sizes.append(loader.config()["batch_size"])
    assert sizes == [4] * 30


def test_overridden_loader_still_trains(env):
    env({"reader": {"capacity": 3, "batch_size": 5}})
    loader = _loader(capacity=8, iterable=True, return_list=True)
    loader.set_sample_generator(_samples, batch_size=2, drop_last=False)
    shapes = [batch[0].shape for batch in loader()]
    assert shapes == [(5, 2), (5, 2)]


def test_batch_size_of_whole_batches_is_left_alone_and_said_so(env):
    """Whole batches of a LoD tensor (rows are not samples) cannot be regrouped (dense ones
    are: tests/test_overrides_batch.py)."""
    env({"reader": {"batch_size": 4}})
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        x = fluid.data("x", [None, 2], lod_level=1)
        loader = fluid.io.DataLoader.from_generator(feed_list=[x], capacity=2)
    loader.set_batch_generator(lambda: iter([[np.zeros((3, 2), "float32")]]))
    assert loader.config()["batch_size"] is None
    assert overrides.applied() == []
    [skipped] = overrides.skipped()
    assert skipped["key"] == "batch_size" and "set_batch_generator" in skipped["why"]


def test_strategies_are_overridden_and_recorded(env):
    env({"exec_strategy": {"num_threads": 1, "num_iteration_per_drop_scope": 10},
         "build_strategy": {"fuse_all_optimizer_ops": True}})
    build, exe = fluid.BuildStrategy(), fluid.ExecutionStrategy()
    overrides.apply_strategies(build, exe, data_parallel=True)
    assert build.fuse_all_optimizer_ops is True
    assert (exe.num_threads, exe.num_iteration_per_drop_scope) == (1, 10)
    assert {(a["section"], a["key"], a["was"]) for a in overrides.applied()} == {
        ("exec_strategy", "num_threads", 0), ("exec_strategy", "num_iteration_per_drop_scope",
                                              100),
        ("build_strategy", "fuse_all_optimizer_ops", False)}
    overrides.apply_strategies(None, None, data_parallel=True)  # either may be missing


def test_no_variable_changes_nothing(env):
    loader = _loader(capacity=2)
    loader.set_sample_generator(_samples, batch_size=3)
    assert loader.config()["capacity"] == 2 and overrides.applied() == []


OVERRIDDEN_JOB = '''
import numpy as np
import runtime as fluid
main, startup = fluid.Program(), fluid.Program()
with fluid.program_guard(main, startup):
    x = fluid.data("x", [None, 2])
    loss = fluid.layers.mean(fluid.layers.fc(x, 1))
    fluid.optimizer.SGD(0.1).minimize(loss)
    loader = fluid.io.DataLoader.from_generator(feed_list=[x], capacity=2)
def samples():
    for i in range(64):
        yield (np.full(2, i, "float32"),)
loader.set_sample_generator(samples, batch_size=2)
exe = fluid.Executor(fluid.CPUPlace())
exe.run(startup)
program = fluid.CompiledProgram(main) if COMPILED else main
for data in loader():
    exe.run(program, feed=data, fetch_list=[loss])
'''


def _profile_overridden_job(tmp_path, value, compiled=False):
    """`paddletune profile` of OVERRIDDEN_JOB with PADDLETUNE_OVERRIDES=value."""
    from paddletune.profile import load
    script = tmp_path / "job.py"
    script.write_text(f"COMPILED = {compiled}\n" + OVERRIDDEN_JOB)
    out = tmp_path / "p.jsonl"
    run = subprocess.run([sys.executable, "-m", "paddletune", "profile", "--quiet", "-o",
                          str(out), str(script)], env={**_plain_env(), overrides.ENV: value},
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    return load(out)


def test_profile_records_the_overrides_and_the_variable(tmp_path):
    value = '{"reader":{"capacity":4,"batch_size":8}}'
    profile = _profile_overridden_job(tmp_path, value)
    assert profile.options.overrides_env == {overrides.ENV: value}
    [event] = profile.events_of("overrides")
    assert [asdict(a) for a in event.applied] == [
        {"section": "reader", "key": "capacity", "value": 4, "was": 2},
        {"section": "reader", "key": "batch_size", "value": 8, "was": 2}]
    assert "capacity=4 (was 2)" in event.message
    assert profile.summary.throughput.batch_size == 8


def _plain_env():
    import os
    return {k: v for k, v in os.environ.items() if k != overrides.ENV}


# --- overrides that change nothing are "no effect", with why, never "applied" ----------------
def _fake_gpu():
    gpu = object.__new__(fluid.CUDAPlace)  # no GPU needed: only the loader's places are read
    gpu.device_id = 0
    return gpu


def test_double_buffer_counts_only_on_a_gpu_place(env):
    env({"reader": {"use_double_buffer": False}})
    cpu = _loader(capacity=2)
    assert overrides.skipped() == []  # the places are known once a generator is set
    cpu.set_sample_generator(_samples, batch_size=3)
    gpu = _loader(capacity=2)
    gpu.set_sample_generator(_samples, batch_size=3, places=[_fake_gpu()])
    assert cpu.config()["use_double_buffer"] is False
    assert overrides.applied() == [
        {"section": "reader", "key": "use_double_buffer", "value": False, "was": True}]
    [idle] = overrides.skipped()
    assert idle["key"] == "use_double_buffer" and cpu.name in idle["why"]
    assert "CPU places" in idle["why"] and "GPU" in idle["why"]


def _compiled(data_parallel):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [None, 2])
        loss = fluid.layers.mean(fluid.layers.fc(x, 1))
        fluid.optimizer.SGD(0.1).minimize(loss)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    compiled = fluid.CompiledProgram(main, build_strategy=fluid.BuildStrategy())
    if data_parallel:
        compiled.with_data_parallel(loss.name, places=fluid.cpu_places(2))
    exe.run(compiled, feed={"x": np.ones((4, 2), "float32")}, fetch_list=[loss])
    return compiled


STRATEGIES = {"build_strategy": {"fuse_all_reduce_ops": True, "fuse_all_optimizer_ops": True,
                                 "fuse_elewise_add_act_ops": True, "enable_inplace": False},
              "exec_strategy": {"num_threads": 1}}


def test_data_parallel_strategies_without_data_parallel_have_no_effect(env):
    env(STRATEGIES)
    compiled = _compiled(data_parallel=False)
    assert overrides.applied() == [
        {"section": "build_strategy", "key": "enable_inplace", "value": False, "was": True}]
    idle = {(s["section"], s["key"]): s["why"] for s in overrides.skipped()}
    assert set(idle) == {("build_strategy", "fuse_all_reduce_ops"),
                         ("build_strategy", "fuse_all_optimizer_ops"),
                         ("build_strategy", "fuse_elewise_add_act_ops"),
                         ("exec_strategy", "num_threads")}
    assert all("with_data_parallel" in why for why in idle.values())
    assert compiled._build_strategy.fuse_all_optimizer_ops is False  # left as it was


def test_data_parallel_strategies_with_data_parallel_are_applied(env):
    env(STRATEGIES)
    _compiled(data_parallel=True)
    assert {(a["section"], a["key"]) for a in overrides.applied()} == {
        (section, key) for section, values in STRATEGIES.items() for key in values}
    assert overrides.skipped() == []


def test_an_override_to_the_scripts_own_value_has_no_effect(env):
    env({"reader": {"capacity": 2}, "build_strategy": {"enable_inplace": True}})
    _loader(capacity=2)
    _compiled(data_parallel=False)
    assert overrides.applied() == []
    assert {(s["key"], s["why"]) for s in overrides.skipped()} == {
        ("capacity", "the script's own value is 2 already"),
        ("enable_inplace", "the script's own value is true already")}


def test_profile_and_tune_show_no_effect_overrides_with_why(tmp_path):
    from paddletune.render.report import render_report
    from paddletune.tune.trials import Trial, _overrides
    value = json.dumps({"reader": {"capacity": 4, "use_double_buffer": False},
                        "build_strategy": {"fuse_all_reduce_ops": True},
                        "exec_strategy": {"num_iteration_per_drop_scope": 7}})
    profile = _profile_overridden_job(tmp_path, value, compiled=True)
    [event] = profile.events_of("overrides")
    assert [asdict(a) for a in event.applied] == [
        {"section": "reader", "key": "capacity", "value": 4, "was": 2}]
    assert [(s.section, s.key, s.code) for s in event.skipped] == [
        ("reader", "use_double_buffer", "cpu-places"),
        ("build_strategy", "fuse_all_reduce_ops", "not-data-parallel"),
        ("exec_strategy", "num_iteration_per_drop_scope", "not-data-parallel")]
    message = event.message
    assert message.startswith(f"{overrides.ENV} overrode reader.capacity=4 (was 2); no effect: ")
    assert "reader.use_double_buffer=False (DataLoader#0 feeds CPU places" in message
    assert "build_strategy.fuse_all_reduce_ops=True (the program runs without " \
           "with_data_parallel" in message
    from rich.console import Console
    console = Console(width=400, record=True, file=open("/dev/null", "w"))
    render_report(profile, console)
    assert "no effect: reader.use_double_buffer=False" in console.export_text()
    trial = Trial(index=1, setting={}, label="", phase="knob", steps=1)
    _overrides(trial, profile, {overrides.ENV: value})  # what `paddletune tune` reads
    assert [a["key"] for a in trial.applied] == ["capacity"]
    assert len(trial.no_effect) == 3 and "feeds CPU places" in trial.no_effect[0].text
    assert "with_data_parallel" in trial.no_effect[1].text
    assert [i.code for i in trial.no_effect] == ["cpu-places", "not-data-parallel",
                                                 "not-data-parallel"]
