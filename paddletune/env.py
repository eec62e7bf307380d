"""The machine a job ran on (Python, NumPy/BLAS, CPU, memory, GPUs, FLAGS) for headers and `env`:
`collect_env()` describes this one as a plain dict (what a profile header records), and
`format_env()` turns that dict, or a profile's typed records.Env, into text rows."""

import os
import platform
import socket
import sys
from typing import List, Optional, Tuple, Union

import numpy as np
import psutil

from . import __version__
from .probes import nvml
from .profile import env_record, records

THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "CPU_NUM",
               "CUDA_VISIBLE_DEVICES", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")
GIB = 1024 ** 3


def _safe(fn, default=None):
    """fn(), or `default` when it fails: a part of the environment is never worth a crash."""
    try:
        return fn()
    except Exception:
        return default


def collect_env() -> dict:
    """Describe this machine and interpreter; never raises (unknown parts are None)."""
    return {"python": platform.python_version(),
            "implementation": platform.python_implementation(),
            "executable": sys.executable,
            "platform": _safe(platform.platform),
            "host": _safe(socket.gethostname),
            "paddletune": __version__,
            "numpy": _safe(numpy_info),
            "cpu": _safe(cpu_info),
            "memory": _safe(memory_info),
            "gpu": _safe(nvml.gpu_summary) or _unavailable("NVML query failed"),
            "cupy": _safe(cupy_info) or _unavailable("CuPy query failed"),
            "flags": _safe(_flags_in_force),
            "env_vars": env_vars()}


def _unavailable(reason):
    return {"available": False, "reason": reason}


def blas_name(info: dict):
    """'OpenBLAS 0.3.27 ...' from runtime.blas.blas_info(): family and version, or None."""
    family, version = info.get("family"), info.get("version")
    if not family:
        return None
    if not version:
        return family
    version = " ".join(version.split())
    return version if version.lower().startswith(family.lower()) else f"{family} {version}"


def numpy_info() -> dict:
    from runtime import blas  # here: importing the runtime reads FLAGS_*, which may be invalid
    info = _safe(blas.blas_info, {})
    return {"version": np.__version__, "blas": blas_name(info), "blas_path": info.get("path"),
            "blas_threads": info.get("threads")}


def cpu_model():
    """The CPU's marketing name: /proc/cpuinfo on Linux, else platform.processor()."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def cpu_info() -> dict:
    usable = _safe(lambda: len(os.sched_getaffinity(0)))
    return {"model": _safe(cpu_model), "logical_cores": _safe(psutil.cpu_count),
            "physical_cores": _safe(lambda: psutil.cpu_count(logical=False)),
            "usable_cores": usable}


def memory_info() -> dict:
    vm = psutil.virtual_memory()
    return {"total_bytes": vm.total, "available_bytes": vm.available}


def cupy_info() -> dict:
    from runtime import backend
    module, count, reason = backend.cupy_status()
    installed = sys.modules.get("cupy")  # imported even when it found no GPU
    return {"available": module is not None,
            "version": getattr(installed, "__version__", None),
            "devices": count, "reason": reason or None}


def _flags_in_force():
    from runtime import flags
    return flags.flags_in_force()


def env_vars() -> dict:
    """The set thread/device variables and every FLAGS_* variable, sorted by name."""
    names = [k for k in THREAD_VARS if k in os.environ]
    names += sorted(k for k in os.environ if k.startswith("FLAGS_"))
    return {k: os.environ[k] for k in names}


# --- text ----------------------------------------------------------------------------------------
Rows = List[Tuple[str, str]]


def format_env(env: Union[records.Env, dict, None]) -> Rows:
    """(label, value) rows of plain text for `paddletune env` and report headers.

    Takes a profile's records.Env or the dict collect_env() returns (including the shorter
    ones of old profiles, and None): missing parts read N/A."""
    if isinstance(env, records.Env):
        return _rows(env, env.flags)
    typed = env_record(env or {})
    # the typed Env reads a whole float (FLAGS_x = 0.0) as an int: show collect_env()'s own
    return _rows(typed, (env or {})["flags"] if typed.flags is not None else None)


def _rows(env: records.Env, flags: Optional[dict]) -> Rows:
    rows = [("Python", _python_row(env)), ("Platform", _text(env.platform)),
            ("paddletune", _text(env.paddletune))]
    rows += _numpy_rows(env.numpy)
    rows += [("CPU", _cpu_row(env.cpu)), ("Memory", _memory_row(env.memory))]
    rows += _gpu_rows(env.gpu)
    rows.append(("CuPy", _cupy_row(env.cupy)))
    rows += _mapping_rows("FLAGS", flags, "none changed from the defaults")
    rows += _mapping_rows("Environment", env.env_vars, "no thread/device variables set")
    return rows


def _text(value) -> str:
    return "N/A" if value is None else str(value)


def _gib(n_bytes: Optional[int]) -> str:
    return "N/A" if n_bytes is None else f"{n_bytes / GIB:.1f} GiB"


def _python_row(env: records.Env) -> str:
    parts = [_text(env.python)]
    if env.implementation:
        parts.append(f"({env.implementation})")
    if env.executable:
        parts.append(env.executable)
    return " ".join(parts)


def _numpy_rows(numpy: records.NumpyInfo) -> Rows:
    blas = _text(numpy.blas)
    if numpy.blas_threads is not None:
        blas += f", {numpy.blas_threads} thread(s)"
    rows = [("NumPy", _text(numpy.version)), ("BLAS", blas)]
    if numpy.blas_path:
        rows.append(("BLAS library", numpy.blas_path))
    return rows


def _cpu_row(cpu: records.CpuInfo) -> str:
    counts = [f"{n} {label}" for n, label in ((cpu.logical_cores, "logical"),
                                             (cpu.physical_cores, "physical"),
                                             (cpu.usable_cores, "usable"))
              if n is not None]
    cores = f" ({', '.join(counts)} cores)" if counts else ""
    return f"{_text(cpu.model)}{cores}"


def _memory_row(memory: records.MemoryInfo) -> str:
    if memory.total_bytes is None:
        return "N/A"
    return f"{_gib(memory.total_bytes)} total, {_gib(memory.available_bytes)} available"


def _gpu_rows(gpu: records.GpuInfo) -> Rows:
    if not gpu.available:
        return [("GPU", f"N/A: {gpu.reason or 'unknown'}")]
    driver = f" (driver {gpu.driver})" if gpu.driver else ""
    return [(f"GPU {d.index}", f"{_text(d.name)}, {_gib(d.memory_total_bytes)}{driver}")
            for d in gpu.devices or (records.GpuDevice(),)]


def _cupy_row(cupy: records.CupyInfo) -> str:
    if cupy.available:
        return f"{_text(cupy.version)}, {cupy.devices or 0} device(s)"
    version = f"{cupy.version} installed; " if cupy.version else ""
    return f"N/A: {version}{cupy.reason or 'unknown'}"


def _mapping_rows(label, mapping, empty) -> Rows:
    if mapping is None:
        return [(label, "N/A")]
    if not mapping:
        return [(label, empty)]
    return [(name, str(value)) for name, value in mapping.items()]
