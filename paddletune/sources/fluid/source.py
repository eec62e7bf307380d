"""The embedded runtime as a source: `runtime/` announces what it does on its event channels
(runtime/events.py) and knows nothing of paddletune; this source subscribes the probes to
them, passing the runtime's own records through (they carry every attribute a source's events
must have: sources/base.py), answers the session's questions from the runtime's FLAGS and
DataLoaders, and declares the knobs the playbook turns."""

from contextlib import contextmanager
from typing import Dict, List, Optional

import runtime
from runtime import events, overrides
from runtime.flags import FLAGS
from runtime.reader.loader import live_loaders

from ...profile.records import AppliedOverride, Knob, NoEffect, SourceInfo
from ..base import Source, Subscription

SPEED_TEST_FLAG = "FLAGS_reader_queue_speed_test_mode"
LOADER = "fluid.io.DataLoader.from_generator(..., {key}={{value}})"
FLAG_KNOBS = ("FLAGS_eager_delete_tensor_gb", "FLAGS_allocator_strategy",
              "FLAGS_fraction_of_cpu_memory_to_use", "FLAGS_fraction_of_gpu_memory_to_use",
              "FLAGS_cudnn_exhaustive_search", "FLAGS_enable_cublas_tensor_op_math")
# op attributes the runtime's kernels act on (use_cudnn is recorded, not acted on yet: the
# convolutions are im2col + a matmul)
ATTR_KNOBS = ()
STRATEGY_KNOBS = (("exec_strategy", "num_threads"),
                  ("exec_strategy", "num_iteration_per_drop_scope"),
                  ("build_strategy", "fuse_all_optimizer_ops"),
                  ("build_strategy", "fuse_elewise_add_act_ops"),
                  ("build_strategy", "enable_inplace"), ("build_strategy", "reduce_strategy"))
STRATEGY_CLASS = {"exec_strategy": "fluid.ExecutionStrategy",
                  "build_strategy": "fluid.BuildStrategy"}


# the one class of each event's payloads (Source.payload_type), where there is one
PAYLOAD_TYPES = {"step_end": events.StepRecord, "reader_pop": events.ReaderPop}


class FluidSource(Source):
    framework = "fluid"

    def begin(self):
        overrides.reset()  # the overrides event lists this job's own

    def info(self) -> SourceInfo:
        from ... import __version__
        return SourceInfo(self.framework, f"paddletune runtime {__version__} (Fluid 1.8 API)",
                          "Executor.run: each run of a program that is not a startup program "
                          "is a step", tuple(self.knobs()))

    def knobs(self) -> List[Knob]:
        out = [Knob(f"reader.{key}", f"DataLoader {key}", None, LOADER.format(key=key))
               for key in ("num_workers", "capacity", "use_double_buffer", "batch_size")]
        out += [Knob(f"flag.{flag}", flag, _flag_value(flag),
                     f"fluid.set_flags({{{{'{flag}': {{value}}}}}})") for flag in FLAG_KNOBS
                if FLAGS.flag(flag).implemented]
        out += [Knob(f"op_attr.{attr}", attr, None, f"layers.*(..., {attr}={{value}})")
                for attr in ATTR_KNOBS]
        out.append(Knob("threads.blas", "BLAS threads (OPENBLAS_NUM_THREADS / "
                        "OMP_NUM_THREADS)", self.blas_threads(),
                        "blas.set_blas_threads({value})"))
        out += [Knob(f"{section}.{key}", f"{STRATEGY_CLASS[section]}().{key}", None,
                     f"{section}.{key} = {{value}}") for section, key in STRATEGY_KNOBS]
        return out

    def subscribe(self, event: str, fn) -> Subscription:
        return Subscription(events.subscribe(event, fn).close)

    def subscribers(self, event: str) -> int:
        return events.subscribers(event)

    def payload_type(self, event: str) -> Optional[type]:
        return PAYLOAD_TYPES.get(event)

    def may_send(self, event: str) -> bool:
        """The runtime's DataLoaders send a push and a pop per batch, never the two as one
        reader_batch (an eager framework's loop-made batch)."""
        return event != "reader_batch"

    def blas_threads(self) -> Optional[int]:
        from runtime import blas
        return _safe(blas.get_blas_threads)

    def in_native_callback(self, frame) -> bool:
        """Inside the runtime's NumPy allocator callbacks (memory/numpy_hook.py), which NumPy
        calls from C whenever a pooled array is made or freed."""
        from runtime.memory import numpy_hook
        codes = numpy_hook.CALLBACK_CODES
        while frame is not None:
            if frame.f_code in codes:
                return True
            frame = frame.f_back
        return False

    def queue_sizes(self) -> Dict[int, int]:
        return {ld.id: ld.queue.size() for ld in live_loaders()}

    def speed_test_mode(self) -> bool:
        return bool(FLAGS.get("reader_queue_speed_test_mode"))

    def set_speed_test_mode(self, on: bool) -> bool:
        previous = self.speed_test_mode()
        runtime.set_flags({SPEED_TEST_FLAG: bool(on)})
        return previous

    def set_math_threads(self, n: int) -> Optional[int]:
        from runtime import blas
        return _safe(lambda: blas.set_blas_threads(n))

    def measure_producers_alone(self, batches: int) -> int:
        return sum(ld.measure_producer_alone(batches) for ld in live_loaders())

    @contextmanager
    def running(self, check_nan: bool = False, compat: bool = False,
                nan_continue: bool = False):
        if compat:
            runtime.compat.install()
        previous = runtime.get_flags(["FLAGS_check_nan_inf", "FLAGS_check_nan_inf_level"])
        if check_nan or nan_continue:
            runtime.set_flags({"FLAGS_check_nan_inf": True,
                               "FLAGS_check_nan_inf_level": 1 if nan_continue else 0})
        try:
            yield
        finally:
            runtime.set_flags(previous)

    def overrides(self) -> Optional[dict]:
        try:
            wanted = overrides.requested()
        except Exception:  # noqa: BLE001  (a bad value already failed the import)
            wanted = {}
        done = [AppliedOverride(a["section"], a["key"], a["value"], a["was"])
                for a in overrides.applied()]
        idle = overrides.skipped() + (overrides.unreached() if wanted else [])
        no_effect = [NoEffect(e["section"], e["key"], e["value"], e.get("code", "other"),
                              e["why"]) for e in idle]
        if not (wanted or done or no_effect):
            return None
        return {"env": overrides.ENV, "requested": wanted, "applied": done,
                "skipped": no_effect}


def _flag_value(flag):
    return _safe(lambda: FLAGS.get(flag[len("FLAGS_"):]))


def _safe(fn):
    try:
        value = fn()
    except Exception:  # noqa: BLE001  (a knob's value is never worth a failed job)
        return None
    return value if isinstance(value, (bool, int, float, str)) or value is None else str(value)
