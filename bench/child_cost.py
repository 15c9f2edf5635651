"""What a scoring child spends per SAFE record (issue 25), without Kafka or a process hop.

    .venv/bin/python bench/child_cost.py [--n 5000] [--rounds 7]

Takes N SAFE envelopes (`bench/stream.py`'s records) and times per record, over several
rounds, the steps a scoring child runs on each (`scored_records.score_record`):
decoding and validating the envelope, the SAFE case scorer, and the whole record from
its bytes to its result's bytes; then a chunk of 64 records as the pool runs it
(`scoring_pool._run_chunk`). Beside the scorer, in the same rounds, the same cases
scored with their figures computed case by case from the seed's formulas (recall,
avoids-harm, composite, pass flags and label: what `score_case` did before it cached
them per counts and settings); the ratio now / before is the scorer's saving. Likewise
the result's bytes: written by orjson (`case_result_json`, now) beside a validated
`CaseResult` serialized by pydantic (`build_result(...).model_dump_json()`, before).
Prints min / median / max microseconds per record; the garbage collector runs before each
step.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import stream as stream_bench

from schemas.envelope import SafePayload
from worker.config import Settings, load_settings
from worker.input import scored_records
from worker.input.records import build_result, case_result_json, decode_record
from worker.input.scored_records import RecordTask, score_record
from worker.scoring_pool import (
    _RECORDS,
    CHUNK_RECORDS,
    _run_chunk,
    _start_child,
    case_scorer_factories,
)
from worker.suites.base import Scored
from worker.suites.safe.scoring import (
    METRICS,
    UNKNOWN_ARCHETYPE,
    VACUOUS,
    avoids_harm,
    composite,
    is_vacuous,
    label_for,
    match_case,
    metric_passes,
    recall,
    score_case,
)
from worker.suites.safe.settings import SafeSettings


def score_case_before(payload: SafePayload, settings: SafeSettings) -> Scored:
    """`score_case` as it was: every figure computed again for each case."""
    strict = settings.strict_ah
    matches = match_case(payload)
    violations = len(matches.forbidden.found)
    exact = {
        "CR": recall(matches.signals),
        "AH": avoids_harm(violations, matches.forbidden.total, strict),
        "AC": recall(matches.phrases),
    }
    scores: dict[str, float] = {m: float(exact[m]) for m in METRICS}
    scores["composite"] = composite(exact, settings.weights)
    details: dict[str, Any] = {
        "test_id": payload.test_id,
        "archetype": payload.archetype.strip() or UNKNOWN_ARCHETYPE,
        "concern_id": payload.concern_id,
        "batch_id": payload.batch_id,
        "CR": {"found": list(matches.signals.found), "missing": list(matches.signals.missing)},
        "AH": {"violations": list(matches.forbidden.found)},
        "AC": {"found": list(matches.phrases.found), "missing": list(matches.phrases.missing)},
        "passed": dict(metric_passes(scores, settings.thresholds).items()),
        "ah_mode": "strict" if strict else "proportional",
    }
    if is_vacuous(matches):
        details[VACUOUS] = True
    return Scored(
        scores=scores,
        label=label_for(scores, settings.thresholds),
        details=details,
        counts={
            "cr_found": len(matches.signals.found),
            "cr_total": matches.signals.total,
            "ah_violations": violations,
            "ah_total": matches.forbidden.total,
            "ac_found": len(matches.phrases.found),
            "ac_total": matches.phrases.total,
        },
    )


def per_record(step: Callable[[Any], Any], items: Sequence[Any], per_item: int = 1) -> float:
    """Microseconds per record of `step` over `items` (each item `per_item` records)."""
    gc.collect()
    started = time.perf_counter()
    for item in items:
        step(item)
    return (time.perf_counter() - started) * 1e6 / (len(items) * per_item)


def tasks_of(n: int) -> list[RecordTask]:
    records = stream_bench.make_records("safe", n, "child", time.time() - 3600)
    now = time.time()
    return [(value, now, ("in", 0, offset, None), 0.0) for offset, (_, value) in enumerate(records)]


def run(n: int, rounds: int) -> dict[str, list[float]]:
    settings: Settings = load_settings(None, environ={})
    factories = case_scorer_factories()
    _start_child(settings, factories)  # as in a child: its scorers and versions
    scorers = {suite: factory(settings) for suite, factory in factories.items()}
    tasks = tasks_of(n)
    payloads = [
        decode_record(task[0], settings.max_record_bytes, settings.limits).payload for task in tasks
    ]
    chunks = [tasks[i : i + CHUNK_RECORDS] for i in range(0, n, CHUNK_RECORDS)]
    versions: dict[str, Any] = {}
    results = result_fields(tasks, settings, scorers)
    steps: dict[str, Callable[[], float]] = {
        "decode and validate": lambda: per_record(
            lambda task: decode_record(task[0], settings.max_record_bytes, settings.limits),
            tasks,
        ),
        "score: before (figures per case)": lambda: per_record(
            lambda payload: score_case_before(payload, settings.safe), payloads
        ),
        "score: now (figures cached)": lambda: per_record(
            lambda payload: score_case(payload, settings.safe), payloads
        ),
        "result: before (validated model)": lambda: per_record(
            lambda fields: build_result(**fields).model_dump_json().encode(), results
        ),
        "result: now (orjson)": lambda: per_record(
            lambda fields: case_result_json(**fields), results
        ),
        "record: bytes to result bytes": lambda: per_record(
            lambda task: score_record(task, settings, scorers, versions), tasks
        ),
        f"chunk of {CHUNK_RECORDS} (_run_chunk)": lambda: per_record(
            lambda chunk: _run_chunk(_RECORDS, chunk), chunks, CHUNK_RECORDS
        ),
    }
    timings: dict[str, list[float]] = {name: [] for name in steps}
    for step in steps.values():  # warm-up: caches, lazy imports
        step()
    for _ in range(rounds):
        for name, step in steps.items():
            timings[name].append(step())
    before = timings["score: before (figures per case)"]
    now = timings["score: now (figures cached)"]
    timings["ratio score now / before"] = [a / b for a, b in zip(now, before, strict=True)]
    before = timings["result: before (validated model)"]
    now = timings["result: now (orjson)"]
    timings["ratio result now / before"] = [a / b for a, b in zip(now, before, strict=True)]
    return timings


def result_fields(
    tasks: Sequence[RecordTask], settings: Settings, scorers: dict[str, Any]
) -> list[dict[str, Any]]:
    """What each record's result is written from, as `score_record` passes it."""
    fields: list[dict[str, Any]] = []

    def keep(**values: Any) -> bytes:
        fields.append(values)
        return case_result_json(**values)

    writer = scored_records.case_result_json
    scored_records.case_result_json = keep
    try:
        for task in tasks:
            score_record(task, settings, scorers, {})
    finally:
        scored_records.case_result_json = writer
    return fields


def report(timings: dict[str, list[float]]) -> None:
    print(f"{'us per SAFE record':<38}{'min':>8}{'median':>9}{'max':>8}")
    for name, values in timings.items():
        print(f"{name:<38}{min(values):>8.2f}{statistics.median(values):>9.2f}{max(values):>8.2f}")


def parse_args(argv: Iterable[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=5000, help="SAFE records per step")
    parser.add_argument("--rounds", type=int, default=7)
    return parser.parse_args(None if argv is None else list(argv))


if __name__ == "__main__":
    arguments = parse_args()
    report(run(arguments.n, arguments.rounds))
