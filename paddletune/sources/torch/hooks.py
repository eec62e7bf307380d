"""What the PyTorch source hooks while a job runs, each undone by `TorchHooks.remove`:

* steps: torch.optim's global optimizer-step post hook (every optimizer, GradScaler.step
  included); the first optimizer to step owns the training steps;
* DataLoader passes: `_BaseDataLoaderIter.__init__` (the loader's id and settings), `_reset`
  (a persistent-workers iterator starts a new pass), `__next__` (each batch: how long the loop
  waited, how many batches were ready, the speed test's replay; with no workers, the loop's
  CPU time making a random eighth of the batches: CPU_SHARE), and
  `_MultiProcessingDataLoaderIter.__init__` / `_process_data` (the worker each batch came from);
  a pass's start is announced at its first `__next__`, or, for workers started with the spawn
  or forkserver method (STARTED_IN_FIRST_BATCH: their start is waited through in that first
  `__next__`), once its first batch came, with the wait for it (LoaderTracker.first_batch);
* worker timing: the dataset fetchers' `fetch`, which the forked workers run, adds each batch's
  time and CPU time to a shared array the trainer reads as the batch arrives (workers started
  with the spawn or forkserver method do not inherit it: their batches have no producer time);
  it is patched only while a multi-process iterator forks its workers, so the training loop's
  own fetches (num_workers=0) run unwrapped;
* overrides: `DataLoader.__init__` takes PADDLETUNE_OVERRIDES' reader values, and
  `torch.set_num_threads` keeps the override's thread count; the `backends` section
  (backends.py) sets cuDNN's algorithm search and TF32, kept against the script's own
  settings made before its first training step ends;
* --check-nan: a global forward hook on every leaf module checks its outputs (costs a
  reduction and a host sync per module call: roughly 10-40% of a CPU step);
* torch.compile and torch.distributed (scope.py): a compiled model, a distributed job's
  backend, rank and world size, each announced as a `scope` event;
* the model's census (census.py, while something listens to `model`): a forward hook on every
  module until the first training step ends, then a `model` event;
* --ops (while something listens to op_end): torch.profiler windows of training steps
  (eager/op_windows.py, profiler_ops.py): every top-level operator of the forward, the
  backward and the update, announced as op_end events when a window closes (what starts a
  profiler patched: a script's own ends ours; the DataLoader's __next__ unrecorded).

torch.multiprocessing.reductions' storage rebuilds (handover.py) are timed on the thread in
`__next__`: the hand-over of a worker's batch, each pop's `handover_s`.

`own_s` adds up the time the step hook and `__next__` spend on the training thread beside
the framework's own work (the probes' callbacks there included; torch's dispatch to the step
hook, the speed test's replays and --ops's profiler windows not): the profile's "hooks"
overhead.
"""

import inspect
import multiprocessing
import os
import random
import sys
import threading
import time
import weakref
from typing import Callable, List, Optional, Tuple

import torch
from torch.optim.optimizer import (register_optimizer_step_post_hook,
                                   register_optimizer_step_pre_hook)
from torch.utils.data import IterableDataset, RandomSampler, SequentialSampler
from torch.utils.data._utils.collate import default_collate, default_convert
from torch.utils.data.dataloader import _InfiniteConstantSampler
from torch.utils.data import dataloader as dl
from torch.utils.data._utils import fetch as fetchers

from ..device_memory import device_index
from ..eager.gc_clock import GcClock, send_last_pauses
from ..eager.loaders import ByIdentity, call_argument, error_detail, script_arg
from ..eager.op_windows import OpWindows
from ..eager.overrides import batch_size_fixed
from ..eager.steps import ModelMode, iter_tensors
from .backends import BackendOverrides
from .handover import HandOverClock, override_strategy, sharing_strategy
from .profiler_ops import STARTS_A_PROFILER, TorchRecorder, unrecorded
from .scope import watch_scope

