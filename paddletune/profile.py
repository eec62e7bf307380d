"""The profile: a JSON Lines stream written while the job runs, and `load()` that reads it back.

A profile is one `.jsonl` file. Every line is one JSON object with a "type":

  header   first line: {"schema", "tool", "created" (ISO time), "t0_unix", "command", "options",
           "env"}. Every `t` below is seconds since the header's t0 (a perf_counter clock).
  step     one Executor.run: {"t", "program", "executor", "step", "wall_s", "feed_s",
           "compute_s", "fetch_s", "gap_s" (time since the previous step of the same executor
           ended: the loop's time outside the runtime; null for the first), "batch_size",
           "feed_bytes", "fetch_bytes", "read_s" (only when non-zero: waiting inside the run
           for a non-iterable DataLoader's batch), "queue" (only in a job fed by a
           DataLoader/PyReader: the queue's fill as the step's last batch was popped, before
           the pop), and "n_ops", "fetch" and "feed" (names), "startup",
           "place" -- these five only when they differ from the previous step of the same
           executor and program; load() fills them in}
  ops      per-op timings of one step (with --ops): {"program", "step", "ops": [[index, type,
           t, dur_s], ...]}, and "timing": "cuda_event" on a GPU place (durations measured on
           the device; runtime/gpu_timing.py), absent ("host") on the CPU
  program  a compiled program's ops: {"t", "program", "compile_s", "ops": [{"type", "role",
           "inputs": {slot: [names]}, "outputs": {...}, "attrs": {the few attrs advice reads:
           use_cudnn, global_pooling, pooling_type; absent when none}}]}
  sample   one background measurement: {"probe", "t", ...probe fields}
  event    something that happened: {"t", "kind", "message", ...}; kinds: "exit" (status,
           reason, train_steps), "error" (exception, where), "step_limit" (steps), "nan_inf"
           (op_type, op_index, output, inputs, n_nan, n_inf, step), "probe_unavailable",
           "speed_test" (phase: baseline|ceiling|done, step: training steps so far),
           "overrides" (env, requested, applied [{section, key, value, was}], skipped
           [{section, key, value, why}]: what PADDLETUNE_OVERRIDES changed, and what had no
           effect and why; written before "exit")
  reader   the reader probe's DataLoader/PyReader records, aggregated per interval (never
           one per batch): {"what": "start", "t", "loader", "pass", "config"} when a pass
           starts; {"what": "end"|"reset"|"error", "t", "loader", "pass", "batches",
           "detail"}; and {"what": "interval", "t0", "t", "loader", "pass", "speed_test",
           pushes, pops, empty_pops, wait_s, wait_hist, occupancy, workers, shapes, cost,
           ...} every interval (see paddletune/probes/reader.py for every counter)
  memory   the memory probe's records: {"what": "step"|"peak"|"trace"|"oom", "t", ...}
           (see paddletune/probes/memory.py for every field)
  sched    the scheduler probe's ParallelExecutor records: {"what": "step"|"drop", "t", ...}
           (see paddletune/probes/scheduler.py for every field)
  probe    a probe's own result when it stopped: {"name", "available", "reason",
           "overhead_s", "result"}
  summary  last line: figures computed from the records (see summary.py). A profile cut short
           (crash, kill) has none; load() computes it.

Records are queued by the measuring thread and written by a background flusher, so the job
pays an append per record; a kill loses at most the last flush interval. A truncated last
line is ignored on load; a bad line anywhere else is an error naming it.
"""

import json
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

SCHEMA_VERSION = 1
RUNS_DIR = "paddletune-runs"


class ProfileError(Exception):
    """A profile that cannot be read (missing, corrupt, newer schema) or written."""


