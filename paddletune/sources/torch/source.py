"""PyTorch as a source: steps from torch.optim's optimizer-step hook, DataLoader passes from
its iterators, worker timing from the forked workers' fetchers (hooks.py), the thread counts
and DataLoader arguments as knobs, PADDLETUNE_OVERRIDES applied to every DataLoader built."""

from operator import attrgetter
from typing import Dict, List, Optional

import torch

from ...profile.records import Knob, SourceInfo, Terms
from ..eager.source import CUDA_EVENTS, EagerSource
from .code import TorchCode

_TENSOR = getattr(torch, "Tensor", None)  # (a torch without one is refused: TorchSource)
_PLAIN_TENSOR = frozenset((_TENSOR,))  # (a subclass, a Parameter, is described item by item)
_CLASS, _SHAPE, _NBYTES = attrgetter("__class__"), attrgetter("shape"), attrgetter("nbytes")
SUPPORTED = (2, 0)  # torch.optim's global step hooks arrived in 2.0
LOADER = "torch.utils.data.DataLoader(..., {key}={{value}})"
TERMS = Terms(step="a training step (optimizer.step to optimizer.step)",
              call="the training loop", between="between steps",
              loader="DataLoader")


class UnsupportedVersion(RuntimeError):
    """The installed torch is older than paddletune supports."""


class TorchSource(EagerSource):
    framework = "torch"

    def __init__(self):
        installed = str(getattr(torch, "__version__", "?"))
        if _version_tuple(installed) < SUPPORTED:  # before hooks.py imports what 2.0 added
            raise UnsupportedVersion(
                f"paddletune supports PyTorch 2.0 and later; this is torch "
                f"{installed}: pip install 'torch>=2.0'")
        super().__init__()

    @staticmethod
    def shape_of(item):
        return item.shape if isinstance(item, torch.Tensor) else None

    @staticmethod
    def nbytes_of(item, shape=None) -> int:
        return item.nbytes if isinstance(item, torch.Tensor) else 0

    @staticmethod
    def describe_flat(batch):
        """(shapes, bytes) of a batch of plain tensors, None otherwise (EagerSource's); read
        with map, in C (no bytecode per tensor: this runs for every batch)."""
        if not _PLAIN_TENSOR.issuperset(map(_CLASS, batch)):
            return None
        return tuple(map(tuple, map(_SHAPE, batch))), sum(map(_NBYTES, batch))

    def info(self) -> SourceInfo:
        return SourceInfo(self.framework, f"PyTorch {torch.__version__}",
                          "optimizer.step: each step of the first optimizer to step ends a "
                          "training step (torch.optim's global step hook)",
                          tuple(self.knobs()), TERMS)

    def knobs(self) -> List[Knob]:
        out = [Knob(f"reader.{key}", f"DataLoader({key}=...)", None, LOADER.format(key=key))
               for key in ("num_workers", "batch_size", "prefetch_factor", "pin_memory",
                           "persistent_workers")]
        out.append(Knob("threads.intra_op", "torch.get_num_threads()", torch.get_num_threads(),
                        "torch.set_num_threads({value})"))
        out.append(Knob("threads.inter_op", "torch.get_num_interop_threads()",
                        torch.get_num_interop_threads(),
                        "torch.set_num_interop_threads({value})"))
        from .handover import sharing_strategy  # (torch.multiprocessing: once supported)
        out.append(Knob("multiprocessing.sharing_strategy",
                        "torch.multiprocessing.get_sharing_strategy()", sharing_strategy(),
                        "torch.multiprocessing.set_sharing_strategy('{value}')"))
        return out

    def may_send(self, event: str) -> bool:
        """The CUDA allocator's events only where a CUDA device is (hooks.py sends them)."""
        if event in CUDA_EVENTS:
            return torch.cuda.is_available()
        return True

    def blas_threads(self) -> Optional[int]:
        return torch.get_num_threads()

    def set_math_threads(self, n: int) -> Optional[int]:
        """The intra-op threads through torch._C's own setter: under a thread override the
        hooks wrap torch.set_num_threads to keep the override's count against the script."""
        previous = torch.get_num_threads()
        torch._C.set_num_threads(n)
        return previous

    def flags(self) -> Dict[str, object]:
        """The settings the report lists beside the machine (PyTorch has no FLAGS)."""
        out = {"torch.get_num_threads": torch.get_num_threads(),
               "torch.get_num_interop_threads": torch.get_num_interop_threads()}
        if torch.cuda.is_available():
            out.update(gpu_math_settings())
        return out

    def out_of_memory(self, exc: BaseException) -> None:
        """A CUDA out-of-memory error: the caching allocator's figures as a memory_oom event
        (the batch and the request included), for the OOM advice."""
        if (isinstance(exc, torch.cuda.OutOfMemoryError) and torch.cuda.is_initialized()
                and self.bus.listening("memory_oom")):
            from . import gpu
            self.bus.emit("memory_oom", gpu.oom_details(exc, torch.cuda.current_device(),
                                                        self.timer.batch_size))

    def _hooks_for(self, check_nan: bool, nan_continue: bool):
        from .hooks import TorchHooks  # torch.optim's step hooks: PyTorch 2.0 and later
        return TorchHooks(self, check_nan, nan_continue)


def gpu_math_settings() -> Dict[str, object]:
    """cuDNN's algorithm search and TF32, as set now (under the names the code writer's
    advice reads them by)."""
    return {TorchCode.cudnn_autotune_setting: bool(torch.backends.cudnn.benchmark),
            TorchCode.tf32_setting: bool(torch.backends.cuda.matmul.allow_tf32),
            "torch.backends.cudnn.allow_tf32": bool(torch.backends.cudnn.allow_tf32)}


def _version_tuple(text: str):
    parts = []
    for piece in text.split("+")[0].split(".")[:2]:
        digits = "".join(c for c in piece if c.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)
