"""The tuning record: one JSON file (`paddletune-runs/<time>-<script>.tune.json`) with the
space, every trial, the ranking, the winning setting as exports and code, and the speedup.

It is rewritten after every trial, so an interrupted or killed tuning leaves what it
measured. `paddletune report FILE.tune.json` renders it (render/tune.py).

Schema 2: a trial's and a ranking row's `no_effect` lists the requested overrides that
changed nothing as objects {section, key, code, why} (schema 1: "section.key: why" strings);
a trial's `batch_model` is the profile's figures.ModelFigures as JSON.
"""

import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import List, Optional

from runtime.atomic import atomic_write

from ..profile import RUNS_DIR, new_run_path
from . import advice_check
from . import space as sp

KIND = "paddletune-tune"
SCHEMA_VERSION = 2
SUFFIX = ".tune.json"


class RecordError(Exception):
    """Not a readable tuning record."""


def default_path(script: str, runs_dir=RUNS_DIR) -> Path:
    """./paddletune-runs/<time>-<script>.tune.json, created empty and exclusively so that two
    tunings started in the same second never share it (profile.new_run_path)."""
    return new_run_path(script, SUFFIX, runs_dir)


def build(tuner, command: dict, options: dict) -> dict:
    """The record of `tuner` as it stands."""
    space = tuner.space or sp.Space()
    best = tuner.incumbent
    return {"type": KIND, "schema": SCHEMA_VERSION,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "command": command, "options": options, "status": tuner.status,
            "stop_reason": tuner.stop_reason, "elapsed_s": tuner.elapsed_s(),
            "space": space.to_dict(), "notes": list(dict.fromkeys(tuner.notes)),
            "trials": [t.to_dict() for t in tuner.trials],
            "ranking": ranking(tuner),
            "best": {"setting": best, "label": sp.label(best),
                     "exports": sp.exports(best, space) if tuner.space else [],
                     "code": sp.code_lines(best, space) if tuner.space else []},
            "final": tuner.final,
            "advice": advice_check.rows(tuner)}


def ranking(tuner) -> List[dict]:
    """One row per setting tried: its longest successful measurement (or its failure), best
    first; failures last."""
    rows = {}
    for t in tuner.trials:
        k = sp.key(t.setting)
        row = rows.get(k)
        if row is None or _prefer(t, row):
            rows[k] = t
    ordered = sorted(rows.values(), key=lambda t: (_status(tuner, t) != "ok",
                                                  -(tuner.score(t) if t.ok else 0.0)))
    best_key = sp.key(tuner.incumbent)
    base = tuner.first_baseline()
    return [{"setting": t.setting, "label": t.label, "status": _status(tuner, t),
             "samples_per_s": t.samples_per_s, "peak_bytes": t.peak_bytes,
             "ci": 1.96 * tuner.trial_sd(t) * t.samples_per_s if t.ok else None,
             "steps": t.steps, "trial": t.index, "message": t.message,
             "no_effect": [asdict(idle) for idle in t.no_effect],
             "vs_baseline": (t.samples_per_s / base.samples_per_s - 1)
             if t.ok and base is not None else None,
             "best": sp.key(t.setting) == best_key} for t in ordered]


def _prefer(t, row) -> bool:
    if t.ok != row.ok:
        return t.ok
    return (t.steps, t.index) >= (row.steps, row.index)


def _status(tuner, t) -> str:
    if t.status == "ok" and t.no_effect:
        return "no effect"
    if t.status == "ok" and not tuner.fits(t):
        return "too full"  # ran, but left less than the memory headroom free
    return t.status


def save(record: dict, path) -> Path:
    """Write atomically and durably (fsync before the rename): a reader never sees half a
    record, nor does a crash leave one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(record, indent=1, default=str) + "\n"
    atomic_write(path, lambda f: f.write(text.encode("utf-8")))
    return path


def is_record(path) -> bool:
    """True for a file that looks like a tuning record (by its name, or its first bytes)."""
    path = Path(path)
    if path.name.endswith(SUFFIX):
        return True
    try:
        with open(path, "rb") as f:
            head = f.read(512)
    except OSError:
        return False
    return head.lstrip().startswith(b"{") and f'"type": "{KIND}"'.encode() in head


def load(path) -> dict:
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RecordError(f"no such tuning record: {path}") from None
    except (OSError, ValueError) as err:
        if path.is_file() and path.stat().st_size == 0:
            err = "it is empty (a tuning writes it when its first trial ends)"
        raise RecordError(f"cannot read the tuning record {path}: {err}") from None
    if not isinstance(data, dict) or data.get("type") != KIND:
        raise RecordError(f"{path} is not a paddletune tuning record")
    if (data.get("schema") or 0) > SCHEMA_VERSION:
        raise RecordError(f"{path} was written by a newer paddletune (tuning record schema "
                          f"{data.get('schema')}); upgrade paddletune to read it")
    return data


def best_row(record: dict) -> Optional[dict]:
    return next((r for r in record.get("ranking", []) if r.get("best")), None)
