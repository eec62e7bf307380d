"""Where profiles go: ./paddletune-runs/<time>-<script>.jsonl, the newest one there, and where
a profile is written until it is complete (never over an earlier one)."""

import glob
import os
import stat
import time
from pathlib import Path
from typing import Optional

from .load import ProfileError

RUNS_DIR = "paddletune-runs"


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


def writing_path(path: Path) -> Path:
    """Where a profile (or log) for `path` is written while its job runs: `path` itself while
    it holds nothing, else `<name>.<pid>.part` beside it, renamed over `path` once complete
    (ProfileWriter's `final`), so an earlier profile there survives a run that is killed,
    fails to write, or is still going. A symbolic link at `path` is never written through."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        return path
    if stat.S_ISLNK(st.st_mode) or (stat.S_ISREG(st.st_mode) and st.st_size > 0):
        return path.with_name(f"{path.name}.{os.getpid()}.part")
    return path  # empty, or not a file at all (/dev/full, a pipe): written as it is


def output_problem(path: Path, what: str, example: str) -> Optional[str]:
    """Why `what` ("the profile") cannot be written at `path`, an --out checked before
    anything runs (a folder given, a folder that cannot be created, no write permission), or
    None; its folder is created. `example`: a file name to suggest inside a folder given."""
    if path.is_dir():
        return f"--out {path} is a directory; give a file name such as {path / example}"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        return (f"cannot write {what} {path}: its folder cannot be created "
                f"({err.strerror or err}); pass --out with a writable location")
    target = path if path.exists() else path.parent
    if not os.access(target, os.W_OK):
        return (f"cannot write {what}: {target} is not writable; pass --out with a writable "
                f"location")
    return None


def being_written(path: Path) -> Optional[Path]:
    """The `<name>.<pid>.part` beside `path` that a running job writes now (the newest, if
    several), or None. A killed run's part file stays beside the profile (its records up to
    the kill, readable by name); its pid runs no more, so it is not taken for a live one."""
    parts = []
    for part in path.parent.glob(f"{glob.escape(path.name)}.*.part"):
        pid = part.name[len(path.name) + 1:-len(".part")]
        if pid.isdigit() and _running(int(pid)):
            try:
                parts.append((part.stat().st_mtime, part))
            except OSError:  # renamed into place meanwhile
                continue
    return max(parts)[1] if parts else None


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # someone else's process
        return True
    return True


def replaceable(path: Path) -> bool:
    """Whether `path` may be renamed over: missing, a regular file or a symbolic link (never
    a device or a pipe)."""
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return True
    return stat.S_ISREG(mode) or stat.S_ISLNK(mode)


def open_new(path: Path):
    """`path` opened for writing text (created, or truncated when empty) without following a
    symbolic link planted there (OSError then)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags | getattr(os, "O_CLOEXEC", 0), 0o666)
    return os.fdopen(fd, "w", encoding="utf-8")


def latest(runs_dir=RUNS_DIR, starting: bool = False) -> Path:
    """The newest profile in `runs_dir`, or ProfileError saying how to make one. A profile
    still empty (its job is starting, or was killed before it wrote its header) is left
    out unless `starting` (`watch` follows a job from its first line)."""
    runs = []
    for path in Path(runs_dir).glob("*.jsonl"):
        try:
            st = path.stat()
        except OSError:  # removed meanwhile
            continue
        if starting or st.st_size > 0:
            runs.append((st.st_mtime, path))
    if not runs:
        raise ProfileError(f"no profile found in ./{runs_dir}/; make one with "
                           f"`paddletune profile train.py` or pass a profile path")
    return max(runs)[1]
