"""The executor's memory side: serving a step's arrays from the place's pool, batched garbage
collection (FLAGS_eager_delete_tensor_gb > 0), the per-step memory record, the per-op memory
trace, and the out-of-memory error that says what to change."""

from contextvars import Token

import numpy as np

from . import events
from .backend import array_module
from .errors import PoolOutOfMemory
from .flags import FLAGS
from .memory import cpu_handler, device, install, numpy_hook, restore
from .memory.pool import fmt_bytes as _fmt
from .place import is_gpu
from .plan import shape_only
from .tensor import SelectedRows

GB = 1 << 30
MB = 1 << 20
_HANDLER_VARIABLE = numpy_hook._HANDLER_VARIABLE  # ([NumPy's handler variable, ...])
# the out-of-memory estimate's formula is paddletune/profile/memory_model.py's
# one_step_per_sample (the runtime cannot import paddletune): keep the two in step
BACKWARD_FACTOR = 1.5


class StepPeak(int):
    """A step's peak (bytes) that also carries its phases' peaks ({tag: bytes}), for the
    memory record."""

    def __new__(cls, value, phase_peaks):
        peak = super().__new__(cls, value)
        peak.phase_peaks = dict(phase_peaks)
        return peak


class Serving:
    """Makes the pool serve this thread's arrays (NumPy's, or CuPy's for a GPU pool) during a
    run and keeps the step's counters: `begin()` before the ops, `end()` after (always, also on
    errors)."""

    __slots__ = ("pool", "previous", "peaks", "replay", "start", "oom_seen",
                 "allocated_at_start", "planned_requests", "serving", "handler")

    def __init__(self, pool, handler=None):
        self.pool, self.previous, self.peaks, self.replay = pool, None, {}, None
        self.serving = False
        self.start = (0, 0, 0.0)
        self.allocated_at_start = self.planned_requests = 0
        # the CPU pool's NumPy handler (memory.cpu_handler), when the caller has it
        self.handler = handler

    @property
    def phase_peaks(self):
        """{memory category: the highest the pool's allocation reached while its ops ran}
        (for a replayed step worked out here, when asked: see `replayed`)."""
        above = self.replay
        if above is not None:  # (a loop: no comprehension frame)
            self.replay = None
            start = self.allocated_at_start
            peaks = self.peaks = {}
            for tag, bytes_above in above.items():
                peaks[tag] = start + bytes_above
        return self.peaks

    @phase_peaks.setter
    def phase_peaks(self, peaks):
        self.peaks, self.replay = peaks, None

    def begin(self):
        pool = self.pool
        self.start = (pool.n_requests, pool.n_system_allocs, pool.system_alloc_s)
        self.oom_seen = pool.n_oom
        self.allocated_at_start = pool.window_peak = pool.allocated  # (pool.reset_window())
        handler = self.handler
        if handler is None:
            handler = self.handler = cpu_handler(pool)  # (None: a GPU pool)
        if handler is None:
            self.previous = install(pool)
        else:  # (numpy_hook.set_handler's work, with a Token that `end` resets: cheaper)
            variable = _HANDLER_VARIABLE[0]
            self.previous = (variable.set(handler) if variable is not None
                             else numpy_hook.set_handler(handler))
        self.serving = True

    def phase(self, tag):
        """The next ops allocate for `tag` (their category); a new peak window starts. (The
        plan's specialised steps have this and phase_done written in: plan.py,
        _specialized_function.)"""
        pool = self.pool
        pool.tag = tag
        pool.reset_window()

    def phase_done(self, tag):
        peak = self.pool.window_peak
        peaks = self.phase_peaks
        if peak > peaks.get(tag, 0):
            peaks[tag] = peak

    def end(self):
        """The pool no longer serves this thread's arrays (once: later calls do nothing)."""
        if self.serving:
            self.serving = False
            if self.handler is not None:  # (memory.restore's CPU case)
                previous = self.previous
                if type(previous) is Token:
                    previous.var.reset(previous)
                else:
                    numpy_hook.set_handler(previous)
            else:
                restore(self.pool, self.previous)
            self.pool.tag = "other"

    def replayed(self, phase_peaks_above_start, planned_requests):
        """The step ran on its memory plan (memory/arena.py): its phases peaked as in the
        recorded step, above what the pool held when this one began, and the plan served
        `planned_requests` of its requests. (The peaks are worked out when asked for:
        phase_peaks.)"""
        self.replay = phase_peaks_above_start
        self.planned_requests = planned_requests

    def step_peak(self):
        return StepPeak(max(self.phase_peaks.values(), default=self.pool.allocated),
                        self.phase_peaks)

    def oom_happened(self):
        return self.pool.n_oom != self.oom_seen

    def record(self, executor_id, plan, step, place, batch_size):
        pool = self.pool
        n_req, n_sys, sys_s = self.start
        return events.MemoryStepRecord(
            executor_id, plan.program._uid, step, repr(place), pool.strategy, pool.capacity,
            pool.allocated, pool.reserved, self.step_peak(), pool.peak_allocated,
            pool.peak_reserved, dict(self.phase_peaks),
            pool.n_requests - n_req + self.planned_requests,
            pool.n_system_allocs - n_sys, pool.system_alloc_s - sys_s, dict(pool.by_tag),
            dict(pool.by_tag_at_peak), pool.cached, pool.fragmentation(), batch_size, plan.gc,
            plan.inplace_enabled)


