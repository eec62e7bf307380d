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

The same C serves a step's memory plan (arena.py): once the executor has recorded a step's
requests and planned where each temporary lives, the entry points hand out those places
without calling into Python at all, and fall back to the pool the moment a request differs
from the plan.
"""

import ctypes
import subprocess

from ..cbuild import build

_SOURCE = r"""
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <pthread.h>
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

/* The interpreter's thread state holding the GIL (3.11: _PyThreadState_UncheckedGet; later
   ones: the calling thread's attached state), or none: then every call takes the GIL. */
static PyObject *(*current_tstate)(void);
static PyObject *ar_tstate;  /* the step's thread's state while a plan is active, else NULL */

void pt_set_tstate_getter(void *f) { current_tstate = f; }

/* --- the step's memory plan (arena.py): the i-th request of a planned step, made by the
   executor's thread through the executor's handler, gets base + offsets[i] when its size is
   sizes[i] and every planned block sharing those bytes is already dead; otherwise the plan is
   off for the rest of the step (diverged) and the Python pool serves. Everything below runs
   with the GIL held. --- */
static void *ar_ctx;
static pthread_t ar_thread;
static int ar_active, ar_diverged;
static char *ar_base;
static long ar_span, ar_n, ar_next, ar_served, ar_live;
static const size_t *ar_sizes;
static const long *ar_offsets, *ar_cstart, *ar_conf, *ar_slot, *ar_soff;
static long ar_nslots, *ar_owner;
static unsigned char *ar_isl;

#define MAX_RETIRED 64
static char *rt_base[MAX_RETIRED];
static long rt_span[MAX_RETIRED], rt_live[MAX_RETIRED];

typedef struct {  /* arena.py's StepPlan.c_plan, field for field */
    long n, nslots;
    const size_t *sizes;
    const long *offsets, *cstart, *conf, *slot, *soff;
    long *owner;
    unsigned char *isl;
    long span;  /* the arena's bytes */
    void *ctx;  /* this step's: the handler's context, the arena's first byte */
    char *base;
} plan_t;

void pt_arena_begin(const plan_t *plan) {
    ar_ctx = plan->ctx; ar_thread = pthread_self(); ar_base = plan->base; ar_span = plan->span;
    ar_tstate = current_tstate != NULL ? current_tstate() : NULL;
    ar_n = plan->n;
    ar_sizes = plan->sizes; ar_offsets = plan->offsets; ar_cstart = plan->cstart;
    ar_conf = plan->conf; ar_slot = plan->slot; ar_soff = plan->soff;
    ar_nslots = plan->nslots; ar_owner = plan->owner; ar_isl = plan->isl;
    ar_next = ar_served = ar_live = 0; ar_diverged = 0;
    memset(ar_isl, 0, (size_t)ar_n);
    ar_active = 1;
}

/* Ends the step: out = {requests seen, requests served, diverged, blocks still alive}.
   Returns 1 when the arena is free again, 0 when live blocks keep it (it is retired: the
   caller gives it back once pt_arena_drained lists it), -1 when no retired slot was left. */
int pt_arena_end(long *out) {
    out[0] = ar_next; out[1] = ar_served; out[2] = ar_diverged; out[3] = ar_live;
    ar_active = 0;
    ar_tstate = NULL;
    int result = 1;
    if (ar_live > 0) {
        result = -1;
        for (int k = 0; k < MAX_RETIRED; k++) {
            if (rt_base[k] == NULL) {
                rt_base[k] = ar_base; rt_span[k] = ar_span; rt_live[k] = ar_live;
                result = 0;
                break;
            }
        }
    }
    ar_base = NULL; ar_span = 0;
    return result;
}

/* pt_arena_begin with this step's fields (the handler's context, the arena's first byte). */
void pt_arena_start(plan_t *plan, void *ctx, char *base) {
    plan->ctx = ctx; plan->base = base;
    pt_arena_begin(plan);
}

