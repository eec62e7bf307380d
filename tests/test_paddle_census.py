"""The Paddle 3 model census (paddletune/sources/paddle/census.py) against the real paddle on
the CPU, in-process, and the model advice (docs/advice.md #28) written in Paddle code on
synthetic profiles."""

import numpy as np
import pytest

paddle = pytest.importorskip("paddle")

from paddletune import advisors  # noqa: E402
from paddletune.advisors import gpu_model  # noqa: E402
from paddletune.profile import load  # noqa: E402
from paddletune.sources.paddle import census as census_module  # noqa: E402
from paddletune.sources.paddle.source import PaddleSource  # noqa: E402
from profiles import make_profile, source_info, step_records  # noqa: E402

ORIGINAL_CALL = paddle.nn.Layer.__dict__["__call__"]


@pytest.fixture(autouse=True)
def dynamic_float32():
    paddle.disable_static()
    yield
    paddle.set_default_dtype("float32")
    assert paddle.nn.Layer.__dict__["__call__"] is ORIGINAL_CALL


class Net(paddle.nn.Layer):
    def __init__(self, formats=("NCHW", "NCHW")):
        super().__init__()
        self.formats = formats
        self.conv1 = paddle.nn.Conv2D(3, 8, 3, data_format=formats[0])
        self.relu = paddle.nn.ReLU()
        self.conv2 = paddle.nn.Conv2D(8, 8, 3, data_format=formats[1])
        self.fc = paddle.nn.Linear(8 * 4 * 4, 10)

    def forward(self, x):
        x = self.relu(self.conv1(x))
        if self.formats[0] != self.formats[1]:  # between the two layouts
            x = x.transpose([0, 3, 1, 2] if self.formats[0] == "NHWC" else [0, 2, 3, 1])
        x = self.conv2(x)
        return self.fc(x.flatten(1))


def _train(model, steps=3, ops=False, nhwc=False, on_step=None):
    """Train `model` under the source with the census listening; (the census records, the
    op_end events, Layer.__call__ as it was after each step)."""
    source = PaddleSource()
    source.begin()
    seen, ops_seen, calls_after = [], [], []
    source.subscribe("model", seen.append)
    if ops:
        source.subscribe("op_end", ops_seen.append)
    optimizer = paddle.optimizer.SGD(0.01, parameters=model.parameters())
    dtype = paddle.get_default_dtype()
    with source.running():
        for step in range(steps):
            x = paddle.to_tensor(np.random.rand(4, 8, 8, 3) if nhwc else
                                 np.random.rand(4, 3, 8, 8), dtype=dtype)
            loss = model(x).square().mean()
            loss.backward()
            optimizer.step()
            optimizer.clear_grad()
            calls_after.append(paddle.nn.Layer.__dict__["__call__"])
            if on_step is not None:
                on_step(step)
    return seen, ops_seen, calls_after


def test_the_census_counts_the_first_steps_layers_and_then_unhooks():
    (census,), _, calls_after = _train(Net())
    assert census.modules == {"Conv2D": 2, "ReLU": 1, "Linear": 1}
    assert census.params == {"float32": sum(int(np.prod(p.shape)) for p in Net().parameters())}
    assert census.autocast is False and census.conv_channels_last is False
    assert census.capability is None and census.settings == {}  # (the CPU)
    assert "Conv2D x2" in census.message and "auto_cast off" in census.message
    assert "2-D convolutions NCHW (2 of 2)" in census.message
    assert calls_after == [ORIGINAL_CALL] * 3  # the steps after the first run unwrapped


def test_the_census_reads_the_convolutions_data_format():
    (census,), _, _ = _train(Net(("NHWC", "NHWC")), nhwc=True)
    assert census.conv_channels_last is True and "2-D convolutions NHWC" in census.message
    (census,), _, _ = _train(Net(("NHWC", "NCHW")), nhwc=True)
    assert census.conv_channels_last is False and "NCHW (1 of 2)" in census.message


def test_the_census_counts_the_leaf_layers_that_ran_back_to_back():
    (census,), _, _ = _train(Net())
    assert census.pairs == {"Conv2D>ReLU": 1, "ReLU>Conv2D": 1, "Conv2D>Linear": 1}


def test_with_ops_timed_the_census_still_goes_after_the_first_step():
    """--ops reads paddle.profiler, which wraps no layer: Layer.__call__ is paddle's own
    again once the first step ended."""
    (census,), _, calls_after = _train(Net(), ops=True)
    assert census.modules == {"Conv2D": 2, "ReLU": 1, "Linear": 1}
    assert calls_after == [ORIGINAL_CALL] * 3


def test_the_census_of_a_float64_model_counts_float64_parameters():
    paddle.set_default_dtype("float64")
    (census,), _, _ = _train(Net())
    assert set(census.params) == {"float64"} and "float64" in census.message


