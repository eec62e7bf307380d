"""The scripts of benchmarks/ loaded as modules (they are scripts, not a package)."""

import importlib.util
import os

BENCHMARKS = os.path.join(os.path.dirname(__file__), os.pardir, "benchmarks")


def load(script: str, name: str = ""):
    """benchmarks/`script` as a module named `name` (default: the script's own name)."""
    spec = importlib.util.spec_from_file_location(name or script[:-3],
                                                  os.path.join(BENCHMARKS, script))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
