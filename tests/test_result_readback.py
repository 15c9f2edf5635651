"""The score stage reads back each result a scoring child built: the same result as the
child's, whichever way it is read (`result_from_json`, and `result_facts`, what the event
loop reads: the same key, segments, folds and metrics as the validated result gives)."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any

import orjson

from tests.streamkit import EXAMPLES, envelopes, make_config, settings_of
from worker.input.records import result_from_json
from worker.input.result_facts import ResultView, SourceFacts, result_facts
from worker.input.scored_records import ScoredRecord, score_record
from worker.ops.telemetry import Telemetry
from worker.scoring_pool import case_scorer_factories
from worker.stream.publish import Contributions, Folding, Publisher
from worker.suites.registry import AGGREGATORS


def scored_examples(suite: str) -> list[bytes]:
    settings = settings_of(make_config())
    scorers = {name: factory(settings) for name, factory in case_scorer_factories().items()}
    values = []
    for offset, envelope in enumerate(envelopes(EXAMPLES / suite / "envelopes.jsonl")):
        task = (orjson.dumps(envelope), time.time(), ("in", 0, offset, None), 0.0)
        scored = score_record(task, settings, scorers, {})
        if isinstance(scored, ScoredRecord):
            values.append(scored.value)
    return values


def test_results_read_back_serialize_to_the_bytes_the_child_sent() -> None:
    values = scored_examples("safe") + scored_examples("extraction")
    assert values
    for value in values:
        assert result_from_json(value).model_dump_json().encode() == value


def test_a_result_that_no_longer_validates_is_still_read() -> None:
    data = orjson.loads(scored_examples("safe")[0])
    data["scores"]["composite"] = None  # e.g. a NaN score, serialized as null
    result = result_from_json(orjson.dumps(data))
    assert result.scores["composite"] is None
    assert result.ts.tzinfo is not None and result.source is not None


FIELDS = (
    "id", "suite", "kind", "ts", "model", "labels", "scores", "label", "grade",
    "details", "counts", "scored_at", "trace_id",
)  # fmt: skip


def test_the_loop_reads_the_same_facts_as_the_validated_result() -> None:
    values = scored_examples("safe") + scored_examples("extraction")
    for value in values:
        facts, result = result_facts(value), result_from_json(value)
        assert result.source is not None and facts.source is not None
        assert facts.source == SourceFacts(
            result.source.topic, result.source.partition, result.source.offset
        )
        for name in FIELDS:
            assert getattr(facts, name) == getattr(result, name), name
        assert facts.ts.timestamp() == result.ts.timestamp()


def published(read: Any, values: list[bytes]) -> tuple[list[Any], list[bytes]]:
    """What a micro-batch of `values` read with `read` goes out as: its results, each
    key's contributions (folds as JSON), and the metrics it leaves."""
    settings = settings_of(make_config(segment_by=["model"]))
    telemetry = Telemetry(settings.segment_by)
    topic = SimpleNamespace(get_topic_name=lambda: "topic")
    topics: Any = SimpleNamespace(results=topic, aggregate_input=topic)  # nothing is sent
    publisher = Publisher(topics, settings, telemetry)
    # results of partition 0 from offset 3 on fold, the ones before go case by case
    batch = Contributions(Folding(60.0, AGGREGATORS, settings.reservoir_size), {0: 3})
    views: list[ResultView] = [read(value) for value in values]

    async def publish() -> None:
        for view, value in zip(views, values, strict=True):
            await publisher.result(view, batch=batch, value=value)

    asyncio.run(publish())
    out: list[Any] = list(batch.results)
    for key, segment, cases, fold, folded in batch.items():
        out.append((key, segment, cases, None if fold is None else fold.to_json(), folded))
    telemetry.record_results((view, 0.01, 1.0) for view in views)
    metrics = [line for line in telemetry.render().splitlines() if b"_created" not in line]
    return out, metrics


def test_facts_publish_fold_and_count_as_the_validated_results_do() -> None:
    values = scored_examples("safe") + scored_examples("extraction")
    assert len(values) > 3
    by_facts, by_results = published(result_facts, values), published(result_from_json, values)
    assert by_facts == by_results
    contributions = by_facts[0][len(values) :]
    assert any(fold is not None for _, _, _, fold, _ in contributions)
    assert any(cases for _, _, cases, _, _ in contributions)


def test_facts_of_a_result_that_no_longer_validates_are_still_read() -> None:
    data = orjson.loads(scored_examples("safe")[0])
    data["scores"]["composite"] = None
    facts = result_facts(orjson.dumps(data))
    assert facts.scores["composite"] is None
    assert facts.ts.tzinfo is not None and facts.source is not None
