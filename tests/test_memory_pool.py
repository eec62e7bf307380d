"""The pool's invariants under random alloc/free sequences, against a fake system allocator
(integer addresses from a counter: nothing real is allocated)."""

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime.memory.pool import (ALIGN, GROW_SLACK, RELEASE_FRACTION, SMALL_BLOCK, Pool,
                                  align_up)


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


# --- auto_growth: merging, keeping large blocks for large requests, giving idle chunks back ------
KiB, MiB = 1 << 10, 1 << 20


def test_freed_neighbours_merge_at_once():
    system = FakeSystem()
    pool = Pool(system, "auto_growth")
    pool.free(pool.alloc(4096))
    a, b, c = (pool.alloc(1000) for _ in range(3))  # carved from the one 4096-byte chunk
    assert system.n_allocs == 1
    pool.free(a)
    pool.free(c)
    pool.check()
    assert pool.largest_free_block() == 4096 - 3 * 1024 + 1024  # c merged with the tail
    pool.free(b)  # a + b + c + tail: the whole chunk again, one free block
    pool.check()
    assert pool.cached == pool.largest_free_block() == 4096 and pool.fragmentation() == 0
    assert pool.alloc(4096) and system.n_allocs == 1


def test_a_large_free_block_is_kept_for_a_large_request():
    """The pattern that made best fit reserve 1.7x the peak on the bench CNN: a large temporary
    is freed, a small block that outlives the next large request would be carved from it."""
    system = FakeSystem()
    pool = Pool(system, "auto_growth")
    big = pool.alloc(4 * MiB)
    pool.free(big)
    small = pool.alloc(256 * KiB)  # 4 MiB > 8 x 256 KiB: not split, a chunk of its own
    assert not big <= small < big + 4 * MiB
    assert pool.alloc(4 * MiB) == big  # the large block is still whole
    assert system.n_allocs == 2 and pool.peak_reserved == 4 * MiB + 256 * KiB
    pool.check()


def test_a_kept_block_is_split_once_growing_would_pass_the_slack():
    system = FakeSystem()
    pool = Pool(system, "auto_growth")
    pool.free(pool.alloc(4 * MiB))
    for _ in range(12):
        pool.alloc(256 * KiB)
        pool.check()
        # growth for small requests stops at GROW_SLACK x the demand (the 4 MiB peak here)
        assert pool.reserved <= GROW_SLACK * max(pool.peak_allocated, pool.allocated)
    assert pool.n_system_allocs == 1 + int((GROW_SLACK - 1) * 4 * MiB) // (256 * KiB)


def test_small_blocks_split_any_free_block_up_to_small_block():
    system = FakeSystem()
    pool = Pool(system, "auto_growth")
    pool.free(pool.alloc(SMALL_BLOCK))
    for _ in range(SMALL_BLOCK // 1024):
        pool.alloc(1000)  # far below SMALL_BLOCK / SPLIT_RATIO: still carved from the block
    assert system.n_allocs == 1 and pool.cached == 0


def test_idle_chunks_are_given_back_before_growing_past_the_demand():
    """A phase change: chunks of one size stay idle while larger requests come."""
    system = FakeSystem()
    pool = Pool(system, "auto_growth")
    for addr in [pool.alloc(MiB) for _ in range(4)]:
        pool.free(addr)  # four idle 1 MiB chunks (chunks never merge with each other)
    big = pool.alloc(3 * MiB)
    assert system.live == {big: 3 * MiB} and pool.reserved == 3 * MiB
    assert pool.peak_reserved == 4 * MiB and pool.n_system_frees == 4
    pool.check()


def test_idle_chunks_much_smaller_than_the_request_are_kept():
    system = FakeSystem()
    pool = Pool(system, "auto_growth")
    pool.free(pool.alloc(MiB))  # idle, but less than RELEASE_FRACTION of the next request
    pool.alloc(4 * MiB)
    assert pool.reserved == 5 * MiB and pool.n_system_frees == 0
    assert RELEASE_FRACTION * 4 * MiB > MiB


def test_a_kept_block_is_split_rather_than_passing_the_capacity():
    system = FakeSystem()
    pool = Pool(system, "auto_growth", capacity_bytes=4 * MiB + 64 * KiB)
    big = pool.alloc(4 * MiB)
    pool.free(big)
    assert pool.alloc(256 * KiB) == big  # growing would pass the capacity: no refusal
    assert pool.n_oom == 0 and pool.last_oom is None and system.n_allocs == 1
    pool.check()


def test_a_kept_block_is_split_when_the_system_fails():
    system = FakeSystem(limit=4 * MiB)
    pool = Pool(system, "auto_growth")
    x = pool.alloc(4 * MiB)
    pool.free(x)
    assert pool.alloc(MiB) == x  # 4 MiB <= 8 x 1 MiB: split; 3 MiB stay free in the chunk
    z = pool.alloc(256 * KiB)  # the system refuses a new chunk: the 3 MiB block after all
    assert z == x + MiB and pool.n_oom == 0 and pool.last_oom is None
    pool.check()


def test_auto_growth_large_requests_keep_invariants():
    """Random sequences with requests up to a few MiB (the rules above apply), with and without
    a capacity, and a system allocator that sometimes fails."""

    @settings(max_examples=60, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow])
    @given(sequence=st.lists(st.tuples(st.sampled_from(["alloc", "alloc", "free", "release"]),
                                       st.sampled_from([1, 64, 3000, 100 * KiB, 300 * KiB, MiB,
                                                        3 * MiB, 5 * MiB]),
                                       st.integers(0, 1 << 30)), max_size=40),
           capacity=st.sampled_from([1 << 40, 8 * MiB, 12 * MiB]),
           limit=st.sampled_from([None, 10 * MiB]))
    def run(sequence, capacity, limit):
        system = FakeSystem(limit)
        pool = Pool(system, "auto_growth", capacity_bytes=capacity)
        model = Model(pool)
        for kind, nbytes, pick in sequence:
            if kind == "alloc":
                before = pool.allocated
                if model.alloc(nbytes, "t") == 0:
                    info = pool.last_oom
                    assert info.requested == align_up(nbytes) and pool.allocated == before
                    assert info.system_error or info.requested + info.reserved > capacity
                    assert info.largest_free_block < info.requested
            elif kind == "free" and model.live:
                model.free(sorted(model.live)[pick % len(model.live)])
            elif kind == "release":
                pool.release_cached()
            model.verify(system)
        for addr in list(model.live):
            model.free(addr)
        pool.release_cached()
        model.verify(system)
        assert system.live == {} and pool.reserved == 0

    run()


