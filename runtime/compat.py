"""`import paddle` for unmodified Fluid 1.x scripts: install() points the `paddle` names at
this runtime through `sys.modules` entries.

After `runtime.compat.install()`, `import paddle.fluid as fluid` gives the `runtime` package
itself (so `fluid.layers`, `fluid.io`, `from paddle.fluid import core` ... are the runtime's
modules, with the runtime's class identities), `paddle.batch` is the batch decorator and
`paddle.reader` the reader-decorator package. Every `runtime.*` module is also registered as
`paddle.fluid.*` (they are imported first), so `import paddle.fluid.layers.nn` never loads a
second copy of a module. Nothing is installed when a real PaddlePaddle can be imported.
"""

import importlib
import importlib.machinery
import importlib.util
import os
import pkgutil
import sys
import types
import warnings

import runtime

__all__ = ["install", "uninstall", "is_installed", "VERSION"]

VERSION = "1.8.5+paddletune"
_MARK = "__paddletune_shim__"
# Fluid modules scripts commonly import by path; all exist as runtime.<name>.
_FLUID_MODULES = ("core", "layers", "io", "optimizer", "initializer", "param_attr", "framework",
                  "executor", "backward", "regularizer", "clip", "unique_name", "data_feeder")
_added = {}  # sys.modules name -> the module install() put there


def is_installed():
    return getattr(sys.modules.get("paddle"), _MARK, False)


def install():
    """Make `import paddle` / `import paddle.fluid as fluid` resolve to this runtime. Returns
    True when the shim is in place (also when it already was), False (with a warning) when a
    real PaddlePaddle is importable, in which case nothing is changed."""
    if is_installed():
        return True
    real = _real_paddle()
    if real and not _without_fluid(real):
        warnings.warn(f"runtime.compat.install(): a real PaddlePaddle is installed ({real}); "
                      f"leaving `import paddle` to it", RuntimeWarning, stacklevel=2)
        return False
    if real:
        warnings.warn(f"runtime.compat.install(): PaddlePaddle {_real_version(real)} is installed "
                      f"({real}) but has no paddle.fluid (removed in 2.6): `import paddle` "
                      f"loads this runtime's Fluid 1.x API in this process",
                      RuntimeWarning, stacklevel=2)
    _import_runtime_modules()
    reader = importlib.import_module("runtime.reader")
    paddle = _shim_package(reader)
    _register("paddle", paddle)
    _register("paddle.fluid", runtime)
    for name, module in list(sys.modules.items()):
        if name.startswith("runtime.") and module is not None and name != __name__:
            _register("paddle.fluid." + name[len("runtime."):], module)
    _register("paddle.reader", reader)
    _register("paddle.compat", importlib.import_module("runtime.paddle_compat"))
    _register("paddle.version", importlib.import_module("runtime.version"))
    _register("paddle.check_import_scipy", importlib.import_module("runtime.check_import_scipy"))
    paddle.version = sys.modules["paddle.version"]
    importlib.import_module("runtime.tensor").NUMPY1_FETCHES[0] = True
    paddle.compat = sys.modules["paddle.compat"]
    _register("paddle.reader.decorator", sys.modules["runtime.reader.decorator"])
    _register("paddle.batch", _batch_module(reader))
    return True


def uninstall():
    """Remove every sys.modules entry install() added. Returns True if there was any."""
    importlib.import_module("runtime.tensor").NUMPY1_FETCHES[0] = False
    removed = False
    for name, module in list(_added.items()):
        if sys.modules.get(name) is module:
            del sys.modules[name]
            removed = True
        del _added[name]
    return removed


def _real_paddle():
    """Where a real (non-shim) paddle lives, or '' when there is none."""
    loaded = sys.modules.get("paddle")
    if loaded is not None:
        return getattr(loaded, "__file__", None) or repr(loaded)
    try:
        spec = importlib.util.find_spec("paddle")
    except (ImportError, ValueError):
        return ""
    if spec is None:
        return ""
    return spec.origin or ", ".join(spec.submodule_search_locations or []) or "paddle"


FLUID_REMOVED = (2, 6)  # the first PaddlePaddle release without paddle.fluid


def _real_version(real: str = "") -> str:
    """The version of the PaddlePaddle distribution that installed the paddle at `real` (any
    one when `real` is empty; '' when none is recorded, or none installed that file)."""
    from importlib import metadata
    for name in ("paddlepaddle", "paddlepaddle-gpu"):
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        where = os.path.abspath(str(dist.locate_file("paddle/__init__.py")))
        if not real or where == os.path.abspath(real):
            return dist.version
    return ""


def _without_fluid(real: str) -> bool:
    """Whether the real paddle at `real` cannot run Fluid 1.x programs: a release from 2.6 on
    (by its distribution's version), not yet imported, with no fluid package beside it. A
    paddle of unknown version, or one already imported, is left alone."""
    if "paddle" in sys.modules:
        return False
    version = _real_version(real)
    numbers = []
    for piece in version.split(".")[:2]:
        digits = "".join(c for c in piece if c.isdigit())
        numbers.append(int(digits) if digits else 0)
    if not version or tuple(numbers) < FLUID_REMOVED:
        return False
    return not os.path.isdir(os.path.join(os.path.dirname(real), "fluid"))


def _import_runtime_modules():
    """Import every runtime submodule now, so each has exactly one module object to alias.
    A module that cannot be imported (a missing optional dependency) is skipped: importing it
    under the paddle name would fail the same way."""
    for info in pkgutil.walk_packages(runtime.__path__, "runtime.", onerror=lambda name: None):
        if info.name == __name__:
            continue
        try:
            importlib.import_module(info.name)
        except Exception:  # noqa: BLE001  (see the docstring)
            continue
    for name in _FLUID_MODULES:  # these must exist: fail loudly if one does not
        importlib.import_module("runtime." + name)


def _shim_package(reader):
    paddle = types.ModuleType("paddle", "PaddlePaddle 1.x names served by the paddletune "
                                        "runtime (see runtime.compat).")
    paddle.__spec__ = importlib.machinery.ModuleSpec("paddle", None, is_package=True)
    paddle.__path__ = []  # a package with no files: unknown submodules fail cleanly
    paddle.__version__ = VERSION
    paddle.__file__ = runtime.__file__
    paddle.fluid = runtime
    paddle.reader = reader
    paddle.batch = reader.batch
    setattr(paddle, _MARK, True)
    return paddle


def _batch_module(reader):
    """`paddle.batch` is a module in Paddle, but `paddle.batch(...)` is the function (the
    package attribute); this module only serves `from paddle.batch import batch`."""
    module = types.ModuleType("paddle.batch", "paddle.batch: the batch reader decorator.")
    module.__spec__ = importlib.machinery.ModuleSpec("paddle.batch", None)
    module.batch = reader.batch
    module.__all__ = ["batch"]
    return module


def _register(name, module):
    if name not in sys.modules:
        sys.modules[name] = module
        _added[name] = module
