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
from fractions import Fraction
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
    low, high = percentiles(means, (tail, 100.0 - tail))
    return low, high


def percentiles(values: np.ndarray, percents: Sequence[float]) -> list[float]:
    """`np.percentile(values, percents)` with its default (linear interpolation between
    the closest ranks), the same floats, for a few percents: a partial sort around their
    ranks, without `np.percentile`'s general machinery (3x the time at 1,000 values)."""
    if np.isnan(values).any():  # as numpy: nothing is known
        return [math.nan] * len(percents)
    last = values.size - 1
    positions = [last * (percent / 100.0) for percent in percents]
    ranks = sorted({rank for position in positions for rank in _neighbours(position, last)})
    ordered = np.partition(values, ranks)
    found: list[float] = []
    for position in positions:
        below, above = _neighbours(position, last)
        low, high = float(ordered[below]), float(ordered[above])
        weight = position - math.floor(position)
        # as numpy: from the nearer end, so that a weight near 1 gives `high` exactly
        if weight >= 0.5:
            found.append(high - (high - low) * (1.0 - weight))
        else:
            found.append(low + (high - low) * weight)
    return found


def _neighbours(position: float, last: int) -> tuple[int, int]:
    below = min(max(math.floor(position), 0), last)
    return below, min(below + 1, last)


# A sample with at most this many distinct values is resampled by drawing how often each
# value is picked (one multinomial draw per resample) instead of every pick ...
FEW_DISTINCT = 16
# ... or, when they lie on a grid of at most this many steps (shares of k checks, weighted
# sums of such shares: most window metrics), on that grid ...
GRID_STEPS = 720
# ... while n values' sums of grid steps take fewer than this many values (the length of
# the transform that gives their distribution): a full default reservoir (128 values) on
# a grid of up to 63 steps. Past it the multinomial draws are cheaper (0.2-0.35 ms for
# any n, against 0.5 ms for a transform of 16,384 and 5 ms of 131,072).
GRID_SUMS = 1 << 13
# How far from its grid point a value may be, as a share of the sample's range (float
# rounding of fractions such as 5/9); a value taken for a grid point this close moves
# the means by less than that share of the range.
GRID_TOLERANCE = 1e-9


def bootstrap_means(data: np.ndarray, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """The means of `resamples` resamples of `data` with replacement, drawn from the
    distribution of such means in the cheapest exact way:

    - values on a grid of few steps (`sample_grid`): a resample's mean is given by the
      sum of its n picks' grid steps, whose distribution is the n-fold convolution of
      one pick's (one Fourier transform); each mean is drawn from it by inverting its
      CDF at a uniform number: `resamples` numbers instead of `resamples` x n picks, the
      same distribution of means (to float rounding);
    - two distinct values: how often the larger is picked is binomial; few distinct
      values: how often each is picked is multinomial, one draw per resample;
    - otherwise every pick is drawn, as the narrowest integers that index the sample.

    The means come in no particular order."""
    size = data.size
    distinct, counts = np.unique(data, return_counts=True)
    if distinct.size == 1:
        return np.full(resamples, float(distinct[0]))
    if distinct.size == 2:
        larger = rng.binomial(size, counts[1] / size, size=resamples)
        sums: np.ndarray = distinct[0] * (size - larger) + distinct[1] * larger
        return sums / size
    if distinct.size <= FEW_DISTINCT:
        grid = sample_grid(distinct)
        if grid is not None and size * grid[0] < GRID_SUMS:
            return _grid_means(distinct, counts, grid, resamples, rng)
        picked = rng.multinomial(size, counts / size, size=resamples)
        means: np.ndarray = picked @ distinct / size
        return means
    dtype = np.int16 if size <= np.iinfo(np.int16).max else np.int64
    picks = rng.integers(0, size, size=(resamples, size), dtype=dtype)
    means = data[picks].mean(axis=1)
    return means


def sample_grid(distinct: np.ndarray) -> tuple[int, np.ndarray] | None:
    """`(steps, positions)` when sorted distinct values lie on an even grid of at most
    `GRID_STEPS` steps from the smallest to the largest (value i on step positions[i]),
    else None."""
    found = _grid_of(tuple(distinct.tolist()))
    return None if found is None else (found[0], np.asarray(found[1], dtype=np.int64))


@functools.lru_cache(maxsize=1024)  # a metric's scores take the same few values again
def _grid_of(distinct: tuple[float, ...]) -> tuple[int, tuple[int, ...]] | None:
    low, span = distinct[0], distinct[-1] - distinct[0]
    if not (span > 0 and math.isfinite(span)):
        return None
    shares = [(value - low) / span for value in distinct]
    steps = 1
    for share in shares[1:-1]:  # the ends are steps 0 and `steps`
        fraction = Fraction(share).limit_denominator(GRID_STEPS)
        if abs(float(fraction) - share) > GRID_TOLERANCE:
            return None
        steps = math.lcm(steps, fraction.denominator)
        if steps > GRID_STEPS:
            return None
    return steps, tuple(round(share * steps) for share in shares)


def _grid_means(
    distinct: np.ndarray,
    counts: np.ndarray,
    grid: tuple[int, np.ndarray],
    resamples: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """`bootstrap_means` of values on a grid (`sample_grid`): the distribution of the sum
    of n picks' steps (one pick's transformed, to the n-th power, transformed back),
    each mean drawn from it by the inverse of its CDF."""
    steps, positions = grid
    size = int(counts.sum())
    one_pick = np.zeros(steps + 1)
    one_pick[positions] = counts / size
    most = size * steps  # the largest sum of steps
    length = 1 << most.bit_length()  # a power of two above `most`
    transform = _power(np.fft.rfft(one_pick, length), size)
    sums = np.fft.irfft(transform, length)[: most + 1]
    np.maximum(sums, 0.0, out=sums)  # rounding leaves tiny negatives in the tails
    cdf = np.cumsum(sums)
    uniforms = rng.random(resamples)
    uniforms.sort()  # (sorted keys are found faster; the means' order means nothing)
    uniforms *= cdf[-1]
    drawn = np.searchsorted(cdf, uniforms, side="right")
    np.minimum(drawn, most, out=drawn)
    low, span = float(distinct[0]), float(distinct[-1]) - float(distinct[0])
    means: np.ndarray = low + span * (drawn / most)
    return means


def _power(values: np.ndarray, exponent: int) -> np.ndarray:
    """`values ** exponent` (exponent >= 1) elementwise, by squaring: numpy's complex
    power goes through logarithms, at 5x the time."""
    result: np.ndarray | None = None
    base = values
    while True:
        if exponent & 1:
            result = base if result is None else result * base
        exponent >>= 1
        if not exponent:
            assert result is not None
            return result
        base = base * base


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
    low, high = percentiles(stats, (tail, 100.0 - tail))
    return low, high


def mean(values: Iterable[float]) -> float:
    """Arithmetic mean, 0.0 for no values (the seed's `safeMean`)."""
    items = list(values)
    return sum(items) / len(items) if items else 0.0
