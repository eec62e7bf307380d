"""What a PyTorch job's model is made of (records.ModelEvent), for the advice that depends on
it (cuDNN autotuning, TF32, mixed precision, channels_last): a global forward hook on every
module counts the leaf modules called, whether they ran under torch.autocast, and whether the
convolutions' 4-D inputs were channels_last, until the first training step ends. Then the
hook goes (the steps after the first pay nothing), and the census is sent with the optimizer's
parameters by dtype, the compute capability of the GPU they live on and the GPU math settings
then in force (cudnn.benchmark and TF32: the script sets them before its loop, after the
profile's header took the settings it lists).

The hook also goes after MAX_CALLS leaf module calls (a job that does not train, or trains
without a torch.optim optimizer, pays for no more) or if it fails. A model compiled with
torch.compile before its first step is not hooked (a hook in its graph would split it, and
taking the hook out later would make Dynamo compile it again): its modules are not counted;
the parameters are."""

from typing import Callable, Dict, Optional

import torch
from torch.nn.modules.conv import _ConvNd

from ...profile.records import ModelEvent
from ..device_memory import device_index
from ..eager.census import Counted, LeafPairs, StepCensus, top_calls
from .source import gpu_math_settings

MAX_CALLS = 10_000  # leaf module calls looked at, at most, if no training step ends first


class Census(StepCensus):
    def __init__(self, emit: Callable[[ModelEvent], None]):
        self.emit = emit
        self.modules: Dict[str, int] = {}
        self.autocast = False
        self.cpu_autocast: Optional[str] = None  # the dtype of the CPU's autocast, if on
        self.convs = [0, 0]  # convolutions' 4-D inputs seen, and of them channels_last
        self.compiled = False
        self.calls = 0  # leaf module calls seen
        self.pairs = LeafPairs()
        self._hook = torch.nn.modules.module.register_module_forward_hook(self._called)

    def _called(self, module, inputs, output):
        try:
            self._count(module, inputs)
        except Exception:  # noqa: BLE001  (the census never breaks the job's forward pass)
            self.unhook()

    def _count(self, module, inputs):
        if next(module.children(), None) is not None:
            return  # only leaf modules
        name = type(module).__name__
        self.modules[name] = self.modules.get(name, 0) + 1
        self.pairs.called(name)
        self.calls += 1
        if self.calls >= MAX_CALLS:  # a job that does not step (inference): stop looking
            self.unhook()
        if not self.autocast and autocast_on():
            self.autocast = True
        if self.autocast and self.cpu_autocast is None and module.training and \
                torch.is_grad_enabled():  # (training's, not an evaluation's under no_grad
            self.cpu_autocast = cpu_autocast_dtype()  # or eval() before the first step)
        if isinstance(module, _ConvNd) and inputs and isinstance(inputs[0], torch.Tensor):
            layout = channels_last(inputs[0])
            if layout is not None:
                self.convs[0] += 1
                self.convs[1] += layout

    def unhook(self, compiled: bool = False):
        """Take the hook out (torch.compile is about to run: `compiled`)."""
        self.compiled = self.compiled or compiled
        if self._hook is not None:
            self._hook.remove()
            self._hook = None

    def _read(self, optimizer, place: str):
        capability = device_capability(place)
        return (params_by_dtype(optimizer), capability,
                gpu_math_settings() if capability else {})

    def _counted(self) -> Counted:
        if self.compiled and not self.modules:
            lead = "modules not counted (torch.compile)"
        else:
            lead = top_calls("leaf module calls in the first step", self.modules) \
                if self.modules else None
        return Counted(lead, self.modules, self.autocast, ("autocast off", "autocast on"),
                       tuple(self.convs), ("convolution inputs", "channels_last", "NCHW"),
                       self.pairs.counts, self.cpu_autocast, cpu_kernels(self.cpu_autocast))


def autocast_on() -> bool:
    """Whether torch.autocast is on now, for CUDA or the CPU."""
    try:
        return torch.is_autocast_enabled("cuda") or torch.is_autocast_enabled("cpu")
    except TypeError:  # torch before 2.4: no device argument
        return torch.is_autocast_enabled() or torch.is_autocast_cpu_enabled()


def cpu_autocast_dtype() -> Optional[str]:
    """The dtype torch.autocast("cpu") computes in now ("bfloat16"); None while it is off."""
    try:
        if not torch.is_autocast_enabled("cpu"):
            return None
        dtype = torch.get_autocast_dtype("cpu")
    except (TypeError, AttributeError):  # torch before 2.4: no device argument
        if not torch.is_autocast_cpu_enabled():
            return None
        dtype = torch.get_autocast_cpu_dtype()
    return str(dtype).replace("torch.", "")


ONEDNN_KERNELS = {"bfloat16": "_is_mkldnn_bf16_supported",
                  "float16": "_is_mkldnn_fp16_supported"}  # (torch.ops.mkldnn's queries)


def cpu_kernels(dtype: Optional[str]) -> Optional[bool]:
    """Whether oneDNN has kernels for `dtype` on this CPU (bfloat16: AVX-512 or AMX; without
    them PyTorch's products and convolutions in it run on reference kernels, several times
    slower than float32's); None: no dtype, or not known."""
    query = ONEDNN_KERNELS.get(dtype or "")
    if query is None:
        return None
    try:
        return bool(getattr(torch.ops.mkldnn, query)())
    except (AttributeError, RuntimeError):
        return None


def channels_last(x: torch.Tensor) -> Optional[bool]:
    """Whether a 4-D tensor lies channels_last (None: not 4-D, or one channel, where both
    layouts are the same)."""
    if x.dim() != 4 or x.size(1) <= 1:
        return None
    return x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous()


def params_by_dtype(optimizer) -> Dict[str, int]:
    out: Dict[str, int] = {}
    for group in optimizer.param_groups:
        for p in group.get("params", ()):
            if isinstance(p, torch.Tensor):
                dtype = str(p.dtype).replace("torch.", "")
                out[dtype] = out.get(dtype, 0) + p.numel()
    return out


def device_capability(place: str) -> Optional[str]:
    """"8.0" for a CUDAPlace's GPU; None elsewhere."""
    if not place.startswith("CUDAPlace(") or not torch.cuda.is_available():
        return None
    major, minor = torch.cuda.get_device_capability(device_index(place))
    return f"{major}.{minor}"
