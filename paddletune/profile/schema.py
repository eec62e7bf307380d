"""The schema engine: record classes are frozen dataclasses or NamedTuples whose annotations
are the schema. `decode(cls, value)` checks a JSON value against them and builds the record;
`encode(record)` turns one back into JSON-ready values.

Decoding is strict about what analysis relies on and lenient about what it does not: a wrong
type, a missing required field, a non-finite or out-of-range number is a SchemaError naming
the field's path (`wait.share`, `ops[3].dur_s`); a field the class does not know (written by
a newer minor version) is ignored, and a NaN or infinity in an optional number field reads as
absent (not measured). Mappings decode to read-only dicts and sequences to
tuples, so a loaded record is frozen all the way down.

Field types understood: bool, int, float, str, Optional[...], Literal[...], Tuple[X, ...],
fixed Tuple[X, Y], Dict[str, X] / Dict[int, X] (JSON keys are strings), nested record
classes, `Json` (any JSON value, depth-limited) and `Annotated[X, Bounds(lo, hi)]` for
numbers that must lie in a range. The unit aliases below (Seconds, Bytes, ...) are such
bounded numbers, so a field's unit is in both its name and its type.
"""

import collections.abc
import math
import typing
from dataclasses import MISSING, dataclass, fields, is_dataclass
from functools import partial
from typing import Annotated, Any, Callable, Dict, Tuple, Union

MAX_DEPTH = 24  # nesting of opaque JSON values (a hostile file nests thousands deep)
INT_LIMIT = 1 << 62


class SchemaError(ValueError):
    """A JSON value that does not fit its record class: `where` is the field's path."""

    def __init__(self, where: str, problem: str):
        super().__init__(f"{where}: {problem}" if where else problem)
        self.where, self.problem = where, problem


@dataclass(frozen=True)
class Bounds:
    """Annotated metadata: a number must lie in [lo, hi]."""

    lo: float = -math.inf
    hi: float = math.inf


class JsonValue:
    """Marker type: any JSON value (checked only for depth)."""


Json = JsonValue
Seconds = Annotated[float, Bounds(0.0, 1e9)]  # a duration
TimeS = Annotated[float, Bounds(-1e9, 1e10)]  # seconds on the session clock (since t0)
Bytes = Annotated[int, Bounds(0, INT_LIMIT)]
Count = Annotated[int, Bounds(0, INT_LIMIT)]
Id = Annotated[int, Bounds(-INT_LIMIT, INT_LIMIT)]  # program, executor, loader ids
Share = Annotated[float, Bounds(0.0, 1e6)]  # a fraction: 1.0 is all of it
Percent = Annotated[float, Bounds(0.0, 1e7)]  # 100 is one core / all of a GPU
Number = Annotated[float, Bounds(-1e300, 1e300)]  # any finite number
Scalar = Union[bool, int, float, str, None]  # a flag's or a knob's value
Names = Tuple[str, ...]  # variable names


class FrozenDict(dict):
    """A dict that refuses changes (loaded records are frozen all the way down)."""

    def _readonly(self, *args, **kwargs):
        raise TypeError("a loaded profile is read-only")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = _readonly
    __ior__ = _readonly

    def __hash__(self):
        return hash(tuple(sorted(self.items(), key=repr)))

    def __reduce__(self):
        return (FrozenDict, (dict(self),))


EMPTY = FrozenDict()


# --- decoding ------------------------------------------------------------------------------------
Decoder = Callable[[Any, str], Any]
_DECODERS: Dict[Any, Decoder] = {}


def decode(cls, value, where: str = ""):
    """`value` (parsed JSON) as an instance of `cls`; SchemaError naming the bad field."""
    return decoder_for(cls)(value, where)


def decoder_for(tp) -> Decoder:
    """The (cached) decoder of a type annotation."""
    found = _DECODERS.get(tp)
    if found is None:
        found = _DECODERS[tp] = _compile(tp)
    return found


def _compile(tp) -> Decoder:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Annotated:
        bounds = next((m for m in tp.__metadata__ if isinstance(m, Bounds)), Bounds())
        return _bounded(_compile(args[0]), bounds)
    if tp in _SCALARS:
        return _SCALARS[tp]
    if tp is JsonValue or tp is Any:
        return _json
    if origin is Union:
        return _union(args)
    if origin is typing.Literal:
        return _literal(args)
    if origin in (tuple, Tuple):
        return _sequence(args)
    if origin in (dict, Dict, typing.Mapping, collections.abc.Mapping):
        return _mapping(args)
    if is_record(tp):
        return _record(tp)
    raise TypeError(f"no decoder for the annotation {tp!r}")


