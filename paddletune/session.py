"""The profiling session: run a training script exactly as `python SCRIPT ARGS` would, with the
probes subscribed, and leave a readable profile however the script ends.

`run(options)` returns an `Outcome`: the script's exit status as Python would have set it, how
it ended, and the profile path. The CLI renders the report and exits with that status (an
interrupted job re-raises SIGINT, as Python does). Nothing here prints except the script's
own traceback (printed as Python would print it) and one-line warnings.
"""

import builtins
import importlib.machinery
import os
import re
import runpy
import signal
import sys
import threading
import time
import tokenize
import traceback
import types
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable, List, Optional

from . import profile as prof
from .env import collect_env
from .probes.base import Clock
from .profile.records import (SCOPE_EVENTS, DeviceTimeEvent, ErrorEvent, ExitEvent,
                              GcHeapEvent, GcPauseEvent, ModelEvent, NanInfEvent,
                              OverridesEvent, ProbeRecord, ProbeUnavailableEvent,
                              ProducerSoloEvent, SettingsEvent, SpeedTestEvent, StepLimitEvent)
from .oom import oom_cause
from .open_files import flush_at_exit
from .warn_frames import __file__ as WARN_FRAMES, script_frames
from .profile.paths import output_problem
from .profile.schema import SchemaError, decode
from .probes.memory import MemoryProbe
from .probes.scheduler import SchedulerProbe
from .probes.nvml import NvmlProbe
from .probes.ops import OpsProbe
from .probes.reader import ReaderProbe
from .probes.step import StepProbe
from .probes.system import SystemProbe
from .probes.workers import BUDGET as WORKER_BUDGET, WorkerProbe


class SessionError(Exception):
    """The session cannot start (bad script, bad output path): nothing was run."""


class StepLimitReached(BaseException):
    """Raised inside Executor.run after the --steps-th training step, or the first to end
    --duration after the first one ended: stops the job cleanly. Args: (steps done, which
    limit). A BaseException, so the script's own `except Exception` does not swallow it."""


class Terminated(BaseException):
    """SIGTERM (or SIGHUP: the terminal or ssh session closed) arrived: unwind the script so
    the profile is finished, then exit 128 + the signal's number (143, 129), as a shell
    reports a process those signals ended. Args: (signal number,)."""


STOP_SIGNALS = tuple(s for s in (getattr(signal, "SIGTERM", None), getattr(signal, "SIGHUP", None))
                     if s is not None)


INTERVAL_S = 0.5  # --interval's default: the samplers' time between samples

@dataclass
class Options:
    target: str  # script path, or module name with module=True
    args: List[str] = field(default_factory=list)
    module: bool = False
    out: Optional[str] = None
    steps: Optional[int] = None
    warmup: Optional[int] = None
    duration_s: Optional[float] = None  # --duration: training time after the first step
    ops: bool = False
    interval_s: float = INTERVAL_S
    fluid_compat: bool = False
    check_nan: bool = False
    speed_test: Optional[int] = None  # steps per speed-test window (None: no speed test)
    stdout_to_stderr: bool = False  # keep stdout clean for --json
    live: bool = False  # --live: the dashboard follows the profile (flushed more often)
    total_steps: Optional[int] = None  # --total-steps: the dashboard's ETA (else --steps)
    head_steps: Optional[int] = None  # steps per program recorded in full (None: the default)
    framework: str = "auto"  # the source the job is measured through (auto: the script's
    # imports tell: sources/detect.py)
    check_nan_continue: bool = False  # --check-nan-continue: record each NaN/Inf, go on
    min_steps: Optional[int] = None  # --duration ends the job only after this many steps
    # (a tuning trial's: trialrun --min-steps)


@dataclass
class Outcome:
    status: int  # the exit status `python SCRIPT` would have had
    reason: str  # returned | exit | exception | interrupted | terminated | step_limit
    path: Path
    message: Optional[str] = None
    write_error: Optional[str] = None  # the profile could not be written (disk full, ...)


SPEED_TEST_START = 10  # training steps before the speed test's baseline window (or --warmup)


def speed_test_start(options: Options) -> int:
    """The training step at which the speed test's baseline window begins."""
    return options.warmup if options.warmup is not None else SPEED_TEST_START


