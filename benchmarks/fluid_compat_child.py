"""Runs one Paddle 1.8 test file against the runtime (benchmarks/fluid_compat.py's child).

    python fluid_compat_child.py TEST_FILE RESULT_JSON

Installs the `paddle` shim (runtime.compat), the synthetic `paddle.dataset`
(fluid_compat_data.py) and the names of their era the tests use that newer NumPy and Python
removed (np.product, np.alltrue, collections.Sequence, ...) and NumPy 1's float64 promotion
in assertAlmostEqual, imports the file as a module from its own folder (its sibling helper
modules import as they do in Paddle's CI), runs its unittest cases and rewrites RESULT_JSON
after every test: {"passed", "total", "skipped", "finished", "problems"}.
"""

import importlib.util
import json
import os
import sys
import traceback
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))


class Recorder(unittest.TextTestResult):
    """A TextTestResult that saves its counts after each test (a file that times out keeps
    the results of the tests it finished)."""

    out_path = None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.passed = 0
        self.problems = []

    def addSuccess(self, test):
        super().addSuccess(test)
        self.passed += 1

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self.passed += 1

    def addError(self, test, err):
        super().addError(test, err)
        self.problems.append(f"{_name(test)}: {_last_line(err)}")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self.problems.append(f"{_name(test)}: {_last_line(err)}")

    def stopTest(self, test):
        super().stopTest(test)
        self.save(finished=False)

    def save(self, finished):
        skipped = len(self.skipped)
        save(self.out_path, {"passed": self.passed, "total": self.testsRun - skipped,
                             "skipped": skipped, "finished": finished,
                             "problems": self.problems})


def _name(test):
    return test.id().split(".", 1)[-1]


def _last_line(err):
    lines = "".join(traceback.format_exception_only(err[0], err[1])).strip().splitlines()
    return lines[-1][:300] if lines else repr(err[1])[:300]


def save(path, data):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f)
    os.replace(tmp, path)


# NumPy 1.x names Paddle 1.8's tests use that NumPy 2 removed (the tests predate NumPy 2;
# this is their environment, not the runtime's behaviour)
_NUMPY1_ALIASES = {"product": "prod", "cumproduct": "cumprod", "alltrue": "all",
                   "sometrue": "any", "float_": "float64", "complex_": "complex128",
                   "unicode_": "str_", "string_": "bytes_", "NaN": "nan", "Inf": "inf",
                   "infty": "inf", "PINF": "inf"}


def numpy1_names():
    import builtins
    import numpy as np
    for old, new in _NUMPY1_ALIASES.items():
        if not hasattr(np, old):
            setattr(np, old, getattr(np, new))
    for old in ("bool", "int", "float", "complex", "object", "str", "long"):
        if old not in np.__dict__:
            setattr(np, old, getattr(builtins, old if old != "long" else "int"))
    if not hasattr(np, "asscalar"):
        np.asscalar = lambda a: a.item()


def python37_names():
    """collections.Sequence & co. (moved to collections.abc, removed in Python 3.10)."""
    import collections
    import collections.abc
    for name in ("Sequence", "Mapping", "Iterable", "Callable", "MutableMapping", "Set"):
        if not hasattr(collections, name):
            setattr(collections, name, getattr(collections.abc, name))


def numpy1_promotion():
    """assertAlmostEqual(python_float, numpy_float32_scalar): NumPy 1 computed the difference in
    float64 (value-based casting); NumPy 2 (NEP 50) computes it in float32, so a result within
    half a float32 step of the expected value fails at 7 places. Compare as NumPy 1 did."""
    import numbers
    import numpy as np

    def widen(value):
        if isinstance(value, np.floating) and np.dtype(value.dtype).itemsize < 8:
            return float(value)
        return value

    for name in ("assertAlmostEqual", "assertNotAlmostEqual"):
        original = getattr(unittest.TestCase, name)

        def check(self, first, second, *args, _original=original, **kwargs):
            python = (float, int)
            if (type(first) in python) != (type(second) in python) and \
                    isinstance(first, numbers.Real) and isinstance(second, numbers.Real):
                first, second = widen(first), widen(second)
            return _original(self, first, second, *args, **kwargs)
        setattr(unittest.TestCase, name, check)


def load_module(path):
    folder = os.path.dirname(path)
    sys.path.insert(0, folder)
    name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def main():
    path, out = sys.argv[1], sys.argv[2]
    sys.path.insert(0, HERE)
    import runtime.compat
    runtime.compat.install()
    import fluid_compat_data
    fluid_compat_data.install()
    numpy1_names()
    numpy1_promotion()
    python37_names()
    try:
        module = load_module(path)
        suite = unittest.TestLoader().loadTestsFromModule(module)
    except BaseException as err:  # noqa: BLE001  (an import failure is this file's result)
        line = "".join(traceback.format_exception_only(type(err), err)).strip().splitlines()
        save(out, {"passed": 0, "total": None, "skipped": 0, "finished": True,
                   "problems": [f"import: {line[-1] if line else err!r}"]})
        traceback.print_exc()
        return
    Recorder.out_path = out
    runner = unittest.TextTestRunner(stream=sys.stderr, verbosity=2, resultclass=Recorder)
    result = runner.run(suite)
    result.save(finished=True)


if __name__ == "__main__":
    main()