def show(value) -> str:
    """A short, escaped rendering of a bad value for an error message."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _bool(value, where):
    if not isinstance(value, bool):
        raise SchemaError(where, f"expected true or false, got {show(value)}")
    return value


def _int(value, where):
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer() and abs(value) < INT_LIMIT:
            return int(value)  # 3.0 written by another tool
        raise SchemaError(where, f"expected an integer, got {show(value)}")
    if abs(value) >= INT_LIMIT:
        raise SchemaError(where, f"integer out of range: {show(value)}")
    return value


def _float(value, where):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SchemaError(where, f"expected a number, got {show(value)}")
    try:
        value = float(value)
    except OverflowError:
        raise SchemaError(where, "number out of range") from None
    if not math.isfinite(value):
        raise SchemaError(where, f"expected a finite number, got {value}")
    return value


def _str(value, where):
    if not isinstance(value, str):
        raise SchemaError(where, f"expected a string, got {show(value)}")
    return value


_SCALARS = {bool: _bool, int: _int, float: _float, str: _str}


def _bounded(inner: Decoder, bounds: Bounds) -> Decoder:
    if bounds == Bounds():
        return inner

    def check(value, where):
        value = inner(value, where)
        if not bounds.lo <= value <= bounds.hi:
            raise SchemaError(where, f"{show(value)} is outside [{bounds.lo:g}, {bounds.hi:g}]")
        return value
    return check


def _union(args) -> Decoder:
    optional = type(None) in args
    options = [a for a in args if a is not type(None)]
    if options and all(a in _SCALARS for a in options):  # Scalar: the value's own type first
        def scalar(value, where):
            if value is None and optional:
                return None
            own = type(value) if type(value) in options else None
            for kind in ([own] if own else []) + options:
                try:
                    return _SCALARS[kind](value, where)
                except SchemaError:
                    continue
            raise SchemaError(where, f"expected one of {', '.join(a.__name__ for a in options)}"
                                     f", got {show(value)}")
        return scalar
    if len(options) != 1:
        raise TypeError(f"unions of records are decoded by kind, not by shape: {args}")
    inner = _compile(options[0])
    numeric = _base(options[0]) in (int, float)

    def maybe(value, where):
        if value is None or (numeric and isinstance(value, float) and not math.isfinite(value)):
            return None  # an optional number that is NaN/inf: not measured
        return inner(value, where)
    return maybe


def _base(tp):
    """The type under Annotated[...] metadata."""
    return typing.get_args(tp)[0] if typing.get_origin(tp) is Annotated else tp


def _literal(args) -> Decoder:
    allowed = set(args)

    def literal(value, where):
        if isinstance(value, (dict, list)) or value not in allowed:
            raise SchemaError(where, f"expected one of {sorted(map(str, allowed))}, "
                                     f"got {show(value)}")
        return value
    return literal


def _sequence(args) -> Decoder:
    variadic = len(args) == 2 and args[1] is Ellipsis
    items = [_compile(args[0])] if variadic else [_compile(a) for a in args]

    def sequence(value, where):
        if not isinstance(value, (list, tuple)):
            raise SchemaError(where, f"expected an array, got {show(value)}")
        if variadic:
            dec = items[0]
            return tuple(dec(v, f"{where}[{i}]") for i, v in enumerate(value))
        if len(value) != len(items):
            raise SchemaError(where, f"expected {len(items)} items, got {len(value)}")
        return tuple(dec(v, f"{where}[{i}]") for i, (dec, v) in enumerate(zip(items, value)))
    return sequence


def _mapping(args) -> Decoder:
    key_type, value_type = args if args else (str, JsonValue)
    values = _compile(value_type)
    int_keys = key_type is int or typing.get_origin(key_type) is Annotated

    def mapping(value, where):
        if not isinstance(value, dict):
            raise SchemaError(where, f"expected an object, got {show(value)}")
        out = {}
        for key, item in value.items():
            path = f"{where}[{show(key)}]"
            if int_keys:
                try:
                    key = _int(int(key), path) if isinstance(key, str) else _int(key, path)
                except ValueError:
                    raise SchemaError(path, "expected an integer key") from None
            elif not isinstance(key, str):
                key = str(key)
            out[key] = values(item, path)
        return FrozenDict(out)
    return mapping


def _json(value, where, depth=0):
    if depth > MAX_DEPTH:
        raise SchemaError(where, f"nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, dict):
        return FrozenDict({str(k): _json(v, where, depth + 1) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(_json(v, where, depth + 1) for v in value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


# --- records -------------------------------------------------------------------------------------
def is_namedtuple(cls) -> bool:
    return isinstance(cls, type) and issubclass(cls, tuple) and hasattr(cls, "_fields")


def made_in_c(cls) -> Callable[[tuple], tuple]:
    """A NamedTuple class's instances made from one tuple of every field's value, in order,
    by tuple.__new__ (C): the class's own constructor is a Python function, a frame (and cold
    bytecode) on the training thread at each step or batch."""
    return partial(tuple.__new__, cls)


def is_record(cls) -> bool:
    return is_namedtuple(cls) or (isinstance(cls, type) and is_dataclass(cls))


@dataclass(frozen=True)
class Field:
    """One field of a record class, as the schema engine and the format docs see it."""

    name: str
    annotation: Any
    required: bool
    default: Any


def record_fields(cls) -> Tuple[Field, ...]:
    """The fields of a record class in declaration order."""
    hints = typing.get_type_hints(cls, include_extras=True)
    if is_namedtuple(cls):
        defaults = cls._field_defaults
        return tuple(Field(n, hints[n], n not in defaults, defaults.get(n)) for n in cls._fields)
    out = []
    for f in fields(cls):
        if not f.init:
            continue
        default = f.default if f.default is not MISSING else (
            f.default_factory() if f.default_factory is not MISSING else MISSING)
        out.append(Field(f.name, hints[f.name], default is MISSING,
                         None if default is MISSING else default))
    return tuple(out)


def _record(cls) -> Decoder:
    plan = []
    _DECODERS[cls] = lambda value, where: decoded(value, where)  # self-reference (nesting)
    for f in record_fields(cls):
        plan.append((f.name, _compile(f.annotation), f.required, f.default))
    as_array = getattr(cls, "JSON_ARRAY", False)
    factory = cls._make if is_namedtuple(cls) else None

    def decoded(value, where):
        if as_array and isinstance(value, (list, tuple)):
            value = dict(zip((name for name, *_ in plan), value))
        if not isinstance(value, dict):
            raise SchemaError(where, f"expected an object, got {show(value)}")
        out = []
        for name, dec, required, default in plan:
            item = value.get(name, MISSING)
            if item is MISSING or (item is None and not required and default is None):
                if required:
                    raise SchemaError(f"{where}.{name}" if where else name, "missing")
                out.append(default)
            else:
                out.append(dec(item, f"{where}.{name}" if where else name))
        if factory is not None:
            return factory(out)
        return cls(**{name: v for (name, *_), v in zip(plan, out)})
    return decoded


# --- encoding ------------------------------------------------------------------------------------
_ENCODE_PLANS: Dict[type, tuple] = {}


def encode(value, defaults: bool = False):
    """`value` as JSON-ready values: records as objects (arrays for JSON_ARRAY classes), tuples
    as lists, non-finite floats as None. The fields that hold their default are left out (a
    file stays short; decoding fills them in) unless `defaults` (output for scripts, where
    every key is always there)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, (bool, int, str)):
        return value
    cls = type(value)
    if is_record(cls):
        return _encode_record(value, cls, defaults)
    if isinstance(value, dict):
        return {str(k): encode(v, defaults) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [encode(v, defaults) for v in value]
    if hasattr(value, "item"):  # a NumPy scalar
        return encode(value.item())
    return str(value)


def _encode_record(record, cls, defaults):
    plan = _ENCODE_PLANS.get(cls)
    if plan is None:
        plan = _ENCODE_PLANS[cls] = tuple((f.name, f.required, f.default)
                                          for f in record_fields(cls))
    if getattr(cls, "JSON_ARRAY", False):
        return [encode(getattr(record, name), defaults) for name, _, _ in plan]
    out = {}
    for name, required, default in plan:
        value = getattr(record, name)
        if not (required or defaults) and (value is None or value == default):
            continue
        out[name] = encode(value, defaults)
    return out
