"""The CPU's autocast to a dtype the CPU has no kernels for (advice #28, cpu-autocast-slow):
the model's census records it against the real torch, the advice reads it on synthetic
profiles, PADDLETUNE_OVERRIDES' backends.cpu_autocast turns the script's CPU autocast off for
`tune` to measure, and a real job under it trains in float32 and says so."""

import json
import warnings

import pytest
import torch

from paddletune import advisors
from paddletune.advisors import gpu_model
from paddletune.profile import load
from paddletune.sources.eager.overrides import Overrides, OverrideError, parse
from paddletune.sources.torch import backends
from paddletune.sources.torch.census import cpu_autocast_dtype, cpu_kernels
from paddletune.sources.torch.source import TorchSource
from paddletune.tune import proposals, space as sp
from profiles import make_profile, source_info, step_records

ENV = "PADDLETUNE_OVERRIDES"
OFF = {"backends": {"cpu_autocast": False}}
NATIVE_BF16 = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))


def _train(autocast=True, dtype=torch.bfloat16, steps=3, evaluate_first=False):
    """(the census, the dtype of the last output, the overrides' report) of a short job;
    `evaluate_first`: a no_grad forward pass under the CPU's autocast before it trains."""
    source = TorchSource()
    source.begin()
    seen = []
    source.subscribe("model", seen.append)
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with source.running():
        if evaluate_first:
            with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
                model(torch.randn(4, 8))
        for _ in range(steps):
            with torch.autocast("cpu", dtype=dtype, enabled=autocast):
                out = model(torch.randn(4, 8))
            loss = out.float().square().mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return seen[0], out.dtype, source.overrides()


# --- the census, on the real torch -----------------------------------------------------------
def test_the_census_records_the_cpus_autocast_dtype_and_whether_it_has_kernels():
    census, out_dtype, _ = _train()
    assert out_dtype == torch.bfloat16
    assert census.autocast is True and census.cpu_autocast == "bfloat16"
    assert census.cpu_kernels is NATIVE_BF16  # (what oneDNN says of this CPU)
    assert "the CPU's autocast in bfloat16" in census.message
    assert ("no oneDNN kernels" in census.message) is (not NATIVE_BF16)


def test_no_cpu_autocast_recorded_without_it():
    census, out_dtype, _ = _train(autocast=False)
    assert out_dtype == torch.float32
    assert census.cpu_autocast is None and census.cpu_kernels is None
    assert "the CPU's autocast" not in census.message


def test_the_autocast_dtype_and_the_kernel_query():
    assert cpu_autocast_dtype() is None
    with torch.autocast("cpu", dtype=torch.float16):
        assert cpu_autocast_dtype() == "float16"
    assert cpu_kernels("bfloat16") is NATIVE_BF16
    assert cpu_kernels("float32") is None and cpu_kernels(None) is None


# --- the override ----------------------------------------------------------------------------
def test_the_override_is_a_pytorch_backends_key_taking_true_or_false():
    assert parse(json.dumps(OFF), "torch") == OFF
    with pytest.raises(OverrideError, match="backends.cpu_autocast takes true or false"):
        parse('{"backends": {"cpu_autocast": "off"}}', "torch")
    with pytest.raises(OverrideError, match="paddle jobs take the sections"):
        parse(json.dumps(OFF), "paddle")


def test_a_job_under_the_override_trains_in_float32_and_says_what_changed(monkeypatch):
    monkeypatch.setenv(ENV, json.dumps(OFF))
    census, out_dtype, report = _train()
    assert out_dtype == torch.float32  # the script's autocast entered disabled
    assert census.autocast is False and census.cpu_autocast is None
    assert [(a.section, a.key, a.value, a.was) for a in report["applied"]] == [
        ("backends", "cpu_autocast", False, True)]
    with torch.autocast("cpu", dtype=torch.bfloat16):  # undone after the job
        assert torch.is_autocast_enabled("cpu")


def test_the_override_without_a_cpu_autocast_or_set_to_true_changes_nothing(monkeypatch):
    monkeypatch.setenv(ENV, json.dumps(OFF))
    _, out_dtype, report = _train(autocast=False)
    assert out_dtype == torch.float32 and report["applied"] == []
    assert [(s.key, s.code) for s in report["skipped"]] == [("cpu_autocast", "no-autocast")]
    monkeypatch.setenv(ENV, '{"backends": {"cpu_autocast": true}}')
    _, out_dtype, report = _train()
    assert out_dtype == torch.bfloat16 and report["applied"] == []
    assert [(s.key, s.code) for s in report["skipped"]] == [("cpu_autocast", "same-value")]