_perf = time.perf_counter
_cpu = time.thread_time
_ident = threading.get_ident
_WORKER_STATS = None  # the shared array the workers forked next inherit (None: not now)
# A batch the training loop makes itself (num_workers=0) has its CPU time measured with
# probability CPU_SHARE: a thread's CPU clock is a system call, about 6 us each in the
# training loop of bench_torch_overhead's MLP against 0.7 us warm, and two a batch were an
# eighth of what profiling cost its step. The CPU per batch is the mean over the measured
# ones (the reader records' cpu_n): drawn at random (from the hooks' own generator, not the
# script's), they are a fair sample, where every eighth batch of a pass would always take
# its first, which carries the pass's setup (a sampler's permutation, the iterator's start).
CPU_SHARE = 1 / 8
CPU_SEED = 20261129
FETCHERS = (fetchers._MapDatasetFetcher, fetchers._IterableDatasetFetcher)
# per worker in the shared array: how many batches it made, then for each of the last RING
# batches (slot = batch number % RING) its seconds and CPU seconds. A worker runs at most
# prefetch_factor batches ahead of the loop, so the loop finds each batch's own figures.
RING = 256
STATS = 1 + 2 * RING
# Workers started with these methods start a new interpreter (spawn), or fork one from a
# server process that has not imported the job's modules (forkserver): their Process.start()
# in the iterator's __init__ returns at once, and the imports and the dataset's unpickling
# are waited through in the pass's first next(). Their pass's start is sent once its first
# batch came, with that wait (LoaderTracker.first_batch; records.ReaderStart.first_wait_s).
STARTED_IN_FIRST_BATCH = ("spawn", "forkserver")


class NanInfError(FloatingPointError):
    """--check-nan: a module's output holds NaN or Inf."""


class _IterState:
    __slots__ = ("loader_id", "config", "handle", "stale", "stats", "taken", "worker",
                 "__weakref__")

    def __init__(self, loader_id: int, config: dict):
        self.loader_id, self.config = loader_id, config
        self.handle, self.stale, self.stats, self.worker = None, False, None, None
        self.taken: List[int] = []  # per worker: how many of its batches the loop took


