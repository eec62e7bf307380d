"""The system probe: real psutil sampling, the fields and their units, None where the OS is silent."""

import dataclasses
import threading
import time
from collections import namedtuple

import psutil
import pytest

from paddletune.probes import system
from paddletune.probes.base import Clock, SamplingProbe
from paddletune.probes.system import SystemProbe
from paddletune.profile.records import ProbeRecord, SystemSample
from paddletune.sources.fluid import FluidSource

FIELDS = {"cpu_percent", "cpu_total_percent", "per_core_percent", "rss_bytes", "threads",
          "ctx_switches_per_s", "ctx_involuntary_per_s", "load1", "steal_percent",
          "iowait_percent", "mem_available_bytes", "blas_threads"}
RATES = {"cpu_percent", "cpu_total_percent", "per_core_percent", "ctx_switches_per_s",
         "ctx_involuntary_per_s", "steal_percent", "iowait_percent"}

# cpu_times() as macOS reports it: no iowait, steal or guest fields
MacTimes = namedtuple("MacTimes", "user nice system idle")


SOURCE = FluidSource()


def _probe(interval_s=0.05):
    records = []
    return SystemProbe(records.append, Clock(), interval_s=interval_s, source=SOURCE), records


def _fields(sample: SystemSample) -> dict:
    """A sample's measured fields (all but its time)."""
    fields = dataclasses.asdict(sample)
    del fields["t_s"]
    return fields


def _sample(probe) -> dict:
    return _fields(probe.sample(0.0))


def _busy(cpu_s, max_wall_s=2.0):
    """Burn `cpu_s` of this process's CPU time (capped in wall time on a crowded machine)."""
    start_cpu, end_wall = time.process_time(), time.perf_counter() + max_wall_s
    while time.process_time() - start_cpu < cpu_s and time.perf_counter() < end_wall:
        sum(range(1000))


def test_real_sampling_in_the_background():
    probe, records = _probe()
    probe.start()
    _busy(0.3)
    result = probe.stop()
    samples = [r for r in records if isinstance(r, SystemSample)]
    assert len(samples) >= 2
    assert all(FIELDS == set(_fields(r)) for r in samples)
    assert [r.t_s for r in samples] == sorted(r.t_s for r in samples)
    # the job's threads (here: this one, perhaps BLAS's), never the probe's own sampler:
    # the samples its thread took and the last one, taken as it stopped, count alike
    assert all(r.rss_bytes > 0 and r.threads >= 1 for r in samples)
    assert records[-1] is result and isinstance(result, ProbeRecord)
    assert result.name == "system" and result.available and result.reason is None
    assert 0 < result.overhead_s < 0.25
    assert result.details["samples"] == len(samples)
    assert probe.snapshot() == samples[-1]


def test_threads_leave_out_the_probes_own_sampler():
    """A sample taken by the sampling thread does not count that thread: the job's count is
    the same as in the last sample, which the stopping thread takes."""
    probe, _ = _probe()
    own = psutil.Process().num_threads()
    assert _sample(probe)["threads"] == own
    probe._thread = threading.current_thread()  # as if taken by its sampling thread
    assert _sample(probe)["threads"] == own - 1


def test_first_sample_has_no_rates_and_later_ones_do():
    probe, _ = _probe()
    first = _sample(probe)
    assert set(first) == FIELDS
    assert all(first[k] is None for k in RATES)
    assert first["rss_bytes"] > 0 and first["mem_available_bytes"] > 0
    _busy(0.06)  # several clock ticks of CPU time, so /proc has moved
    second = _sample(probe)
    assert second["cpu_percent"] > 0
    assert 0 <= second["cpu_total_percent"] <= 100
    assert len(second["per_core_percent"]) == psutil.cpu_count()
    assert second["ctx_switches_per_s"] >= second["ctx_involuntary_per_s"] >= 0


def test_blas_threads_and_load_come_from_their_sources(monkeypatch):
    monkeypatch.setattr(SOURCE, "blas_threads", lambda: 7)
    monkeypatch.setattr(system.os, "getloadavg", lambda: (1.5, 1.0, 0.5), raising=False)
    fields = _sample(_probe()[0])
    assert fields["blas_threads"] == 7 and fields["load1"] == 1.5


