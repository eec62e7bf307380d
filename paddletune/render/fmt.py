"""Number formatting shared by the report's sections: ms, shares, bytes, durations, bars."""

import math

from rich import box
from rich.table import Table

BAR_WIDTH = 24  # characters for a 100% share
_EIGHTHS = " ▏▎▍▌▋▊▉"
NA = "—"


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
    """A two-column table without borders: bold labels, then values; `title` above it."""
    table = Table(box=None, show_header=False, pad_edge=False, title=title,
                  title_justify="left", title_style="bold")
    table.add_column(style="bold", no_wrap=True)
    table.add_column()
    table.add_row(first_label, first_value)
    return table


def plain_table(*columns, title=None) -> Table:
    """A table with a header rule only; the first column left-aligned, the rest right."""
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, title=title,
                  title_justify="left", title_style="bold")
    for i, name in enumerate(columns):
        table.add_column(name, justify="left" if i == 0 else "right")
    return table
