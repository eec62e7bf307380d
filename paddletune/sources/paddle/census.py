"""What a Paddle 3 dynamic-graph job's model is made of (records.ModelEvent), for the advice
that depends on it (cuDNN's algorithm search, TF32, mixed precision, NHWC convolutions, a
float64 model), as the PyTorch source's census does it.

Paddle has no global forward hook, so the census wraps `paddle.nn.Layer.__call__` (through the
hooks' `patch`, which restores it) until the first training step ends: each leaf layer's call
(a layer without sublayers) is counted by class, with whether paddle.amp.auto_cast was on and,
for 2-D convolutions, their data_format. Then the wrapper goes (or, where another wrapper was
put over it since, passes calls through untouched), and the census is sent with the
optimizer's parameters by dtype, the GPU's compute capability and the GPU math settings then in
force: FLAGS_cudnn_exhaustive_search and the cuBLAS TF32 switch (on by default in Paddle).

The wrapper also goes after MAX_CALLS leaf layer calls (a job that does not train) or if it
fails: the census never breaks the job's forward pass.

A static-graph job builds its layers once, before any step: its census (`program_census`) is
read from the program of its first training run instead (the first with a backward pass):
the forward ops by type ("conv2d": 2, not the layers: the ops before the first gradient op),
the parameters by dtype, the convolutions' data_format, and a convolution or matrix product
computing in float16 or bfloat16 as auto_cast on."""

from dataclasses import replace
from math import prod
from typing import Callable, Dict, Iterable, Optional, Tuple

import paddle

from ...profile.records import ModelEvent
from ..device_memory import device_index
from ..eager.census import (Counted, LeafPairs, StepCensus, conv_op, matmul_op, model_event,
                            top_calls)
from .code import PaddleCode

MAX_CALLS = 10_000  # leaf layer calls looked at, at most, if no training step ends first
NCHW, NHWC = "NCHW", "NHWC"  # a 2-D convolution's data_format
CUDNN_SEARCH = PaddleCode.cudnn_autotune_setting  # FLAGS_cudnn_exhaustive_search
TF32_SWITCH = PaddleCode.tf32_setting  # paddle.base.core.get_cublas_switch()
AUTO_CAST = ("auto_cast off", "auto_cast on")
CONV_WORDS = ("2-D convolutions", NHWC, NCHW)


class Census(StepCensus):
    def __init__(self, emit: Callable[[ModelEvent], None], patch: Callable):
        self.emit = emit
        self.modules: Dict[str, int] = {}
        self.autocast = False
        self.convs = [0, 0]  # 2-D convolution calls seen, and of them NHWC
        self.calls = 0
        self.pairs = LeafPairs()
        self.active = True
        self._original = original = paddle.nn.Layer.__call__
        census = self

        def __call__(layer, *inputs, **kwargs):
            if census.active:
                census._called(layer)
            return original(layer, *inputs, **kwargs)

        __call__.__wrapped__ = original
        __call__.__doc__ = original.__doc__
        self._wrapper = __call__
        patch(paddle.nn.Layer, "__call__", __call__)

    def _called(self, layer):
        try:
            self._count(layer)
        except Exception:  # noqa: BLE001  (the census never breaks the job's forward pass)
            self.unhook()

    def _count(self, layer):
        if layer._sub_layers:
            return  # only leaf layers
        name = type(layer).__name__
        self.modules[name] = self.modules.get(name, 0) + 1
        self.pairs.called(leaf_name(layer))
        self.calls += 1
        if self.calls >= MAX_CALLS:
            self.unhook()
        if not self.autocast and autocast_on():
            self.autocast = True
        layout = getattr(layer, "_data_format", None)
        if layout in (NCHW, NHWC) and isinstance(layer, paddle.nn.layer.conv._ConvNd):
            self.convs[0] += 1
            self.convs[1] += layout == NHWC

    def unhook(self):
        """Stop counting: the original __call__ back where the wrapper is still the outermost
        (else the wrapper passes calls through, and the hooks' removal restores it)."""
        if not self.active:
            return
        self.active = False
        if paddle.nn.Layer.__dict__.get("__call__") is self._wrapper:
            paddle.nn.Layer.__call__ = self._original

    def _read(self, optimizer, place: str):
        capability = device_capability(place)
        return (params_by_dtype(optimizer), capability,
                gpu_math_settings() if capability else {})

    def _counted(self) -> Counted:
        lead = top_calls("leaf layer calls in the first step", self.modules) \
            if self.modules else None
        return Counted(lead, self.modules, self.autocast, AUTO_CAST, tuple(self.convs),
                       CONV_WORDS, self.pairs.counts)


def leaf_name(layer) -> str:
    """A leaf layer's class name, or for a CrossEntropyLoss that applies no softmax, that it
    does not: paddle's `CrossEntropyLoss(use_softmax=False)` takes probabilities, unlike
    PyTorch's CrossEntropyLoss, so after a Softmax it is no double softmax (the fused-loss
    advice reads the pairs)."""
    name = type(layer).__name__
    if name == "CrossEntropyLoss" and getattr(layer, "use_softmax", True) is False:
        return "CrossEntropyLoss(use_softmax=False)"
    return name


