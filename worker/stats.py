"""Mergeable statistics: moment accumulators, a bottom-k reservoir, bootstrap intervals.

Everything here is pure and deterministic. State is plain JSON-compatible data so it can
live in a changelog-backed table and be merged exactly (counts and sums, never raw rows;
the reservoir is bounded).
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

BOOTSTRAP_RESAMPLES = 1000
BOOTSTRAP_SEED = 20240101


@dataclass
class Moments:
    """Count, sum, sum of squares, min and max of a stream of numbers."""

    count: int = 0
    total: float = 0.0
    total_sq: float = 0.0
    low: float | None = None
    high: float | None = None

    def add(self, value: float) -> None:
        self.count += 1
        self.total += value
        self.total_sq += value * value
        self.low = value if self.low is None else min(self.low, value)
        self.high = value if self.high is None else max(self.high, value)

    def merge(self, other: Moments) -> Moments:
        lows = [v for v in (self.low, other.low) if v is not None]
        highs = [v for v in (self.high, other.high) if v is not None]
        return Moments(
            count=self.count + other.count,
            total=self.total + other.total,
            total_sq=self.total_sq + other.total_sq,
            low=min(lows) if lows else None,
            high=max(highs) if highs else None,
        )

    @property
    def mean(self) -> float | None:
        return self.total / self.count if self.count else None

    @property
    def std(self) -> float | None:
        """Population standard deviation."""
        if not self.count:
            return None
        mean = self.total / self.count
        return math.sqrt(max(0.0, self.total_sq / self.count - mean * mean))

    def to_json(self) -> list[Any]:
        return [self.count, self.total, self.total_sq, self.low, self.high]

    @classmethod
    def from_json(cls, data: Sequence[Any]) -> Moments:
        count, total, total_sq, low, high = data
        return cls(int(count), float(total), float(total_sq), low, high)


@functools.lru_cache(maxsize=1 << 16)
def sample_key(item_id: str) -> float:
    """A uniform pseudo-random number in [0, 1) fixed by the item's id."""
    digest = hashlib.blake2b(item_id.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


# Values a window keeps per metric for its bootstrap CI: the default of the `reservoir_size`
# setting and of every window state built without one.
DEFAULT_RESERVOIR_SIZE = 128


@dataclass
class Reservoir:
    """A uniform sample of at most `capacity` values, as a bottom-k sketch.

    Each item keeps the key `sample_key(id)`; the sample is the `capacity` items with the
    smallest keys. Merging two reservoirs is the same as sampling the union, and an id seen
    twice is kept once, so replays do not skew the sample.
    """

    capacity: int
    items: dict[str, float] = field(default_factory=dict)  # id -> value

    def add(self, item_id: str, value: float) -> None:
        self.items[item_id] = value
        if len(self.items) > self.capacity:
            self._trim()

    def merge(self, other: Reservoir) -> Reservoir:
        merged = Reservoir(max(self.capacity, other.capacity), {**self.items, **other.items})
        merged._trim()
        return merged

    def _trim(self) -> None:
        keep = sorted(self.items, key=sample_key)[: self.capacity]
        self.items = {item_id: self.items[item_id] for item_id in keep}

    def values(self) -> list[float]:
        return [self.items[item_id] for item_id in sorted(self.items)]

    def to_json(self) -> dict[str, Any]:
        return {"capacity": self.capacity, "items": self.items}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Reservoir:
        return cls(int(data["capacity"]), dict(data["items"]))


def bootstrap_ci(
    values: Sequence[float],
    resamples: int = BOOTSTRAP_RESAMPLES,
    confidence: float = 0.95,
    seed: int = BOOTSTRAP_SEED,
) -> tuple[float | None, float | None]:
    """Percentile bootstrap interval of the mean (vectorised, seeded)."""
    data = np.asarray(values, dtype=float)
    if data.size == 0:
        return None, None
    if data.size == 1:
        return float(data[0]), float(data[0])
    means = bootstrap_means(data, resamples, np.random.default_rng(seed))
    tail = (1.0 - confidence) / 2.0 * 100.0
    low, high = np.percentile(means, [tail, 100.0 - tail])
    return float(low), float(high)


# A sample with at most this many distinct values is resampled by drawing how often each
# value is picked (one multinomial draw per resample) instead of every pick.
FEW_DISTINCT = 16


def bootstrap_means(data: np.ndarray, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """The means of `resamples` resamples of `data` with replacement.

    Resampling n values with replacement picks each distinct value a multinomial number
    of times, so a sample of few distinct values (scores on a grid, pass/fail metrics:
    most window metrics) draws those counts, `resamples` x distinct values, instead of
    `resamples` x n picks; the distribution of the means is the same. Otherwise the picks
    are drawn as the narrowest integers that index the sample (a third of the time of
    64-bit ones for a reservoir)."""
    size = data.size
    distinct, counts = np.unique(data, return_counts=True)
    if distinct.size <= FEW_DISTINCT:
        picked = rng.multinomial(size, counts / size, size=resamples)
        means: np.ndarray = picked @ distinct / size
        return means
    dtype = np.int16 if size <= np.iinfo(np.int16).max else np.int64
    picks = rng.integers(0, size, size=(resamples, size), dtype=dtype)
    means = data[picks].mean(axis=1)
    return means


def bootstrap_diff_ci(
    baseline: Sequence[float],
    candidate: Sequence[float],
    paired: bool,
    resamples: int = BOOTSTRAP_RESAMPLES,
    confidence: float = 0.95,
    seed: int = BOOTSTRAP_SEED,
) -> tuple[float | None, float | None]:
    """Bootstrap interval of mean(candidate) - mean(baseline).

    Paired: the two sequences are aligned (same case at the same index) and resampled
    together; otherwise each is resampled on its own.
    """
    base = np.asarray(baseline, dtype=float)
    cand = np.asarray(candidate, dtype=float)
    if base.size == 0 or cand.size == 0:
        return None, None
    rng = np.random.default_rng(seed)
    tail = (1.0 - confidence) / 2.0 * 100.0
    if paired:
        if base.size != cand.size:
            raise ValueError("paired samples must have the same length")
        diffs = cand - base
        picks = rng.integers(0, diffs.size, size=(resamples, diffs.size))
        stats = diffs[picks].mean(axis=1)
    else:
        base_means = base[rng.integers(0, base.size, size=(resamples, base.size))].mean(axis=1)
        cand_means = cand[rng.integers(0, cand.size, size=(resamples, cand.size))].mean(axis=1)
        stats = cand_means - base_means
    low, high = np.percentile(stats, [tail, 100.0 - tail])
    return float(low), float(high)


def mean(values: Iterable[float]) -> float:
    """Arithmetic mean, 0.0 for no values (the seed's `safeMean`)."""
    items = list(values)
    return sum(items) / len(items) if items else 0.0
