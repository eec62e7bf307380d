"""The GPU pool: device memory from cudaMalloc (through CuPy) carved by the same Pool as the CPU's,
serving CuPy's allocations while installed (CuPy's allocator hook).

Paddle 1.8's rules, read from FLAGS when the pool is built (memory/__init__.pool_for):

- FLAGS_allocator_strategy=auto_growth (default): cudaMalloc exactly the (aligned) request when no
  cached block fits; freed blocks stay cached for later requests.
- naive_best_fit: chunks. The memory available to allocate is the device's free memory
  (cudaMemGetInfo; at most the capacity less what the pool holds) less the 5% Paddle keeps out.
  The first chunk is FLAGS_initial_gpu_memory_in_mb if > 0, else FLAGS_fraction_of_gpu_memory_to_use
  x available; each later chunk FLAGS_reallocate_gpu_memory_in_mb if > 0, else the fraction of
  what is available when the second chunk is taken (computed once, as Paddle's BuddyAllocator
  does). A request larger than both sizes (as computed when the pool is built) gets a cudaMalloc
  of its own, cudaFree'd as soon as it is freed: so a fraction of 0 makes one cudaMalloc per
  allocation (Paddle's way to measure true usage).
- FLAGS_gpu_memory_limit_mb: the pool's capacity (its cudaMalloc'd bytes never exceed it); 0: the
  device's total memory. It follows the flag at once.
- FLAGS_gpu_allocator_retry_time: after a refusal, wait up to this many ms for another thread to
  free device memory, retrying after each free (Paddle's RetryAllocator). Where the process has a
  single thread nothing can be freed meanwhile, so it does not wait (Paddle would, for nothing).
- FLAGS_init_allocated_mem: each new block is filled with 0xEF bytes (cudaMemset).

The hook: while `install(pool)` is in force in a thread (CuPy's thread-local allocator,
`cupy.cuda.using_allocator`), each CuPy allocation of that thread is a block of the pool, handed to
CuPy as `MemoryPointer(UnownedMemory(addr, size, owner), 0)`; the owner gives the block back when
CuPy lets go of the memory (the last array or view using it dies). Blocks are reused in stream
order: the executor launches every kernel on the current stream, so a block handed out again is
written only after the kernels that read it (CuPy's own pool assumes the same, per stream). A
refusal raises DeviceOutOfMemory (a MemoryError) whose message names the flags to change; inside
Executor.run it becomes a PoolOutOfMemory naming the op, as on the CPU.
"""

import atexit
import threading
import time

from .. import backend
from ..errors import DeviceOutOfMemory
from ..flags import FLAGS
from .numpy_hook import _completing
from .pool import Pool, align_up, fmt_bytes

MB = 1 << 20
RESERVE_FRACTION = 0.05  # Paddle keeps this share of the available memory out of any chunk ...
MIN_CHUNK_BYTES = 256  # ... and makes no chunk when less than this is left
POISON = 0xEF


class CUDASystemAllocator:
    """cudaMalloc/cudaFree on one device through CuPy's runtime bindings: the GPU pool's
    underlying allocation. Addresses are ints; 0 on failure (the error kept in `last_error`)."""

    def __init__(self, cupy, device_id):
        self.cupy, self.device_id = cupy, device_id
        self.last_error = None
        self._total_bytes = None

    def alloc(self, nbytes):
        cuda = self.cupy.cuda
        try:
            with cuda.Device(self.device_id):
                return cuda.runtime.malloc(nbytes)
        except Exception as err:  # CUDARuntimeError (cudaErrorMemoryAllocation, mostly)
            self.last_error = err
            return 0

    def free(self, addr):
        cuda = self.cupy.cuda
        with cuda.Device(self.device_id):
            cuda.runtime.free(addr)

    def memset(self, addr, value, nbytes):
        cuda = self.cupy.cuda
        with cuda.Device(self.device_id):
            cuda.runtime.memset(addr, value, nbytes)

    def mem_info(self):
        """(free bytes, total bytes) of the device: cudaMemGetInfo."""
        cuda = self.cupy.cuda
        with cuda.Device(self.device_id):
            free_bytes, total_bytes = cuda.runtime.memGetInfo()
        self._total_bytes = total_bytes
        return free_bytes, total_bytes

    def total_bytes(self):
        return self._total_bytes if self._total_bytes is not None else self.mem_info()[1]


# --- Paddle's chunk rule (platform/gpu_info.cc, memory/detail/buddy_allocator.cc) --------------
def config():
    """The flags a device pool is built from (a change of any rebuilds it)."""
    return (FLAGS.get("allocator_strategy"), FLAGS.get("fraction_of_gpu_memory_to_use"),
            FLAGS.get("initial_gpu_memory_in_mb"), FLAGS.get("reallocate_gpu_memory_in_mb"))


