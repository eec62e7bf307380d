"""collect_env(): the shape of the environment record, its sources, failures as N/A; format_env rows."""

import json
import os
import platform
import sys
import time
import types

import numpy as np
import psutil
import pytest
from profiles import DEFAULT_ENV

import paddletune
from paddletune import env
from paddletune.probes import nvml
from runtime import backend, blas, flags

TOP_KEYS = {"python", "implementation", "executable", "platform", "host", "paddletune", "numpy",
            "cpu", "memory", "gpu", "cupy", "flags", "env_vars"}


@pytest.fixture
def no_gpu(monkeypatch):
    """No pynvml and no CuPy, whatever this machine has."""
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.delitem(sys.modules, "cupy", raising=False)  # imported by a GPU test before
    monkeypatch.setattr(backend, "cupy_status", lambda: (None, 0, "CuPy is not installed"))


def test_shape_and_values(no_gpu):
    e = env.collect_env()
    assert set(e) == TOP_KEYS
    assert e["python"] == platform.python_version() and e["executable"] == sys.executable
    assert e["implementation"] == platform.python_implementation()
    assert e["paddletune"] == paddletune.__version__
    assert set(e["numpy"]) == {"version", "blas", "blas_path", "blas_threads"}
    assert e["numpy"]["version"] == np.__version__
    assert e["numpy"]["blas_threads"] == blas.get_blas_threads()
    assert set(e["cpu"]) == {"model", "logical_cores", "physical_cores", "usable_cores"}
    assert e["cpu"]["logical_cores"] == psutil.cpu_count() >= 1
    assert 1 <= (e["cpu"]["usable_cores"] or 1) <= e["cpu"]["logical_cores"]
    assert e["memory"]["total_bytes"] >= e["memory"]["available_bytes"] > 0
    assert e["gpu"] == {"available": False, "driver": None, "devices": [],
                        "reason": "pynvml is not installed (pip install nvidia-ml-py)"}
    assert e["cupy"] == {"available": False, "version": None, "devices": 0,
                         "reason": "CuPy is not installed"}
    assert e["flags"] == flags.flags_in_force()
    json.dumps(e)  # goes into the profile header as is


def test_is_fast_without_gpu(no_gpu):
    env.collect_env()  # first call finds the BLAS library
    t0 = time.perf_counter()
    env.collect_env()
    assert time.perf_counter() - t0 < 1.0  # ~1 ms warm, < 200 ms cold; generous for CI


def test_env_vars_are_the_set_thread_vars_and_every_flag(monkeypatch):
    for name in list(os.environ):
        if name.startswith("FLAGS_") or name in env.THREAD_VARS:
            monkeypatch.delenv(name)
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    monkeypatch.setenv("FLAGS_b_unknown", "x")
    monkeypatch.setenv("FLAGS_a_known", "1")
    monkeypatch.setenv("PATHX", "ignored")
    assert env.env_vars() == {"OMP_NUM_THREADS": "4", "CUDA_VISIBLE_DEVICES": "0,1",
                              "FLAGS_a_known": "1", "FLAGS_b_unknown": "x"}


def test_flags_in_force_follow_set_flags(no_gpu):
    flag = flags.FLAGS.flag("check_nan_inf")
    saved = (flag.value, flag.source)
    flags.set_flags({"FLAGS_check_nan_inf": not flag.default})
    try:
        assert env.collect_env()["flags"]["FLAGS_check_nan_inf"] is (not flag.default)
    finally:
        flags.FLAGS.set("check_nan_inf", *saved)


@pytest.mark.parametrize("info, expected", [
    ({"family": "openblas", "version": "OpenBLAS 0.3.27  DYNAMIC_ARCH Haswell"},
     "OpenBLAS 0.3.27 DYNAMIC_ARCH Haswell"),
    ({"family": "mkl", "version": "2024.1"}, "mkl 2024.1"),
    ({"family": "blis", "version": None}, "blis"),
    ({"family": None, "version": None}, None),
    ({}, None)])
def test_blas_name(info, expected):
    assert env.blas_name(info) == expected