def prepare(options: Options) -> Path:
    """Check the target and the output path before anything runs; SessionError if bad."""
    if options.speed_test is not None:
        needed = speed_test_start(options) + 2 * options.speed_test
        if options.steps is not None and options.steps < needed:
            raise SessionError(f"--speed-test {options.speed_test} needs {needed} training "
                               f"steps ({speed_test_start(options)} warm-up + "
                               f"{options.speed_test} baseline + {options.speed_test} with "
                               f"the queue never popped), but --steps is {options.steps}: "
                               f"raise --steps or lower the window")
    if options.module:
        if not options.target or options.target.startswith("-"):
            raise SessionError(f"-m needs a module name, got {options.target!r}")
    else:
        _check_script(Path(options.target))
    options.framework = _framework(options)
    try:
        path = Path(options.out) if options.out else prof.default_path(
            options.target.rsplit(".", 1)[-1] if options.module else options.target)
    except OSError as err:
        raise SessionError(f"cannot create the profile in ./{prof.RUNS_DIR}/: "
                           f"{err.strerror or err}; pass --out with a writable location") from None
    path = Path(os.path.abspath(path))  # a script that chdir()s still writes here (a
    # symbolic link at the path is not followed: the profile replaces it when complete)
    problem = output_problem(path, "the profile", "run.jsonl")
    if problem:
        raise SessionError(problem)
    return path


def _framework(options: Options) -> str:
    """The framework the job trains with (SessionError: unknown, or not installed)."""
    from .sources.detect import DetectError, resolve
    try:
        return resolve(options.framework, options.target, options.module)
    except DetectError as err:
        raise SessionError(str(err)) from None


def _start_source(framework: str):
    """The framework's source, begun; SessionError when it cannot measure this job (an
    unsupported version, a bad PADDLETUNE_OVERRIDES value)."""
    from .sources import source_for
    try:
        source = source_for(framework)  # imports the framework (its FLAGS read here)
        source.begin()  # the overrides event lists this run's own
    except (ImportError, RuntimeError, ValueError) as err:
        raise SessionError(f"{framework}: {err}") from None
    return source


def _check_script(script: Path):
    if not script.exists():
        raise SessionError(f"can't open file '{script}': no such file")
    if script.is_dir():
        raise SessionError(f"'{script}' is a directory; give the training script (.py)")
    try:
        with open(script, "rb") as f:
            head = f.read(4096)
    except OSError as err:
        raise SessionError(f"can't open file '{script}': {err.strerror or err}") from None
    if b"\0" in head:
        raise SessionError(f"'{script}' is not a Python script (it looks binary)")


LIVE_FLUSH_S = 0.2  # --live: the profile is flushed this often (0.5 s otherwise)
MAX_NAN_EVENTS = 100  # NaN/Inf outputs recorded one by one; the rest are counted


@dataclass
class _NanCount:
    """The NaN/Inf outputs found so far, and the steps they were found in (a set of step
    numbers: one per training step at most)."""

    found: int = 0
    steps: set = field(default_factory=set)


def run(options: Options, path: Optional[Path] = None, on_stop=None, on_kill=None) -> Outcome:
    """Profile the target. The profile at the returned path is complete and readable.
    `on_stop(submit)`, when given, runs once the probes stopped, before the exit record
    and the summary (--live: stop the dashboard, record its cost); `on_kill()` just before
    a second Ctrl-C ends the process at once (--live: give the terminal back)."""
    path = path or prepare(options)
    if options.framework == "auto":
        options.framework = _framework(options)
    source = _start_source(options.framework)
    clock, t0_unix = Clock(), time.time()
    try:
        writer = prof.ProfileWriter(prof.writing_path(path),
                                    LIVE_FLUSH_S if options.live else 0.5, clock=clock.now,
                                    head_steps=options.head_steps, final=path)
    except OSError as err:
        raise SessionError(f"cannot write the profile {path}: {err.strerror or err}") from None
    session = _Session(options, writer, clock, source, on_kill)
    writer.submit(prof.header_record(_command(options), _options_record(options),
                                     _env(source, session.flags_at_start), t0_unix,
                                     source.info()))
    with session.probes_running():
        status, reason, message = session.execute()
    if on_stop is not None:
        _second_ctrl_c_kills()
        on_stop(writer.submit)
    outcome = Outcome(status, reason, path, message)
    session.finish(outcome)
    outcome.write_error = writer.failed
    if writer.failed:
        outcome.path = writer.path  # what was written (an earlier profile at `path` is kept)
    return outcome


def _env(source, flags: Optional[dict]) -> dict:
    """The machine and interpreter; the settings in force are the source's own where it
    declares them (`flags`, source_flags' as the job starts: a Paddle 3 job's FLAGS, a PyTorch
    job's thread counts)."""
    env = collect_env()
    if getattr(source, "flags", None) is not None:
        env["flags"] = flags
    return env


