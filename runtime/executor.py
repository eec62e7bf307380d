"""Executor: compiles a Program once into a kernel plan (runtime/plan.py), then runs it.

A step is: convert and check the feed, load persistables from the scope, loop over the
kernels (freeing and reusing temporaries as the plan says), write persistables back, copy the
fetches out. Plans are cached by (program, its modification counter, feed names, fetch names,
GC on/off), so caching is always on and always safe; `use_program_cache` is accepted for
compatibility.

On a GPU place a step ends with one synchronisation of the current stream (so its times include
the device's work) and per-op times come from CUDA events: see runtime/gpu_timing.py.
"""

import itertools
import sys
import time

import numpy as np

from . import cuda_graph, device_checks, events, memory
from .backend import cupy_status
from .errors import (EnforceNotMet, FeedError, FetchError, NanInfError, OpRuntimeError,
                     PoolOutOfMemory, UninitializedVariableError, where)
from .exec_memory import Garbage, Serving, oom_error, retag_writes, trace_record, traced_loop
from .executor_prune import cache_key, prune_program, split_fetch_list, update_feed
from .flags import FLAGS
from .framework import EMPTY_VAR_NAME, Program, Variable, _suggest, default_main_program
from .gpu_timing import OpEvents, sync_stream
from .memory import arena
from .memory.signals import DeferSignals, deliver as deliver_signals, hold as hold_signals
from .place import CPUPlace, is_gpu
from .plan import KernelCtx, Plan, exclusive, shape_only  # noqa: F401  (KernelCtx re-exported)
from .plan import MAX_TRACES
from .scope import global_scope
from .lod import with_lod
from .feed_fetch import _check_feed, _fetch, _fetch_names, _normalize_feed, _read_batches
from .feed_fetch import _as_lodtensor, as_numpy  # noqa: F401  (fluid.executor's own names)
from .tensor import SelectedRows
from .thread_clock import cpu_s as _cpu, queued_s as _queued

_executor_ids = itertools.count()
_PLAIN = (False, 1.0, False)  # a plain Program: no inplace (as in Paddle), GC as FLAGS say
_perf = time.perf_counter
_FLAG_VALUES = FLAGS._values  # (FLAGS.get's own dict: read by name in a step, no call)