class TorchHooks:
    def __init__(self, source, check_nan: bool = False, nan_continue: bool = False):
        self.source, self.tracker, self.timer = source, source.loaders, source.timer
        self.check_nan, self.nan_continue = check_nan, nan_continue
        self.own_s = 0.0  # the step hook's and __next__'s own time so far
        self._undo: List[Callable[[], None]] = []
        self._loader_ids = ByIdentity()  # (a DataLoader subclass may be unhashable)
        self._dataset_names = ByIdentity()  # loader -> the script's name for
        # its dataset, read from the DataLoader(...) call that built it (None: not a name)
        self._places = {}
        self._threads_override: Optional[int] = None
        self._module_calls = 0
        self._cuda_memory: dict = {}
        self._device_clock = None  # device_clock.DeviceClock: the steps timed with CUDA events
        self._census = None  # the model's census until the first training step ends
        self._backends = None  # the `backends` overrides until the first training step ends
        self._ops: Optional[OpWindows] = None  # --ops: torch.profiler's windows
        self._handover = HandOverClock()  # workers' batches handed to the loop
        self._gc = GcClock()  # Python's collections inside the loop's fetches

    # --- install / remove -----------------------------------------------------------------
    def install(self):
        pre = register_optimizer_step_pre_hook(self._before_step)
        self._undo.append(pre.remove)
        post = register_optimizer_step_post_hook(self._after_step)
        self._undo.append(post.remove)
        # (an evaluation loop's no_grad(), for StepTimer: a pass left by a `break`)
        timer = self.timer
        timer.grad_on = torch.is_grad_enabled
        self._undo.append(lambda: setattr(timer, "grad_on", None))
        # (and its model.eval(), where no_grad() wraps only its forward)
        mode = ModelMode()
        self._patch(torch.nn.Module, "train", lambda original: _train_watched(original, mode))
        timer.eval_mode = mode.eval_mode
        self._undo.append(lambda: setattr(timer, "eval_mode", None))
        self._patch(dl.DataLoader, "__iter__", self._loader_iter)
        self._patch(dl._BaseDataLoaderIter, "__init__", self._iter_init)
        self._patch(dl._BaseDataLoaderIter, "_reset", self._iter_reset)
        self._patch(dl._BaseDataLoaderIter, "__next__", self._iter_next)
        self._patch(dl._MultiProcessingDataLoaderIter, "__init__", self._multi_init)
        self._patch(dl._MultiProcessingDataLoaderIter, "_process_data", self._process_data)
        self._handover.install(self._patch_module)
        self._undo.extend(self._gc.install())
        self._undo.append(lambda: send_last_pauses(self._gc, self.source.bus))
        override_strategy(self.source.overrides_state, self._patch_module, self._undo)
        self._patch(dl.DataLoader, "__init__", self._loader_init)
        self._threads()
        self._install_backends()
        if self.check_nan:
            hook = torch.nn.modules.module.register_module_forward_hook(self._check_output)
            self._undo.append(hook.remove)
        if self.source.bus.listening("op_end"):
            self._ops = OpWindows(self.source.bus, self.timer, TorchRecorder())
            for name in STARTS_A_PROFILER:
                if hasattr(torch.autograd.profiler, name):
                    self._patch_module(torch.autograd.profiler, name,
                                       lambda original: self._ops.guard(original, "PyTorch"))
            self._undo.append(self._ops.close)  # (before the patch is undone)
        if self.source.bus.listening("model"):
            from .census import Census
            self._census = Census(lambda record: self.source.bus.emit("model", record))
            self._undo.append(self._unhook_census)
        self._undo.extend(watch_scope(lambda record: self.source.bus.emit("scope", record),
                                      self._hidden(), self._before_compile))
        if torch.cuda.is_available():
            self._install_gpu()
        return self.remove

    def _install_gpu(self):
        """Copies and syncs timed; the steps timed on the device when the profile wants it."""
        from . import gpu
        from ..device_clock import DeviceClock
        bus = self.source.bus
        if bus.listening("device_time"):
            self._device_clock = DeviceClock(lambda totals: bus.emit("device_time", totals),
                                             gpu.TORCH_CUDA)
            self._undo.append(self._device_clock.close)
        copy_queued = self._device_clock.copy_queued if self._device_clock else None
        self._undo.extend(gpu.time_copies_and_syncs(self.timer, copy_queued))
        self._cuda_memory = {}
        self._undo.append(self._last_memory)

    def _install_backends(self):
        backends = BackendOverrides(self.source.overrides_state)
        self._undo.extend(backends.install())
        if backends.wanted or backends.cpu_autocast is not None:
            self._backends = backends

    def _hidden(self) -> tuple:
        """The options on in this run whose per-module hooks cannot see inside a compiled
        graph (and split it): --check-nan's (--ops reads torch.profiler, which does not)."""
        return ("check_nan",) if self.check_nan else ()

    def _before_compile(self):
        if self._census is not None:
            self._census.unhook(compiled=True)

    def _unhook_census(self):
        if self._census is not None:
            self._census.unhook()
            self._census = None

    def remove(self):
        while self._undo:
            undo = self._undo.pop()
            try:
                undo()
            except Exception:  # noqa: BLE001  (restore the rest whatever happens)
                pass

    def _patch(self, owner, name: str, make: Callable):
        original = owner.__dict__[name]
        owner_name = f"{owner.__module__}.{owner.__qualname__}.{name}"
        wrapper = make(original)
        wrapper.__wrapped__ = original
        wrapper.__qualname__ = owner_name
        setattr(owner, name, wrapper)
        self._undo.append(lambda: setattr(owner, name, original))

    # --- steps ----------------------------------------------------------------------------
    def _before_step(self, optimizer, args, kwargs):
        self.timer.stepping = True  # (a closure's DataLoader passes are the step's)

    def _after_step(self, optimizer, args, kwargs):
        t_in = _perf()
        timer = self.timer
        timer.stepping = False
        if not timer.owns(optimizer):
            return
        place = self._places.get(id(optimizer)) or self._place(optimizer)
        if self._backends is not None:
            backends, self._backends = self._backends, None
            backends.first_step_done()
        if self._census is not None:
            census, self._census = self._census, None
            census.step_done(optimizer, place)
        if place.startswith("CUDA"):
            if self._device_clock is not None:
                self._device_clock.step_ended(device_index(place), timer.steps)
            if self.source.bus.listening("memory_step"):
                self._memory_step(place)
        timer.step_done(place)
        t_end = timer.last_end  # (before a heap count moves the next step's start)
        counted_s = self._gc.stepped(self.source.bus, timer, may_count=self._ops is None
                                     and not self.tracker.speed_test)
        self.own_s += _perf() - t_in - counted_s  # (before --ops's windows: the ops probe's
        # overhead; the heap count is left out of the steps, and said by its own records)
        if self._ops is not None:
            self._ops.step_ended(timer.steps - 1, t_end, place)

    def _memory_step(self, place: str):
        """The caching allocator's figures, sent just before the step's step_end."""
        from . import gpu
        device = device_index(place)
        memory = self._cuda_memory.get(device)
        if memory is None:
            memory = self._cuda_memory[device] = gpu.CudaMemory(device)
        self.source.bus.emit("memory_step", memory.step(self.timer.steps,
                                                        self.timer.batch_size))

    def _last_memory(self):
        """The caching allocator's figures once more as the job ends (CudaMemory.last), for
        the pool's figures at the end: a memory_step with no step_end after it."""
        if self.source.bus.listening("memory_step") and self.timer.steps:
            for memory in self._cuda_memory.values():
                self.source.bus.emit("memory_step", memory.last(self.timer.steps - 1,
                                                                self.timer.batch_size))

    def _place(self, optimizer) -> str:
        """The optimizer's place, found once (_after_step looks it up itself first)."""
        place = self._places[id(optimizer)] = _place_of(optimizer)
        return place

    # --- DataLoader -----------------------------------------------------------------------
    def _loader_init(self, original):
        """The DataLoader's construction: the script's name for its dataset (for the
        advice's code), and the reader overrides where there are any."""
        signature = inspect.signature(original)
        overrides = self.source.overrides_state
        wanted = bool(overrides.wanted("reader"))
        names = self._dataset_names

        def __init__(loader, *args, **kwargs):
            t_in = _perf()
            names[loader] = call_argument(sys._getframe(1))
            self.own_s += _perf() - t_in
            if not wanted:
                return original(loader, *args, **kwargs)
            bound = signature.bind(loader, *args, **kwargs)
            given = dict(bound.arguments)
            given.pop("self", None)
            extra = given.pop("kwargs", {}) if "kwargs" in signature.parameters else {}
            changed = overrides.loader_arguments(given, LOADER_DEFAULTS,
                                                 batch_size_fixed(given))
            if changed.get("num_workers") and changed.get("prefetch_factor") is None:
                changed.pop("prefetch_factor", None)
            return original(loader, **changed, **extra)
        return __init__

    def _loader_iter(self, original):
        """The loop asks the DataLoader for a pass: it begins now, before its iterator
        starts its workers or, persistent, wakes them (LoaderTracker.asked)."""
        tracker = self.tracker

        def __iter__(loader):
            t_in = _perf()
            tracker.asked(self._loader_id(loader))
            self.own_s += _perf() - t_in
            return original(loader)
        return __iter__

    def _loader_id(self, loader) -> int:
        loader_id = self._loader_ids.get(loader)
        if loader_id is None:
            loader_id = self._loader_ids[loader] = self.tracker.new_loader_id()
        return loader_id

    def _iter_init(self, original):
        def __init__(it, loader, *args, **kwargs):
            original(it, loader, *args, **kwargs)
            loader_id = self._loader_id(loader)
            it._paddletune = _IterState(loader_id, _loader_config(
                loader, loader_id, self._dataset_names.get(loader)))
        return __init__

    def _multi_init(self, original):
        def __init__(it, loader, *args, **kwargs):
            global _WORKER_STATS
            stats = _new_stats(loader)
            if stats is None:
                original(it, loader, *args, **kwargs)
            else:  # (the timed fetch only for the workers forked now: the training loop's
                # own fetches, num_workers=0's, are not wrapped)
                _WORKER_STATS = stats
                untimed = [(cls, cls.__dict__["fetch"]) for cls in FETCHERS]
                for cls, fetch in untimed:
                    cls.fetch = _timed_fetch(fetch)
                try:
                    original(it, loader, *args, **kwargs)
                finally:
                    _WORKER_STATS = None
                    for cls, fetch in untimed:
                        cls.fetch = fetch
            state = it.__dict__.get("_paddletune")
            if state is not None and stats is not None:
                state.stats = stats
                state.taken = [0] * loader.num_workers
        return __init__

    @staticmethod
    def _iter_reset(original):
        def _reset(it, *args, **kwargs):
            original(it, *args, **kwargs)
            state = it.__dict__.get("_paddletune")
            if state is not None:
                state.stale = True
        return _reset

    @staticmethod
    def _process_data(original):
        def _process_data(it, data, worker_idx, *args, **kwargs):
            state = it.__dict__.get("_paddletune")
            if state is not None:
                state.worker = worker_idx
            return original(it, data, worker_idx, *args, **kwargs)
        return _process_data

    def _iter_next(self, original):
        tracker, draw = self.tracker, random.Random(CPU_SEED).random
        clock, gc_clock = self._handover, self._gc

        def __next__(it):
            t_in = _perf()
            state = it.__dict__.get("_paddletune")
            if state is None:  # an iterator made before the hooks
                return original(it)
            handle = state.handle
            first = None  # (the pass started here: its start sent once its first batch came)
            if handle is None or handle.ended or state.stale:
                handle = self._start_pass(it, state)
                first = handle
            if tracker.speed_test:
                replayed = tracker.replay(handle)
                if replayed is not None:
                    self._handed_over()
                    return replayed
            workers = it._num_workers
            ready = _ready(it) if workers else 0
            # (the loop's CPU making a batch, no workers: a random CPU_SHARE of them)
            cpu_timed = not workers and draw() < CPU_SHARE
            c0 = _cpu() if cpu_timed else 0.0
            if workers:  # (the batch's hand-over, timed on this thread)
                clock.asking = _ident()
                handed = clock.total_s
            collected = gc_clock.total_s  # (the training thread's: the step hook's)
            t0 = _perf()
            try:
                if self._ops is not None and self._ops.recording:  # (read time, not ops)
                    with unrecorded():
                        batch = original(it)
                else:
                    batch = original(it)
            except StopIteration:
                tracker.end(handle, "end")
                raise
            except BaseException as exc:
                tracker.end(handle, "error", error_detail(exc))
                raise
            # (a collection the fetch set off is the step's own time, not the data's)
            gc_s = gc_clock.total_s - collected if gc_clock.watching == _ident() else 0.0
            t1 = _perf() - gc_s
            if first is not None:  # (a pass's first batch only; before its push and pop)
                tracker.first_batch(first, t1 - t0)
            if not workers:  # the loop made it: its push and pop at once
                tracker.made(handle, t0, t1, t1 - t0,
                             max(_cpu() - c0 - gc_s, 0.0) if cpu_timed else None, batch, ready)
            else:
                shapes = None
                if state.stats is not None and state.worker is not None:
                    shapes = self._worker_batch(handle, state, batch, ready)
                tracker.got(handle, t0, t1, batch, ready, shapes,  # (a collection in it
                            handover_s=min(clock.total_s - handed, t1 - t0))  # is gc_s)
            if self._device_clock is not None:  # (_handed_over, inlined: every batch)
                self._device_clock.mark_waiting()
            self.own_s += _perf() - t_in - (t1 - t0) - gc_s
            return batch
        return __next__

    def _handed_over(self):
        """A batch goes to the loop now: on a GPU, the next step's start on the device
        (DeviceClock.mark_waiting), before its copy, or in place of one (a batch already on
        the device, a later copy in the middle of the step)."""
        if self._device_clock is not None:
            self._device_clock.mark_waiting()

    def _start_pass(self, it, state):
        if state.handle is not None and not state.handle.ended:
            self.tracker.end(state.handle, "end")
        config = dict(state.config)
        config["worker_pids"] = [w.pid for w in getattr(it, "_workers", ()) if w.pid]
        ref = weakref.ref(it)
        state.stale = False
        state.handle = self.tracker.start(
            state.loader_id, config, config.get("capacity") or 0,
            lambda: _ready(ref()) if ref() is not None else 0,
            in_first_batch=bool(config.get("num_workers"))
            and config.get("start_method") in STARTED_IN_FIRST_BATCH)
        return state.handle

    def _worker_batch(self, handle, state, batch, ready):
        """The batch came from worker `state.worker`: its own time, from the worker's slot for
        it in the shared array (returns what tracker.produced does). A worker's batches reach
        the loop in the order it made them, and it counts a batch before sending it."""
        worker, stats = state.worker, state.stats
        number, base = state.taken[worker], worker * STATS
        if stats[base] <= number:  # not counted (a batch from before the hooks)
            return None
        state.taken[worker] = number + 1
        slot = base + 1 + 2 * (number % RING)
        return self.tracker.produced(handle, worker, stats[slot], stats[slot + 1], batch, ready)

    # --- threads ----------------------------------------------------------------------------
    def _threads(self):
        overrides = self.source.overrides_state
        wanted = overrides.wanted("threads")
        if "intra_op" in wanted:
            n, was = wanted["intra_op"], torch.get_num_threads()
            if n == was:
                overrides.skip("threads", "intra_op", n, "same-value", "the job's own value")
            else:
                torch.set_num_threads(n)
                self._undo.append(lambda: torch.set_num_threads(was))
                overrides.apply("threads", "intra_op", n, was)
            self._threads_override = n
            self._patch_module(torch, "set_num_threads", self._keep_threads)
        if "inter_op" in wanted:
            n = wanted["inter_op"]
            try:
                was = torch.get_num_interop_threads()
                if n != was:
                    torch.set_num_interop_threads(n)
                    overrides.apply("threads", "inter_op", n, was)
            except RuntimeError as err:
                overrides.skip("threads", "inter_op", n, "other",
                               f"torch refused it: {error_detail(err)}")

    def _patch_module(self, module, name, make):
        original = getattr(module, name)
        setattr(module, name, make(original))
        self._undo.append(lambda: setattr(module, name, original))

    def _keep_threads(self, original):
        overrides, n = self.source.overrides_state, self._threads_override
        owner = os.getpid()

        def set_num_threads(count):
            """The script's own call: the override's count stays; the first such call's
            value is what the script wanted (`was`), unless the override changed that. In a
            process forked from the job's (a DataLoader worker: torch's worker loop sets one
            thread) the call goes through: the override sizes the training process's pool,
            not the workers'."""
            if os.getpid() != owner:
                original(count)
                return
            if count != n and not any(a.section == "threads" and a.key == "intra_op"
                                      for a in overrides.applied):
                overrides.apply("threads", "intra_op", n, count)
        return set_num_threads

    # --- --check-nan ----------------------------------------------------------------------
    def _check_output(self, module, inputs, output):
        if next(module.children(), None) is not None:
            return  # only leaf modules: the first that makes NaN/Inf is named
        self._module_calls += 1
        for t in iter_tensors(output, _shape_or_none, limit=8):
            if not t.is_floating_point() or bool(torch.isfinite(t).all()):
                continue
            n_nan = int(torch.isnan(t).sum())
            n_inf = int(torch.isinf(t).sum())
            name = f"{type(module).__name__}({module.extra_repr()})"
            found_in = _found_in(module, inputs)
            details = {"op_type": type(module).__name__, "op_index": self._module_calls,
                       "output": name, "inputs": _describe_inputs(inputs), "n_nan": n_nan,
                       "n_inf": n_inf, "step": self.timer.steps, "found_in": found_in}
            self.source.bus.emit("nan_inf", details)
            if not self.nan_continue:
                raise NanInfError(f"{name} produced {n_nan} NaN and {n_inf} Inf in its output "
                                  f"at step {self.timer.steps} (--check-nan: the first module "
                                  f"whose forward output is not finite{FOUND_IN[found_in]})")
            return


