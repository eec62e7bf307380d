"""Profiles written by paddletune before schema 2 (`"schema": 1`), converted on read: each v1
record is renamed into its v2 form (`t` -> `t_s`, `pass` -> `pass_no`, memory figures with
`_bytes`, a probe's `result` -> `details`, the memory probe's result -> a `memory pool`
record) and then read like any v2 record. A v1 summary record is not converted: the summary
is computed again from the records (it only marks the profile complete)."""

from typing import List

_TIME = {"t": "t_s", "t0": "t0_s", "pass": "pass_no"}
_MEMORY_BYTES = {"allocated": "allocated_bytes", "reserved": "reserved_bytes",
                 "step_peak": "step_peak_bytes", "peak_allocated": "peak_allocated_bytes",
                 "peak_reserved": "peak_reserved_bytes", "requested": "requested_bytes",
                 "capacity": "capacity_bytes", "peak": "peak_bytes", "free": "free_bytes"}
_POOL = {"capacity": "capacity_bytes", "peak_allocated": "peak_allocated_bytes",
         "peak_reserved": "peak_reserved_bytes", "allocated": "allocated_bytes",
         "reserved": "reserved_bytes", "cached_free": "cached_free_bytes"}
V1_SUMMARY = "summary"


def convert(record: dict) -> List[dict]:
    """The v2 JSON objects of one v1 record ([] for one with no v2 form)."""
    if not isinstance(record, dict):
        return [record]
    kind = record.get("type")
    if kind == "header":
        return [_header(record)]
    if kind == V1_SUMMARY:
        return []
    out = _renamed(record, _TIME)
    if kind == "event" and isinstance(out.get("inputs"), dict):  # {slot: [names]}
        out["inputs"] = _slot_names(out["inputs"])
    if kind == "memory":
        out = _renamed(out, _MEMORY_BYTES)
    elif kind == "probe":
        return _probe(out)
    return [out]


def _slot_names(slots: dict):
    """[names] of a {slot: [names]} mapping; the mapping itself (for the schema to reject)
    when it is not one."""
    if not all(isinstance(v, list) for v in slots.values()):
        return slots
    return [n for names in slots.values() for n in names]


def _renamed(record: dict, names: dict) -> dict:
    return {names.get(k, k): v for k, v in record.items()}


def _header(h: dict) -> dict:
    out = _renamed(h, {"t0_unix": "t0_unix_s"})
    out["schema"] = 2
    options = out.get("options")
    if isinstance(options, dict):
        out["options"] = {k: v for k, v in options.items() if k != "out"}
    return out


def _probe(p: dict) -> List[dict]:
    out = _renamed(p, {"result": "details"})
    result = p.get("result")
    if p.get("name") != "memory" or not isinstance(result, dict) or "capacity" not in result:
        return [out]
    pool = {"type": "memory", "what": "pool", "t_s": 0.0}
    pool.update({_POOL.get(k, k): v for k, v in result.items() if k != "rss"})
    return [pool, out]
