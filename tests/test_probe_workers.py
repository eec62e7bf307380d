"""The reader-worker probe: real worker processes sampled for memory and CPU; copy-on-read
growth measured (docs/reliability.md #13: a Python list of 2e6 items read by 4 forked workers)."""

import os
import time

import numpy as np
import pytest

import runtime as fluid
from paddletune.probes.base import Clock
from paddletune.probes.workers import WorkerProbe
from paddletune.profile.records import WorkerSample
from paddletune.sources.fluid import FluidSource

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="worker processes need fork")

MIB = 2 ** 20


def run_loader(gen, workers, batches_expected):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [-1, 1], "float32")
        loader = fluid.io.DataLoader.from_generator(feed_list=[x], capacity=2,
                                                    num_workers=workers)
    loader.set_batch_generator(gen)
    assert sum(1 for _ in loader()) == batches_expected


def worker_rows(records):
    return [r for r in records if isinstance(r, WorkerSample)]


def test_copy_on_read_growth_of_each_worker_is_measured():
    dataset = [float(i) for i in range(2 * 10 ** 6)]  # ~46 MiB of float objects + 15 list

    def gen():
        info = fluid.io.get_worker_info()
        # the growth is counted from the probe's first sample of each worker, taken as the
        # pass starts: let it come before the work (reading a worker's smaps takes ~10 ms
        # once the parent has paddle or torch loaded, 4 workers one after another)
        time.sleep(0.5)
        for i in range(info.id, 8, info.num_workers):
            total = 0.0
            for value in dataset:  # touching each object writes its refcount: a page copy
                total += value
            time.sleep(0.3)  # let the sampler see the grown worker
            yield [np.full((1, 1), total, "float32")]

    records = []
    # every 0.1 s, as a session asked for it (--interval 0.1): these workers live 1-2 s (the
    # budget's stretch, which a loaded machine makes longer, is
    # test_samples_that_cost_more_than_the_budget_stretch_the_interval's)
    probe = WorkerProbe(records.append, Clock(), interval_s=0.1, source=FluidSource(),
                        budget=None).start()
    run_loader(gen, 4, 8)
    result = probe.stop()
    rows = worker_rows(records)
    assert result.details["workers_seen"] == 4
    assert {r.worker for r in rows} == {0, 1, 2, 3}
    for worker in range(4):
        mine = [r for r in rows if r.worker == worker]
        growth = max(r.uss_bytes for r in mine) - mine[0].uss_bytes
        assert growth > 32 * MIB, (worker, growth / MIB)  # most of the floats' pages copied
        assert mine[-1].cpu_s >= mine[0].cpu_s
    assert all(r.pass_no >= 1 and r.pid > 0 for r in rows)


def test_workers_that_only_read_numpy_arrays_stay_small():
    dataset = np.arange(4 * 10 ** 6, dtype=np.float64)  # 32 MiB in one buffer: no refcounts

    def gen():
        info = fluid.io.get_worker_info()
        for i in range(info.id, 4, info.num_workers):
            total = float(dataset.sum())
            time.sleep(0.3)
            yield [np.full((1, 1), total, "float32")]

    records = []
    probe = WorkerProbe(records.append, Clock(), interval_s=0.1, source=FluidSource()).start()
    run_loader(gen, 2, 4)
    probe.stop()
    rows = worker_rows(records)
    for worker in range(2):
        mine = [r for r in rows if r.worker == worker]
        growth = max(r.uss_bytes for r in mine) - mine[0].uss_bytes
        assert growth < 16 * MIB, (worker, growth / MIB)  # the interpreter's own few MiB


def test_no_loader_means_no_records_and_a_thread_producer_has_no_workers():
    records = []
    probe = WorkerProbe(records.append, Clock(), interval_s=0.05, source=FluidSource()).start()

    def gen():
        for i in range(3):
            yield [np.zeros((1, 1), "float32")]
    run_loader(gen, 0, 3)
    result = probe.stop()
    assert worker_rows(records) == [] and result.details["workers_seen"] == 0
    assert probe.snapshot() == {"workers": []}


def test_a_pass_start_wakes_the_sampler_instead_of_measuring_on_the_training_thread():
    """Reading a worker's memory costs 7-10 ms: the pass's start (the training loop asking
    for its first batch) only registers the workers; the sampler takes their baseline at
    once on its own thread, long before its interval (60 s here) ends."""
    import threading
    from types import SimpleNamespace
    from paddletune.probes import workers as workers_module

    measured_on = []
    original = WorkerProbe._measure

    def measure(self, pid, t_s):
        measured_on.append(threading.current_thread())
        return original(self, pid, t_s)

    records = []
    probe = WorkerProbe(records.append, Clock(), interval_s=60.0, source=FluidSource())
    try:
        workers_module.WorkerProbe._measure = measure
        probe.start()
        time.sleep(0.2)  # the sampler's first round (no workers yet) is done
        start = SimpleNamespace(what="start", loader_id=0, pass_no=1,
                                config={"worker_pids": [os.getpid()]})
        probe._on_state(start)
        assert measured_on == []  # nothing read on the calling (training) thread
        deadline = time.monotonic() + 5.0
        while not worker_rows(records) and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        probe.stop()
        workers_module.WorkerProbe._measure = original
    assert worker_rows(records) and worker_rows(records)[0].pid == os.getpid()
    assert threading.main_thread() not in measured_on[:1]


def test_samples_that_cost_more_than_the_budget_stretch_the_interval():
    """A round of worker samples taking 40 ms (4 workers at ~10 ms) against a 5% budget of
    one core: the next comes 0.76 s later, not after the 0.5 s interval; a cheap round keeps
    the interval."""
    probe = WorkerProbe(lambda r: None, Clock(), interval_s=0.5, source=FluidSource())
    assert probe.budget == 0.05  # (workers.BUDGET, the default)
    assert probe.wait_after(0.040) == pytest.approx(0.040 / 0.05 - 0.040)
    assert probe.wait_after(0.010) == 0.5
    probe.budget = None
    assert probe.wait_after(0.040) == 0.5


def test_a_session_keeps_an_interval_asked_for_and_budgets_the_default():
    from paddletune.session import INTERVAL_S, session_probes

    def workers(interval_s):
        probes = session_probes(lambda r: None, Clock(), FluidSource(), interval_s)
        return next(p for p in probes if isinstance(p, WorkerProbe))
    assert workers(INTERVAL_S).budget == 0.05
    assert workers(0.1).budget is None