def source_flags(source) -> Optional[dict]:
    """The settings the source declares, as they are now (None: it has none, or reading
    them failed: a setting's value is never worth a failed job)."""
    flags = getattr(source, "flags", None)
    try:
        return flags() if flags is not None else None
    except Exception:  # noqa: BLE001
        return None


def die_if_interrupted(outcome: Outcome):
    """Leave as Python would after a Ctrl-C in the script: killed by SIGINT (a caller exits
    with `outcome.status` otherwise)."""
    if outcome.reason != "interrupted":
        return
    sys.stdout.flush()
    sys.stderr.flush()
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGINT)


def session_probes(sink, clock, source, interval_s=INTERVAL_S, ops=False) -> list:
    """The probes a profiling session runs (not started), in the order their step callbacks
    run: the step probe first, the per-op timer only with --ops. At the default interval the
    workers' samples keep within their budget (workers.BUDGET); an interval asked for is
    kept."""
    probes = [StepProbe(sink, clock, source)]
    if ops:
        probes.append(OpsProbe(sink, clock, source))
    return probes + [ReaderProbe(sink, clock, interval_s, source=source),
                     MemoryProbe(sink, clock, source), SchedulerProbe(sink, clock, source),
                     WorkerProbe(sink, clock, interval_s, source,
                                 WORKER_BUDGET if interval_s == INTERVAL_S else None),
                     SystemProbe(sink, clock, interval_s, source),
                     NvmlProbe(sink, clock, interval_s, source)]


class StepCounter:
    """The session's own step_end subscriber, last after the probes': counts the training
    steps (`n`), calls `first_step` as the first one ends, ends the job at the step limit
    (StepLimitReached: --steps, --duration from the first step's end), and every 64 steps
    lets the profile writer catch up from here (`keep_up`: the probes queue the steps through
    its tap, so only this sees each step on the training thread). With `min_steps`, the
    duration ends the job only once that many steps ran (a slow job's tuning trial)."""

    def __init__(self, limit: Optional[int], duration_s: Optional[float],
                 keep_up: Callable[[], None], first_step: Callable[[], None],
                 min_steps: Optional[int] = None):
        self.limit, self.duration_s, self.min_steps = limit, duration_s, min_steps or 0
        self.keep_up, self.first_step = keep_up, first_step
        self.n = 0
        self.first_step_end: Optional[float] = None  # time.monotonic() at its end

    def count(self, record):
        if record.is_startup:
            return
        n = self.n = self.n + 1
        if not n & 63:
            self.keep_up()
        elif n == 1:
            self.first_step()
        limit = self.limit
        if limit is not None and n >= limit:
            raise StepLimitReached(limit, "--steps")
        duration = self.duration_s
        if duration is not None:
            now = time.monotonic()
            if self.first_step_end is None:
                self.first_step_end = now
            elif now - self.first_step_end >= duration and n >= self.min_steps:
                raise StepLimitReached(n, f"--duration {duration:g}s")