def test_the_census_sees_auto_cast(monkeypatch):
    # (paddle's CPU build turns auto_cast down to O0: the level is what the census reads)
    monkeypatch.setattr(census_module, "autocast_on", lambda: True)
    (census,), _, _ = _train(Net())
    assert census.autocast is True and "auto_cast on" in census.message


def test_no_census_without_a_listener():
    source = PaddleSource()
    source.begin()
    with source.running():
        assert paddle.nn.Layer.__dict__["__call__"] is ORIGINAL_CALL


def test_model_fit_sends_the_census():
    source = PaddleSource()
    source.begin()
    seen = []
    source.subscribe("model", seen.append)
    with source.running():
        net = paddle.nn.Sequential(paddle.nn.Linear(4, 2))
        model = paddle.Model(net)
        model.prepare(paddle.optimizer.SGD(0.1, parameters=net.parameters()),
                      paddle.nn.CrossEntropyLoss())
        data = paddle.io.TensorDataset([paddle.rand([16, 4]), paddle.zeros([16, 1], "int64")])
        model.fit(data, batch_size=8, epochs=1, verbose=0)
    (census,) = seen
    assert census.modules["Linear"] == 1 and census.params == {"float32": 10}


def test_parameter_groups_are_counted():
    net = Net()
    groups = [{"params": [net.conv1.weight, net.conv1.bias]},
              {"params": [net.fc.weight], "learning_rate": 0.1}]
    optimizer = paddle.optimizer.SGD(0.01, parameters=groups)
    assert census_module.params_by_dtype(optimizer) == {"float32": 8 * 3 * 9 + 8 + 128 * 10}


def test_the_census_stops_after_its_call_limit_or_an_error(monkeypatch):
    monkeypatch.setattr(census_module, "MAX_CALLS", 3)
    seen, patched = [], []
    census = census_module.Census(seen.append, lambda owner, name, value: (
        patched.append(owner.__dict__[name]), setattr(owner, name, value)))
    try:
        model = paddle.nn.Sequential(paddle.nn.Linear(2, 2), paddle.nn.ReLU())
        for _ in range(4):  # inference only: no step ends the census
            model(paddle.rand([1, 2]))
        assert census.modules == {"Linear": 2, "ReLU": 1} and not census.active
        assert paddle.nn.Layer.__dict__["__call__"] is ORIGINAL_CALL
        broken = census_module.Census(seen.append, lambda owner, name, value: setattr(
            owner, name, value))
        monkeypatch.setattr(census_module, "autocast_on", lambda: 1 / 0)
        model(paddle.rand([1, 2]))  # the forward pass goes on; the census unhooks
        assert not broken.active and paddle.nn.Layer.__dict__["__call__"] is ORIGINAL_CALL
    finally:
        paddle.nn.Layer.__call__ = ORIGINAL_CALL
    assert seen == []


def test_a_census_that_cannot_read_the_device_sends_nothing_and_the_step_goes_on(monkeypatch):
    monkeypatch.setattr(census_module, "device_capability", lambda place: 1 / 0)
    seen, _, calls_after = _train(Net(), steps=2)
    assert seen == [] and calls_after == [ORIGINAL_CALL] * 2


def test_the_settings_the_script_sets_before_its_loop_are_the_ones_recorded(monkeypatch):
    monkeypatch.setattr(census_module, "device_capability", lambda place: "8.0")
    monkeypatch.setattr(census_module, "gpu_math_settings", lambda: {
        census_module.CUDNN_SEARCH: flags["search"]})
    flags = {"search": False}
    seen, _, _ = _train(Net(), steps=1)
    assert seen[0].settings == {"FLAGS_cudnn_exhaustive_search": False}
    assert seen[0].capability == "8.0" and "GPU compute capability 8.0" in seen[0].message


# --- the advice, written in Paddle code -------------------------------------------------------
GPU = "CUDAPlace(0)"
OFF = {"FLAGS_cudnn_exhaustive_search": False, "paddle.base.core.get_cublas_switch()": False}


def _model(modules, capability="8.0", autocast=False, nhwc=False, settings=None,
           params=None):
    return {"type": "event", "kind": "model", "t": 0.2, "modules": modules,
            "params": params or {"float32": 1_000_000}, "autocast": autocast,
            "conv_channels_last": nhwc if "Conv2D" in modules else None,
            "capability": capability, "settings": OFF if settings is None else settings,
            "message": f"leaf layer calls: {modules}"}


def _advice(tmp_path, model, place=GPU, rules=(gpu_model.gpu_model_math,)):
    steps = step_records()
    for row in steps:
        row["place"] = place
    profile = load(make_profile(tmp_path / "p.jsonl", steps=steps, extra=[model],
                                source=source_info("paddle")))
    return {a.id: a for a in advisors.advise(profile, list(rules))}