# --- writing -------------------------------------------------------------------------------------
class ProfileWriter:
    """Append records to `path` from any thread; a daemon thread writes them every interval.

    A write that fails (disk full, file gone) warns once on stderr and turns the writer off:
    the job itself goes on untouched.
    """

    def __init__(self, path, flush_interval_s=0.5, warn=None):
        self.path = Path(path)
        self._file = open(self.path, "w", encoding="utf-8")  # errors here: caller reports them
        self._pending: List[dict] = []
        self._lock = threading.Lock()  # serialises the file, not the producers
        self._interval = flush_interval_s
        self._last_flush = time.monotonic()
        self._stop = threading.Event()
        self._warn = warn or (lambda msg: print(f"paddletune: warning: {msg}", file=sys.stderr))
        self.failed: Optional[str] = None
        self.n_written = 0
        self._thread = threading.Thread(target=self._loop, name="paddletune-writer", daemon=True)
        self._thread.start()

    def submit(self, record: dict):
        """Queue one record (cheap: a list append).

        Every 64 records it checks that the flusher thread kept up: a training loop that
        drops and retakes the GIL very often (NumPy's random generators do) can starve
        other threads for seconds, so then the records are written from here.
        """
        pending = self._pending
        pending.append(record)
        if not len(pending) & 63 and time.monotonic() - self._last_flush > 2 * self._interval:
            self.flush()

    def flush(self):
        """Write every queued record now."""
        with self._lock:
            self._last_flush = time.monotonic()
            batch, self._pending = self._pending, []
            if not batch or self.failed or self._file is None:
                return
            try:
                self._file.write("".join(_dumps(r) + "\n" for r in batch))
                self._file.flush()
                self.n_written += len(batch)
            except (OSError, ValueError) as err:
                self.failed = str(err)
                self._warn(f"could not write the profile {self.path}: {err}; profiling output "
                           f"stops here (the job goes on)")

    def close(self):
        """Write what is queued and close the file (idempotent)."""
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        self.flush()
        with self._lock:
            if self._file is not None:
                try:
                    self._file.close()
                except OSError as err:
                    if not self.failed:
                        self._warn(f"could not close the profile {self.path}: {err}")
                self._file = None

    def _loop(self):
        while not self._stop.wait(self._interval):
            self.flush()


def _dumps(record):
    return json.dumps(record, separators=(",", ":"), default=_jsonable)


def _jsonable(value):
    """numpy scalars and other odd values become plain JSON."""
    if hasattr(value, "item"):
        return value.item()
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)


def default_path(script_name: str, runs_dir=RUNS_DIR) -> Path:
    """./paddletune-runs/<YYYYmmdd-HHMMSS>-<script>.jsonl, created empty (new_run_path)."""
    return new_run_path(script_name, ".jsonl", runs_dir)


def new_run_path(script_name: str, suffix: str, runs_dir=RUNS_DIR) -> Path:
    """runs_dir/<YYYYmmdd-HHMMSS>-<script><suffix>, or -2, -3, ... before the suffix when that
    exists. The file is created here, empty and exclusively (O_EXCL), so two runs started in
    the same second never share it. OSError when runs_dir cannot be created or written."""
    stem = Path(script_name).stem or "run"
    base = Path(runs_dir) / f"{time.strftime('%Y%m%d-%H%M%S')}-{stem}"
    base.parent.mkdir(parents=True, exist_ok=True)
    n = 1
    while True:
        path = Path(f"{base}{suffix}" if n == 1 else f"{base}-{n}{suffix}")
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            return path
        except FileExistsError:
            n += 1


def latest(runs_dir=RUNS_DIR) -> Path:
    """The newest profile in `runs_dir`, or ProfileError saying how to make one."""
    runs = sorted(Path(runs_dir).glob("*.jsonl"), key=lambda p: p.stat().st_mtime)
    if not runs:
        raise ProfileError(f"no profile found in ./{runs_dir}/; make one with "
                           f"`paddletune profile train.py` or pass a profile path")
    return runs[-1]


# --- reading -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Profile:
    """A loaded profile. Records keep the field names of the file (see the module docstring)."""

    path: str
    header: dict
    steps: Tuple[dict, ...]  # every step record, startup programs included, in file order
    ops: Tuple[dict, ...] = ()
    programs: Dict[int, dict] = field(default_factory=dict)  # program id -> its first record
    samples: Dict[str, Tuple[dict, ...]] = field(default_factory=dict)  # probe -> samples
    events: Tuple[dict, ...] = ()
    probes: Dict[str, dict] = field(default_factory=dict)  # name -> probe record
    summary: dict = field(default_factory=dict)
    complete: bool = True  # the job's own summary record was there
    truncated: bool = False  # the last line was cut off (job killed mid-write)
    reader: Tuple[dict, ...] = ()  # the reader probe's records, in file order
    memory: Tuple[dict, ...] = ()  # the memory probe's records, in file order
    sched: Tuple[dict, ...] = ()  # the scheduler probe's records, in file order

    @property
    def env(self) -> dict:
        return self.header.get("env", {})

    @property
    def options(self) -> dict:
        return self.header.get("options", {})

    def events_of(self, kind) -> List[dict]:
        return [e for e in self.events if e.get("kind") == kind]