def capacity_bytes(system):
    """FLAGS_gpu_memory_limit_mb, or the device's total memory."""
    limit_mb = FLAGS.get("gpu_memory_limit_mb")
    return limit_mb * MB if limit_mb > 0 else system.total_bytes()


def available_to_alloc(system, reserved_bytes, capacity):
    """GpuAvailableMemToAlloc: the device's free memory (at most the capacity less what the pool
    already holds) less 5%; 0 when under 256 bytes are left."""
    free_bytes = system.mem_info()[0]
    available = max(0, min(free_bytes, capacity - reserved_bytes))
    to_alloc = available - int(RESERVE_FRACTION * available)
    return to_alloc if to_alloc >= MIN_CHUNK_BYTES else 0


def alloc_size(available, later, fraction, initial_mb, reallocate_mb):
    """GpuAllocSize: the first (later: each further) chunk; the flag's MB when > 0, else
    `fraction` of the available bytes."""
    flag_mb = reallocate_mb if later else initial_mb
    return flag_mb * MB if flag_mb > 0 else int(available * fraction)


class ChunkRule:
    """The pool's `next_chunk` under naive_best_fit: the first chunk is sized when it is taken;
    the later chunks' size is computed once, when the second chunk is taken."""

    def __init__(self, cfg):
        _, self.fraction, self.initial_mb, self.reallocate_mb = cfg
        self.later_bytes = None

    def max_chunk(self, available):
        """GpuMaxChunkSize when the pool is built: requests above it get their own cudaMalloc."""
        return max(self.size(available, False), self.size(available, True))

    def size(self, available, later):
        return alloc_size(available, later, self.fraction, self.initial_mb, self.reallocate_mb)

    def __call__(self, pool, first):
        if not first and self.later_bytes is not None:
            return self.later_bytes
        size = self.size(available_to_alloc(pool.system, pool.reserved, pool.capacity), not first)
        if not first:
            self.later_bytes = size
        return size


def make_pool(cupy, device_id, cfg):
    """A pool of device `device_id` under the flags `cfg` (see config())."""
    system = CUDASystemAllocator(cupy, device_id)
    capacity = capacity_bytes(system)
    rule = ChunkRule(cfg)
    max_chunk = 0
    if cfg[0] == "naive_best_fit":
        max_chunk = rule.max_chunk(available_to_alloc(system, 0, capacity))
    pool = Pool(system, cfg[0], capacity, max_chunk, name=f"CUDAPlace({device_id})",
                next_chunk=rule)
    pool.device_id = device_id
    pool.freed = threading.Condition()  # notified on frees while someone waits to retry
    pool.waiting = 0
    return pool


# --- CuPy's allocator hook ---------------------------------------------------------------------
_RUNNING = [True]  # False from interpreter exit on: the frees of arrays still alive are skipped


@atexit.register
def _stop_freeing():
    """At exit the arrays still alive die while modules are being torn down, when the pool's
    code can no longer run; their device memory goes with the process (CUDA context) anyway."""
    _RUNNING[0] = False


class _Owner:
    """UnownedMemory's owner: gives the block back when CuPy lets go of it."""

    __slots__ = ("release", "addr")

    def __init__(self, release, addr):
        self.release, self.addr = release, addr

    def __del__(self, _running=_RUNNING, _complete=_completing):
        if _running[0]:
            _complete(self.release, self.addr)  # a signal's exception must not lose the block


