"""The pool's invariants under random alloc/free sequences, against a fake system allocator
(integer addresses from a counter: nothing real is allocated)."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime.memory.pool import ALIGN, Pool, align_up


class FakeSystem:
    """Hands out increasing fake addresses, records live underlying allocations, refuses past
    `limit` bytes live (None: no limit)."""

    def __init__(self, limit=None):
        self.next_addr, self.limit = 1 << 20, limit
        self.live = {}  # addr -> nbytes
        self.n_allocs = self.n_frees = 0
        self.on_alloc = None  # callback run inside alloc (re-entrancy tests)

    def alloc(self, nbytes):
        if self.on_alloc is not None:
            self.on_alloc()
        if self.limit is not None and sum(self.live.values()) + nbytes > self.limit:
            return 0
        addr = self.next_addr
        self.next_addr += nbytes + 4096  # gaps: chunks are never adjacent
        self.live[addr] = nbytes
        self.n_allocs += 1
        return addr

    def free(self, addr):
        assert addr in self.live, f"free of {addr:#x}, not a live underlying allocation"
        del self.live[addr]
        self.n_frees += 1


class Model:
    """The pool's expected counters, computed independently of it."""

    def __init__(self, pool):
        self.pool = pool
        self.live = {}  # addr -> (size, tag)
        self.allocated = self.peak = 0

    def alloc(self, nbytes, tag):
        self.pool.tag = tag
        addr = self.pool.alloc(nbytes)
        if addr:
            assert addr not in self.live
            size = align_up(nbytes)
            assert self.pool.size_of(addr) == size
            self.live[addr] = (size, tag)
            self.allocated += size
            self.peak = max(self.peak, self.allocated)
        return addr

    def free(self, addr):
        size, _ = self.live.pop(addr)
        self.allocated -= size
        self.pool.free(addr)

    def verify(self, system):
        pool = self.pool
        pool.check()
        spans = sorted((a, a + s) for a, (s, _) in self.live.items())
        for (_, end), (start, _) in zip(spans, spans[1:]):
            assert end <= start, "two live blocks overlap"
        # every live block lies inside a live underlying allocation
        for start, end in spans:
            assert any(base <= start and end <= base + n for base, n in system.live.items())
        assert pool.allocated == self.allocated
        assert pool.peak_allocated == self.peak
        assert pool.reserved == sum(system.live.values())
        assert pool.reserved >= pool.allocated
        assert pool.reserved <= pool.capacity
        tags = {}
        for size, tag in self.live.values():
            tags[tag] = tags.get(tag, 0) + size
        assert {t: b for t, b in pool.by_tag.items() if b} == tags
        assert sum(pool.by_tag.values()) == pool.allocated
        assert pool.n_system_allocs - pool.n_system_frees == len(system.live)


CONFIGS = [("auto_growth", 0, 1 << 40), ("auto_growth", 0, 8192),
           ("naive_best_fit", 0, 1 << 40), ("naive_best_fit", 1024, 1 << 40),
           ("naive_best_fit", 4096, 16384), ("naive_best_fit", 256, 4096)]

ops = st.lists(st.tuples(st.sampled_from(["alloc", "alloc", "free", "release"]),
                         st.integers(1, 3000), st.sampled_from(["a", "b", "c"]),
                         st.integers(0, 1 << 30)), max_size=40)