def test_failing_parts_become_none_or_a_reason(monkeypatch):
    def fail(*_args, **_kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(psutil, "virtual_memory", fail)
    monkeypatch.setattr(psutil, "cpu_count", fail)
    monkeypatch.setattr(blas, "blas_info", fail)
    monkeypatch.setattr(nvml, "gpu_summary", fail)
    monkeypatch.setattr(backend, "cupy_status", fail)
    monkeypatch.setattr(flags, "flags_in_force", fail)
    monkeypatch.setattr(platform, "platform", fail)
    e = env.collect_env()
    assert set(e) == TOP_KEYS
    assert e["memory"] is None and e["flags"] is None and e["platform"] is None
    assert e["cpu"]["logical_cores"] is None and e["cpu"]["physical_cores"] is None
    assert e["numpy"] == {"version": np.__version__, "blas": None, "blas_path": None,
                          "blas_threads": None}
    assert e["gpu"] == {"available": False, "reason": "NVML query failed"}
    assert e["cupy"] == {"available": False, "reason": "CuPy query failed"}
    assert env.format_env(e)  # still printable


def test_cpu_model_falls_back_to_platform(monkeypatch):
    real_open = open

    def no_proc(path, *args, **kwargs):
        if path == "/proc/cpuinfo":
            raise FileNotFoundError(path)
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr("builtins.open", no_proc)
    monkeypatch.setattr(platform, "processor", lambda: "arm")
    assert env.cpu_model() == "arm"


def test_gpu_part_uses_the_nvml_module(monkeypatch):
    fake = {"available": True, "reason": None, "driver": "550.1",
            "devices": [{"index": 0, "name": "H100", "uuid": "GPU-1",
                         "memory_total_bytes": 80 * 1024 ** 3, "driver": "550.1"}]}
    monkeypatch.setattr(nvml, "gpu_summary", lambda: fake)
    assert env.collect_env()["gpu"] == fake
    assert ("GPU 0", "H100, 80.0 GiB (driver 550.1)") in env.format_env({"gpu": fake})


def test_cupy_installed_without_gpu_reports_its_version(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(__version__="13.3.0"))
    monkeypatch.setattr(backend, "cupy_status", lambda: (None, 0, "CuPy found no NVIDIA GPU"))
    assert env.cupy_info() == {"available": False, "version": "13.3.0", "devices": 0,
                               "reason": "CuPy found no NVIDIA GPU"}
    assert dict(env.format_env({"cupy": env.cupy_info()}))["CuPy"] == \
        "N/A: 13.3.0 installed; CuPy found no NVIDIA GPU"


def test_format_env_rows():
    e = {"python": "3.11.7", "implementation": "CPython", "executable": "/usr/bin/python3",
         "platform": "Linux-6.1-x86_64", "paddletune": "0.1.0",
         "numpy": {"version": "2.0.0", "blas": "OpenBLAS 0.3.27", "blas_path": "/lib/ob.so",
                   "blas_threads": 4},
         "cpu": {"model": "Xeon", "logical_cores": 8, "physical_cores": 4, "usable_cores": 6},
         "memory": {"total_bytes": 16 * 1024 ** 3, "available_bytes": 8 * 1024 ** 3},
         "gpu": {"available": False, "reason": "pynvml is not installed", "driver": None,
                 "devices": []},
         "cupy": {"available": True, "version": "13.0.0", "devices": 2, "reason": None},
         "flags": {"FLAGS_eager_delete_tensor_gb": 0.0},
         "env_vars": {"OMP_NUM_THREADS": "1"}}
    assert env.format_env(e) == [
        ("Python", "3.11.7 (CPython) /usr/bin/python3"),
        ("Platform", "Linux-6.1-x86_64"),
        ("paddletune", "0.1.0"),
        ("NumPy", "2.0.0"),
        ("BLAS", "OpenBLAS 0.3.27, 4 thread(s)"),
        ("BLAS library", "/lib/ob.so"),
        ("CPU", "Xeon (8 logical, 4 physical, 6 usable cores)"),
        ("Memory", "16.0 GiB total, 8.0 GiB available"),
        ("GPU", "N/A: pynvml is not installed"),
        ("CuPy", "13.0.0, 2 device(s)"),
        ("FLAGS_eager_delete_tensor_gb", "0.0"),
        ("OMP_NUM_THREADS", "1")]


def test_format_env_reads_old_and_empty_records():
    rows = env.format_env(DEFAULT_ENV)
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in rows)
    assert dict(rows)["CPU"] == "Test CPU (2 logical, 2 physical cores)"
    assert dict(rows)["FLAGS"] == "none changed from the defaults"
    assert dict(env.format_env({}))["GPU"] == "N/A: unknown"
    assert dict(env.format_env(None))["Memory"] == "N/A"


def test_format_env_reads_a_profiles_typed_env(tmp_path):
    from paddletune.profile import load, records
    from profiles import make_profile
    e = {**DEFAULT_ENV, "flags": {"FLAGS_check_nan_inf": True}, "env_vars": {"CPU_NUM": "2"}}
    typed = load(make_profile(tmp_path / "p.jsonl", env=e)).env
    assert isinstance(typed, records.Env)
    assert env.format_env(typed) == env.format_env(e)
    assert dict(env.format_env(typed))["CPU"] == "Test CPU (2 logical, 2 physical cores)"
    assert ("FLAGS_check_nan_inf", "True") in env.format_env(typed)