class Executor:
    """Runs Programs on a place: `Executor(place).run(program, feed, fetch_list)`."""

    def __init__(self, place=None):
        self.place = place if place is not None else CPUPlace()
        if is_gpu(self.place):
            self.xp = cupy_status()[0]
        else:
            self.xp = np
        self._plans = {}
        self._steps = {}
        self._events = []  # CUDA events reused by the per-op timing of GPU steps
        self._graphs = cuda_graph.Graphs(self.xp, self.place) if self.xp is not np else None
        self._pruned = {}  # use_prune: cache key -> pruned program
        self._pool = (None, None, None)  # (FLAGS.version, memory.pool_for(place) then, and
        # that CPU pool's NumPy handler: _pool_found)
        self._last_plan = (None,) * 7  # (program, its version, fetches, options, GC, feed, plan)
        self._id = next(_executor_ids)
        self._closed = False

    def close(self):
        """Release cached plans; the executor cannot run afterwards."""
        if self._graphs is not None:
            self._graphs.forget()
        self._plans.clear()
        self._last_plan = (None,) * 7
        self._closed = True

    def run(self, program=None, feed=None, fetch_list=None, feed_var_name="feed",
            fetch_var_name="fetch", scope=None, return_numpy=True, use_program_cache=False,
            return_merged=True, use_prune=False):
        if self._closed:
            raise RuntimeError("this Executor was closed; create a new one")
        program = default_main_program() if program is None else program
        if type(fetch_list) is list and type(program) is Program and not use_prune:
            names = []  # (the common case: a Program and a list of variables and names)
            for item in fetch_list:
                kind = type(item)
                if kind is Variable:
                    names.append(item.name)
                elif kind is str:
                    names.append(item)
                else:
                    break
            else:
                return self._run_program(program, feed, fetch_list, scope, return_numpy,
                                         _PLAIN, tuple(names))
        if isinstance(fetch_list, (list, tuple)) and not isinstance(fetch_list, str):
            fetches, optimize_ops = split_fetch_list(fetch_list)
            if optimize_ops or use_prune:
                program, feed = self._use_pruned(program, feed, fetch_list, fetches,
                                                 optimize_ops)
            fetch_list = fetches  # (as in Fluid 1.8: a list inside the list is flattened)
        runner = getattr(program, "_run_with_executor", None)
        if runner is not None:  # CompiledProgram and friends
            return runner(self, feed=feed, fetch_list=fetch_list, scope=scope,
                          return_numpy=return_numpy, return_merged=return_merged)
        if not isinstance(program, Program):
            raise TypeError(f"Executor.run expects a fluid.Program, got {type(program).__name__}")
        return self._run_program(program, feed, fetch_list, scope, return_numpy, _PLAIN)

    def _use_pruned(self, program, feed, fetch_list, fetches, optimize_ops):
        """(the pruned program, the feed it takes) for Executor.run(use_prune=True)."""
        key = cache_key(program, feed, fetch_list)
        pruned = self._pruned.get(key)
        if pruned is None:
            pruned = self._pruned[key] = self._prune_program(program, feed, fetches,
                                                             optimize_ops)
        return pruned, update_feed(pruned, feed)

    def _prune_program(self, program, feed=None, fetch_list=None, optimize_ops=None):
        """Fluid's hook: the program pruned for these feed and fetches (see executor_prune)."""
        return prune_program(program, feed, fetch_list or [], optimize_ops or [])

    def _run_program(self, program, feed, fetch_list, scope, return_numpy, options,
                     fetch_names=None):
        """One step of `program`; options: (enable_inplace, GC fraction, memory_optimize);
        `fetch_names`, when given, are fetch_list's names (_fetch_names).
        Signal handlers wait for the step's end while its arrays come from a pool (on a GPU the
        pool's blocks go back from CuPy's finalisers, Python code too); on a GPU the step runs
        with the place's device current, where its pool's memory is."""
        if self.xp is np:
            if not memory.numpy_hook.AVAILABLE:
                return self._step(program, feed, fetch_list, scope, return_numpy, options,
                                  fetch_names)
            held = hold_signals()  # (DeferSignals' work, without its object and calls)
            try:
                return self._step(program, feed, fetch_list, scope, return_numpy, options,
                                  fetch_names)
            finally:
                deliver_signals(held)
        with self.xp.cuda.Device(self.place.get_device_id()), DeferSignals(), \
                self._graphs.lock:  # (a graph's feed, launch and fetch share its buffers)
            return self._step(program, feed, fetch_list, scope, return_numpy, options,
                              fetch_names)

    def _step(self, program, feed, fetch_list, scope, return_numpy, options, fetch_names=None):
        scope = global_scope() if scope is None else scope
        if type(feed) is dict:  # (_normalize_feed's common case, written in)
            for key in feed:
                if type(key) is not str:
                    feed = _normalize_feed(feed)
                    break
        else:
            feed = _normalize_feed(feed)
        if fetch_names is None:
            fetch_names = _fetch_names(fetch_list)
        # the clocks are read for a step_begin or step_end listener only (one that subscribes
        # during a step gets the records of the steps after it)
        t_begin = _perf() if events.step_end.subs or events.step_begin.subs else None
        read_s = 0.0
        if program._py_readers:
            feed = _read_batches(program._py_readers, feed)
            if t_begin is not None:
                read_s = _perf() - t_begin
        gc = _FLAG_VALUES["eager_delete_tensor_gb"] >= 0 or options[2]  # (or memory_optimize)
        last = self._last_plan  # (the last step's plan, when this step's key is the same)
        if (last[0] is program and last[1] == program._version and last[2] == fetch_names
                and last[3] == options and last[4] == gc and feed.keys() == last[5]):
            plan = last[6]
        else:
            try:
                plan = self._plan(program, feed, fetch_names, options, gc)
            except FeedError:  # as in Paddle, the program's persistables exist in the scope anyway
                _declare_persistables(program, scope)
                raise
        step = self._steps.get(plan, 0)
        self._steps[plan] = step + 1
        if events.step_begin.subs and t_begin is not None:
            events.step_begin.emit(events.StepBegin(self._id, program._uid, step, t_begin))
        env = [None] * plan.n_slots
        if plan.control_steps:
            plan.bind_env(env)
        shapes = batch = None  # (the fed arrays' shapes and the batch size, when known here)
        if self._graphs is None:  # (a CPU place: no CUDA graphs, the feed taken as it is)
            graph = replay = None
            fed = plan.feed_in(feed, env)  # (arrays taken as they are before: no checks)
            if fed is None:
                feed_bytes = _feed_values(plan, feed, env, None)
            else:
                shapes, batch = fed
                feed_bytes = _fed_bytes(plan, env) if t_begin is not None else 0
        else:
            graph, checked = self._graph_for(plan, feed, scope)
            replay = graph.captured if isinstance(graph, cuda_graph.Replay) else None
            if replay is not None:
                feed_bytes = self._graphs.feed(replay, env, checked)
            else:
                feed_bytes = self._feed(plan, feed, env, checked)
        results = None
        for slot, var in plan.persistable_feeds:  # a fed persistable stays in the scope
            holder = scope.var(var.name)
            holder.value, holder.lod = env[slot], []
        io = plan.scope_io(scope)
        reads, writes = io.reads, io.writes
        missing = io.load(env)
        if missing is not None:
            raise _uninitialized(program, missing.name)
        if plan.lod_mode:
            _scope_lods(reads, env)
        if shapes is None:
            batch = _batch_size(plan, env)
        gpu = self.xp is not np
        if gpu:
            device_checks.clear()  # a failed step's checks are not this one's
        t_feed = _perf() if t_begin is not None else None
        cpu_feed = queued_feed = None  # (the clocks of StepRecord.compute_wait_s)
        if not gpu and t_begin is not None and events.step_end.subs:
            queued_feed, cpu_feed = _queued(), _cpu()
        if replay is not None:
            self._graphs.launch(replay, env)
            mem = self._graph_memory(plan)
        elif graph is not None and self._capture(plan, graph, env, reads, writes):
            mem = self._graph_memory(plan)
        else:
            mem, results, fetch_s = self._compute(plan, env, step, scope, writes, batch,
                                                  None if gpu else return_numpy, shapes)
            if gpu:
                self._graphs.keep_arrays(writes, env)
        if gpu:  # the step's kernels are queued, not done: wait for them, then read their checks
            sync_stream(self.xp)
            device_checks.raise_pending()
        io.store(env)
        if plan.lod_mode:
            for _, holder in writes:
                holder.lod = []  # the value written carries its own LoD
        if t_begin is None:  # (nobody listens for the step's times)
            if replay is not None:
                results = [_fetch(value, return_numpy) for value in replay.fetched_values()]
            elif results is None:
                results = [_fetch(env[slot], return_numpy) for slot in plan.fetch_slots]
            if mem is not None and events.memory_step.subs:
                events.memory_step.emit(mem.record(self._id, plan, step, self.place, batch))
            return results
        compute_wait_s = compute_queued_s = None
        if cpu_feed is not None:  # the ops' wall time less the training thread's CPU in it
            cpu_s = _cpu() - cpu_feed
            queued = _queued()
            t_compute = _perf()
            compute_wait_s = max(t_compute - t_feed - cpu_s, 0.0)
            if queued is not None and queued_feed is not None:  # of it, waiting for a core
                compute_queued_s = min(max(queued - queued_feed, 0.0), compute_wait_s)
        else:
            t_compute = _perf()
        if replay is not None:  # (from the host copies the graph made)
            results = [_fetch(value, return_numpy) for value in replay.fetched_values()]
        elif results is None:
            results = [_fetch(env[slot], return_numpy) for slot in plan.fetch_slots]
        else:  # fetched inside the step (_compute): the time it took counts as fetching
            t_compute -= fetch_s
        if mem is not None and events.memory_step.subs:
            events.memory_step.emit(mem.record(self._id, plan, step, self.place, batch))
        if events.step_end.subs:
            t_end = _perf()
            if compute_wait_s is not None:  # (a fetch inside the ops: at most the ops' time)
                compute_wait_s = min(compute_wait_s, t_compute - t_feed)
                if compute_queued_s is not None:
                    compute_queued_s = min(compute_queued_s, compute_wait_s)
            events.step_end.emit(events.StepRecord(
                self._id, program._uid, step, t_begin, t_end, t_feed - t_begin - read_s,
                t_compute - t_feed, t_end - t_compute, batch, len(plan.steps),
                feed_bytes, sum(_nbytes(r) for r in results), plan.fetch_names, repr(self.place),
                plan.is_startup, tuple(feed), read_s, compute_wait_s, compute_queued_s))
        return results

    def _graph_for(self, plan, feed, scope):
        """On a GPU place: (the step's CUDA graph to replay (a Replay), a Capture when this
        step is to be captured, or None to run it eagerly; the feed values checked, or None
        when they were not) (runtime/cuda_graph.py)."""
        graphs = self._graphs
        if graphs is None or cuda_graph.step_refusal() is not None:
            return None, None
        checked = [_check_feed(var, feed[var.name], executor=True) for _, var in plan.feed_slots]
        sig = cuda_graph.signature(checked)
        found = graphs.lookup(plan, sig)
        if found is cuda_graph.CAPTURE:
            return cuda_graph.Capture(sig), checked
        if found is None:
            return None, checked
        if not found.current(plan.bind(scope)[0]):
            graphs.invalidate(plan, sig)
            return None, checked
        return cuda_graph.Replay(found), checked

    def _graph_memory(self, plan):
        """The memory record's source for a step that launched a CUDA graph (for the memory
        probe; None when nobody listens): the graph holds its memory all the time, so every
        phase of the step peaks at what the place's pool holds."""
        if not events.memory_step.subs:
            return None
        pool = memory.pool_for(self.place)
        mem = Serving(pool)
        mem.start = (pool.n_requests, pool.n_system_allocs, pool.system_alloc_s)
        mem.allocated_at_start = 0
        mem.replayed({tag: pool.allocated for tag, _ in plan.segments}, 0)
        return mem

    def _capture(self, plan, graph, env, reads, writes):
        """Capture this step and launch the graph; False when the capture failed (the step
        then runs eagerly: nothing ran meanwhile)."""
        gc_gb = FLAGS.get("eager_delete_tensor_gb")

        def run_ops(plan, work):
            garbage = Garbage(gc_gb) if plan.gc and gc_gb > 0 else None
            try:
                self._run_plain(plan, work, None, garbage)
            finally:
                if garbage is not None:
                    garbage.clear()

        captured = self._graphs.capture(plan, graph.sig, env, reads, writes, run_ops)
        if captured is None:
            return False
        self._graphs.launch(captured, env)
        return True

    def _compute(self, plan, env, step_no, scope, writes, batch, return_numpy=None,
                 shapes=None):
        """Run the plan's ops with the pool serving their arrays; (the Serving or None, the
        fetched values or None, the seconds fetching took). The values are fetched here when
        `return_numpy` is given and the pool serves NumPy arrays (see _fetch_in_step).
        `shapes`: the fed arrays' shapes when the feed found them (plan.feed_in)."""
        found = self._pool  # (memory.pool_for's answer for this flags version)
        if found[0] != FLAGS.version:
            found = self._pool = _pool_found(self.place, self.xp)
        pool = found[1]
        mem = Serving(pool, found[2]) if pool is not None else None
        gc_gb = _FLAG_VALUES["eager_delete_tensor_gb"]
        garbage = Garbage(gc_gb) if plan.gc and gc_gb > 0 else None
        planned = _step_memory(plan, env, pool, self.xp, shapes)
        special = None  # (the specialised step, when it ran)
        try:
            if mem is not None:
                mem.begin()
            if planned is not None:
                planned.begin()
            if events.op_end.subs or _FLAG_VALUES["check_nan_inf"]:
                self._run_instrumented(plan, env, step_no, mem, garbage)
            elif (mem is not None and events.memory_trace.subs and step_no == 1
                  and not plan.is_startup and garbage is None):
                self._run_traced(plan, env, step_no, mem, batch)
            else:
                special = plan._special  # (Plan.special's first look: the step checks it)
                if (garbage is not None or special is None
                        or special.kernel_sets != plan.kernel_sets[0]
                        or not special.run(plan, env, mem)):
                    special = None
                    self._run_plain(plan, env, mem, garbage)
            results, fetch_s = None, 0.0
            if mem is not None and return_numpy is not None:
                results, fetch_s = _fetch_in_step(plan, env, mem, return_numpy)
            if planned is not None:
                planned.end(mem)
            if mem is not None:
                if special is None or not special.writes_in_place:  # (else none to retag:
                    retag_writes(pool, plan, writes, env)  # Plan._writes_in_place)
                plan.memory_seen = (batch, mem)  # (read on an out-of-memory error only)
        except (MemoryError, SystemError) as err:
            # NumPy 2.x returns NULL without setting MemoryError from some ufunc paths (an
            # operand broadcast from a scalar) when the pool refuses the output: SystemError
            if mem is None or not mem.oom_happened() or isinstance(err, PoolOutOfMemory):
                raise
            oom = oom_error(pool, plan, env, getattr(err, "_runtime_op", None), scope,
                            self.place, batch)
            env[:] = [None] * len(env)  # the step's temporaries go back to the pool now
            err.__traceback__ = None
            raise oom from None
        finally:  # (each only where it has something left to do: no call otherwise)
            if planned is not None and not planned.ended:
                planned.end(None)
            if mem is not None and mem.serving:
                mem.end()
            if planned is not None and planned.learned is not None:
                planned.settle()
            if garbage is not None:
                garbage.clear()
        return mem, results, fetch_s

    # --- compile ---------------------------------------------------------------------------
    def _plan(self, program, feed, fetch_names, options, gc):
        """The plan for a step whose key is not the last step's (_step looks at that first),
        remembered as the last one; options: (enable_inplace, GC fraction, memory_optimize),
        `gc` whether garbage collection is on for it."""
        inplace, gc_fraction, _ = options
        plan = self._plan_for(program, feed, fetch_names, gc, inplace, gc_fraction)
        self._last_plan = (program, program._version, fetch_names, options, gc, set(feed),
                           plan)
        return plan

    def _plan_for(self, program, feed, fetch_names, gc, inplace, gc_fraction):
        key = (program._uid, program._version, tuple(sorted(feed)), fetch_names, gc, inplace,
               gc_fraction)
        plan = self._plans.get(key)
        if plan is None:
            t0 = _perf()
            check_names(program.global_block(), feed, fetch_names)
            plan = Plan(program, sorted(feed), fetch_names, self.xp, self.place, gc, inplace,
                        gc_fraction, creation_order=True)
            self._drop_stale_plans(program)
            self._plans[key] = plan
            if events.compile.subs:
                events.compile.emit(events.CompileRecord(
                    program._uid, len(plan.steps), tuple(s.type for s in plan.steps),
                    _perf() - t0, program))
        return plan

    def _drop_stale_plans(self, program):
        stale = [k for k in self._plans if k[0] == program._uid and k[1] != program._version]
        if stale:
            self._last_plan = (None,) * 7
        for k in stale:
            plan = self._plans.pop(k)
            self._steps.pop(plan, None)
            if self._graphs is not None:
                self._graphs.forget(plan)

    # --- feed ------------------------------------------------------------------------------
    def _feed(self, plan, feed, env, checked=None):
        if self.xp is not np:  # the batch is copied into the device pool, as a reader's batch
            with memory.serving(memory.pool_for(self.place), "reader"):
                return _feed_values(plan, feed, env, self.xp.asarray, checked)
        return _feed_values(plan, feed, env, None, checked)

    # --- run -------------------------------------------------------------------------------
    def _run_plain(self, plan, env, mem=None, garbage=None):
        if garbage is None:
            if plan.specializable:  # (the kernels specialised for these inputs: Plan.special)
                special = plan.special(env)
                if special is not None and special(plan, env, mem):
                    return
                if plan.traces < MAX_TRACES:
                    plan.trace(env, mem)
                    return
            plan.straight()(plan, env, mem)  # (the whole plan as straight-line code)
            return
        step = None
        try:
            for tag, ops in plan.runs(False):  # (each op's _run_op, compiled)
                if mem is not None:
                    mem.phase(tag)
                for step, run in ops:
                    run(env, step)
                    garbage.take(step, env)
                if mem is not None:
                    mem.phase_done(tag)
        except Exception as err:
            raise_failure(step, env, plan, mem, err)

    def _run_instrumented(self, plan, env, step_no, mem=None, garbage=None):
        """The same loop, timing each op for op_end subscribers and checking NaN/Inf when
        FLAGS_check_nan_inf is on. On a GPU place the ops are timed with CUDA events, their
        records emitted once the loop is done (runtime/gpu_timing.py)."""
        emit = events.op_end.emit if events.op_end.subs else None
        check = FLAGS.get("check_nan_inf")
        uid = plan.program._uid
        timer = OpEvents(self.xp, self._events) if emit and self.xp is not np else None
        step = None
        try:
            for tag, ops in plan.segments:
                if mem is not None:
                    mem.phase(tag)
                for step in ops:
                    t0 = _perf() if timer is None else timer.begin()
                    _run_op(step, env, check and step_no, garbage is None)
                    if garbage is not None:
                        garbage.take(step, env)
                    if timer is not None:
                        timer.done(step, t0)
                    elif emit is not None:
                        emit(events.OpRecord(uid, step_no, step.index, step.type, step.role, t0,
                                             _perf()))
                if mem is not None:
                    mem.phase_done(tag)
            if timer is not None:
                _emit_all(emit, timer.records(uid, step_no))
        except Exception as err:
            if timer is not None:  # the ops that ran before the failure keep their times
                _emit_quietly(emit, timer, uid, step_no)
            raise_failure(step, env, plan, mem, err)

    def _run_traced(self, plan, env, step_no, mem, batch):
        """One step op by op with the pool's figures around each op (memory_trace event; only
        for a plain loop: per-op timing, NaN checks and batched GC keep their own loops)."""
        persistable = sum(_nbytes(env[plan.slot_of[n]]) for n in plan.reads)
        ops = traced_loop(plan, env, mem.pool, _run_op,
                          lambda step, err: _failure(step, env, plan, mem, err))
        mem.phase_peaks = {}
        for op in ops:
            mem.phase_peaks[op["tag"]] = max(mem.phase_peaks.get(op["tag"], 0), op["peak"])
        events.memory_trace.emit(trace_record(plan, step_no, batch, persistable, ops))


