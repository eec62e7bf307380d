"""Memory pools per place, configured by FLAGS as in Paddle 1.8 (see pool.py, numpy_hook.py).

`pool_for(place)` is the pool serving that place's tensors. On the CPU the executor makes NumPy
allocate every array buffer of a run from it (parameters, optimizer state, activations,
gradients, kernel temporaries), tagged by category. Settings read from FLAGS:

- FLAGS_allocator_strategy: auto_growth (default) or naive_best_fit.
- naive_best_fit chunk on the CPU: min(FLAGS_fraction_of_cpu_memory_to_use x capacity / 32,
  FLAGS_initial_cpu_memory_in_mb), Paddle's CPU chunk rule; a fraction of 0 makes every
  request an underlying allocation of its own, freed straight back.
- Capacity: the machine's memory, or FLAGS_cpu_memory_limit_mb when set (a real cap: the
  pool refuses to grow past it, so out-of-memory can be reproduced on a laptop).
- FLAGS_init_allocated_mem: new blocks are filled with 0xEF bytes before use.

A pool is rebuilt when its strategy or chunk flags change (arrays of the old pool still go
back to it); the capacity follows its flag at once. GPU places use CuPy's own pool for now
(`pool_for` returns None there). A DataLoader's reader thread allocates its batches from the
CPU pool too, tagged "reader" (`tagged`); batches from worker processes live in shared memory
and are not counted.
"""

import contextlib
import os

from ..flags import FLAGS
from . import numpy_hook
from .pool import ALIGN, OOMInfo, Pool, align_up  # noqa: F401
from .system import CPUSystemAllocator

MB = 1 << 20

_pools = {}  # place key -> (config, Pool, FLAGS.version it was checked at)
_system = CPUSystemAllocator()


def machine_memory_bytes():
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 1 << 40


def capacity_bytes(place=None):
    """What the CPU place may use: FLAGS_cpu_memory_limit_mb, or the machine's memory."""
    limit_mb = FLAGS.get("cpu_memory_limit_mb")
    return limit_mb * MB if limit_mb > 0 else machine_memory_bytes()


def cpu_chunk_bytes(capacity):
    """Paddle's naive_best_fit CPU chunk: min(fraction x capacity / 32, initial MB)."""
    fraction = FLAGS.get("fraction_of_cpu_memory_to_use")
    by_fraction = int(fraction * capacity / 32)
    chunk = min(by_fraction, FLAGS.get("initial_cpu_memory_in_mb") * MB)
    return 0 if chunk <= 0 else align_up(chunk)


def _config():
    return (FLAGS.get("allocator_strategy"), FLAGS.get("fraction_of_cpu_memory_to_use"),
            FLAGS.get("initial_cpu_memory_in_mb"), FLAGS.get("cpu_memory_limit_mb"))


def pool_for(place):
    """The pool serving `place` (None for GPU places and where NumPy cannot be hooked).
    Called once per Executor.run: the flags are read again only after one of them changed."""
    if getattr(place, "is_gpu_place", lambda: False)() or not numpy_hook.AVAILABLE:
        return None
    entry = _pools.get("cpu")
    if entry is not None and entry[2] == FLAGS.version:
        return entry[1]
    config = _config()
    if entry is not None and entry[0][:3] == config[:3]:
        pool = entry[1]
    else:
        capacity = capacity_bytes()
        pool = Pool(_system, config[0], capacity, cpu_chunk_bytes(capacity), name="CPUPlace")
    pool.capacity = capacity_bytes()
    pool.poison = FLAGS.get("init_allocated_mem")
    _pools["cpu"] = (config, pool, FLAGS.version)
    return pool


def pools():
    """{place name: pool} of the pools made so far (the current one per place)."""
    return {entry[1].name: entry[1] for entry in _pools.values()}


@contextlib.contextmanager
def tagged(pool, tag):
    """Within the block, NumPy arrays created by this thread come from `pool` tagged `tag`,
    without touching the pool's current tag (which the executor's thread sets)."""
    if pool is None:
        yield None
        return
    previous = numpy_hook.set_handler(numpy_hook.handler_for(pool, tag))
    try:
        yield pool
    finally:
        numpy_hook.set_handler(previous)


@contextlib.contextmanager
def serving(pool, tag="other"):
    """Within the block, NumPy arrays created by this thread come from `pool`, tagged `tag`."""
    if pool is None:
        yield None
        return
    old_tag, pool.tag = pool.tag, tag
    previous = numpy_hook.set_handler(numpy_hook.handler_for(pool))
    try:
        yield pool
    finally:
        numpy_hook.set_handler(previous)
        pool.tag = old_tag
