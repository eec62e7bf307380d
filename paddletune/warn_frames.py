"""A warning the framework raises about the script's call is attributed to the script's frame,
as under `python SCRIPT`, not to the profiler's wrapper around the framework's function.

`warnings.warn(msg, stacklevel=2)` names the frame that called the function that warns. The
PyTorch and Paddle sources wrap some of the framework's functions (a DataLoader's `__init__`
and `__iter__`, its iterator's `__init__`), so the frame at that level became the wrapper's:
PyTorch's "'pin_memory' argument is set as true but no accelerator is found" read
`paddletune/sources/torch/hooks.py:320`, and a script's filter on the warning's module
(`warnings.filterwarnings(..., module=r"torch\\.utils\\.data\\.dataloader")`) no longer matched
it. While the script runs, `warnings.warn` counts its stack levels without paddletune's
frames, as Python 3.12's `skip_file_prefixes` does; a warning whose caller is paddletune's
own keeps that frame. A framework's C code warning through the C API, or code that bound
`warn` before the session began, is not covered.
"""

import os
import sys
import warnings
from contextlib import contextmanager

OURS = os.path.dirname(os.path.abspath(__file__)) + os.sep  # paddletune's files


def _frames_skipped(stacklevel: int) -> int:
    """paddletune's frames between the frame that called `warn` (two levels up from here)
    and the frame `stacklevel` names, not counting the caller itself."""
    try:
        frame = sys._getframe(2)
    except ValueError:
        return 0
    skipped, level = 0, stacklevel
    while level > 1 and frame is not None:
        frame = frame.f_back
        if frame is not None and frame.f_code.co_filename.startswith(OURS):
            skipped += 1
        else:
            level -= 1
    return skipped


@contextmanager
def script_frames():
    """While the script runs: warnings.warn skips paddletune's frames (then put back, unless
    the script replaced it meanwhile)."""
    real = warnings.warn

    def warn(message, category=None, stacklevel=1, source=None, **kwargs):
        if isinstance(stacklevel, int) and stacklevel > 1:
            stacklevel += _frames_skipped(stacklevel)
        return real(message, category, stacklevel + 1, source, **kwargs)

    warn.__wrapped__ = real
    warnings.warn = warn
    try:
        yield
    finally:
        if warnings.warn is warn:
            warnings.warn = real
