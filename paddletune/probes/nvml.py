"""NVIDIA GPUs through NVML: status, device list and the nvml sampling probe (the one pynvml user)."""

import os
import threading
from contextlib import contextmanager

from ..profile.records import GpuSample
from .base import Clock, SamplingProbe, Sink

NOT_INSTALLED = "pynvml is not installed (pip install nvidia-ml-py)"

_lock = threading.Lock()
_state = {"module": None, "refs": 0}  # the initialised pynvml and how many users hold it


def _import_pynvml():
    """The pynvml module, or raise ImportError (tests put a fake in sys.modules['pynvml'])."""
    import pynvml  # the only import of pynvml in the project, made only when NVML is asked for
    return pynvml


def _text(value):
    """NVML strings arrive as bytes from older bindings."""
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def call(nv, fn_name, *args):
    """nv.<fn_name>(*args), or None (N/A) when NVML does not report it: not supported, GPU
    lost, a function this binding or driver lacks, any other NVML error. Never raises."""
    try:
        return getattr(nv, fn_name)(*args)
    except Exception:
        return None


def acquire():
    """(pynvml, None) with NVML initialised for the caller (pair with `release()`), or
    (None, reason). NVML is initialised once however many users hold it."""
    with _lock:
        if _state["refs"]:
            _state["refs"] += 1
            return _state["module"], None
        try:
            nv = _import_pynvml()
        except ImportError:
            return None, NOT_INSTALLED
        except Exception as err:  # a broken binding failing at import
            return None, f"pynvml could not be imported: {type(err).__name__}: {err}"
        try:
            nv.nvmlInit()
        except Exception as err:
            return None, f"NVML could not initialise: {err} (no NVIDIA driver?)"
        _state.update(module=nv, refs=1)
        return nv, None


def release():
    """Give back one `acquire()`; the last one shuts NVML down."""
    with _lock:
        if _state["refs"] == 0:
            return
        _state["refs"] -= 1
        if _state["refs"] == 0:
            call(_state["module"], "nvmlShutdown")
            _state["module"] = None


@contextmanager
def session():
    """`with session() as (nv, reason):` NVML held for the block (nv None when unusable)."""
    nv, reason = acquire()
    try:
        yield nv, reason
    finally:
        if nv is not None:
            release()


def nvml_status():
    """(ok, reason): whether NVML can be used here, and why not."""
    with session() as (nv, reason):
        return nv is not None, reason


def _device_count(nv) -> int:
    return call(nv, "nvmlDeviceGetCount") or 0


def _device(nv, index, driver) -> dict:
    handle = call(nv, "nvmlDeviceGetHandleByIndex", index)
    memory = call(nv, "nvmlDeviceGetMemoryInfo", handle)
    return {"index": index, "name": _text(call(nv, "nvmlDeviceGetName", handle)),
            "uuid": _text(call(nv, "nvmlDeviceGetUUID", handle)),
            "memory_total_bytes": getattr(memory, "total", None), "driver": driver}


def _devices(nv, driver) -> list:
    return [_device(nv, i, driver) for i in range(_device_count(nv))]


def devices() -> list:
    """[{index, name, uuid, memory_total_bytes, driver}] of every GPU NVML sees ([] if none)."""
    with session() as (nv, _reason):
        if nv is None:
            return []
        return _devices(nv, _text(call(nv, "nvmlSystemGetDriverVersion")))


def gpu_summary() -> dict:
    """{available, reason, driver, devices} for the environment record (one NVML init)."""
    with session() as (nv, reason):
        if nv is None:
            return {"available": False, "reason": reason, "driver": None, "devices": []}
        driver = _text(call(nv, "nvmlSystemGetDriverVersion"))
        found = _devices(nv, driver)
        return {"available": bool(found), "reason": None if found else "NVML found no GPU",
                "driver": driver, "devices": found}


def visible_indices(count: int) -> list:
    """The NVML indices this job can use: CUDA_VISIBLE_DEVICES when it is a plain list of
    integers (cut at the first invalid one, as CUDA does), else all (UUIDs, MIG names)."""
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return list(range(count))
    items = [s.strip() for s in value.split(",") if s.strip()]
    if not all(s.lstrip("-").isdigit() for s in items):
        return list(range(count))
    picked = []
    for index in map(int, items):
        if not 0 <= index < count or index in picked:
            break
        picked.append(index)
    return picked


def _process_memory_bytes(nv, handle, pid):
    """GPU memory of process `pid` on this GPU (None when NVML does not list it: not using
    the GPU yet, or a container whose PIDs differ from the host's)."""
    procs = call(nv, "nvmlDeviceGetComputeRunningProcesses", handle) or []
    used = [getattr(p, "usedGpuMemory", None) for p in procs if getattr(p, "pid", None) == pid]
    used = [u for u in used if u is not None]
    return sum(used) if used else None


