"""One typed registry of FLAGS: defaults follow Paddle 1.8, values come from FLAGS_* env vars or set_flags."""

import difflib
import os
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, Optional

from .errors import FlagError

PREFIX = "FLAGS_"
_TRUE = {"1", "true", "yes", "on", "t", "y"}
_FALSE = {"0", "false", "no", "off", "f", "n"}


@dataclass
class Flag:
    """A flag's declaration plus its current value and where that value came from."""

    name: str
    type: type
    default: Any
    doc: str
    valid: str = ""  # human-readable valid range, e.g. "[0, 1]"
    check: Optional[Callable[[Any], bool]] = None
    implemented: bool = True  # False: accepted and recorded, behaviour arrives later
    value: Any = None
    source: str = "default"  # default | env | set_flags

    def parse(self, raw):
        """Convert raw (a string from the environment or a Python value) to this flag's type."""
        if self.type is bool:
            if isinstance(raw, bool):
                return raw
            if isinstance(raw, (int, float)) and raw in (0, 1):
                return bool(raw)
            text = str(raw).strip().lower()
            if text in _TRUE:
                return True
            if text in _FALSE:
                return False
            raise self._bad(raw, "a boolean (true/false, 1/0)")
        if self.type in (int, float):
            expected = (f"{'an integer' if self.type is int else 'a number'}"
                        f"{', ' + self.valid if self.valid else ''}")
            if isinstance(raw, bool):
                raise self._bad(raw, expected)
            try:
                number = self.type(raw) if self.type is float else _to_int(raw)
            except (TypeError, ValueError):
                raise self._bad(raw, expected) from None
            if number != number:  # NaN
                raise self._bad(raw, expected)
            return number
        if not isinstance(raw, str):
            raise self._bad(raw, "a string")
        return raw

    def validate(self, value):
        if self.check is not None and not self.check(value):
            raise self._bad(value, self.valid)
        return value

    def _bad(self, raw, expected):
        return FlagError(f"invalid value {raw!r} for {PREFIX}{self.name}: expected {expected}. "
                         f"{self.doc.split('. ')[0]}. Default: {self.default!r}.")


def _to_int(raw):
    if isinstance(raw, float):
        if not raw.is_integer():
            raise ValueError(raw)
        return int(raw)
    return int(str(raw).strip())


def in_range(lo=None, hi=None):
    """A check accepting lo <= v <= hi (either bound may be None), and its description."""
    def check(v):
        return (lo is None or v >= lo) and (hi is None or v <= hi)
    if lo is not None and hi is not None:
        text = f"a value in [{lo}, {hi}]"
    elif lo is not None:
        text = f"a value >= {lo}"
    else:
        text = f"a value <= {hi}"
    return check, text


def one_of(*choices):
    return (lambda v: v in choices), "one of " + ", ".join(repr(c) for c in choices)


class FlagRegistry:
    """All flags by name (without the FLAGS_ prefix). Reads are plain dict lookups."""

    def __init__(self):
        self._flags: Dict[str, Flag] = {}
        self._values: Dict[str, Any] = {}
        self._listeners = []
        self.version = 0  # bumped on every change, so caches can tell when flags moved

    def define(self, name, type_, default, doc, rule=None, implemented=True):
        if name in self._flags:
            raise ValueError(f"flag {PREFIX}{name} is defined twice")
        check, valid = rule if rule else (None, "")
        flag = Flag(name, type_, default, doc, valid, check, implemented, default)
        self._flags[name] = flag
        self._values[name] = default
        return flag

    def __contains__(self, name):
        return isinstance(name, str) and _strip(name) in self._flags

    def __iter__(self):
        return iter(self._flags.values())

    def get(self, name):
        """Current value of a flag (name with or without the FLAGS_ prefix)."""
        try:  # the common case, a bare name ('check_nan_inf'), without the prefix check
            return self._values[name]
        except (KeyError, TypeError):
            return self._values[self._lookup(name).name]

    def flag(self, name) -> Flag:
        return self._lookup(name)

    def set(self, name, raw, source="set_flags"):
        flag = self._lookup(name)
        value = flag.validate(flag.parse(raw))
        flag.value, flag.source = value, source
        self._values[flag.name] = value
        self.version += 1
        for listener in list(self._listeners):
            listener(flag.name, value)
        return value

    def on_change(self, fn):
        """Call fn(name, value) after each change; returns fn (see remove_listener)."""
        self._listeners.append(fn)
        return fn

    def remove_listener(self, fn):
        if fn in self._listeners:
            self._listeners.remove(fn)

    def reset(self, name):
        flag = self._lookup(name)
        self.set(flag.name, flag.default, source="default")

    def read_environ(self, environ=None):
        """Apply every FLAGS_* variable of environ; unknown names warn, invalid values raise."""
        environ = os.environ if environ is None else environ
        for key, raw in sorted(environ.items()):
            if not key.startswith(PREFIX):
                continue
            name = key[len(PREFIX):]
            if name not in self._flags:
                warnings.warn(f"unknown flag {key} in the environment is ignored{self._hint(name)}",
                              RuntimeWarning, stacklevel=2)
                continue
            try:
                self.set(name, raw, source="env")
            except FlagError as err:
                raise FlagError(f"environment variable {key}={raw!r}: {err} "
                                f"Fix or unset it (unset {key}).") from None

    def _lookup(self, name) -> Flag:
        key = _strip(name)
        try:
            return self._flags[key]
        except KeyError:
            raise FlagError(f"unknown flag {PREFIX}{key}{self._hint(key)}. "
                            f"`paddletune flags` lists every flag.") from None

    def _hint(self, name):
        close = difflib.get_close_matches(name, self._flags, n=1)
        return f" (did you mean {PREFIX}{close[0]}?)" if close else ""


