"""fluid.io: saving and loading a program's variables (parameters, optimizer state), plus the
Paddle 1.x reader decorators that Fluid 1.8 re-exports here.

Values are read from and written to the scope executors use by default,
`runtime.scope.global_scope()` (so `fluid.scope_guard` picks where they go).

On-disk format (paddletune's own, not Paddle's binary LoDTensor format):

* without `filename`: `dirname/<variable name>` holds one variable in NumPy `.npy` format
  (written with allow_pickle=False), and `dirname/__manifest__.json` records
  `{"format": "paddletune-vars", "version": 1, "vars": {name: {"shape": [...],
  "dtype": "float32"}}}`. Saving more variables into the same directory adds to the manifest.
* with `filename`: `dirname/filename` is one uncompressed zip (the `.npz` layout, so
  `np.load` can read it) holding `<name>.npy` per variable and `__manifest__.json`.

Every file is written to a temporary file in the same directory and then moved over the old
one with `os.replace`, so an interrupted save leaves the previous file intact. Loading checks
everything (missing values, shapes, dtypes, corrupt files) before it changes the scope, and
every problem raises `SerializationError` naming the file or variable and the fix.
"""

import difflib
import io as _pyio
import json
import os
import warnings
import zipfile

import numpy as np

from .atomic import TMP_PREFIX as _TMP_PREFIX
from .atomic import atomic_write as _atomic_write
from .dtypes import VarType
from .errors import SerializationError, UnsavedValueError
from .framework import Parameter, Program, Variable, default_main_program
from .reader import (ComposeNotAligned, batch, buffered, cache, chain, compose, firstn,
                     map_readers, multiprocess_reader, shuffle, xmap_readers)
from .reader.loader import DataLoader, GeneratorLoader, PyReader, ReaderTimeout
from .reader.map_style import BatchSampler, Dataset, default_collate_fn
from .reader.worker_main import SharedMemoryExhausted, WorkerInfo, get_worker_info
from .reader.workers import ReaderWorkerError
from .scope import global_scope
from .tensor import SelectedRows

__all__ = ["save_vars", "save_params", "save_persistables", "load_vars", "load_params",
           "load_persistables", "save_inference_model", "load_inference_model", "is_parameter", "is_persistable", "batch", "shuffle",
           "buffered", "xmap_readers", "multiprocess_reader", "firstn", "chain", "compose", "map_readers", "cache",
           "ComposeNotAligned", "DataLoader", "PyReader", "GeneratorLoader", "ReaderTimeout",
           "get_worker_info", "WorkerInfo", "ReaderWorkerError", "SharedMemoryExhausted",
           "Dataset", "BatchSampler", "default_collate_fn"]

FORMAT_NAME = "paddletune-vars"
FORMAT_VERSION = 1
MANIFEST = "__manifest__.json"
_TENSOR_TYPES = (VarType.LOD_TENSOR, VarType.SELECTED_ROWS)


def is_parameter(var):
    return isinstance(var, Parameter)


def is_persistable(var):
    """Persistable tensors (parameters, optimizer state, learning rates); readers, feed/fetch
    holders and other non-tensor variables are never saved."""
    return bool(var.persistable) and var.type in _TENSOR_TYPES


# --- public API --------------------------------------------------------------------------------
def save_vars(executor, dirname, main_program=None, vars=None, predicate=None, filename=None):
    """Save `vars` (Variables or names), or the variables of `main_program` for which
    `predicate(var)` holds (default: is_persistable), to `dirname`."""
    selected = _select(main_program, vars, predicate)
    if not selected:  # Paddle 1.8 warns (this exact text) and writes nothing
        warnings.warn("no variable in your model, please ensure there are any variables in "
                      "your model to save")
        return None
    arrays = {var.name: _value_of(var) for var in selected}
    if dirname is None:  # Paddle 1.8: saved to memory, the bytes returned
        buffer = _pyio.BytesIO()
        _write_zip(buffer, arrays)
        return buffer.getvalue()
    dirname = os.fspath(dirname)
    os.makedirs(dirname, exist_ok=True)
    if filename is None:
        _save_dir(dirname, arrays)
    else:
        _save_file(os.path.join(dirname, os.fspath(filename)), arrays)