def test_the_override_leaves_a_cuda_autocast_alone():
    state = Overrides("torch", {ENV: json.dumps(OFF)})
    undo = backends.BackendOverrides(state).install()
    try:
        with warnings.catch_warnings():  # (torch's own, without CUDA: autocast disabled)
            warnings.simplefilter("ignore")
            ctx = torch.autocast("cuda", dtype=torch.float16)
        assert ctx.device == "cuda" and state.applied == []
    finally:
        for action in undo:
            action()


# --- the advice, on synthetic profiles -------------------------------------------------------
def _census(cpu_autocast="bfloat16", cpu_kernels=False):
    return {"type": "event", "kind": "model", "t": 0.2, "modules": {"Linear": 3, "ReLU": 2},
            "params": {"float32": 100_000}, "autocast": bool(cpu_autocast),
            "capability": None, "settings": {}, "message": "leaf module calls: Linear x3",
            "cpu_autocast": cpu_autocast, "cpu_kernels": cpu_kernels}


def _profile(tmp_path, census=None, place="CPUPlace", framework="torch"):
    steps = step_records()
    for row in steps:
        row["place"] = place
    return load(make_profile(tmp_path / "p.jsonl", steps=steps, extra=[census or _census()],
                             source=source_info(framework)))


def _advice(profile):
    return advisors.advise(profile, [gpu_model.cpu_autocast_slow])


def test_autocast_on_a_cpu_without_its_kernels_is_advised_off_with_its_bounds(tmp_path):
    (card,) = _advice(_profile(tmp_path))
    assert card.id == "cpu-autocast-slow" and card.severity == "high"
    assert card.title == "Autocast to bfloat16 on a CPU without bfloat16 kernels"
    assert "oneDNN has no bfloat16 kernels on this CPU" in card.evidence
    assert "torch.ops.mkldnn._is_mkldnn_bf16_supported()" in card.change
    assert "enabled=cpu_bf16" in card.change
    # a 10 ms cycle with 9.3 ms of compute: that compute 2.78x to 8.73x faster
    assert gpu_model.AUTOCAST_COST == (2.78, 8.73)
    low = 10 / (10 - 9.3 * (1 - 1 / 2.78))
    high = 10 / (10 - 9.3 * (1 - 1 / 8.73))
    assert card.expected_speedup == pytest.approx(low, rel=1e-3)
    assert card.expected_range == pytest.approx((low, high), rel=1e-3)
    assert f"{low:.2f}x to {high:.2f}x steps/s" in card.expected_gain


def test_no_autocast_advice_where_the_cpu_has_the_kernels_on_a_gpu_or_without_autocast(
        tmp_path):
    assert _advice(_profile(tmp_path, _census(cpu_kernels=True))) == []
    assert _advice(_profile(tmp_path, _census(cpu_kernels=None))) == []
    assert _advice(_profile(tmp_path, _census(cpu_autocast=None, cpu_kernels=None))) == []
    assert _advice(_profile(tmp_path, place="CUDAPlace(0)")) == []
    assert _advice(_profile(tmp_path, framework="paddle")) == []  # (no code for it)


# --- the tuning space ------------------------------------------------------------------------
def test_tune_measures_the_autocast_off_through_its_knob(tmp_path):
    profile = _profile(tmp_path)
    space = sp.build_space(profile)
    knob = space.knobs["cpu_autocast"]
    assert (knob.section, knob.values, knob.current) == ("backends", (True, False), True)
    assert json.loads(sp.to_env({"cpu_autocast": False}, space)[ENV]) == OFF
    assert sp.code_lines({"cpu_autocast": False}, space) == [
        "with torch.autocast('cpu', ..., enabled=False):  # the script's own autocast, off"]
    tried, _ = proposals.proposals(_advice(profile), space)
    assert tried == [("cpu-autocast-slow", {"cpu_autocast": False})]
    assert "cpu_autocast" not in sp.build_space(_profile(tmp_path, _census(cpu_kernels=True)))


def test_an_evaluation_under_autocast_before_training_is_not_the_training_steps():
    """helper-44: a no_grad evaluation under the CPU's autocast before a float32 training
    step had the census record bfloat16, and the card called the training slow."""
    census, out_dtype, _ = _train(autocast=False, evaluate_first=True)
    assert out_dtype == torch.float32
    assert census.autocast is True  # (the GPU advice's flag: any leaf under autocast)
    assert census.cpu_autocast is None


def test_the_override_keeps_autocast_usable_inside_torch_compile(monkeypatch):
    """Dynamo binds autocast's arguments by its __init__'s signature: the override's
    __init__ keeps it (without it: InternalTorchDynamoError: KeyError 'device_type')."""
    state = Overrides("torch", {ENV: json.dumps(OFF)})
    undo = backends.BackendOverrides(state).install()
    try:
        @torch.compile(backend="eager")
        def f(x):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return x @ x
        assert f(torch.randn(4, 4)).shape == (4, 4)
    finally:
        for action in undo:
            action()
        torch._dynamo.reset()
