"""Folded micro-batches: the windows count a fold exactly as they count its cases one by
one, a fold read again changes nothing, and cases replayed after a rebalance are not
counted twice."""

from __future__ import annotations

import math
import random
from datetime import UTC, datetime
from typing import Any

import orjson
import pytest

from schemas.outputs import CaseResult, RecordSource
from worker import aggregation
from worker.config import WindowConfig
from worker.stream.publish import Contributions, Folding
from worker.suites.registry import AGGREGATORS
from worker.windowing.event_time import Marker
from worker.windowing.lateness import LatenessPolicy
from worker.windowing.pane_folds import PaneFold
from worker.windowing.store import WindowStore
from worker.windowing.windows import pane_width

T0 = 1_700_000_100.0  # 2023-11-14T22:15:00Z, a whole five minutes
WINDOWS = [WindowConfig(size=60), WindowConfig(size=3600, step=300)]
MODELS = ["m1", "m2", "m3"]


def case(index: int, ts: float, partition: int, offset: int, rng: random.Random) -> CaseResult:
    label = rng.choice(["Pass", "Review", "Fail"])
    scores = {name: rng.random() for name in ("CR", "AH", "AC", "composite")}
    return CaseResult.model_construct(
        id=f"c{index}",
        suite="safe",
        kind="case",
        ts=datetime.fromtimestamp(ts, UTC),
        model=MODELS[index % len(MODELS)],
        labels={},
        scores=scores,
        label=label,
        grade=None,
        details={"archetype": rng.choice(["Safety_Signal", "Process_Auditor"])},
        counts={"ah_violations": rng.randint(0, 2)},
        trace_id=None,
        source=RecordSource.model_construct(topic="in", partition=partition, offset=offset),
    )


def cases(count: int, seed: int = 7) -> list[CaseResult]:
    """Cases over ten minutes from two input partitions, event times slightly out of order."""
    rng = random.Random(seed)
    offsets = {0: 0, 1: 0}
    out = []
    for index in range(count):
        partition = index % 2
        ts = T0 + index * (600 / count) + rng.uniform(-3, 3)
        out.append(case(index, ts, partition, offsets[partition], rng))
        offsets[partition] += 1
    return out


def store() -> WindowStore:
    return WindowStore(
        {}, {}, configs=WINDOWS, lateness=LatenessPolicy(5.0), aggregators=AGGREGATORS
    )


def segments(result: CaseResult) -> tuple[tuple[str, dict[str, str], bytes], ...]:
    return tuple(
        (f"safe|{aggregation.segment_key(s)}", s, orjson.dumps(s))
        for s in aggregation.segments_for(result.model, result.labels, ["model"])
    )


SENT: dict[bytes, CaseResult] = {}  # what each value sent case by case was made of


def batch_of(results: list[CaseResult], fold_from: dict[int, int]) -> Contributions:
    folding = Folding(pane_width(WINDOWS) or 0.0, AGGREGATORS, 128)
    batch = Contributions(folding, fold_from)
    for result in results:
        value = result.model_dump_json().encode()
        SENT[value] = result
        batch.add(result, value, segments(result))
    return batch


def deliver(target: WindowStore, batch: Contributions) -> None:
    """What the window stage does with the batch's records (through JSON, as on the wire)."""
    for _key, segment, values, fold, _folded in batch.items():
        for value in values:
            target.add(0, SENT[value], orjson.loads(segment))
        if fold is not None:
            target.add_fold(0, orjson.loads(orjson.dumps(fold.to_json())), orjson.loads(segment))


def finals(target: WindowStore) -> dict[str, dict[str, Any]]:
    emissions = target.advance(0, Marker("in", 0, 1, T0 + 10 * 3600))
    return {
        e.key: aggregation.to_message(
            e.state, True, datetime.now(UTC), AGGREGATORS["safe"]
        ).model_dump(mode="json", exclude={"emitted_at"})
        for e in emissions
    }


