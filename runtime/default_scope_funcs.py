"""fluid.default_scope_funcs: a thread-local stack of scopes (Paddle 1.x). The top of the stack
is the current scope; `var`/`find_var` create/look up variables in it, `enter_local_scope` and
`leave_local_scope` push and pop a child scope, `scoped_function(f)` runs f in a fresh one."""

import threading

from .scope import Scope

__all__ = ["get_cur_scope", "enter_local_scope", "leave_local_scope", "var", "find_var",
           "scoped_function"]

_local = threading.local()


def _stack():
    stack = getattr(_local, "scopes", None)
    if stack is None:
        stack = _local.scopes = []
    if not stack:
        stack.append(Scope())
    return stack


def get_cur_scope():
    return _stack()[-1]


def enter_local_scope():
    stack = _stack()
    stack.append(stack[-1].new_scope())


def leave_local_scope():
    stack = _stack()
    stack.pop()
    get_cur_scope().drop_kids()


def var(name):
    return get_cur_scope().var(name)


def find_var(name):
    return get_cur_scope().find_var(name)


def scoped_function(func):
    enter_local_scope()
    try:
        func()
    finally:
        leave_local_scope()
