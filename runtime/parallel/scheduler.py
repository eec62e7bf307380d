"""The threaded scheduler: a pool of daemon worker threads runs the SSA graph's ready nodes
(one thread: the calling thread runs them, `run_here`).

One Condition guards the step's state (pending dependency counts, the ready queue, the GC
counters); kernels run outside it, so NumPy's GIL-free kernels of independent ops overlap. A
worker finishing a node releases its dependants and takes the next ready node in the same
critical section. The first failing node cancels the step: nothing new starts, running nodes
finish, and the caller re-raises. Workers never outlive their pool: `close()` (also called by
the owner's finalizer) stops and joins them.
"""

import collections
import threading
import time
import weakref

from ..memory import numpy_hook
from ..plan import ShapeOnly, shape_only

_perf = time.perf_counter


class StepState:
    """One step's bookkeeping (created by the engine, consumed by the workers)."""

    def __init__(self, graph, envs, value_count, any_count, garbage, timed, pool, run_node):
        self.graph, self.envs, self.n_slots = graph, envs, graph.n_slots
        self.pending = self.ready = self.done = None  # the workers' queue (`queue`)
        self.remaining = len(graph.nodes)
        self.inflight = 0
        self.value_count, self.any_count = value_count, any_count
        self.garbage, self.timed, self.pool, self.run_node = garbage, timed, pool, run_node
        self.error = None
        self.t0 = _perf()
        # figures (filled only when timed)
        self.busy = None
        self.sched_s = 0.0
        self.ready_samples = 0
        self.ready_sum = 0
        self.ready_max = 0
        self.op_s = 0.0
        self.combine_s = 0.0
        self.place_end = None
        self.ops_run = 0

    def queue(self):
        """Make the workers' queue: each node's unfinished dependencies, the nodes ready to
        run, and the event the caller waits on (a step that `run_here` runs needs none)."""
        self.pending = list(self.graph.n_deps)
        self.ready = collections.deque(self.graph.roots)
        self.done = threading.Event()


class WorkerPool:
    """num_threads daemon workers executing StepStates one at a time."""

    def __init__(self, num_threads, name="pe"):
        self.num_threads = num_threads
        self._cond = threading.Condition(threading.Lock())
        self._state = None
        self._shutdown = False
        self._threads = []
        for i in range(num_threads):
            t = threading.Thread(target=_worker, args=(weakref.ref(self), self._cond, i),
                                 name=f"{name}-worker-{i}", daemon=True)
            self._threads.append(t)
        for t in self._threads:
            t.start()

    @property
    def alive(self):
        return not self._shutdown and all(t.is_alive() for t in self._threads)

    def run(self, state):
        """Run the step to completion (or its first error); returns the state."""
        state.queue()
        with self._cond:
            self._state = state
            if not state.ready and state.remaining == 0:
                state.done.set()
            self._cond.notify(min(len(state.ready), self.num_threads) or 1)
        try:
            while not state.done.wait(0.05):
                if not self.alive:
                    raise RuntimeError("the ParallelExecutor's worker threads died")
        except BaseException:  # Ctrl-C or a dead pool: cancel and let running ops finish
            with self._cond:
                state.ready.clear()
                if state.error is None:
                    state.error = (None, KeyboardInterrupt())
                if state.inflight == 0:
                    state.done.set()
            state.done.wait(5.0)
            raise
        finally:
            with self._cond:
                self._state = None
        return state

    def close(self):
        with self._cond:
            self._shutdown = True
            self._cond.notify_all()
        me = threading.current_thread()
        for t in self._threads:
            if t is not me:
                t.join(timeout=5.0)
        self._threads = []


def _worker(pool_ref, cond, index):
    node_id, state, handler_pool, default_handler = None, None, None, None
    node = None
    while True:
        dead = None
        with cond:
            t_in = _perf()
            if node_id is not None:
                dead = _finish(state, node_id)  # freed by `del dead`, outside the lock
                if state.timed:
                    state.sched_s += _perf() - t_in
                    t_in = _perf()
                node_id = None
            pool = pool_ref()
            while True:
                if pool is None or pool._shutdown:
                    return
                state = pool._state
                if state is not None and state.ready and state.error is None:
                    break
                pool = state = node = None  # hold nothing (the engine) while idle
                cond.wait()
                t_in = _perf()
                pool = pool_ref()
            node_id = state.ready.popleft()
            state.inflight += 1
            if state.timed:  # the ops left waiting for a thread as this one is taken
                n = len(state.ready)
                state.ready_samples += 1
                state.ready_sum += n
                if n > state.ready_max:
                    state.ready_max = n
            if state.ready:
                cond.notify(1)
            if state.timed:
                state.sched_s += _perf() - t_in
            pool = None
        del dead
        if state.pool is not handler_pool:
            if default_handler is None:
                default_handler = numpy_hook._API[0 + 1]()
            numpy_hook.set_handler(numpy_hook.handler_for(state.pool)
                                   if state.pool is not None else default_handler)
            handler_pool = state.pool
        node = state.graph.nodes[node_id]
        try:
            if state.timed:
                _run_timed(state, node, index)
            else:
                state.run_node(node, state)
        except BaseException as err:  # noqa: B902  (reported to the caller, never lost)
            with cond:
                state.inflight -= 1
                if state.error is None:
                    state.error = (node, err)
                state.ready.clear()
                if state.inflight == 0:
                    state.done.set()
            err = None
            node_id = None


