"""Scopes: where variables' values live between runs (parameters, optimizer state)."""

import contextlib

from .tensor import LoDTensor, SelectedRows, _Holder


class ScopeVar(_Holder):
    """A named value in a Scope."""

    __slots__ = ("name", "writes")

    def __init__(self, name):
        super().__init__()
        self.name = name
        self.writes = 0  # runs that wrote it (a ParallelExecutor refreshes its copies on change)

    def get_tensor(self):
        return LoDTensor(self)

    def get_lod_tensor_array(self):
        """The LoDTensorArray this variable holds (made empty on first use)."""
        from .core import LoDTensorArray
        if not isinstance(self.value, list):
            self.value = LoDTensorArray()
        if isinstance(self.value, LoDTensorArray):
            return self.value
        # an array a program wrote: its entries as LoDTensors (their LoD included)
        return LoDTensorArray(LoDTensor(_Holder(v)) if not isinstance(v, LoDTensor) else v
                              for v in self.value)

    def get_lod_rank_table(self):
        return self.value

    def get_selected_rows(self):
        if not isinstance(self.value, SelectedRows):
            raise TypeError(f"variable {self.name!r} does not hold SelectedRows")
        return self.value

    def is_initialized(self):
        return self.value is not None

    def set_int(self, value):
        self.value = int(value)

    def get_int(self):
        return int(self.value)

    def is_int(self):
        return type(self.value) is int

    def is_float(self):
        return type(self.value) is float

    def set_float(self, value):
        self.value = float(value)

    def get_float(self):
        return float(self.value)

    def __repr__(self):
        return f"ScopeVar({self.name!r}, {self.value!r})"


class Scope:
    """A name -> value map with a parent chain (Paddle's scope hierarchy)."""

    def __init__(self, parent=None):
        self._vars = {}
        self._parent = parent
        self._kids = []
        self._removed = False

    def var(self, name):
        """The variable named `name` in this scope, created if missing."""
        holder = self._vars.get(name)
        if holder is None:
            holder = self._vars[name] = ScopeVar(name)
        return holder

    def find_var(self, name):
        """The variable in this scope or an ancestor, or None."""
        scope = self
        while scope is not None:
            holder = scope._vars.get(name)
            if holder is not None:
                return holder
            scope = scope._parent
        return None

    def new_scope(self):
        kid = Scope(self)
        self._kids.append(kid)
        return kid

    def drop_kids(self):
        self._kids.clear()

    def _remove_from_pool(self):
        """Paddle frees a scope's C++ pool entry (the Python object stays); a second removal
        is an error, as there. Here the scope's memory goes when it is unused."""
        if self._removed:
            raise RuntimeError("Deleting a nonexistent scope is not allowed")
        self._removed = True

    def parent(self):
        return self._parent

    def local_var_names(self):
        return list(self._vars)

    def erase(self, names):
        for name in names:
            self._vars.pop(name, None)

    def __contains__(self, name):
        return self.find_var(name) is not None

    def __repr__(self):
        return f"<Scope with {len(self._vars)} vars>"


_global_scope = Scope()


def global_scope():
    return _global_scope


def _switch_scope(scope):
    global _global_scope
    old, _global_scope = _global_scope, scope
    return old


@contextlib.contextmanager
def scope_guard(scope):
    """Executor.run calls without scope= use `scope` inside the block."""
    if not isinstance(scope, Scope):
        raise TypeError(f"scope_guard needs a fluid.Scope, got {type(scope).__name__}")
    old = _switch_scope(scope)
    try:
        yield
    finally:
        _switch_scope(old)