def _pool_found(place, xp):
    """(FLAGS.version, memory.pool_for(place), the pool's NumPy handler capsule when it is a
    CPU pool serving NumPy's arrays, else None): what a step's Serving needs, worked out once
    per flags version."""
    pool = memory.pool_for(place)
    handler = memory.cpu_handler(pool) if pool is not None and xp is np else None
    return (FLAGS.version, pool, handler)


def _step_memory(plan, env, pool, xp, shapes=None):
    """The step's memory plan (record or replay; memory/arena.py), or None: only for the CPU
    pool's NumPy arrays, a training or inference program (not a startup program) and
    FLAGS_static_memory_plan on. A pool told to make each request a system allocation of its
    own (naive_best_fit without chunks) is taken at its word: no plan. `shapes`: the fed
    arrays' shapes, when the caller has them."""
    seen = plan.plannable  # (_plannable's answer for this flags version and pool, inline)
    if not (seen[2] if seen[0] == FLAGS.version and seen[1] is pool
            else _plannable(plan, pool, xp)):
        return None
    if shapes is None:
        found = []
        for slot, _ in plan.feed_slots:  # (a loop: no comprehension frame each step)
            found.append(getattr(env[slot], "shape", None))
        shapes = tuple(found)
    return arena.step_memory(plan.memory_plans, shapes, pool)


