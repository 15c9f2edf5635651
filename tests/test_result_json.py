"""`CaseResult` (pydantic, `schemas/outputs.py`, built by `build_result`) owns a result's
JSON; the other paths are held to it here, for arbitrary results. A scoring child writes
each case's result with orjson (`case_result_json`), without building a `CaseResult`: the
bytes must be the ones the validated model serializes to, and a scorer's output the
schema refuses must still be refused. The event loop reads a few fields of those bytes
with orjson (`result_facts`): the same values as the model read from them. The window
stage reads a result out of an already parsed aggregate input (`facts_from_data`): the
same facts as `result_facts` of its bytes. A turn's
result, which the session stage has the child write from a `ResultFrame`, is held to it
too."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.outputs import CaseResult, Versions
from worker.input.records import (
    SourcePosition,
    build_result,
    case_result_json,
    result_from_json,
)
from worker.input.result_facts import SourceFacts, facts_from_data, result_facts
from worker.input.scored_records import ResultFrame, frame_result_json
from worker.input.unknown_fields import with_unknown_fields
from worker.suites.base import Scored

ZONES = st.sampled_from(
    [UTC, timezone(timedelta(hours=2)), timezone(-timedelta(hours=5, minutes=30))]
)
TIMES = st.datetimes(
    min_value=datetime(1970, 1, 2), max_value=datetime(2100, 1, 1), timezones=ZONES
)
NAMES = st.text(max_size=12)
FLOATS = st.floats(allow_nan=True, allow_infinity=True)
INTS = st.integers(min_value=-(2**63), max_value=2**63 - 1)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | INTS | FLOATS | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(NAMES, inner, max_size=4),
    max_leaves=20,
)
SCORED = st.builds(
    Scored,
    scores=st.dictionaries(NAMES, st.none() | FLOATS | INTS | st.booleans(), max_size=5),
    label=st.sampled_from([None, "Pass", "Review", "Fail"]),
    grade=st.sampled_from([None, "A", "B", "C", "D", "F"]),
    details=st.dictionaries(NAMES, JSON_VALUES, max_size=5),
    counts=st.dictionaries(
        NAMES,
        INTS | st.booleans() | st.text(max_size=8) | st.lists(st.text(max_size=8)),
        max_size=4,
    ),
)


@st.composite
def result_fields(draw: st.DrawFn) -> dict[str, Any]:
    scored_at = draw(TIMES)
    return {
        "case_id": draw(st.text(min_size=1, max_size=20)),
        "suite": draw(st.sampled_from(["safe", "extraction", "alignment"])),
        "kind": "case",
        "scored": draw(SCORED),
        "event_time": draw(TIMES),
        "model": draw(st.none() | st.text(max_size=12)),
        "labels": draw(st.dictionaries(NAMES, st.text(max_size=12), max_size=3)),
        "versions": Versions(
            scorer=draw(st.text(max_size=8)),
            metrics=draw(st.text(max_size=8)),
            protocol=draw(st.none() | st.text(max_size=8)),
        ),
        "source": draw(
            st.none()
            | st.builds(SourcePosition, st.text(min_size=1, max_size=10), st.integers(0, 99), INTS)
        ),
        "scored_at": scored_at,
        "received_at": draw(st.none() | st.just(scored_at - timedelta(milliseconds=3)) | TIMES),
        "trace_id": draw(st.none() | st.from_regex(r"\A[0-9a-f]{32}\Z")),
    }


@settings(max_examples=400, deadline=None)
@given(result_fields())
def test_the_bytes_are_the_validated_results(fields: dict[str, Any]) -> None:
    assert case_result_json(**fields) == build_result(**fields).model_dump_json().encode()


FACTS = (
    "id", "suite", "kind", "ts", "model", "labels", "scores", "label", "grade",
    "details", "counts", "scored_at", "trace_id",
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(result_fields())
def test_the_facts_the_loop_reads_are_the_models(fields: dict[str, Any]) -> None:
    value = case_result_json(**fields)
    facts, model = result_facts(value), CaseResult.model_validate_json(value)
    for name in FACTS:
        assert getattr(facts, name) == getattr(model, name), name
    assert facts.ts.utcoffset() == model.ts.utcoffset()
    expected = None if model.source is None else SourceFacts(*model.source.model_dump().values())
    assert facts.source == expected


@settings(max_examples=300, deadline=None)
@given(result_fields())
def test_a_result_read_from_parsed_json_is_the_one_read_from_its_bytes(
    fields: dict[str, Any],
) -> None:
    value = case_result_json(**fields)
    assert facts_from_data(orjson.loads(value)) == result_facts(value)


def test_a_result_that_no_longer_validates_is_read_alike_from_bytes_and_parsed_json() -> None:
    value = case_result_json(**a_result())
    data = orjson.loads(value)
    data["suite"] = "retired"  # not a suite any more: read as it is, not refused
    stale = orjson.dumps(data)
    from_bytes, from_data = result_from_json(stale), facts_from_data(orjson.loads(stale))
    assert from_bytes.suite == from_data.suite == "retired"
    for name in FACTS:
        assert getattr(from_data, name) == getattr(from_bytes, name), name
    assert from_data.ts == datetime(2026, 11, 26, 12, 0, tzinfo=UTC)


def a_result(**scored: Any) -> dict[str, Any]:
    now = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
    values: dict[str, Any] = {
        "scores": {"CR": 1.0},
        "label": "Pass",
        "grade": None,
        "details": {},
        "counts": {},
    }
    return {
        "case_id": "c1",
        "suite": "safe",
        "kind": "case",
        "scored": Scored(**{**values, **scored}),
        "event_time": now,
        "model": None,
        "labels": {},
        "versions": Versions(scorer="s", metrics="m"),
        "source": None,
        "scored_at": now,
    }


@pytest.mark.parametrize(
    "scored",
    [
        {"label": "Maybe"},
        {"grade": "E"},
        {"scores": {"CR": "high"}},
        {"scores": {"CR": [1.0]}},
        {"counts": {"found": 1.5}},
        {"counts": {"found": {"a": 1}}},
        {"counts": {"found": [1, 2]}},
        {"details": {"when": datetime(2026, 1, 1, tzinfo=UTC)}},
        {"details": {"terms": {1, 2}}},
        {"details": {"object": object()}},
        {"details": {1: "a key that is not a string"}},
    ],
)
def test_what_the_schema_refuses_is_refused(scored: dict[str, Any]) -> None:
    fields = a_result(**scored)
    with pytest.raises(ValueError):  # pydantic's ValidationError is a ValueError
        build_result(**fields)
    with pytest.raises((TypeError, ValueError)):
        case_result_json(**fields)


@settings(max_examples=200, deadline=None)
@given(result_fields(), st.lists(st.text(min_size=1, max_size=8), max_size=3))
def test_a_result_a_child_writes_from_its_frame_is_the_validated_result(
    fields: dict[str, Any], unknown: list[str]
) -> None:
    """The session stage hands a turn's result fields to the scoring child as a
    `ResultFrame` (times as epoch seconds, `scored_at` by the stage's clock); the child's
    bytes are `build_result`'s of the same fields."""
    source = fields["source"]
    received = fields["received_at"]
    frame = ResultFrame(
        case_id=fields["case_id"],
        suite=fields["suite"],
        kind="turn",
        event_time=fields["event_time"].timestamp(),
        model=fields["model"],
        labels=fields["labels"],
        source=None if source is None else (source.topic, source.partition, source.offset),
        received=None if received is None else received.timestamp(),
        trace_id=fields["trace_id"],
        unknown=tuple(unknown),
        clock_offset=-3600.0,  # the stage's clock an hour behind the wall clock
    )
    value = frame_result_json(frame, fields["scored"], fields["versions"])

    scored_at = datetime.fromisoformat(orjson.loads(value)["scored_at"])
    assert abs(scored_at.timestamp() - (time.time() - 3600.0)) < 60
    expected = build_result(
        case_id=frame.case_id,
        suite=frame.suite,
        kind="turn",
        scored=with_unknown_fields(fields["scored"], unknown),
        event_time=datetime.fromtimestamp(frame.event_time, UTC),
        model=frame.model,
        labels=frame.labels,
        versions=fields["versions"],
        source=source,
        scored_at=scored_at,
        received_at=None if received is None else datetime.fromtimestamp(frame.received, UTC),
        trace_id=frame.trace_id,
    )
    assert value == expected.model_dump_json().encode()
