"""PaddlePaddle 2.6 / 3.x as a source: steps from the optimizers' step/minimize in the dynamic
graph and from Executor.run in the static graph, DataLoader passes from paddle.io's iterators
with the workers' time per batch, the FLAGS and DataLoader arguments as knobs, and
PADDLETUNE_OVERRIDES applied to every DataLoader built (hooks.py, loaders.py).

Importing this module imports paddle (only done when a Paddle job runs)."""

import re
import warnings
from contextlib import contextmanager
from math import prod
from typing import Dict, List, Optional

with warnings.catch_warnings():  # paddle's import warns that ccache is missing (for C++
    warnings.simplefilter("ignore", UserWarning)  # extensions, which profiling builds none of)
    import paddle

from ...profile.records import Knob, SourceInfo, Terms
from ..eager.source import CUDA_EVENTS, EagerSource
from .version import SUPPORTED, UnsupportedPaddle, check_version, version_tuple

check_version(getattr(paddle, "__version__", "0.0.0"))  # before hooks.py imports paddle.base
from .hooks import PaddleHooks, current_threads  # noqa: E402
from .loaders import place_name  # noqa: E402

__all__ = ["PaddleSource", "SUPPORTED", "UnsupportedPaddle", "check_version",
           "nan_inf_event", "version_tuple"]
LOADER = "paddle.io.DataLoader(dataset, ..., {key}={{value}})"
FLAG_KNOBS = ("FLAGS_allocator_strategy", "FLAGS_fraction_of_gpu_memory_to_use",
              "FLAGS_fraction_of_cpu_memory_to_use", "FLAGS_gpu_memory_limit_mb",
              "FLAGS_eager_delete_tensor_gb", "FLAGS_cudnn_exhaustive_search",
              "FLAGS_conv_workspace_size_limit", "FLAGS_enable_cublas_tensor_op_math",
              "FLAGS_check_nan_inf", "FLAGS_check_nan_inf_level", "FLAGS_use_pinned_memory",
              "FLAGS_paddle_num_threads")
TERMS = Terms(step="a training step (optimizer.step)", call="the training loop's iteration",
              between="between steps", loader="paddle.io.DataLoader",
              graph_step="a training step (Executor.run of the static graph)")
STEPS_FROM = ("optimizer.step (dynamic graph): each step or minimize of the first optimizer "
              "to step (directly, through paddle.amp.GradScaler or paddle.Model.fit) ends a "
              "training step; Executor.run (static graph): each run of a program that is not "
              "a startup program is a step")


# paddle's FLAGS_check_nan_inf error: "(PreconditionNotMet) There are NAN or INF (num_nan=1,
# num_inf=0, num_zero=1) in [device=cpu, op=log, tensor=, dtype=fp32]."
NAN_ERROR = re.compile(r"There are NAN or INF \(num_nan=(\d+), num_inf=(\d+)[^)]*\) in "
                       r"\[[^\]]*?op=([\w.]+)(?:, tensor=([^,\]]*))?")


def _has_cuda() -> bool:
    """Whether this Paddle is built for CUDA (or ROCm, whose places are CUDAPlaces too) and
    sees a device."""
    device = paddle.device
    try:
        built = device.is_compiled_with_cuda() or device.is_compiled_with_rocm()
        return bool(built and device.cuda.device_count() > 0)
    except Exception:  # noqa: BLE001  (a broken driver: no device to measure)
        return False


def nan_inf_event(err: BaseException, step: int) -> Optional[dict]:
    """The nan_inf payload paddle's NaN/Inf check error describes (None: not one)."""
    found = NAN_ERROR.search(str(err))
    if found is None:
        return None
    n_nan, n_inf, op, tensor = found.groups()
    return {"op_type": op, "op_index": None, "output": tensor or None, "inputs": {},
            "n_nan": int(n_nan), "n_inf": int(n_inf), "step": step}


