"""One tuning trial: `paddletune profile --steps N` of the unmodified script in a subprocess
(paddletune/trialrun.py), with a setting imposed through the environment, and what its
profile measured.

A subprocess keeps the tuner alive whatever the trial does: a crash, an out-of-memory error
or a hang (killed at its timeout: SIGTERM to its process group, so the session still writes
its profile, then SIGKILL) is a failed trial, and the search goes on. Throughput is the
profile's steady-state samples/s (warm-up excluded by the summary); its confidence interval
comes from batch means over the steady steps (consecutive steps are correlated, so blocks of
them are treated as the independent measurements): a trial keeps every step in full
(trialrun.HEAD_STEPS), never the aggregated windows of a long job.

Out of memory is what the profile says it is: the memory pool's out-of-memory figures, or an
error event the session marked `oom` (paddletune.oom.is_oom knows every framework's kinds).
An override that changed nothing is an `IdleOverride`: its reason code (runtime/overrides.py
NO_EFFECT_CODES) is what the search acts on, its words are for display.
"""

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import List, Optional

from ..profile import ProfileError, load
from ..profile.schema import encode
from ..profile.summarize import training_steps
from .lengths import MIN_STEPS
from .space import EAGER_THREADS, FRAMEWORK_THREADS

BLOCKS = 8  # batch means for the confidence interval
MIN_BLOCK = 3  # steps per block at least
KILL_GRACE_S = 3.0  # after SIGTERM at the timeout, before SIGKILL
# two-sided 95% Student t quantiles by degrees of freedom (t95 past the table)
_T95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26,
        10: 2.23, 12: 2.18, 15: 2.13, 20: 2.09, 30: 2.04}
# the no-effect reason codes the tuner acts on or writes (runtime/overrides.py
# NO_EFFECT_CODES): the search kills knobs by the last two; the first two are also those of a
# requested override that no overrides event mentions (nothing in the job came to it)
NO_LOADER = "no-loader"
NO_COMPILED_PROGRAM = "no-compiled-program"
NOT_DATA_PARALLEL = "not-data-parallel"
_UNREACHED = {"reader": (NO_LOADER, "no DataLoader/PyReader"),
              "exec_strategy": (NO_COMPILED_PROGRAM, "no CompiledProgram applied its strategies"),
              "build_strategy": (NO_COMPILED_PROGRAM,
                                 "no CompiledProgram applied its strategies")}


@dataclass
class IdleOverride:
    """A requested override that changed nothing: where, the reason code the tuner acts on
    (runtime/overrides.py NO_EFFECT_CODES) and the reason in words (display only)."""

    section: str
    key: str
    code: str
    why: str = ""

    @property
    def text(self) -> str:
        return f"{self.section}.{self.key}: {self.why or self.code}"


@dataclass
class Trial:
    """A trial's inputs and outcome (a record row: plain JSON types only)."""

    index: int
    setting: dict
    label: str
    phase: str  # baseline | advice:<id> | knob:<name> | batch | final
    steps: int  # --steps given to the profile (a --duration trial: the steps it ran)
    status: str = "pending"  # ok | oom | timeout | crashed | interrupted | no-steps
    samples_per_s: Optional[float] = None
    ci: Optional[float] = None  # half-width of the 95% interval, samples/s
    se: Optional[float] = None  # its standard error (ci = Student's t x se), samples/s
    steps_per_s: Optional[float] = None
    batch_size: Optional[int] = None
    steady_steps: int = 0
    peak_bytes: Optional[int] = None  # the memory pool's peak (reserved)
    capacity_bytes: Optional[int] = None
    batch_model: Optional[dict] = None  # figures.ModelFigures as JSON (schema.encode)
    input_share: Optional[float] = None  # of a step: waiting for and feeding the next batch
    put_wait_share: Optional[float] = None  # of the steady steps' time: the main loader's
    # feeding thread blocked on a full queue
    producer_ratio: Optional[float] = None  # the main loader's producers' batches/s over the
    # batches/s the loop takes when not waiting (below 1: they cannot keep the queue filled)
    passes: Optional[int] = None  # the main loader's passes in the trial (from 1)
    wall_s: Optional[float] = None  # the whole subprocess, start-up included
    run_s: Optional[float] = None  # the job's own duration (profile)
    end_s: Optional[float] = None  # when it ended, seconds since the tuning started (tune's)
    no_effect: List[IdleOverride] = field(default_factory=list)  # requested, changed nothing
    applied: List[dict] = field(default_factory=list)
    message: Optional[str] = None
    exit_reason: Optional[str] = None  # the profile's exit event's: step_limit when the
    # trial's --steps / --duration ended it (tune's cut), returned, exit, ... (the job's own)
    profile: Optional[str] = None
    log: Optional[str] = None

    @property
    def ok(self) -> bool:
        return self.status == "ok" and self.samples_per_s is not None

    @property
    def rel_ci(self) -> Optional[float]:
        return self.ci / self.samples_per_s if self.ok and self.ci is not None else None

    @property
    def no_effect_text(self) -> str:
        """The overrides that changed nothing, in words ('' for none)."""
        return "; ".join(item.text for item in self.no_effect)

    def to_dict(self) -> dict:
        return asdict(self)


