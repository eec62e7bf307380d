"""docs/advice.md #7 (reader memory): DataLoader workers copying the trainer's Python objects
as they read them (copy-on-read, pytorch#13246), measured as each worker's private memory
growth.

Only forked workers share the trainer's pages: PyTorch's spawn and forkserver workers
(LoaderConfig.start_method) start a new interpreter each and unpickle their own copy of the
dataset, so their private memory grows by the interpreter's imports (145 MiB each, torch
imported, against 1.4 MiB for the same job's forked workers: 2-core VM, 2026-11-30) and
reading copies nothing more: no advice for them."""

from typing import Optional

from .base import Advice, rule
from .facts import human_bytes, main_loader, system_mean

GROWTH_BYTES = 64 * 2 ** 20  # per worker: an idle forked worker grows by a few MiB
NOT_FORKED = ("spawn", "forkserver")  # start methods whose workers share no trainer pages
MEDIUM_TOTAL_BYTES = 2 ** 30  # all workers together: medium from 1 GiB ...
MEDIUM_AVAILABLE_SHARE = 0.2  # ... or from this share of the machine's available memory

CHANGE = (
    "# keep the dataset in NumPy arrays (one buffer each: reading copies nothing), not in\n"
    "# Python lists/dicts of objects, whose reference counts every worker writes as it reads\n"
    "labels = np.asarray(labels)                           # instead of a list of ints\n"
    "offsets = np.cumsum([0] + [len(r) for r in records])  # variable-size records: one bytes\n"
    "blob = np.frombuffer(b''.join(records), np.uint8)     # buffer plus offsets into it")


@rule
def worker_copy_on_read(profile) -> Optional[Advice]:
    """reader worker memory (#7)

    Fires when each DataLoader worker's private memory (USS) grew by GROWTH_BYTES or more
    during a pass: it reads the trainer's Python objects and so copies their pages. Not for
    workers that were not forked (spawn, forkserver: they share no pages with the trainer).
    """
    f = main_loader(profile)
    p = f.processes if f is not None else None
    if (p is None or p.uss_growth_bytes.mean < GROWTH_BYTES
            or f.config.start_method in NOT_FORKED):
        return None
    mean, n, largest = p.uss_growth_bytes.mean, p.workers, p.uss_growth_bytes.max
    total = mean * n
    available = system_mean(profile, "mem_available_bytes")
    big = total >= MEDIUM_TOTAL_BYTES or (available and total >= MEDIUM_AVAILABLE_SHARE
                                          * available)
    room = f", with {human_bytes(available)} available" if available else ""
    return Advice(
        id="worker-copy-on-read", source=7, severity="medium" if big else "low",
        confidence="high" if n >= 2 else "medium",
        title=f"Reader workers copy the dataset: +{human_bytes(mean)} each",
        evidence=(f"each of the {n} worker process(es) of {f.name or 'the DataLoader'} "
                  f"grew its private memory (USS) by {human_bytes(mean)} during a pass (max "
                  f"{human_bytes(largest)}), {human_bytes(total)} in "
                  f"all{room}: the workers read Python objects inherited from the trainer, "
                  f"and each read writes a reference count, copying the page."),
        change=CHANGE,
        expected_gain=f"up to {human_bytes(total)} less memory ({human_bytes(mean)} per worker)",
        figures={"workers": n, "uss_growth_bytes_mean": mean,
                 "uss_growth_bytes_max": largest, "total_bytes": total,
                 "available_bytes": available})
