"""Cost of a window's bootstrap interval, the bulk of a final aggregate's arithmetic.

A final aggregate carries a 95 % percentile bootstrap interval (1,000 resamples) per
metric, over the window's reservoir of at most 128 values; on a long backlog hundreds of
windows close, and the scoring process computes them beside the cases. This times, per
interval, for samples shaped like the windows' (the values SAFE's CR, AH, AC and
composite take, a pass/fail metric, and all-distinct scores such as sessions'):

- `picks`: every pick drawn, `data[rng.integers(0, n, (1000, n))].mean(axis=1)` and
  `np.percentile` (the specification's resampling, vectorised: the baseline);
- `before`: the method before grids: how often each distinct value is picked, drawn
  per resample (at most 16 distinct values), else every pick as 16-bit integers;
- `shipped`: `worker.stats.bootstrap_ci` as it is.

It prints min / median / max microseconds of several runs, as ratios against the
baseline's median in the same run, and, as a check that the methods draw the same
distribution, the mean interval ends over 200 seeds of `shipped` and of `picks`.

Run: .venv/bin/python bench/bootstrap.py [--runs R] [--calls N]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np

from worker.stats import bootstrap_ci

RESAMPLES = 1000
SEED = 20240101

# The distinct values the SAFE metrics took in `bench/peer.py --scenario long-backlog`.
SAFE_VALUES = {
    "CR": [1 / 3, 0.5, 2 / 3, 1.0],
    "AH": [0.0, 0.25, 0.5, 2 / 3, 1.0],
    "AC": [0.0, 0.5, 1.0],
    "composite": [0.25, 0.5, 5 / 9, 2 / 3, 5 / 6, 8 / 9, 1.0],
    "pass/fail": [0.0, 1.0],
}


def samples() -> dict[str, np.ndarray]:
    """A full reservoir (128 values) of each shape, and a 60 s window's 83 values."""
    rng = np.random.default_rng(5)
    found: dict[str, np.ndarray] = {}
    for name, values in SAFE_VALUES.items():
        for size in (83, 128):
            weights = rng.dirichlet(np.ones(len(values)) * 2)
            found[f"{name} n={size}"] = rng.choice(values, size=size, p=weights)
    found["all distinct n=128"] = rng.uniform(0.3, 1.0, size=128)
    return found


def picks_ci(data: np.ndarray, seed: int = SEED) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    means = data[rng.integers(0, data.size, size=(RESAMPLES, data.size))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return float(low), float(high)


def before_ci(data: np.ndarray, seed: int = SEED) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    distinct, counts = np.unique(data, return_counts=True)
    if distinct.size <= 16:
        picked = rng.multinomial(data.size, counts / data.size, size=RESAMPLES)
        means = picked @ distinct / data.size
    else:
        means = data[rng.integers(0, data.size, (RESAMPLES, data.size), np.int16)].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return float(low), float(high)


def shipped_ci(data: np.ndarray, seed: int = SEED) -> tuple[float, float]:
    low, high = bootstrap_ci(data.tolist(), seed=seed)
    assert low is not None and high is not None
    return low, high


Method = Callable[[np.ndarray], tuple[float, float]]
METHODS: dict[str, Method] = {
    "picks": picks_ci,
    "before": before_ci,
    "shipped": shipped_ci,
}


def micros(method: Method, data: np.ndarray, calls: int) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        method(data)
    return (time.perf_counter() - started) / calls * 1e6


def mean_ends(method: Callable[..., tuple[float, float]], data: np.ndarray) -> tuple[float, float]:
    ends = [method(data, seed) for seed in range(200)]
    return statistics.fmean(low for low, _ in ends), statistics.fmean(high for _, high in ends)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--calls", type=int, default=200, help="intervals timed per run")
    args = parser.parse_args()
    shapes = samples()
    print(f"us per interval, min / median / max of {args.runs} runs; ratio: median / picks median")
    header = "".join(f"{name:>28}" for name in METHODS)
    print(f"{'sample':<22}{header}   mean ends shipped | picks")
    totals = dict.fromkeys(METHODS, 0.0)
    for label, data in shapes.items():
        times: dict[str, list[float]] = {name: [] for name in METHODS}
        for _ in range(args.runs):  # interleaved, so that a noisy moment hits every method
            for name, method in METHODS.items():
                times[name].append(micros(method, data, args.calls))
        base = statistics.median(times["picks"])
        cells = []
        for name in METHODS:
            series = sorted(times[name])
            middle = statistics.median(series)
            totals[name] += middle
            cells.append(
                f"{series[0]:>6.0f} /{middle:>5.0f} /{series[-1]:>5.0f} ({middle / base:4.2f}x)"
            )
        shipped, baseline = mean_ends(shipped_ci, data), mean_ends(picks_ci, data)
        ends = f"[{shipped[0]:.4f}, {shipped[1]:.4f}] | [{baseline[0]:.4f}, {baseline[1]:.4f}]"
        print(f"{label:<22}" + "".join(f"{cell:>28}" for cell in cells) + "   " + ends)
    base = totals["picks"]
    summed = (f"{name} {total:,.0f} us ({total / base:.2f}x)" for name, total in totals.items())
    print("all samples, medians summed: " + ", ".join(summed))


if __name__ == "__main__":
    main()
