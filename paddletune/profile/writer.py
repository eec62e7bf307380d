"""Writing a profile while the job runs: records are queued by the measuring threads and a
background flusher passes them through the accumulator (which folds a long job's steps into
windows) and appends what it keeps to the file, so the file and the memory stay bounded and
a kill loses at most the last flush interval (and the open windows). A record may be queued
as a `Deferred` (profile/deferred.py: the memory probe's per-step records), or an event
queued as it is through a `tap` (the step probe's steps and pops): the flusher builds the
record in its place, so the training thread only queues its parts. `finish()`
closes the windows and writes the summary, computed from what was kept (the file is never
read back), then renames a profile written beside an earlier one (paths.writing_path) over
it."""

import json
import os
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import Callable, Dict, Optional

from . import records as r
from .accumulate import Accumulator
from .codec import StepCompressor, dumps as _dumps, to_json, unwritable
from .deferred import Deferred
from .schema import encode
from .figures import Summary
from .load import assemble
from .paths import open_new, replaceable
from .summarize import summarize


class ProfileWriter:
    """Append records to `path` from any thread; a daemon thread writes them every interval.

    A write that fails (disk full, file gone) warns once on stderr and turns the writer off:
    the job itself goes on untouched. `clock()`, when given, is the session clock (seconds):
    windows whose time is up are closed at each flush, so a follower sees them."""

    takes_deferred = True  # submit() takes a Deferred record (built at the flush, in order)

    def __init__(self, path, flush_interval_s=0.5, warn=None,
                 clock: Optional[Callable[[], float]] = None, head_steps: Optional[int] = None,
                 final=None):
        self.path = Path(path)
        self.final = Path(final) if final is not None else self.path  # renamed to once done
        self._file = open_new(self.path)  # errors here: the caller reports them
        self.accumulator = Accumulator(head_steps)
        self._steps = StepCompressor()
        # (a deque, never replaced: a tap is its append; each flush takes what it holds)
        self._pending: deque = deque()
        self._converters: Dict[type, Callable[[object], object]] = {}  # (tap's)
        self._lock = threading.Lock()  # serialises the accumulator and the file
        self._interval = flush_interval_s
        self._last_flush = time.monotonic()
        self._clock = clock
        self._stop = threading.Event()
        self._warn = warn or (lambda msg: print(f"paddletune: warning: {msg}", file=sys.stderr))
        self.failed: Optional[str] = None
        self.n_written = 0
        self.unwritable_steps = 0  # steps with a non-finite time, left out (_accumulate)
        self.lost_records = 0  # records that raised as they were built, kept or encoded
        self._owner = os.getpid()  # a process the job forks never writes the profile
        self._thread = threading.Thread(target=self._loop, name="paddletune-writer", daemon=True)
        self._thread.start()

    def submit(self, record):
        """Queue one typed record, or a Deferred one (cheap: a deque append).

        Every 64 records it checks that the flusher thread kept up (keep_up)."""
        pending = self._pending
        pending.append(record)
        if not len(pending) & 63:
            self.keep_up()

    def keep_up(self):
        """Write the queue from the calling thread when the flusher thread has not flushed
        for two intervals: a training loop that drops and retakes the GIL very often (NumPy's
        random generators do) can starve other threads for seconds. Whoever queues often
        calls it now and then (submit every 64 records; the session every 64 steps, for the
        events queued through a tap)."""
        if time.monotonic() - self._last_flush > 2 * self._interval:
            self.flush()

    def tap(self, converters: Dict[type, Callable[[object], object]]) -> Callable:
        """A queue for events as their source sends them: what is returned is the writer's
        queue's own append (built in C: no Python frame where it is called, the training
        loop), and each event in it is turned into its record by `converters[type(event)]`
        as the writer flushes, in the queue's order, one at a time (None: no record; a
        converter may keep state of its own, as a Deferred's `make` may). The events of a
        type not in `converters` must not be queued through it."""
        with self._lock:
            self._converters.update(converters)
        return self._pending.append

    def flush(self):
        """Pass every queued record through the accumulator; write what it keeps (in a
        process the job forked: drop them)."""
        if os.getpid() != self._owner:
            self._pending.clear()
            return
        with self._lock:
            self._last_flush = time.monotonic()
            out = self._accumulate(self._taken())
            if self._clock is not None:
                out += self.accumulator.tick(self._clock())
            self._write(out)

    def _taken(self) -> list:
        """What the queue holds now, taken out of it (other threads go on queueing)."""
        pending = self._pending
        return [pending.popleft() for _ in range(len(pending))]

    def finish(self) -> Optional[Summary]:
        """Close the open windows, write the summary and close the file; the summary (None
        when writing failed)."""
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        self.flush()
        summary = None
        with self._lock:
            self._write(self.accumulator.close())
            try:
                summary = summarize(assemble(str(self.path), self.accumulator, True))
            except Exception as err:  # noqa: BLE001  (a summary bug never loses the records)
                self._warn(f"could not summarise {self.path}: {type(err).__name__}: {err}; "
                           f"the records are written (`paddletune report` computes it again)")
            else:
                self._write([summary])
        self.close()
        if self.failed:
            return None
        self._publish()
        return summary

    def seal(self, records, timeout_s: float = 1.0) -> bool:
        """At once (the job is about to be killed): the queued records, then `records` (its
        exit record), the open windows closed, the file closed and given its final name; no
        summary (`paddletune report` computes it on load). False, with nothing done, when the
        file stays busy for `timeout_s` (this very thread may be the one writing it)."""
        if os.getpid() != self._owner or not self._lock.acquire(timeout=timeout_s):
            return False
        try:
            self._stop.set()
            batch = self._taken() + list(records)
            self._write(self._accumulate(batch) + self.accumulator.close())
            if self._file is not None:
                try:
                    self._file.close()
                except OSError:
                    pass
                self._file = None
        finally:
            self._lock.release()
        if not self.failed:
            self._publish()
        return True

    def _publish(self):
        """The complete profile takes its final name (replacing an earlier one only now)."""
        if self.final == self.path:
            return
        if not replaceable(self.final):
            self._warn(f"{self.final} is not a regular file: the profile stays in {self.path}")
            return
        try:
            os.replace(self.path, self.final)
        except OSError as err:
            self.failed = str(err)
            self._warn(f"could not rename {self.path} to {self.final}: {err}; the profile is "
                       f"in {self.path}")

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

    def _write(self, records):
        if not records or self.failed or self._file is None or os.getpid() != self._owner:
            return
        lines = self._lines(records)
        try:
            self._file.write("".join(lines))
            self._file.flush()
            self.n_written += len(lines)
        except (OSError, ValueError) as err:
            self.failed = str(err)
            self._warn(f"could not write the profile {self.path}: {err}; profiling output "
                       f"stops here (the job goes on)")

    def _lines(self, records) -> list:
        """Each record's line, in order; a record no line can hold (its encoding raised: a
        probe's bug) is the only one lost (_lost), never the batch or the file. One pass:
        a step's line depends on the steps encoded before it (its sticky fields)."""
        lines = []
        for record in records:
            try:
                line = self._line(record)
            except Exception as err:  # noqa: BLE001  (one record lost, never the batch)
                self._lost(record, err)
                continue
            if line:
                lines.append(line)
        return lines

    def _accumulate(self, batch) -> list:
        """The records to write for `batch`, through the accumulator, the deferred ones built
        in their place; a step no line can hold (a non-finite time: codec.unwritable) is left
        out, of the summary too, and so is a record that could not be built or kept (_lost)."""
        out, converters = [], self._converters
        for record in batch:
            try:
                kind = type(record)
                if kind is Deferred:
                    record = record.make(*record.args)
                elif kind in converters:  # (an event queued through a tap)
                    record = converters[kind](record)
                    if record is None:
                        continue
                if isinstance(record, r.Step) and unwritable(record):
                    self._left_out(record)
                    continue
                out += self.accumulator.add(record)
            except Exception as err:  # noqa: BLE001  (one record lost, never the batch)
                self._lost(record, err)
        return out

    def _lost(self, record, err: Exception):
        """`record` raised as it was built (a Deferred's make), kept (the accumulator) or
        encoded (_lines): a probe's bug. It is left out, with a warning the first time; the
        batch goes on, and so does the writer's thread (an exception there would stop every
        later flush)."""
        if not self.lost_records:
            what = (getattr(record.make, "__qualname__", record.make)
                    if type(record) is Deferred else type(record).__name__)
            self._warn(f"could not write a record to {self.path} ({what}): "
                       f"{type(err).__name__}: {err}; such records are left out")
        self.lost_records += 1

    def _left_out(self, step: r.Step):
        if not self.unwritable_steps:
            self._warn(f"step {step.step} of program {step.program} has a time that is not a "
                       f"number (wall {step.wall_s} s); such steps are left out of {self.path}")
        self.unwritable_steps += 1

    def _line(self, record) -> str:
        if not isinstance(record, r.Step):
            return _dumps(to_json(record)) + "\n"
        text = self._steps.text(record)
        if text is None:  # (unwritable: kept out before the accumulator)
            self._left_out(record)
            return ""
        return text + "\n"

    def _loop(self):
        while not self._stop.wait(self._interval):
            self.flush()


def write_records(path, records) -> Path:
    """Write `records` (typed records, or JSON objects as they are) as a profile file in one
    go (tests, converters); steps are written whole."""
    with open(path, "w", encoding="utf-8") as f:
        for record in records:
            obj = record if isinstance(record, dict) else to_json(record)
            f.write(json.dumps(obj, separators=(",", ":"), default=encode) + "\n")
    return Path(path)
