"""Intake size bounds on arbitrary payloads: a record is rejected exactly when some string,
list, object or field name in its payload is over its bound, and the rejection names one
such field by its dotted path."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from worker.config import LimitsSettings
from worker.input.records import FIELD_TOO_LARGE, Rejected, check_limits

LIMITS = LimitsSettings(text_bytes=24, list_items=4, label_key_bytes=10)

TEXT = st.text(alphabet=st.sampled_from("ab\u00e9\u4e2d\U0001f600"), max_size=12)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | TEXT,
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(TEXT, inner, max_size=6),
    max_leaves=30,
)


def over_bound(value: Any, path: str) -> set[str]:
    """Every place in `value` over its bound: `path` for a value, `path (a field name)`
    for an object with a field name over its bound."""
    found: set[str] = set()
    if isinstance(value, str) and len(value.encode("utf-8")) > LIMITS.text_bytes:
        found.add(path)
    elif isinstance(value, list):
        if len(value) > LIMITS.list_items:
            found.add(path)
        for index, item in enumerate(value):
            found |= over_bound(item, f"{path}.{index}")
    elif isinstance(value, dict):
        if len(value) > LIMITS.list_items:
            found.add(path)
        for key, item in value.items():
            if len(key.encode("utf-8")) > LIMITS.label_key_bytes:
                found.add(f"{path} (a field name)")
            found |= over_bound(item, f"{path}.{key}")
    return found


@settings(max_examples=300, deadline=None)
@given(JSON)
def test_a_payload_is_rejected_exactly_when_a_field_is_over_its_bound(payload: Any) -> None:
    expected = over_bound(payload, "payload")
    try:
        check_limits({"id": "c1", "payload": payload}, LIMITS)
    except Rejected as rejected:
        assert rejected.reason == FIELD_TOO_LARGE
        named = rejected.message.split(": ")[0]
        assert named in expected
    else:
        assert not expected


def test_the_named_field_is_the_one_over_its_bound() -> None:
    payload = {"ok": "short", "deep": [{"text": "x" * 25}]}
    with pytest.raises(Rejected) as caught:
        check_limits({"id": "c1", "payload": payload}, LIMITS)
    assert caught.value.message.startswith("payload.deep.0.text: 25 bytes")