class TrialRunner:
    """Runs trials of one script: `run(setting, env, steps, ...)` -> a finished Trial."""

    def __init__(self, script, args, workdir: Path, base_env=None, python=None, module=False):
        self.script, self.args, self.module = script, list(args), module
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.base_env = dict(os.environ if base_env is None else base_env)
        self.pycache = _private_bytecode(self.base_env, self.workdir / "pycache")
        self.python = python or sys.executable
        self.count = 0
        self.current = None  # the running subprocess, for Ctrl-C
        self.speed_test = None  # steps per --speed-test window of the trials (None: none)

    def close(self):
        """Remove what only the trials needed (the private bytecode cache)."""
        if self.pycache is not None:
            shutil.rmtree(self.pycache, ignore_errors=True)

    def command(self, steps, profile_path, duration_s=None) -> List[str]:
        """`paddletune profile --quiet --steps N --out PROFILE TARGET -- ARGS`, as
        paddletune.trialrun runs it (without the command line's parser: faster to start),
        through `launcher()`: nothing is imported from the working directory."""
        target = ["-m", self.script] if self.module else [self.script]
        limit = (["--duration", str(duration_s), "--min-steps", str(min(MIN_STEPS, steps))]
                 if duration_s is not None else [])  # (a slow job's: MIN_STEPS at least)
        if self.speed_test is not None:
            limit += ["--speed-test", str(self.speed_test)]
        return [self.python, "-c", launcher(), "--steps", str(steps), *limit,
                "--out", str(profile_path), *target, "--", *self.args]

    def run(self, setting, env, steps, timeout_s, phase, label, duration_s=None) -> Trial:
        """A trial of `steps` steps; with `duration_s`, of at most that many seconds of
        steps after the first, but MIN_STEPS steps at least (its `steps` then says how many
        it ran: a job whose steps are slow still gives enough steady steps to measure)."""
        self.count += 1
        trial = Trial(self.count, dict(setting), label, phase, steps)
        stem = self.workdir / f"trial-{self.count:03d}"
        profile_path, log_path = stem.with_suffix(".jsonl"), stem.with_suffix(".log")
        trial.profile, trial.log = str(profile_path), str(log_path)
        full_env = {**self.base_env, **env}
        t0 = time.monotonic()
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(self.command(steps, profile_path, duration_s),
                                    env=full_env, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
            self.current = proc
            try:
                timed_out = _wait(proc, timeout_s)
            except BaseException:  # Ctrl-C in the tuner: take the trial down with it
                _kill_group(proc)
                trial.status, trial.message = "interrupted", "the tuner was interrupted"
                raise
            finally:
                self.current = None
        trial.wall_s = time.monotonic() - t0
        measure(trial, profile_path, proc.returncode, timed_out, timeout_s, env,
                counted=duration_s is not None)
        return trial


def launcher() -> str:
    """The `python -c` code that starts a trial: `python -m paddletune.trialrun` would put
    the working directory first on sys.path, and a `psutil.py` (or any module paddletune
    imports) planted there would run in every trial. Instead that first entry becomes the
    directory paddletune is installed in (already on the path) before anything else is
    imported; the session then puts the script's directory there, as `python train.py`
    does (and the working directory for `-m`, as `python -m` does)."""
    home = str(Path(__file__).resolve().parents[2])
    return (f"import sys; sys.path[0] = {home!r}; "
            f"from paddletune.trialrun import main; sys.exit(main())")


def _private_bytecode(env, where: Path) -> Optional[Path]:
    """With PYTHONDONTWRITEBYTECODE set (common in container images), every trial would compile
    paddletune, the runtime, NumPy's Python modules and the script's imports from source
    again (about 0.3 s of each trial's start-up here). The trials cache their bytecode in
    `where` instead (PYTHONPYCACHEPREFIX: nothing is written next to the sources, as the
    setting asks), removed by close(). Returns `where`, or None when the environment already
    lets Python cache bytecode."""
    if not env.get("PYTHONDONTWRITEBYTECODE"):
        return None
    del env["PYTHONDONTWRITEBYTECODE"]
    env["PYTHONPYCACHEPREFIX"] = str(where)
    return where


def _wait(proc, timeout_s) -> bool:
    """Wait for `proc`; at the timeout, SIGTERM its group, then SIGKILL. True if timed out."""
    try:
        proc.wait(timeout=timeout_s)
        return False
    except subprocess.TimeoutExpired:
        pass
    _signal_group(proc, signal.SIGTERM)
    try:
        proc.wait(timeout=KILL_GRACE_S)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
    return True


def _signal_group(proc, sig):
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _kill_group(proc):
    _signal_group(proc, signal.SIGKILL)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def measure(trial: Trial, profile_path, returncode, timed_out, timeout_s, env,
            counted=False):
    """Fill `trial` from its profile and exit status (`counted`: its steps are those the
    profile counted, not those asked for)."""
    try:
        profile = load(profile_path)
    except ProfileError as err:
        trial.status = "timeout" if timed_out else "crashed"
        trial.message = (f"no steps within {timeout_s:.0f} s (killed)" if timed_out else
                         f"exit status {returncode}; no profile ({err}); " + _log_tail(trial))
        return
    s = profile.summary
    trial.run_s = s.duration_s
    ended = profile.last_event("exit")
    trial.exit_reason = ended.reason if ended is not None else None
    if counted and s.n_steps:
        trial.steps = s.n_steps
    _memory(trial, s.memory)
    _overrides(trial, profile, env)
    _env_threads(trial, profile, env)
    if not _failed(trial, profile, returncode, timed_out, timeout_s):
        _throughput(trial, profile)


def _memory(trial, mem):
    """The memory pool's peak, capacity and batch model (None without the memory probe)."""
    if mem is None:
        return
    trial.peak_bytes = mem.peak_reserved_bytes
    trial.capacity_bytes = mem.capacity_bytes
    trial.batch_model = encode(mem.batch_model) if mem.batch_model is not None else None


def _failed(trial, profile, returncode, timed_out, timeout_s) -> bool:
    """Out of memory, timed out or crashed: the status and message set, True."""
    errors = profile.events_of("error")
    mem = profile.summary.memory
    if (mem is not None and mem.oom is not None) or any(e.oom for e in errors):
        trial.status = "oom"
        trial.message = _oom_message(mem, errors)
    elif timed_out:
        trial.status = "timeout"
        trial.message = (f"still running after {timeout_s:.0f} s: killed "
                         f"({profile.summary.n_steps} steps done)")
    elif returncode not in (0, None) or errors:
        trial.status = "crashed"
        trial.message = (f"{errors[-1].exception}: {errors[-1].message}" if errors else
                         f"exit status {returncode}; " + _log_tail(trial))
    else:
        return False
    return True


def _throughput(trial, profile):
    """A trial that ran: its steady steps' throughput and interval ("no-steps" when too few
    of them, or none with a throughput)."""
    s = profile.summary
    steady = steady_steps(profile)
    tp = s.throughput
    if len(steady) < 2 * MIN_BLOCK or tp is None or not tp.steps_per_s:
        trial.status = "no-steps"
        trial.message = _too_few(trial, s.n_steps, len(steady))
        return
    trial.status = "ok"
    trial.steady_steps = len(steady)
    trial.batch_size = tp.batch_size
    trial.steps_per_s = tp.steps_per_s
    trial.samples_per_s, trial.ci = throughput_ci(steady)
    trial.input_share = s.input_share
    loader = s.main_loader
    if loader is not None:
        trial.put_wait_share = loader.producer.put_wait_share
        trial.producer_ratio = loader.producer_ratio
        trial.passes = loader.passes
    trial.se = throughput_se(steady)


def _too_few(trial, n_steps, steady) -> str:
    """Why a trial measured nothing: tune stopped it (its --steps or --duration: the profile
    ends by step_limit) before enough steady steps, or the job itself ended."""
    need = f"too few to measure ({2 * MIN_BLOCK} at least)"
    after = f"{n_steps} steps: only {steady} steady steps after the warm-up, {need}"
    if trial.exit_reason == "step_limit":
        return f"tune stopped the trial at {after}"
    return f"the job ended after {after}"


def steady_steps(profile) -> list:
    """The summary's steady steps (records.Step): the main program's training steps after
    the warm-up. A trial records every step in full (trialrun.HEAD_STEPS); a profile whose
    later steps were aggregated into windows gives only those of its head."""
    steps = training_steps(profile.steps)
    return steps[profile.summary.warmup_steps:]


def throughput_ci(steady) -> tuple:
    """(samples/s over all steady steps, half-width of its 95% interval) by batch means; a
    job without batch sizes counts steps (one sample per step)."""
    rate, rates = _block_rates(steady)
    if rates is None:
        return rate, None
    return rate, t95(len(rates) - 1) * _block_se(rates)


def t95(dof: float) -> float:
    """The two-sided 95% Student t quantile for `dof` degrees of freedom (rounded down to
    the table's, so the interval is never narrower than it should be; 1.96 past 30)."""
    if dof > 30:
        return 1.96
    return _T95[max((d for d in _T95 if d <= max(dof, 1)), default=1)]


def throughput_se(steady) -> Optional[float]:
    """The standard error of the samples/s by batch means (None with too few steps)."""
    _, rates = _block_rates(steady)
    return _block_se(rates) if rates is not None else None


def _block_rates(steady) -> tuple:
    """(samples/s over all steps, samples/s of each of up to BLOCKS consecutive blocks, or
    None when there are fewer than two blocks of MIN_BLOCK steps). Samples taken from a
    reader's queue filled before the steps began are not counted (`_made_during`)."""
    cycles = [s.cycle_s for s in steady]
    sizes = [s.batch_size or 1 for s in steady]
    total = sum(cycles)
    rate = _made_during(steady, sizes, 0, len(steady)) / total if total > 0 else 0.0
    blocks = min(BLOCKS, len(steady) // MIN_BLOCK)
    if blocks < 2:
        return rate, None
    edges = [round(i * len(steady) / blocks) for i in range(blocks + 1)]
    rates = [_made_during(steady, sizes, a, b) / sum(cycles[a:b])
             for a, b in zip(edges, edges[1:]) if sum(cycles[a:b]) > 0]
    return rate, rates if len(rates) >= 2 else None


def _made_during(steady, sizes, a, b) -> float:
    """The samples of steps [a, b), less the batches the reader's queue held before step a
    that it no longer held at step b - 1 (the steps' `queue`: the fill at each pop). A trial
    starts with the queue its producer filled while the job set up; a short trial that drains
    it reads fast by up to capacity/steps, which would favour larger queues. Only a fall
    counts: a queue that fills up meanwhile was not what limited the steps."""
    first, last = steady[a].queue, steady[b - 1].queue
    samples = sum(sizes[a:b])
    if first is None or last is None or last >= first:
        return samples
    return max(samples - (first - last) * samples / (b - a), 0.0)


def _block_se(rates) -> float:
    mean = sum(rates) / len(rates)
    sd = math.sqrt(sum((r - mean) ** 2 for r in rates) / (len(rates) - 1))
    return sd / math.sqrt(len(rates))


def _overrides(trial, profile, env):
    """What the runtime applied, and which requested overrides had no effect (with the
    overrides event's reason code and words; a key no event mentions: nothing in the job came
    to it, the code of _UNREACHED)."""
    event = profile.last_event("overrides")
    applied = event.applied if event is not None else ()
    trial.applied = [asdict(a) for a in applied]
    done = {(a.section, a.key) for a in applied}
    skipped = {(idle.section, idle.key): idle for idle in
               (event.skipped if event is not None else ())}
    requested = json.loads(env.get("PADDLETUNE_OVERRIDES") or "{}")
    for section, values in requested.items():
        for key in values:
            if (section, key) in done:
                continue
            idle = skipped.get((section, key))
            code, why = (idle.code, idle.why) if idle is not None else _UNREACHED[section]
            trial.no_effect.append(IdleOverride(section, key, code, why))


def _env_threads(trial, profile, env):
    """OMP_NUM_THREADS that changed nothing: the framework reads it as the job starts, and a
    script that sets its threads itself (the profile's settings event: torch.set_num_threads
    before its first training step ended) runs with its own count whatever the variable
    says. The trial is then the job's own setting again ("same-value"), not a setting of
    its own (space.py tunes such a job's threads through the threads.intra_op override)."""
    asked = env.get("OMP_NUM_THREADS")
    flag = FRAMEWORK_THREADS.get(profile.source.framework)
    if asked is None or flag is None:
        return
    if not any(flag in (e.flags or {}) for e in profile.events_of("settings")):
        return
    ran = (profile.env.flags or {}).get(flag)
    call = EAGER_THREADS.get(profile.source.framework, "{value}").format(value=ran)
    trial.no_effect.append(IdleOverride(
        "env", "OMP_NUM_THREADS", "same-value",
        f"the script calls {call} itself, after the variable is read: the job ran with its "
        f"own {ran} threads"))


def _oom_message(mem, errors) -> str:
    oom_errors = [e for e in errors if e.oom] or errors
    if oom_errors:
        return f"out of memory: {oom_errors[-1].message}"
    return f"out of memory at batch {mem.oom.batch_size}"


def _log_tail(trial, lines=3) -> str:
    try:
        text = Path(trial.log).read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(text[-lines:])
