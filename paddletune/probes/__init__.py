"""Probes: each measures one thing about the running job and sends records to the profile.

Every probe has `start()`, `stop() -> dict` (its result, which includes `overhead_s`, the time
it spent measuring), `snapshot()` (live figures for the dashboard) and `available` (with a
`reason` when not). A missing metric or device is a value (None / N/A), never an exception.
Probes import the runtime's event channels and psutil/pynvml; never advisors or rich.
"""