class Garbage:
    """Batched garbage collection: freed temporaries are held until they add up to
    FLAGS_eager_delete_tensor_gb, then dropped together (and at the end of the step)."""

    __slots__ = ("held", "nbytes", "limit")

    def __init__(self, limit_gb):
        self.held, self.nbytes, self.limit = [], 0, int(limit_gb * GB)

    def take(self, step, env):
        for i in step.frees:
            self._hold(env[i])
            env[i] = None
        for i in step.shrinks:
            value = env[i]
            self._hold(value)
            env[i] = shape_only(value)
        if self.nbytes >= self.limit:
            self.clear()

    def _hold(self, value):
        if value is not None:
            self.held.append(value)
            self.nbytes += _nbytes(value)

    def hold(self, values):
        """Hold freed `values` (the parallel engine's GC); drop all once over the limit."""
        for value in values:
            self._hold(value)
        if self.nbytes >= self.limit:
            self.clear()

    def clear(self):
        self.held.clear()
        self.nbytes = 0


def _is_array(value):
    """A NumPy or a CuPy array."""
    return isinstance(value, np.ndarray) or array_module(value) is not np


def _address(array):
    """Address of the first byte of an array's data (host or device)."""
    if isinstance(array, np.ndarray):
        return array.__array_interface__["data"][0]
    return array.data.ptr


def _root(value):
    while _is_array(value) and value.base is not None:
        value = value.base
    return value


def _owned_bytes(value, input_roots):
    """Bytes an op's output holds of its own: 0 for a view of one of the op's inputs (or
    none), its whole buffer's size for a new array or a view of a new buffer."""
    if value is None:
        return 0
    root = _root(value)
    if id(root) in input_roots:
        return 0
    return int(_nbytes(root)) if _is_array(root) else int(_nbytes(value))


def _nbytes(value):
    if isinstance(value, SelectedRows):
        return value.value.nbytes
    return getattr(value, "nbytes", 0)


def retag_writes(pool, plan, writes, env):
    """Tag persistable buffers that a step replaced (rather than updated in place) as
    parameters or optimizer state, whatever op allocated them."""
    for slot, holder in writes:
        value = env[slot]
        if value is not holder.value and _is_array(value) and value.base is None:
            var = plan.program.global_block().vars.get(holder.name)
            tag = "parameters" if hasattr(var, "trainable") else "optimizer_state"
            pool.retag(_address(value), tag)


