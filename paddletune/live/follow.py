"""Follow a profile file while another thread or process appends to it (like `tail -f`).

Each `poll()` reads what was appended since the last one and returns the complete lines as
typed records (paddletune.profile.records), as the loader reads them: each line's JSON
through `codec.from_json`, a step's omitted rarely changing fields filled in by a
`codec.StepFiller`, and the records of an old profile (a schema-1 header) converted first
(`profile.v1`). A partial last line (the writer is mid-write) waits for its newline. A file
that does not exist yet is waited for; one that shrinks or is replaced (a new run writing the
same path) is read again from its start, and `restarted` counts it.

The dashboard must not die on a bad line (`load()` is the strict reader): a line that is not
a JSON record, or a record that does not fit its class, is skipped and counted in
`bad_lines`; a record type this version does not know (a newer writer's) is skipped and
counted in `unknown` by its type.
"""

import json
import os
from collections import Counter
from pathlib import Path
from typing import List

from ..profile import records as r
from ..profile import v1
from ..profile.codec import StepFiller, UnknownRecord, from_json
from ..profile.schema import SchemaError

MAX_READ_BYTES = 8 << 20  # per poll: a huge finished profile is read in several polls


class Follower:
    def __init__(self, path):
        self.path = Path(path)
        self.offset = 0  # bytes consumed (complete lines and the partial tail held below)
        self._partial = b""
        self._inode = None
        self.exists = False
        self.restarted = 0
        self.bad_lines = 0
        self.unknown: Counter = Counter()  # record type -> lines skipped
        self.n_records = 0
        self.at_end = False  # the last poll read everything there was
        self._start_session()

    def _start_session(self):
        """What one file's reading carries from line to line (reset when it is rewritten)."""
        self.schema = None  # the header's schema version, once read
        self._filler = StepFiller()

    def poll(self) -> List:
        """The records appended since the last poll (possibly none)."""
        try:
            with open(self.path, "rb") as f:
                st = os.fstat(f.fileno())
                self._check_restart(st)
                f.seek(self.offset)
                data = f.read(MAX_READ_BYTES)
        except FileNotFoundError:
            self.exists, self.at_end = False, True
            return []
        self.exists = True
        self.offset += len(data)
        self.at_end = self.offset >= st.st_size
        return self._parse(data)

    def _check_restart(self, st):
        if self._inode is not None and (st.st_ino != self._inode or st.st_size < self.offset):
            self.offset, self._partial = 0, b""
            self.restarted += 1
            self._start_session()
        self._inode = st.st_ino

    def _parse(self, data: bytes) -> List:
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()  # b"" when the data ended with a newline
        records = []
        for line in lines:
            if line.strip():
                records += self._records_of(line)
        self.n_records += len(records)
        return records

    def _records_of(self, line: bytes) -> List:
        """The typed records of one line ([] for a bad or unknown one, counted)."""
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError):
            self.bad_lines += 1
            return []
        if not isinstance(obj, dict) or not isinstance(obj.get("type"), str):
            self.bad_lines += 1
            return []
        if obj["type"] == "header":
            self._new_header(obj)
        objects = v1.convert(obj) if self.schema == 1 else [obj]
        return [record for record in map(self._typed, objects) if record is not None]

    def _new_header(self, obj: dict):
        """A header starts a new stream: its schema decides how the lines after it read."""
        schema = obj.get("schema")
        self._start_session()
        self.schema = schema if isinstance(schema, int) and not isinstance(schema, bool) \
            else None

    def _typed(self, obj):
        try:
            record = from_json(obj)
        except UnknownRecord:
            self.unknown[str(obj["type"])] += 1
            return None
        except SchemaError:
            self.bad_lines += 1
            return None
        return self._filler.fill(record) if isinstance(record, r.Step) else record
