"""Log-spaced histogram buckets: the reader probe counts waits in them, the summary reads
quantiles back (10 buckets per decade, so a quantile is within 12% of the true value)."""

import math
from itertools import repeat
from operator import mul

PER_DECADE = 10
FLOOR = -60  # the first bucket: everything under 1 µs (10^-6 s) counts as no wait


FLOOR_S = 10.0 ** (FLOOR / PER_DECADE)


def bucket(seconds: float) -> int:
    """floor(PER_DECADE * log10(seconds)), at least FLOOR."""
    if seconds <= FLOOR_S:
        return FLOOR
    return max(FLOOR, math.floor(PER_DECADE * math.log10(seconds)))


def buckets(values) -> map:
    """bucket() of each value, lazily, with no Python call per value (the reader probe
    buckets every batch's wait): a value at or under FLOOR_S is taken as FLOOR_S, whose
    bucket the max() makes FLOOR however log10 rounds it. tests/test_probe_reader_records.py
    holds it to bucket()."""
    logs = map(math.log10, map(max, values, repeat(FLOOR_S)))
    return map(max, repeat(FLOOR), map(math.floor, map(mul, repeat(PER_DECADE), logs)))


def value(k: int, within: float = 0.5) -> float:
    """A value in bucket `k`: `within` (0..1) of the way up it on a log scale (0 for the
    FLOOR bucket)."""
    return 0.0 if k <= FLOOR else 10.0 ** ((k + within) / PER_DECADE)


def quantile(hist: dict, q: float):
    """The q-quantile (0..1) of a {bucket (int or str): count} histogram, interpolated within
    its bucket by rank; None when empty."""
    rows = sorted((int(k), n) for k, n in hist.items() if n > 0)
    total = sum(n for _, n in rows)
    if not total:
        return None
    rank, seen = q * total, 0
    for k, n in rows:
        if seen + n >= rank:
            return value(k, (rank - seen) / n)
        seen += n
    return value(rows[-1][0], 1.0)
