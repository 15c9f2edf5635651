"""Identifiers, label keys and required texts are never empty: a record with an empty one
is an `invalid_record` dead letter whose message names the field (interface spec)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from tests.streamkit import EXAMPLES, envelopes
from worker.input.records import INVALID_RECORD, Rejected, decode_record


def example(suite: str, path: str) -> dict[str, Any]:
    return next(r for r in envelopes(EXAMPLES / path) if r["suite"] == suite)


def emptied(record: dict[str, Any], dotted: str) -> dict[str, Any]:
    """`record` with the field at `dotted` set to "" (a label key: an empty key)."""
    copy = orjson.loads(orjson.dumps(record))
    *parents, last = dotted.split(".")
    target = copy
    for part in parents:
        target = target[int(part)] if isinstance(target, list) else target[part]
    if last == "(key)":
        target[""] = "x"
    else:
        target[last] = ""
    return copy


CASES = [
    ("safe", "safe/envelopes.jsonl", "id", "id"),
    ("safe", "safe/envelopes.jsonl", "labels.(key)", "labels"),
    ("extraction", "extraction/envelopes.jsonl", "payload.text", "text"),
    ("alignment", "alignment/envelopes.jsonl", "payload.session_id", "session_id"),
    ("alignment", "alignment/envelopes.jsonl", "payload.persona_id", "persona_id"),
    ("alignment", "alignment/envelopes.jsonl", "payload.text", "text"),
]


@pytest.mark.parametrize(("suite", "path", "field", "named"), CASES)
def test_an_empty_identifier_or_required_text_is_an_invalid_record(
    suite: str, path: str, field: str, named: str
) -> None:
    record = example(suite, path)
    decode_record(orjson.dumps(record), 1 << 20)  # the example itself is valid
    with pytest.raises(Rejected) as caught:
        decode_record(orjson.dumps(emptied(record, field)), 1 << 20)
    assert caught.value.reason == INVALID_RECORD
    assert named in caught.value.message


def test_an_extraction_payload_without_text_is_an_invalid_record() -> None:
    record = example("extraction", "extraction/envelopes.jsonl")
    del record["payload"]["text"]
    with pytest.raises(Rejected) as caught:
        decode_record(orjson.dumps(record), 1 << 20)
    assert caught.value.reason == INVALID_RECORD
    assert "text" in caught.value.message
