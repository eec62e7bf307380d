"""The data-parallel engine behind CompiledProgram.with_data_parallel and ParallelExecutor.

A run: split the feed over the places, load each place's copy of the persistables (place 0's
is the scope's; the others are copies made at the first run and kept, refreshed when the scope's
value was replaced), run the SSA graph on the worker pool, write the persistables back (place
0's copy, or the owner's under the Reduce strategy), merge the fetches. A step's leftover
temporaries stay in the per-place local scopes (the envs) and are dropped every
num_iteration_per_drop_scope steps.
"""

import itertools
import threading
import time
import weakref

import numpy as np

from .. import events, memory
from ..errors import FeedError, OpRuntimeError, UninitializedVariableError
from ..exec_memory import Garbage, Serving, retag_writes
from ..executor import _batch_size, _failure, _feed_values, _nbytes, _run_op, check_names
from ..feed_fetch import _fetch, _fetch_names
from ..flags import FLAGS
from ..memory import arena
from ..memory.signals import DeferSignals
from ..place import is_gpu
from ..plan import Plan, runner
from ..scope import global_scope
from .builder import build
from .edges import _merge, check_blas_threads, default_num_threads
from .feed_split import split_feed
from .scheduler import StepState, WorkerPool, run_here

_perf = time.perf_counter
_engine_ids = itertools.count(1 << 20)


class _Compiled:
    """Per feed/fetch signature: the per-place plans, the graph and the local scopes."""

    def __init__(self, plans, graph):
        self.plans, self.graph = plans, graph
        self.envs = [[None] * plans[0].n_slots for _ in plans]
        plan0 = plans[0]
        persist = set(plan0.reads) | set(plan0.writes)
        self.temp_slots = [i for n, i in plan0.slot_of.items() if n not in persist]
        self.step = 0
        self.memory_plans = {}  # every place's feed shapes -> memory/arena.py's ShapePlans