def _scaled(value, factor):
    return None if value is None else value * factor


# NVML's clock event (throttle) reason bits, by the name a sample lists them under; "idle" is
# left out: a GPU with nothing to do lowers its clocks, which slows nothing
THROTTLE_REASONS = (
    (0x2, "applications_clocks"), (0x4, "sw_power_cap"), (0x8, "hw_slowdown"),
    (0x10, "sync_boost"), (0x20, "sw_thermal"), (0x40, "hw_thermal"),
    (0x80, "hw_power_brake"), (0x100, "display_clocks"))


def _throttle_reasons(nv, handle):
    """Names of the active reasons the GPU's clocks are held down (NVML >= 12 calls them
    clock event reasons; older bindings name the same bits throttle reasons); None: N/A."""
    bits = call(nv, "nvmlDeviceGetCurrentClocksEventReasons", handle)
    if bits is None:
        bits = call(nv, "nvmlDeviceGetCurrentClocksThrottleReasons", handle)
    if bits is None:
        return None
    return [name for bit, name in THROTTLE_REASONS if int(bits) & bit]


def gpu_fields(nv, index, handle, pid) -> dict:
    """One GPU's sample fields; each is None when NVML does not report it."""
    util = call(nv, "nvmlDeviceGetUtilizationRates", handle)
    memory = call(nv, "nvmlDeviceGetMemoryInfo", handle)
    clock_sm, clock_mem = getattr(nv, "NVML_CLOCK_SM", 1), getattr(nv, "NVML_CLOCK_MEM", 2)
    return {"gpu": index, "util_percent": getattr(util, "gpu", None),
            "mem_util_percent": getattr(util, "memory", None),
            "mem_used_bytes": getattr(memory, "used", None),
            "mem_total_bytes": getattr(memory, "total", None),
            "proc_mem_bytes": _process_memory_bytes(nv, handle, pid),
            "sm_clock_mhz": call(nv, "nvmlDeviceGetClockInfo", handle, clock_sm),
            "mem_clock_mhz": call(nv, "nvmlDeviceGetClockInfo", handle, clock_mem),
            "power_w": _scaled(call(nv, "nvmlDeviceGetPowerUsage", handle), 1e-3),
            "power_limit_w": _scaled(call(nv, "nvmlDeviceGetEnforcedPowerLimit", handle), 1e-3),
            "temperature_c": call(nv, "nvmlDeviceGetTemperature", handle,
                                  getattr(nv, "NVML_TEMPERATURE_GPU", 0)),
            "throttle": _throttle_reasons(nv, handle)}


class NvmlProbe(SamplingProbe):
    """One `sample` record per visible GPU per interval: {"gpu": NVML index, utilisation,
    memory (device and this process), clocks, power and its limit, temperature, "throttle":
    the reasons the clocks are held down now (THROTTLE_REASONS names; [] when none)}.

    NVML is initialised when the probe is made and shut down by `stop()`. Unusable NVML (no
    pynvml, no driver, no visible GPU) leaves `available` False with the reason.
    """

    name = "nvml"

    def __init__(self, sink: Sink, clock: Clock, interval_s: float = 0.5, source=None):
        super().__init__(sink, clock, interval_s, source)
        self._nv, self.reason = acquire()
        self._handles = []
        if self._nv is not None:
            self._handles = self._visible_handles()
            if not self._handles:
                self.reason = "no NVIDIA GPU visible to this job"
                self._release()
        self.available = bool(self._handles)

    def _visible_handles(self):
        pairs = [(i, call(self._nv, "nvmlDeviceGetHandleByIndex", i))
                 for i in visible_indices(_device_count(self._nv))]
        return [(i, h) for i, h in pairs if h is not None]

    def sample_all(self) -> list:
        """Fields of every visible GPU, in index order."""
        pid = os.getpid()
        return [gpu_fields(self._nv, i, h, pid) for i, h in self._handles]

    def sample(self, t_s) -> list:
        """One record per GPU, each at `t_s`."""
        return [GpuSample(t_s, **fields) for fields in self.sample_all()]

    def snapshot(self):
        return {"gpus": list(self.last or [])}

    def stop(self) -> dict:
        record = super().stop()
        self._release()
        return record

    def _stop(self):
        result = super()._stop()
        result["gpus"] = [i for i, _h in self._handles]
        return result

    def _release(self):
        if self._nv is not None:
            self._nv = None
            release()
