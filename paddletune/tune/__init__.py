"""`paddletune tune`: closed-loop tuning of a training job's settings by measured trials.

space.py (knobs, settings as env vars and code), trials.py (one trial: a `paddletune profile`
subprocess and its throughput with a confidence interval), proposals.py (advice -> settings),
search.py (the search), compare.py (how settings are compared: scores, the noise, the speedup),
record.py (the tuning record). `tune(...)` ties them together; the
CLI and render/tune.py only parse options and draw.
"""

import contextlib
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Optional

from ..profile.paths import output_problem
from . import record as rec
from .search import TuneError, TuneOptions, Tuner
from .space import SpaceError
from .trials import TrialRunner

__all__ = ["TuneError", "RecordPathError", "TuneOptions", "Tuner", "SpaceError", "tune",
           "parse_duration", "record_path"]


class RecordPathError(TuneError):
    """The tuning record cannot be written where it is to go (--out): bad input, found
    before any trial runs."""


def tune(script, args, options: TuneOptions, out: Optional[str] = None, progress=None,
         module=False, env=None):
    """Tune `script`; returns (tuner, record path). The record is saved after every trial."""
    path = record_path(script, out)
    workdir = path.with_name(path.name[:-len(rec.SUFFIX)] + ".trials"
                             if path.name.endswith(rec.SUFFIX) else path.name + ".trials")
    base_env = dict(os.environ if env is None else env)
    dropped = base_env.pop("PADDLETUNE_OVERRIDES", None)
    runner = TrialRunner(script, args, workdir, base_env, module=module)
    command = {"script": script, "args": list(args), "module": module,
               "cwd": os.getcwd(), "python": sys.executable}
    opts = {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(options).items()}

    def save(tuner):
        rec.save(rec.build(tuner, command, opts), path)

    tuner = Tuner(runner, options, progress, on_trial=save)
    if dropped:
        tuner.notes.append(f"PADDLETUNE_OVERRIDES={dropped} was set in the environment; the "
                           f"baseline and every trial ran without it")
    try:
        with _stop_signals_interrupt():
            tuner.run()
    finally:
        save(tuner)
        runner.close()
    return tuner, path


def record_path(script, out: Optional[str] = None) -> Path:
    """Where the tuning record goes (--out, else beside the script's runs), checked before
    any trial runs, as `paddletune profile` checks --out: RecordPathError saying what to pass
    otherwise."""
    path = Path(os.path.abspath(Path(out) if out else rec.default_path(script)))
    problem = output_problem(path, "the tuning record", "run" + rec.SUFFIX)
    if problem:
        raise RecordPathError(problem)
    return path


@contextlib.contextmanager
def _stop_signals_interrupt():
    """SIGTERM / SIGHUP end the tuning as Ctrl-C does (the running trial's process group is
    killed, the record saved): a trial runs in a session of its own, so nothing else would
    take it down with the tuner."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, frame):
        raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")

    previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def parse_duration(text: str, option: str = "--budget") -> float:
    """'90' / '90s' / '5m' / '1.5h' -> seconds; a ValueError naming `option` otherwise."""
    raw = str(text).strip().lower()
    factor = {"s": 1, "m": 60, "h": 3600}.get(raw[-1:], None)
    number = raw[:-1] if factor else raw
    try:
        value = float(number) * (factor or 1)
    except ValueError:
        raise ValueError(f"{option} {text!r}: give a duration such as 90s, 5m or 1h") from None
    if value <= 0:
        raise ValueError(f"{option} {text!r} must be positive")
    return value