class _Session:
    def __init__(self, options, writer, clock, source, on_kill=None):
        self.options, self.writer, self.clock, self.source = options, writer, clock, source
        self.on_kill, self.owner = on_kill, os.getpid()
        self.probes = session_probes(writer.submit, clock, source, options.interval_s,
                                     options.ops)
        self.step_counter = StepCounter(options.steps, options.duration_s, writer.keep_up,
                                        self._settings_changed, options.min_steps)
        self.nan = _NanCount()
        self.flags_at_start = source_flags(source)  # (what the header lists)
        self.speed_test = _SpeedTest(self, options) if options.speed_test else None

    def event(self, cls, **fields):
        """Send one event record of class `cls` (records.py), stamped now."""
        self.writer.submit(cls(t_s=self.clock.now(), **fields))

    @contextmanager
    def probes_running(self):
        subs = []
        for probe in self.probes:
            probe.start()
            if not probe.available:
                self.event(ProbeUnavailableEvent, probe=probe.name, message=probe.reason)
        subs.append(self.source.subscribe("nan_inf", self._on_nan_inf))
        subs.append(self.source.subscribe("scope", self._on_scope))
        subs.append(self.source.subscribe("model", self._on_model))
        subs.append(self.source.subscribe("device_time", self._on_device_time))
        subs.append(self.source.subscribe("gc_pause", self._on_gc_pause))
        subs.append(self.source.subscribe("gc_heap", self._on_gc_heap))
        if self.speed_test is not None:
            subs.append(self.source.subscribe("step_end", self.speed_test.on_step))
            subs.append(self.source.subscribe("reader_solo", self.speed_test.on_solo))
        # (last: after the probes)
        subs.append(self.source.subscribe("step_end", self.step_counter.count))
        try:
            with self.source.running(self.options.check_nan, self.options.fluid_compat,
                                     self.options.check_nan_continue):
                yield
        finally:
            if self.speed_test is not None:
                self.speed_test.finish()
            for sub in subs:
                sub.close()
            for probe in self.probes:
                probe.stop()
            self._hooks_record()

    def _hooks_record(self):
        """The source's hooks' own time (Source.own_cost) as the probe record "hooks" (in the
        step): the probes' records count only their own callbacks, which the hooks of a
        PyTorch or Paddle job call, and the hooks cost more than those."""
        cost = self.source.own_cost()
        if cost is not None:
            self.writer.submit(ProbeRecord("hooks", True, None, cost, in_step=True))

    def _on_nan_inf(self, details):
        """One NaN/Inf output: recorded in full up to MAX_NAN_EVENTS (--check-nan-continue
        may find one in every op of every step once the weights are NaN), then counted."""
        nan = self.nan
        nan.found += 1
        nan.steps.add(details.get("step"))
        if nan.found > MAX_NAN_EVENTS:
            return
        message = (f"op {details.get('op_type')} (#{details.get('op_index')}) produced "
                   f"{details.get('n_nan')} NaN and {details.get('n_inf')} Inf in "
                   f"{details.get('output')!r} at step {details.get('step')}")
        try:
            record = decode(NanInfEvent, {"t_s": self.clock.now(), **details, "message": message})
        except SchemaError:
            record = NanInfEvent(self.clock.now(), message=message)
        self.writer.submit(record)

    def _on_model(self, record):
        """What the model is made of (records.ModelEvent), stamped now."""
        if isinstance(record, ModelEvent):
            self.writer.submit(replace(record, t_s=self.clock.now()))

    def _on_device_time(self, totals: dict):
        """The steps as the GPU ran them so far (records.DeviceTimeEvent's fields)."""
        try:
            record = decode(DeviceTimeEvent, {"t_s": self.clock.now(), **totals})
        except SchemaError:
            return
        self.writer.submit(record)

    def _on_gc_pause(self, pause):
        """A pause of Python's garbage collector on the training thread (a GcPause)."""
        self.writer.submit(GcPauseEvent(self.clock.rel(pause.t), pause.pause_s,
                                        pause.generation, pause.collected, pause.more))

    def _on_gc_heap(self, heap):
        """The objects Python's garbage collector tracked, counted on the training thread (a
        GcHeap)."""
        self.writer.submit(GcHeapEvent(self.clock.rel(heap.t), heap.objects, heap.read_s,
                                       heap.full))

    def _on_scope(self, record):
        """What limits what the profile covers (a compiled model, one rank of many, a probe
        the source could not serve), as the source recorded it, stamped now."""
        if isinstance(record, SCOPE_EVENTS + (ProbeUnavailableEvent,)):
            self.writer.submit(replace(record, t_s=self.clock.now()))

    def _nan_totals(self):
        """After a --check-nan-continue run that found more than MAX_NAN_EVENTS: one record
        of what was only counted."""
        nan = self.nan
        if nan.found <= MAX_NAN_EVENTS:
            return
        steps = sorted(s for s in nan.steps if isinstance(s, int))
        more = nan.found - MAX_NAN_EVENTS
        self.event(NanInfEvent, more=more, steps_with=len(steps),
                   last_step=steps[-1] if steps else None,
                   message=f"{more} more NaN/Inf outputs after the first {MAX_NAN_EVENTS}, "
                           f"counted only; {len(steps)} steps had NaN/Inf"
                           + (f" (steps {steps[0]} to {steps[-1]})" if steps else ""))

    def _settings_changed(self):
        """The settings the script changed before its first training step ended (a
        SettingsEvent: loading the profile puts them in env.flags)."""
        before, now = self.flags_at_start, source_flags(self.source)
        if before is None or now is None:
            return
        changed = {k: v for k, v in now.items() if k not in before or before[k] != v}
        if changed:
            self.event(SettingsEvent, flags=changed, message=(
                "the job set " + ", ".join(f"{k}={v!r} (was {before.get(k)!r})"
                                           for k, v in changed.items())
                + " before its first training step ended"))

    def execute(self):
        """Run the target like Python; returns (status, reason, message). A process the
        script forked that comes back here (its sys.exit, an exception) ends as Python would
        end it, without touching the profile: the job's own process writes it."""
        owner = os.getpid()
        flush_at_exit()  # (before the script's exit handlers register: it runs after them)
        with _as_main(self.options), _stop_signals_raise(self.source, self.seal), \
                script_frames():
            try:
                _run_target(self.options)
                outcome = 0, "returned", None
            except SystemExit as exc:
                outcome = _exit_status(exc)
            except StepLimitReached as exc:
                steps, which = exc.args
                outcome = 0, "step_limit", None
                if os.getpid() == owner:
                    self.event(StepLimitEvent, steps=steps,
                               message=f"stopped after {steps} training steps ({which})")
            except Terminated as exc:
                name = signal.Signals(exc.args[0]).name
                outcome = 128 + exc.args[0], "terminated", f"terminated by {name}"
            except KeyboardInterrupt:
                _second_ctrl_c_kills()  # the script's cleanup (a DataLoader's) may run in a
                _print_script_traceback(*sys.exc_info())  # finalizer, which drops exceptions
                outcome = 130, "interrupted", "interrupted (Ctrl-C)"
            except BaseException as exc:  # the script's own error: print it as Python would
                _print_script_traceback(*sys.exc_info())
                if os.getpid() == owner:
                    oom = self.source.is_oom(exc)
                    if oom:
                        self._pool_at_oom(exc)
                    self.event(ErrorEvent, exception=type(exc).__name__,
                               message=_first_line(exc), where=_where(exc),
                               oom=oom)
                outcome = 1, "exception", f"{type(exc).__name__}: {_first_line(exc)}"
        if os.getpid() != owner:
            _end_forked_child(outcome[0])
        return outcome

    def _pool_at_oom(self, exc: BaseException):
        """The framework pool's figures at an out-of-memory error (Source.out_of_memory, given
        the framework's own error where the script wrapped it: oom.oom_cause), never an error
        of its own: the script's is the one to report."""
        try:
            self.source.out_of_memory(oom_cause(exc) or exc)
        except Exception:  # noqa: BLE001  (a device that failed may fail the query too)
            pass

    def seal(self):
        """A second Ctrl-C ends the job at once: the profile gets what the probes hold back
        (Probe.sealed_records) and its exit record first (and --live its terminal back:
        on_kill)."""
        if os.getpid() != self.owner:  # a process the script forked: the profile is not its
            return
        if self.on_kill is not None:
            self.on_kill()
        held = []  # (what the probes hold back: the reader's queued passes and intervals)
        for probe in self.probes:
            try:
                held += probe.sealed_records()
            except Exception:  # noqa: BLE001  (a probe's bug never keeps the job alive)
                continue
        self.writer.seal(held + [ExitEvent(
            t_s=self.clock.now(), status=130, reason="interrupted",
            message="interrupted twice (Ctrl-C): ended at once, the script's cleanup cut short",
            train_steps=self.step_counter.n)])

    def finish(self, outcome: Outcome):
        """Write the exit event and the summary; a second Ctrl-C from here kills at once."""
        _second_ctrl_c_kills()
        self._overrides_event()
        self._nan_totals()
        self.event(ExitEvent, status=outcome.status, reason=outcome.reason,
                   message=outcome.message, train_steps=self.step_counter.n)
        self.writer.finish()

    def _overrides_event(self):
        """One "overrides" event: what the overrides variable asked for, what the source
        actually overrode (with the script's own value) and what had no effect (why)."""
        report = self.source.overrides()
        if report is None:
            return
        try:
            report["requested"] = decode(OverridesEvent, {"t_s": 0.0, "requested": report[
                "requested"]}).requested
        except SchemaError:
            report["requested"] = {}
        self.event(OverridesEvent, **report,
                   message=overrides_message(report["env"], report["applied"],
                                             report["skipped"]))


