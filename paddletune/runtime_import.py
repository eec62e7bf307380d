"""Import the runtime the way a command should: first, before anything of paddletune that
imports it (the probes do), so that a bad FLAGS_* value in the environment becomes a one-line
error the command prints, and each warning of the import (an unknown FLAGS_* name) one line."""

import sys
import warnings


class BadFlag(Exception):
    """A FLAGS_* environment variable holds an invalid value (the message names it and the
    fix)."""


def import_runtime():
    """(the `runtime` module, [the import's warning messages, each once]); BadFlag for an
    invalid FLAGS_* value. The runtime reads the FLAGS_* environment when first imported."""
    with warnings.catch_warnings(record=True) as caught:
        try:
            import runtime
        except Exception as err:
            errors = sys.modules.get("runtime.errors")  # imported before the flags are read
            if errors is None or not isinstance(err, errors.FlagError):
                raise
            raise BadFlag(str(err)) from None
    return runtime, list(dict.fromkeys(str(w.message) for w in caught))


def import_runtime_or_say(say):
    """import_runtime(), each warning passed to `say` as a `paddletune: warning: ...` line;
    returns the module (BadFlag as import_runtime)."""
    runtime, messages = import_runtime()
    for message in messages:
        say(f"paddletune: warning: {message}")
    return runtime
