"""#21's cpu-contended on constructed PyTorch profiles: the intra-op threads fit the cores but
not what other processes leave, and the training thread is preempted every step (the system
probe's involuntary context switches of the main thread x the step time)."""

import pytest

pytest.importorskip("torch")  # the header declares the PyTorch source

from paddletune.advisors import advise, threads  # noqa: E402
from paddletune.profile import load  # noqa: E402
from profiles import make_profile, source_info, step_records, system_samples  # noqa: E402
from test_advisors import ids, only  # noqa: E402

CORES_2 = {"cpu": {"model": "Test CPU", "logical_cores": 2, "physical_cores": 2,
                   "usable_cores": 2}}


def contended(tmp_path, wall_s=0.040, machine=100.0, involuntary=90.0, blas=2):
    """A 2-core machine at `machine`% while this process used ~half a core: other processes
    busy on ~1.5 cores; `blas` intra-op threads."""
    samples = system_samples(cpu_percent=50.0, cpu_total_percent=machine, blas_threads=blas,
                             ctx_involuntary_per_s=involuntary)
    return load(make_profile(tmp_path / "p.jsonl", steps=step_records(wall_s=wall_s),
                             env=CORES_2, extra=samples, source=source_info("torch")))


def test_threads_beyond_the_cores_others_leave_get_one_thread(tmp_path):
    a = only(advise(contended(tmp_path), [threads.cpu_threads]), "cpu-contended")
    assert (a.source, a.severity, a.confidence) == (21, "medium", "medium")
    f = a.figures
    assert f["other_processes_cores"] == pytest.approx(1.48, abs=0.01)
    assert f["preempted_per_step"] == pytest.approx(3.6)
    assert f["suggested_blas_threads"] == 1
    assert a.change.splitlines() == ["export OMP_NUM_THREADS=1",
                                     "# or in the script, before training: "
                                     "torch.set_num_threads(1)"]
    assert "preempted 3.6 times per step" in a.evidence
    assert a.expected_speedup is None and "not predicted" in a.expected_gain
    assert "OMP_NUM_THREADS=1 paddletune profile" in a.expected_gain


@pytest.mark.parametrize("why, kw", [
    ("rarely preempted", {"involuntary": 20.0}),  # 0.8 per 40 ms step
    ("the cores are free", {"machine": 25.0}),  # others ~0: both threads fit
    ("one thread already", {"blas": 1}),
])
def test_cpu_contended_stays_silent(tmp_path, why, kw):
    assert "cpu-contended" not in ids(advise(contended(tmp_path, **kw),
                                             [threads.cpu_threads])), why