/* Ends the step, as pt_arena_end, checking the plan held (no request departed from it, no
   planned block outlives the step, `expected` requests were made): the requests the plan
   served when it held (the arena is free again), -1 when it did not and the arena is free,
   -2 when it did not and live blocks keep the arena (retired), -3 when no retired slot was
   left for it. */
long pt_arena_finish(long expected) {
    long counts[4];
    int state = pt_arena_end(counts);
    if (state == 1)
        return (counts[2] || counts[0] != expected) ? -1 : counts[1];
    return state == 0 ? -2 : -3;
}

/* Retired arenas whose blocks have all died: their bases go to `bases` (at most `room`) and
   their slots are freed; returns how many. */
int pt_arena_drained(char **bases, int room) {
    int found = 0;
    for (int k = 0; k < MAX_RETIRED && found < room; k++) {
        if (rt_base[k] != NULL && rt_live[k] == 0) {
            bases[found++] = rt_base[k];
            rt_base[k] = NULL;
        }
    }
    return found;
}

static int arena_take(void *ctx, size_t n, void **out) {
    if (!ar_active || ar_diverged || ctx != ar_ctx || !pthread_equal(pthread_self(), ar_thread))
        return 0;
    long i = ar_next++;
    if (i >= ar_n || ar_sizes[i] != n) { ar_diverged = 1; return 0; }
    long off = ar_offsets[i];
    if (off < 0) return 0;
    for (long k = ar_cstart[i]; k < ar_cstart[i + 1]; k++) {
        if (ar_isl[ar_conf[k]]) { ar_diverged = 1; return 0; }
    }
    ar_isl[i] = 1; ar_owner[ar_slot[i]] = i; ar_live++; ar_served++;
    *out = ar_base + off;
    return 1;
}

/* Which arena holds p: 1 the active one (*off its offset), 2 a retired one (*k its slot),
   0 none (the pool's). `room` gets the bytes from p to that arena's end. Addresses are
   compared as integers. */
static int arena_of(void *p, long *off, int *k, long *room) {
    uintptr_t c = (uintptr_t)p, base = (uintptr_t)ar_base;
    if (ar_base != NULL && c >= base && c < base + (uintptr_t)ar_span) {
        *off = (long)(c - base);
        *room = ar_span - *off;
        return 1;
    }
    for (int j = 0; j < MAX_RETIRED; j++) {
        uintptr_t r = (uintptr_t)rt_base[j];
        if (rt_base[j] != NULL && c >= r && c < r + (uintptr_t)rt_span[j]) {
            *k = j;
            *room = rt_span[j] - (long)(c - r);
            return 2;
        }
    }
    return 0;
}

/* 1 when p is a planned block (now marked dead), 0 when the pool owns it. */
static int arena_give(void *p) {
    long off = 0, room = 0;
    int k = 0;
    int where = arena_of(p, &off, &k, &room);
    if (where == 1) {
        long lo = 0, hi = ar_nslots - 1;
        while (lo < hi) {
            long mid = (lo + hi) / 2;
            if (ar_soff[mid] < off) lo = mid + 1; else hi = mid;
        }
        long owner = ar_owner[lo];
        if (ar_soff[lo] == off && owner >= 0 && ar_isl[owner]) {
            ar_isl[owner] = 0; ar_live--;
        }
    } else if (where == 2) {
        rt_live[k]--;
    }
    return where != 0;
}

/* Free slots in the retired table: an arena may start only while one is left, so that
   whatever outlives its step is always recorded. */
int pt_arena_room(void) {
    int free_slots = 0;
    for (int j = 0; j < MAX_RETIRED; j++) free_slots += rt_base[j] == NULL;
    return free_slots;
}

/* The three functions a step calls as Python builtins (METH_O, METH_FASTCALL), not through
   ctypes: a ctypes call converts its arguments and result through libffi, some 1,600
   instructions; a builtin's call about a tenth of that. They run with the GIL held. */