FOUND_IN = {None: "", "inputs": "; its input held them already: an op before it made them",
            "parameters": "; its parameters hold them: an earlier update diverged"}


def _found_in(module, inputs) -> Optional[str]:
    """Where a module's non-finite output came from, when not from its own computation:
    its inputs (an op outside any module, before it), or its parameters (a diverged
    update). Checked once, as the first NaN/Inf is found."""
    for t in iter_tensors(inputs, _shape_or_none, limit=8):
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            return "inputs"
    for p in module.parameters(recurse=False):
        if p.is_floating_point() and not bool(torch.isfinite(p).all()):
            return "parameters"
    return None


LOADER_DEFAULTS = {"num_workers": 0, "batch_size": 1, "prefetch_factor": None,
                   "pin_memory": False, "persistent_workers": False}


def _timed_fetch(original):
    def fetch(fetcher, *args, **kwargs):
        stats = _WORKER_STATS  # in a forked worker: its iterator's array
        if stats is None:
            return original(fetcher, *args, **kwargs)
        t0, c0 = _perf(), _cpu()
        out = original(fetcher, *args, **kwargs)
        info = torch.utils.data.get_worker_info()
        if info is not None and (info.id + 1) * STATS <= len(stats):
            base = info.id * STATS
            made = int(stats[base])
            slot = base + 1 + 2 * (made % RING)
            stats[slot], stats[slot + 1] = _perf() - t0, _cpu() - c0
            stats[base] = made + 1  # counted last: the loop reads the slot once it sees it
        return out
    return fetch


