"""Where profiles go: ./paddletune-runs/<time>-<script>.jsonl, and the newest one there."""

import os
import time
from pathlib import Path

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


def latest(runs_dir=RUNS_DIR) -> Path:
    """The newest profile in `runs_dir`, or ProfileError saying how to make one."""
    runs = sorted(Path(runs_dir).glob("*.jsonl"), key=lambda p: p.stat().st_mtime)
    if not runs:
        raise ProfileError(f"no profile found in ./{runs_dir}/; make one with "
                           f"`paddletune profile train.py` or pass a profile path")
    return runs[-1]
