"""Log-spaced histogram buckets: the reader probe counts waits in them, the summary reads
quantiles back (10 buckets per decade, so a quantile is within 12% of the true value)."""

import math

PER_DECADE = 10
FLOOR = -60  # the first bucket: everything under 1 µs (10^-6 s) counts as no wait


FLOOR_S = 10.0 ** (FLOOR / PER_DECADE)


def bucket(seconds: float) -> int:
    """floor(PER_DECADE * log10(seconds)), at least FLOOR."""
    if seconds <= FLOOR_S:
        return FLOOR
    return max(FLOOR, math.floor(PER_DECADE * math.log10(seconds)))


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