def overrides_message(env, applied, no_effect) -> str:
    """'ENV overrode a.b=1 (was 2); no effect: c.d=True (why)', each key once; a key some
    DataLoader applied is not listed as having no effect."""
    changes = ", ".join(f"{a.section}.{a.key}={a.value!r} (was {a.was!r})"
                        for a in applied) or "nothing"
    first_why = {}
    for e in no_effect:
        first_why.setdefault((e.section, e.key), e)
    done = {(a.section, a.key) for a in applied}
    idle = [f"{e.section}.{e.key}={e.value!r} ({e.why})"
            for key, e in first_why.items() if key not in done]
    return f"{env} overrode {changes}" + (f"; no effect: {'; '.join(idle)}" if idle else "")


def _run_target(options):
    if options.module:
        runpy.run_module(options.target, run_name="__main__", alter_sys=True)
    else:
        run_script(os.path.abspath(options.target))


def run_script(path: str):
    """Run the script at `path` (absolute) as `python path` does: in a fresh `__main__`
    module (sys.modules["__main__"] while it runs) whose __file__ is the absolute path,
    __package__ and __spec__ None and __loader__ a source loader; tracebacks name the
    absolute path, as Python's since 3.9."""
    with tokenize.open(path) as f:  # honours a coding: declaration, as Python does
        source = f.read()
    code = compile(source, path, "exec", dont_inherit=True)
    main = types.ModuleType("__main__")
    main.__dict__.update(__file__=path, __cached__=None, __package__=None, __spec__=None,
                         __loader__=importlib.machinery.SourceFileLoader("__main__", path),
                         __builtins__=builtins)
    saved = sys.modules.get("__main__")
    sys.modules["__main__"] = main
    try:
        exec(code, main.__dict__)
    finally:
        sys.modules["__main__"] = saved


