"""What `scorestream gates` and `results --gate` pick from the gate events (pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from schemas.outputs import GateEvent, WindowSpan
from worker.commands.gates import parse_since, segment_text
from worker.exit_codes import UsageError
from worker.gates.history import events_since, latest_firing, latest_states

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def event(
    state: str, minute: int, segment: dict[str, str] | None = None, gate: str = "safety-drop"
) -> GateEvent:
    start = T0 + timedelta(minutes=minute - 1)
    return GateEvent(
        gate=gate,
        state=state,  # type: ignore[arg-type]
        suite="alignment",
        segment=segment or {},
        metric="safety",
        stat="mean",
        op="<",
        threshold=0.9,
        value=0.5 if state == "firing" else 0.97,
        count=20,
        window=WindowSpan(start=start, end=start + timedelta(minutes=1), size_s=60),
        ts=T0 + timedelta(minutes=minute),
    )


M1 = {"model": "m1"}
EVENTS = [
    event("firing", 1, M1),
    event("firing", 1),
    event("resolved", 3, M1),
    event("firing", 5, M1),
    event("firing", 6, gate="safe-ci-gate"),
    event("resolved", 8, M1),
]


def test_latest_state_per_gate_and_segment_in_topic_order() -> None:
    latest = latest_states(EVENTS)
    assert [(e.gate, e.segment, e.state, e.ts.minute) for e in latest] == [
        ("safe-ci-gate", {}, "firing", 6),
        ("safety-drop", {}, "firing", 1),
        ("safety-drop", M1, "resolved", 8),
    ]
    assert [e.gate for e in latest_states(EVENTS, "safe-ci-gate")] == ["safe-ci-gate"]


def test_events_since_a_moment_oldest_first() -> None:
    shown = events_since(reversed(EVENTS), T0 + timedelta(minutes=5))
    assert [(e.gate, e.state, e.ts.minute) for e in shown] == [
        ("safety-drop", "firing", 5),
        ("safe-ci-gate", "firing", 6),
        ("safety-drop", "resolved", 8),
    ]
    assert events_since(EVENTS, T0 + timedelta(minutes=9)) == []


def test_latest_firing_of_a_segment_or_the_most_specific_of_the_latest() -> None:
    assert latest_firing(EVENTS, "safety-drop", M1) == EVENTS[3]
    assert latest_firing(EVENTS, "safety-drop", {}) == EVENTS[1]
    assert latest_firing(EVENTS, "safety-drop") == EVENTS[3]
    # Same moment: the model segment, not the all-cases one.
    assert latest_firing(EVENTS[:2], "safety-drop") == EVENTS[0]
    assert latest_firing(EVENTS[1::-1], "safety-drop") == EVENTS[0]
    assert latest_firing(EVENTS, "safety-drop", {"model": "m2"}) is None
    assert latest_firing(EVENTS, "unknown") is None


def test_since_is_a_duration_back_from_now_or_a_time() -> None:
    now = T0
    assert parse_since("2h", now) == now - timedelta(hours=2)
    assert parse_since("90m", now) == now - timedelta(minutes=90)
    assert parse_since("2026-01-01T10:00:00Z", now) == T0 - timedelta(hours=2)
    with pytest.raises(UsageError, match="--since"):
        parse_since("yesterday", now)


def test_segment_text_is_what_segment_takes() -> None:
    assert segment_text({}) == "all"
    assert segment_text({"tenant": "a", "model": "m1"}) == "model=m1,tenant=a"