def _plannable(plan, pool, xp):
    """_step_memory's conditions on the plan, the pool and the flags, worked out once per
    pool and flags version (the pool's settings come from the flags)."""
    seen = plan.plannable
    if seen[0] == FLAGS.version and seen[1] is pool:
        return seen[2]
    ok = not (pool is None or xp is not np or plan.is_startup or pool.poison
              or (pool.strategy == "naive_best_fit" and not pool.chunk_bytes)
              or not FLAGS.get("static_memory_plan") or not arena.available())
    plan.plannable = (FLAGS.version, pool, ok)
    return ok


def _fetch_in_step(plan, env, mem, return_numpy):
    """(the fetched values, the seconds it took): copied out once the pool no longer serves
    this thread (the copies are plain NumPy arrays, the caller's), then the fetched
    temporaries (a loss) are dropped while the step's memory plan still runs, so the plan
    holds them as it holds the other temporaries: the pool does not serve them through its
    Python callbacks every step."""
    t0 = _perf() if events.step_end.subs else None
    mem.end()
    results = []
    try:
        for slot in plan.fetch_slots:
            results.append(_fetch(env[slot], return_numpy))
    except Exception:  # (a LoD with return_numpy: raised by _step, after the scope's writes)
        return None, 0.0
    for slot in plan.fetched_temporaries:
        env[slot] = None
    return results, (_perf() - t0 if t0 is not None else 0.0)


