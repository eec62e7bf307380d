"""The hand-over of a worker's batch to the training loop, timed.

A DataLoader worker sends each tensor's storage by reference (torch.multiprocessing's
reductions): under the file_descriptor sharing strategy, Linux's default, the loop asks the
worker's resource sharer for a file descriptor per storage, a round trip through a socket and
the worker's scheduling; under file_system it opens a shared-memory file by name. The loop
rebuilds each storage as it unpickles the batch, inside the DataLoader's __next__, once the
batch was made: the time in those rebuild functions on the thread that asked is the
hand-over (the pipe's read and the rest of the unpickling are not counted: a lower bound).
On this project's 2-core VM, next() on a 2-tensor batch already made took 2.1-3.3 ms under
file_descriptor, 1.4-2.7 ms of it in the rebuilds, against 0.9-1.3 ms under file_system,
0.3 ms of it in the rebuilds (benchmarks/torch_sharing_strategy.py).

A batch a worker delivered before its turn (with several workers) is unpickled, and so
rebuilt, during an earlier pop that waited for the batch due: one pop's figure may hold two
batches' hand-over and a later one none; the sums, and the mean per batch, are right.

Unpickling finds the rebuild functions by name, so replacing the module's attributes times
the batches of workers forked before or after the hooks (and of spawned ones); a worker
forked meanwhile pickles the replacement by the same name."""

import threading
import time
from typing import Callable, Optional

import torch.multiprocessing as mp
from torch.multiprocessing import reductions

REBUILDS = ("rebuild_storage_fd", "rebuild_storage_filename")
_perf = time.perf_counter


class HandOverClock:
    """Seconds spent rebuilding storages on the thread `asking` (None: no one is asking, as
    a pin-memory thread's rebuilds are not the loop's)."""

    def __init__(self):
        self.total_s = 0.0
        self.asking: Optional[int] = None  # the thread inside the DataLoader's __next__

    def install(self, patch_module: Callable) -> None:
        """patch_module(module, name, make): each rebuild function timed."""
        for name in REBUILDS:
            if hasattr(reductions, name):
                patch_module(reductions, name, self._timed)

    def _timed(self, original):
        clock, ident = self, threading.get_ident

        def rebuild(*args, **kwargs):
            if clock.asking != ident():
                return original(*args, **kwargs)
            t0 = _perf()
            try:
                return original(*args, **kwargs)
            finally:
                clock.total_s += _perf() - t0

        # pickled by name in a worker forked while it is installed: the same name as ours
        rebuild.__module__, rebuild.__qualname__ = original.__module__, original.__qualname__
        rebuild.__name__, rebuild.__wrapped__ = original.__name__, original
        return rebuild


def sharing_strategy() -> Optional[str]:
    """torch.multiprocessing's sharing strategy now (file_descriptor, file_system)."""
    try:
        return str(mp.get_sharing_strategy())
    except Exception:  # noqa: BLE001
        return None


SECTION, KEY = "multiprocessing", "sharing_strategy"  # PADDLETUNE_OVERRIDES' field


def override_strategy(state, patch_module: Callable, undo: list) -> None:
    """PADDLETUNE_OVERRIDES' multiprocessing.sharing_strategy (`state`: eager.overrides.
    Overrides): set as the job starts (workers made later hand their tensors over by it),
    and kept against the script's own set_sharing_strategy calls: the first such call's
    other value is what the script wanted (`was`). `undo` gets what restores the job's."""
    wanted = state.wanted(SECTION).get(KEY)
    if wanted is None:
        return
    known = sorted(mp.get_all_sharing_strategies())
    if wanted not in known:
        state.skip(SECTION, KEY, wanted, "not-supported",
                   f"torch shares tensors here by {', '.join(known)} only")
        return
    was = mp.get_sharing_strategy()
    if was == wanted:
        state.skip(SECTION, KEY, wanted, "same-value", "the job's own value")
    else:
        mp.set_sharing_strategy(wanted)
        undo.append(lambda: mp.set_sharing_strategy(was))
        state.apply(SECTION, KEY, wanted, was)

    def keep(original):
        def set_sharing_strategy(new_strategy):
            if new_strategy != wanted and not any(a.section == SECTION and a.key == KEY
                                                  for a in state.applied):
                state.apply(SECTION, KEY, wanted, new_strategy)
        set_sharing_strategy.__wrapped__ = original
        return set_sharing_strategy

    patch_module(mp, "set_sharing_strategy", keep)
