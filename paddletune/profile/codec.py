"""One record as one JSON object, and back: the record registry (which class a line's "type"
and discriminator name) and the step records' compact form (their rarely changing fields
written only when they change)."""

import json
from math import isfinite
from operator import attrgetter
from typing import Callable, Dict, Optional, Tuple

from . import records as r
from .figures import Summary
from .schema import SchemaError, decode, encode, record_fields

REGISTRY: Dict[Tuple[str, Optional[str]], type] = {}
for _cls in r.RECORDS + (Summary,):
    _disc = r.DISCRIMINATORS.get(_cls.KIND)
    if _disc is None:
        REGISTRY[(_cls.KIND, None)] = _cls
    elif hasattr(_cls, "WHAT"):
        REGISTRY[(_cls.KIND, _cls.WHAT)] = _cls
REGISTRY.update({("reader", what): r.ReaderEnd for what in ("end", "reset", "error", "left")})
_HAS_FIELD = {cls: {f.name for f in record_fields(cls)} for cls in r.RECORDS + (Summary,)}


class UnknownRecord(SchemaError):
    """A record type (or variant) this version does not know: written by a newer one."""


def to_json(record) -> dict:
    """The record as the JSON object of its line."""
    cls = type(record)
    out = {"type": cls.KIND}
    disc = r.DISCRIMINATORS.get(cls.KIND)
    if disc is not None:
        out[disc] = getattr(record, disc) if disc in _HAS_FIELD[cls] else cls.WHAT
    out.update(encode(record))
    return out


def from_json(obj, where: str = ""):
    """The typed record of a line's parsed JSON; SchemaError naming the field when it does not
    fit its class, UnknownRecord for a type this version does not know."""
    if not isinstance(obj, dict) or not isinstance(obj.get("type"), str):
        raise SchemaError(where, "not a JSON object with a \"type\"")
    kind = obj["type"]
    disc = r.DISCRIMINATORS.get(kind)
    variant = obj.get(disc) if disc else None
    cls = REGISTRY.get((kind, variant if isinstance(variant, str) else None))
    if cls is None and kind == "event":
        cls = r.Event  # an event kind this version does not know: kept as a plain event
    if cls is None:
        known = REGISTRY.get((kind, None)) is not None or any(k == kind for k, _ in REGISTRY)
        what = f"{kind!r} record" + (f" with {disc} {variant!r}" if known else "")
        raise UnknownRecord(where, f"unknown {what}")
    return decode(cls, obj, where)


def kind_of(record) -> str:
    """A record's type and variant, as messages name it ("event exit", "step")."""
    cls = type(record)
    disc = r.DISCRIMINATORS.get(cls.KIND)
    if disc is None:
        return cls.KIND
    return f"{cls.KIND} {getattr(record, disc) if disc in _HAS_FIELD[cls] else cls.WHAT}"


def event_kind(event) -> str:
    """An event's kind ("exit", "error", ...)."""
    return getattr(event, "kind", None) or getattr(type(event), "WHAT", "note")


_SECONDS = ("t_s", "wall_s", "feed_s", "compute_s", "fetch_s", "gap_s", "read_s",
            "compute_wait_s", "compute_queued_s")


