"""The model's census (paddletune/sources/torch/census.py) against the real torch on the CPU,
and the advice that reads it (paddletune/advisors/gpu_model.py, docs/advice.md #28) on
synthetic profiles: cudnn.benchmark, TF32, mixed precision and channels_last on a GPU, each
firing on the evidence it quotes and silent on a CPU place, without a census, with the
setting on, or for a framework whose code writer has no such setting; a float64 model on
either."""

import pytest
import torch

from paddletune import advisors
from paddletune.advisors import gpu_model
from paddletune.profile import load
from paddletune.sources.torch.source import TorchSource
from profiles import make_profile, source_info, step_records

GPU = "CUDAPlace(0)"
CNN = {"Conv2d": 4, "BatchNorm2d": 4, "ReLU": 4, "Linear": 1}
MLP = {"Linear": 3, "ReLU": 2}
OFF = {"torch.backends.cudnn.benchmark": False, "torch.backends.cuda.matmul.allow_tf32": False,
       "torch.backends.cudnn.allow_tf32": True}


# --- the census, on the real torch -----------------------------------------------------------
def _train(model, steps=3, channels_last=False, autocast=False, compile_first=False,
           dtype=torch.float32):
    source = TorchSource()
    source.begin()
    seen = []
    source.subscribe("model", seen.append)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    with source.running():
        if compile_first:
            model = torch.compile(model, backend="eager")
        for _ in range(steps):
            x = torch.randn(4, 3, 8, 8, dtype=dtype)
            if channels_last:
                x = x.to(memory_format=torch.channels_last)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                loss = model(x).float().square().mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        hooks_after = dict(torch.nn.modules.module._global_forward_hooks)
    return seen, hooks_after


def _cnn():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(),
                               torch.nn.Conv2d(8, 8, 3), torch.nn.Flatten(),
                               torch.nn.Linear(8 * 4 * 4, 10))


def test_the_census_counts_the_first_steps_layers_and_then_unhooks():
    (census,), hooks_after = _train(_cnn())
    assert census.modules == {"Conv2d": 2, "ReLU": 1, "Flatten": 1, "Linear": 1}
    assert census.params == {"float32": sum(p.numel() for p in _cnn().parameters())}
    assert census.autocast is False and census.conv_channels_last is False
    assert census.capability is None  # (the CPU)
    assert "Conv2d x2" in census.message and "autocast off" in census.message
    assert hooks_after == {}  # the steps after the first run without the hook


def test_the_census_counts_the_leaf_modules_that_ran_back_to_back():
    """(the fused-loss advice reads them: a Softmax module right before the loss module)"""
    (census,), _ = _train(_cnn())
    assert census.pairs == {"Conv2d>ReLU": 1, "ReLU>Conv2d": 1, "Conv2d>Flatten": 1,
                            "Flatten>Linear": 1}


def test_the_census_sees_autocast_and_channels_last_inputs():
    (census,), _ = _train(_cnn(), channels_last=True, autocast=True)
    assert census.autocast is True  # (torch carries the layout on: every conv's input)
    assert census.conv_channels_last is True and "inputs channels_last" in census.message
    model = _cnn().to(memory_format=torch.channels_last)
    (census,), _ = _train(model)  # NCHW batches into a channels_last model
    assert census.conv_channels_last is False and "NCHW (1 of 2)" in census.message


def test_a_model_compiled_before_its_first_step_is_not_hooked():
    (census,), hooks_after = _train(_cnn(), compile_first=True)
    assert census.modules == {} and "torch.compile" in census.message
    assert census.params  # the optimizer's parameters are still counted
    assert hooks_after == {}


def test_no_census_without_a_listener():
    source = TorchSource()
    source.begin()
    with source.running():
        assert dict(torch.nn.modules.module._global_forward_hooks) == {}


# --- the advice, on synthetic profiles -------------------------------------------------------
def _model(modules=CNN, params=None, autocast=False, channels_last=False,
           capability="8.0", settings=None):
    return {"type": "event", "kind": "model", "t": 0.2, "modules": modules,
            "params": params or {"float32": 1_000_000}, "autocast": autocast,
            "conv_channels_last": channels_last if any("Conv" in m for m in modules)
            else None,
            "capability": capability, "settings": OFF if settings is None else settings,
            "message": f"leaf module calls: {modules}" + (
                f"; GPU compute capability {capability}" if capability else "")}