extern PyObject *PyLong_FromLong(long);
extern long PyLong_AsLong(PyObject *);
extern void *PyLong_AsVoidPtr(PyObject *);
extern PyObject *PyErr_Occurred(void);
extern void PyErr_SetString(PyObject *, const char *);
extern PyObject *PyExc_TypeError;

static PyObject *py_room(PyObject *self, PyObject *unused) {
    return PyLong_FromLong(pt_arena_room());
}

static PyObject *py_start(PyObject *self, PyObject *const *args, intptr_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "pt_arena_start(plan address, ctx, base)");
        return NULL;
    }
    plan_t *plan = PyLong_AsVoidPtr(args[0]);
    void *ctx = PyLong_AsVoidPtr(args[1]);
    char *base = PyLong_AsVoidPtr(args[2]);
    if (PyErr_Occurred()) return NULL;
    if (plan == NULL || base == NULL) {
        PyErr_SetString(PyExc_TypeError, "pt_arena_start: a null plan or arena");
        return NULL;
    }
    pt_arena_start(plan, ctx, base);
    return PyLong_FromLong(0);
}

static PyObject *py_finish(PyObject *self, PyObject *arg) {
    long expected = PyLong_AsLong(arg);
    if (expected == -1 && PyErr_Occurred()) return NULL;
    return PyLong_FromLong(pt_arena_finish(expected));
}

typedef struct { const char *name; void *meth; int flags; const char *doc; } method_t;
static method_t pt_methods[] = {  /* METH_NOARGS 0x4, METH_O 0x8, METH_FASTCALL 0x80 */
    {"pt_arena_room", (void *)py_room, 0x4, NULL},
    {"pt_arena_start", (void *)py_start, 0x80, NULL},
    {"pt_arena_finish", (void *)py_finish, 0x8, NULL},
};

void *pt_method(int k) { return k >= 0 && k < 3 ? &pt_methods[k] : NULL; }

#define AROUND(call) \
    PyObject *type, *value, *tb; \
    PyErr_Fetch(&type, &value, &tb); \
    call; \
    PyErr_Restore(type, value, tb);

/* True on the thread running an active plan's step while it holds the GIL (its thread state
   is the one holding it): the GIL need not be taken (PyGILState_Ensure and Release cost some
   90 instructions a call, the planned request itself about 40). */
static int step_thread_holds_gil(void) {
    return ar_tstate != NULL && current_tstate() == ar_tstate
        && pthread_equal(pthread_self(), ar_thread);
}

void *pt_malloc(void *ctx, size_t n) {
    void *r;
    if (step_thread_holds_gil()) {
        if (!arena_take(ctx, n, &r)) { AROUND(r = py_malloc(ctx, n)) }
        return r;
    }
    int state = PyGILState_Ensure();
    if (!arena_take(ctx, n, &r)) { AROUND(r = py_malloc(ctx, n)) }
    PyGILState_Release(state);
    return r;
}

void *pt_calloc(void *ctx, size_t n, size_t s) {
    void *r;
    int state = PyGILState_Ensure();
    if (arena_take(ctx, n * s, &r)) { memset(r, 0, n * s); }
    else { AROUND(r = py_calloc(ctx, n, s)) }
    PyGILState_Release(state);
    return r;
}

void *pt_realloc(void *ctx, void *p, size_t n) {
    void *r;
    long off = 0, room = 0;
    int k = 0;
    int state = PyGILState_Ensure();
    if (p != NULL && arena_of(p, &off, &k, &room)) {  /* a planned block moves to the pool */
        if (ar_active) ar_diverged = 1;
        AROUND(r = py_malloc(ctx, n))
        if (r != NULL) {  /* p stays live (and counted) unless the move succeeded */
            memcpy(r, p, (size_t)room < n ? (size_t)room : n);
            arena_give(p);
        }
    } else {
        AROUND(r = py_realloc(ctx, p, n))
    }
    PyGILState_Release(state);
    return r;
}