def _strip(name):
    if not isinstance(name, str):
        raise FlagError(f"flag names are strings like 'FLAGS_check_nan_inf', got {name!r}")
    return name[len(PREFIX):] if name.startswith(PREFIX) else name


FLAGS = FlagRegistry()
_d = FLAGS.define
_later = dict(implemented=False)

# --- memory and allocator (Paddle 1.8 defaults) ---------------------------------------------
_d("allocator_strategy", str, "auto_growth",
   "Allocator of each place's memory pool: naive_best_fit pre-allocates chunks sized by the "
   "fraction flags; auto_growth grows on demand and caches freed blocks",
   one_of("naive_best_fit", "auto_growth"))
_d("fraction_of_gpu_memory_to_use", float, 0.92,
   "Chunk size of the naive_best_fit GPU pool as a fraction of available memory; 0 means one "
   "cudaMalloc per allocation (slow, only for measuring true usage)", in_range(0.0, 1.0))
_d("fraction_of_cpu_memory_to_use", float, 1.0,
   "Chunk size of the naive_best_fit CPU pool as a fraction of the place's capacity; 0 means one "
   "underlying allocation per request", in_range(0.0, 1.0))
_d("fraction_of_cuda_pinned_memory_to_use", float, 0.5,
   "Chunk size of the pinned host memory pool as a fraction of host memory", in_range(0.0, 1.0),
   **_later)
_d("initial_cpu_memory_in_mb", int, 500,
   "First chunk of the CPU pool in MB (naive_best_fit)", in_range(0))
_d("initial_gpu_memory_in_mb", int, 0,
   "If > 0, the first GPU chunk is this many MB, overriding the fraction", in_range(0))
_d("reallocate_gpu_memory_in_mb", int, 0,
   "If > 0, each further GPU chunk is this many MB, otherwise the fraction decides",
   in_range(0))
_d("gpu_memory_limit_mb", int, 0,
   "Per-process cap on GPU memory in MB; 0 means no cap. Going past it raises out-of-memory",
   in_range(0))
_d("cpu_memory_limit_mb", int, 0,
   "Cap on the CPU place's pool in MB (paddletune addition, so OOM can be reproduced on a "
   "laptop); 0 means the machine's memory", in_range(0))
_d("gpu_allocator_retry_time", int, 10000,
   "After a failed GPU allocation, wait up to this many ms for memory to be freed (by another "
   "thread)", in_range(0))
_d("use_pinned_memory", bool, True, "Lock host buffers of the CPU allocator in memory", **_later)
_d("init_allocated_mem", bool, False,
   "Fill newly allocated memory with a garbage pattern (0xEF) to expose reads of uninitialised "
   "memory")

# --- garbage collection and scopes ---------------------------------------------------------
_d("eager_delete_tensor_gb", float, 0.0,
   "Garbage collection of temporaries: < 0 off (kept until the step ends); 0 frees each "
   "variable right after its last use; > 0 frees in batches once this many GB of garbage exist "
   "(then together, and at the end of each step)")
_d("memory_fraction_of_eager_deletion", float, 1.0,
   "Fraction of temporaries (largest first) that GC frees; 1 all, 0 none (as in Paddle, only "
   "for CompiledProgram)",
   in_range(0.0, 1.0))
_d("fast_eager_deletion_mode", bool, True,
   "Free device memory without waiting for the kernels using it to finish (stream-ordered)",
   **_later)