def run_here(state):
    """Run the step on the calling thread, node after node in the order one worker would run
    them, without handing the step to a worker and waiting for it (two thread switches a step,
    and the step's data warm in another core's cache). That order, and what garbage
    collection drops after each node, depend on the graph alone: they are worked out once
    (`sequence`). Signals wait for the step's end as they do around a worker's step (the
    engine runs it under DeferSignals)."""
    envs, garbage, timed, run_node = state.envs, state.garbage, state.timed, state.run_node
    ran = 0  # (nothing else reads the step's counters while this thread runs it)
    for node, frees, shrinks, waiting in sequence(state.graph):
        if timed:  # the ops left waiting for the thread as this one is taken
            state.ready_samples += 1
            state.ready_sum += waiting
            state.ready_max = max(state.ready_max, waiting)
        try:
            if timed:
                _run_timed(state, node, 0)
            else:
                run_node(node, state)
        except BaseException as err:  # noqa: B902  (reported to the caller, never lost)
            state.error = (node, err)
            break
        ran += 1
        t_in = _perf() if timed else 0.0
        if frees or shrinks:
            dead = _drop(envs, frees, shrinks, [] if garbage is not None else None)
            if dead:
                garbage.hold(dead)
            del dead
        if timed:
            state.sched_s += _perf() - t_in
    state.remaining -= ran
    state.ops_run += ran
    return state


def sequence(graph):
    """[(node, slots freed after it, slots shrunk to their shape after it, nodes left in the
    ready queue as it is taken)] in the order one thread runs the graph: the ready queue first
    in, first out, as `_finish` releases the dependants, and garbage collection's counts as
    `_collect` keeps them (cached on the graph)."""
    found = getattr(graph, "sequence", None)
    if found is not None:
        return found
    pending, ready = list(graph.n_deps), collections.deque(graph.roots)
    vc = dict(graph.value_count) if graph.value_count is not None else None
    ac = dict(graph.any_count) if graph.any_count is not None else None
    order = []
    while ready:
        node = graph.nodes[ready.popleft()]
        waiting = len(ready)
        for d in node.dependents:
            pending[d] -= 1
            if pending[d] == 0:
                ready.append(d)
        frees, shrinks = _collected(node, vc, ac) if vc is not None else ((), ())
        order.append((node, frees, shrinks, waiting))
    graph.sequence = order
    return order


def _collected(node, vc, ac):
    """Garbage collection's decisions for `node`, on the counters alone, counting its uses
    off `vc` and `ac`: ((place, slot) freed, (place, slot) shrunk to its shape)."""
    for idx in node.value_uses:
        vc[idx] -= 1
        ac[idx] -= 1
    for idx in node.shape_uses:
        ac[idx] -= 1
    frees, shrinks = [], []
    for idx, p, s in node.uses:
        left = ac[idx]
        if left == 0:
            frees.append((p, s))
            ac[idx] = -1  # done
        elif left > 0 and vc[idx] == 0 and (p, s) not in shrinks:
            shrinks.append((p, s))
    return tuple(frees), tuple(shrinks)


def _drop(envs, frees, shrinks, dead=None):
    """Apply a node's frees and shrinks to the places' variables. What they drop goes into
    the list `dead` when one is given (returned: the caller releases it later), else it dies
    now."""
    for p, s in shrinks:
        value = envs[p][s]
        if value is not None and type(value) is not ShapeOnly:
            if dead is not None:
                dead.append(value)
            envs[p][s] = shape_only(value)
    for p, s in frees:
        env = envs[p]
        if dead is not None and env[s] is not None:
            dead.append(env[s])
        env[s] = None
    return dead


def _run_timed(state, node, thread_index):
    """Run `node`, adding its time to the thread's busy time and the step's figures."""
    busy_t0 = _perf()
    state.run_node(node, state)
    dt = _perf() - busy_t0
    state.busy[thread_index] += dt
    state.op_s += dt
    if node.combine:
        state.combine_s += dt
    end = _perf() - state.t0
    if node.place >= 0:
        if end > state.place_end[node.place]:
            state.place_end[node.place] = end
    else:
        for p in range(len(state.place_end)):
            if end > state.place_end[p]:
                state.place_end[p] = end


def _finish(state, node_id):
    """Under the lock: release dependants, apply GC, count the node done. Returns what GC
    dropped (to be released outside the lock)."""
    graph = state.graph
    node = graph.nodes[node_id]
    pending, ready = state.pending, state.ready
    for d in node.dependents:
        left = pending[d] - 1
        pending[d] = left
        if left == 0:
            ready.append(d)
    dead = None
    if state.value_count is not None and (node.value_uses or node.shape_uses):
        dead = _collect(state, node)
    state.inflight -= 1
    state.remaining -= 1
    state.ops_run += 1
    if state.remaining == 0 or (state.error is not None and state.inflight == 0):
        state.done.set()
    return dead


def _collect(state, node):
    """Count `node`'s uses off the step's counters and drop what they say is dead."""
    dead = _drop(state.envs, *_collected(node, state.value_count, state.any_count), [])
    if state.garbage is not None and dead:
        state.garbage.hold(dead)
        return None
    return dead
