"""Which framework a training script trains with, read from its imports (the script and the
modules of its own folder it imports, never run): `import torch` -> "torch"; `import paddle`
(Paddle 2.x/3.x: paddle.nn, paddle.io, paddle.static) -> "paddle"; `import runtime` or only
`paddle.fluid` (a Paddle 1.x program, run on the embedded runtime) -> "fluid". Nothing of any
framework is imported here."""

import ast
import importlib.util
from pathlib import Path
from typing import Iterable, Optional, Set, Tuple

FRAMEWORKS = ("fluid", "torch", "paddle")
EXTRAS = {"torch": "torch", "paddle": "paddlepaddle"}
MAX_FILES = 30  # local modules followed at most


class DetectError(ValueError):
    """The script's framework cannot be told or is not installed (the message says what to
    pass or install)."""


def resolve(framework: str, target: str, module: bool = False) -> str:
    """The framework a job trains with: `framework` as given (checked: known, installed) or,
    for "auto", read from the script's imports (`detect`); DetectError otherwise."""
    if framework == "auto":
        return detect(target, module)
    if framework not in FRAMEWORKS:
        raise DetectError(f"--framework {framework!r}: use auto, {', '.join(FRAMEWORKS)}")
    require(framework, target)
    return framework


def detect(target: str, module: bool = False) -> str:
    """The framework of the script at `target` (or of module `target`)."""
    path = _module_path(target) if module else Path(target)
    if path is None or not path.exists():
        return "fluid"
    found = _imports(path)
    frameworks = _frameworks(found)
    if len(frameworks) > 1:
        raise DetectError(f"{target} imports {' and '.join(sorted(frameworks))}: pass "
                          f"--framework with the one it trains with")
    framework = frameworks.pop() if frameworks else "fluid"
    require(framework, target)
    return framework


def require(framework: str, target: str = "the script"):
    """DetectError when `framework` is not installed in this interpreter."""
    package = {"torch": "torch", "paddle": "paddle"}.get(framework)
    if package and importlib.util.find_spec(package) is None:
        raise DetectError(f"{target} trains with {_name(framework)}, which is not installed "
                          f"in this Python ({_python()}): pip install "
                          f"'paddletune[{framework}]' (or pip install {EXTRAS[framework]})")


def _frameworks(found: Set[Tuple[str, str]]) -> Set[str]:
    """{(top-level package, the full dotted name)} -> the frameworks they mean. A script
    that imports paddle.fluid is a Paddle 1.x program (Paddle 3 has no paddle.fluid): the
    embedded runtime runs it."""
    out = set()
    if any(top == "torch" for top, _ in found):
        out.add("torch")
    paddle = [name for top, name in found if top == "paddle"]
    if paddle and not any(n.startswith("paddle.fluid") for n in paddle):
        out.add("paddle")
    return out


def _imports(path: Path) -> Set[Tuple[str, str]]:
    """(top-level package, dotted name) of every import in the script and in the modules of
    its folder it imports (followed up to MAX_FILES files)."""
    folder, seen, todo, found = path.resolve().parent, set(), [path.resolve()], set()
    while todo and len(seen) < MAX_FILES:
        file = todo.pop()
        if file in seen:
            continue
        seen.add(file)
        for name in _names(file):
            top = name.split(".")[0]
            found.add((top, name))
            local = folder / f"{top}.py"
            if local.exists() and local not in seen:
                todo.append(local)
    return found


def _names(file: Path) -> Iterable[str]:
    try:
        tree = ast.parse(file.read_bytes(), filename=str(file))
    except (OSError, SyntaxError, ValueError):
        return []
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module)
            names += [f"{node.module}.{alias.name}" for alias in node.names]
    return names


def _module_path(name: str) -> Optional[Path]:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    origin = spec.origin if spec is not None else None
    if origin and origin.endswith("__init__.py"):
        main = Path(origin).with_name("__main__.py")
        return main if main.exists() else Path(origin)
    return Path(origin) if origin and origin.endswith(".py") else None


def _name(framework: str) -> str:
    return {"torch": "PyTorch", "paddle": "PaddlePaddle"}.get(framework, framework)


def _python() -> str:
    import sys
    return sys.executable
