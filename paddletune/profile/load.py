"""Reading a profile: `load(path)` streams its lines through the same accumulator the writer
used, so whatever the file's length, what is kept stays bounded.

What a file can hold and what loading does with it:
- the first line must be a header of a schema this version reads (1 or 2), else ProfileError;
- a line that is not JSON is a ProfileError naming it, unless it is the last one and the file
  does not end in a newline (the job was killed mid-write: `truncated`);
- a header that does not fit its class is a ProfileError naming the field;
- any other record that does not fit its class (a wrong type, a missing field, a NaN where a
  number is required) is skipped, with one warning per kind naming the first such line and
  its field: the rest of the profile stays readable;
- a record type this version does not know is skipped with one warning per type;
- a profile without a summary record (killed) gets one computed from what it holds; so does
  one whose summary record does not fit (with a warning).
"""

import json
from dataclasses import replace
from pathlib import Path
from typing import Iterable, List, Optional

from . import records as r
from . import v1
from .accumulate import Accumulator
from .codec import StepFiller, UnknownRecord, from_json, kind_of
from .figures import Summary
from .model import Profile
from .schema import SchemaError, show
from .summarize import summarize

READABLE = (1, 2)


class ProfileError(Exception):
    """A profile that cannot be read (missing, corrupt, newer schema) or written."""


def load(path) -> Profile:
    """Read a profile. ProfileError names the file, the line and what to do."""
    path = Path(path)
    _check_file(path)
    try:
        with open(path, "rb") as f:
            return _read(str(path), f)
    except OSError as err:
        raise ProfileError(f"cannot read the profile {path}: {err.strerror or err}") from None


def _check_file(path: Path):
    if path.is_dir():
        raise ProfileError(f"{path} is a directory, not a profile (.jsonl file)")
    if path.exists() and not path.is_file():
        raise ProfileError(f"{path} is not a regular file (a device or pipe), not a profile")
    if not path.exists():
        raise ProfileError(f"no such profile: {path}")
    if path.stat().st_size == 0:
        raise ProfileError(f"{path} is empty: its job is starting (follow it with `paddletune "
                           f"watch {path}`) or was killed before it wrote anything")


def _read(path: str, lines: Iterable[bytes]) -> Profile:
    reader = _Reader(path)
    for raw in lines:
        reader.line(raw)
    return reader.finish()


def from_records(path, records, head_steps: Optional[int] = None) -> Profile:
    """A Profile from typed records already in hand (the live window's), header first; the
    summary is computed when none is among them."""
    acc = Accumulator(head_steps)
    for record in records:
        acc.add(record)
    acc.close()
    if acc.kept.header is None:
        raise ProfileError(f"{path}: no header record")
    return assemble(str(path), acc, complete=acc.kept.summary is not None)


class LineDecoder:
    """A profile's lines in order, as typed records: the header's schema decides how the lines
    after it read (a v1 profile's records converted first), a step's omitted rarely changing
    fields are filled in, a record that does not fit its class or is of an unknown kind is
    skipped and counted (`warnings()`). A line that is not JSON, or a bad header, is a
    ProfileError naming the line. `load()` reads a file through one; so does the live
    dashboard's follower, line by line as they are written."""

    def __init__(self, path: str):
        self.path = path
        self.schema = None
        self.filler = StepFiller()
        self.skipped = {}  # kind -> (count, first line, why)
        self.saw_summary = False  # the job finished (its summary, valid or not, is there)

    def decode(self, lineno: int, raw: bytes) -> list:
        """The typed records of one line ([] for a blank, skipped or dropped one)."""
        if not raw.strip():
            return []
        obj = self._parse(lineno, raw)
        if obj["type"] == "header":
            if self.schema is not None:  # a new run rewrote the file: start over
                self.__init__(self.path)
            self._header(lineno, obj)
        elif self.schema is None:
            raise ProfileError(f"{self.path}:{lineno}: not a paddletune profile (the first "
                               f"line must be the header record)")
        self.saw_summary = self.saw_summary or obj["type"] == "summary"
        out = []
        for item in (v1.convert(obj) if self.schema == 1 else [obj]):
            record = self._typed(lineno, item)
            if record is not None:
                out.append(self.filler.fill(record) if isinstance(record, r.Step) else record)
        return out

    def _parse(self, lineno, raw):
        if self.schema is None and (b"\0" in raw or not _text(raw)):
            raise ProfileError(f"{self.path}:{lineno}: binary data, not a paddletune profile "
                               f"(a JSON Lines file `paddletune profile` writes)")
        try:
            obj = json.loads(raw)
        except (ValueError, RecursionError) as err:
            why = "nested too deeply" if isinstance(err, RecursionError) else err
            raise ProfileError(f"{self.path}:{lineno}: corrupt profile record ({why}); the "
                               f"lines before it are intact — re-run `paddletune profile` for "
                               f"a clean one") from None
        if not isinstance(obj, dict) or not isinstance(obj.get("type"), str):
            kind = ("not a paddletune profile (the first line must be the header record)"
                    if self.schema is None else "corrupt profile record (not a JSON object "
                    "with a \"type\")")
            raise ProfileError(f"{self.path}:{lineno}: {kind}")
        return obj

    def _header(self, lineno, obj):
        schema = obj.get("schema")
        if not isinstance(schema, int) or isinstance(schema, bool) or schema > max(READABLE):
            raise ProfileError(f"{self.path} was written by a newer paddletune (profile schema "
                               f"{show(schema)}; this version reads up to {max(READABLE)}): "
                               f"upgrade paddletune (pip install -U paddletune) to read it")
        if schema not in READABLE:
            raise ProfileError(f"{self.path}: profile schema {schema} is not readable; re-run "
                               f"`paddletune profile` to make a new one")
        self.schema = schema

    def _typed(self, lineno, obj):
        try:
            return from_json(obj)
        except UnknownRecord as err:
            self._skip(lineno, obj, f"{err.problem}: written by a newer paddletune?")
        except SchemaError as err:
            if obj.get("type") == "header":
                raise ProfileError(f"{self.path}:{lineno}: the header does not fit schema "
                                   f"{self.schema}: {err}; re-run `paddletune profile`") from None
            self._skip(lineno, obj, f"it does not fit the schema: field {err.where}: "
                                    f"{err.problem}")
        return None

    def _skip(self, lineno, obj, why):
        kind = _what(obj)
        count, first, first_why = self.skipped.get(kind, (0, lineno, why))
        self.skipped[kind] = (count + 1, first, first_why)

    def warnings(self) -> List[str]:
        """One line per kind of record skipped, naming the first such line and why."""
        out = []
        for kind, (count, first, why) in self.skipped.items():
            lines = f"{count} records" if count > 1 else "1 record"
            out.append(f"{self.path}:{first}: skipped {lines} of kind {kind!r} ({why}); the "
                       f"figures leave {'them' if count > 1 else 'it'} out")
        return out