def _new_stats(loader):
    """A shared array for the workers about to be forked (None when they are not forked:
    they would not inherit it)."""
    if loader.num_workers < 1 or start_method(loader) != "fork":
        return None
    from multiprocessing.sharedctypes import RawArray
    return RawArray("d", STATS * loader.num_workers)


def start_method(loader) -> str:
    """How the loader's worker processes start: its multiprocessing_context's method, else
    the one multiprocessing has set (torch.multiprocessing's is the same), else the
    platform's default (get_all_start_methods' first; asking get_start_method for it would
    fix the default context, and the script's own set_start_method would then fail)."""
    context = loader.multiprocessing_context
    if context is not None:
        return context.get_start_method()
    return (multiprocessing.get_start_method(allow_none=True)
            or multiprocessing.get_all_start_methods()[0])


def _ready(it) -> int:
    """Batches ready to take from a multi-process iterator: arrived out of order, plus in its
    data queue."""
    if it is None or not getattr(it, "_num_workers", 0):
        return 0
    held = sum(1 for v in list(it._task_info.values()) if len(v) == 2)
    try:
        queued = it._data_queue.qsize()
    except (NotImplementedError, AttributeError, OSError):
        queued = 0
    return held + queued


def _loader_config(loader, loader_id: int, dataset_name: Optional[str] = None) -> dict:
    workers = loader.num_workers
    prefetch = loader.prefetch_factor if workers else None
    if workers and prefetch is None:
        prefetch = 2
    return {"name": f"DataLoader#{loader_id}", "num_workers": workers,
            "batch_size": loader.batch_size, "prefetch_factor": prefetch,
            "capacity": prefetch * workers if workers else 0,
            "pin_memory": bool(loader.pin_memory),
            "persistent_workers": bool(loader.persistent_workers),
            "drop_last": bool(loader.drop_last), "timeout": loader.timeout or None,
            "iterable": True, "source": "sample" if loader.batch_size else "batch",
            "use_shared_memory": bool(workers) or None,
            "producer": "workers" if workers else "loop",
            "dataset": "iterable" if isinstance(loader.dataset, IterableDataset) else "map",
            "sharing_strategy": sharing_strategy() if workers else None,
            "start_method": start_method(loader),  # (without workers: how they would)
            "args": _script_args(loader), "dataset_name": dataset_name}


