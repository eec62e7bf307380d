"""Follow a profile file while another thread or process appends to it (like `tail -f`).

Each `poll()` reads what was appended since the last one and returns the complete lines as
typed records (paddletune.profile.records), decoded by the loader's own `LineDecoder`. A
partial last line (the writer is mid-write) waits for its newline. A file that does not
exist yet is waited for; one that shrinks or is replaced (a new run writing the same path) is
read again from its start, and `restarted` counts it.

The dashboard must not die on a bad line: a line `load()` would refuse (not JSON, a bad
header) is skipped, counted in `bad_lines` and its message kept in `problem`; a record that
does not fit its class, or of a kind this version does not know, is skipped as the loader
skips it (`warnings()`).
"""

import os
from pathlib import Path
from typing import List, Optional

from ..profile.load import LineDecoder, ProfileError

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
        self.problem: Optional[str] = None  # the first bad line's message
        self.n_records = 0
        self.lineno = 0
        self.at_end = False  # the last poll read everything there was
        self._start_session()

    def _start_session(self):
        """What one file's reading carries from line to line (reset when it is rewritten)."""
        self.decoder = LineDecoder(str(self.path))
        self.lineno = 0

    @property
    def schema(self):
        return self.decoder.schema

    def warnings(self) -> List[str]:
        return self.decoder.warnings()

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

    def moved_to(self, path):
        """The followed file took a new name (a profile written beside an earlier one is
        renamed over it when complete): go on reading it there, from where reading stopped."""
        path = Path(path)
        if path != self.path and not self.path.exists() and path.exists():
            self.path = path

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
            records += self._records_of(line)
        self.n_records += len(records)
        return records

    def _records_of(self, line: bytes) -> List:
        """The typed records of one line ([] for a bad or skipped one, counted)."""
        self.lineno += 1
        try:
            return self.decoder.decode(self.lineno, line)
        except ProfileError as err:
            self.bad_lines += 1
            self.problem = self.problem or str(err)
            return []
