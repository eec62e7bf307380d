"""The hooks a Paddle job runs with (installed for `PaddleSource.running`, removed after it,
every patched attribute restored exactly as it was):

  steps (dynamic graph)  paddle.optimizer.Optimizer.step / .minimize, the step/minimize of
                         every loaded Optimizer subclass that defines its own (3.3.1: Adam,
                         AdamW, LBFGS), paddle.amp.GradScaler.step / .minimize and
                         AmpScaler.minimize: the outermost of them ends a training step after
                         it returns (paddle.Model.fit steps through Optimizer.minimize)
  steps (static graph)   paddle.static.Executor.run: each run of a program that is not a
                         startup program is a step, timed around the run
  DataLoader             paddle.io.DataLoader.__init__ (PADDLETUNE_OVERRIDES' reader
                         section) and its iterators (loaders.py)
  threads                paddle.base.core.set_num_threads (the overrides' threads.intra_op;
                         the script's own calls tracked, paddle having no getter)
  NaN/Inf                FLAGS_check_nan_inf (and _level) through paddle.set_flags
  --ops                  paddle.profiler, only while something listens to op_end: windows of
                         training steps (eager/op_windows.py, profiler_ops.py) in the dynamic
                         graph; in the static graph around Executor.run, a window of steps at
                         a time (static_ops.py); paddle.profiler.Profiler.__init__ guarded (a
                         script's own profiler ends ours)
  the model's census     paddle.nn.Layer.__call__ again, until the first training step ends
                         (census.py), while something listens to `model`; in the static
                         graph, the program of the first training run
  CUDA events            on a GPU, while something listens to device_time
                         (sources/device_clock.py): where each step ends (beside its
                         memory_step) and where the next one starts: the DataLoader's
                         handover of its batch, else a host-to-device copy (Tensor.cuda /
                         .to, gpu.py), or a static run's start (its feed is copied inside
                         the run)

`own_s` adds up the time the step hooks (the optimizer's step, Executor.run) and the
DataLoader's __next__ (loaders.py) spend on the training thread beside paddle's own work (the
probes' callbacks there included; --ops's windows, the speed test's replays and the reading
thread's solo timing not: each is accounted for on its own): the profile's "hooks" overhead.
"""

import inspect
import time
from typing import Callable, Dict, List, Optional, Tuple

import paddle
from paddle.base import core

from ..device_memory import device_index
from ..eager.bus import StepEnd
from ..eager.gc_clock import send_last_pauses
from ..eager.op_windows import OpWindows
from ..eager.overrides import batch_size_fixed
from ..eager.steps import ModelMode
from .loaders import LoaderHooks, place_name
from .profiler_ops import PaddleRecorder
from .static_ops import StaticOps

_perf = time.perf_counter
_MISSING = object()
FETCH_NAMES_MAX = 256  # fetched variables whose names are kept (_fetch_name)
LOADER_OVERRIDABLE = ("num_workers", "batch_size", "prefetch_factor", "use_shared_memory",
                      "use_buffer_reader", "persistent_workers")
# ops a startup program is made of: initializers, constants, parameters set
STARTUP_OPS = frozenset((
    "full", "full_int_array", "full_like", "uniform", "uniform_random", "gaussian",
    "gaussian_random", "truncated_gaussian_random", "fill_constant", "assign_value",
    "set_parameter", "shadow_output", "set_persistable_value", "randint", "assign",
    "c_broadcast", "broadcast", "parameter", "eye", "arange", "linspace"))


def optimizer_classes() -> List[type]:
    """paddle.optimizer.Optimizer and its loaded subclasses."""
    out, stack = [], [paddle.optimizer.Optimizer]
    while stack:
        cls = stack.pop()
        if cls not in out:
            out.append(cls)
            stack.extend(cls.__subclasses__())
    return out