def _declare_persistables(program, scope):
    for var in program.global_block().vars.values():
        if var.persistable and scope.find_var(var.name) is None:
            scope.var(var.name)


def _emit_all(emit, records):
    for record in records:
        emit(record)


def _emit_quietly(emit, timer, uid, step_no):
    """Emit the timed ops of a failed GPU step, unless reading the events fails too (a device
    error): the step's own error is what matters."""
    try:
        _emit_all(emit, timer.records(uid, step_no))
    except Exception:
        pass


def _scope_lods(reads, env):
    """A LoD set on a scope's tensor (tensor.set_lod) travels with its value."""
    for slot, holder in reads:
        if holder.lod:
            env[slot] = with_lod(env[slot], holder.lod)


def _feed_values(plan, feed, env, to_device, checked=None):
    """Check each fed value (unless `checked` holds them, in feed_slots' order) and put it in
    its slot (on the device: `to_device`); the bytes fed. An array like one the plan took as
    it is before (`_accepted_feed`) is taken without the checks."""
    total = 0
    accepted = plan.feed_accepted
    for k, (slot, var) in enumerate(plan.feed_slots):
        if checked is not None:
            value = checked[k]
        else:
            value = feed[var.name]
            if (type(value) is not np.ndarray
                    or accepted[k] != (value.shape, value.dtype)):
                value = _accepted_feed(var, value, accepted, k)
        if to_device is not None:
            value = to_device(value)
        env[slot] = value
        total += value.nbytes
    return total


