"""Follow a profile file while another thread or process appends to it (like `tail -f`).

Each `poll()` reads what was appended since the last one and returns the complete lines as
records; a partial last line (the writer is mid-write) waits for its newline. A file that
does not exist yet is waited for; one that shrinks or is replaced (a new run writing the
same path) is read again from its start, and `restarted` counts it. A line that is not a
JSON record is skipped and counted in `bad_lines` (the dashboard must not die on it; `load()`
is the strict reader).
"""

import json
import os
from pathlib import Path
from typing import List

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
        self.n_records = 0
        self.at_end = False  # the last poll read everything there was

    def poll(self) -> List[dict]:
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
        self._inode = st.st_ino

    def _parse(self, data: bytes) -> List[dict]:
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()  # b"" when the data ended with a newline
        records = []
        for line in lines:
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError:
                self.bad_lines += 1
                continue
            if isinstance(record, dict) and "type" in record:
                records.append(record)
            else:
                self.bad_lines += 1
        self.n_records += len(records)
        return records
