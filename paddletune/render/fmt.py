"""Formatting shared by the report's sections: ms, shares, bytes, durations, bars, and
`clean()` for the text a profile brings (names, messages) before it reaches a terminal."""

import math
import re
from typing import Iterable, Tuple

from rich import box
from rich.table import Table
from rich.text import Text

BAR_WIDTH = 24  # characters for a 100% share
_EIGHTHS = " ▏▎▍▌▋▊▉"
NA = "—"
# C0 controls but tab and newline, DEL and the C1 controls: what a terminal acts on
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def clean(text) -> str:
    """`text` (any value) as a string safe to print on a terminal: each control character
    but newline and tab (ESC, BEL, CSI, ...) is shown as its escape, `\\x1b`, so text read
    from a profile can neither move the cursor, retitle the window nor clear the screen."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", str(text))


def finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def ms(seconds) -> str:
    return f"{seconds * 1e3:,.2f}" if finite(seconds) else NA


def pct(share, digits=1) -> str:
    return f"{share:.{digits}%}" if finite(share) else NA


def pct0(percent) -> str:
    return f"{percent:.0f}%" if finite(percent) else NA


def num(x) -> str:
    return f"{x:,.0f}" if finite(x) else NA


def nbytes(n) -> str:
    if not finite(n):
        return NA
    for unit, size in (("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


def duration(seconds) -> str:
    if not finite(seconds):
        return NA
    if seconds < 1:
        return f"{seconds * 1e3:.0f} ms"
    if seconds < 60:
        return f"{seconds:.2f} s"
    minutes, rest = divmod(seconds, 60)
    return f"{minutes:.0f} min {rest:.0f} s" if minutes < 60 else f"{seconds / 3600:.1f} h"


def bar(share, width: int = BAR_WIDTH) -> str:
    """A text bar of `share` (0..1) in eighths of a block."""
    if not finite(share) or share <= 0:
        return ""
    eighths = int(round(min(share, 1.0) * width * 8))
    return "█" * (eighths // 8) + _EIGHTHS[eighths % 8].strip()


def label_table(title, first_label, first_value) -> Table:
    """A two-column table without borders: bold labels, then values; `title` above it.
    Titles and values are plain text (never rich markup): a name in them is shown as is."""
    table = Table(box=None, show_header=False, pad_edge=False, title=plain(title),
                  title_justify="left", title_style="bold")
    table.add_column(style="bold", no_wrap=True)
    table.add_column()
    table.add_row(plain(first_label), plain(first_value))
    return table


def add_rows(table: Table, rows: Iterable[Tuple[str, str]]):
    """Add the (label, value) rows whose value is not empty, as plain text."""
    for label, value in rows:
        if value:
            table.add_row(plain(label), plain(value))


def plain(text) -> Text:
    """`text` as a rich Text, so that brackets in it are never read as markup; cleaned."""
    return text if isinstance(text, Text) else Text(clean(text))


def plain_table(*columns, title=None) -> Table:
    """A table with a header rule only; the first column left-aligned, the rest right."""
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, title=title,
                  title_justify="left", title_style="bold")
    for i, name in enumerate(columns):
        table.add_column(name, justify="left" if i == 0 else "right")
    return table


def add_cells(table: Table, cells: Iterable):
    """Add one row of plain-text cells (see plain())."""
    table.add_row(*(plain(c) for c in cells))