class _Reader:
    """One file's lines in order: decoded, accumulated; a last line cut off mid-write (the
    job was killed) ignored."""

    def __init__(self, path: str):
        self.path, self.lineno = path, 0
        self.acc = Accumulator()
        self.decoder = LineDecoder(path)
        self.pending = None  # the previous line, held until we know it was not the last
        self.truncated = False

    def line(self, raw: bytes):
        if self.pending is not None:
            self._record(*self.pending)
        self.lineno += 1
        self.pending = (self.lineno, raw)

    def finish(self) -> Profile:
        if self.pending is not None:
            lineno, raw = self.pending
            if raw.endswith(b"\n"):
                self._record(lineno, raw)
            else:
                self._last_unterminated(lineno, raw)
        if self.decoder.schema is None:
            raise ProfileError(f"{self.path}:1: not a paddletune profile (the first line must "
                               f"be the header record)")
        self.acc.close()
        return assemble(self.path, self.acc, self.decoder.saw_summary, self.truncated,
                        self.decoder.warnings())

    def _last_unterminated(self, lineno, raw):
        """A last line without its newline: a complete record written just before a kill,
        or one cut off mid-write (ignored, the profile marked truncated)."""
        try:
            json.loads(raw)
        except ValueError:
            self.truncated = True
            return
        except RecursionError:
            pass
        self._record(lineno, raw)

    def _record(self, lineno: int, raw: bytes):
        for record in self.decoder.decode(lineno, raw):
            self.acc.add(record)


def _text(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _what(obj) -> str:
    kind = obj.get("type")
    disc = r.DISCRIMINATORS.get(kind)
    variant = obj.get(disc) if disc else None
    return f"{kind} {variant}" if isinstance(variant, str) else str(kind)


def assemble(path: str, acc: Accumulator, complete: bool, truncated: bool = False,
             warnings=()) -> Profile:
    """The frozen Profile of what `acc` kept; its summary the file's own when it fits, else
    computed."""
    k = acc.kept
    profile = Profile(
        path=path, header=with_settings(k.header or r.Header(schema=r.SCHEMA_VERSION),
                                        k.events),
        summary=Summary(),
        steps=tuple(k.steps),
        windows=tuple(k.windows), exemplars=tuple(k.slow) + tuple(k.sampled.values()),
        ops=tuple(k.ops), programs=dict(k.programs), system=tuple(k.system), gpu=tuple(k.gpu),
        workers=tuple(k.workers), sample_windows=tuple(k.sample_windows),
        events=tuple(k.events), probes=dict(k.probes), reader=tuple(k.reader),
        memory=tuple(k.memory), sched=tuple(k.sched), complete=complete,
        truncated=truncated, warnings=tuple(warnings))
    summary = k.summary if isinstance(k.summary, Summary) else summarize(profile)
    object.__setattr__(profile, "summary", summary)
    return profile


def with_settings(header: r.Header, events) -> r.Header:
    """The header with its env.flags as the job ran: updated by the last SettingsEvent (the
    settings the script changed before its first training step ended)."""
    changed = [e for e in events if isinstance(e, r.SettingsEvent)]
    flags = header.env.flags
    if not changed or flags is None:
        return header
    return replace(header, env=replace(header.env, flags={**flags, **changed[-1].flags}))


__all__ = ["LineDecoder", "ProfileError", "assemble", "from_records", "kind_of", "load"]
