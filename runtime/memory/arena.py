"""A step's static memory plan: where each temporary of a step lives, decided once per feed
shape, so that a steady-state step asks the pool for one block and nothing else.

A compiled program run on the same feed shapes makes the same allocation requests in the same
order every step, and frees each temporary at the same point (the executor's garbage
collection and inplace rules are fixed in the Plan). So the executor records one step's
requests (sizes, and when each block died) through the pool's NumPy handler, and packs the
blocks that lived and died inside the step into one arena: two blocks share bytes only if
their lifetimes do not overlap (`pack`). Later steps of that shape take the arena from the
pool in one request, and the compiled allocator entry points (native.py) hand out the planned
places with no call into Python. The pool still serves what outlives the step (parameters and
optimizer state written back, fetched values) and anything the plan did not foresee.

Safety does not rest on the prediction: the C side checks each request's size against the
plan and that every planned block sharing its bytes is already dead; the first mismatch turns
the plan off for the rest of the step (the pool serves, as without a plan) and the plan is
recorded again at the next step of that shape (after `MAX_FAILURES` such steps, that shape is
left to the pool). A planned block that outlives its step (held by user code) keeps its arena
out of use until it dies.

Memory figures: a replayed step has the recorded step's allocation pattern (checked request by
request), so its phase peaks are the recorded ones above the pool's allocation at the step's
start; its request count is the planned requests plus the pool's. FLAGS_static_memory_plan=0
turns planning off (every request goes to the pool, as before).
"""

import ctypes
import threading

import numpy as np

from . import native, numpy_hook
from .pool import ALIGN

MAX_FAILURES = 3  # steps of one shape that left the plan before it is given up
MAX_SHAPES = 8  # feed shapes whose plans one program keeps (the most recently used)
MAX_REQUESTS = 2000  # larger steps are not planned: packing is quadratic in Python when
# lifetimes nest (about 1 s for 2,000 blocks, 4 s for 4,000), once per recorded shape
MIN_PLANNED = 4  # a step with fewer temporaries saves less than taking an arena costs


class Recording:
    """The requests of one step made through one handler (`ctx`) by this thread: sizes in
    order, and for each block freed during the recording how many requests came before it
    died."""

    __slots__ = ("ctx", "thread", "sizes", "live", "ends", "broken")

    def __init__(self, ctx):
        self.ctx, self.thread = ctx, threading.get_ident()
        self.sizes, self.live, self.ends, self.broken = [], {}, {}, False

    def allocated(self, ctx, size, addr):
        if (ctx or 0) != self.ctx or threading.get_ident() != self.thread:
            return
        if not addr or len(self.sizes) >= MAX_REQUESTS:
            self.broken = True
            return
        self.live[addr] = len(self.sizes)
        self.sizes.append(size)

    def freed(self, addr):
        index = self.live.pop(addr, None)
        if index is not None:
            self.ends[index] = len(self.sizes)

    def unplannable(self):
        """The pool served a request outside its blocks, or a block was resized."""
        self.broken = True


def pack(sizes, starts, ends):
    """Offsets for blocks of `sizes` (bytes, aligned) alive over [starts[i], ends[i]) (request
    numbers): the largest first, each at the lowest offset clear of every placed block whose
    lifetime overlaps its own. Returns (offsets, span)."""
    n = len(sizes)
    offsets = np.zeros(n, np.int64)
    placed_start, placed_end = np.zeros(n, np.int64), np.zeros(n, np.int64)
    placed_lo, placed_hi = np.zeros(n, np.int64), np.zeros(n, np.int64)
    count, span = 0, 0
    for i in sorted(range(n), key=lambda k: (-sizes[k], starts[k])):
        s, e, size = starts[i], ends[i], sizes[i]
        busy = (placed_start[:count] < e) & (s < placed_end[:count])
        offset = 0
        for lo, hi in sorted(zip(placed_lo[:count][busy].tolist(),
                                 placed_hi[:count][busy].tolist())):
            if offset + size <= lo:
                break
            offset = max(offset, hi)
        offsets[i] = offset
        placed_start[count], placed_end[count] = s, e
        placed_lo[count], placed_hi[count] = offset, offset + size
        count += 1
        span = max(span, offset + size)
    return offsets, span


