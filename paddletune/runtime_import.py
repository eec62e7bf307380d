"""Importing the runtime as a command should: before anything else of paddletune that imports
it (the probes do), so that a bad FLAGS_* value in the environment is one line the command
can print, and each unknown-flag warning is collected once instead of printed by Python."""

import sys
import warnings


class BadFlag(Exception):
    """A FLAGS_* environment variable holds an invalid value (the message names it and the
    fix)."""


def import_runtime():
    """(the `runtime` module, [warning messages, each once]); BadFlag for an invalid FLAGS_*
    value. Importing it reads the FLAGS_* environment once per process."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            import runtime
        except Exception as err:
            errors = sys.modules.get("runtime.errors")  # imported before the flags are read
            if errors is None or not isinstance(err, errors.FlagError):
                raise
            raise BadFlag(str(err)) from None
    return runtime, list(dict.fromkeys(str(w.message) for w in caught))