class PaddleHooks:
    def __init__(self, source, check_nan: bool, nan_continue: bool):
        self.source = source
        self.check_nan, self.nan_continue = check_nan, nan_continue
        self._patched: List[Tuple[object, str, object]] = []  # (owner, name, own or _MISSING)
        self._undo: List[Callable[[], None]] = []
        self._depth = 0  # optimizer calls in progress (the outermost ends the step)
        self._place = "CPUPlace"
        self._executors: Dict[int, Tuple[int, str]] = {}  # id -> (number, place)
        # id(program) -> (the program, its number, its op count, whether a startup program)
        self._programs: Dict[int, Tuple[object, int, int, bool]] = {}
        self._static_steps = 0
        self._fetch_names: Dict[int, Tuple[object, str]] = {}  # id -> (the variable, its name)
        self._timing_ops = False  # --ops: something listened to op_end at install
        self._static_paused = 0.0  # --ops's window work before the next run (its StepEnd's)
        self.static_ops = StaticOps(source.bus)
        self.op_windows = OpWindows(source.bus, source.timer, PaddleRecorder())
        self._census = None  # the model's census until the first training step ends
        self._program_census = False  # a static-graph census is still to be taken
        self._not_training = set()  # id() of the programs run without a backward pass
        self._cuda_memory: Dict[int, object] = {}  # device -> gpu.PaddleCudaMemory
        self._device_clock = None  # device_clock.DeviceClock: the steps timed with CUDA events
        self._removed = False
        self._own_s = 0.0  # the step hooks' own time so far
        self._loader_hooks: Optional[LoaderHooks] = None

    @property
    def own_s(self) -> float:
        """The step hooks' and the DataLoader's __next__ hook's own time so far."""
        loaders = self._loader_hooks
        return self._own_s + (loaders.own_s if loaders is not None else 0.0)

    # --- patching -----------------------------------------------------------------------
    def patch(self, owner, name: str, replacement):
        own = owner.__dict__.get(name, _MISSING)
        self._patched.append((owner, name, own))
        setattr(owner, name, replacement)

    def install(self) -> Callable[[], None]:
        try:
            self._install()
        except BaseException:
            self.remove()
            raise
        return self.remove

    def remove(self):
        if self._removed:
            return
        self._removed = True
        for timer in (self.static_ops, self.op_windows):  # the last window's ops, while
            try:  # the probes still listen
                timer.close()
            except Exception:  # noqa: BLE001  (the job's end must not fail on it)
                pass
        while self._patched:
            owner, name, own = self._patched.pop()
            if own is _MISSING:
                try:
                    delattr(owner, name)
                except AttributeError:
                    pass
            else:
                setattr(owner, name, own)
        while self._undo:
            try:
                self._undo.pop()()
            except Exception:  # noqa: BLE001  (restoring a flag must not hide the job's end)
                pass

    def _install(self):
        try:
            self._place = place_name(paddle.get_device())
        except Exception:  # noqa: BLE001
            self._place = "CPUPlace"
        self._timing_ops = timing_ops = self.source.bus.listening("op_end")
        if timing_ops:
            self.static_ops.prepare()
        for cls in optimizer_classes():
            for name in ("step", "minimize"):
                if inspect.isfunction(cls.__dict__.get(name)):
                    self.patch(cls, name, self._stepping(cls.__dict__[name], owner_arg=False))
        scaler = getattr(paddle.amp, "GradScaler", None)
        for cls in (scaler.__mro__[:-1] if scaler is not None else ()):
            for name in ("step", "minimize"):
                if inspect.isfunction(cls.__dict__.get(name)):
                    self.patch(cls, name, self._stepping(cls.__dict__[name], owner_arg=True))
        executor = paddle.static.Executor
        self.patch(executor, "run", self._executor_run(executor.run))
        # (an evaluation loop's no_grad(), for StepTimer; a static graph's reads say True)
        timer = self.source.timer
        timer.grad_on = paddle.is_grad_enabled
        self._undo.append(lambda: setattr(timer, "grad_on", None))
        # (and its model.eval(), where no_grad() wraps only its forward)
        mode = ModelMode()
        layer = paddle.nn.Layer
        self.patch(layer, "train", _mode_watched(layer.train, mode, True))
        self.patch(layer, "eval", _mode_watched(layer.eval, mode, False))
        timer.eval_mode = mode.eval_mode
        self._undo.append(lambda: setattr(timer, "eval_mode", None))
        self.patch(paddle.io.DataLoader, "__init__",
                   self._loader_init(paddle.io.DataLoader.__init__))
        from . import gpu
        on_gpu = gpu.has_gpu()
        if on_gpu and self.source.bus.listening("device_time"):
            self._start_device_clock(gpu)
        self._loader_hooks = LoaderHooks(self.source.loaders, self.patch,
                                         self._batch_handed_over
                                         if self._device_clock is not None else None)
        self._undo.extend(self._loader_hooks.install())
        gc_clock = self._loader_hooks.gc
        self._undo.append(lambda: send_last_pauses(gc_clock, self.source.bus))
        self._threads()
        self._track_threads()
        if timing_ops:
            self._guard_profiler()
        if self.source.bus.listening("model"):  # (over --ops's wrapper: it can unhook first)
            from .census import Census
            self._census = Census(lambda record: self.source.bus.emit("model", record),
                                  self.patch)
            self._undo.append(self._census.unhook)
            self._program_census = True
        if on_gpu:
            clock = self._device_clock
            self._undo.extend(gpu.time_copies_and_syncs(
                self.source.timer, copy_queued=clock.copy_queued if clock else None))
        if self.check_nan:
            self._set_flags({"FLAGS_check_nan_inf": True,
                             "FLAGS_check_nan_inf_level": 1 if self.nan_continue else 0})

    def _guard_profiler(self):
        """paddle.profiler.Profiler.__init__ guarded for both op timers (the static graph's
        windows and the dynamic graph's): a Profiler the script makes ends both, one either
        of them makes is its own."""
        import paddle.profiler as profiler
        original, hooks = profiler.Profiler.__init__, self

        def __init__(prof, *args, **kwargs):
            if not (hooks.op_windows.starting or hooks.static_ops.making):
                hooks._script_profiler()
            return original(prof, *args, **kwargs)

        __init__.__wrapped__ = original
        self.patch(profiler.Profiler, "__init__", __init__)

    def _script_profiler(self):
        """The script makes its own Profiler: both op timers stop for good, and the one of
        the graph running now says why."""
        reason = ("the script makes its own paddle.profiler.Profiler, and Paddle keeps one "
                  "profiler at a time")
        dynamic = paddle.in_dynamic_mode()
        self.static_ops.stop_for_good(reason, announce=not dynamic)
        self.op_windows.stop_for_good(reason, announce=dynamic)

    # --- steps: dynamic graph -------------------------------------------------------------
    def _stepping(self, original, owner_arg: bool):
        """An optimizer's (or a GradScaler's: `owner_arg`, its first argument is the
        optimizer) step or minimize that ends a training step after it returns."""
        hooks, timer = self, self.source.timer
        dynamic = paddle.in_dynamic_mode

        def stepping(obj, *args, **kwargs):
            if hooks._depth or not dynamic():
                return original(obj, *args, **kwargs)
            hooks._depth += 1
            timer.stepping = True  # (a closure's DataLoader passes are the step's)
            try:
                out = original(obj, *args, **kwargs)
            finally:
                hooks._depth -= 1
                timer.stepping = False
            t_in = _perf()
            owner = (args[0] if args else kwargs.get("optimizer", obj)) if owner_arg else obj
            if timer.owns(owner):
                if hooks._census is not None:
                    census, hooks._census = hooks._census, None
                    hooks._program_census = False
                    census.step_done(owner, hooks._place)
                hooks._device_step(hooks._place, timer.steps)
                hooks._memory_step(hooks._place, timer.steps, timer.batch_size)
                timer.step_done(hooks._place)
                t_end = timer.last_end  # (before a heap count moves the next step's start)
                loader_hooks = hooks._loader_hooks
                counted_s = loader_hooks.gc.stepped(
                    hooks.source.bus, timer, may_count=not hooks._timing_ops
                    and not loader_hooks.loaders.speed_test)
                hooks._own_s += _perf() - t_in - counted_s  # (before --ops's window: the
                # ops probe's; the heap count is left out of the steps, its records say it)
                if hooks._timing_ops:
                    hooks.op_windows.step_ended(timer.steps - 1, t_end, hooks._place)
            return out

        stepping.__wrapped__ = original
        for attr in ("__name__", "__qualname__", "__doc__", "__module__"):
            try:
                setattr(stepping, attr, getattr(original, attr))
            except (AttributeError, TypeError):
                pass
        return stepping

    # --- steps: static graph --------------------------------------------------------------
    def _executor_run(self, original):
        hooks, bus = self, self.source.bus

        def run(exe, program=None, feed=None, fetch_list=None, *args, **kwargs):
            t_in = _perf()
            timing_ops = bus.listening("op_end")
            opening_s = 0.0
            if timing_ops:  # (a window's opening and reading: left out of the steps)
                t_open = _perf()
                hooks.static_ops.before_run()
                opening_s = _perf() - t_open
                hooks._static_paused += opening_s
            if hooks._device_clock is not None:  # (the feed is copied inside the run)
                hooks._device_clock.mark_start(hooks._executor_device, exe)
            t_begin = _perf()
            out = original(exe, program, feed, fetch_list, *args, **kwargs)
            t_end = _perf()
            reading_s = 0.0
            if timing_ops:
                program_id, _, startup = hooks._program(program)
                hooks.static_ops.after_run(program_id, None if startup else hooks._static_steps,
                                           t_begin, t_end)
                reading_s = _perf() - t_end
            if bus.listening("step_end"):
                hooks._static_step(exe, program, feed, fetch_list, t_begin, t_end)
            hooks._static_paused = reading_s  # (the next run's, as its gap holds it)
            if hooks._program_census:
                hooks._take_program_census(exe, program)
            hooks._own_s += _perf() - t_in - (t_end - t_begin) - opening_s - reading_s
            return out

        run.__wrapped__ = original
        run.__doc__ = original.__doc__
        return run

    def _static_step(self, exe, program, feed, fetch_list, t_begin, t_end):
        executor_id, place = self._executor(exe)
        program_id, n_ops, startup = self._program(program)
        batch_size, feed_bytes, feed_names = None, 0, ()
        if isinstance(feed, dict):
            feed_names = tuple(feed)
            for value in feed.values():
                shape = getattr(value, "shape", None)
                if shape:
                    if batch_size is None:
                        batch_size = int(shape[0]) if int(shape[0]) > 0 else None
                    feed_bytes += int(getattr(value, "nbytes", 0) or 0)
        fetch_names = ()
        if fetch_list:
            fetch_names = tuple(item if isinstance(item, str) else self._fetch_name(item)
                                for item in fetch_list)
        record = StepEnd(self._static_steps, t_begin, t_end, 0.0, 0.0, 0.0, t_end - t_begin,
                         batch_size, place, feed_bytes, 0, executor_id, program_id, n_ops,
                         fetch_names, feed_names, startup, paused_s=self._static_paused)
        if not startup:
            self._device_step(place, self._static_steps)
        self._memory_step(place, self._static_steps, batch_size, executor_id, program_id)
        if not startup:
            self._static_steps += 1
            self.source.timer.stepped_elsewhere()
        self.source.bus.emit("step_end", record)

    # --- the steps on the device (CUDA events) ---------------------------------------------
    def _start_device_clock(self, gpu):
        from ..device_clock import DeviceClock
        bus = self.source.bus
        self._device_clock = DeviceClock(lambda totals: bus.emit("device_time", totals),
                                         gpu.paddle_cuda())
        self._undo.append(self._device_clock.close)

    def _device_step(self, place: str, step: int):
        """On a CUDA place, the step's end marked on the device (device_clock.py)."""
        if self._device_clock is not None and place.startswith("CUDAPlace("):
            self._device_clock.step_ended(device_index(place), step)

    def _batch_handed_over(self):
        """A DataLoader handed the loop its batch (loaders.py): the step's start on the device
        (DeviceClock.mark_waiting), as in PyTorch: the moment the loop got its batch. The
        device's idle time runs from the previous step's end to that moment (the wait for the
        batch, and the host's work between steps: logging, a loss read back). A batch already
        on the GPU (paddle's buffered reader copied it in its reading thread, on its own
        stream: use_buffer_reader, on by default) has no copy in the loop to mark it; a host
        batch's copy (Tensor.cuda / .to, or paddle's implicit one as an op's input) comes
        after the handover, and one made in the middle of the step would count the kernels
        queued before it as idle. The host's work from the handover to the step's first
        kernel counts as busy; the reader's copy on its own stream, in neither (only the wait
        for it, as idle)."""
        self._device_clock.mark_waiting()

    def _executor_device(self, exe) -> Optional[int]:
        """The GPU an executor runs on; None on another place. A static-graph run copies
        its feed inside the run: its start marks the step's start."""
        place = self._executor(exe)[1]
        return device_index(place) if place.startswith("CUDAPlace(") else None

    def _memory_step(self, place: str, step: int, batch_size, executor_id: int = 0,
                     program_id: int = 0):
        """On a CUDA place, the allocator's figures, sent just before the step's step_end."""
        if not place.startswith("CUDAPlace(") or not self.source.bus.listening("memory_step"):
            return
        from .gpu import PaddleCudaMemory
        device = device_index(place)
        memory = self._cuda_memory.get(device)
        if memory is None:
            memory = self._cuda_memory[device] = PaddleCudaMemory(device)
        self.source.bus.emit("memory_step", memory.step(step, batch_size, executor_id,
                                                        program_id))

    def _take_program_census(self, exe, program):
        """The census of the first training program run (one with a backward pass: not a
        startup, evaluation or inference program, each looked at once)."""
        if program is None:
            program = paddle.static.default_main_program()
        if id(program) in self._not_training or self._program(program)[2]:
            return
        from .census import program_census, trains
        inner = getattr(program, "_program", None)  # a CompiledProgram's
        target = inner if inner is not None else program
        if not trains(target):
            self._not_training.add(id(program))
            return
        self._program_census = False
        if self._census is not None:  # (its layers were called as the program was built)
            census, self._census = self._census, None
            census.unhook()
        record = program_census(target, self._executor(exe)[1])
        if record is not None:
            self.source.bus.emit("model", record)

    def _fetch_name(self, item) -> str:
        """A fetched variable's name, cached by the object (paddle 3's PIR values name
        themselves only through a raised error for most ops' results: ~16 us each, every
        step). The cache holds the object, so its id is not reused; a script fetching new
        objects every step refills it from empty past FETCH_NAMES_MAX."""
        known = self._fetch_names.get(id(item))
        if known is not None and known[0] is item:
            return known[1]
        if len(self._fetch_names) >= FETCH_NAMES_MAX:
            self._fetch_names.clear()
        name = _name(item)
        self._fetch_names[id(item)] = (item, name)
        return name

    def _executor(self, exe) -> Tuple[int, str]:
        known = self._executors.get(id(exe))
        if known is None:
            try:
                place = place_name(exe.place)
            except Exception:  # noqa: BLE001
                place = self._place
            known = self._executors[id(exe)] = (len(self._executors), place)
        return known

    def _program(self, program) -> Tuple[int, int, bool]:
        """(its number, its op count, whether it is a startup program), cached by id."""
        if program is None:
            program = paddle.static.default_main_program()
        inner = getattr(program, "_program", None)  # a CompiledProgram's
        target = inner if inner is not None else program
        count = _op_count(target)
        known = self._programs.get(id(program))
        if known is not None and known[0] is program and known[2] == count:
            return known[1], known[2], known[3]
        startup = target is paddle.static.default_startup_program() or _all_startup(target)
        number = known[1] if known is not None and known[0] is program else len(self._programs)
        self._programs[id(program)] = (program, number, count, startup)
        return number, count, startup

    # --- DataLoader arguments ---------------------------------------------------------------
    def _loader_init(self, original):
        source = self.source
        signature = inspect.signature(original)
        self_name, *params = signature.parameters.values()
        supported = {p.name: p.default for p in params if p.name in LOADER_OVERRIDABLE}

        def __init__(loader, *args, **kwargs):
            state = source.overrides_state
            if state is None or not state.requested.get("reader"):
                return original(loader, *args, **kwargs)
            try:
                bound = signature.bind(loader, *args, **kwargs)
            except TypeError:
                return original(loader, *args, **kwargs)  # paddle reports the mistake
            given = dict(bound.arguments)
            given.pop(self_name.name, None)
            changed = state.loader_arguments(given, supported, batch_size_fixed(given))
            return original(loader, **changed)

        __init__.__wrapped__ = original
        __init__.__doc__ = original.__doc__
        return __init__

    # --- threads and flags ------------------------------------------------------------------
    def _threads(self):
        state = self.source.overrides_state
        if state is None:
            return
        wanted = state.wanted("threads")
        if "intra_op" in wanted:
            value = wanted["intra_op"]
            was = current_threads()
            setter = getattr(core, "set_num_threads", None)
            if setter is None:
                state.skip("threads", "intra_op", value, "not-supported",
                           "this paddle has no core.set_num_threads")
            elif was == value:
                state.skip("threads", "intra_op", value, "same-value",
                           "the job's own value")
            else:
                setter(int(value))
                self.source._threads_set = int(value)
                state.apply("threads", "intra_op", value, was)
                self._undo.append(lambda: _restore_threads(self.source, setter, was))
            if setter is not None:
                self.source._threads_kept = int(value)
        if "inter_op" in wanted:
            state.skip("threads", "inter_op", wanted["inter_op"], "not-supported",
                       "Paddle's dynamic graph runs ops one at a time: it has no inter-op "
                       "thread pool to size")

    def _track_threads(self):
        """The script's own core.set_num_threads calls, through a wrapper: paddle has no
        getter, so the count it sets is kept as the source's (blas_threads); where an
        override set the count, it stays (the script's call changes nothing, as PyTorch's
        hooks keep torch.set_num_threads)."""
        original = getattr(core, "set_num_threads", None)
        if original is None:
            return
        source = self.source
        source._set_threads = original
        self._undo.append(lambda: _untrack_threads(source))

        def set_num_threads(n):
            kept = source._threads_kept
            if kept is None:
                original(n)
                source._threads_set = int(n)
                return
            # the override's count stays; the script's first other count is what it wanted
            # (the override's `was`), unless the override already changed the job's own
            state = source.overrides_state
            if state is None or int(n) == kept:
                return
            if not any(a.section == "threads" and a.key == "intra_op" for a in state.applied):
                state.apply("threads", "intra_op", kept, int(n))

        self.patch(core, "set_num_threads", set_num_threads)

    def _set_flags(self, flags: dict):
        previous = {}
        for name in flags:
            try:
                previous.update(paddle.get_flags([name]))
            except Exception:  # noqa: BLE001  (a flag this build lacks)
                continue
        paddle.set_flags({k: v for k, v in flags.items() if k in previous})
        self._undo.append(lambda: paddle.set_flags(previous))