@contextmanager
def _as_main(options):
    """sys.argv and sys.path[0] as `python SCRIPT ARGS` / `python -m MODULE ARGS` set them."""
    saved_argv, saved_path0 = sys.argv[:], sys.path[0] if sys.path else None
    saved_stdout = sys.stdout
    if options.module:
        sys.argv = [options.target] + list(options.args)  # run_module puts the file path here
        path0 = os.getcwd()
    else:
        sys.argv = [options.target] + list(options.args)
        path0 = str(Path(options.target).resolve().parent)
    if sys.path:
        sys.path[0] = path0
    else:
        sys.path.append(path0)
    if options.stdout_to_stderr:
        sys.stdout = sys.stderr
    try:
        yield
    finally:
        sys.stdout = saved_stdout
        sys.argv = saved_argv
        if saved_path0 is not None and sys.path:
            sys.path[0] = saved_path0


def _second_ctrl_c_kills():
    """From now on Ctrl-C ends the process at once (SIGINT's default action), as a user
    pressing it a second time means: the script's own cleanup after the first one (a
    DataLoader stopping its workers, often run by a finalizer, where a KeyboardInterrupt
    would be dropped) is not waited for."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_DFL)


def _end_forked_child(status: int):
    """A process the script forked returned into the session: exit as that process would
    have (its output flushed, `status`), leaving the profile to the job's own process, as
    multiprocessing ends its forked children."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(status)


SOLO_BATCHES = 8  # batches a producer thread makes alone at the speed test's end
SOLO_MAX_STEPS = 500  # the solo phase ends after this many steps whoever has not reported
SECOND_CTRL_C_S = 5.0  # a Ctrl-C this soon after the last one ends the job at once


RESEND_S = 0.005  # a signal that landed in a native callback is sent again this much later


def _resent(source, signum, frame) -> bool:
    """When the handler of `signum` runs inside a native callback (where the exception it
    would raise is dropped), send the signal again a moment later, once the callback has
    returned; True if it did."""
    if source is None or not source.in_native_callback(frame):
        return False
    resend = threading.Timer(RESEND_S, os.kill, (os.getpid(), signum))
    resend.daemon = True
    resend.start()
    return True


