"""Exporters: a loaded profile written in other tools' formats (Chrome trace / Perfetto)."""

from .chrome import json_safe, to_chrome_trace, write_chrome_trace

__all__ = ["json_safe", "to_chrome_trace", "write_chrome_trace"]
