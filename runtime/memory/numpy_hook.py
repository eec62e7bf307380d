"""Serve NumPy's array buffers from a pool: a NumPy data-memory handler (NEP 49) per pool.

NumPy (>= 1.22) keeps the current data-memory handler in a context variable: setting ours
while the executor runs its kernels makes every array buffer created in that thread come from
the pool, kernel temporaries included, and each array remembers its handler, so its buffer goes
back to the same pool whenever the array dies (views keep their base alive, so a buffer is never
reused while anything can still read it). Other threads and code outside `serving` keep NumPy's
default allocator.

The handler's C function pointers are ctypes callbacks into the pool (about 1-2 us per
allocation), entered through compiled C entry points that keep an exception being propagated
while a callback runs (an array freed during unwinding; see native.py). The C-API entry points are read from NumPy's exported API table; if anything there
does not look as expected, `AVAILABLE` is False with `REASON`, and arrays are simply not pooled.
"""

import atexit
import contextvars
import ctypes

import numpy as np

try:
    from numpy._core import multiarray as _multiarray
except ImportError:  # NumPy 1.x
    from numpy.core import multiarray as _multiarray

from . import native
from .system import CPUSystemAllocator, memmove, memset

_SET_HANDLER, _GET_HANDLER = 304, 305  # indices in NumPy's C-API table (stable since 1.22)

_MALLOC = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)
_CALLOC = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t)
_REALLOC = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)
_FREE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)


class _Allocator(ctypes.Structure):
    _fields_ = [("ctx", ctypes.c_void_p), ("malloc", _MALLOC), ("calloc", _CALLOC),
                ("realloc", _REALLOC), ("free", _FREE)]


class _Handler(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char * 127), ("version", ctypes.c_uint8),
                ("allocator", _Allocator)]


_POOLS = []  # ctx (index) -> pool; never shrinks, so a late free always finds its pool
_TAGS = []  # ctx (index) -> the category its allocations get (None: the pool's current tag)
_HANDLERS = []  # keeps the C structs and capsules alive for the life of the process
_FOREIGN = set()  # addresses served by the system because the pool was mid-operation
_SYSTEM = CPUSystemAllocator()
# the step being recorded for its memory plan (arena.Recording), or None: sees every request
# and free made through the handlers while it is set
RECORDING = [None]
_NAME = ctypes.create_string_buffer(b"mem_handler")  # the capsule keeps this pointer


def _api():
    """(set_handler, get_handler) from NumPy's C-API table, after a sanity check."""
    get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
    get_pointer.restype, get_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    table = (ctypes.c_void_p * 400).from_address(get_pointer(_multiarray._ARRAY_API, None))
    set_handler = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.py_object)(table[_SET_HANDLER])
    get_handler = ctypes.PYFUNCTYPE(ctypes.py_object)(table[_GET_HANDLER])
    current = get_handler()
    if type(current).__name__ != "PyCapsule" or "mem_handler" not in repr(current):
        raise RuntimeError(f"unexpected NumPy handler object {current!r}")
    return set_handler, get_handler


def _probe():
    if tuple(int(p) for p in np.__version__.split(".")[:2]) < (1, 22):
        return None, f"NumPy {np.__version__} has no data-memory handlers (needs >= 1.22)"
    try:
        return _api(), ""
    except Exception as err:  # an unexpected NumPy build: run unpooled, say why
        return None, f"NumPy's memory-handler API is not usable here ({type(err).__name__}: {err})"


_API, REASON = _probe()
AVAILABLE = _API is not None


# --- the callbacks (they must never raise: C code is calling) -----------------------------------
# An exception raised into a callback by a signal handler cannot propagate through C. During
# Executor.run the handlers are held back (memory/signals.py), so none arrives there; outside a
# run (a pooled array freed later by user code) the callback still completes its work and the
# exception is dropped (counted in DROPPED_EXCEPTIONS).
DROPPED_EXCEPTIONS = [0]


def _completing(fn, *args):
    for _ in range(3):
        try:
            return fn(*args)
        except BaseException:  # noqa: B902  (a signal handler may raise anything)
            DROPPED_EXCEPTIONS[0] += 1
    return None