def test_cpu_times_without_steal_or_iowait_read_none(monkeypatch):
    times = iter([MacTimes(10.0, 0.0, 5.0, 85.0), MacTimes(15.0, 0.0, 5.0, 90.0)])
    monkeypatch.setattr(psutil, "cpu_times", lambda percpu=False: next(times) if not percpu
                        else [MacTimes(1.0, 0.0, 1.0, 1.0)])
    probe, _ = _probe()
    _sample(probe)
    fields = _sample(probe)
    assert fields["steal_percent"] is None and fields["iowait_percent"] is None
    assert fields["cpu_total_percent"] == 50.0  # 5 s busy of 10 s
    assert fields["per_core_percent"] == [None]  # no tick passed on the core


def test_steal_and_iowait_are_shares_of_all_cpu_time():
    T = namedtuple("T", "user nice system idle iowait irq softirq steal guest guest_nice")
    before = T(100, 0, 0, 100, 0, 0, 0, 0, 50, 0)  # guest time is inside user: not counted twice
    after = T(130, 0, 0, 150, 10, 0, 0, 10, 60, 0)
    assert system.field_percent(before, after, "steal") == 10.0
    assert system.field_percent(before, after, "iowait") == 10.0
    assert system.busy_percent(before, after) == 40.0  # user + steal; iowait counts as idle
    assert system.busy_percent(after, after) is None  # no tick: nothing measured


def test_failing_os_calls_become_none(monkeypatch):
    def fail(*_args, **_kwargs):
        raise psutil.AccessDenied(pid=1)

    for name in ("cpu_times", "virtual_memory"):
        monkeypatch.setattr(psutil, name, fail)
    for name in ("cpu_times", "num_ctx_switches", "memory_info", "num_threads"):
        monkeypatch.setattr(psutil.Process, name, fail)
    monkeypatch.setattr(system.os, "getloadavg", fail, raising=False)
    monkeypatch.setattr(SOURCE, "blas_threads", fail)
    probe, _ = _probe()
    _sample(probe)
    fields = _sample(probe)
    assert set(fields) == FIELDS
    assert all(v is None for v in fields.values())


def test_no_process_handle_still_samples_the_machine(monkeypatch):
    def no_process():
        raise psutil.NoSuchProcess(pid=1)

    monkeypatch.setattr(psutil, "Process", no_process)
    probe, _ = _probe()
    _sample(probe)
    fields = _sample(probe)
    assert fields["rss_bytes"] is None and fields["cpu_percent"] is None
    assert fields["mem_available_bytes"] > 0


class Broken(SamplingProbe):
    name = "broken"

    def sample(self, t_s):
        raise RuntimeError("sensor fell off")


def test_a_failing_sampler_marks_itself_unavailable_and_stops_quietly():
    records = []
    probe = Broken(records.append, Clock(), interval_s=0.01).start()
    probe._thread.join(timeout=2)
    assert not probe._thread.is_alive()
    result = probe.stop()
    assert result.available is False
    assert result.reason == "sampling failed: sensor fell off"
    assert records == [result]


def test_stop_right_after_start_still_has_a_sample():
    probe, records = _probe(interval_s=0.5)
    probe.start()
    probe.stop()
    assert sum(isinstance(r, SystemSample) for r in records) >= 1


class Waiting(SamplingProbe):
    """A sampler that waits 30 ms (for the GIL, a core, a slow file) and computes 10 ms of
    CPU per sample."""
    name = "waiting"

    def sample(self, t_s):
        time.sleep(0.030)
        end = time.thread_time() + 0.010
        while time.thread_time() < end:
            pass
        return SystemSample(t_s)


def test_a_samplers_cost_is_the_cpu_it_takes_not_its_waits():
    """The overhead a sampling probe reports is its thread's CPU: a sampler waiting for the
    GIL the training loop holds costs the job nothing meanwhile."""
    probe = Waiting(lambda r: None, Clock(), interval_s=10.0)
    took = [probe.take() for _ in range(3)]
    assert all(0.010 <= t < 0.025 for t in took), took
    assert probe.overhead_s == pytest.approx(sum(took)) and probe.overhead_s < 0.075