# The bench CNN's pool requests of 64 KiB and more (benchmarks/bench_memory.py, batch 64, GC and
# inplace on): startup and the first training step, then two more steps ("|" ends each). "a<i>"
# allocates SIZES[i] into the lowest free slot, "f<s>" frees slot s. Best fit over exact-size
# chunks reserved 1.69x the peak allocated here.
CNN_SIZES = [102400, 125440, 262144, 5017600, 3211264, 802816, 1327104, 20070400, 1605632, 401408,
             100352, 200704]
CNN_TRACE = """
a0 f0 a1 f0 a2 a3 f0 a4 a4 f1 f0 a4 a4 f1 a4 a4 f1 f0 a5 a6 a7 f1 a8 a8 f4 f1 a8 a8 f4 a8 a8 f4
f1 a9 a9 a8 a10 a10 a10 f10 a9 f10 a10 f9 a10 f9 a9 f9 a10 f10 a10 f10 a9 f10 a10 f9 a10 f9 a9
f9 f8 f10 f1 f4 a9 f1 f6 a8 a8 f1 a8 f1 a8 a8 f6 a8 f1 f4 f5 f7 a8 a7 a6 a5 f5 f4 a6 a7 f4 f5 f1
f6 a4 a11 a11 a11 f6 a5 f6 a11 f5 a11 f5 a5 f5 a11 f6 a11 f6 a5 f6 a11 f5 a11 f5 a5 f5 f4 f6 f0
f7 a5 f0 f3 a4 a4 f0 a4 f0 a4 a4 f4 a4 f0 f3 f2 f1 a4 a2 a3 f1 f2 f0 f4 | a2 a3 f0 a4 a4 f1 f0
a4 a4 f1 a4 a4 f1 f0 a5 a6 a7 f1 a8 a8 f4 f1 a8 a8 f4 a8 a8 f4 f1 a9 a9 a8 a10 a10 a10 f10 a9
f10 a10 f9 a10 f9 a9 f9 a10 f10 a10 f10 a9 f10 a10 f9 a10 f9 a9 f9 f8 f10 f1 f4 a9 f1 f6 a8 a8
f1 a8 f1 a8 a8 f6 a8 f1 f4 f5 f7 a8 a7 a6 a5 f5 f4 a6 a7 f4 f5 f1 f6 a4 a11 a11 a11 f6 a5 f6 a11
f5 a11 f5 a5 f5 a11 f6 a11 f6 a5 f6 a11 f5 a11 f5 a5 f5 f4 f6 f0 f7 a5 f0 f3 a4 a4 f0 a4 f0 a4
a4 f4 a4 f0 f3 f2 f1 a4 a2 a3 f1 f2 f0 f4 | a2 a3 f0 a4 a4 f1 f0 a4 a4 f1 a4 a4 f1 f0 a5 a6 a7
f1 a8 a8 f4 f1 a8 a8 f4 a8 a8 f4 f1 a9 a9 a8 a10 a10 a10 f10 a9 f10 a10 f9 a10 f9 a9 f9 a10 f10
a10 f10 a9 f10 a10 f9 a10 f9 a9 f9 f8 f10 f1 f4 a9 f1 f6 a8 a8 f1 a8 f1 a8 a8 f6 a8 f1 f4 f5 f7
a8 a7 a6 a5 f5 f4 a6 a7 f4 f5 f1 f6 a4 a11 a11 a11 f6 a5 f6 a11 f5 a11 f5 a5 f5 a11 f6 a11 f6 a5
f6 a11 f5 a11 f5 a5 f5 f4 f6 f0 f7 a5 f0 f3 a4 a4 f0 a4 f0 a4 a4 f4 a4 f0 f3 f2 f1 a4 a2 a3 f1
f2 f0 f4 |
"""