def assert_same(left: Any, right: Any, path: str = "") -> None:
    """Equal, with floats equal up to summation order."""
    if isinstance(left, float) and isinstance(right, float):
        assert math.isclose(left, right, rel_tol=1e-9, abs_tol=1e-12), path
    elif isinstance(left, dict) and isinstance(right, dict):
        assert sorted(left) == sorted(right), path
        for key in left:
            assert_same(left[key], right[key], f"{path}.{key}")
    elif isinstance(left, list) and isinstance(right, list):
        assert len(left) == len(right), path
        for index, (a, b) in enumerate(zip(left, right, strict=True)):
            assert_same(a, b, f"{path}[{index}]")
    else:
        assert left == right, path


@pytest.mark.parametrize("batch_size", [1, 7, 50, 400])
def test_folded_batches_give_the_aggregates_of_counting_case_by_case(batch_size: int) -> None:
    results = cases(400)
    one_by_one, folded = store(), store()
    for result in results:
        for key, segment, _ in segments(result):
            assert key
            one_by_one.add(0, result, segment)
    for start in range(0, len(results), batch_size):
        deliver(folded, batch_of(results[start : start + batch_size], {0: 0, 1: 0}))
    expected, got = finals(one_by_one), finals(folded)
    assert sorted(got) == sorted(expected)
    assert sum(m["count"] for k, m in got.items() if k.startswith("safe|all|1m|")) == 400
    for key in expected:
        assert_same(got[key], expected[key], key)


def test_below_fold_from_cases_go_one_by_one_and_the_all_cases_fold_is_their_union() -> None:
    results = [r for r in cases(40) if r.source is not None and r.source.partition == 0]
    batch = batch_of(results, {0: 12})
    items = {key: (cases_, fold, folded) for key, _, cases_, fold, folded in batch.items()}
    assert set(items) == {"safe|all", "safe|model=m1", "safe|model=m2", "safe|model=m3"}
    all_cases, fold, folded = items["safe|all"]
    assert len(all_cases) == 12 and len(folded) == 8  # offsets 0-11, then 12-19
    assert fold is not None and fold.count == 8 and fold.span == {"in:0": 19}
    per_model = [items[f"safe|model={m}"][1] for m in MODELS]
    assert sum(f.count for f in per_model if f is not None) == 8
    assert all(state["segment"] == {} for state in fold.panes.values())


def test_a_fold_read_again_after_a_restart_changes_nothing() -> None:
    target = store()
    batch = batch_of(cases(30), {0: 0, 1: 0})
    deliver(target, batch)
    before = orjson.dumps(target._pending, option=orjson.OPT_SORT_KEYS)
    for _key, segment, _values, fold, _ in batch.items():
        assert fold is not None
        again = target.add_fold(
            0, orjson.loads(orjson.dumps(fold.to_json())), orjson.loads(segment)
        )
        assert again.replay and not again.counted
    assert orjson.dumps(target._pending, option=orjson.OPT_SORT_KEYS) == before


def test_cases_replayed_after_a_rebalance_are_not_counted_twice() -> None:
    """The old owner folded offsets 0-29; the new one re-reads from offset 20, case by case
    up to the high watermark it found (40), then folds again."""
    results = [r for r in cases(100) if r.source is not None and r.source.partition == 0]
    target = store()
    deliver(target, batch_of(results[:30], {0: 0}))
    deliver(target, batch_of(results[20:35], {0: 40}))
    deliver(target, batch_of(results[35:50], {0: 40}))
    counted = finals(target)
    assert sum(m["count"] for k, m in counted.items() if k.startswith("safe|all|1m|")) == 50


def test_a_fold_behind_closed_windows_is_late_and_changes_nothing() -> None:
    target = store()
    target.advance(0, Marker("in", 0, 1, T0 + 4000))  # every minute window before is closed
    early = [r for r in cases(20) if r.ts.timestamp() < T0 + 3000]
    batch = batch_of(early, {0: 0, 1: 0})
    for key, segment, _values, fold, _ in batch.items():
        assert fold is not None
        admission = target.add_fold(
            0, orjson.loads(orjson.dumps(fold.to_json())), orjson.loads(segment)
        )
        assert admission.late and admission.late_cases == fold.count, key


def test_a_fold_takes_only_case_results_with_their_source() -> None:
    result = cases(1)[0]
    fold = PaneFold("safe", {}, 60.0, AGGREGATORS["safe"])
    with pytest.raises(ValueError):
        fold.add(result.model_copy(update={"source": None}))