def _fed_bytes(plan, env):
    """The bytes of the fed values in `env` (for the step record)."""
    return sum(env[slot].nbytes for slot, _ in plan.feed_slots)


def _accepted_feed(var, raw, accepted, k):
    """`_check_feed`'s value for `raw`; a plain array it takes as it is (no cast, copy or LoD)
    leaves its shape and dtype in `accepted[k]`, and the next step's array of that shape and
    dtype is taken without the checks. A changed declaration (VarDesc.set_shape and the like)
    changes the program's version, so the next step has a new plan, which accepts nothing."""
    value = _check_feed(var, raw, executor=True)
    if value is raw and type(raw) is np.ndarray:
        accepted[k] = (raw.shape, raw.dtype)
    return value


def _failure(step, env, plan, mem, err):
    """What a loop raises when `step` failed with `err`: the runtime's own errors as they are;
    an out-of-memory as it is, tagged with its op for _compute (NumPy 2.x can also report a
    pool refusal inside a ufunc as SystemError: NULL without MemoryError); anything else as an
    OpRuntimeError naming the op and its inputs."""
    if isinstance(err, EnforceNotMet):
        return err
    if isinstance(err, MemoryError) or (isinstance(err, SystemError) and mem is not None
                                        and mem.oom_happened()):
        err._runtime_op = step
        return err
    return _op_failed(step, env, plan, err)