class StepCompressor:
    """Writes a step: its times rounded to the nanosecond (the clock's resolution, and a
    shorter number), its rarely changing fields (records.STICKY) only when they differ from
    the same executor and program's previous step.

    The writer calls it for every step it writes in full (the first thousand of a program,
    on the writer's thread, which takes the GIL from the training loop): `text` formats the
    usual step's line at once; any other step is walked against a plan made once instead of
    through the generic `to_json` (`compress`); the lines hold the same values
    (tests/test_profile_codec.py holds them together). A step with a non-finite time where
    the schema takes no null (a required time, read_s) cannot be written: None, and the
    sticky fields' memory is left as it was."""

    _plan = None  # per field of Step: (name, required, default, a time in seconds, nullable)

    def __init__(self):
        self._last: Dict[tuple, tuple] = {}

    @classmethod
    def _fields(cls) -> tuple:
        if cls._plan is None:
            cls._plan = tuple((f.name, f.required, f.default, f.name in _SECONDS,
                               not f.required and f.default is None)
                              for f in record_fields(r.Step))
        return cls._plan

    def text(self, step: r.Step) -> Optional[str]:
        """The step's line, without its newline (None: unwritable). The usual step (plain
        Python values, its sticky fields as the previous step's) is formatted at once,
        its times with nine decimals ("0.000318000"): the same numbers as the rounded floats
        `compress` gives (round(x, 9) is the float nearest the nine-decimal text), in under
        half the writer's time a step (tests/test_profile_codec.py holds the two paths
        together). Any other step: `compress`, encoded."""
        (t_s, program, executor, number, wall_s, feed_s, compute_s, fetch_s, gap_s, batch_size,
         feed_bytes, fetch_bytes, read_s, queue, n_ops, fetch, feed, startup, place, exemplar,
         slot, compute_wait_s, compute_queued_s, samples) = step
        key = (executor, program)
        values = (n_ops, fetch, feed, startup, place)
        if ((exemplar is not None and (exemplar.__class__ is not str
                                       or exemplar not in _EXEMPLARS))
                or values != self._last.get(key)
                or not _TEXT_TYPES.issuperset(map(type, (
                    program, executor, number, gap_s, batch_size, feed_bytes, fetch_bytes,
                    queue, slot, compute_wait_s, compute_queued_s, samples)))
                or not _FLOATS.issuperset(map(type, (t_s, wall_s, feed_s, compute_s, fetch_s,
                                                     read_s)))
                or not isfinite(t_s + wall_s + feed_s + compute_s + fetch_s + read_s)):
            out = self.compress(step)
            return None if out is None else dumps(out)
        parts = [_HEAD % (t_s, program, executor, number, wall_s, feed_s, compute_s, fetch_s)]
        if gap_s is not None:
            parts.append(',"gap_s":%.9f' % gap_s if isfinite(gap_s) else ',"gap_s":null')
        if batch_size is not None:
            parts.append(',"batch_size":%d' % batch_size)
        if feed_bytes:
            parts.append(',"feed_bytes":%d' % feed_bytes)
        if fetch_bytes:
            parts.append(',"fetch_bytes":%d' % fetch_bytes)
        if read_s:
            parts.append(',"read_s":%.9f' % read_s)
        if queue is not None:
            parts.append(',"queue":%d' % queue)
        if exemplar is not None:
            parts.append(_EXEMPLARS[exemplar])
        if slot is not None:
            parts.append(',"slot":%d' % slot)
        if compute_wait_s is not None:
            parts.append(',"compute_wait_s":%.9f' % compute_wait_s if isfinite(compute_wait_s)
                         else ',"compute_wait_s":null')
        if compute_queued_s is not None:
            parts.append(',"compute_queued_s":%.9f' % compute_queued_s
                         if isfinite(compute_queued_s) else ',"compute_queued_s":null')
        if samples is not None:
            parts.append(',"samples":%d' % samples)
        parts.append("}")
        return "".join(parts)

    def compress(self, step: r.Step) -> Optional[dict]:
        key = (step.executor, step.program)
        values = _STICKY_VALUES(step)
        previous = self._last.get(key)
        out = self._generic(step)
        if out is None:
            return None
        self._last[key] = values
        if previous is not None:
            for name, now, before in zip(r.STICKY, values, previous):
                if now == before:
                    out.pop(name, None)
        return out

    def _generic(self, step: r.Step) -> Optional[dict]:
        out = {"type": r.Step.KIND}
        for (name, required, default, seconds, nullable), value in zip(self._fields(), step):
            if not required and (value is None or value == default):
                continue
            if value.__class__ not in _PLAIN:
                value = encode(value)  # (tuples, NumPy scalars)
            if isinstance(value, float):
                if not isfinite(value):
                    if not nullable:
                        return None
                    value = None
                elif seconds:
                    value = round(value, 9)
            out[name] = value
        return out


_HEAD = ('{"type":"step","t_s":%.9f,"program":%d,"executor":%d,"step":%d,"wall_s":%.9f,'
         '"feed_s":%.9f,"compute_s":%.9f,"fetch_s":%.9f')
_EXEMPLARS = {"slow": ',"exemplar":"slow"', "sample": ',"exemplar":"sample"'}
_TEXT_TYPES = frozenset((float, int, type(None)))  # (not bool: "%d" would write it as a
# number)
_PLAIN = (float, int, str, bool)
_FLOATS = frozenset((float,))
_STICKY_VALUES = attrgetter(*r.STICKY)
_NULLABLE_TIMES = ("gap_s", "compute_wait_s", "compute_queued_s")
_NOT_NULL_TIMES = attrgetter(*(name for name in _SECONDS
                                if name not in _NULLABLE_TIMES))  # (the
# schema's: a null there does not load)


def unwritable(step: r.Step) -> bool:
    """A step with a non-finite time where the schema takes no null: no line holds it (one
    sum: a NaN or an infinity in any of them makes it non-finite)."""
    try:
        return not isfinite(sum(_NOT_NULL_TIMES(step)))
    except TypeError:  # not a number at all: the schema's own error, on load
        return False


if r.Step._fields != (
        "t_s", "program", "executor", "step", "wall_s", "feed_s", "compute_s", "fetch_s",
        "gap_s", "batch_size", "feed_bytes", "fetch_bytes", "read_s", "queue", "n_ops", "fetch",
        "feed", "startup", "place", "exemplar", "slot", "compute_wait_s",
        "compute_queued_s", "samples"):  # pragma: no cover
    raise ImportError("records.Step's fields changed: update StepCompressor.text and "
                      "StepProbe._record (probes/step.py), which fill them in order")


class StepFiller:
    """Fills in the rarely changing fields a compressed step left out (the loader's side)."""

    def __init__(self):
        self._known: Dict[tuple, dict] = {}

    def fill(self, step: r.Step) -> r.Step:
        known = self._known.setdefault((step.executor, step.program), dict(r.STICKY_START))
        missing = {}
        for name in r.STICKY:
            value = getattr(step, name)
            if value is None:
                missing[name] = known[name]
            else:
                known[name] = value
        return step._replace(**missing) if missing else step


def _compact_encoder() -> Callable[[object], str]:
    """json.dumps(obj, separators=(",", ":")) for the writer's lines, its C encoder made once:
    JSONEncoder.encode makes a new one per call, a quarter of the cost of a step's JSON (4.8
    against 6.5 us a line). Lines hold no cycles, so none is looked for."""
    encoder = json.JSONEncoder(separators=(",", ":"))
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # (a Python without the C accelerator)
        return encoder.encode
    chunks = make(None, encoder.default, json.encoder.encode_basestring_ascii, None, ":", ",",
                  False, False, True)
    return lambda obj: "".join(chunks(obj, 0))


dumps = _compact_encoder()