# --- the per-op trace ---------------------------------------------------------------------------
def traced_loop(plan, env, pool, run_op, fail):
    """Run the plan op by op recording pool bytes around each op (one step, when asked).
    `fail(step, err)` gives what to raise when an op fails (as the executor's loops do)."""
    ops, slot_names = [], {i: n for n, i in plan.slot_of.items()}
    for tag, steps in plan.segments:
        pool.tag = tag
        for step in steps:
            before = pool.allocated
            inputs = {id(_root(env[i])) for _, i in step.ins1}
            pool.reset_window()
            try:
                run_op(step, env)
            except Exception as err:
                failure = fail(step, err)
                if failure is err:
                    raise
                raise failure from err
            outputs = {name: _owned_bytes(env[plan.slot_of[name]], inputs)
                       for name in step.op.output_arg_names if name in plan.slot_of}
            ops.append({"index": step.index, "type": step.type, "tag": tag, "before": before,
                        "peak": pool.window_peak, "after": pool.allocated,
                        "outputs": outputs,
                        "frees": [slot_names[i] for i in step.frees + step.shrinks],
                        "inplace": [step.op.outputs[o][0] for o in step.ctx.inplace]})
    return ops


def trace_record(plan, step_no, batch_size, persistable_bytes, ops):
    """The MemoryTrace of one traced step. Its last uses and inplace pairs are the plan's,
    whatever GC/inplace settings the plan ran with, so other settings can be simulated."""
    return events.MemoryTrace(plan.program._uid, step_no, batch_size, plan.gc,
                              plan.inplace_enabled, persistable_bytes, ops,
                              dict(plan.last_value_use), dict(plan.inplace_possible))


# --- out of memory ------------------------------------------------------------------------------
def oom_error(pool, plan, env, step, scope, place, batch_size):
    """A PoolOutOfMemory naming the op, the pool's figures, the largest variables, and the ways
    out (batch size estimate, GC, inplace, optimizer, the cap)."""
    info = pool.last_oom
    largest = _largest_variables(plan, env, scope)
    fit, fit_kind = _fit_batch(info, batch_size, getattr(plan, "memory_seen", None))
    op = f"op {step.type} (#{step.index}){step.op.where()}" if step is not None else "a step"
    lines = [
        f"Out of memory on {place!r}: {op} asked for {_fmt(info.requested)} but the pool has "
        f"{_fmt(info.free)} left (allocated {_fmt(info.allocated)}, reserved "
        f"{_fmt(info.reserved)}, capacity {_fmt(info.capacity)}{_cap_source(place)}, peak "
        f"{_fmt(info.peak_allocated)}, cached free {_fmt(info.cached_free)} with the largest "
        f"free block {_fmt(info.largest_free_block)}).",
        "Largest live variables: " + (", ".join(f"{n} {_fmt(b)}" for n, b in largest[:6])
                                      or "none found") + ".",
        "Ways out:"]
    lines += [f"  {i}) {way}" for i, way in enumerate(_ways_out(plan, info, fit, fit_kind, place,
                                                                  batch_size), 1)]
    details = dict(place=repr(place), requested=info.requested, allocated=info.allocated,
                   reserved=info.reserved, capacity=info.capacity, peak=info.peak_allocated,
                   free=info.free, op_type=getattr(step, "type", None),
                   op_index=getattr(step, "index", None), batch_size=batch_size,
                   largest=largest[:10], fit_batch_size=fit, by_tag=dict(info.by_tag),
                   phase=getattr(step, "tag", None), gc=plan.gc, inplace=plan.inplace_enabled)
    if events.memory_oom.subs:
        events.memory_oom.emit(details)
    return PoolOutOfMemory("\n".join(lines), **details)


