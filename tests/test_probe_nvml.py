"""The NVML wrapper and probe, against a fake pynvml: not installed, no driver, 2 GPUs, N/A fields."""

import os
import sys
import time
import types
from types import SimpleNamespace

import dataclasses

import pytest

from paddletune.profile.records import GpuSample
from paddletune.probes import nvml
from paddletune.probes.base import Clock
from paddletune.probes.nvml import NvmlProbe

GIB = 1024 ** 3
GPU_FIELDS = {"t_s", "gpu", "util_percent", "mem_util_percent", "mem_used_bytes",
              "mem_total_bytes", "proc_mem_bytes", "sm_clock_mhz", "mem_clock_mhz", "power_w",
              "power_limit_w", "temperature_c", "throttle"}


class NVMLError(Exception):
    pass


class NVMLError_NotSupported(NVMLError):  # noqa: N801  (pynvml's own name)
    pass


def fake_pynvml(n_gpus=2, init_error=None, unsupported=(), other_pid=False):
    """A pynvml module with `n_gpus` GPUs; functions named in `unsupported` raise
    NVMLError_NotSupported. Calls are counted in module.calls."""
    nv = types.ModuleType("pynvml")
    nv.NVMLError, nv.NVMLError_NotSupported = NVMLError, NVMLError_NotSupported
    nv.NVML_CLOCK_SM, nv.NVML_CLOCK_MEM, nv.NVML_TEMPERATURE_GPU = 1, 2, 0
    nv.calls = {"init": 0, "shutdown": 0}
    pid = os.getpid() + 1 if other_pid else os.getpid()

    def init():
        nv.calls["init"] += 1
        if init_error:
            raise NVMLError(init_error)

    def shutdown():
        nv.calls["shutdown"] += 1

    def handle(i):
        if not 0 <= i < n_gpus:
            raise NVMLError("Invalid Argument")
        return ("handle", i)

    functions = {
        "nvmlInit": init, "nvmlShutdown": shutdown,
        "nvmlDeviceGetCount": lambda: n_gpus,
        "nvmlDeviceGetHandleByIndex": handle,
        "nvmlSystemGetDriverVersion": lambda: b"535.54.03",  # old bindings return bytes
        "nvmlDeviceGetName": lambda h: f"Fake GPU {h[1]}",
        "nvmlDeviceGetUUID": lambda h: f"GPU-0000-{h[1]}",
        "nvmlDeviceGetMemoryInfo": lambda h: SimpleNamespace(total=16 * GIB, used=(h[1] + 1) * GIB,
                                                             free=0),
        "nvmlDeviceGetUtilizationRates": lambda h: SimpleNamespace(gpu=50 + h[1], memory=20),
        "nvmlDeviceGetComputeRunningProcesses": lambda h: [
            SimpleNamespace(pid=1, usedGpuMemory=GIB),
            SimpleNamespace(pid=pid, usedGpuMemory=(h[1] + 1) * 100)],
        "nvmlDeviceGetClockInfo": lambda h, kind: {1: 1410, 2: 1215}[kind],
        "nvmlDeviceGetPowerUsage": lambda h: 123456,  # milliwatts
        "nvmlDeviceGetTemperature": lambda h, sensor: 61,
        "nvmlDeviceGetEnforcedPowerLimit": lambda h: 300000,  # milliwatts
        # GPU 0: idle (not a slowdown); GPU 1: software power cap and hardware thermal
        "nvmlDeviceGetCurrentClocksEventReasons": lambda h: 0x1 if h[1] == 0 else 0x4 | 0x40,
    }
    for name, fn in functions.items():
        setattr(nv, name, _not_supported if name in unsupported else fn)
    return nv


def _not_supported(*_args):
    raise NVMLError_NotSupported("Not Supported")


