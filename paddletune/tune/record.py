"""The tuning record: one JSON file (`paddletune-runs/<time>-<script>.tune.json`) with the
space, every trial, the ranking, the winning setting as exports and code, and the speedup.

It is rewritten after every trial, so an interrupted or killed tuning leaves what it
measured. `paddletune report FILE.tune.json` renders it (render/tune.py).

Schema 2: a trial's and a ranking row's `no_effect` lists the requested overrides that
changed nothing as objects {section, key, code, why} (schema 1: "section.key: why" strings);
a trial's `batch_model` is the profile's figures.ModelFigures as JSON. A ranking row scores
its setting over all its good trials (`trials` of them) and, above the best, says why the
search did not take it (`above_best`); older records scored one trial and have neither.
A trial's `end_s` is when it ended, seconds since the tuning started. `final` (the speedup,
compare.speedup) says what it rests on: `basis` "final pairs" (interleaved, `pairs` of them)
or "search trials" (no final pair ran; `no_pairs` says why: "budget", "interrupted",
"failed"), `baseline_trials` and `best_trials` the indices of the trials it is over;
`confirmed` is true only where final pairs put the gain outside the noise, and
`outside_noise` says whether these trials do. Older records have none of these but the
indices (their trials' phase tells the basis: render/tune.py) and called a speedup from the
search's trials confirmed when it was outside their noise.
"""

import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from runtime.atomic import atomic_write

from ..profile import RUNS_DIR, new_run_path
from . import advice_check
from . import space as sp
from .compare import Z, mean

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
    """One row per setting tried, best first, failures last. A setting that ran is scored
    over all its good trials (the races' and the final pairs', step-weighted, as the search
    compares settings), not over one of them: one lucky short trial does not outrank a
    setting measured six times. `trials`: how many; `ci`: the 95% interval of that mean;
    `vs_baseline`: against the baseline's good trials alike. A row above the best setting
    says why the search did not take it (`above_best`)."""
    trials: Dict[str, list] = {}
    for t in tuner.trials:
        trials.setdefault(sp.key(t.setting), []).append(t)
    base = [t for t in trials.get(sp.key({}), []) if t.ok]
    best_key = sp.key(tuner.incumbent)
    best = [t for t in trials.get(best_key, []) if t.ok]
    scored = [_row(tuner, [t for t in runs if t.ok] or runs[-1:], base, best_key)
              for runs in trials.values()]
    scored.sort(key=lambda pair: (pair[0]["status"] != "ok", -pair[1]))
    rows = [row for row, _ in scored]
    above = bool(best)  # (rows before the best's)
    for r in rows:
        above = above and not r["best"]
        if above and r["status"] == "ok":
            r["above_best"] = _above_best(tuner, trials[sp.key(r["setting"])], best)
    return rows


def _row(tuner, runs, base, best_key) -> Tuple[dict, float]:
    """The ranking's row of one setting, and its score: `runs` its good trials (else its
    last trial)."""
    last = max(runs, key=lambda t: (t.steps, t.index))
    row = {"setting": last.setting, "label": last.label, "status": _status(tuner, last),
           "samples_per_s": None, "ci": None, "vs_baseline": None, "trials": len(runs),
           "peak_bytes": last.peak_bytes, "steps": last.steps, "trial": last.index,
           "message": last.message, "no_effect": [asdict(idle) for idle in last.no_effect],
           "best": sp.key(last.setting) == best_key, "above_best": None}
    if not last.ok:
        return row, 0.0
    rate = mean(runs)
    row.update(samples_per_s=rate, ci=Z * tuner.mean_sd(runs) * rate,
               vs_baseline=rate / mean(base) - 1 if base else None,
               peak_bytes=max((t.peak_bytes for t in runs if t.peak_bytes is not None),
                              default=None))
    return row, tuner.score_of(runs)


def _above_best(tuner, runs, best) -> str:
    """Why a setting measured above the best was not taken: the budget or Ctrl-C stopped
    its race while it was still in it, measured in it; its trials do not beat the best's
    outside the noise; or they do, though it did not win its own race (the trials since
    moved the figures)."""
    runs = [t for t in runs if t.ok]
    counts = f"{len(runs)} trial{'s' * (len(runs) != 1)} against the best's {len(best)}"
    key = sp.key(runs[0].setting)
    if key in tuner.race_alive and tuner.race_runs.get(key):
        return f"{counts}: its race did not finish ({tuner.stop_reason})"
    if not tuner.better(runs, best):
        return f"{counts}: inside the noise"
    return (f"{counts}: better than the best's trials outside the noise, though it did not "
            f"win its own race; measure both longer before relying on either")


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