def save_params(executor, dirname, main_program=None, filename=None):
    """Save the parameters of main_program (not the optimizer state)."""
    return save_vars(executor, dirname, main_program, predicate=is_parameter, filename=filename)


def save_persistables(executor, dirname, main_program=None, filename=None):
    """Save every persistable of main_program: parameters, optimizer state, learning rate."""
    return save_vars(executor, dirname, main_program, predicate=is_persistable,
                     filename=filename)


def load_vars(executor, dirname, main_program=None, vars=None, predicate=None, filename=None):
    """Load `vars` (or main_program's variables for which `predicate` holds, default
    is_persistable) from `dirname` into the global scope. Works before the startup program ran
    (it creates the values)."""
    selected = _select(main_program, vars, predicate)
    if not selected:  # a model without variables saved nothing
        return
    if dirname is None:  # from memory: `filename` holds what save_vars(dirname=None) gave
        if not isinstance(filename, (bytes, bytearray)):
            raise ValueError("load_vars: with dirname=None, pass the saved bytes as filename")
        with zipfile.ZipFile(_pyio.BytesIO(bytes(filename))) as zf:
            _store(executor, selected, _load_members(zf, "<memory>", selected))
        return
    dirname = os.fspath(dirname)
    if not os.path.isdir(dirname):
        raise SerializationError(f"cannot load variables: directory {dirname!r} does not exist "
                                 f"(check the path, and that save_* wrote to it)")
    if filename is None:
        arrays = _load_dir(dirname, selected)
    else:
        arrays = _load_file(os.path.join(dirname, os.fspath(filename)), selected)
    _store(executor, selected, arrays)


def load_params(executor, dirname, main_program=None, filename=None):
    load_vars(executor, dirname, main_program, predicate=is_parameter, filename=filename)


def load_persistables(executor, dirname, main_program=None, filename=None):
    load_vars(executor, dirname, main_program, predicate=is_persistable, filename=filename)


# --- choosing variables and reading/writing the scope ------------------------------------------
def _select(main_program, vars, predicate):
    program = default_main_program() if main_program is None else main_program
    program = getattr(program, "_program", program)  # a CompiledProgram saves its Program
    if not isinstance(program, Program):
        raise TypeError(f"main_program must be a fluid.Program or None, got "
                        f"{type(program).__name__}")
    block = program.global_block()
    if vars is None:
        predicate = is_persistable if predicate is None else predicate
        return [v for v in block.vars.values() if predicate(v) and v.type in _TENSOR_TYPES]
    vars = [vars] if isinstance(vars, (Variable, str)) else list(vars)
    chosen = [block.var(v) if isinstance(v, str) else v for v in vars]
    for var in chosen:
        if not isinstance(var, Variable):
            raise TypeError(f"vars must hold Variables or names, got {var!r}")
    return [v for v in chosen if v.type in _TENSOR_TYPES]


def _value_of(var):
    holder = global_scope().find_var(var.name)
    value = holder.value if holder is not None else None
    if value is None:
        raise UnsavedValueError(
            f"cannot save variable {var.name!r}: it has no value in the current scope. Run the "
            f"startup program first (exe.run(fluid.default_startup_program())), in the same "
            f"scope (fluid.scope_guard) as this save")
    if isinstance(value, SelectedRows):
        value = value.to_dense()
    if not isinstance(value, np.ndarray):
        value = value.get() if hasattr(value, "get") else np.asarray(value)  # a device array
    return value


def _store(executor, selected, arrays):
    xp = getattr(executor, "xp", np)
    scope = global_scope()
    if xp is not np:  # onto the executor's device, not the current one
        with xp.cuda.Device(executor.place.get_device_id()):
            arrays = {var.name: xp.asarray(arrays[var.name]) for var in selected}
    for var in selected:
        holder = scope.find_var(var.name) or scope.var(var.name)
        holder.value = arrays[var.name]


# --- directory layout --------------------------------------------------------------------------
def _save_dir(dirname, arrays):
    for name in arrays:
        _check_file_name(name)
    entries = _read_manifest(dirname, strict=False)
    for name, array in arrays.items():
        _atomic_write(os.path.join(dirname, name), lambda f, a=array: _write_npy(f, a))
        entries[name] = _describe(array)
    text = _manifest_text(entries)
    _atomic_write(os.path.join(dirname, MANIFEST), lambda f: f.write(text.encode()))


