"""`paddle.compat` (Paddle 1.8's Python 2/3 helpers, Python 3 behaviour): text and bytes
conversion of strings and of lists, sets and dicts of them, round half away from zero,
floor division, an exception's message."""

import math

int_type = int
long_type = int

__all__ = ["long_type", "to_text", "to_bytes", "round", "floor_division",
           "get_exception_message"]


def _convert(obj, one, inplace, dicts):
    if obj is None:
        return None
    if isinstance(obj, list):
        if inplace:
            obj[:] = [one(item) for item in obj]
            return obj
        return [one(item) for item in obj]
    if isinstance(obj, set):
        converted = {one(item) for item in obj}
        if inplace:
            obj.clear()
            obj.update(converted)
            return obj
        return converted
    if dicts and isinstance(obj, dict):
        converted = {one(k): one(v) for k, v in obj.items()}
        if inplace:
            obj.update(converted)
            return obj
        return converted
    return one(obj)


def to_text(obj, encoding="utf-8", inplace=False):
    """str from bytes (decoded), str, or a list/set/dict of them; bools and floats unchanged."""
    def one(item):
        if item is None or isinstance(item, (str, bool, float)):
            return item
        if isinstance(item, bytes):
            return item.decode(encoding)
        return str(item)
    return _convert(obj, one, inplace, dicts=True)


def to_bytes(obj, encoding="utf-8", inplace=False):
    """bytes from str (encoded), bytes, or a list/set of them."""
    def one(item):
        if item is None or isinstance(item, bytes):
            return item
        if isinstance(item, str):
            return item.encode(encoding)
        return bytes(str(item), "latin-1")
    return _convert(obj, one, inplace, dicts=False)


def round(x, d=0):  # noqa: A001  (Paddle's name)
    """Round half away from zero to d decimals (Python 3's round() rounds half to even)."""
    if x == 0.0:
        return math.copysign(0.0, x)
    p = 10 ** d
    shifted = x * p + math.copysign(0.5, x)
    return float(math.floor(shifted) if x > 0 else math.ceil(shifted)) / p


def floor_division(x, y):
    return x // y


def get_exception_message(exc):
    assert exc is not None
    return str(exc)