class Hook:
    """CuPy's allocator for one pool: `hook(nbytes) -> MemoryPointer`. Allocations are tagged
    `tag`, or with the pool's current tag (`pool.tag`, set by the executor) when None."""

    def __init__(self, pool, tag=None):
        cuda = pool.system.cupy.cuda
        self.pool, self.tag = pool, tag
        self.memory_pointer, self.unowned = cuda.MemoryPointer, cuda.UnownedMemory

    def __call__(self, nbytes):
        pool = self.pool
        addr, release = pool.alloc(nbytes, self.tag), self.free
        if addr is None:  # re-entrant: a finaliser allocating while the pool is mid-operation
            addr, release = pool.system.alloc(align_up(nbytes)), pool.system.free
            if not addr:  # the pool did not refuse (no last_oom to describe): cudaMalloc did
                raise DeviceOutOfMemory(
                    f"Out of GPU memory on {pool.name}: cudaMalloc of {fmt_bytes(nbytes)} "
                    f"(asked while the pool was busy) failed: {pool.system.last_error}")
        elif addr == 0:
            addr = self._retry(nbytes)
        if not addr:
            raise DeviceOutOfMemory(oom_message(pool, nbytes), pool.last_oom)
        if pool.poison:
            pool.system.memset(addr, POISON, nbytes)
        owner = _Owner(release, addr)
        return self.memory_pointer(self.unowned(addr, nbytes, owner, pool.device_id), 0)

    def free(self, addr):
        pool = self.pool
        pool.free(addr)
        if pool.waiting:
            with pool.freed:
                pool.freed.notify_all()

    def _retry(self, nbytes):
        """FLAGS_gpu_allocator_retry_time: wait for another thread to free device memory,
        trying again after each free, until the time is up; 0 if it never fits."""
        pool, wait_s = self.pool, FLAGS.get("gpu_allocator_retry_time") / 1000
        if wait_s <= 0 or threading.active_count() < 2:
            return 0
        deadline = time.monotonic() + wait_s
        with pool.freed:
            pool.waiting += 1
            try:
                while pool.freed.wait(max(0.0, deadline - time.monotonic())):
                    addr = pool.alloc(nbytes, self.tag)
                    if addr:
                        return addr
                    if time.monotonic() >= deadline:
                        break
                return 0
            finally:
                pool.waiting -= 1


def hook_for(pool, tag=None):
    """The allocator hook of `pool` (made once per pool and tag)."""
    hooks = pool.__dict__.setdefault("_cupy_hooks", {})
    hook = hooks.get(tag)
    if hook is None:
        hook = hooks[tag] = Hook(pool, tag)
    return hook


def install(pool, tag=None):
    """Make `pool` serve this thread's CuPy allocations; returns the token for `restore`."""
    context = pool.system.cupy.cuda.using_allocator(hook_for(pool, tag))
    context.__enter__()
    return context


def restore(token):
    """Put back the allocator `install` replaced (CuPy restores the previous one)."""
    token.__exit__(None, None, None)


def cupy_module():
    """CuPy, or None where it (or a GPU) is not usable."""
    return backend.cupy_status()[0]


# --- out of memory -----------------------------------------------------------------------------
def oom_message(pool, requested):
    """What a refusal says: the pool's figures, what limited it, and the flags to change."""
    info = pool.last_oom
    limit_mb = FLAGS.get("gpu_memory_limit_mb")
    cap = f" = FLAGS_gpu_memory_limit_mb {limit_mb}" if limit_mb > 0 else " (the device's memory)"
    lines = [f"Out of GPU memory on {pool.name}: the {pool.strategy} pool could not serve "
             f"{fmt_bytes(requested)} (allocated {fmt_bytes(info.allocated)}, reserved "
             f"{fmt_bytes(info.reserved)}, capacity {fmt_bytes(info.capacity)}{cap}, cached free "
             f"{fmt_bytes(info.cached_free)} with the largest free block "
             f"{fmt_bytes(info.largest_free_block)})."]
    if info.system_error:
        lines.append(f"cudaMalloc itself failed below the capacity ({pool.system.last_error}): "
                     f"the device is full (other processes, or CuPy's own memory pool, hold the "
                     f"rest).")
    lines.append("Ways out: " + "; ".join(ways_out(info, pool.strategy)) + ".")
    return "\n".join(lines)


def ways_out(info, strategy):
    """The flags that could make a refused GPU request fit (each as one sentence)."""
    ways = []
    limit_mb = FLAGS.get("gpu_memory_limit_mb")
    if limit_mb > 0 and not info.system_error:
        ways.append(f"raise the cap: FLAGS_gpu_memory_limit_mb is {limit_mb}; export "
                    f"FLAGS_gpu_memory_limit_mb=<more> (0: no cap)")
    if strategy == "naive_best_fit":
        ways.append(f"grow on demand instead of in chunks (FLAGS_fraction_of_gpu_memory_to_use="
                    f"{FLAGS.get('fraction_of_gpu_memory_to_use')}, FLAGS_initial_gpu_memory_in_mb"
                    f"={FLAGS.get('initial_gpu_memory_in_mb')}, FLAGS_reallocate_gpu_memory_in_mb="
                    f"{FLAGS.get('reallocate_gpu_memory_in_mb')}): export "
                    f"FLAGS_allocator_strategy=auto_growth")
    if info.system_error:
        ways.append("free the device: other processes on it, or cupy.get_default_memory_pool()"
                    ".free_all_blocks() for arrays CuPy cached outside the runtime")
    if not ways:
        ways.append("use less memory per step: a smaller batch, garbage collection "
                    "(FLAGS_eager_delete_tensor_gb=0), inplace")
    return ways