class Engine:
    """Runs a program data-parallel over `places` with a build and execution strategy."""

    def __init__(self, program, places, build_strategy, exec_strategy, loss_name):
        if any(is_gpu(p) for p in places):
            raise NotImplementedError("data parallelism over GPU places is not implemented in "
                                      "this runtime; use CPU places (CPU_NUM / places=) or run "
                                      "the program on one CUDAPlace with a plain Executor")
        self.program, self.places = program, list(places)
        self.n = len(self.places)
        self.bs, self.es, self.loss_name = build_strategy, exec_strategy, loss_name
        if int(exec_strategy.num_threads) == 0:
            exec_strategy.num_threads = default_num_threads(self.places)  # as Paddle does
        self.num_threads = int(exec_strategy.num_threads)
        if self.num_threads < 1:
            raise ValueError(f"ExecutionStrategy.num_threads must be >= 0, got "
                             f"{exec_strategy.num_threads!r}")
        self._compiled = {}
        self._persist = [dict() for _ in self.places]  # place -> {name: its copy}
        self._written = {}  # name -> the value last written back to the scope
        self._seen = {}  # name -> the scope version our place copies were taken at
        self._scope = None
        self._since_drop = 0
        self._pool = None
        self._lock = threading.Lock()
        self.id = next(_engine_ids)
        self._finalizer = weakref.finalize(self, _close_pool, [None])

    # --- lifecycle -------------------------------------------------------------------------
    def _workers(self):
        pool = self._pool
        if pool is None or not pool.alive:
            if pool is not None:
                pool.close()
            check_blas_threads(self.num_threads)
            pool = self._pool = WorkerPool(self.num_threads)
            self._finalizer.detach()
            self._finalizer = weakref.finalize(self, _close_pool, [pool])
        return pool

    def close(self):
        self._finalizer()
        self._pool = None
        self._compiled.clear()

    # --- run -------------------------------------------------------------------------------
    def run(self, executor_id, feed, fetch_list, scope, return_numpy, return_merged, options):
        scope = global_scope() if scope is None else scope
        if self._scope is not None and scope is not self._scope:
            self._persist = [dict() for _ in self.places]
            self._written, self._seen = {}, {}
        self._scope = scope
        fetch_names = _fetch_names(fetch_list)
        results = None
        for _ in range(max(1, int(self.es.num_iteration_per_run))):
            with self._lock:
                results = self._step(executor_id, feed, fetch_names, scope, options)
        return _merge(results, fetch_names, return_numpy, return_merged)

    def _step(self, executor_id, feed, fetch_names, scope, options):
        t_begin = _perf()
        feeds, read_s = split_feed(
            feed, self.n, self.program, self.loss_name, int(self.bs.gradient_scale_strategy),
            lambda: self._is_inference(feed, fetch_names, options))
        comp = self._compile(feeds[0], fetch_names, options, len(feeds))
        plans, graph = comp.plans, comp.graph
        step = comp.step
        comp.step += 1
        if events.step_begin.subs:
            events.step_begin.emit(events.StepBegin(executor_id, self.program._uid, step,
                                                    t_begin))
        for plan, env in zip(comp.plans, comp.envs):
            if plan.control_steps:
                plan.bind_env(env)
        feed_bytes = self._feed(comp, feeds)
        self._load_persistables(comp, scope)
        batch = sum(_batch_size(plans[0], env) or 0 for env in comp.envs) or None
        t_feed = _perf()
        pool = memory.pool_for(self.places[0]) if not is_gpu(self.places[0]) else None
        if pool is not None:
            with DeferSignals():
                mem = self._compute(comp, pool)
        else:
            mem = self._compute(comp, None)
        if mem is not None and mem[0] is not None:
            retag_writes(pool, plans[0], plans[0].bind(scope)[1], comp.envs[0])
        self._write_back(comp, scope)
        t_compute = _perf()
        results = [[_fetch(env[slot], True) for env in comp.envs] for slot in plans[0].fetch_slots]
        dropped = self._maybe_drop(executor_id, step)
        state = mem[1]
        if state.timed and events.sched_step.subs:
            events.sched_step.emit(self._sched_record(executor_id, step, state, t_feed,
                                                      t_compute, graph, dropped))
        if mem[0] is not None and events.memory_step.subs:
            events.memory_step.emit(mem[0].record(executor_id, plans[0], step, self.places[0],
                                                  batch))
        if events.step_end.subs:
            t_end = _perf()
            fetch_bytes = sum(_nbytes(v) for r in results for v in r)
            events.step_end.emit(events.StepRecord(
                executor_id, self.program._uid, step, t_begin, t_end, t_feed - t_begin - read_s,
                t_compute - t_feed, t_end - t_compute, batch, len(graph.nodes), feed_bytes,
                fetch_bytes, plans[0].fetch_names, _places_repr(self.places),
                plans[0].is_startup, tuple(feeds[0]), read_s))
        return results

    def _compute(self, comp, pool):
        mem = Serving(pool) if pool is not None else None
        graph = comp.graph
        gc_gb = FLAGS.get("eager_delete_tensor_gb")
        garbage = Garbage(gc_gb) if graph.value_count is not None and gc_gb > 0 else None
        timed = bool(events.sched_step.subs or events.op_end.subs)
        counted = graph.value_count is not None and self.num_threads > 1  # (one thread: GC
        # drops worked out once, scheduler.sequence)
        state = StepState(graph, comp.envs,
                          dict(graph.value_count) if counted else None,
                          dict(graph.any_count) if counted else None,
                          garbage, timed, pool, self._run_node)
        state.program_uid, state.step_no = self.program._uid, comp.step - 1
        state.check = FLAGS.get("check_nan_inf")
        state.emit = events.op_end.emit if events.op_end.subs else None
        if timed:
            state.busy = [0.0] * self.num_threads
            state.place_end = [0.0] * len(comp.plans)
        planned = self._step_memory(comp, pool)
        try:
            if mem is not None:
                mem.begin()
                mem.phase("activations")
            if planned is not None:  # (one thread: this one runs the ops)
                planned.begin()
            state.t0 = _perf()
            if self.num_threads == 1:
                run_here(state)
            else:
                self._workers().run(state)
            state.wall_s = _perf() - state.t0
            if mem is not None:
                mem.phase_done("activations")
            if planned is not None and state.error is None:
                planned.end(mem)
        finally:
            if planned is not None:
                planned.end(None)
            if mem is not None:
                mem.end()
            if planned is not None:
                planned.settle()
            if garbage is not None:
                garbage.clear()
        if state.error is not None:
            raise self._error(comp, *state.error)
        return mem, state

    def _step_memory(self, comp, pool):
        """The step's memory plan (memory/arena.py), as the Executor's: only where one thread
        runs the graph (the caller: `run_here`), so that its requests come in the same order
        every step (with several, independent ops interleave theirs differently from step to
        step). It begins on this thread, which runs them (the arena serves the thread that
        begins it)."""
        if (self.num_threads != 1 or pool is None or pool.poison
                or (pool.strategy == "naive_best_fit" and not pool.chunk_bytes)
                or not FLAGS.get("static_memory_plan") or not arena.available()):
            return None
        shapes = tuple(getattr(env[slot], "shape", None)  # every place's: a batch split
                       for plan, env in zip(comp.plans, comp.envs)  # unevenly differs there
                       for slot, _ in plan.feed_slots)
        return arena.step_memory(comp.memory_plans, shapes, pool)

    def _run_node(self, node, state):
        env = state.envs[node.place] if node.place >= 0 else None
        check = state.check and state.step_no
        emit = state.emit
        if node.fn is not None and not (state.check and node.ops):  # (checked: op by op)
            t0 = _perf() if emit is not None else 0.0
            if env is None:
                node.fn(state.envs)
            else:
                try:
                    node.fn(env, _run_fused_step)
                except BaseException as err:
                    if getattr(err, "_pe_step", None) is None:
                        err._pe_step = node.ops[-1]  # (the fused kernel's failure)
                    raise
            if emit is not None:
                emit(events.OpRecord(state.program_uid, state.step_no, node.index, node.type,
                                     node.role, t0, _perf()))
            return
        checking = check is not False and check is not None  # (the step number: op by op)
        runs = node.runs
        if runs is None:  # each op's runner: what _run_op(step, env, False, False) does
            runs = node.runs = tuple((step, runner(step, False)) for step in node.ops)
        for step, run in runs:
            try:
                t0 = _perf() if emit is not None else 0.0
                if checking:
                    _run_op(step, env, check, False)
                else:
                    run(env, step)
                if emit is not None:
                    emit(events.OpRecord(state.program_uid, state.step_no, step.index,
                                         step.type, step.role, t0, _perf()))
            except BaseException as err:
                err._pe_step = step
                raise

    def _error(self, comp, node, err):
        if node is None or not isinstance(err, Exception):  # interrupted (Ctrl-C, exit)
            return err
        step = getattr(err, "_pe_step", None)
        if step is None and node.ops:  # a place's node failing outside its ops' kernels
            step = node.ops[0]
        if step is None:
            return OpRuntimeError(f"{node.type} (gradient combining op over {self.n} places) "
                                  f"failed: {type(err).__name__}: {err}")
        failure = _failure(step, comp.envs[node.place], comp.plans[node.place], None, err)
        if failure is not err and failure.args:
            failure.args = (f"{failure.args[0]}\n  place: {node.place} of {self.n} "
                            f"(ParallelExecutor)",) + failure.args[1:]
        if failure is not err:
            failure.__cause__ = err
        return failure

    # --- compile ---------------------------------------------------------------------------
    def _is_inference(self, feed, fetch_names, options):
        """True when no gradient is combined across places (Paddle lets such programs run
        on fewer places than it has: a partial feed)."""
        names = feed_names(feed)
        for reader in self.program._py_readers:
            names.update(reader.feed_names)
        return self._compile(names, fetch_names, options).graph.n_combine == 0

    def _compile(self, feed, fetch_names, options, n_active=None):
        inplace, gc_fraction, memory_optimize = options
        gc = FLAGS.get("eager_delete_tensor_gb") >= 0 or memory_optimize
        program = self.program
        places = self.places[:n_active or self.n]
        key = (program._version, tuple(sorted(feed)), fetch_names, gc, inplace, gc_fraction,
               len(places))
        comp = self._compiled.get(key)
        if comp is not None:
            return comp
        t0 = _perf()
        check_names(program.global_block(), feed, fetch_names)
        plans = [Plan(program, sorted(feed), fetch_names, np, place, gc, inplace, gc_fraction)
                 for place in places]
        freeable = set()
        if gc:
            for p, plan in enumerate(plans):
                for step in plan.steps:
                    freeable.update((p, s) for s in step.frees + step.shrinks)
        graph = build(program, plans, self.bs, self.loss_name, freeable)
        if getattr(graph, "seed_skipped", False):
            target = self.loss_name + "@GRAD"
            if target not in feed:
                raise FeedError(f"GradientScaleStrategy.Customized: feed the loss gradient "
                                f"{target!r} (its scale) in every run, e.g. feed={{{target!r}: "
                                f"np.array([1.0 / num_places], 'float32'), ...}}")
        stale = [k for k in self._compiled if k[0] != program._version]
        for k in stale:
            del self._compiled[k]
        comp = self._compiled[key] = _Compiled(plans, graph)
        if events.compile.subs:
            events.compile.emit(events.CompileRecord(
                program._uid, len(graph.nodes), tuple(n.type for n in graph.nodes),
                _perf() - t0, program))
        return comp

    # --- feed / persistables -------------------------------------------------------------------
    def _feed(self, comp, feeds):
        total = 0
        names = set(feeds[0]) if len(feeds) > 1 else None
        for plan, env, feed in zip(comp.plans, comp.envs, feeds):
            if names is not None and set(feed) != names:
                raise FeedError("every place's feed dict must name the same variables")
            total += _feed_values(plan, feed, env, None)
        return total

    def _load_persistables(self, comp, scope):
        plan0 = comp.plans[0]
        reads, _ = plan0.bind(scope)
        env0 = comp.envs[0]
        for slot, holder in reads:
            value = holder.value
            if value is None:
                raise _uninitialized(self.program, holder.name)
            env0[slot] = value
            if self.n == 1:  # (no place keeps a copy to refresh)
                continue
            version = holder.writes
            fresh = (self._written.get(holder.name) is not value
                     or self._seen.get(holder.name) != version)
            for p in range(1, len(comp.plans)):
                mine = self._persist[p].get(holder.name)
                if mine is None or fresh:
                    mine = self._persist[p][holder.name] = _copy(value)
                comp.envs[p][slot] = mine
            if fresh:
                self._written[holder.name] = value
                self._seen[holder.name] = version

    def _write_back(self, comp, scope):
        _, writes = comp.plans[0].bind(scope)
        owner_of = comp.graph.write_owner
        copies = self.n > 1  # (one place: no copies, and nothing reads what they were made of)
        for slot, holder in writes:
            owner = owner_of.get(holder.name, 0)
            value = comp.envs[owner][slot]
            holder.value = value
            holder.writes += 1
            if copies:
                self._written[holder.name] = value
                self._seen[holder.name] = holder.writes
                self._keep_copies(comp, holder.name, slot)
        reads, _ = comp.plans[0].bind(scope)
        env0 = comp.envs[0]
        for slot, holder in reads:  # updated in place or views installed by fused ops
            if env0[slot] is not holder.value and holder.name not in owner_of:
                holder.value = env0[slot]
                if copies:
                    self._written[holder.name] = holder.value
            if copies:
                self._keep_copies(comp, holder.name, slot)

    def _keep_copies(self, comp, name, slot):
        """The active places keep their copies; the idle ones (a partial feed) make new ones
        from the scope's value at their next run."""
        if self.n == 1:
            return
        active = len(comp.plans)
        for p in range(1, self.n):
            if p < active:
                self._persist[p][name] = comp.envs[p][slot]
            else:
                self._persist[p].pop(name, None)

    # --- local scopes ------------------------------------------------------------------------
    def _maybe_drop(self, executor_id, step):
        self._since_drop += 1
        every = int(self.es.num_iteration_per_drop_scope)
        if every > 0 and self._since_drop >= every:
            self.drop_local_scopes(executor_id, step)
            return True
        return False

    def drop_local_scopes(self, executor_id=-1, step=-1):
        """Free what the local scopes hold (the temporaries steps left behind)."""
        t0 = _perf()
        want = bool(events.drop_scope.subs)
        held = count = 0
        for comp in self._compiled.values():
            for env in comp.envs:
                for i in comp.temp_slots:
                    value = env[i]
                    if value is not None:
                        if want:
                            held += int(_nbytes(value))
                            count += 1
                        env[i] = None
        self._since_drop = 0
        if want:
            events.drop_scope.emit(events.DropScopeRecord(
                executor_id, self.program._uid, step, t0, _perf() - t0, held, count))

    def held_bytes(self):
        """Bytes the local scopes hold now (temporaries left by previous steps)."""
        return sum(int(_nbytes(env[i])) for comp in self._compiled.values()
                   for env in comp.envs for i in comp.temp_slots if env[i] is not None)

    # --- figures -------------------------------------------------------------------------------
    def _sched_record(self, executor_id, step, state, t_feed, t_compute, graph, dropped):
        wall = getattr(state, "wall_s", t_compute - t_feed)
        return events.SchedStepRecord(
            executor_id, self.program._uid, step, self.n, self.num_threads,
            "Reduce" if int(self.bs.reduce_strategy) == 1 else "AllReduce", wall,
            list(state.busy), state.ops_run, state.sched_s, state.ready_max,
            state.ready_sum / state.ready_samples if state.ready_samples else 0.0,
            state.op_s / wall if wall > 0 else 0.0, state.combine_s, list(state.place_end),
            int(self.es.num_iteration_per_drop_scope), dropped, dict(graph.fused))


def _run_fused_step(step, env):
    """One op of a fused node (names it if it fails)."""
    try:
        _run_op(step, env, False, False)
    except BaseException as err:
        err._pe_step = step
        raise


def feed_names(feed):
    """The names a feed (a dict, or a list of dicts) gives."""
    first = feed[0] if isinstance(feed, (list, tuple)) and feed else feed
    if not isinstance(first, dict):
        return set()
    return {k.name if hasattr(k, "name") else k for k in first}


def _close_pool(holder):
    pool = holder[0]
    if pool is not None:
        pool.close()


def _copy(value):
    return value.copy() if hasattr(value, "copy") else value


def _places_repr(places):
    return repr(places[0]) if len(places) == 1 else f"{places[0]!r}x{len(places)}"


def _uninitialized(program, name):
    var = program.global_block().vars.get(name)
    kind = "parameter" if var is not None and hasattr(var, "trainable") else "persistable variable"
    return UninitializedVariableError(
        f"{kind} {name!r} has no value in this scope. Run the startup program first "
        f"(exe.run(fluid.default_startup_program())), with the same scope as this run.")