_d("eager_delete_scope", bool, True, "Delete local scopes synchronously", **_later)

_d("static_memory_plan", bool, True,
   "Plan each step's temporaries once per feed shape (runtime addition): the executor records "
   "one step's requests, packs the temporaries into one arena by their lifetimes, and later "
   "steps of that shape take the arena in one request; 0 sends every request to the pool")

_d("new_executor_use_cuda_graph", bool, True,
   "Capture each GPU training step of a fixed feed shape into a CUDA graph after 2 eager steps "
   "and replay it with one launch (Paddle's name; its default there is off, here on). Steps "
   "that cannot be captured run eagerly, the reason kept in the profile")

# --- reader --------------------------------------------------------------------------------
_d("reader_queue_speed_test_mode", bool, False,
   "PROFILING ONLY: the executor reads the batch at the head of the reader queue without popping "
   "it, so data loading costs nothing and the no-data throughput ceiling shows. Turn off for "
   "training")

# --- execution -----------------------------------------------------------------------------
_d("check_nan_inf", bool, False,
   "Check every op's outputs for NaN/Inf and stop at the first op that produced one, naming it")
_d("check_nan_inf_level", int, 0,
   "What FLAGS_check_nan_inf does on finding one (from Paddle 2.x): 0 raises at the first; "
   "1 prints each and training goes on, to see which ops and steps produce them (Paddle's "
   "levels 2 and 3, tensor statistics, are not implemented)", in_range(0, 1))
_d("cpu_deterministic", bool, False,
   "Fix the order of gradient summation on CPU so data-parallel results are reproducible",
   **_later)
_d("paddle_num_threads", int, 1,
   "Number of math (BLAS/OpenMP) threads per runtime instance", in_range(1), **_later)
_d("inner_op_parallelism", int, 0, "Threads used inside a single op (0: off)", in_range(0),
   **_later)
_d("benchmark", bool, False,
   "Synchronise after every op so per-op times are exact (slower)", **_later)
_d("enable_parallel_graph", bool, False,
   "ParallelExecutor: run one graph per device instead of one shared graph", **_later)
_d("fuse_parameter_memory_size", float, -1.0,
   "Upper size in MB of one fused all-reduce gradient group; <= 0 means no memory-based grouping",
   **_later)
_d("fuse_parameter_groups_size", int, 1,
   "Maximum gradients per fused group during memory-based merging; only applies when > 1 (the "
   "docs say 3, Paddle's code uses 1)", **_later)
_d("sync_nccl_allreduce", bool, True, "Synchronise the stream after each all-reduce (GPU)",
   **_later)

# --- GPU / cuDNN / cuBLAS ------------------------------------------------------------------
_d("cudnn_exhaustive_search", bool, False,
   "Try every cuDNN convolution algorithm once per shape and keep the fastest (more workspace "
   "memory)", **_later)
_d("cudnn_deterministic", bool, False, "Use only deterministic cuDNN algorithms", **_later)
_d("conv_workspace_size_limit", int, 512,
   "Workspace limit in MB when choosing cuDNN convolution algorithms", in_range(0), **_later)
_d("enable_cublas_tensor_op_math", bool, False,
   "Use Tensor Cores in cuBLAS (faster on V100+, possible precision loss)", **_later)
_d("selected_gpus", str, "", "Comma-separated GPU ids for multi-process training", **_later)
_d("use_mkldnn", bool, False, "Use MKL-DNN kernels on CPU (accepted, no effect here)", **_later)


def set_flags(flags: Dict[str, Any]):
    """fluid.set_flags({'FLAGS_check_nan_inf': True}): validate and set each flag."""
    if not isinstance(flags, dict):
        raise FlagError(f"set_flags expects a dict like {{'FLAGS_check_nan_inf': True}}, "
                        f"got {type(flags).__name__}")
    for name, value in flags.items():  # validate everything first: all or nothing
        flag = FLAGS.flag(name)
        flag.validate(flag.parse(value))
    for name, value in flags.items():
        FLAGS.set(name, value)


def get_flags(names):
    """fluid.get_flags(['FLAGS_x', ...]) -> {'FLAGS_x': value}; a single name is accepted too."""
    if isinstance(names, str):
        names = [names]
    if not isinstance(names, Iterable):
        raise FlagError(f"get_flags expects a flag name or a list of names, got {names!r}")
    return {PREFIX + FLAGS.flag(n).name: FLAGS.get(n) for n in names}


def flags_in_force():
    """{'FLAGS_x': value} for every flag whose value differs from its default."""
    return {PREFIX + f.name: f.value for f in FLAGS if f.value != f.default}


FLAGS.read_environ()