def _load_dir(dirname, selected):
    entries = _read_manifest(dirname, strict=True)
    saved = {n for n in os.listdir(dirname) if not _is_internal(n)
             and os.path.isfile(os.path.join(dirname, n))}
    _check_all_present(selected, saved, dirname, lambda: _dir_hint(dirname, saved))
    arrays = {}
    for var in selected:
        path = os.path.join(dirname, var.name)
        try:
            with open(path, "rb") as f:
                array = _read_npy(f, path)
        except OSError as err:
            raise SerializationError(f"cannot read {path!r}: {err}") from None
        _check_against_manifest(array, entries.get(var.name), path)
        arrays[var.name] = _check_fits(var, array, path)
    return arrays


def _read_manifest(dirname, strict):
    """The manifest's {name: {shape, dtype}}; {} when there is none. A corrupt manifest is an
    error when loading (strict) and is replaced when saving."""
    path = os.path.join(dirname, MANIFEST)
    if not os.path.exists(path):
        return {}
    try:
        with open(path, "rb") as f:
            return _parse_manifest(f.read(), path)
    except (OSError, SerializationError) as err:
        if not strict:
            return {}
        if isinstance(err, OSError):
            raise SerializationError(f"cannot read {path!r}: {err}") from None
        raise


def _check_file_name(name):
    if name in ("", ".", "..", MANIFEST) or any(c in name for c in "/\\\0"):
        raise SerializationError(f"variable name {name!r} cannot be a file name; save with "
                                 f"filename='params.npz' to put every variable in one file")


def _is_internal(name):
    return name == MANIFEST or name.startswith(_TMP_PREFIX)


def _dir_hint(dirname, saved):
    """When every file of a directory is a single-file save, say to load with filename=."""
    names = sorted(saved)
    if names:
        single = [n for n in names if zipfile.is_zipfile(os.path.join(dirname, n))]
        if single and len(single) == len(names):
            return (f"; it holds {', '.join(map(repr, single[:3]))}, a single-file save: load "
                    f"with filename={single[0]!r}")
        return ""
    return "; the directory is empty"


# --- single-file layout ------------------------------------------------------------------------
def _save_file(path, arrays):
    _atomic_write(path, lambda f: _write_zip(f, arrays))


def _write_zip(f, arrays):
    with zipfile.ZipFile(f, "w", compression=zipfile.ZIP_STORED) as zf:
        for name, array in arrays.items():
            with zf.open(name + ".npy", "w", force_zip64=True) as member:
                _write_npy(member, array)
        entries = {name: _describe(array) for name, array in arrays.items()}
        zf.writestr(MANIFEST, _manifest_text(entries))


def _load_file(path, selected):
    if not os.path.isfile(path):
        raise SerializationError(f"cannot load variables: file {path!r} does not exist"
                                 f"{_layout_hint(os.path.dirname(path))}")
    try:
        with zipfile.ZipFile(path) as zf:
            return _load_members(zf, path, selected)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError) as err:
        raise SerializationError(f"{path!r} is not a readable variables file (corrupt or "
                                 f"truncated zip: {err}); save it again") from None


def _load_members(zf, path, selected):
    members = set(zf.namelist())
    if MANIFEST not in members:
        raise SerializationError(f"{path!r} has no {MANIFEST}: it was not written by "
                                 f"fluid.io.save_* (or is truncated); save it again")
    entries = _parse_manifest(zf.read(MANIFEST), f"{path}:{MANIFEST}")
    _check_all_present(selected, set(entries), path)
    arrays = {}
    for var in selected:
        where = f"{path}:{var.name}"
        if var.name + ".npy" not in members:
            raise SerializationError(f"{where} is listed in the manifest but missing from the "
                                     f"file (truncated?); save it again")
        with zf.open(var.name + ".npy") as member:
            array = _read_npy(_pyio.BytesIO(member.read()), where)
        _check_against_manifest(array, entries[var.name], where)
        arrays[var.name] = _check_fits(var, array, where)
    return arrays