def test_a_float32_paddle_cnn_on_an_ampere_gpu_gets_the_changes_in_paddle_code(tmp_path):
    found = _advice(tmp_path, _model({"Conv2D": 4, "BatchNorm2D": 4, "Linear": 1}))
    assert set(found) == {"cudnn-benchmark", "tf32-matmul", "mixed-precision"}
    bench = found["cudnn-benchmark"]
    assert "paddle.set_flags({'FLAGS_cudnn_exhaustive_search': True})" in bench.change
    assert "FLAGS_cudnn_exhaustive_search is False" in bench.evidence
    assert "4 convolution calls a step with cuDNN's algorithm search off" == bench.title
    assert "set_cublas_switch(True)" in found["tf32-matmul"].change
    amp = found["mixed-precision"].change
    assert "paddle.amp.auto_cast(dtype='bfloat16')" in amp and "GradScaler" not in amp


def test_paddle_defaults_and_volta_and_nhwc(tmp_path):
    tf32_on = {**OFF, "paddle.base.core.get_cublas_switch()": True}  # (Paddle's default)
    found = _advice(tmp_path, _model({"Linear": 3}, capability="7.0", settings=tf32_on))
    assert set(found) == {"mixed-precision"}
    assert "paddle.amp.GradScaler" in found["mixed-precision"].change
    assert "scaler.step(optimizer)" in found["mixed-precision"].change
    found = _advice(tmp_path, _model({"Conv2D": 2}, autocast=True))
    assert set(found) == {"cudnn-benchmark", "channels-last"}
    assert "data_format='NHWC'" in found["channels-last"].change
    assert "channels-last" not in _advice(tmp_path, _model({"Conv2D": 2}, autocast=True,
                                                           nhwc=True))
    searching = {**OFF, "FLAGS_cudnn_exhaustive_search": True}
    assert "cudnn-benchmark" not in _advice(tmp_path, _model({"Conv2D": 2},
                                                             settings=searching))
    # a census without the settings (a CPU build read them): nothing said about them
    assert set(_advice(tmp_path, _model({"Conv2D": 2}, settings={}))) == {"mixed-precision"}


def test_paddle_multi_head_attention_counts_as_matrix_products(tmp_path):
    found = _advice(tmp_path, _model({"MultiHeadAttention": 2, "LayerNorm": 2}))
    assert set(found) == {"tf32-matmul", "mixed-precision"}


def test_a_static_programs_changes_are_written_as_static_graph_code(tmp_path):
    """The census of a static program: mixed precision through the optimizer, the NHWC
    layout and the float32 dtype where the program is built, not dynamic-graph code."""
    static = {"graph": "static"}
    found = _advice(tmp_path, {**_model({"conv2d": 4, "matmul": 1}), **static})
    amp = found["mixed-precision"].change
    assert ("optimizer = paddle.static.amp.decorate(optimizer, level='O1', "
            "dtype='bfloat16')") in amp and "auto_cast" not in amp
    volta = _advice(tmp_path, {**_model({"matmul": 3}, capability="7.0"), **static})
    assert "dtype='float16')  # dynamic loss scaling" in volta["mixed-precision"].change
    nhwc = _advice(tmp_path, {**_model({"conv2d": 2}, autocast=True), **static,
                              "conv_channels_last": False})
    change = nhwc["channels-last"].change
    assert "paddle.static.nn.conv2d(image, num_filters, 3, data_format='NHWC')" in change
    assert "paddle.nn.Conv2D" not in change
    wide = {**_model({"matmul": 3}, capability=None, settings={},
                     params={"float64": 1_000}), **static}
    (advice,) = _advice(tmp_path, wide, place="CPUPlace",
                        rules=(gpu_model.model_float64,)).values()
    assert "paddle.static.data('x', shape=[None, features], dtype='float32')" in advice.change
    assert "model.float()" not in advice.change


def test_a_float64_paddle_model_is_advised_float32_in_paddle_code(tmp_path):
    model = _model({"Linear": 3}, capability=None, settings={}, params={"float64": 1_000})
    (advice,) = _advice(tmp_path, model, place="CPUPlace",
                        rules=(gpu_model.model_float64,)).values()
    assert advice.id == "float64-model" and advice.severity == "medium"
    assert "paddle.set_default_dtype('float32')" in advice.change
    assert "x.astype('float32')" in advice.change


# --- a static-graph job: the census of its program ------------------------------------------
def _static_program(dtype="float32", data_format="NCHW"):
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        shape = [None, 3, 8, 8] if data_format == "NCHW" else [None, 8, 8, 3]
        x = paddle.static.data("x", shape, dtype)
        features = paddle.nn.Conv2D(3, 4, 3, data_format=data_format)(x)
        loss = paddle.nn.Linear(4 * 6 * 6, 2)(paddle.flatten(features, 1)).mean()
        paddle.optimizer.SGD(0.1).minimize(loss)
    return main, startup, loss


