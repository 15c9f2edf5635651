"""Wire contracts: exported JSON Schemas stay in sync, inputs are validated strictly."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import TypeAdapter, ValidationError

from schemas import (
    AlignmentSessionPayload,
    AlignmentTurnPayload,
    CaseResult,
    DeadLetter,
    InputRecord,
    SafeRecord,
)
from schemas.export import EXPORTED, JSON_DIR, render

RECORDS = TypeAdapter(InputRecord)


@pytest.mark.parametrize("name", sorted(EXPORTED))
def test_exported_json_schema_matches_the_models(name: str) -> None:
    exported = (JSON_DIR / f"{name}.json").read_text(encoding="utf-8")
    assert exported == render(name), f"run `make schemas`: {name}.json drifted from the models"


def test_safe_record_fills_missing_arrays_and_strings() -> None:
    record = RECORDS.validate_python({"id": "c1", "suite": "safe", "payload": {}})
    assert isinstance(record, SafeRecord)
    assert record.payload.output.signals == []
    assert record.payload.output.summary == ""
    assert record.payload.expectations.signal_generation.must_find_signals == []


def test_alignment_payload_is_a_turn_or_a_whole_session() -> None:
    turn = RECORDS.validate_python(
        {
            "id": "t1",
            "suite": "alignment",
            "payload": {"session_id": "s", "turn_index": 0, "persona_id": "p", "text": "hi"},
        }
    )
    assert isinstance(turn.payload, AlignmentTurnPayload)
    session = RECORDS.validate_python(
        {
            "id": "s1",
            "suite": "alignment",
            "payload": {"session_id": "s", "persona_id": "p", "turns": [{"assistant": "hi"}]},
        }
    )
    assert isinstance(session.payload, AlignmentSessionPayload)


@pytest.mark.parametrize(
    "record",
    [
        {"suite": "safe", "payload": {}},  # no id
        {"id": "x", "suite": "poetry", "payload": {}},  # unknown suite
        {"id": "x", "suite": "safe", "payload": {"output": {"signals": "one"}}},  # not a list
        {"id": "x", "suite": "safe", "payload": {"test_id": 7}},  # strict: no coercion
        {"id": "x", "suite": "safe", "ts": "yesterday", "payload": {}},
        {"id": "x", "suite": "safe", "ts": True, "payload": {}},
    ],
)
def test_malformed_records_are_rejected(record: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        RECORDS.validate_python(record)


def test_event_time_accepts_rfc3339_and_epoch_millis() -> None:
    a = RECORDS.validate_python(
        {"id": "a", "suite": "safe", "ts": "2026-01-02T03:04:05Z", "payload": {}}
    )
    b = RECORDS.validate_python({"id": "b", "suite": "safe", "ts": 1767323045000, "payload": {}})
    assert a.event_time() == b.event_time() == datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def test_output_models_refuse_undeclared_fields() -> None:
    with pytest.raises(ValidationError):
        DeadLetter.model_validate(
            {
                "error": {"type": "invalid_json", "message": "x"},
                "raw_size": 1,
                "source": {"topic": "t", "partition": 0, "offset": 0},
                "failed_at": "2026-01-01T00:00:00Z",
                "surprise": 1,
            }
        )
    assert "latency_ms" in CaseResult.model_fields
