"""The GPU math knobs `paddletune tune` measures for advice #28: PADDLETUNE_OVERRIDES'
`backends` section against the real torch (CPU, with CUDA's presence faked where the setting
is to act), and the knobs the tuning space takes from a GPU job's model census, in PyTorch
(`backends`) and Paddle 3 (FLAGS_cudnn_exhaustive_search) terms."""

import json

import pytest
import torch

from paddletune import advisors
from paddletune.advisors import gpu_model
from paddletune.profile import load
from paddletune.sources.eager.overrides import Overrides, OverrideError, parse
from paddletune.sources.torch import backends
from paddletune.sources.torch import census as census_module
from paddletune.sources.torch.source import TorchSource
from paddletune.tune import proposals, space as sp
from profiles import make_profile, source_info, step_records

ENV = "PADDLETUNE_OVERRIDES"
BOTH = {"backends": {"cudnn_benchmark": True, "matmul_allow_tf32": True}}


@pytest.fixture(autouse=True)
def torch_defaults():
    saved = torch.backends.cudnn.benchmark, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.benchmark = torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cudnn.benchmark, torch.backends.cuda.matmul.allow_tf32 = saved


def test_only_a_pytorch_job_takes_the_backends_section():
    assert parse(json.dumps(BOTH), "torch") == BOTH
    with pytest.raises(OverrideError, match="paddle jobs take the sections reader, threads"):
        parse(json.dumps(BOTH), "paddle")
    with pytest.raises(OverrideError, match="backends.cudnn_benchmark takes true or false"):
        parse('{"backends": {"cudnn_benchmark": 1}}', "torch")
    with pytest.raises(OverrideError, match="unknown key backends.benchmark"):
        parse('{"backends": {"benchmark": true}}', "torch")


def test_without_cuda_the_settings_are_skipped_and_left_alone(monkeypatch):
    monkeypatch.setattr(backends, "has_cuda", lambda: False)
    state = Overrides("torch", {ENV: json.dumps(BOTH)})
    assert backends.BackendOverrides(state).install() == []
    assert {(s.key, s.code) for s in state.skipped} == {("cudnn_benchmark", "not-supported"),
                                                       ("matmul_allow_tf32", "not-supported")}
    assert "no CUDA device" in state.skipped[0].why and state.applied == []
    assert torch.backends.cudnn.benchmark is False


def test_applied_kept_against_the_scripts_own_setting_and_undone(monkeypatch):
    monkeypatch.setattr(backends, "has_cuda", lambda: True)
    state = Overrides("torch", {ENV: json.dumps(BOTH)})
    overrides = backends.BackendOverrides(state)
    undo = overrides.install()
    assert torch.backends.cudnn.benchmark is True
    assert torch.backends.cuda.matmul.allow_tf32 is True
    assert [(a.key, a.value, a.was) for a in state.applied] == [
        ("cudnn_benchmark", True, False), ("matmul_allow_tf32", True, False)]
    torch.backends.cudnn.benchmark = False  # the script's own line, before its loop
    overrides.first_step_done()
    assert torch.backends.cudnn.benchmark is True and len(state.applied) == 2
    for action in undo:
        action()
    assert torch.backends.cudnn.benchmark is False
    assert torch.backends.cuda.matmul.allow_tf32 is False


def test_an_override_equal_to_the_jobs_value_is_said_so_until_the_script_changes_it(
        monkeypatch):
    monkeypatch.setattr(backends, "has_cuda", lambda: True)
    torch.backends.cudnn.benchmark = True
    state = Overrides("torch", {ENV: '{"backends": {"cudnn_benchmark": true}}'})
    overrides = backends.BackendOverrides(state)
    overrides.install()
    assert [(s.key, s.code) for s in state.skipped] == [("cudnn_benchmark", "same-value")]
    torch.backends.cudnn.benchmark = False
    overrides.first_step_done()
    assert state.skipped == [] and torch.backends.cudnn.benchmark is True
    assert [(a.key, a.value, a.was) for a in state.applied] == [("cudnn_benchmark", True,
                                                                  False)]