def _ways_out(plan, info, fit, fit_kind, place, batch_size):
    ways = []
    if batch_size:
        est = fit_kind.format(fit) if fit else "smaller"
        ways.append(f"decrease the batch size: this step used {batch_size}; the largest that "
                    f"fits is {est}. `paddletune tune` measures it.")
    if not plan.gc:
        ways.append("turn garbage collection on: export FLAGS_eager_delete_tensor_gb=0 "
                    "(temporaries are freed right after their last use)")
    if not plan.inplace_enabled:
        ways.append("let ops reuse their inputs' buffers: run a fluid.CompiledProgram(program, "
                    "build_strategy=bs) with bs.enable_inplace = True")
    state = info.by_tag.get("optimizer_state", 0)
    if state > 0.25 * max(1, info.allocated):
        ways.append(f"a lighter optimizer: its state holds {_fmt(state)} (Adam and Adadelta "
                    f"keep 2 values per weight, Momentum 1, SGD none)")
    if is_gpu(place):
        return ways + device.ways_out(info, FLAGS.get("allocator_strategy"))
    limit = FLAGS.get("cpu_memory_limit_mb")
    if limit > 0:
        ways.append(f"raise the cap: FLAGS_cpu_memory_limit_mb is {limit}; export "
                    f"FLAGS_cpu_memory_limit_mb=<more> (0: the machine's memory)")
    return ways


def _fit_batch(info, batch_size, seen):
    """(largest batch estimated to fit, how it was estimated). What does not scale with the
    batch (parameters, optimizer state: the pool's tags; the parameters' gradients, as large
    as the parameters; the update's temporaries) stays; what does is scaled: from the phase
    peaks of the last step that ran (`seen`: (batch, its Serving), kept per plan as
    plan.memory_seen: the phases tell what scales with the batch from what does not), else
    from what this step held when it failed (an upper bound: its peak may have come
    later)."""
    parameters = info.by_tag.get("parameters", 0)
    fixed = parameters + info.by_tag.get("optimizer_state", 0)
    phases = getattr(seen[1], "phase_peaks", None) if seen and seen[0] else None
    if phases and "activations" in phases:
        per_sample = _one_step_per_sample(seen[0], phases["activations"],
                                          phases.get("gradients"), fixed, parameters)
        kind = (f"about {{}} (parameters and optimizer state {_fmt(fixed)} fixed, "
                f"{_fmt(per_sample or 0)} per sample from the phases of the last step that ran, "
                f"batch {seen[0]})")
    elif batch_size:
        per_sample = (info.allocated + info.requested - fixed) / batch_size
        kind = "at most {} (from what this step held when it failed)"
    else:
        return None, ""
    if not per_sample or per_sample <= 0 or info.capacity <= fixed:
        return None, ""
    return int((info.capacity - fixed) // per_sample), kind


def _one_step_per_sample(batch, forward_peak, backward_peak, persistable, parameters):
    """Bytes per sample from one step's phase peaks: the activations above the persistables,
    and in the backward those with their gradients (the larger of the backward peak above
    the persistables and parameter gradients, and BACKWARD_FACTOR x the activations); the
    update's temporaries do not scale. None when nothing scales."""
    activations = forward_peak - persistable
    if backward_peak is None:
        scaled = activations
    else:
        scaled = max(backward_peak - persistable - parameters, BACKWARD_FACTOR * activations)
    return scaled / batch if scaled > 0 else None


def _largest_variables(plan, env, scope):
    found = {}
    for name, slot in plan.slot_of.items():
        value = env[slot] if slot < len(env) else None
        if value is not None:
            found[name] = int(_nbytes(value))
    for name in plan.reads + plan.writes:
        holder = scope.find_var(name) if scope is not None else None
        if holder is not None and holder.value is not None:
            found.setdefault(name, int(_nbytes(holder.value)))
    return sorted(found.items(), key=lambda kv: -kv[1])


def _cap_source(place):
    name = "gpu_memory_limit_mb" if is_gpu(place) else "cpu_memory_limit_mb"
    limit = FLAGS.get(name)
    return f" = FLAGS_{name} {limit}" if limit > 0 else ""