@pytest.fixture
def use(monkeypatch):
    """use(module_or_None): make `import pynvml` give it (None: not installed)."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)

    def install(module):
        monkeypatch.setitem(sys.modules, "pynvml", module)
        return module
    yield install
    assert nvml._state["refs"] == 0, "a test left NVML held"


def _probe(interval_s=0.05):
    records = []
    return NvmlProbe(records.append, Clock(), interval_s=interval_s), records


# --- status and devices ----------------------------------------------------------------------
def test_not_installed(use):
    use(None)
    assert nvml.nvml_status() == (False, "pynvml is not installed (pip install nvidia-ml-py)")
    assert nvml.devices() == []
    summary = nvml.gpu_summary()
    assert summary["available"] is False and "not installed" in summary["reason"]


def test_broken_binding_is_a_reason(use, monkeypatch):
    def broken():
        raise OSError("libc mismatch")

    monkeypatch.setattr(nvml, "_import_pynvml", broken)
    assert nvml.nvml_status() == (False, "pynvml could not be imported: OSError: libc mismatch")


def test_init_failure_names_the_error(use):
    fake = use(fake_pynvml(init_error="Driver Not Loaded"))
    ok, reason = nvml.nvml_status()
    assert not ok
    assert reason == "NVML could not initialise: Driver Not Loaded (no NVIDIA driver?)"
    assert fake.calls == {"init": 1, "shutdown": 0}  # a failed init is not shut down


def test_devices_and_summary(use):
    fake = use(fake_pynvml())
    assert nvml.nvml_status() == (True, None)
    assert nvml.devices() == [
        {"index": i, "name": f"Fake GPU {i}", "uuid": f"GPU-0000-{i}",
         "memory_total_bytes": 16 * GIB, "driver": "535.54.03"} for i in range(2)]
    summary = nvml.gpu_summary()
    assert summary["available"] and summary["reason"] is None
    assert summary["driver"] == "535.54.03" and len(summary["devices"]) == 2
    assert fake.calls["init"] == fake.calls["shutdown"] == 3  # each query pairs init/shutdown


def test_no_gpu_is_a_reason(use):
    use(fake_pynvml(n_gpus=0))
    summary = nvml.gpu_summary()
    assert summary == {"available": False, "reason": "NVML found no GPU",
                       "driver": "535.54.03", "devices": []}


def test_unsupported_calls_are_none_not_errors(use):
    use(fake_pynvml(unsupported={"nvmlDeviceGetUUID", "nvmlSystemGetDriverVersion"}))
    dev = nvml.devices()[0]
    assert dev["uuid"] is None and dev["driver"] is None and dev["name"] == "Fake GPU 0"


def test_call_returns_none_for_any_failure():
    nv = SimpleNamespace(ok=lambda x: x * 2, bad=_not_supported)
    assert nvml.call(nv, "ok", 21) == 42
    assert nvml.call(nv, "bad") is None
    assert nvml.call(nv, "missing_in_this_binding") is None


@pytest.mark.parametrize("value, expected", [
    (None, [0, 1, 2, 3]), ("1", [1]), ("2,0", [2, 0]), (" 3 , 1 ", [3, 1]), ("", []),
    ("-1", []), ("1,7,2", [1]), ("1,1", [1]), ("GPU-0000-1", [0, 1, 2, 3]),
    ("MIG-abc,0", [0, 1, 2, 3])])
def test_cuda_visible_devices(monkeypatch, value, expected):
    if value is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", value)
    assert nvml.visible_indices(4) == expected


# --- the probe -------------------------------------------------------------------------------
def test_probe_unavailable_without_pynvml_does_nothing(use):
    use(None)
    probe, records = _probe()
    assert not probe.available and "not installed" in probe.reason
    probe.start()
    assert not probe.running
    result = probe.stop()
    assert records == [result]
    assert result.available is False and result.details == {}


def test_probe_unavailable_when_init_fails(use):
    use(fake_pynvml(init_error="Driver/library version mismatch"))
    probe, _ = _probe()
    assert not probe.available
    assert probe.reason.startswith("NVML could not initialise: Driver/library version mismatch")
    assert probe.stop().available is False


def test_probe_samples_one_record_per_gpu(use):
    fake = use(fake_pynvml())
    probe, records = _probe()
    assert probe.available and probe.reason is None
    probe.start()
    _wait_for(lambda: len(records) >= 4)
    result = probe.stop()
    samples = [r for r in records if isinstance(r, GpuSample)]
    assert len(samples) == 2 * result.details["samples"] and len(samples) >= 4
    assert all(set(dataclasses.asdict(r)) == GPU_FIELDS for r in samples)
    first, second = samples[0], samples[1]
    assert first.t_s == second.t_s and [first.gpu, second.gpu] == [0, 1]
    assert first == GpuSample(t_s=first.t_s, gpu=0, util_percent=50, mem_util_percent=20,
                              mem_used_bytes=GIB, mem_total_bytes=16 * GIB,
                              proc_mem_bytes=100, sm_clock_mhz=1410, mem_clock_mhz=1215,
                              power_w=123.456, power_limit_w=300.0, temperature_c=61,
                              throttle=[])
    assert second.proc_mem_bytes == 200 and second.util_percent == 51
    assert second.throttle == ["sw_power_cap", "hw_thermal"]
    assert result.available and result.details["gpus"] == [0, 1]
    assert result.overhead_s > 0
    assert fake.calls == {"init": 1, "shutdown": 1}  # once for the probe's whole life
    assert [g.gpu for g in probe.snapshot()["gpus"]] == [0, 1]


def test_one_unsupported_field_is_none_and_the_rest_stay(use):
    use(fake_pynvml(unsupported={"nvmlDeviceGetPowerUsage"}))
    probe, _ = _probe()
    rows = probe.sample_all()
    probe.stop()
    assert [r["power_w"] for r in rows] == [None, None]
    assert all(r["temperature_c"] == 61 and r["util_percent"] is not None for r in rows)


def test_throttle_reasons_from_older_bindings_or_none(use):
    """Bindings before NVML 12 name the same bits throttle reasons; neither call: None."""
    fake = fake_pynvml(unsupported={"nvmlDeviceGetCurrentClocksEventReasons"})
    fake.nvmlDeviceGetCurrentClocksThrottleReasons = lambda h: 0x8
    use(fake)
    probe, _ = _probe()
    assert [r["throttle"] for r in probe.sample_all()] == [["hw_slowdown"], ["hw_slowdown"]]
    probe.stop()
    use(fake_pynvml(unsupported={"nvmlDeviceGetCurrentClocksEventReasons"}))
    probe, _ = _probe()
    assert [r["throttle"] for r in probe.sample_all()] == [None, None]
    probe.stop()


def test_process_memory_is_none_when_this_process_is_not_listed(use):
    use(fake_pynvml(other_pid=True))
    probe, _ = _probe()
    rows = probe.sample_all()
    probe.stop()
    assert [r["proc_mem_bytes"] for r in rows] == [None, None]


def test_probe_honours_cuda_visible_devices(use, monkeypatch):
    use(fake_pynvml())
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    probe, records = _probe(interval_s=10)
    probe.start()
    probe.stop()
    assert {r.gpu for r in records if isinstance(r, GpuSample)} == {1}


def test_probe_with_no_visible_gpu_is_unavailable(use, monkeypatch):
    fake = use(fake_pynvml())
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    probe, _ = _probe()
    assert not probe.available and probe.reason == "no NVIDIA GPU visible to this job"
    assert fake.calls == {"init": 1, "shutdown": 1}  # released at once
    probe.stop()


def test_status_while_the_probe_runs_does_not_reinitialise(use):
    fake = use(fake_pynvml())
    probe, _ = _probe()
    assert nvml.nvml_status() == (True, None) and len(nvml.devices()) == 2
    assert fake.calls == {"init": 1, "shutdown": 0}
    probe.stop()
    probe.stop()  # a second stop releases nothing more
    assert fake.calls == {"init": 1, "shutdown": 1}


def test_only_this_module_imports_pynvml():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    offenders = []
    for folder in ("paddletune", "runtime"):
        for dirpath, _dirs, files in os.walk(os.path.join(root, folder)):
            for name in files:
                path = os.path.join(dirpath, name)
                if name.endswith(".py") and path != os.path.abspath(nvml.__file__):
                    with open(path, encoding="utf-8") as f:
                        if "import pynvml" in f.read():
                            offenders.append(path)
    assert offenders == []


def _wait_for(condition, timeout_s=2.0):
    end = time.perf_counter() + timeout_s
    while not condition() and time.perf_counter() < end:
        time.sleep(0.01)
