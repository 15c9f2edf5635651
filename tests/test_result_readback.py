"""The score stage reads back each result a scoring child built (`result_from_json`): the
same result as the child's, whichever way it is read."""

from __future__ import annotations

import time

import orjson

from tests.streamkit import EXAMPLES, envelopes, make_config, settings_of
from worker.input.records import result_from_json
from worker.input.scored_records import ScoredRecord, score_record
from worker.scoring_pool import case_scorer_factories


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