def _replay(pool, text, sizes):
    slots, per_segment, n = {}, [], pool.n_system_allocs
    for token in text.split():
        if token == "|":
            per_segment.append(pool.n_system_allocs - n)
            n = pool.n_system_allocs
        elif token[0] == "a":
            slot = min(set(range(len(slots) + 1)) - set(slots))
            slots[slot] = pool.alloc(sizes[int(token[1:])])
            assert slots[slot]
        else:
            pool.free(slots.pop(int(token[1:])))
    pool.check()
    return per_segment


def test_bench_cnn_requests_reserve_at_most_115_percent_of_the_peak():
    pool = Pool(FakeSystem(), "auto_growth")
    per_step = _replay(pool, CNN_TRACE, CNN_SIZES)
    assert pool.peak_reserved <= 1.15 * pool.peak_allocated
    assert per_step[-1] == 0  # settled: a step without an underlying allocation


def _training_loop(seed, steps):
    """Requests of a synthetic training loop: parameters, then per step a forward pass (each
    layer's temporaries die at once, its output lives until the backward pass), a backward
    pass in reverse (gradients, temporaries) and optimizer temporaries. ("|" ends a step.)"""
    rng = random.Random(seed)

    def size():
        return int(2 ** rng.uniform(6, 24.5)) if rng.random() < 0.7 else rng.randint(1, 4096)

    params = [size() // 4 for _ in range(rng.randint(3, 12))]
    layers = [(size(), [size() for _ in range(rng.randint(0, 3))]) for _ in params]
    ops = [("a", p) for p in params]
    for _ in range(steps):
        outputs = []
        for out, temps in layers:
            ids = [len(ops) + i for i in range(len(temps))]
            ops += [("a", t) for t in temps] + [("a", out)]
            outputs.append(len(ops) - 1)
            ops += [("f", i) for i in random.Random(len(outputs)).sample(ids, len(ids))]
        grad = len(ops)
        ops.append(("a", layers[-1][0]))
        for (out, temps), act in zip(reversed(layers), reversed(outputs)):
            ids = [len(ops) + i for i in range(len(temps))]
            ops += [("a", t) for t in temps] + [("a", out)]
            new_grad = len(ops) - 1
            ops += [("f", i) for i in ids] + [("f", grad), ("f", act)]
            grad = new_grad
        ops.append(("f", grad))
        for p in params:
            ops += [("a", p), ("f", len(ops))]
        ops.append(("|", 0))
    return ops


def test_synthetic_training_loops_settle_and_stay_close_to_the_peak():
    ratios = []
    for seed in range(40):
        system = FakeSystem()
        pool = Pool(system, "auto_growth")
        addrs, per_step, n = {}, [], 0
        for i, (kind, arg) in enumerate(_training_loop(seed, steps=10)):
            if kind == "a":
                addrs[i] = pool.alloc(arg)
            elif kind == "f":
                pool.free(addrs.pop(arg))
            else:
                per_step.append(pool.n_system_allocs - n)
                n = pool.n_system_allocs
        pool.check()
        assert sum(per_step[5:]) == 0, (seed, per_step)  # settled within five steps
        ratios.append(pool.peak_reserved / pool.peak_allocated)
    # reserved / allocated peaks: 1.15 on average, 1.71 at worst, 13 of 40 above 1.15 (best fit
    # over exact-size chunks: 1.42 on average, 2.39 at worst, 31 above 1.15)
    assert sum(ratios) / len(ratios) <= 1.2 and max(ratios) <= 1.8
    assert sum(r > 1.15 for r in ratios) <= 15


def test_fragmentation_is_one_look_at_the_pool_while_another_thread_allocates():
    """A reader thread allocates from the pool the executor reads at each step's end: the
    figure must not see the pool change halfway (it divided by a cached total that another
    thread had just taken to 0)."""
    import threading

    class Interleaved(Pool):
        """Another thread takes the whole cached block while the largest block is read."""
        def largest_free_block(self):
            if armed and threading.current_thread() is threading.main_thread():
                armed.clear()
                taker = threading.Thread(target=lambda: taken.append(self.alloc(4096)))
                taker.start()
                taker.join(0.2)  # it waits for the pool while the figure is being made
            return super().largest_free_block()

    taken, armed = [], []
    pool = Interleaved(FakeSystem(), "auto_growth")
    pool.free(pool.alloc(4096))
    armed.append(True)
    assert pool.fragmentation() == 0.0
    for _ in range(50):
        if taken:
            break
        threading.Event().wait(0.01)
    assert taken and pool.cached == 0  # the other thread got it after the figure was made
