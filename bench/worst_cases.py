"""Cost of keeping the worst cases per metric in the window state.

Folds the same extraction-shaped results (15 per-case metrics, like the extraction suite)
into one window with `worst_k=0` (the baseline: no drill-down) and with the default
`worst_k`, several times each, and prints min / median / max of the time per result as
ratios against the baseline median of the same run, and the state size of each.

Run: .venv/bin/python bench/worst_cases.py [--results N] [--runs R]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from datetime import UTC, datetime, timedelta

import orjson

from schemas.outputs import CaseResult, RecordSource, Versions
from worker import aggregation
from worker.gates.fields import SCORE_METRICS
from worker.windowing.windows import WindowKey

METRICS = SCORE_METRICS["extraction"]  # the extraction suite's per-result scores
WINDOW = WindowKey(3600.0, None, 1_714_564_800.0)


def results(count: int) -> list[CaseResult]:
    rng = random.Random(7)
    start = datetime.fromtimestamp(WINDOW.start, UTC)
    return [
        CaseResult.model_construct(
            id=f"case-{index:07d}",
            suite="extraction",
            kind="case",
            ts=start + timedelta(milliseconds=index),
            model="m1",
            labels={},
            scores={metric: round(rng.random(), 2) for metric in METRICS},
            label=None,
            grade=None,
            details={},
            counts={},
            versions=Versions(scorer="1", metrics="1"),
            source=RecordSource(topic="in", partition=0, offset=index),
            scored_at=start,
            trace_id=f"{index + 1:032x}",
        )
        for index in range(count)
    ]


def fold_seconds(items: list[CaseResult], worst_k: int) -> tuple[float, int]:
    state = aggregation.initialise("extraction", {}, WINDOW, worst_k=worst_k)
    started = time.perf_counter()
    for item in items:
        aggregation.update(state, item, None)
    return time.perf_counter() - started, len(orjson.dumps(state))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--results", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    items = results(args.results)
    timings: dict[int, list[float]] = {0: [], aggregation.DEFAULT_WORST_K: []}
    sizes: dict[int, int] = {}
    for _ in range(args.runs):
        for worst_k in timings:  # interleaved, so drift hits both alike
            seconds, sizes[worst_k] = fold_seconds(items, worst_k)
            timings[worst_k].append(seconds / len(items))
    baseline = statistics.median(timings[0])
    print(f"{args.results} results x {len(METRICS)} metrics, {args.runs} runs")
    print(f"baseline (worst_k=0): median {baseline * 1e6:.1f} us per result")
    for worst_k, values in timings.items():
        ratios = [value / baseline for value in values]
        print(
            f"worst_k={worst_k}: time per result min {min(ratios):.3f} "
            f"median {statistics.median(ratios):.3f} max {max(ratios):.3f} x baseline; "
            f"state {sizes[worst_k]} bytes ({sizes[worst_k] / sizes[0]:.3f} x baseline)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