def load(path) -> Profile:
    """Read a profile. ProfileError names the file, the line and what to do."""
    path = Path(path)
    if path.is_dir():
        raise ProfileError(f"{path} is a directory, not a profile (.jsonl file)")
    if path.exists() and not path.is_file():
        raise ProfileError(f"{path} is not a regular file (a device or pipe), not a profile")
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ProfileError(f"no such profile: {path}") from None
    except (OSError, UnicodeDecodeError) as err:
        raise ProfileError(f"cannot read the profile {path}: {err}") from None
    records, truncated = _parse_lines(path, text)
    return _assemble(str(path), records, truncated)


def _parse_lines(path, text):
    lines = text.split("\n")
    ends_cleanly = text.endswith("\n")
    records, truncated = [], False
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            if not isinstance(record, dict) or "type" not in record:
                raise ValueError("not a JSON object with a 'type'")
        except ValueError as err:
            if lineno == len(lines) and not ends_cleanly:  # cut off mid-write: keep the rest
                truncated = True
                break
            raise ProfileError(f"{path}:{lineno}: corrupt profile record ({err}); the lines "
                               f"before it are intact — re-run `paddletune profile` for a "
                               f"clean one") from None
        records.append(record)
    return records, truncated


def from_records(path, records) -> Profile:
    """A Profile from records already read (the live window's): header first; the summary is
    computed when no summary record is among them."""
    return _assemble(str(path), list(records), False)


def _assemble(path, records, truncated) -> Profile:
    if not records or records[0].get("type") != "header":
        raise ProfileError(f"{path}:1: not a paddletune profile (the first line must be the "
                           f"header record)")
    header = records[0]
    schema = header.get("schema")
    if not isinstance(schema, int) or schema > SCHEMA_VERSION:
        raise ProfileError(f"{path} was written by a newer paddletune (profile schema {schema}; "
                           f"this version reads up to {SCHEMA_VERSION}): upgrade paddletune "
                           f"(pip install -U paddletune) to read it")
    parts = {"step": [], "ops": [], "event": [], "reader": [], "memory": [], "sched": []}
    sticky = {}  # (executor, program) -> the rarely-changing step fields last seen
    programs, samples, probes, summary = {}, {}, {}, None
    for r in records[1:]:
        kind = r["type"]
        if kind == "step":
            parts[kind].append(_fill_step(r, sticky))
        elif kind in parts:
            parts[kind].append(r)
        elif kind == "program":
            programs.setdefault(r.get("program"), r)
        elif kind == "sample":
            samples.setdefault(r.get("probe", "?"), []).append(r)
        elif kind == "probe":
            probes[r.get("name", "?")] = r
        elif kind == "summary":
            summary = r
        # other types: written by a newer minor version; ignored
    profile = Profile(path, header, tuple(parts["step"]), tuple(parts["ops"]), programs,
                      {k: tuple(v) for k, v in samples.items()}, tuple(parts["event"]), probes,
                      summary or {}, complete=summary is not None, truncated=truncated,
                      reader=tuple(parts["reader"]), memory=tuple(parts["memory"]),
                      sched=tuple(parts["sched"]))
    if summary is None:
        from .summary import summarize  # here: summary imports this module
        object.__setattr__(profile, "summary", summarize(profile))
    return profile


STEP_STICKY = {"n_ops": None, "fetch": [], "feed": [], "startup": False, "place": None}


def _fill_step(record, sticky):
    """A step record with the fields the writer left out (unchanged) filled in."""
    key = (record.get("executor"), record.get("program"))
    known = sticky.setdefault(key, dict(STEP_STICKY))
    for name in STEP_STICKY:
        if name in record:
            known[name] = record[name]
        else:
            record[name] = known[name]
    return record


def write_records(path, records):
    """Write `records` as a profile file in one go (tests, converters)."""
    with open(path, "w", encoding="utf-8") as f:
        for r in records:
            f.write(_dumps(r) + "\n")
    return Path(path)


def header_record(command: dict, options: dict, env: dict, t0_unix: float) -> dict:
    from . import __version__
    return {"type": "header", "schema": SCHEMA_VERSION, "tool": f"paddletune {__version__}",
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(t0_unix)),
            "t0_unix": t0_unix, "pid": os.getpid(), "command": command, "options": options,
            "env": env}