@pytest.fixture
def static_mode():
    paddle.enable_static()
    yield
    paddle.disable_static()


PARAMS = 4 * 3 * 9 + 4 + 144 * 2 + 2


def test_a_static_programs_census_counts_its_forward_ops_and_parameters(static_mode):
    census = census_module.program_census(_static_program()[0], "CPUPlace")
    assert census.graph == "static"
    assert census.modules["conv2d"] == 1 and census.modules["matmul"] == 1
    assert not any(name.endswith(("_grad", "sgd_")) for name in census.modules)
    assert census.params == {"float32": PARAMS} and census.autocast is False
    assert census.conv_channels_last is False and census.settings == {}
    assert census.message.startswith("forward ops of the training program: conv2d x1, "
                                     "matmul x1; parameters: 402 float32")
    nhwc = census_module.program_census(_static_program(data_format="NHWC")[0], "CPUPlace")
    assert nhwc.conv_channels_last is True
    assert gpu_model.layer_calls(census) == {"convolutions": 1, "matrix products": 1}


def test_a_legacy_programs_census_is_the_same(static_mode):
    with paddle.pir_utils.OldIrGuard():
        census = census_module.program_census(_static_program()[0], "CPUPlace")
    assert census.modules["conv2d"] == 1 and census.modules["matmul_v2"] == 1
    assert census.params == {"float32": PARAMS} and census.conv_channels_last is False
    assert gpu_model.layer_calls(census) == {"convolutions": 1, "matrix products": 1}


def test_bfloat16_and_float64_programs(static_mode):
    main = paddle.static.Program()
    with paddle.static.program_guard(main, paddle.static.Program()):
        x = paddle.static.data("x", [4, 8], "bfloat16")
        paddle.matmul(x, paddle.static.data("w", [8, 2], "bfloat16"))
    half = census_module.program_census(main, "CPUPlace")
    assert half.autocast is True and "float16/bfloat16 compute" in half.message
    paddle.set_default_dtype("float64")
    wide = census_module.program_census(_static_program("float64")[0], "CPUPlace")
    assert wide.params == {"float64": PARAMS}


def test_a_static_job_sends_its_first_training_programs_census_once(static_mode):
    source = PaddleSource()
    source.begin()
    seen = []
    source.subscribe("model", seen.append)
    with source.running():
        main, startup, loss = _static_program()  # (its layers are called while it is built)
        exe = paddle.static.Executor(paddle.CPUPlace())
        exe.run(startup)
        assert seen == []  # (a startup program has no census)
        for _ in range(3):
            exe.run(main, feed={"x": np.random.rand(2, 3, 8, 8).astype("float32")},
                    fetch_list=[loss])
        assert paddle.nn.Layer.__dict__["__call__"] is ORIGINAL_CALL
    (census,) = seen
    assert census.modules["conv2d"] == 1 and census.params == {"float32": PARAMS}


def test_an_evaluation_program_run_first_is_not_the_census(static_mode):
    source = PaddleSource()
    source.begin()
    seen = []
    source.subscribe("model", seen.append)
    with source.running():
        main, startup, loss = _static_program()
        evaluation = paddle.static.Program()
        with paddle.static.program_guard(evaluation, paddle.static.Program()):
            x = paddle.static.data("x", [None, 4], "float32")
            out = paddle.matmul(x, paddle.static.data("w", [4, 2], "float32")).mean()
        exe = paddle.static.Executor(paddle.CPUPlace())
        exe.run(startup)
        feed = {"x": np.ones((2, 4), "float32"), "w": np.ones((4, 2), "float32")}
        for _ in range(2):
            exe.run(evaluation, feed=feed, fetch_list=[out])
        assert seen == []  # (no backward pass: not a training program)
        exe.run(main, feed={"x": np.random.rand(2, 3, 8, 8).astype("float32")},
                fetch_list=[loss])
    (census,) = seen
    assert census.modules["conv2d"] == 1 and census.params == {"float32": PARAMS}


def test_an_elementwise_multiply_is_not_a_matrix_product(static_mode):
    main = paddle.static.Program()
    with paddle.static.program_guard(main, paddle.static.Program()):
        x = paddle.static.data("x", [4, 8], "bfloat16")
        paddle.multiply(x, x)  # (bfloat16, but not a layer autocast speeds up)
        paddle.matmul(x.astype("float32"), paddle.static.data("w", [8, 2], "float32"))
    census = census_module.program_census(main, "CPUPlace")
    assert "matmul x1" in census.message and "multiply" not in census.message
    assert census.autocast is False
