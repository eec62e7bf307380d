"""fluid.layers.utils: nested structures of Variables (lists, tuples, dicts), as the
control-flow layers pass them around: flatten, pack_sequence_as, map_structure,
assert_same_structure."""


def _is_sequence(value):
    return isinstance(value, (list, tuple, dict))


def _items(value):
    if isinstance(value, dict):
        return [value[k] for k in sorted(value)]
    return list(value)


def flatten(nest):
    """The leaves of a nested structure, depth first (dict values by sorted key)."""
    if not _is_sequence(nest):
        return [nest]
    out = []
    for item in _items(nest):
        out.extend(flatten(item))
    return out


def pack_sequence_as(structure, flat_sequence):
    """`flat_sequence` arranged like `structure`."""
    flat = list(flat_sequence)
    packed, used = _pack(structure, flat, 0)
    if used != len(flat):
        raise ValueError(f"the structure has {used} leaves but {len(flat)} values were given")
    return packed


def _pack(structure, flat, at):
    if not _is_sequence(structure):
        return flat[at], at + 1
    items = []
    for item in _items(structure):
        packed, at = _pack(item, flat, at)
        items.append(packed)
    if isinstance(structure, dict):
        return dict(zip(sorted(structure), items)), at
    if isinstance(structure, tuple) and hasattr(structure, "_fields"):  # a namedtuple
        return type(structure)(*items), at
    return type(structure)(items), at


def map_structure(func, *structures):
    """func applied leaf by leaf to structures of the same shape."""
    for other in structures[1:]:
        assert_same_structure(structures[0], other, check_types=False)
    flats = [flatten(s) for s in structures]
    return pack_sequence_as(structures[0], [func(*leaves) for leaves in zip(*flats)])


def assert_same_structure(nest1, nest2, check_types=True):
    """ValueError unless both have the same nesting and number of leaves."""
    if _is_sequence(nest1) != _is_sequence(nest2):
        raise ValueError(f"The two structures don't have the same nested structure: {nest1!r} "
                         f"and {nest2!r}")
    if not _is_sequence(nest1):
        return
    if check_types and type(nest1) is not type(nest2):
        raise TypeError(f"The two structures don't have the same sequence type: "
                        f"{type(nest1).__name__} and {type(nest2).__name__}")
    if isinstance(nest1, dict) and sorted(nest1) != sorted(nest2):
        raise ValueError(f"The two dictionaries don't have the same set of keys: "
                         f"{sorted(nest1)} and {sorted(nest2)}")
    a, b = _items(nest1), _items(nest2)
    if len(a) != len(b):
        raise ValueError(f"The two structures don't have the same number of elements: "
                         f"{len(a)} and {len(b)}")
    for x, y in zip(a, b):
        assert_same_structure(x, y, check_types)


def is_sequence(value):
    return _is_sequence(value)