@contextmanager
def _stop_signals_raise(source=None, on_kill=None):
    """While the script runs (main thread only): SIGTERM and SIGHUP raise Terminated, so the
    session finishes the profile before the process ends; SIGINT raises KeyboardInterrupt as
    Python's own handler does, but a second one within SECOND_CTRL_C_S of the first ends the
    process at once by SIGINT. That second press may land in the script's cleanup after the
    first (a DataLoader's iterator is closed by a finalizer as the exception unwinds, and a
    KeyboardInterrupt raised in a finalizer is printed as "Exception ignored" and dropped).
    `on_kill()` runs just before that second one ends the process. A script that installed
    its own SIGINT handler keeps it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    last = [None]

    def stop(signum, frame):
        if _resent(source, signum, frame):
            return
        raise Terminated(signum)

    def interrupt(signum, frame):
        if _resent(source, signum, frame):
            return
        now = time.monotonic()
        if last[0] is not None and now - last[0] < SECOND_CTRL_C_S:
            _second_ctrl_c_kills()
            if on_kill is not None:
                on_kill()
            os.kill(os.getpid(), signal.SIGINT)
        last[0] = now
        raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, stop) for sig in STOP_SIGNALS}
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        previous[signal.SIGINT] = signal.signal(signal.SIGINT, interrupt)
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


class _SpeedTest:
    """--speed-test: after the warm-up, a baseline window of `window` training steps (steps of
    the first non-startup program to run), then a window with
    FLAGS_reader_queue_speed_test_mode on (the reader queue is peeked, never popped: the
    no-data ceiling), then the flag back off. A DataLoader whose producer is a thread of the
    trainer is then timed alone (the source's measure_producers_alone: at the next step the
    loop takes its queued batches and SOLO_BATCHES more at once, waiting while the thread
    makes them, then trains on them in order): a ProducerSoloEvent, and the "solo" phase
    covers the steps until each loader asked has reported (at most SOLO_MAX_STEPS). Last,
    where the job runs several math threads and the source can set them, the ceiling again
    with one ("one_thread": what the advice's fewer threads cost the step), then the count
    and the flag go back. Each switch is an event record {"kind": "speed_test", "phase":
    baseline|ceiling|solo|one_thread|done, "step", "cpu_s"}; the flag and the thread count
    are never left changed, whatever way the job ends."""

    def __init__(self, session, options):
        self.session, self.window = session, options.speed_test
        self.start = speed_test_start(options)
        self.steps = 0
        self.program = None  # the program of the first training step: the one counted
        self.phase = None
        self.previous = None  # the flag's setting before the speed test
        self.threads = None  # the math threads the one-thread window replaced
        self.phase_end = None  # the step that ends the solo or the one-thread phase
        self.solo_waiting = 0  # loaders asked to time their producer alone, not yet reported
        self.training_thread = None  # the thread that runs the counted steps

    def on_step(self, record):
        if record.is_startup:
            return
        if self.program is None:
            self.program = record.program_id
            self.training_thread = threading.get_ident()
        if record.program_id != self.program:
            return  # an evaluation program between training steps: not a training step
        self.steps += 1
        if self.steps == self.start:
            self._switch("baseline", "speed test: baseline window "
                         f"({self.window} steps, reader queue popped as usual)")
        elif self.steps == self.start + self.window:
            self.previous = self.session.source.set_speed_test_mode(True)
            self._switch("ceiling", f"speed test: the no-data ceiling mode on for "
                         f"{self.window} steps (the same batch is re-read instead of popped)")
        elif self.phase == "ceiling" and self.steps == self.start + 2 * self.window:
            self._solo()
        elif self.phase == "solo":
            if self.solo_waiting <= 0:
                self._one_thread("speed test: done")
            elif self.steps >= self.phase_end:
                self._one_thread(f"speed test: done ({self.solo_waiting} DataLoader(s) asked "
                                 f"to time their producer alone did not report)")
        elif self.phase == "one_thread" and self.steps >= self.phase_end:
            self._restore()
            self._switch("done", "speed test: done; the math threads and the flag back")

    def on_solo(self, r):
        """A loader's report of its producer thread timed alone (the source's reader_solo)."""
        self.solo_waiting -= 1
        if r.batches:
            per = 1.0 / r.batches
            cpu = None if r.cpu_s is None else r.cpu_s * per
            self.session.event(
                ProducerSoloEvent, loader=r.loader_id, pass_no=r.pass_no, batches=r.batches,
                s_per_batch=r.produce_s * per, cpu_s_per_batch=cpu,
                message=f"the reader thread of DataLoader#{r.loader_id} timed alone: "
                        f"{r.produce_s * per * 1e3:.2f} ms per batch over {r.batches} batches")

    def _solo(self):
        """The ceiling window's end: the flag off, then producer threads timed alone when
        the source can (else straight on)."""
        source = self.session.source
        source.set_speed_test_mode(self.previous)
        asked = source.measure_producers_alone(SOLO_BATCHES)
        if not asked:
            self._one_thread("speed test: flag off again")
            return
        self.solo_waiting, self.phase_end = asked, self.steps + SOLO_MAX_STEPS
        self._switch("solo", f"speed test: flag off again; at the next batch the reader "
                             f"thread makes {SOLO_BATCHES} batches alone, the loop waiting")

    def _one_thread(self, done_message: str):
        """The one-thread ceiling window where the job runs several math threads and the
        source can set them; else the speed test is done."""
        source = self.session.source
        threads = source.blas_threads()
        previous = source.set_math_threads(1) if threads is not None and threads > 1 else None
        if previous is None:
            self._switch("done", done_message)
            return
        self.threads, self.phase_end = previous, self.steps + self.window
        source.set_speed_test_mode(True)
        self._switch("one_thread", f"speed test: the no-data ceiling again with 1 math "
                                   f"thread (of {previous}) for {self.window} steps")

    def _restore(self):
        """The flag as it was before, and the math threads the one-thread window took."""
        if self.threads is not None:
            self.session.source.set_math_threads(self.threads)
            self.threads = None
        self.session.source.set_speed_test_mode(self.previous)

    def finish(self):
        """The job's end: whatever the speed test changed goes back (idempotent)."""
        if self.phase == "solo":
            self._switch("done", "speed test: done (the job ended during the solo phase)")
        elif self.phase == "one_thread":
            self._restore()
            self._switch("done", "speed test cut short in its one-thread window (the job "
                                 "ended); the math threads and the flag back")
        elif self.phase == "ceiling":
            self._restore()
            self._switch("done", f"speed test cut short after "
                                 f"{self.steps - self.start - self.window} of {self.window} "
                                 f"ceiling steps (the job ended); flag off again")

    def _switch(self, phase, message):
        self.phase = phase
        on_training_thread = threading.get_ident() == self.training_thread
        self.session.event(SpeedTestEvent, phase=phase, step=self.steps, message=message,
                           cpu_s=time.process_time(),
                           thread_cpu_s=time.thread_time() if on_training_thread else None)


