"""Checks a GPU kernel makes without stopping the host: the kernel writes a flag on the device
(an out-of-range label, say), and the flag is read once the step's work is done.

Why: reading a value back (`int(label.max())`) waits for every kernel queued before it, and on a
small model's step, where the host is the bottleneck, each such wait costs 15-25 us and the
overlap of host and device (measured on an H100). Paddle's CUDA kernels check the same way: a
device-side assertion surfaces at the next synchronisation, not at the op.

A kernel calls `defer(op, flag, explain)`: `flag` is a device array whose first element is 0
when all is well; `explain(value)` gives the error's text from its value. The executor calls
`raise_pending()` right after the step's stream wait (runtime/executor.py) and `clear()` when a
step starts, so a failed step's checks never leak into the next. Per thread, as kernels run in
the executor's thread.
"""

import threading

from .errors import OpRuntimeError

_local = threading.local()


def _pending():
    pending = getattr(_local, "pending", None)
    if pending is None:
        pending = _local.pending = []
    return pending


def defer(op, flag, explain):
    """Check `flag` (a device array, 0 = fine) when the step's work is done."""
    _pending().append((op, flag, explain))


def clear():
    _pending().clear()


def snapshot():
    """The checks deferred so far (a captured step keeps its own: runtime/cuda_graph.py)."""
    return list(_pending())


def rearm(checks):
    """Defer `checks` again: a replayed graph wrote their flags anew."""
    _pending().extend(checks)


def raise_pending():
    """Read the deferred flags (the step's stream is idle: no wait) and raise the first failure
    as an OpRuntimeError naming its op."""
    pending = _pending()
    if not pending:
        return
    checks = list(pending)
    pending.clear()
    for op, flag, explain in checks:
        value = int(flag.reshape(-1)[0])
        if value:
            raise OpRuntimeError(
                f"op {op.type}{op.where()} failed (found when the step's GPU work finished): "
                f"ValueError: {explain(value)}")
