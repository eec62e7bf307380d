"""A memory pool over an underlying (system) allocator: best-fit blocks carved from chunks.

The pool hands out byte ranges (integer addresses) of its chunks. Two strategies, as in Paddle:

- naive_best_fit: chunks of `chunk_bytes` are taken from the system allocator when no cached
  block fits; a request larger than a chunk (or any request when `chunk_bytes` is 0) gets an
  underlying allocation of its own, returned to the system as soon as it is freed. With
  `next_chunk` (the GPU pool), `chunk_bytes` is only that threshold and each chunk is
  `next_chunk(pool, first)` bytes (at least the request), `first` while the pool holds no chunk:
  Paddle's FLAGS_initial_gpu_memory_in_mb / FLAGS_reallocate_gpu_memory_in_mb.
- auto_growth: when no cached block fits, exactly the (aligned) request is taken from the
  system; freed blocks stay cached and are split for later requests.

A freed block is merged at once with its free neighbours in the same chunk (as Paddle's
auto_growth_best_fit_allocator does), so free space is always held in the largest pieces it can
be. Free blocks are indexed by exact size (a training loop asks for the same sizes every step, so
the common case is one dict lookup); otherwise the smallest block that fits is split; only then
does the pool grow. Under auto_growth two rules keep reserved memory close to the demand (peak
reserved / peak allocated), which plain best fit does not in a training step, where a large
temporary (an im2col buffer, say) is freed and its chunk is then carved up by small blocks that
outlive the next large request:

- a free block more than `SPLIT_RATIO` times the request (and over `SMALL_BLOCK`) is not split
  while growing by the request keeps reserved within `GROW_SLACK` times the demand (the larger
  of the peak allocated and allocated + the request): large free blocks are kept for large
  requests, and small blocks that live long gather in small chunks;
- when the pool must grow past the demand and wholly free chunks add up to at least
  `RELEASE_FRACTION` of the request, they are given back first (they cannot serve it; a phase
  change, such as evaluation at another batch size after training, leaves such chunks behind).

In a loop that repeats its requests the pool settles after a few steps, and then serves every
step without an underlying allocation.

It never grows past `capacity_bytes` (reserved bytes, all chunks together): it first splits a
kept large block, gives wholly free chunks back to the system, then refuses: `alloc` returns 0
and `last_oom` says why (callers turn that into an exception with their own context).

Counters are exact (see `stats()`): allocated (bytes in live blocks), reserved (bytes in
chunks), their peaks, underlying allocation count and time, requests, and allocated bytes per
tag (the category of what is being allocated: parameters, activations, ...).
"""

import bisect
import threading
import time
from dataclasses import dataclass, field
from typing import Dict, Optional

ALIGN = 64
SPLIT_RATIO = 8  # auto_growth: a free block over this many times the request (and over
SMALL_BLOCK = 128 << 10  # this) is kept for larger requests ...
GROW_SLACK = 1.5  # ... while growing keeps reserved within this many times the demand
RELEASE_FRACTION = 0.5  # auto_growth: idle chunks given back before growing when they add up to
#                         at least this share of the request (and the pool is past the demand)
_perf = time.perf_counter