def _layout_hint(dirname):
    if os.path.exists(os.path.join(dirname, MANIFEST)):
        return (f"; {dirname!r} holds one file per variable (saved without filename=), so load "
                f"without filename=")
    present = sorted(n for n in os.listdir(dirname) if not _is_internal(n))
    return f"; files there: {present[:10]}" if present else "; the directory is empty"


# --- checks ------------------------------------------------------------------------------------
def _check_all_present(selected, saved, where, hint=lambda: ""):
    """SerializationError unless every selected variable is saved; hint() adds to the message."""
    missing = [v.name for v in selected if v.name not in saved]
    if not missing:
        return
    close = {n: difflib.get_close_matches(n, sorted(saved), n=2) for n in missing[:5]}
    names = ", ".join(f"{n!r} (closest saved: {', '.join(map(repr, c))})" if c else repr(n)
                      for n, c in close.items())
    more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
    raise SerializationError(
        f"{len(missing)} variable(s) of the program have no saved value in {where!r}: "
        f"{names}{more}. It holds {len(saved)} variable(s){hint()}. Was it saved from "
        f"a different program (layer names depend on build order), or with save_params while "
        f"you load persistables (then use load_params)?")


def _check_fits(var, array, where):
    if var.dtype is not None and array.dtype != var.dtype:
        raise SerializationError(
            f"{where}: saved dtype {array.dtype.name} does not match variable {var.name!r} of "
            f"the program, which is {var.dtype.name}. Build the program with the dtype it was "
            f"saved with, or convert the saved values")
    shape = var.shape
    if shape is not None and (len(shape) != array.ndim or
                              any(d >= 0 and d != a for d, a in zip(shape, array.shape))):
        raise SerializationError(
            f"{where}: saved shape {list(array.shape)} does not match variable {var.name!r} of "
            f"the program, whose shape is {list(shape)}. Did a layer's size change since it "
            f"was saved? Build the same network as the one saved, or skip this variable "
            f"(load_vars with vars=[...])")
    return array


def _check_against_manifest(array, entry, where):
    if entry is None:
        return
    if list(array.shape) != list(entry.get("shape", ())) or array.dtype.name != entry.get("dtype"):
        raise SerializationError(
            f"{where}: the file holds {array.dtype.name}{list(array.shape)} but the manifest "
            f"says {entry.get('dtype')}{entry.get('shape')}; the save was interrupted or the "
            f"files were mixed from two saves. Save again")


# --- file helpers ------------------------------------------------------------------------------
def _describe(array):
    return {"shape": list(array.shape), "dtype": array.dtype.name}


def _manifest_text(entries):
    """The manifest as JSON with one variable per line (readable, diffable)."""
    lines = [f"  {json.dumps(name)}: {json.dumps(entries[name])}" for name in sorted(entries)]
    head = f'{{"format": "{FORMAT_NAME}", "version": {FORMAT_VERSION}, "vars": {{'
    return head + ("\n" + ",\n".join(lines) + "\n" if lines else "") + "}}\n"


def _parse_manifest(raw, where):
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise SerializationError(f"{where!r} is not valid JSON ({err}); the save was "
                                 f"interrupted or the file was edited. Save again") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT_NAME or \
            not isinstance(data.get("vars"), dict):
        raise SerializationError(f"{where!r} is not a {FORMAT_NAME} manifest")
    if data.get("version") != FORMAT_VERSION:
        raise SerializationError(f"{where!r} has format version {data.get('version')!r}; this "
                                 f"runtime reads version {FORMAT_VERSION}")
    return data["vars"]


def _write_npy(f, array):
    np.lib.format.write_array(f, np.ascontiguousarray(array), allow_pickle=False)


def _read_npy(f, where):
    try:
        array = np.lib.format.read_array(f, allow_pickle=False)
    except (ValueError, EOFError, OSError, SyntaxError, TypeError) as err:
        raise SerializationError(f"{where!r} is not a valid .npy array (corrupt or truncated: "
                                 f"{err}); save it again") from None
    if f.read(1):
        raise SerializationError(f"{where!r} has trailing bytes after its array (corrupt); "
                                 f"save it again")
    return array


from .io_inference import (get_parameter_value, get_parameter_value_by_name,  # noqa: E402,F401
                           load_inference_model, save_inference_model)
