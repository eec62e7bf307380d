"""Compile a small C source once and cache the shared library: the allocator's entry points
(memory/native.py) and the fused CPU kernels (ops/cpu_kernels.py).

The library is keyed by the source, the flags and the interpreter, and kept in
$PADDLETUNE_CACHE_DIR or ~/.cache/paddletune. `build` raises OSError, RuntimeError (no
compiler) or subprocess.SubprocessError (the compile failed): callers fall back to their
Python path and say why.
"""

import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile


def build(name, source, flags=("-O2",), libraries=()):
    """Path of the shared library compiled from `source` (built on first use)."""
    key = "\0".join((source, " ".join(flags), " ".join(libraries), sys.version))
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    folder = os.environ.get("PADDLETUNE_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "paddletune")
    path = os.path.join(folder, f"{name}-{sys.implementation.cache_tag}-{digest}.so")
    if os.path.exists(path):
        return path
    compiler = compiler_path()
    os.makedirs(folder, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder) as scratch:
        src, out = os.path.join(scratch, f"{name}.c"), os.path.join(scratch, f"{name}.so")
        with open(src, "w") as f:
            f.write(source)
        subprocess.run([compiler, *flags, "-shared", "-fPIC", "-o", out, src,
                        *(f"-l{lib}" for lib in libraries)],
                       check=True, capture_output=True, timeout=120)
        os.replace(out, path)
    return path


def compiler_path():
    for candidate in ((sysconfig.get_config_var("CC") or "").split()[:1]
                      + ["cc", "gcc", "clang"]):
        found = shutil.which(candidate)
        if found:
            return found
    raise RuntimeError("no C compiler found (cc, gcc or clang)")