def test_a_job_under_the_override_trains_with_it_and_its_census_says_so(monkeypatch):
    monkeypatch.setattr(backends, "has_cuda", lambda: True)
    monkeypatch.setattr(census_module, "device_capability", lambda place: "8.0")
    monkeypatch.setenv(ENV, json.dumps(BOTH))
    source = TorchSource()
    source.begin()
    seen = []
    source.subscribe("model", seen.append)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten(),
                                torch.nn.Linear(4 * 6 * 6, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    with source.running():
        torch.backends.cudnn.benchmark = False  # the script's own, overruled
        for _ in range(2):
            model(torch.randn(2, 3, 8, 8)).sum().backward()
            optimizer.step()
    (census,) = seen
    assert census.settings["torch.backends.cudnn.benchmark"] is True
    assert census.settings["torch.backends.cuda.matmul.allow_tf32"] is True
    report = source.overrides()
    assert [a.key for a in report["applied"]] == ["cudnn_benchmark", "matmul_allow_tf32"]
    assert torch.backends.cudnn.benchmark is False  # the job's own value back after it


# --- the tuning space ------------------------------------------------------------------------
OFF = {"torch.backends.cudnn.benchmark": False, "torch.backends.cuda.matmul.allow_tf32": False,
       "FLAGS_cudnn_exhaustive_search": False}


def _profile(tmp_path, framework, place="CUDAPlace(0)", modules=None, settings=OFF,
             capability="8.0", autocast=False, params=None):
    steps = step_records()
    for row in steps:
        row["place"] = place
    census = {"type": "event", "kind": "model", "t": 0.2,
              "modules": modules or {"Conv2d": 2, "Linear": 1},
              "params": params or {"float32": 1000}, "capability": capability,
              "autocast": autocast, "settings": settings, "message": "census"}
    return load(make_profile(tmp_path / "p.jsonl", steps=steps, extra=[census],
                             source=source_info(framework)))


def test_a_pytorch_gpu_job_gets_cudnn_and_tf32_knobs_written_as_overrides_and_code(tmp_path):
    space = sp.build_space(_profile(tmp_path, "torch"))
    bench, tf32 = space.knobs["cudnn_benchmark"], space.knobs["matmul_allow_tf32"]
    assert (bench.section, bench.values, bench.current) == ("backends", (False, True), False)
    assert tf32.section == "backends"
    setting = {"cudnn_benchmark": True, "matmul_allow_tf32": True}
    assert json.loads(sp.to_env(setting, space)[ENV]) == BOTH
    assert sp.code_lines(setting, space) == [
        "torch.backends.cudnn.benchmark = True  # before training",
        "torch.backends.cuda.matmul.allow_tf32 = True  # before training"]


def test_a_paddle_gpu_job_gets_the_cudnn_search_flag(tmp_path):
    space = sp.build_space(_profile(tmp_path, "paddle", modules={"Conv2D": 2}))
    knob = space.knobs["FLAGS_cudnn_exhaustive_search"]
    assert (knob.section, knob.values) == ("flag", (False, True))
    assert "matmul_allow_tf32" not in space.knobs and "cudnn_benchmark" not in space.knobs
    assert sp.to_env({"FLAGS_cudnn_exhaustive_search": True}, space) == {
        "FLAGS_cudnn_exhaustive_search": "true"}


def test_no_gpu_math_knobs_on_the_cpu_with_the_settings_on_or_without_the_layers(tmp_path):
    names = {"cudnn_benchmark", "matmul_allow_tf32", "FLAGS_cudnn_exhaustive_search"}
    for profile in (_profile(tmp_path, "torch", place="CPUPlace"),
                    _profile(tmp_path, "torch", settings={}),
                    _profile(tmp_path, "torch", modules={"ReLU": 2}),
                    _profile(tmp_path, "fluid")):
        assert not names & set(sp.build_space(profile).knobs)
    only_linear = sp.build_space(_profile(tmp_path, "torch", modules={"Linear": 2}))
    assert "matmul_allow_tf32" in only_linear.knobs
    assert "cudnn_benchmark" not in only_linear.knobs


def test_the_advice_is_tried_first_through_its_knob(tmp_path):
    for framework, knob in (("torch", "cudnn_benchmark"),
                            ("paddle", "FLAGS_cudnn_exhaustive_search")):
        profile = _profile(tmp_path, framework, modules={"Conv2d": 2, "Conv2D": 2})
        found = advisors.advise(profile, [gpu_model.gpu_model_math])
        tried, _ = proposals.proposals(found, sp.build_space(profile))
        assert ("cudnn-benchmark", {knob: True}) in tried, tried


def test_space_specs_take_a_backends_field():
    space = sp.Space(framework="torch")
    sp.apply_spec(space, "backends.cudnn_benchmark=false,true")
    assert space.knobs["cudnn_benchmark"].section == "backends"
    with pytest.raises(sp.SpaceError, match="takes true or false"):
        sp.check_specs(["backends.cudnn_benchmark=2"])


def test_no_tf32_knob_before_ampere(tmp_path):
    knobs = sp.build_space(_profile(tmp_path, "torch", capability="7.0")).knobs  # a V100
    assert "matmul_allow_tf32" not in knobs and "cudnn_benchmark" in knobs


def test_a_backends_spec_is_refused_for_a_job_that_is_not_pytorch():
    for framework in ("paddle", "fluid"):
        with pytest.raises(sp.SpaceError, match=f"unknown knob 'backends.cudnn_benchmark' "
                                                f"for a {framework} job"):
            sp.apply_spec(sp.Space(framework=framework), "backends.cudnn_benchmark=true")


def test_no_tf32_knob_under_autocast_or_for_a_half_model(tmp_path):
    for census in ({"autocast": True}, {"params": {"float16": 1000}}):
        profile = _profile(tmp_path, "torch", modules={"Linear": 2}, **census)
        assert "matmul_allow_tf32" not in sp.build_space(profile).knobs
