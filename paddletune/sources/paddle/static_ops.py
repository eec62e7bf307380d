"""--ops for a Paddle static-graph job: paddle.profiler records the kernels of the steps that
paddle.static.Executor runs, WINDOW steps at a time, and each operator it saw is announced as
one op_end of its step when the window closes.

A static program's steps run inside Executor.run (the dynamic graph's windows follow the
optimizer's steps: profiler_ops.py), and the profiler is the only view Paddle gives into its
executor: one `Operator` event per kernel run (the
forward, backward and update ops alike, e.g. `pd_op.matmul_grad`). While a window is open the
executor runs its ops on the calling thread, not on its worker threads (one_thread.py: Paddle's
profiler is not safe beside them). Its events arrive only when it stops, so a window of steps
is recorded, read and announced at once (the dashboard's Top ops panel fills a window at a
time), and one more at the job's end. Op types are Paddle's op names without the `pd_op.`
prefix and the in-place `_` (`add_` is `add`). Independent ops need not keep their order from
step to step, and the profiler gives no op id, so a single op is known by its type
and its rank among the ops of that type in the step (by start): the first time that pair is
seen it gets the next index, kept for the job. The profiler's clock is mapped onto the step's
by each executor run's own event (`StandaloneExecutor::run`), which spans exactly one
Executor.run.

Paddle keeps one profiler at a time. A script that makes its own paddle.profiler.Profiler
gets it: the open window is closed first (its ops announced) and the op timing stops for the
rest of the job, the reason sent as a scope event (the report's `Ops: N/A`); so it does when
ours cannot start or fails. Making a Profiler wraps the optimizers' step methods once per
process (paddle.profiler.utils.wrap_optimizers); `prepare()` does that before the source's
own hooks patch those methods, so that removing the hooks restores them exactly."""

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from ...profile.records import ProbeUnavailableEvent
from ..eager.bus import Bus, OpEnd
from ..eager.loaders import error_detail
from ..eager.op_windows import MESSAGE_MAX
from .one_thread import OneThreadRuns

WINDOW = 10  # steps recorded per profiler window
RUN_EVENT = "StandaloneExecutor::run"


@dataclass
class _Run:
    """One Executor.run inside the window: its step (None: not a training step) and times."""
    program_id: int
    step: Optional[int]
    t_begin: float
    t_end: float


@dataclass
class StaticOps:
    """paddle.profiler windows over the static graph's runs, announced on `bus`."""
    bus: Bus
    runs: List[_Run] = field(default_factory=list)
    profiler: object = None
    unavailable: Optional[str] = None
    slots: Dict[Tuple[str, int], int] = field(default_factory=dict)  # (type, rank) -> index
    making: bool = False  # constructing our own Profiler
    one_thread: OneThreadRuns = field(default_factory=OneThreadRuns)  # while a window is open

    @staticmethod
    def prepare():
        """Before the optimizers are patched: what making a Profiler does to them, done now."""
        from paddle.profiler.utils import wrap_optimizers
        wrap_optimizers()

    def stop_for_good(self, reason: str, announce: bool = True):
        """The script makes its own Profiler (`reason`): the open window is closed, and no
        other opens; with `announce`, the profile says why (a scope event)."""
        self.close()
        if not self.unavailable:
            self._give_up(reason, announce)

    def before_run(self):
        """Called before each Executor.run while op_end is listened to: opens a window."""
        if self.profiler is not None or self.unavailable:
            return
        try:
            import paddle.profiler as profiler
            self.making = True
            try:  # (paddle's default on_trace_ready writes a trace file per window into the
                # working directory: the job's folder must stay as the job leaves it)
                self.profiler = profiler.Profiler(targets=_targets(profiler),
                                                  on_trace_ready=write_nothing)
            finally:
                self.making = False
            self.one_thread.begin()
            self.profiler.start()
        except Exception as err:  # noqa: BLE001  (a script's own profiler holds paddle's)
            self.profiler = None
            self.one_thread.end()
            self._give_up(f"paddle.profiler could not start ({error_detail(err)[:MESSAGE_MAX]}); does the "
                          f"script run its own? Paddle keeps one profiler at a time")

    def after_run(self, program_id: int, step: Optional[int], t_begin: float, t_end: float):
        """Called after each Executor.run of an open window (step None: a startup or other
        run that is no training step, still a run the profiler saw)."""
        if self.profiler is None:
            return
        self.runs.append(_Run(program_id, step, t_begin, t_end))
        if sum(1 for r in self.runs if r.step is not None) >= WINDOW:
            self.close()

    def close(self):
        """Stop the window's profiler and announce its ops (also at the job's end)."""
        prof, runs = self.profiler, self.runs
        self.profiler, self.runs = None, []
        if prof is None:
            return
        try:
            prof.stop()
            result = prof.profiler_result
            nodes = result.get_data() if result is not None else {}
        except Exception as err:  # noqa: BLE001
            self._give_up(f"paddle.profiler failed: {error_detail(err)[:MESSAGE_MAX]}")
            return
        finally:
            self.one_thread.end()
        for op in ops_of_runs(nodes, runs, self.slots):
            self.bus.emit("op_end", op)

    def _give_up(self, reason: str, announce: bool = True):
        """No more op timing in this job; the profile says why (a scope event)."""
        self.unavailable = f"the static graph's op times: {reason}"
        if announce:
            self.bus.emit("scope", ProbeUnavailableEvent(0.0, "ops", self.unavailable))