def _exit_status(exc: SystemExit):
    """Python's rules: None -> 0, int -> itself, anything else printed to stderr -> 1."""
    code = exc.code
    if code is None:
        return 0, "exit", None
    if isinstance(code, int):
        return code, "exit", f"sys.exit({code})"
    print(code, file=sys.stderr)
    return 1, "exit", str(code)


PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _print_script_traceback(etype, value, tb):
    """The traceback Python would print: without runpy's and paddletune's own frames (the
    session's around the script; inside it, the wrappers around the framework's functions,
    unless the error was raised in paddletune's own code: then they stay, to show it)."""
    internal = {os.path.abspath(runpy.__file__), os.path.abspath(__file__)}

    def ours(filename):
        return filename.startswith("<frozen runpy") or os.path.abspath(filename) in internal

    while tb is not None and ours(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    traceback.print_exception(etype, value, _without_wrappers(tb))
    sys.stderr.flush()


def _without_wrappers(tb):
    """`tb` without paddletune's frames (warn_frames' always: it passes warnings on), where
    the innermost frame left is not paddletune's."""
    frames = []
    while tb is not None:
        if tb.tb_frame.f_code.co_filename != WARN_FRAMES:
            frames.append(tb)
        tb = tb.tb_next
    if not frames or frames[-1].tb_frame.f_code.co_filename.startswith(PACKAGE_DIR):
        kept = frames
    else:
        kept = [t for t in frames if not t.tb_frame.f_code.co_filename.startswith(PACKAGE_DIR)]
    out = None
    for t in reversed(kept):
        out = types.TracebackType(out, t.tb_frame, t.tb_lasti, t.tb_lineno)
    return out


_FRAME = re.compile(r'^\s*File "(.+)", line (\d+), in (.+)$')


def _first_line(exc):
    """The message's first line, and where the message carries the traceback of an error
    raised elsewhere (a DataLoader worker's, which PyTorch raises again in the training
    loop: "Caught ValueError in DataLoader worker process 1. Original Traceback ..."), that
    error's own last line after it: the culprit."""
    text = str(exc).strip()
    lines = text.splitlines()
    if not lines:
        return ""
    original = _original_error(lines)
    return f"{lines[0]} {original}" if original and original not in lines[0] else lines[0]


def _original_error(lines) -> Optional[str]:
    """The last line of a traceback carried in an exception's message (None: none)."""
    if not any(line.rstrip().endswith("Traceback (most recent call last):") for line in lines):
        return None
    last = next((line.strip() for line in reversed(lines) if line.strip()), "")
    return last if last and not _FRAME.match(last) else None


def _where(exc):
    """'file:line in function' of the innermost frame: of the traceback carried in the
    message where there is one (the worker's __getitem__), else of the exception's own."""
    lines = str(exc).splitlines()
    frames = [m for m in map(_FRAME.match, lines) if m]
    if frames and _original_error(lines):
        file, line, function = frames[-1].groups()
        return f"{file}:{line} in {function}"
    tb = exc.__traceback__
    last = traceback.extract_tb(tb)[-1:] if tb is not None else []
    return f"{last[0].filename}:{last[0].lineno} in {last[0].name}" if last else None


def _command(options):
    return {"argv": [options.target] + list(options.args), "module": options.module,
            "script": None if options.module else str(Path(options.target).resolve()),
            "cwd": os.getcwd(), "python": sys.executable}


OVERRIDES_ENV = "PADDLETUNE_OVERRIDES"


def _options_record(options):
    record = asdict(options)
    for key in ("target", "args", "module", "stdout_to_stderr", "out", "framework"):
        record.pop(key)
    record["head_steps"] = options.head_steps or prof.records.Options.head_steps
    value = os.environ.get(OVERRIDES_ENV)
    record["overrides_env"] = {OVERRIDES_ENV: value} if value else None
    return record