def current_threads():
    """The CPU math threads paddle set at start (FLAGS_paddle_num_threads, which paddle's
    InitDevices passes to the BLAS/OpenMP libraries): paddle has no getter of its own."""
    try:
        return int(paddle.get_flags(["FLAGS_paddle_num_threads"])["FLAGS_paddle_num_threads"])
    except Exception:  # noqa: BLE001
        return None


def _untrack_threads(source):
    source._set_threads = None
    source._threads_kept = None


def _restore_threads(source, setter, was):
    source._threads_set = None
    if was is not None:
        setter(int(was))


def _name(item) -> str:
    """A fetched variable's name; a PIR value without one (most ops' results) by the op
    that makes it ("pd_op.mean"); "?" when neither is known."""
    try:
        return str(item.name)
    except Exception:  # noqa: BLE001  (a PIR value without a name: paddle raises)
        pass
    try:
        return str(item.get_defining_op().name())
    except Exception:  # noqa: BLE001
        return "?"


def _op_count(program) -> int:
    try:
        return int(program.num_ops())  # PIR
    except Exception:  # noqa: BLE001
        try:
            return len(program.global_block().ops)
        except Exception:  # noqa: BLE001
            return -1


def _all_startup(program) -> bool:
    """Whether every op of the program initializes (a startup program's ops do)."""
    try:
        ops = program.global_block().ops
    except Exception:  # noqa: BLE001
        return False
    if not ops:
        return False
    for op in ops:
        name = op.name() if callable(getattr(op, "name", None)) else getattr(op, "type", "")
        if str(name).rpartition(".")[2] not in STARTUP_OPS:
            return False
    return True


def _mode_watched(original, mode: ModelMode, training: bool):
    """paddle.nn.Layer.train or .eval, noting the mode the script puts its model in."""
    def set_mode(layer, *args, **kwargs):
        mode.training = training
        return original(layer, *args, **kwargs)
    set_mode.__wrapped__ = original
    return set_mode
