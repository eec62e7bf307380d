"""What a source is: the one way measurements of a framework reach paddletune's probes.

A source announces what the job does as events on named channels (the probes subscribe),
answers a few questions the probes and the session ask while the job runs (the DataLoader
queues' sizes, the speed-test and NaN-check switches, what the overrides changed), and
declares itself for the profile's header: its framework, how it detects steps, its knobs
(their names in that framework and their values; only settings the framework acts on are
knobs, so advice about a flag it ignores stays silent) and, through its code writer
(paddletune/sources/code.py), how a change is written in that framework's code.

Events and the attributes a payload must have (the embedded runtime's records,
runtime/events.py, are the reference; other sources build objects with the same attributes):

  step_end      executor_id, program_id, step, t_begin, t_end, feed_s, compute_s, fetch_s,
                read_s, batch_size, n_ops, feed_bytes, fetch_bytes, fetch_names, feed_names,
                place, is_startup (perf_counter seconds)
  op_end        program_id, step, index, type, role, t_begin, t_end, timing
  compile       program_id, compile_s, program (with global_block().ops: type, attrs,
                inputs, outputs), or None
  nan_inf       a dict: op_type, op_index, output, inputs, n_nan, n_inf, step
  reader_state  loader_id, pass_no, t, what (start|end|reset|error), config (dict with
                records.LoaderConfig's fields), detail, batches
  reader_push   loader_id, pass_no, index, worker, t, produce_s, put_wait_s, size, capacity,
                nbytes, shapes, cpu_s
  reader_pop    loader_id, pass_no, index, t, wait_s, size, capacity, speed_test, copy_s,
                and optionally handover_s (of wait_s, the time taking the batch from a
                worker process once it was made: PyTorch's storage hand-over; 0 if absent)
  reader_batch  a batch the training loop made itself and took at once (PyTorch's
                num_workers=0): its reader_push and then its reader_pop in one payload, with
                the attributes of both (t and size the pop's; worker -1, put_wait_s 0.0,
                speed_test False, copy_s 0.0). Sent instead of the two only while every
                subscriber of reader_push and reader_pop subscribes to it too (COMBINED)
  reader_solo   loader_id, pass_no, t, batches, produce_s, cpu_s (None: unknown): a producer
                thread's batches made while the training loop only waited for them
                (measure_producers_alone; batches 0: none was)
  memory_step   executor_id, program_id, step, place, strategy, capacity, allocated,
                reserved, step_peak, peak_allocated, peak_reserved, phase_peaks, requests,
                system_allocs, system_alloc_s, by_tag, by_tag_at_peak, cached_free,
                fragmentation, batch_size, gc, inplace
  memory_trace  program_id, step, batch_size, gc, inplace, persistable_bytes, ops,
                last_value_use, inplace_candidates
  memory_oom    a dict of records.MemoryOom's fields (v1 names: requested, allocated, ...)
  sched_step    executor_id, program_id, step, num_places, num_threads, reduce_strategy,
                wall_s, busy_s, ops_run, sched_s, ready_max, ready_mean, concurrency,
                combine_s, place_s, num_iteration_per_drop_scope, dropped, fused
  drop_scope    executor_id, program_id, step, t, wall_s, held_bytes, variables
  scope         a records.CompiledEvent, DistributedEvent or ProbeUnavailableEvent (its t_s
                is replaced by the session's clock): what limits what the profile covers (a
                compiled graph, one rank of a distributed job, a probe the source could not
                serve, e.g. --ops when the script holds paddle's one profiler)
  model         a records.ModelEvent (its t_s replaced likewise): what the model is made
                of, seen in its first training step
  device_time   a dict of records.DeviceTimeEvent's fields (not t_s): the training steps
                as the GPU ran them, timed with CUDA events, totals so far
  gc_pause      t, pause_s, generation, collected: a collection of Python's garbage
                collector on the training thread of 5 ms or more (sources/eager/gc_clock.py)
  gc_heap       t, objects, read_s, full: the objects the collector tracks, counted on the
                training thread at the first step's end and after full collections
"""

from contextlib import contextmanager
from typing import Callable, Dict, List, Optional

from ..profile.records import AppliedOverride, Knob, NoEffect, SourceInfo

EVENTS = ("step_end", "op_end", "compile", "nan_inf", "reader_state", "reader_push",
          "reader_pop", "reader_batch", "reader_solo", "memory_step", "memory_trace",
          "memory_oom", "sched_step", "drop_scope", "scope", "model", "device_time",
          "gc_pause", "gc_heap")
