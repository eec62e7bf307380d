"""Memory pools per place, configured by FLAGS as in Paddle 1.8 (see pool.py, numpy_hook.py,
device.py).

`pool_for(place)` is the pool serving that place's tensors. During a run the executor makes the
place's array library allocate every array buffer from it (parameters, optimizer state,
activations, gradients, kernel temporaries), tagged by category: NumPy on the CPU (a NEP 49
data-memory handler, numpy_hook.py), CuPy on a GPU (CuPy's allocator hook, device.py; the fed
batch is copied into it too, tagged "reader"). `install(pool)` / `restore(pool, token)` and the
context managers `serving` and `tagged` do this for either kind of pool. Settings read from FLAGS:

- FLAGS_allocator_strategy: auto_growth (default) or naive_best_fit.
- naive_best_fit chunk on the CPU: min(FLAGS_fraction_of_cpu_memory_to_use x capacity / 32,
  FLAGS_initial_cpu_memory_in_mb), Paddle's CPU chunk rule; a fraction of 0 makes every
  request an underlying allocation of its own, freed straight back.
- naive_best_fit chunks on a GPU: FLAGS_initial_gpu_memory_in_mb, then
  FLAGS_reallocate_gpu_memory_in_mb, each (when 0) FLAGS_fraction_of_gpu_memory_to_use x the
  available device memory (default 0.92); a fraction of 0 makes every request a cudaMalloc of its
  own, cudaFree'd straight back (device.py has the exact rule).
- Capacity: the machine's memory, or FLAGS_cpu_memory_limit_mb when set (a real cap: the
  pool refuses to grow past it, so out-of-memory can be reproduced on a laptop); on a GPU the
  device's memory, or FLAGS_gpu_memory_limit_mb. FLAGS_gpu_allocator_retry_time: see device.py.
- FLAGS_init_allocated_mem: new blocks are filled with 0xEF bytes before use.

A pool is rebuilt when its strategy or chunk flags change (arrays of the old pool still go
back to it; a device pool being replaced gives its wholly free chunks back at once); the
capacity follows its flag at once. Counters (`Pool.stats()`) are exact, including the underlying
allocations (cudaMalloc on a GPU) and their time. A DataLoader's reader thread allocates its
batches from the CPU pool too, tagged "reader" (`tagged`); batches from worker processes live in
shared memory and are not counted.
"""

import contextlib
import os

from ..flags import FLAGS
from . import device, numpy_hook
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
    """The pool serving `place` (None where NumPy cannot be hooked, or CuPy is not usable).
    Called once per Executor.run: the flags are read again only after one of them changed."""
    if getattr(place, "is_gpu_place", lambda: False)():
        return _device_pool(place.get_device_id())
    if not numpy_hook.AVAILABLE:
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


def _device_pool(device_id):
    """The pool of GPU `device_id` (one per device, rebuilt when its chunk flags change)."""
    key = f"gpu:{device_id}"
    entry = _pools.get(key)
    if entry is not None and entry[2] == FLAGS.version:
        return entry[1]
    cupy = device.cupy_module()
    if cupy is None:
        return None
    config = device.config()
    if entry is not None and entry[0] == config:
        pool = entry[1]
    else:
        if entry is not None:
            entry[1].release_cached()  # device memory is scarce: the old pool's idle chunks go
        pool = device.make_pool(cupy, device_id, config)
    pool.capacity = device.capacity_bytes(pool.system)
    pool.poison = FLAGS.get("init_allocated_mem")
    _pools[key] = (config, pool, FLAGS.version)
    return pool


def pools():
    """{place name: pool} of the pools made so far (the current one per place)."""
    return {entry[1].name: entry[1] for entry in _pools.values()}


def install(pool, tag=None):
    """Make `pool` serve this thread's arrays (NumPy's on the CPU, CuPy's on a GPU), tagged `tag`
    (None: the pool's current tag); returns the token for `restore`."""
    handler = cpu_handler(pool, tag)
    if handler is None:
        return device.install(pool, tag)
    return numpy_hook.set_handler(handler)


def cpu_handler(pool, tag=None):
    """The NumPy handler that makes a CPU pool serve a thread's arrays (numpy_hook.handler_for:
    what `install` sets; a step keeps it to set it itself), or None for a GPU pool."""
    if getattr(pool, "device_id", None) is not None:
        return None
    return numpy_hook.handler_for(pool, tag)


def restore(pool, token):
    """Undo `install(pool)`: the thread's previous allocator serves again."""
    if getattr(pool, "device_id", None) is not None:
        device.restore(token)
    else:
        numpy_hook.set_handler(token)


@contextlib.contextmanager
def tagged(pool, tag):
    """Within the block, arrays created by this thread come from `pool` tagged `tag`,
    without touching the pool's current tag (which the executor's thread sets)."""
    if pool is None:
        yield None
        return
    token = install(pool, tag)
    try:
        yield pool
    finally:
        restore(pool, token)


@contextlib.contextmanager
def serving(pool, tag="other"):
    """Within the block, arrays created by this thread come from `pool`, tagged `tag`."""
    if pool is None:
        yield None
        return
    old_tag, pool.tag = pool.tag, tag
    token = install(pool)
    try:
        yield pool
    finally:
        restore(pool, token)
        pool.tag = old_tag