def raise_failure(step, env, plan, mem, err):
    """Raise what a loop raises when `step` failed with `err` (see _failure)."""
    failure = _failure(step, env, plan, mem, err)
    if failure is err:
        raise err
    raise failure from err


def run_ops(steps, env):
    """Run a sub-block's compiled ops (control flow); a failing op is reported by name."""
    step = None
    try:
        for step in steps:
            _run_op(step, env, False, False)
    except Exception as err:
        raise_failure(step, env, None, None, err)


def _run_op(step, env, check_finite=False, free=True):
    """Run one compiled op: grant inplace reuse, gather inputs, call the kernel, store its
    outputs, then apply the plan's frees (unless `free` is False: batched GC takes them)."""
    if step.inplace:
        step.ctx.inplace = [o for o, i in step.inplace if exclusive(env[i], step.ctx.xp)]
    ins = {k: env[i] for k, i in step.ins1}
    for k, idx in step.insN:
        ins[k] = [env[i] for i in idx]
    res = step.fn(step.ctx, ins, step.attrs)
    for k, i in step.outs1:
        env[i] = res[k]
    for k, idx in step.outsN:
        for i, v in zip(idx, res[k]):
            if i >= 0:
                env[i] = v
    if check_finite is not False and check_finite is not None:  # the step number (int)
        _check_finite(step, env, check_finite)
    if free:
        for i in step.frees:
            env[i] = None
        for i in step.shrinks:
            env[i] = shape_only(env[i])


def _nbytes(value):
    return getattr(value, "nbytes", 0) if value is not None else 0


def _batch_size(plan, env):
    for slot, var in plan.feed_slots:
        value = env[slot]
        if value is not None and getattr(value, "ndim", 0) > 0:
            return int(value.shape[0])
    return None