class StepPlan:
    """The packed plan of one recorded step, as the C side reads it."""

    def __init__(self, recording, phase_peaks_above_start):
        sizes = recording.sizes
        n = len(sizes)
        planned = sorted(recording.ends)
        aligned = [(sizes[i] + ALIGN - 1) // ALIGN * ALIGN or ALIGN for i in planned]
        offsets, self.span = pack(aligned, planned, [recording.ends[i] for i in planned])
        self.n_requests, self.n_planned = n, len(planned)
        self.phase_peaks_above_start = dict(phase_peaks_above_start)
        self.unplanned_bytes = sum(sizes[i] for i in range(n) if i not in recording.ends)
        offset_of = dict(zip(planned, offsets.tolist()))
        distinct = sorted(set(offset_of.values())) or [0]
        slot_of = {off: k for k, off in enumerate(distinct)}
        conflicts, starts = [], [0]
        lo = np.array([offset_of[i] for i in planned], np.int64)
        hi = lo + np.array(aligned, np.int64)
        position = {i: k for k, i in enumerate(planned)}
        for i in range(n):
            k = position.get(i)
            if k is not None and k:  # planned blocks requested earlier that share its bytes
                earlier = np.nonzero((lo[:k] < hi[k]) & (lo[k] < hi[:k]))[0]
                conflicts.extend(planned[j] for j in earlier.tolist())
            starts.append(len(conflicts))
        self.sizes = (ctypes.c_size_t * max(n, 1))(*sizes)
        self.offsets = (ctypes.c_long * max(n, 1))(*[offset_of.get(i, -1) for i in range(n)])
        self.conflict_start = (ctypes.c_long * (n + 1))(*starts)
        self.conflicts = (ctypes.c_long * max(len(conflicts), 1))(*conflicts)
        self.slot = (ctypes.c_long * max(n, 1))(*[slot_of.get(offset_of.get(i), 0)
                                                  for i in range(n)])
        self.distinct = (ctypes.c_long * len(distinct))(*distinct)
        self.owner = (ctypes.c_long * len(distinct))(*([-1] * len(distinct)))
        self.live = (ctypes.c_ubyte * max(n, 1))()
        self.c_plan = _CPlan(n, len(distinct), self.sizes, self.offsets, self.conflict_start,
                             self.conflicts, self.slot, self.distinct, self.owner, self.live,
                             self.span)
        self.c_plan_address = ctypes.addressof(self.c_plan)
        self.base = 0  # the arena's address in the pool at the last step that replayed


def _pointer(kind):
    return ctypes.POINTER(kind)


class _CPlan(ctypes.Structure):
    """native.py's plan_t: what pt_arena_begin reads (the arrays stay owned by the StepPlan)."""

    _fields_ = [("n", ctypes.c_long), ("nslots", ctypes.c_long),
                ("sizes", _pointer(ctypes.c_size_t)), ("offsets", _pointer(ctypes.c_long)),
                ("cstart", _pointer(ctypes.c_long)), ("conf", _pointer(ctypes.c_long)),
                ("slot", _pointer(ctypes.c_long)), ("soff", _pointer(ctypes.c_long)),
                ("owner", _pointer(ctypes.c_long)), ("isl", _pointer(ctypes.c_ubyte)),
                ("span", ctypes.c_long), ("ctx", ctypes.c_void_p), ("base", ctypes.c_void_p)]


class ShapePlans:
    """One feed shape's planning state: the plan once recorded, and how often it failed."""

    __slots__ = ("seen", "plan", "failures", "not_worth_it", "handler")

    def __init__(self):
        self.seen, self.plan, self.failures = 0, None, 0
        self.not_worth_it = False  # too few temporaries: the pool serves them
        self.handler = (None, 0)  # (the pool, its NumPy handler's ctx) of the last step


class StepMemory:
    """What a step does about its memory plan: record (`recording` set) or replay (`plan`
    set). `begin()` after the pool serves the step's arrays, on the thread that runs its ops
    (the Executor's, or the one-thread ParallelExecutor's caller), `end(serving)` after its ops
    (also on errors: then with None)."""

    __slots__ = ("shape", "pool", "ctx", "plan", "recording", "base", "ended", "served",
                 "learned", "functions")

    def __init__(self, shape, pool, ctx, plan=None):
        self.shape, self.pool, self.ctx, self.plan = shape, pool, ctx, plan
        self.recording = None if plan is not None else Recording(ctx)
        self.base = 0
        self.ended = False
        self.served = 0
        self.learned = None  # (recording, phase peaks above the start) to make the plan from
        self.functions = None  # (native.arena_functions() while replaying)

    def begin(self):
        try:  # (_claim, written in: once a step)
            _FREE.pop()
        except IndexError:  # another thread's step is recording or replaying
            self.ended = True
            return
        _IN_USE[0] = self
        if self.recording is not None:
            numpy_hook.RECORDING[0] = self.recording
            return
        plan, functions = self.plan, native.arena_functions()
        # (claimed first: taking the block can let another thread run)
        if functions.pt_arena_room() > 0:  # what outlives the step can always be recorded
            self.base = _arena_block(self.pool, plan.span, plan.unplanned_bytes, plan.base)
        if not self.base:
            _release()
            self.ended = True
            return
        plan.base = self.base  # (the pool's block to ask for again next step)
        self.functions = functions
        functions.pt_arena_start(plan.c_plan_address, self.ctx, self.base)

    def settle(self):
        """After the step, once the pool no longer serves its arrays (packing allocates): make
        the shape's plan from a completed recording."""
        if self.learned is not None:
            _learn(self.shape, *self.learned)
            self.learned = None

    def end(self, serving):
        """Stop recording or replaying; with the step's Serving (a step that completed) the
        recording is kept for `settle`, a replay's figures go to the Serving."""
        if self.ended:
            return
        self.ended = True
        if _IN_USE[0] is not self:
            return
        # the claim goes last: another thread's step may claim the recording slot or the
        # C side's one arena as soon as it is released
        if self.recording is not None:
            numpy_hook.RECORDING[0] = None
            _release()
            if serving is not None and not self.recording.broken:
                start = serving.allocated_at_start
                self.learned = (self.recording, serving.pool, {
                    tag: max(peak - start, 0) for tag, peak in serving.phase_peaks.items()})
            return
        plan = self.plan
        served = self.functions.pt_arena_finish(plan.n_requests)
        if served >= -1:  # (the arena is free again)
            self.pool.give(self.base)
        elif served == -2:  # (listed before the claim goes: the next begin gives drained
            _RETIRED[self.base] = self.pool  # ones back)
        _IN_USE[0] = None  # (_release, written in)
        _FREE.append(True)
        if served < 0:
            _failed(self.shape)
        else:
            self.served = served
            if serving is not None:
                serving.replayed(plan.phase_peaks_above_start, served)


_RETIRED = {}  # arena base -> pool: arenas kept by blocks that outlived their step
# the StepMemory recording or replaying now: the recording slot and the C side's arena are
# one per process, so a step of another thread runs on the pool meanwhile
_IN_USE = [None]
_FREE = [True]  # the claim while no step holds it, taken by list.pop: atomic under the GIL
# (a lock's acquire(blocking=False) and release cost some ten times as much)


def _claim(step):
    """Make `step` the one recording or replaying; False when another step is."""
    try:
        _FREE.pop()
    except IndexError:
        return False
    _IN_USE[0] = step
    return True


def _release():
    _IN_USE[0] = None
    _FREE.append(True)


def _arena_block(pool, span, unplanned_bytes=0, last=0):
    """A block of `span` bytes from `pool` for the arena (the block at `last` again where the
    pool can: Pool.take), or 0 when the pool would have to refuse, or could not serve the
    step's other requests too (then the step runs without its plan; the refusal is not
    counted as the job's)."""
    if _RETIRED:
        _give_back_drained()
    if pool.allocated + span + unplanned_bytes > pool.capacity:
        return 0
    n_oom, last_oom = pool.n_oom, pool.last_oom
    base = pool.take(span, "activations", last)
    if not base:
        pool.n_oom, pool.last_oom = n_oom, last_oom
        return 0
    return base


def _give_back_drained():
    if not _RETIRED:
        return
    bases = (ctypes.c_void_p * 64)()
    for k in range(native.arena_functions().pt_arena_drained(bases, 64)):
        pool = _RETIRED.pop(bases[k], None)
        if pool is not None:
            pool.free(bases[k])


def _learn(shape, recording, pool, phase_peaks_above_start):
    """Make the shape's plan from its recorded step, and reserve its arena in the pool now
    (taken and given back: the pool keeps the block for the next step), so that the steps
    after this one find it there. A step with fewer than MIN_PLANNED temporaries stays on the
    pool."""
    if len(recording.ends) < MIN_PLANNED:
        shape.not_worth_it = True
    else:
        shape.plan = StepPlan(recording, phase_peaks_above_start)
        base = _arena_block(pool, shape.plan.span)
        if base:
            pool.free(base)
            shape.plan.base = base


def _failed(shape):
    shape.plan = None
    shape.failures += 1


def available():
    """True when steps can be planned: the compiled entry points serve NumPy's arrays."""
    return numpy_hook.EXCEPTION_SAFE and native.arena_functions() is not None


def step_memory(plans, feed_shapes, pool):
    """The StepMemory for a step fed `feed_shapes` (a hashable key) from `plans` (a dict the
    compiled program keeps), or None: the first step of a shape runs as it is, the second is
    recorded, the later ones replay the plan."""
    shape = plans.pop(feed_shapes, None)  # put back last: the dict is kept in use order
    if shape is None:
        if len(plans) >= MAX_SHAPES:
            plans.pop(next(iter(plans)))  # the least recently used shape
        shape = ShapePlans()
    plans[feed_shapes] = shape
    shape.seen += 1
    if shape.failures >= MAX_FAILURES or shape.not_worth_it or shape.seen < 2:
        return None
    if shape.handler[0] is not pool:  # (numpy_hook keeps every pool with a handler anyway)
        shape.handler = (pool, numpy_hook.context_of(pool))
    return StepMemory(shape, pool, shape.handler[1], shape.plan)
