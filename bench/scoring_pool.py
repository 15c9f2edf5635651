"""Cost of scoring in the scoring pool (child processes, a deadline per record) against
scoring on the caller's thread, without Kafka.

    .venv/bin/python bench/scoring_pool.py [--runs 5] [--n 5000] [--batch 500]

For SAFE and extraction: the example envelopes, repeated to N records; "inline" decodes
each record and calls the suite's case scorer in this process (what the score stage did
before the pool), "pool" decodes each record here (the stage needs the envelope) and
sends its raw bytes through `ScoringPool.score` (as the stage does) in micro-batches of
`--batch` (the score stage's batch size), one child process. Prints
results per second (min / median / max of the runs) and the ratio pool / inline of the
medians.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from worker.config import Settings, load_settings  # noqa: E402
from worker.input import records as input_records  # noqa: E402
from worker.scoring_pool import ScoringPool  # noqa: E402
from worker.suites import registry  # noqa: E402

EXAMPLES = REPO / "examples"


def records(settings: Settings, suite: str, count: int) -> list[tuple[str, Any, int]]:
    lines = (EXAMPLES / suite / "envelopes.jsonl").read_bytes().splitlines()
    lines = [line for line in lines if line.strip()]
    cases: list[tuple[str, Any, int]] = []
    for index in range(count):
        line = lines[index % len(lines)]
        record = input_records.decode_record(line, settings.max_record_bytes, settings.limits)
        cases.append((record.suite, line, len(line)))
    return cases


def inline_rate(settings: Settings, cases: list[tuple[str, Any, int]]) -> float:
    scorers: dict[str, Any] = {}
    started = time.perf_counter()
    for suite, line, _ in cases:
        payload = input_records.decode_record(line, settings.max_record_bytes, settings.limits)
        scorer = scorers.get(suite)
        if scorer is None:
            spec = registry.get(suite)
            assert spec.case_scorer is not None
            scorer = scorers[suite] = spec.case_scorer(spec.section(settings))
        scorer(payload.payload)
    return len(cases) / (time.perf_counter() - started)


async def pool_rate(
    settings: Settings, pool: ScoringPool, cases: list[tuple[str, Any, int]], batch: int
) -> float:
    started = time.perf_counter()
    for first in range(0, len(cases), batch):
        for _, line, _ in cases[first : first + batch]:
            input_records.decode_record(line, settings.max_record_bytes, settings.limits)
        outcomes = await pool.score(cases[first : first + batch])
        assert all(outcome.scored is not None for outcome in outcomes)
    return len(cases) / (time.perf_counter() - started)


def spread(values: list[float]) -> str:
    return f"{min(values):8.0f} {statistics.median(values):8.0f} {max(values):8.0f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--n", type=int, default=5000)
    parser.add_argument("--batch", type=int, default=500)
    args = parser.parse_args()
    settings = load_settings(EXAMPLES / "extraction" / "config.yaml", environ={})
    pool = ScoringPool(settings, processes=1)
    pool.start()
    print(f"results/s over {args.n} records, {args.runs} runs (min median max)")
    try:
        for suite in ("safe", "extraction"):
            cases = records(settings, suite, args.n)
            inline, pooled = [], []
            for _ in range(args.runs):  # interleaved: the machine is shared
                inline.append(inline_rate(settings, cases))
                pooled.append(asyncio.run(pool_rate(settings, pool, cases, args.batch)))
            ratio = statistics.median(pooled) / statistics.median(inline)
            print(f"{suite:10}  inline {spread(inline)}")
            print(f"{suite:10}  pool   {spread(pooled)}   pool/inline {ratio:.2f}")
    finally:
        pool.close()


if __name__ == "__main__":
    main()
