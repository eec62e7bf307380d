"""The `paddletune flags` view: FLAGS rows picked from the registry, as a rich table or JSON.

The caller passes the registry (any iterable of `runtime.flags.Flag`), so importing this
module never reads the FLAGS_* environment. A row is a plain dict, the same one `--json`
prints: name, type, value, default, source, changed, active, valid, doc.
"""

import difflib
import json
from typing import Iterable, List, Optional

from rich.console import Console
from rich.table import Table
from rich.text import Text

ENV_PREFIX = "FLAGS_"  # runtime.flags.PREFIX: the environment variable is FLAGS_<name>
_ANY = {bool: "true or false", int: "any integer", float: "any number", str: "any text"}
LEGEND = ("active: used by this runtime. recorded: validated and stored, takes effect in "
           "a later release. Set a flag with FLAGS_<name>=<value> in the environment or "
           "fluid.set_flags({'FLAGS_<name>': value}).")


def select(flags: Iterable, pattern: Optional[str] = None, changed: bool = False) -> List[dict]:
    """Rows for flags whose name contains pattern (any case); if changed, only non-default ones."""
    needle = (pattern or "").lower()
    rows = [row(f) for f in flags if needle in (ENV_PREFIX + f.name).lower()]
    return [r for r in rows if r["changed"]] if changed else rows


def row(flag) -> dict:
    """The JSON-ready description of one flag."""
    return {
        "name": ENV_PREFIX + flag.name,
        "type": flag.type.__name__,
        "value": flag.value,
        "default": flag.default,
        "source": flag.source,  # default | env | set_flags
        "changed": flag.value != flag.default,
        "active": bool(flag.implemented),  # False: recorded, takes effect in a later release
        "valid": flag.valid or _ANY.get(flag.type, ""),
        "doc": flag.doc,
    }


def suggest(flags: Iterable, pattern: str) -> str:
    """' (did you mean FLAGS_x?)' for the flag name closest to pattern, or ''."""
    names = [ENV_PREFIX + f.name for f in flags]
    lowered = {n.lower(): n for n in names}
    close = difflib.get_close_matches(pattern.lower(), lowered, n=1, cutoff=0.5)
    return f" (did you mean {lowered[close[0]]}?)" if close else ""


def to_json(rows: List[dict]) -> str:
    return json.dumps(rows, indent=2)


def print_flags(rows: List[dict], console: Optional[Console] = None, changed_only=False):
    """Print the table (plain text without colours when the output is not a terminal)."""
    console = console or Console()
    if not rows:
        console.print("No flag differs from its default." if changed_only else "No flags.")
        return
    console.print(flags_table(rows))
    console.print(Text(LEGEND, style="dim"))


def flags_table(rows: List[dict]) -> Table:
    """Three columns, so that the longest name and a readable doc fit in 80 columns."""
    table = Table(show_lines=True)
    table.add_column("Flag")
    table.add_column("Value")
    table.add_column("Status", no_wrap=True)
    for r in rows:
        table.add_row(_flag_cell(r), _value_cell(r), _status_cell(r))
    return table


def _flag_cell(r) -> Text:
    text = Text()  # styles go on the parts: a Text's own style would cover everything appended
    text.append(r["name"], style="bold")
    text.append(f"\n{r['type']}, {r['valid']}", style="dim")
    text.append(f"\n{r['doc']}")
    return text


def _value_cell(r) -> Text:
    text = Text()
    text.append(_show(r["value"]), style="bold" if r["changed"] else "")
    if r["source"] == "default":
        text.append("\ndefault", style="dim")
    else:
        text.append(f"\nfrom {r['source']}\ndefault {_show(r['default'])}", style="dim")
    return text


def _status_cell(r) -> Text:
    return Text("active", style="green") if r["active"] else Text("recorded", style="yellow")


def _show(value) -> str:
    return '""' if value == "" else str(value)