class PaddleSource(EagerSource):
    framework = "paddle"

    def __init__(self):
        check_version(paddle.__version__)
        super().__init__()
        self._threads_set: Optional[int] = None  # the CPU math threads set since the start
        # (by an override, the script or the speed test), None: FLAGS_paddle_num_threads's
        self._threads_kept: Optional[int] = None  # an override's count, kept against the
        # script's own calls
        self._set_threads = None  # paddle's own core.set_num_threads (the hooks wrap it)

    @staticmethod
    def shape_of(item):
        if isinstance(item, paddle.Tensor):
            return item.shape
        shape = getattr(item, "shape", None)  # numpy arrays (a collate_fn's own)
        return shape if isinstance(shape, tuple) else None

    @staticmethod
    def nbytes_of(item, shape=None) -> int:
        if isinstance(item, paddle.Tensor):
            try:  # (not item.size: paddle 3 builds a paddle.Size for it, 10x the time; and
                # item.shape builds a new list: the caller's is taken when it has one)
                return prod(item.shape if shape is None else shape) * item.element_size()
            except Exception:  # noqa: BLE001
                return 0
        return int(getattr(item, "nbytes", 0) or 0)

    def info(self) -> SourceInfo:
        return SourceInfo(self.framework, f"PaddlePaddle {paddle.__version__}", STEPS_FROM,
                          tuple(self.knobs()), TERMS)

    def knobs(self) -> List[Knob]:
        out = [Knob(f"reader.{key}", f"paddle.io.DataLoader({key}=...)", None,
                    LOADER.format(key=key))
               for key in ("num_workers", "batch_size", "prefetch_factor",
                           "use_shared_memory")]
        for flag, value in self.flags().items():
            out.append(Knob(f"flag.{flag}", flag, value,
                            f"paddle.set_flags({{{{'{flag}': {{value}}}}}})"))
        out.append(Knob("threads.intra_op", "CPU math threads (core.set_num_threads)",
                        self.blas_threads(),
                        "paddle.base.core.set_num_threads({value})"))
        return out

    def may_send(self, event: str) -> bool:
        """The CUDA allocator's events only where Paddle has a CUDA device (hooks.py sends
        them on a CUDAPlace)."""
        if event in CUDA_EVENTS:
            return _has_cuda()
        return True

    def out_of_memory(self, exc: BaseException) -> None:
        """An out-of-memory error on a CUDA place: the allocator's figures as a memory_oom
        event (the request read from Paddle's message)."""
        place = place_name(paddle.get_device())
        if place.startswith("CUDAPlace(") and self.bus.listening("memory_oom"):
            from ..device_memory import device_index
            from .gpu import oom_details
            self.bus.emit("memory_oom", oom_details(exc, device_index(place),
                                                    self.timer.batch_size))

    def flags(self) -> Dict[str, object]:
        """{flag: value} of the flags the playbook turns that this paddle has (a flag paddle
        cannot read back, e.g. one of a CUDA build on a CPU build, is left out)."""
        out = {}
        for flag in FLAG_KNOBS:
            try:
                value = paddle.get_flags([flag])[flag]
            except Exception:  # noqa: BLE001
                continue
            out[flag] = value if isinstance(value, (bool, int, float, str)) else str(value)
        return out

    def blas_threads(self) -> Optional[int]:
        """The CPU math threads: what an override set, else FLAGS_paddle_num_threads (what
        paddle passed to its BLAS/OpenMP libraries as it started)."""
        if self._threads_set is not None:
            return self._threads_set
        return current_threads()

    def set_math_threads(self, n: int) -> Optional[int]:
        """Paddle's CPU math threads (core.set_num_threads, past the hooks' wrapper); the
        count before, as blas_threads knows it. None where this paddle cannot set them or the
        hooks are not installed."""
        previous = self.blas_threads()
        if self._set_threads is None or previous is None:
            return None
        self._set_threads(int(n))
        self._threads_set = int(n)
        return previous

    @contextmanager
    def running(self, check_nan: bool = False, compat: bool = False,
                nan_continue: bool = False):
        """The eager block, and with NaN checking on, paddle's NaN/Inf error (the op and
        the counts it names) announced on "nan_inf" as it passes (then raised unchanged).
        With `nan_continue` paddle only prints each finding (FLAGS_check_nan_inf_level=1)
        and nothing is announced."""
        with super().running(check_nan, compat, nan_continue):
            try:
                yield
            except Exception as err:
                event = nan_inf_event(err, self.timer.steps) if check_nan else None
                if event is not None:
                    self.bus.emit("nan_inf", event)
                raise

    def _hooks_for(self, check_nan: bool, nan_continue: bool) -> PaddleHooks:
        return PaddleHooks(self, check_nan, nan_continue)