def autocast_on() -> bool:
    """Whether paddle.amp.auto_cast is on now (its level above O0)."""
    enabled = getattr(paddle.amp, "is_autocast_enabled", None)  # paddle 3.1 and later
    if enabled is not None:
        return bool(enabled())
    tracer = paddle.base.framework._dygraph_tracer()
    return tracer is not None and tracer._amp_level != paddle.base.core.AmpLevel.O0


def dtype_name(dtype) -> str:
    """"float32" for paddle.float32 (and for a PIR DataType.FLOAT32)."""
    return str(dtype).rpartition(".")[2].lower()


def params_by_dtype(optimizer) -> Dict[str, int]:
    """The optimizer's parameter elements by dtype (its parameter list holds tensors, or
    groups: {"params": [...], ...})."""
    out: Dict[str, int] = {}
    for item in getattr(optimizer, "_parameter_list", None) or ():
        for p in (item.get("params", ()) if isinstance(item, dict) else (item,)):
            if isinstance(p, paddle.Tensor):
                dtype = dtype_name(p.dtype)
                out[dtype] = out.get(dtype, 0) + prod(p.shape)
    return out


def device_capability(place: str) -> Optional[str]:
    """"8.0" for a CUDAPlace's GPU; None elsewhere."""
    if not place.startswith("CUDAPlace(") or not paddle.is_compiled_with_cuda():
        return None
    major, minor = paddle.device.cuda.get_device_capability(device_index(place))
    return f"{major}.{minor}"


def gpu_math_settings() -> Dict[str, object]:
    """cuDNN's algorithm search and cuBLAS's TF32 switch, as set now (what this paddle can
    read back of them)."""
    out: Dict[str, object] = {}
    try:
        out[CUDNN_SEARCH] = bool(paddle.get_flags([CUDNN_SEARCH])[CUDNN_SEARCH])
    except Exception:  # noqa: BLE001  (a CPU build has no such flag)
        pass
    switch = getattr(paddle.base.core, "get_cublas_switch", None)
    if switch is not None and paddle.is_compiled_with_cuda():
        out[TF32_SWITCH] = bool(switch())
    return out


HALF = ("float16", "bfloat16")


def trains(program) -> bool:
    """Whether the program has a backward pass (a gradient op): a training program, not an
    evaluation or inference one (False when it cannot be read)."""
    try:
        return any(_op_name(op).endswith("_grad") for op in program.global_block().ops)
    except Exception:  # noqa: BLE001
        return False


def program_census(program, place: str) -> Optional[ModelEvent]:
    """The census of a static-graph training program (a PIR program or a legacy one; None if
    it cannot be read: the census never breaks the job's run)."""
    try:
        return _program_census(program, place)
    except Exception:  # noqa: BLE001
        return None


def _heavy(name: str) -> bool:
    """A convolution (conv2d, conv2d_transpose, depthwise_conv2d, ...) or a matrix product."""
    return conv_op(name) or matmul_op(name)


def _program_census(program, place: str) -> ModelEvent:
    ops = [(_op_name(op), op) for op in program.global_block().ops]
    params = _program_params(program, ops)
    capability = device_capability(place)
    settings = gpu_math_settings() if capability else {}
    counts: Dict[str, int] = {}
    convs, nhwc, half = 0, 0, False
    for name, op in ops:
        if name.endswith("_grad"):
            break  # the backward pass (and the update after it) begins
        if name in ("data", "parameter", "feed", "fetch"):
            continue
        counts[name] = counts.get(name, 0) + 1
        if _heavy(name):
            half = half or _result_dtype(op) in HALF
        layout = _attr(op, "data_format") if name.startswith(("conv2d", "depthwise_conv2d")) \
            else None
        if layout in (NCHW, NHWC):
            convs += 1
            nhwc += layout == NHWC
    heavy = {name: n for name, n in counts.items() if _heavy(name)}
    lead = top_calls("forward ops of the training program", heavy) if heavy else \
        "forward ops of the training program: no convolution or matrix product"
    event = model_event(Counted(lead, counts, half, ("auto_cast off", "float16/bfloat16 compute"),
                                (convs, nhwc), CONV_WORDS), params, capability, settings)
    return replace(event, graph="static")


def _op_name(op) -> str:
    """"conv2d" for PIR's pd_op.conv2d (and a legacy op's type)."""
    name = op.name() if callable(getattr(op, "name", None)) else op.type
    return str(name).rpartition(".")[2]


def _program_params(program, ops: Iterable[Tuple[str, object]]) -> Dict[str, int]:
    out: Dict[str, int] = {}
    if hasattr(program, "all_parameters"):  # a legacy Program
        values = [(p.dtype, p.shape) for p in program.all_parameters()]
    else:  # PIR: each parameter is a builtin.parameter op's result
        values = [(op.result(0).dtype, op.result(0).shape) for name, op in ops
                  if name == "parameter"]
    for dtype, shape in values:
        dtype = dtype_name(dtype)
        out[dtype] = out.get(dtype, 0) + prod(int(n) for n in shape)
    return out


def _result_dtype(op) -> str:
    try:
        return dtype_name(op.result(0).dtype)
    except Exception:  # noqa: BLE001  (a legacy op: its output variable's)
        block = op.block
        return dtype_name(block.var(op.output_arg_names[0]).dtype)


def _attr(op, name: str):
    try:
        return op.attrs().get(name)
    except Exception:  # noqa: BLE001  (a legacy op)
        return op.attr(name) if op.has_attr(name) else None