def write_nothing(prof):
    """The windows' on_trace_ready (here and profiler_ops.py's): the result is read from
    memory (paddle's default writes a trace file per window into the job's folder)."""


def _targets(profiler):
    targets = [profiler.ProfilerTarget.CPU]
    try:
        import paddle
        if paddle.device.is_compiled_with_cuda() and paddle.device.cuda.device_count():
            targets.append(profiler.ProfilerTarget.GPU)
    except Exception:  # noqa: BLE001
        pass
    return targets


def op_type(name: str) -> str:
    """Paddle's op name as the profile names ops: `pd_op.add_` -> `add`."""
    if name.startswith("pd_op."):
        name = name[len("pd_op."):]
    return name[:-1] if name.endswith("_") and not name.endswith("__") else name


def _walk(node, out):
    stack = [node]
    while stack:
        n = stack.pop()
        out.append(n)
        stack.extend(n.children_node)
    return out


def ops_of_runs(nodes: dict, runs: List[_Run], slots: Dict[Tuple[str, int], int]
                ) -> List[OpEnd]:
    """The OpEnd of every Operator event of the profiler's trees (`nodes`: thread id -> root),
    each in the run whose own event spans its start, on that run's clock, its index from
    `slots` (see the module); runs that are no training step are left out. A window whose
    runs and run events differ in number announces nothing (which run is which is unknown)."""
    every = []
    for root in nodes.values():
        _walk(root, every)
    run_events = sorted((n for n in every if n.name == RUN_EVENT), key=lambda n: n.start_ns)
    if len(run_events) != len(runs):  # a run without its event: no anchor to trust
        return []
    operators = sorted((n for n in every if str(n.type).endswith("Operator")),
                       key=lambda n: n.start_ns)
    out, k = [], 0
    for run, event in zip(runs, run_events):
        ranks: Dict[str, int] = {}
        while k < len(operators) and operators[k].start_ns < event.start_ns:
            k += 1  # before this run (another thread's leftovers): not a step's
        while k < len(operators) and operators[k].start_ns <= event.end_ns:
            op = operators[k]
            k += 1
            if run.step is None:
                continue
            kind = op_type(op.name)
            rank = ranks[kind] = ranks.get(kind, -1) + 1
            index = slots.setdefault((kind, rank), len(slots))
            t_begin = run.t_begin + (op.start_ns - event.start_ns) / 1e9
            t_end = t_begin + max(op.end_ns - op.start_ns, 0) / 1e9
            out.append(OpEnd(run.program_id, run.step, index, kind, 0, t_begin,
                             min(t_end, max(run.t_end, t_begin))))
    return out