def _profile(tmp_path, model=None, place=GPU, framework="torch", flags=None, **step_kwargs):
    steps = step_records(**step_kwargs)
    for row in steps:
        row["place"] = place
    extra = [] if model is False else [model or _model()]
    return load(make_profile(tmp_path / "p.jsonl", steps=steps, extra=extra,
                             env={"flags": OFF if flags is None else flags},
                             source=source_info(framework)))


def _advice(profile):
    return {a.id: a for a in advisors.advise(profile, [gpu_model.gpu_model_math])}


def test_a_float32_cnn_on_an_ampere_gpu_gets_cudnn_benchmark_tf32_and_mixed_precision(
        tmp_path):
    found = _advice(_profile(tmp_path))
    assert set(found) == {"cudnn-benchmark", "tf32-matmul", "mixed-precision"}
    bench = found["cudnn-benchmark"]
    assert bench.change.startswith("torch.backends.cudnn.benchmark = True")
    assert "4 convolution calls a step" in bench.title and bench.severity == "medium"
    assert "torch.backends.cudnn.benchmark is False" in bench.evidence
    assert "capability 8.0" in bench.evidence and bench.expected_speedup is None
    assert "paddletune profile train.py" in bench.expected_gain
    tf32 = found["tf32-matmul"]
    assert "allow_tf32 = True" in tf32.change and "1 matrix-product call a" in tf32.evidence
    amp = found["mixed-precision"]
    assert "torch.bfloat16" in amp.change and "GradScaler" not in amp.change  # (Ampere)
    assert all(a.source == 28 and a.confidence == "low" for a in found.values())


def test_a_volta_gpu_gets_float16_with_loss_scaling_and_no_tf32(tmp_path):
    found = _advice(_profile(tmp_path, _model(MLP, capability="7.0")))
    assert set(found) == {"mixed-precision"}
    assert "GradScaler" in found["mixed-precision"].change
    assert "torch.float16" in found["mixed-precision"].change


def test_convolutions_under_autocast_on_nchw_inputs_get_channels_last(tmp_path):
    found = _advice(_profile(tmp_path, _model(autocast=True)))
    assert set(found) == {"cudnn-benchmark", "channels-last"}  # (autocast: no TF32, no AMP)
    change = found["channels-last"].change
    assert "model.to(memory_format=torch.channels_last)" in change and "'cuda:0'" in change
    assert not _advice(_profile(tmp_path, _model(autocast=True, channels_last=True))).get(
        "channels-last")


def test_silent_when_the_settings_are_on_or_the_model_is_half(tmp_path):
    on = {**OFF, "torch.backends.cudnn.benchmark": True,
          "torch.backends.cuda.matmul.allow_tf32": True}
    # (the header's settings, read before the script ran, say off: the census's win)
    assert set(_advice(_profile(tmp_path, _model(settings=on)))) == {"mixed-precision"}
    half = _model(params={"float16": 1_000_000})
    assert set(_advice(_profile(tmp_path, half))) == {"cudnn-benchmark"}


def test_silent_on_the_cpu_without_a_census_or_a_gpu_capability(tmp_path):
    assert _advice(_profile(tmp_path, place="CPUPlace")) == {}
    assert _advice(_profile(tmp_path, model=False)) == {}
    unknown = _advice(_profile(tmp_path, _model(capability=None)))
    assert set(unknown) == {"cudnn-benchmark"}  # (the one that needs no capability)
    # a census without settings (a profile from before it recorded them): the header's
    assert set(_advice(_profile(tmp_path, _model(settings={})))) == {
        "cudnn-benchmark", "tf32-matmul", "mixed-precision"}
    assert set(_advice(_profile(tmp_path, _model(settings={}), flags={}))) == {
        "mixed-precision"}  # (neither recorded anywhere: nothing said of them)


def test_silent_for_a_framework_whose_writer_has_no_such_setting(tmp_path):
    assert _advice(_profile(tmp_path, framework="fluid")) == {}


def test_varying_batch_shapes_lower_cudnn_benchmark_and_say_why(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_model, "_varying_feeds", lambda profile: ["x"])
    bench = _advice(_profile(tmp_path))["cudnn-benchmark"]
    assert bench.severity == "low" and "shapes vary (x)" in bench.evidence


@pytest.mark.parametrize("text, expect", [("8.6", (8, 6)), ("10.0", (10, 0)), (None, None),
                                          ("?", None)])
