"""The base of an eager framework's source: the bus, the step timer, the DataLoader passes and
the overrides, with the framework's hooks installed for the time the job runs (`running`).
A framework's source (sources/torch, sources/paddle) implements `_hooks_for(check_nan,
nan_continue)`, returning its hooks: their `install()` returns a function that removes what it
installed, and their `own_s` adds up the seconds they spent on the training thread beside the
framework's own work (`own_cost`). It declares itself too (`info`, `knobs`, `blas_threads`)."""

import time
from contextlib import contextmanager
from typing import Callable, Dict, Optional

from ..base import Source, Subscription
from .bus import Bus, ReaderBatch, ReaderPop, StepEnd
from .loaders import LoaderTracker
from .overrides import Overrides
from .steps import StepTimer


# what a source sends only where a CUDA device is (Source.may_send)
CUDA_EVENTS = frozenset(("memory_step", "memory_oom", "device_time"))
# the one class of each event's payloads (Source.payload_type), where there is one
PAYLOAD_TYPES = {"step_end": StepEnd, "reader_pop": ReaderPop, "reader_batch": ReaderBatch}


class EagerSource(Source):
    framework = "eager"

    def __init__(self):
        self.bus = Bus()
        self.timer = StepTimer(self.bus)
        self.loaders = LoaderTracker(self.bus, self.timer, self.shape_of, self.nbytes_of,
                                     self.describe_flat)
        self.overrides_state: Optional[Overrides] = None
        self._hooks = None  # the running job's hooks (own_cost)

    # --- what the framework's tensors look like (overridden) -------------------------------
    @staticmethod
    def shape_of(item):
        """The shape of a tensor of the framework (None: not one)."""
        return None

    @staticmethod
    def nbytes_of(item, shape=None) -> int:
        """The bytes of a tensor of the framework (0: not one); `shape` its shape when the
        caller read it already."""
        return 0

    describe_flat: Optional[Callable] = None  # a framework's (shapes, bytes) of a flat batch
    # (a list or tuple) at once, None when an item is not a plain tensor (then each item is
    # read through shape_of and nbytes_of): every batch is described, on the training thread

    # --- Source -------------------------------------------------------------------------
    def begin(self):
        """Forget an earlier job; read the overrides (OverrideError for a bad value)."""
        self.timer.reset()
        self.overrides_state = Overrides(self.framework)

    def subscribe(self, event: str, fn: Callable) -> Subscription:
        return self.bus.subscribe(event, fn)

    def payload_type(self, event: str) -> Optional[type]:
        return PAYLOAD_TYPES.get(event)

    def subscribers(self, event: str) -> int:
        return self.bus.subscribers(event)

    def queue_sizes(self) -> Dict[int, int]:
        return self.loaders.queue_sizes()

    def speed_test_mode(self) -> bool:
        return self.loaders.speed_test

    def measure_producers_alone(self, batches: int) -> int:
        return self.loaders.measure_alone(batches)

    def set_speed_test_mode(self, on: bool) -> bool:
        previous, self.loaders.speed_test = self.loaders.speed_test, bool(on)
        return previous

    @contextmanager
    def running(self, check_nan: bool = False, compat: bool = False,
                nan_continue: bool = False):
        if self.overrides_state is None:
            self.begin()
        self.timer.reset(time.perf_counter())
        self._hooks = self._hooks_for(check_nan or nan_continue, nan_continue)
        remove = self._hooks.install()
        try:
            yield
        finally:
            try:
                self.loaders.end_all("end", "the job ended")
            finally:
                remove()

    def _hooks_for(self, check_nan: bool, nan_continue: bool):
        """The framework's hooks for a job (not installed yet)."""
        raise NotImplementedError

    def own_cost(self) -> Optional[float]:
        """The hooks' own time so far (their own_s)."""
        return self._hooks.own_s if self._hooks is not None else None

    def overrides(self) -> Optional[dict]:
        return None if self.overrides_state is None else self.overrides_state.report()