def _script_args(loader) -> list:
    """The arguments the script gave the DataLoader beyond those the config holds
    (LoaderConfig.args): shuffle, its own sampler or batch sampler, collate_fn,
    worker_init_fn, generator, timeout, multiprocessing_context (helper-39: a call without
    the script's generator=g changed its seeded shuffle's order)."""
    args = []
    own_batches = loader.batch_size is not None  # (the loader batches its sampler's indices)
    if own_batches and isinstance(loader.sampler, RandomSampler):
        args.append("shuffle=True")
    elif own_batches and not isinstance(loader.sampler, (SequentialSampler,
                                                          _InfiniteConstantSampler)):
        args.append(script_arg("sampler", loader.sampler))
    if not own_batches and loader.batch_sampler is not None:
        args.append(script_arg("batch_sampler", loader.batch_sampler))
    if loader.collate_fn not in (default_collate, default_convert):
        args.append(script_arg("collate_fn", loader.collate_fn))
    if loader.worker_init_fn is not None:
        args.append(script_arg("worker_init_fn", loader.worker_init_fn))
    if getattr(loader, "generator", None) is not None:  # (a seeded shuffle's order)
        args.append(script_arg("generator", loader.generator))
    if loader.timeout:
        args.append(f"timeout={loader.timeout!r}")
    if loader.multiprocessing_context is not None:
        args.append(script_arg("multiprocessing_context", loader.multiprocessing_context))
    return args


def _place_of(optimizer) -> str:
    for group in optimizer.param_groups:
        for p in group.get("params", ()):
            device = getattr(p, "device", None)
            if device is None:
                continue
            if device.type == "cuda":
                return f"CUDAPlace({device.index or 0})"
            return "CPUPlace" if device.type == "cpu" else f"{device.type}:{device.index or 0}"
    return "CPUPlace"


def _shape_or_none(item) -> Optional[Tuple[int, ...]]:
    return tuple(item.shape) if isinstance(item, torch.Tensor) else None


def _describe_inputs(inputs) -> tuple:
    """'float32[8, 4]' for each input tensor of a module call (at most 8)."""
    return tuple(f"{str(t.dtype).replace('torch.', '')}{list(t.shape)}"
                 for t in iter_tensors(inputs, _shape_or_none, limit=8))


def _train_watched(original, watched: ModelMode):
    """nn.Module.train, noting the mode the script puts its model in (eval() calls it)."""
    def train(module, mode=True):
        watched.training = bool(mode)
        return original(module, mode)
    return train