def test_capability_parsing(text, expect):
    assert gpu_model.capability_of(text) == expect


def test_the_census_stops_looking_after_its_call_limit_or_an_error(monkeypatch):
    from paddletune.sources.torch import census as census_module
    monkeypatch.setattr(census_module, "MAX_CALLS", 3)
    seen = []
    census = census_module.Census(seen.append)
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU())
    for _ in range(4):  # inference only: no optimizer step ends the census
        model(torch.randn(1, 2))
    assert census.modules == {"Linear": 2, "ReLU": 1} and census._hook is None
    assert dict(torch.nn.modules.module._global_forward_hooks) == {}
    broken = census_module.Census(seen.append)
    monkeypatch.setattr(census_module, "autocast_on", lambda: 1 / 0)
    model(torch.randn(1, 2))  # the forward pass goes on; the census unhooks
    assert broken._hook is None and dict(torch.nn.modules.module._global_forward_hooks) == {}


def test_an_input_bound_step_gets_them_at_low_severity(tmp_path):
    profile = _profile(tmp_path, gap_s=0.02)  # the loop waits outside the step: 68% input
    assert profile.summary.input_share >= gpu_model.INPUT_BOUND
    found = _advice(profile)
    assert set(found) == {"cudnn-benchmark", "tf32-matmul", "mixed-precision"}
    assert {a.severity for a in found.values()} == {"low"}


def test_a_census_that_cannot_read_the_device_sends_nothing_and_the_step_goes_on(monkeypatch):
    from paddletune.sources.torch import census as census_module
    monkeypatch.setattr(census_module, "device_capability", lambda place: 1 / 0)
    seen, _ = _train(_cnn(), steps=2)
    assert seen == []


def test_the_census_records_the_settings_the_script_set_before_its_first_step(monkeypatch):
    from paddletune.sources.torch import census as census_module
    monkeypatch.setattr(census_module, "device_capability", lambda place: "8.0")
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", False)
    source = TorchSource()
    source.begin()
    seen = []
    source.subscribe("model", seen.append)
    model = _cnn()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    with source.running():
        torch.backends.cudnn.benchmark = True  # the script's own, after the header was taken
        model(torch.randn(4, 3, 8, 8)).sum().backward()
        optimizer.step()
    (census,) = seen
    assert census.settings["torch.backends.cudnn.benchmark"] is True
    assert set(census.settings) == set(OFF)


# --- a float64 model -------------------------------------------------------------------------
def _f64(profile):
    return advisors.advise(profile, [gpu_model.model_float64])


def test_the_census_of_a_float64_model_counts_its_parameters_as_float64():
    (census,), _ = _train(_cnn().double(), dtype=torch.float64)
    assert census.params == {"float64": sum(p.numel() for p in _cnn().parameters())}
    assert "float64" in census.message


def test_a_float64_model_is_advised_float32_on_the_cpu_and_more_strongly_on_a_gpu(tmp_path):
    half_f64 = _model(MLP, params={"float64": 900_000, "float32": 100_000}, capability=None)
    (cpu,) = _f64(_profile(tmp_path, half_f64, place="CPUPlace"))
    assert cpu.id == "float64-model" and cpu.severity == "medium"
    assert "model = model.float()" in cpu.change and "x = x.float()" in cpu.change
    assert "90% of the model's parameters are float64" == cpu.title
    assert "900,000 of the optimizer's 1,000,000" in cpu.evidence and "SIMD" in cpu.evidence
    assert cpu.figures["float64_share"] == pytest.approx(0.9)
    # the bound: a 10 ms cycle with 9.3 ms of compute, that compute at half the time
    assert "up to 1.87x steps/s if the step's 9.30 ms of compute" in cpu.expected_gain
    (gpu,) = _f64(_profile(tmp_path, _model(MLP, params={"float64": 10})))
    assert gpu.severity == "high" and "1/64" in gpu.evidence


def test_a_float32_model_or_one_without_a_census_gets_no_float64_advice(tmp_path):
    assert _f64(_profile(tmp_path, place="CPUPlace")) == []
    assert _f64(_profile(tmp_path, model=False)) == []
    f64 = _model(MLP, params={"float64": 10})
    assert _f64(_profile(tmp_path, f64, framework="fluid")) == []
    assert set(_advice(_profile(tmp_path, f64))) == set()  # (and no GPU float32 advice)