# A combined event -> the events it stands for, in order: a source may send it instead of
# them only while every subscriber of theirs takes it too (a subscriber of the parts alone
# gets the parts)
COMBINED = {"reader_batch": ("reader_push", "reader_pop")}


class Subscription:
    """Returned by Source.subscribe(); close() unsubscribes (idempotent)."""

    def __init__(self, close: Callable[[], None]):
        self._close = close

    def close(self):
        if self._close is not None:
            self._close()
            self._close = None


class Source:
    """The interface; a framework's source implements what its framework can measure. The
    defaults describe a framework that exposes nothing beyond steps."""

    framework = "none"

    def begin(self):
        """A job starts being measured (forget what an earlier job in this process left)."""

    def info(self) -> SourceInfo:
        """The header's declaration: framework, version, how steps are detected, knobs."""
        return SourceInfo(self.framework, None, None, tuple(self.knobs()))

    def knobs(self) -> List[Knob]:
        return []

    def subscribe(self, event: str, fn: Callable) -> Subscription:
        raise NotImplementedError

    def subscribers(self, event: str) -> int:
        """How many callbacks listen to `event` (a probe that is the only listener of an
        event may leave it unsubscribed when it has nothing to do)."""
        return 0

    def payload_type(self, event: str) -> Optional[type]:
        """The class of every payload this source sends on `event` (None: not one class, or
        not said): a probe may queue such events as they are, for a profile writer to turn
        into records later (ProfileWriter.tap), where it knows them by their class."""
        return None

    def may_send(self, event: str) -> bool:
        """Whether `event` can come at all in this process (False: a probe needs no
        callback on the training thread for it, nor for what it only pairs with it)."""
        return True

    def blas_threads(self) -> Optional[int]:
        """The thread count of the BLAS library the host math runs on (None: unknown)."""
        return None

    def queue_sizes(self) -> Dict[int, int]:
        """{loader id: batches queued now} of the DataLoaders running now."""
        return {}

    def speed_test_mode(self) -> bool:
        """Whether the no-data ceiling mode is on (a batch re-read instead of popped)."""
        return False

    def set_speed_test_mode(self, on: bool) -> bool:
        """Turn the no-data ceiling mode on or off; the previous setting."""
        raise NotImplementedError(f"{self.framework}: no speed-test mode")

    def set_math_threads(self, n: int) -> Optional[int]:
        """Give the trainer's math (BLAS, intra-op) threads `n` threads now; the count it
        had (None: the framework cannot be told, nothing changed)."""
        return None

    def measure_producers_alone(self, batches: int) -> int:
        """Ask each running DataLoader whose producer is a thread of the trainer to take its
        queued batches and `batches` more at its next batch, the training loop waiting
        meanwhile, and to announce what the thread spent on those made alone (`reader_solo`,
        once the batches taken ahead are handed to the loop, in order, or its pass ends).
        The loaders asked, each announcing once (0: none could, or the framework cannot)."""
        return 0

    @contextmanager
    def running(self, check_nan: bool = False, compat: bool = False,
                nan_continue: bool = False):
        """The block the job runs in, with NaN/Inf checking (stopping at the first, or with
        `nan_continue` reporting each and going on) and the framework's compatibility
        switches as asked, restored after."""
        yield

    def own_cost(self) -> Optional[float]:
        """Seconds the source's own hooks spent on the training thread so far, beside the
        framework's work (the probes' callbacks run there included); None when it does not
        measure them. The session records it as the "hooks" overhead."""
        return None

    def overrides(self) -> Optional[dict]:
        """What the overrides variable asked for and did: {"env", "requested", "applied"
        [AppliedOverride], "skipped" [NoEffect]}, None when nothing was asked or applied."""
        return None

    def in_native_callback(self, frame) -> bool:
        """Whether `frame` (where a signal handler was called) runs inside a callback native
        code made into Python: an exception raised there is dropped, not propagated."""
        return False

    def is_oom(self, exc: BaseException) -> bool:
        """Whether an exception the script raised means out of memory."""
        from ..oom import is_oom
        return is_oom(exc)

    def out_of_memory(self, exc: BaseException) -> None:
        """The script ended with out of memory (`exc`, is_oom): a source whose framework
        knows its pool's figures sends them as a memory_oom event (the embedded runtime's
        pool sends its own as the request fails)."""


__all__ = ["AppliedOverride", "COMBINED", "EVENTS", "Knob", "NoEffect", "Source", "Subscription"]
