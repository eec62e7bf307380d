"""Streaming figures of a quantity over many steps, in fixed size: a quantile sketch and running
moments, both mergeable, so windows written one by one add up to the whole run.

The sketch keeps log-spaced buckets (DDSketch's scheme): bucket i holds values in
(g^(i-1), g^i] with g = (1 + ACCURACY) / (1 - ACCURACY), and a value read back from a bucket
is 2 g^i / (g + 1), within ACCURACY of every value in it. Step times from 1 microsecond to
a day need at most about 2,500 buckets; a steady loop fills a few dozen. Moments merge by
Chan et al.'s formula, so the mean and the coefficient of variation are exact.
"""

import math
from typing import Dict, Optional

from .records import Dist, Sketch

ACCURACY = 0.005  # relative error of every quantile
GAMMA = (1 + ACCURACY) / (1 - ACCURACY)
_LOG_GAMMA = math.log(GAMMA)
MIN_VALUE = 1e-9  # values at or below this (a nanosecond) count as zeros


def bucket(value: float) -> int:
    return math.ceil(math.log(value) / _LOG_GAMMA)


def bucket_value(index: int) -> float:
    return 2.0 * GAMMA ** index / (GAMMA + 1.0)


class SketchBuilder:
    """A sketch being filled: add() values, merge() frozen sketches, frozen() to write it."""

    __slots__ = ("counts", "zeros")

    def __init__(self):
        self.counts: Dict[int, int] = {}
        self.zeros = 0

    @property
    def n(self) -> int:
        return self.zeros + sum(self.counts.values())

    def add(self, value: float):
        if value <= MIN_VALUE:
            self.zeros += 1
            return
        i = math.ceil(math.log(value) / _LOG_GAMMA)
        counts = self.counts
        counts[i] = counts.get(i, 0) + 1

    def add_many(self, values):
        """add() each of `values` (a float64 NumPy array), at once."""
        import numpy as np
        positive = values[values > MIN_VALUE]
        self.zeros += len(values) - len(positive)
        if not len(positive):
            return
        buckets = np.ceil(np.log(positive) / _LOG_GAMMA).astype(np.int64)
        counts = self.counts
        low, high = int(buckets.min()), int(buckets.max())
        if high - low > 4096:  # (a span no step's times have: np.unique's sort)
            found, seen = np.unique(buckets, return_counts=True)
            for i, count in zip(found.tolist(), seen.tolist()):
                counts[i] = counts.get(i, 0) + count
            return
        seen = np.bincount(buckets - low)  # (cheaper than np.unique's sort)
        found = np.flatnonzero(seen)
        for i, count in zip((found + low).tolist(), seen[found].tolist()):
            counts[i] = counts.get(i, 0) + count

    def merge(self, sketch: Sketch):
        self.zeros += sketch.zeros
        counts = self.counts
        for i, count in expand(sketch):
            counts[i] = counts.get(i, 0) + count

    def frozen(self) -> Sketch:
        """The sketch as a record: counts from the lowest bucket on, a run of empty buckets
        written as one negative number (-k: skip k buckets)."""
        if not self.counts:
            return Sketch(0, (), self.zeros)
        keys = sorted(self.counts)
        out, previous = [], keys[0] - 1
        for i in keys:
            if i - previous > 2:
                out.append(previous + 1 - i)  # skip the empty buckets between
            else:
                out.extend([0] * (i - previous - 1))
            out.append(self.counts[i])
            previous = i
        return Sketch(keys[0], tuple(out), self.zeros)

    def quantile(self, q: float) -> Optional[float]:
        """The q-quantile (0..1), interpolated between the ranks on either side as NumPy's
        default does; None when empty."""
        n = self.n
        if not n:
            return None
        rank = (n - 1) * q
        lo, hi = int(rank), min(int(rank) + 1, n - 1)
        a, b = self._at(lo), self._at(hi)
        return a + (b - a) * (rank - lo)

    def _at(self, rank: int) -> float:
        if rank < self.zeros:
            return 0.0
        seen = self.zeros
        for i in sorted(self.counts):
            seen += self.counts[i]
            if seen > rank:
                return bucket_value(i)
        return bucket_value(max(self.counts))


def expand(sketch: Sketch):
    """(bucket, count) of every non-empty bucket of a frozen sketch."""
    i = sketch.offset
    for c in sketch.counts:
        if c < 0:
            i -= c
            continue
        if c:
            yield i, c
        i += 1


class DistBuilder:
    """A quantity's running figures: count, mean, M2, min, max and its sketch."""

    __slots__ = ("n", "mean", "m2", "min", "max", "sketch")

    def __init__(self):
        self.n, self.mean, self.m2 = 0, 0.0, 0.0
        self.min, self.max = math.inf, -math.inf
        self.sketch = SketchBuilder()

    def add(self, value: float):
        self.n += 1
        delta = value - self.mean
        self.mean += delta / self.n
        self.m2 += delta * (value - self.mean)
        if value < self.min:
            self.min = value
        if value > self.max:
            self.max = value
        self.sketch.add(value)

    def add_many(self, values):
        """add() each of `values` (a float64 NumPy array), at once: their moments merged as
        merge() merges a window's."""
        if not len(values):
            return
        mean = float(values.mean())
        self._merge_moments(len(values), mean, float(((values - mean) ** 2).sum()),
                            float(values.min()), float(values.max()))
        self.sketch.add_many(values)

    def merge(self, d: Dist):
        if not d.n:
            return
        self._merge_moments(d.n, d.sum / d.n, d.m2, d.min, d.max)
        self.sketch.merge(d.sketch)

    def _merge_moments(self, n_other: int, mean_other: float, m2_other: float,
                       min_other: float, max_other: float):
        """Chan et al.'s pairwise update: these figures and another set's, as one."""
        n = self.n + n_other
        delta = mean_other - self.mean
        self.m2 += m2_other + delta * delta * self.n * n_other / n
        self.mean += delta * n_other / n
        self.n = n
        self.min, self.max = min(self.min, min_other), max(self.max, max_other)

    @property
    def sum(self) -> float:
        return self.mean * self.n

    def frozen(self) -> Dist:
        return Dist(self.n, self.sum, self.m2, self.min if self.n else 0.0,
                    self.max if self.n else 0.0, self.sketch.frozen())

    def cv(self) -> float:
        if not self.n or self.mean <= 0:
            return 0.0
        return math.sqrt(max(self.m2, 0.0) / self.n) / self.mean
