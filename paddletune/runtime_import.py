"""Import the runtime the way a command should: first, before anything of paddletune that
imports it (the probes do), so that a bad FLAGS_* value in the environment becomes a one-line
error the command prints, and each warning of the import (an unknown FLAGS_* name) one line."""

import os
import sys
import warnings


class BadFlag(Exception):
    """A FLAGS_* environment variable holds an invalid value (the message names it and the
    fix)."""


def import_runtime(hide_flags: bool = False):
    """(the `runtime` module, [the import's warning messages, each once]); BadFlag for an
    invalid FLAGS_* value. The runtime reads the FLAGS_* environment (and checks
    PADDLETUNE_OVERRIDES) when first imported; with `hide_flags` (a job of another framework:
    its FLAGS_* are that framework's, its overrides that framework's source's) it reads
    none of them."""
    hidden = _hide_flags() if hide_flags and "runtime" not in sys.modules else {}
    try:
        with warnings.catch_warnings(record=True) as caught:
            try:
                import runtime
            except Exception as err:
                errors = sys.modules.get("runtime.errors")  # imported before the flags are read
                if errors is None or not isinstance(err, errors.FlagError):
                    raise
                raise BadFlag(str(err)) from None
    finally:
        os.environ.update(hidden)
    return runtime, list(dict.fromkeys(str(w.message) for w in caught))


def _hide_flags() -> dict:
    """Take the FLAGS_* variables and PADDLETUNE_OVERRIDES out of the environment; {name:
    value} of those taken."""
    hidden = {k: v for k, v in os.environ.items()
              if k.startswith("FLAGS_") or k == "PADDLETUNE_OVERRIDES"}
    for name in hidden:
        del os.environ[name]
    return hidden


def import_runtime_or_say(say, hide_flags: bool = False):
    """import_runtime(), each warning passed to `say` as a `paddletune: warning: ...` line;
    returns the module (BadFlag as import_runtime)."""
    runtime, messages = import_runtime(hide_flags)
    for message in messages:
        say(f"paddletune: warning: {message}")
    return runtime
