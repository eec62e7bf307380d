"""The BLAS library behind NumPy: which one, its version, and its thread count (get and set).

NumPy's matmul runs on a multi-threaded BLAS (OpenBLAS in the PyPI wheels, sometimes MKL or
BLIS). Its thread count multiplies with the executor's own threads, so the runtime must be
able to report it and change it. Found by looking for the library NumPy loaded and calling
its documented thread API through ctypes; anything unknown is reported as None, never raised.
"""

import ctypes
import glob
import os

import numpy as np

# (family, get-threads symbols, set-threads symbols, version symbols), tried in order
_APIS = (
    ("openblas",
     ("scipy_openblas_get_num_threads64_", "scipy_openblas_get_num_threads",
      "openblas_get_num_threads64_", "openblas_get_num_threads"),
     ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads",
      "openblas_set_num_threads64_", "openblas_set_num_threads"),
     ("scipy_openblas_get_config64_", "scipy_openblas_get_config", "openblas_get_config64_",
      "openblas_get_config")),
    ("mkl", ("MKL_Get_Max_Threads",), ("MKL_Set_Num_Threads",), ()),
    ("blis", ("bli_thread_get_num_threads",), ("bli_thread_set_num_threads",), ()),
)
_PATTERNS = ("openblas", "mkl_rt", "libmkl", "blis")


class BlasLibrary:
    def __init__(self, family, path, get_fn, set_fn, version_fn):
        self.family, self.path = family, path
        self._get, self._set, self._version = get_fn, set_fn, version_fn

    @property
    def version(self):
        if self._version is None:
            return None
        self._version.restype = ctypes.c_char_p
        raw = self._version()
        return raw.decode(errors="replace").strip() if raw else None

    def get_threads(self):
        return int(self._get()) if self._get is not None else None

    def set_threads(self, n):
        if self._set is None:
            return False
        self._set(int(n))
        return True

    def as_dict(self):
        return {"family": self.family, "path": self.path, "version": self.version,
                "threads": self.get_threads()}


def _loaded_paths():
    """Shared libraries in this process that look like BLAS (Linux /proc), else NumPy's own."""
    paths = []
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.rsplit(None, 1)[-1]
                name = os.path.basename(path).lower()
                if path.startswith("/") and any(p in name for p in _PATTERNS):
                    paths.append(path)
    except OSError:
        pass
    libs_dir = os.path.join(os.path.dirname(np.__file__), os.pardir, "numpy.libs")
    paths += glob.glob(os.path.join(libs_dir, "*openblas*"))
    return list(dict.fromkeys(os.path.realpath(p) for p in paths))


def _first(lib, names):
    for name in names:
        fn = getattr(lib, name, None)
        if fn is not None:
            return fn
    return None


def _probe(path):
    try:
        lib = ctypes.CDLL(path)
    except OSError:
        return None
    for family, gets, sets, versions in _APIS:
        get_fn = _first(lib, gets)
        if get_fn is not None:
            return BlasLibrary(family, path, get_fn, _first(lib, sets),
                               _first(lib, versions))
    return None


_cache = {}


def numpy_blas():
    """The BLAS library NumPy uses, or None when it cannot be identified."""
    if "lib" not in _cache:
        np.dot(np.ones((2, 2)), np.ones((2, 2)))  # make sure NumPy's BLAS is loaded
        found = [lib for lib in map(_probe, _loaded_paths()) if lib is not None]
        _cache["lib"] = found[0] if found else None
    return _cache["lib"]


def get_blas_threads():
    lib = numpy_blas()
    return lib.get_threads() if lib is not None else None


def set_blas_threads(n):
    """Set NumPy's BLAS thread count; returns the previous count (None if unknown)."""
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"BLAS thread count must be a positive int, got {n!r}")
    lib = numpy_blas()
    if lib is None:
        return None
    previous = lib.get_threads()
    lib.set_threads(n)
    return previous


def blas_info():
    """{'family', 'path', 'version', 'threads'} of NumPy's BLAS (values None when unknown)."""
    lib = numpy_blas()
    if lib is None:
        return {"family": None, "path": None, "version": None, "threads": None}
    return lib.as_dict()