@pytest.mark.parametrize("strategy,chunk,capacity", CONFIGS)
@settings(max_examples=25, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(sequence=ops)
def test_random_sequences_keep_invariants(strategy, chunk, capacity, sequence):
    system = FakeSystem()
    pool = Pool(system, strategy, capacity_bytes=capacity, chunk_bytes=chunk)
    model = Model(pool)
    for kind, nbytes, tag, pick in sequence:
        if kind == "alloc":
            before = (pool.allocated, pool.reserved)
            addr = model.alloc(nbytes, tag)
            if addr == 0:  # only a capacity refusal is allowed
                info = pool.last_oom
                # the pool reports the aligned bytes it needed (what it compares with `free`)
                assert info is not None and info.requested == align_up(nbytes)
                assert info.capacity == capacity
                assert align_up(nbytes) + info.reserved > capacity or \
                    max(align_up(nbytes), chunk) + info.reserved > capacity
                assert pool.allocated == before[0]
        elif kind == "free" and model.live:
            addrs = sorted(model.live)
            model.free(addrs[pick % len(addrs)])
        elif kind == "release":
            pool.release_cached()
        model.verify(system)
    for addr in list(model.live):
        model.free(addr)
        model.verify(system)
    pool.release_cached()
    model.verify(system)
    assert pool.allocated == 0 and pool.reserved == 0 and pool.cached == 0
    assert system.live == {}
    assert system.n_allocs == system.n_frees == pool.n_system_allocs == pool.n_system_frees


@settings(max_examples=25, deadline=None, database=None)
@given(sequence=st.lists(st.tuples(st.booleans(), st.integers(1, 5000), st.integers(0, 999)),
                         max_size=50))
def test_naive_best_fit_without_chunks_is_one_underlying_allocation_per_request(sequence):
    system = FakeSystem()
    pool = Pool(system, "naive_best_fit", chunk_bytes=0)
    model = Model(pool)
    requests = frees = 0
    for is_alloc, nbytes, pick in sequence:
        if is_alloc or not model.live:
            assert model.alloc(nbytes, "t")
            requests += 1
            # exactly the aligned request, nothing cached
            assert system.live[max(system.live)] == align_up(nbytes)
        else:
            model.free(sorted(model.live)[pick % len(model.live)])
            frees += 1
        assert system.n_allocs == requests and system.n_frees == frees
        assert pool.cached == 0 and pool.reserved == pool.allocated
        model.verify(system)


def test_auto_growth_reuses_cached_blocks():
    system = FakeSystem()
    pool = Pool(system, "auto_growth")
    for _ in range(5):
        addrs = [pool.alloc(n) for n in (100, 5000, 64, 700)]
        for a in addrs:
            pool.free(a)
    assert system.n_allocs == 4  # the first round only
    pool.check()


@pytest.mark.parametrize("strategy,chunk", [("auto_growth", 0), ("naive_best_fit", 0),
                                            ("naive_best_fit", 2048)])
def test_capacity_refusal_reports_and_pool_stays_usable(strategy, chunk):
    system = FakeSystem()
    cap = 8192
    pool = Pool(system, strategy, capacity_bytes=cap, chunk_bytes=chunk)
    model = Model(pool)
    pool.tag = "x"
    keep = model.alloc(3000, "x")
    assert keep
    assert pool.last_oom is None
    allocated, reserved = pool.allocated, pool.reserved
    assert model.alloc(6000, "x") == 0  # 6016 + 3008 > 8192: refused
    info = pool.last_oom
    assert info is not None and pool.n_oom == 1
    assert info.requested == align_up(6000)
    assert info.allocated == allocated and info.reserved == reserved
    assert info.capacity == cap
    assert info.free == cap - info.reserved + info.cached_free
    assert info.requested > info.free
    model.verify(system)
    # a later small request is served and the invariants hold
    small = model.alloc(100, "y")
    assert small
    model.verify(system)
    model.free(small)
    model.free(keep)
    # with everything free, the big one fits (cached chunks are given back first)
    big = model.alloc(6000, "x")
    assert big
    model.verify(system)
    model.free(big)
    pool.release_cached()
    model.verify(system)
    assert system.live == {} and pool.reserved == 0


def test_system_allocator_failure_is_a_refusal():
    system = FakeSystem(limit=4096)
    pool = Pool(system, "auto_growth")
    model = Model(pool)
    assert model.alloc(4000, "t")
    assert model.alloc(1000, "t") == 0
    assert pool.last_oom.system_error and pool.last_oom.requested == align_up(1000)
    model.verify(system)


def test_free_while_busy_is_deferred_then_applied():
    system = FakeSystem()
    pool = Pool(system, "auto_growth")
    model = Model(pool)
    a = model.alloc(500, "t")
    b = model.alloc(500, "t")
    pool._busy = True
    try:
        model.free(a)  # deferred: the pool is "inside an operation"
        assert pool.owns(a) and pool.allocated == 2 * align_up(500)
        assert pool.alloc(10) is None  # re-entrant alloc: caller must go to the system
    finally:
        pool._busy = False
    assert pool._deferred == [a]
    model.free(b)  # the next operation drains the deferred free too
    assert pool._deferred == [] and not pool.owns(a)
    model.verify(system)
    assert pool.allocated == 0


def test_free_from_inside_the_system_allocator_is_deferred():
    """A finalizer (GC) running inside the system allocator call frees a block re-entrantly."""
    system = FakeSystem()
    pool = Pool(system, "auto_growth")
    model = Model(pool)
    victim = model.alloc(300, "t")
    seen = []

    def gc_runs():
        if victim in model.live:
            seen.append(pool._busy)
            pool.free(victim)  # pool is busy: deferred
            assert pool.owns(victim) and pool._deferred == [victim]

    system.on_alloc = gc_runs
    new = model.alloc(10000, "t")  # no cached block fits: goes to the system
    system.on_alloc = None
    assert seen == [True]
    # the victim was still held when the new block was granted (it counts in the peak),
    # and is freed by the time alloc returns
    size, _ = model.live.pop(victim)
    model.allocated -= size
    assert new and not pool.owns(victim) and pool._deferred == []
    model.verify(system)
    model.free(new)
    pool.release_cached()
    model.verify(system)
    assert system.live == {}


def test_release_cached_while_busy_does_nothing():
    system = FakeSystem()
    pool = Pool(system, "auto_growth")
    pool.free(pool.alloc(ALIGN))
    pool._busy = True
    try:
        assert pool.release_cached() == 0
    finally:
        pool._busy = False
    assert pool.release_cached() == ALIGN
    assert system.live == {}
