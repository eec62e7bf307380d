"""The reader-worker probe: memory (USS, RSS) and CPU time of every DataLoader worker process,
sampled in the background.

Its records show two things the reader's own events cannot: copy-on-read growth (a worker
touching the trainer's Python objects copies their pages, so each worker's private memory, its
USS, climbs towards the size of the dataset; pytorch#13246) and how busy each worker's core is.

Records: one WorkerSample per live worker per interval (loader, pass_no, worker, pid,
uss_bytes, rss_bytes, cpu_s: cumulative user+system seconds). A worker's first sample is
taken as its pass starts (the baseline before it touched much: the sampler is woken for it;
PyTorch's spawn and forkserver workers' pass starts once its first batch came, after their
interpreter's start and imports, which are not the dataset's copying);
its last, at the final interval before it exits. The interval stretches past interval_s where
the workers' samples would take more than the budget's share of a core (BUDGET by default; a
session gives none where --interval was asked for).
"""

import time
from typing import Optional

import psutil

from ..profile.records import WorkerSample
from .base import SamplingProbe

# the share of one core the samples may take: a worker's memory (its USS, from the kernel's
# smaps) costs some 7-10 ms to read once the trainer has torch or paddle loaded, so 2 workers
# keep the 0.5 s interval, 8 sample about every 1.1-1.6 s, 32 every 4.5-6.4 s
BUDGET = 0.05


class WorkerProbe(SamplingProbe):
    name = "workers"

    def __init__(self, sink, clock, interval_s: float = 0.5, source=None,
                 budget: Optional[float] = BUDGET):
        super().__init__(sink, clock, interval_s, source)
        self.budget = budget  # (None: every interval_s, as a session asked for it)
        self._procs = {}  # pid -> (loader id, pass, worker index, psutil.Process)
        self._sub = None
        self.n_workers = 0

    def _start(self):
        self._sub = self.subscribe("reader_state", self._on_state)
        super()._start()

    def _stop(self):
        if self._sub is not None:
            self._sub.close()
        result = super()._stop()
        result["workers_seen"] = self.n_workers
        return result

    def _on_state(self, state):
        """A pass started: watch its workers; the sampler takes their baseline sample at
        once, on its own thread (reading a worker's memory costs some 7-10 ms, which the
        training loop, asking for the pass's first batch now, would otherwise wait through).
        It ended: forget them (they are reaped; their pids may be reused)."""
        if state.what != "start":
            for pid, entry in list(self._procs.items()):
                if entry[:2] == (state.loader_id, state.pass_no):
                    self._procs.pop(pid, None)
            return
        t0 = time.perf_counter()
        added = 0
        for index, pid in enumerate((state.config or {}).get("worker_pids") or ()):
            try:
                self._procs[pid] = (state.loader_id, state.pass_no, index, psutil.Process(pid))
            except psutil.Error:
                continue
            self.n_workers += 1
            added += 1
        if added:
            self.wake()
        self.overhead_s += time.perf_counter() - t0

    def sample(self, t_s):
        rows = []
        for pid in list(self._procs):
            row = self._measure(pid, t_s)
            if row is not None:
                rows.append(row)
        return rows

    def _measure(self, pid, t_s):
        entry = self._procs.get(pid)
        if entry is None:
            return None
        loader, pass_no, index, proc = entry
        try:
            with proc.oneshot():
                mem = proc.memory_full_info()
                cpu = proc.cpu_times()
        except (psutil.Error, OSError):  # exited (or a zombie): stop watching it
            self._procs.pop(pid, None)
            return None
        return WorkerSample(t_s, loader, pass_no, index, pid, mem.uss, mem.rss,
                            round(cpu.user + cpu.system, 4))

    def snapshot(self):
        return {"workers": list(self.last) if isinstance(self.last, list) else []}