def _pooled(ctx, size):
    pool = _POOLS[ctx or 0]
    addr = pool.alloc(size, _TAGS[ctx or 0])
    if addr and pool.poison:
        memset(addr, 0xEF, size)
    if addr is None:  # the pool is mid-operation in this thread (a finalizer allocating)
        addr = _SYSTEM.alloc(max(64, (size + 63) // 64 * 64))
        if addr:
            _FOREIGN.add(addr)
        if RECORDING[0] is not None:
            RECORDING[0].unplannable()
    elif RECORDING[0] is not None:
        RECORDING[0].allocated(ctx, size, addr)
    return addr or None


def _release(ctx, ptr):
    if RECORDING[0] is not None:
        RECORDING[0].freed(ptr)
    if ptr in _FOREIGN:
        _FOREIGN.discard(ptr)
        _SYSTEM.free(ptr)
    else:
        _POOLS[ctx or 0].free(ptr)


def _malloc(ctx, size):
    try:
        return _pooled(ctx, size)
    except BaseException:  # noqa: B902  (retried: the memory must still be served)
        DROPPED_EXCEPTIONS[0] += 1
        return _completing(_pooled, ctx, size)


def _calloc(ctx, nelem, elsize):
    addr = _malloc(ctx, nelem * elsize)
    if addr:
        memset(addr, 0, nelem * elsize)
    return addr


def _realloc(ctx, ptr, new_size):
    if RECORDING[0] is not None:
        RECORDING[0].unplannable()
    new = _malloc(ctx, new_size)
    if new and ptr:
        old = _POOLS[ctx or 0].size_of(ptr) or new_size
        memmove(new, ptr, min(old, new_size))
        _free(ctx, ptr, 0)
    return new


def _free(ctx, ptr, size):
    if ptr:
        try:
            _release(ctx, ptr)
        except BaseException:  # noqa: B902
            DROPPED_EXCEPTIONS[0] += 1
            _completing(_release, ctx, ptr)


_CALLBACKS = (_MALLOC(_malloc), _CALLOC(_calloc), _REALLOC(_realloc), _FREE(_free))


def _entry_points():
    """What the handlers call: the callbacks behind C entry points that keep an exception
    being propagated while they run (native.py), or the callbacks themselves."""
    addresses = native.load(_CALLBACKS) if AVAILABLE else None
    if addresses is None:
        return _CALLBACKS, False
    kinds = (_MALLOC, _CALLOC, _REALLOC, _FREE)
    return tuple(kind(addr) for kind, addr in zip(kinds, addresses)), True


_ENTRY, EXCEPTION_SAFE = _entry_points()
# the code of the functions NumPy calls from C: a signal handler that finds one of them on its
# stack knows an exception it raises would be dropped (a profiler re-sends its signal instead)
CALLBACK_CODES = frozenset(fn.__code__ for fn in (_malloc, _calloc, _realloc, _free))


def _detach_at_exit():
    """At interpreter exit, arrays still alive are freed while the interpreter is being torn
    down, when calling back into Python is no longer safe: their frees become no-ops (the
    process is ending; the memory goes with it). sched_yield ignores the arguments it is
    passed in registers, which is all a (ctx, ptr, size) call leaves it."""
    noop = ctypes.cast(ctypes.CDLL(None).sched_yield, ctypes.c_void_p).value
    for struct, _ in _HANDLERS:
        ctypes.c_void_p.from_address(ctypes.addressof(struct.allocator)
                                     + _Allocator.free.offset).value = noop


atexit.register(_detach_at_exit)


POOL_HANDLER_PREFIX = "paddletune:"  # the names of the pools' NumPy handlers start so


def pooled(array) -> bool:
    """Whether a pool's handler allocated the data `array` owns (False for a view)."""
    return (_multiarray.get_handler_name(array) or "").startswith(POOL_HANDLER_PREFIX)


def handler_for(pool, tag=None):
    """The NumPy handler capsule serving arrays from `pool` (made once per pool and tag):
    tagged `tag`, or with the pool's current tag (`pool.tag`, set by the executor) when None.
    A fixed tag lets another thread (a DataLoader's reader thread) use the same pool."""
    cache = pool.__dict__.get("_numpy_ctx") or pool.__dict__.setdefault("_numpy_ctx", {})
    index = cache.get(tag)
    if index is None:
        index = cache[tag] = len(_POOLS)
        _POOLS.append(pool)
        _TAGS.append(tag)
        name = f"{POOL_HANDLER_PREFIX}{pool.name}:{tag or '*'}".encode()[:126]
        struct = _Handler(name, 1, _Allocator(index, *_ENTRY))
        new_capsule = ctypes.pythonapi.PyCapsule_New
        new_capsule.restype = ctypes.py_object
        new_capsule.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        capsule = new_capsule(ctypes.addressof(struct), ctypes.cast(_NAME, ctypes.c_char_p), None)
        _HANDLERS.append((struct, capsule))
    return _HANDLERS[index][1]


def context_of(pool, tag=None):
    """The `ctx` value the handler of `pool` (and `tag`) passes to the allocator functions."""
    handler_for(pool, tag)
    return pool.__dict__["_numpy_ctx"][tag]


def set_handler(capsule):
    """Make `capsule` the current thread's (context's) handler; returns the previous one.
    NumPy keeps the handler in a context variable: once the first call through its C API has
    shown which one (`_HANDLER_VARIABLE`), the handler is set there directly, which is what
    that C function does, at a fifth of the cost of a call through ctypes (the executor sets
    and restores it every step)."""
    variable = _HANDLER_VARIABLE[0]
    if variable is None:
        return _set_through_api(capsule)
    previous = variable.get()
    variable.set(capsule)
    return previous


# [NumPy's context variable holding the current handler (None: not found), still to look]
_HANDLER_VARIABLE = [None, True]


def _set_through_api(capsule):
    previous = _API[0](capsule)
    if _HANDLER_VARIABLE[1]:
        _HANDLER_VARIABLE[:] = [_variable_holding(capsule), False]
    return previous


def _variable_holding(capsule):
    """The context variable NumPy keeps the handler in ('current_allocator' since NumPy
    1.22), found as the one that now holds `capsule`; None if there is no such variable."""
    found = [var for var, value in contextvars.copy_context().items()
             if value is capsule and var.name == "current_allocator"]
    return found[0] if len(found) == 1 else None