def check_names(block, feed, fetch_names):
    """Every feed and fetch name is a variable of the block (else a FeedError/FetchError
    suggesting the closest names)."""
    for name in feed:
        if name not in block.vars:
            raise FeedError(f"feed target {name!r} is not a variable of the program"
                            f"{_suggest(name, block.vars)}")
    for name in fetch_names:
        if name not in block.vars:
            raise _unknown_fetch(block, name)


def _unknown_fetch(block, name):
    base = name[:-len("@GRAD")] if name.endswith("@GRAD") else None
    if base is not None and base in block.vars:
        var = block.vars[base]
        why = ("it has stop_gradient=True; set `var.stop_gradient = False` before "
               "append_backward/minimize" if var.stop_gradient else
               "no gradient reaches it from the loss, or append_backward/minimize was not called")
        return FetchError(f"cannot fetch {name!r}: no gradient variable exists for {base!r} "
                          f"({why})")
    return FetchError(f"cannot fetch {name!r}: no such variable in the program"
                      f"{_suggest(name, block.vars)}")


def _uninitialized(program, name):
    var = program.global_block().vars.get(name)
    kind = "parameter" if var is not None and hasattr(var, "trainable") else "persistable variable"
    return UninitializedVariableError(
        f"{kind} {name!r} has no value in this scope{where(getattr(var, 'callsite', None))}. "
        f"Run the startup program first (exe.run(fluid.default_startup_program())), "
        f"with the same scope as this run.")


def _describe_inputs(step, env):
    parts = []
    for k, names in step.op.inputs.items():
        for name in names:
            value = env[_slot_index(step, name)] if name != EMPTY_VAR_NAME else None
            shape = list(getattr(value, "shape", [])) if value is not None else "unset"
            dtype = getattr(value, "dtype", "")
            parts.append(f"{k}={name!r} {shape} {dtype}".rstrip())
    return ", ".join(parts)


def _slot_index(step, name):
    for k, i in step.ins1:
        if step.op.inputs[k][0] == name:
            return i
    for k, idx in step.insN:
        for n, i in zip(step.op.inputs[k], idx):
            if n == name:
                return i
    return -1


def _op_failed(step, env, plan, err):
    if step is None:
        return OpRuntimeError(f"executor failed before running any op: {err}")
    try:
        inputs = _describe_inputs(step, env)
    except Exception:  # never hide the real error behind a formatting problem
        inputs = "?"
    return OpRuntimeError(f"op {step.type} (#{step.index} in the program){step.op.where()} "
                          f"failed: {type(err).__name__}: {err}\n  inputs: {inputs}")


def _check_finite(step, env, step_no):
    for k, i in step.outs1:
        _finite_or_raise(step, env[i], step.op.outputs[k][0], step_no)
    for k, idx in step.outsN:
        for name, i in zip(step.op.outputs[k], idx):
            if i >= 0:
                _finite_or_raise(step, env[i], name, step_no)


def _finite_or_raise(step, value, name, step_no):
    if isinstance(value, SelectedRows):
        value = value.value
    if value is None or getattr(value, "dtype", None) is None or value.dtype.kind != "f":
        return
    xp = np if isinstance(value, np.ndarray) else cupy_status()[0]
    finite = xp.isfinite(value)
    if bool(finite.all()):
        return
    n_nan = int(xp.isnan(value).sum())
    n_inf = int(value.size - int(finite.sum()) - n_nan)
    inputs = step.op.input_arg_names
    details = dict(op_type=step.type, op_index=step.index, output=name, inputs=inputs,
                   n_nan=n_nan, n_inf=n_inf, step=step_no)
    if events.nan_inf.subs:
        events.nan_inf.emit(details)
    found = (f"op {step.type} (#{step.index}){step.op.where()} produced {n_nan} NaN and "
             f"{n_inf} Inf in output {name!r} (shape {list(value.shape)}) at step {step_no}; "
             f"its inputs: {', '.join(inputs) or 'none'}")
    if FLAGS.get("check_nan_inf_level") >= 1:  # print it and go on, as Paddle's level 1
        print(f"FLAGS_check_nan_inf (level 1, training goes on): {found}", file=sys.stderr)
        return
    raise NanInfError(f"FLAGS_check_nan_inf: {found}. Common causes: log of 0, division by 0, "
                      f"exploding gradients (try grad_clip or a lower learning rate), bad data.",
                      **details)