void pt_free(void *ctx, void *p, size_t n) {
    if (step_thread_holds_gil()) {
        if (p == NULL || !arena_give(p)) { AROUND(py_free(ctx, p, n)) }
        return;
    }
    int state = PyGILState_Ensure();
    if (p == NULL || !arena_give(p)) { AROUND(py_free(ctx, p, n)) }
    PyGILState_Release(state);
}
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
    lib.pt_set_tstate_getter.argtypes = [ctypes.c_void_p]
    lib.pt_set_tstate_getter.restype = None
    lib.pt_set_tstate_getter(_tstate_getter())
    _KEEP.append(lib)
    _ARENA.append(_arena_functions(lib._name))
    return tuple(ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
                 for name in ("pt_malloc", "pt_calloc", "pt_realloc", "pt_free"))


def _tstate_getter():
    """The address of the interpreter's function naming the thread state that holds the GIL
    (CPython 3.11's _PyThreadState_UncheckedGet, PyThreadState_GetUnchecked since 3.13), or
    None."""
    for name in ("PyThreadState_GetUnchecked", "_PyThreadState_UncheckedGet"):
        try:
            return ctypes.cast(getattr(ctypes.pythonapi, name), ctypes.c_void_p).value
        except AttributeError:
            continue
    return None


_KEEP = []
_ARENA = []  # the step-plan functions, once the entry points are loaded (arena.py)


def arena_functions():
    """The compiled step-plan functions (pt_arena_begin/end/drained; see arena.py), or None
    when the entry points could not be built."""
    return _ARENA[0] if _ARENA else None


class ArenaFunctions:
    """The step-plan functions a step calls (arena.py), with the GIL held: the state they
    change is also read by the allocator entry points, under the GIL. `pt_arena_room()`,
    `pt_arena_start(plan address, ctx, base)` and `pt_arena_finish(expected requests)` are
    Python builtins made from the library's method table (a call costs about a tenth of a
    ctypes call), or the ctypes functions where the interpreter's API for that is missing;
    `pt_arena_drained(bases, room)` (rare) and the others are ctypes functions."""

    def __init__(self, lib):
        self.lib = lib
        for name in ("pt_arena_begin", "pt_arena_end", "pt_arena_drained"):
            setattr(self, name, getattr(lib, name))
        made = _builtins(lib)
        for k, name in enumerate(("pt_arena_room", "pt_arena_start", "pt_arena_finish")):
            setattr(self, name, made[k] if made is not None else getattr(lib, name))


def _builtins(lib):
    """The library's three step functions as Python builtins, or None."""
    try:
        new = ctypes.pythonapi.PyCFunction_NewEx
    except AttributeError:  # (not CPython)
        return None
    new.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    new.restype = ctypes.py_object
    lib.pt_method.argtypes = [ctypes.c_int]
    lib.pt_method.restype = ctypes.c_void_p
    return tuple(new(lib.pt_method(k), None, None) for k in range(3))


def _arena_functions(path):
    """The arena functions of the library at `path` (an ArenaFunctions)."""
    lib = ctypes.PyDLL(path)
    # (addresses passed as integers: a call converting a ctypes object costs about twice)
    lib.pt_arena_begin.argtypes = [ctypes.c_void_p]  # a StepPlan's c_plan_address
    lib.pt_arena_begin.restype = None
    lib.pt_arena_end.argtypes = [ctypes.c_void_p]  # the address of a c_long[4]
    lib.pt_arena_end.restype = ctypes.c_int
    lib.pt_arena_drained.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int]
    lib.pt_arena_drained.restype = ctypes.c_int
    lib.pt_arena_room.argtypes = []
    lib.pt_arena_room.restype = ctypes.c_int
    lib.pt_arena_start.argtypes = [ctypes.c_void_p] * 3
    lib.pt_arena_start.restype = None
    lib.pt_arena_finish.argtypes = [ctypes.c_long]
    lib.pt_arena_finish.restype = ctypes.c_long
    return ArenaFunctions(lib)


def _library():
    """Path of the compiled entry points, built on first use."""
    return build("alloc_guard", _SOURCE)