def align_up(nbytes, align=ALIGN):
    return max(align, (nbytes + align - 1) // align * align)


def fmt_bytes(nbytes):
    """1536 -> '1.5 KiB' (bytes below 1 KiB as '123 B')."""
    nbytes = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(nbytes) < 1024 or unit == "GiB":
            return f"{nbytes:.0f} {unit}" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1024
    return f"{nbytes:.1f} TiB"


class _Block:
    __slots__ = ("addr", "size", "chunk", "prev", "next", "free", "tag")

    def __init__(self, addr, size, chunk, prev=None, nxt=None):
        self.addr, self.size, self.chunk = addr, size, chunk
        self.prev, self.next = prev, nxt
        self.free, self.tag = True, None


@dataclass
class OOMInfo:
    """Why the pool refused a request (all in bytes)."""

    requested: int
    allocated: int
    reserved: int
    capacity: int
    peak_allocated: int
    cached_free: int  # free bytes inside reserved chunks
    largest_free_block: int
    system_error: bool = False  # the system allocator itself failed (below the capacity)
    by_tag: Dict[str, int] = field(default_factory=dict)

    @property
    def free(self):
        """Bytes the pool could still hand out: unreserved capacity plus cached free blocks."""
        return max(0, self.capacity - self.reserved) + self.cached_free


class Pool:
    """Best-fit pool; `strategy` is 'naive_best_fit' or 'auto_growth'."""

    gives_back = True  # wholly free chunks may go back to the system (False: kept until True)

    def __init__(self, system, strategy="auto_growth", capacity_bytes=1 << 62, chunk_bytes=0,
                 name="pool", next_chunk=None):
        if strategy not in ("naive_best_fit", "auto_growth"):
            raise ValueError(f"unknown allocator strategy {strategy!r}")
        self.system, self.strategy, self.name = system, strategy, name
        self.capacity = int(capacity_bytes)
        self.chunk_bytes = int(chunk_bytes) if strategy == "naive_best_fit" else 0
        self.next_chunk = next_chunk  # None: every chunk is chunk_bytes (see the module)
        self.poison = False  # fill new blocks with 0xEF (FLAGS_init_allocated_mem)
        self.tag = "other"  # category of the next allocations (set by the executor)
        self._lock = threading.RLock()
        self._busy = False  # inside an operation: a re-entrant free (GC) is deferred
        self._deferred = []
        self._live: Dict[int, _Block] = {}
        self._cached: Dict[int, list] = {}  # size -> free blocks of exactly that size
        self._sizes = []  # sorted keys of _cached (a size keeps its, possibly empty, stack ...)
        self._prune_at = 64  # ... until there are this many: then empty ones are dropped
        self._chunks: Dict[int, int] = {}  # chunk base address -> size (direct ones too)
        self._direct = set()  # chunk bases that are one block each (freed straight back)
        self.allocated = self.reserved = self.cached = 0
        self.peak_allocated = self.peak_reserved = 0
        self.n_requests = self.n_frees = 0
        self.n_system_allocs = self.n_system_frees = 0
        self.system_alloc_s = 0.0
        self.by_tag: Dict[str, int] = {}
        self.by_tag_at_peak: Dict[str, int] = {}
        self.window_peak = 0  # peak of `allocated` since reset_window()
        self.last_oom: Optional[OOMInfo] = None
        self.n_oom = 0

    # --- public -------------------------------------------------------------------------------
    def alloc(self, nbytes, tag=None):
        """Address of a block of at least nbytes, tagged `tag` (default: `self.tag`); 0 when
        the pool cannot serve it (out of memory: see `last_oom`); None when called
        re-entrantly from inside a pool operation (a finalizer run by the GC), in which case
        the caller must go to the system itself."""
        size = (nbytes + ALIGN - 1) // ALIGN * ALIGN or ALIGN
        with self._lock:
            if self._busy:
                return None
            self._busy = True
            try:
                stack = self._cached.get(size)
                if stack:
                    block = stack.pop()
                    self.cached -= size
                else:
                    block = self._take(size)
                    if block is None:
                        return 0
                tag = block.tag = tag or self.tag
                block.free = False
                self._live[block.addr] = block
                self.n_requests += 1
                self.allocated += size
                self.by_tag[tag] = self.by_tag.get(tag, 0) + size
                if self.allocated > self.window_peak:
                    self._new_window_peak()
                return block.addr
            finally:
                if self._deferred:
                    self._drain()
                self._busy = False

    def free(self, addr):
        """Return the block at addr (which this pool handed out)."""
        with self._lock:
            if self._busy:
                self._deferred.append(addr)
                return
            self._busy = True
            try:
                self._release_block(addr)
            finally:
                if self._deferred:
                    self._drain()
                self._busy = False

    def take(self, nbytes, tag, addr):
        """`alloc(nbytes, tag)`, in fewer steps where it hands out the block at `addr` again:
        the last block of its size freed, not merged since (a step's memory plan takes its
        arena so every step: memory/arena.py). The same block, counters and peaks."""
        size = (nbytes + ALIGN - 1) // ALIGN * ALIGN or ALIGN
        lock = self._lock
        lock.acquire()
        try:
            stack = self._cached.get(size)
            if not stack or stack[-1].addr != addr or self._busy:
                return self.alloc(nbytes, tag)
            block = stack.pop()
            self.cached -= size
            tag = block.tag = tag or self.tag
            block.free = False
            self._live[addr] = block
            self.n_requests += 1
            allocated = self.allocated = self.allocated + size
            by_tag = self.by_tag
            by_tag[tag] = by_tag.get(tag, 0) + size
            if allocated > self.window_peak:  # (all else done: a finalizer run by a
                self._new_window_peak()  # collection in here finds the pool consistent)
            return addr
        finally:
            lock.release()

    def give(self, addr):
        """`free(addr)`, in fewer steps where the block merges with no neighbour and blocks
        of its size were cached before (a step's memory plan gives its arena back so every
        step: memory/arena.py). The same counters and cached blocks."""
        lock = self._lock
        lock.acquire()
        try:
            block = self._live.get(addr)
            if block is None or self._busy:
                return self.free(addr)
            prev, nxt, size = block.prev, block.next, block.size
            stack = self._cached.get(size)
            if (stack is None or (prev is not None and prev.free)
                    or (nxt is not None and nxt.free) or block.chunk in self._direct):
                return self.free(addr)
            del self._live[addr]
            self.n_frees += 1
            self.allocated -= size
            self.by_tag[block.tag] -= size
            block.free, block.tag = True, None
            stack.append(block)
            self.cached += size
        finally:
            lock.release()

    def owns(self, addr):
        return addr in self._live

    def size_of(self, addr):
        block = self._live.get(addr)
        return block.size if block is not None else 0

    def retag(self, addr, tag):
        """Move a live block to another category (e.g. a buffer that became a parameter)."""
        with self._lock:
            block = self._live.get(addr)
            if block is None or block.tag == tag:
                return
            self.by_tag[block.tag] -= block.size
            self.by_tag[tag] = self.by_tag.get(tag, 0) + block.size
            block.tag = tag

    def release_cached(self):
        """Give every wholly free chunk back; returns bytes freed."""
        with self._lock:
            if self._busy:
                return 0
            self._busy = True
            try:
                return self._release_free_chunks()
            finally:
                self._drain()
                self._busy = False

    def reset_window(self):
        """Start a new window for `window_peak` (e.g. at each step)."""
        self.window_peak = self.allocated

    def largest_free_block(self):
        with self._lock:  # (another thread may be allocating from the pool: a reader's)
            return next((s for s in reversed(self._sizes) if self._cached[s]), 0)

    def fragmentation(self):
        """1 - largest free block / all cached free bytes (0: nothing cached, or one piece),
        from one consistent look at the pool (a reader thread may be allocating from it)."""
        with self._lock:
            cached = self.cached
            return 0.0 if cached == 0 else 1.0 - self.largest_free_block() / cached

    def stats(self):
        return {"strategy": self.strategy, "capacity": self.capacity,
                "chunk_bytes": self.chunk_bytes, "allocated": self.allocated,
                "reserved": self.reserved, "peak_allocated": self.peak_allocated,
                "peak_reserved": self.peak_reserved, "requests": self.n_requests,
                "frees": self.n_frees, "system_allocs": self.n_system_allocs,
                "system_frees": self.n_system_frees, "system_alloc_s": self.system_alloc_s,
                "chunks": len(self._chunks), "cached_free": self.cached,
                "fragmentation": self.fragmentation(), "by_tag": dict(self.by_tag),
                "by_tag_at_peak": dict(self.by_tag_at_peak), "n_oom": self.n_oom}

    def check(self):
        """Verify the pool's invariants (tests): blocks tile their chunks without overlap and
        every counter matches the blocks. Raises AssertionError on the first violation."""
        with self._lock:
            _check_pool(self)

    # --- internals ----------------------------------------------------------------------------
    def _drain(self):
        while self._deferred:
            self._release_block(self._deferred.pop())

    def _new_window_peak(self):
        self.window_peak = self.allocated
        if self.allocated > self.peak_allocated:
            self.peak_allocated = self.allocated
            self.by_tag_at_peak = dict(self.by_tag)

    def _take(self, size):
        """A block of `size` from a larger cached block or the system (None: refused)."""
        if self.strategy == "naive_best_fit":
            if self.chunk_bytes == 0 or size > self.chunk_bytes:
                return self._direct_block(size)
            block = self._best_fit(size, None) or self._grow(self._chunk_size(size), size)
        else:  # _best_fit(size, limit), inlined: the common case of a step's requests
            if len(self._sizes) > self._prune_at:
                self._prune_sizes()
            sizes, cached, block = self._sizes, self._cached, None
            limit = max(size * SPLIT_RATIO, SMALL_BLOCK)
            for i in range(bisect.bisect_left(sizes, size), len(sizes)):
                stack = cached[sizes[i]]
                if stack:
                    if sizes[i] <= limit:
                        block = stack.pop()
                        self.cached -= block.size
                    break
            if block is None:
                block = self._grow_auto(size)
        if block is None:
            return None
        rest_size = block.size - size
        if rest_size >= ALIGN:  # split: the rest stays cached
            nxt = block.next
            rest = _Block(block.addr + size, rest_size, block.chunk, block, nxt)
            if nxt is not None:
                nxt.prev = rest
            block.next, block.size = rest, size
            stack = self._cached.get(rest_size)
            if stack is None:
                self._cached[rest_size] = [rest]
                bisect.insort(self._sizes, rest_size)
            else:
                stack.append(rest)
            self.cached += rest_size
        return block

    def _chunk_size(self, size):
        """Bytes of the next naive_best_fit chunk for a request of `size`."""
        if self.next_chunk is None:
            return self.chunk_bytes
        first = len(self._chunks) == len(self._direct)  # no shared chunk held
        return max(align_up(self.next_chunk(self, first)), size)

    def _grow_auto(self, size):
        """auto_growth without a cached block of size..SPLIT_RATIO x size: split a larger one,
        or grow (giving idle chunks back first where they add up to enough; see the module)."""
        larger = self.largest_free_block() >= size
        demand = max(self.peak_allocated, self.allocated + size)
        if larger:
            if self.reserved + size > min(GROW_SLACK * demand, self.capacity):
                return self._best_fit(size, None)
        elif self.reserved + size > demand and self.gives_back:
            idle = [b for stack in self._cached.values() for b in stack
                    if b.prev is None and b.next is None]
            if idle and sum(b.size for b in idle) >= RELEASE_FRACTION * size:
                for b in idle:
                    self._uncache(b)
                    self._system_free(b.addr)
        block = self._grow(size, size, refuse=not larger)
        if block is None and larger:  # the system failed: use the large block after all
            block = self._best_fit(size, None)
            if block is None:
                self._refuse(size, system_error=True)
        return block

    def _grow(self, nbytes, requested, refuse=True):
        base = self._system_alloc(nbytes, requested, refuse)
        return _Block(base, nbytes, base) if base else None

    def _direct_block(self, size):
        base = self._system_alloc(size, size)
        if base == 0:
            return None
        self._direct.add(base)
        return _Block(base, size, base)

    def _best_fit(self, size, limit):
        """Take the smallest cached block of at least `size` bytes and at most `limit` (None:
        no limit); None if there is none."""
        if len(self._sizes) > self._prune_at:
            self._prune_sizes()
        sizes, cached = self._sizes, self._cached
        for i in range(bisect.bisect_left(sizes, size), len(sizes)):
            found = sizes[i]
            stack = cached[found]
            if stack:
                if limit is not None and found > limit:
                    return None
                self.cached -= found
                return stack.pop()
        return None

    def _prune_sizes(self):
        """Drop the sizes whose stacks are empty (merged blocks leave sizes never seen again)."""
        cached = self._cached
        for size in [s for s in self._sizes if not cached[s]]:
            del cached[size]
        self._sizes = sorted(cached)
        self._prune_at = max(64, 2 * len(self._sizes))

    def _system_alloc(self, nbytes, requested, refuse=True):
        if self.reserved + nbytes > self.capacity:
            self._release_free_chunks()
        if self.reserved + nbytes > self.capacity:
            return self._refuse(requested) if refuse else 0
        t0 = _perf()
        base = self.system.alloc(nbytes)
        self.system_alloc_s += _perf() - t0
        if not base:
            if self._release_free_chunks():
                base = self.system.alloc(nbytes)
            if not base:
                return self._refuse(requested, system_error=True) if refuse else 0
        self.n_system_allocs += 1
        self._chunks[base] = nbytes
        self.reserved += nbytes
        if self.reserved > self.peak_reserved:
            self.peak_reserved = self.reserved
        return base

    def _refuse(self, requested, system_error=False):
        self.n_oom += 1
        self.last_oom = OOMInfo(requested, self.allocated, self.reserved, self.capacity,
                                self.peak_allocated, self.cached, self.largest_free_block(),
                                system_error, dict(self.by_tag))
        return 0

    def _release_block(self, addr):
        block = self._live.pop(addr, None)
        if block is None:
            return
        self.n_frees += 1
        self.allocated -= block.size
        self.by_tag[block.tag] -= block.size
        block.free, block.tag = True, None
        if block.chunk in self._direct:
            self._direct.discard(block.chunk)
            self._system_free(block.chunk)
            return
        cached = self._cached
        prev, nxt = block.prev, block.next  # merge with free neighbours (same chunk)
        if prev is not None and prev.free:
            stack = cached[prev.size]
            if stack[-1] is prev:
                stack.pop()
            else:
                stack.remove(prev)
            self.cached -= prev.size
            prev.size += block.size
            prev.next = nxt
            if nxt is not None:
                nxt.prev = prev
            block = prev
        if nxt is not None and nxt.free:
            stack = cached[nxt.size]
            if stack[-1] is nxt:
                stack.pop()
            else:
                stack.remove(nxt)
            self.cached -= nxt.size
            block.size += nxt.size
            nxt = block.next = nxt.next
            if nxt is not None:
                nxt.prev = block
        size = block.size
        stack = cached.get(size)
        if stack is None:
            cached[size] = [block]
            bisect.insort(self._sizes, size)
        else:
            stack.append(block)
        self.cached += size

    def _uncache(self, block):
        size = block.size
        stack = self._cached[size]
        if stack[-1] is block:
            stack.pop()
        else:
            stack.remove(block)  # blocks compare by identity
        self.cached -= size

    def _release_free_chunks(self):
        """Give every wholly free chunk back to the system; returns the bytes given back."""
        if not self.gives_back:
            return 0
        released = 0
        for size in list(self._sizes):
            for block in list(self._cached.get(size, ())):
                if block.prev is None and block.next is None:
                    self._uncache(block)
                    released += size
                    self._system_free(block.addr)
        return released

    def _system_free(self, base):
        self.reserved -= self._chunks.pop(base)
        self.n_system_frees += 1
        self.system.free(base)


def _check_pool(pool):
    chunks = {}
    for block in list(pool._live.values()) + [b for s in pool._cached.values() for b in s]:
        chunks.setdefault(block.chunk, []).append(block)
    assert set(chunks) <= set(pool._chunks), "a block outside every chunk"
    for base, blocks in chunks.items():
        blocks.sort(key=lambda b: b.addr)
        end = base
        for block in blocks:
            assert block.addr == end, f"gap or overlap at {block.addr:#x} (expected {end:#x})"
            end = block.addr + block.size
        assert end == base + pool._chunks[base], "blocks do not tile their chunk"
    assert pool.allocated == sum(b.size for b in pool._live.values()), "allocated counter"
    assert pool.cached == sum(b.size for s in pool._cached.values() for b in s), "cached counter"
    assert pool.reserved == sum(pool._chunks.values()), "reserved counter"
    assert pool.allocated + pool.cached == pool.reserved, "reserved != allocated + cached"
    assert pool._sizes == sorted(pool._cached), "size index"
    for size, stack in pool._cached.items():
        assert all(b.size == size and b.free for b in stack), "a cached block of another size"
    for block in (b for s in pool._cached.values() for b in s):
        assert not (block.next is not None and block.next.free), "two adjacent free blocks"
        assert (block.prev is None) == (block.addr == block.chunk), "a broken block list"
    assert all(v >= 0 for v in pool.by_tag.values()), "a negative per-tag counter"
    assert sum(pool.by_tag.values()) == pool.allocated, "per-tag counters"
