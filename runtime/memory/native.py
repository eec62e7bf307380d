"""Exception-safe entry points for the NumPy allocator hook's callbacks (numpy_hook.py).

NumPy calls a data-memory handler's `free` whenever an array dies, and that includes arrays
dropped while an exception propagates (a list being built in a comprehension, call arguments
being evaluated: what the interpreter pops off its stack while unwinding). The hook's callbacks
are ctypes callbacks into Python, and a Python call made while an exception is pending cannot
keep it: the first C call inside raises SystemError, and ctypes reports and clears whatever
the callback leaves. The exception that was propagating is lost and the interpreter later
fails with "SystemError: error return without exception set".

So each callback is entered through a few lines of C that take the GIL, set the pending
exception aside, call the Python callback, and put the exception back. The C is compiled once
with the system C compiler and cached (keyed by interpreter and source); it needs no Python
headers (it declares the four C-API functions it uses). Without a compiler `load()` returns
None with the reason, and the callbacks are used directly, as before (correct except in that
case).
"""

import ctypes
import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile

_SOURCE = r"""
#include <stddef.h>
typedef struct _object PyObject;
extern int PyGILState_Ensure(void);
extern void PyGILState_Release(int);
extern void PyErr_Fetch(PyObject **, PyObject **, PyObject **);
extern void PyErr_Restore(PyObject *, PyObject *, PyObject *);

static void *(*py_malloc)(void *, size_t);
static void *(*py_calloc)(void *, size_t, size_t);
static void *(*py_realloc)(void *, void *, size_t);
static void (*py_free)(void *, void *, size_t);

void pt_set(void *m, void *c, void *r, void *f) {
    py_malloc = m; py_calloc = c; py_realloc = r; py_free = f;
}

#define AROUND(call) \
    int state = PyGILState_Ensure(); \
    PyObject *type, *value, *tb; \
    PyErr_Fetch(&type, &value, &tb); \
    call; \
    PyErr_Restore(type, value, tb); \
    PyGILState_Release(state);

void *pt_malloc(void *ctx, size_t n) { void *r; AROUND(r = py_malloc(ctx, n)) return r; }
void *pt_calloc(void *ctx, size_t n, size_t s) { void *r; AROUND(r = py_calloc(ctx, n, s)) return r; }
void *pt_realloc(void *ctx, void *p, size_t n) { void *r; AROUND(r = py_realloc(ctx, p, n)) return r; }
void pt_free(void *ctx, void *p, size_t n) { AROUND(py_free(ctx, p, n)) }
"""

REASON = ""


def load(callbacks):
    """(malloc, calloc, realloc, free) addresses of the C entry points calling `callbacks`
    (the four ctypes callback objects), or None (REASON says why)."""
    global REASON
    try:
        lib = ctypes.CDLL(_library())
    except (OSError, subprocess.SubprocessError, RuntimeError) as err:
        REASON = f"no exception-safe allocator entry points ({err})"
        return None
    lib.pt_set.argtypes = [ctypes.c_void_p] * 4
    lib.pt_set.restype = None
    lib.pt_set(*(ctypes.cast(cb, ctypes.c_void_p) for cb in callbacks))
    _KEEP.append(lib)
    return tuple(ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
                 for name in ("pt_malloc", "pt_calloc", "pt_realloc", "pt_free"))


_KEEP = []


def _library():
    """Path of the compiled entry points, built on first use."""
    digest = hashlib.sha256((_SOURCE + sys.version).encode()).hexdigest()[:16]
    folder = os.environ.get("PADDLETUNE_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "paddletune")
    path = os.path.join(folder, f"alloc_guard-{sys.implementation.cache_tag}-{digest}.so")
    if os.path.exists(path):
        return path
    compiler = _compiler()
    os.makedirs(folder, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder) as scratch:
        src, out = os.path.join(scratch, "guard.c"), os.path.join(scratch, "guard.so")
        with open(src, "w") as f:
            f.write(_SOURCE)
        subprocess.run([compiler, "-O2", "-shared", "-fPIC", "-o", out, src], check=True,
                       capture_output=True, timeout=60)
        os.replace(out, path)
    return path


def _compiler():
    for candidate in ((sysconfig.get_config_var("CC") or "").split()[:1]
                      + ["cc", "gcc", "clang"]):
        found = shutil.which(candidate)
        if found:
            return found
    raise RuntimeError("no C compiler found (cc, gcc or clang)")
