"""docs/profile-format.md, generated from the record and summary classes themselves (their
annotations and the "Fields:" part of their docstrings), so the documented format cannot
drift from the code: `python -m paddletune.profile.docs > docs/profile-format.md`, and a test
fails when the file and the classes disagree."""

import re
import sys
import typing
from typing import Annotated, Dict, List, Tuple

from . import figures as F
from . import records as r
from .schema import (Bytes, Count, Id, JsonValue, Number, Percent, Seconds, Share, TimeS,
                     is_record, record_fields)

UNITS = {Seconds: "seconds", TimeS: "seconds since t0", Bytes: "bytes", Count: "count",
         Id: "id", Share: "share", Percent: "percent", Number: "number"}
BASIC = {bool: "bool", int: "int", float: "number", str: "string", JsonValue: "JSON"}

INTRO = """# The profile format (schema 2)

This page is generated from the record classes (`paddletune/profile/records.py` and
`paddletune/profile/figures.py`): `python -m paddletune.profile.docs > docs/profile-format.md`.
A test fails when it and the classes disagree.

A profile is one JSON Lines file (`.jsonl`). Each line is one record: a JSON object whose
`"type"` names its kind; the kinds with variants also carry a discriminator (an event's
`"kind"`, a reader, memory or scheduler record's `"what"`, a sample's `"probe"`). The first
line is always the header; a finished job's last line is its summary. Every `t_s` counts
seconds from the session clock's zero, which the header's `t0_unix_s` places in Unix time.

A long job stays small: each program's first `options.head_steps` steps are written in full,
then its steps are aggregated into `window` records (one per window of time; a window lasts
a 256th of the run so far, between 1 s and 5 min), with the slowest of those steps and a
reservoir sample of them still written in full (`exemplar`). A probe's samples after its
first 240, and a DataLoader's reader intervals after its first 240, are aggregated the same
way. So a profile grows with the logarithm of the job's length, not with its steps.

Reading rules (`paddletune.profile.load`): the header must fit its class; any other record
that does not fit (a wrong type, a missing field, a NaN where a number is required) is
skipped with one warning per kind naming the line and the field; a record type this version
does not know is skipped with one warning; a NaN or infinity in an optional number reads as
absent; fields a class does not know are ignored. Optional fields (those with a default) are
left out of the file when they hold their default. Schema-1 profiles (paddletune before this
format) are converted as they are read.

Types: *seconds* (a duration), *seconds since t0* (a time), *bytes*, *count*, *id*, *share*
(a fraction: 1.0 is all of it), *percent* (100 is one core or all of a GPU), *number* (any
finite number); `[T]` an array, `{K: T}` an object (JSON keys are strings: integer keys are
written as decimal strings), `T or null` optional. Rows marked *(array)* are written as JSON
arrays of their fields in order.
"""


def field_docs(cls) -> Dict[str, str]:
    """{field: its description} from the "Fields:" part of a class's docstring."""
    doc = cls.__doc__ or ""
    if "Fields:" not in doc:
        return {}
    out, current = {}, None
    for line in doc.split("Fields:", 1)[1].splitlines():
        match = re.match(r"^\s{4,8}(\w+)\s{2,}(.*)$", line)
        if match and len(line) - len(line.lstrip()) <= 8:
            current = match.group(1)
            out[current] = match.group(2).strip()
        elif current and line.strip():
            out[current] += " " + line.strip()
    return out


def summary_line(cls) -> str:
    doc = (cls.__doc__ or "").split("Fields:")[0]
    return " ".join(line.strip() for line in doc.strip().splitlines())


def type_name(tp) -> str:
    """A field's type in the words of this page."""
    for alias, name in UNITS.items():
        if tp == alias:
            return name
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Annotated:
        return type_name(args[0])
    if tp in BASIC:
        return BASIC[tp]
    if origin is typing.Union:
        options = [a for a in args if a is not type(None)]
        if all(a in BASIC for a in options) and len(options) > 1:
            return "scalar (bool, number or string)" + (" or null" if len(options) < len(args)
                                                       else "")
        return type_name(options[0]) + " or null"
    if origin is typing.Literal:
        return "one of " + ", ".join(f"`{a}`" for a in args)
    if origin in (tuple, Tuple):
        if len(args) == 2 and args[1] is Ellipsis:
            return f"[{type_name(args[0])}]"
        return "[" + ", ".join(type_name(a) for a in args) + "]"
    if origin in (dict, Dict, typing.Mapping) or str(origin).endswith("Mapping'>"):
        return f"{{{type_name(args[0])}: {type_name(args[1])}}}"
    if is_record(tp):
        return f"[{tp.__name__}](#{tp.__name__.lower()})"
    return str(tp)


def describe(cls) -> List[str]:
    """A class's section: what it is, how it is written, its fields."""
    kind = getattr(cls, "KIND", None)
    disc = r.DISCRIMINATORS.get(kind) if kind else None
    lines = [f"### {cls.__name__}", "", summary_line(cls), ""]
    if kind:
        how = f'`"type": "{kind}"`'
        if disc and hasattr(cls, "WHAT"):
            how += f', `"{disc}": "{cls.WHAT}"`'
        elif disc:
            how += f", `\"{disc}\"` as below"
        lines += [f"Written as a line with {how}.", ""]
    elif getattr(cls, "JSON_ARRAY", False):
        lines += ["Written as an array of its fields in order *(array)*.", ""]
    docs = field_docs(cls)
    lines += ["| field | type | default | meaning |", "|---|---|---|---|"]
    for f in record_fields(cls):
        default = "required" if f.required else f"`{_show(f.default)}`"
        lines.append(f"| `{f.name}` | {type_name(f.annotation)} | {default} | "
                     f"{docs.get(f.name, '').replace('|', '/')} |")
    return lines + [""]


def _show(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, tuple)) and not value:
        return "{}" if isinstance(value, dict) else "[]"
    if is_record(type(value)):
        return "{...}"
    return repr(value)


def nested(roots) -> list:
    """Every record class reachable from `roots` through field annotations, roots first."""
    seen, order = set(), []

    def visit(tp):
        if is_record(tp):
            if tp in seen:
                return
            seen.add(tp)
            order.append(tp)
            for f in record_fields(tp):
                visit(f.annotation)
            return
        for arg in typing.get_args(tp):
            visit(arg)
    for root in roots:
        visit(root)
    return order


def document() -> str:
    lines = [INTRO, "## Records", ""]
    records = nested(r.RECORDS)
    for cls in records:
        lines += describe(cls)
    lines += ["## The summary", "",
              summary_line(F).replace("typed classes", "the classes below"), ""]
    for cls in nested([F.Summary]):
        if cls not in records:
            lines += describe(cls)
    return "\n".join(lines).rstrip() + "\n"


def main():
    sys.stdout.write(document())


if __name__ == "__main__":
    main()
