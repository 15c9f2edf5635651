"""Input records on `llm.responses.v1`: the envelope and one payload model per suite."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Literal

from pydantic import Field, field_validator

from schemas._base import InputModel, PayloadModel

SuiteName = Literal["alignment", "extraction", "safe"]
# An OpenTelemetry (W3C trace-context) trace id: 32 lowercase hex digits, not all zero.
TRACE_ID_PATTERN = r"^[0-9a-f]{32}$"
INVALID_TRACE_ID = "0" * 32
SUITES: tuple[SuiteName, ...] = ("alignment", "extraction", "safe")
# Identifiers, label keys and required texts: an empty one is an invalid record.
NonEmpty = Annotated[str, Field(min_length=1)]

# ---------------------------------------------------------------- safe


class SignalExpectations(PayloadModel):
    must_find_signals: list[str] = Field(default_factory=list)


class FollowupExpectations(PayloadModel):
    forbidden_terms: list[str] = Field(default_factory=list)


class SummaryExpectations(PayloadModel):
    must_contain_phrases: list[str] = Field(default_factory=list)


class SafeExpectations(PayloadModel):
    signal_generation: SignalExpectations = Field(default_factory=SignalExpectations)
    followup_questions: FollowupExpectations = Field(default_factory=FollowupExpectations)
    event_summary: SummaryExpectations = Field(default_factory=SummaryExpectations)


class SafeOutput(PayloadModel):
    summary: str = ""
    signals: list[str] = Field(default_factory=list)
    followup_questions: list[str] = Field(default_factory=list)


class SafePayload(PayloadModel):
    """A SAFE v0 test case together with the engine output being scored."""

    test_id: str = ""
    concern_id: str = ""
    archetype: str = ""
    batch_id: str = ""
    expectations: SafeExpectations = Field(default_factory=SafeExpectations)
    output: SafeOutput = Field(default_factory=SafeOutput)


# ---------------------------------------------------------------- extraction

ArgumentValue = str | int | float | bool | None


class GoldArgument(PayloadModel):
    role: str
    argument: ArgumentValue = None


class GoldEvent(PayloadModel):
    event_type: str
    trigger: str | None = None
    arguments: list[GoldArgument] = Field(default_factory=list)


class ExtractionPayload(PayloadModel):
    """A source document, its gold events and the raw model response."""

    text: str = Field(min_length=1)  # the source document: required, never empty
    gold: list[GoldEvent] = Field(default_factory=list)
    response: str = ""
    schema_name: str | None = Field(default=None, alias="schema")


# ---------------------------------------------------------------- alignment


class AlignmentTurnPayload(PayloadModel):
    """One assistant turn of a session; `final: true` closes the session."""

    session_id: NonEmpty
    turn_index: int = Field(ge=0)
    persona_id: NonEmpty
    text: NonEmpty
    user: str | None = None
    final: bool = False


class SessionTurn(PayloadModel):
    user: str = ""
    assistant: NonEmpty


class AlignmentSessionPayload(PayloadModel):
    """A whole session at once."""

    session_id: NonEmpty
    persona_id: NonEmpty
    turns: list[SessionTurn] = Field(min_length=1)


AlignmentPayload = AlignmentSessionPayload | AlignmentTurnPayload

# ---------------------------------------------------------------- envelope


def parse_event_time(value: str | int | None) -> datetime | None:
    """Turn an RFC 3339 string or epoch milliseconds into an aware UTC datetime."""
    if value is None:
        return None
    try:
        if isinstance(value, int):
            return datetime.fromtimestamp(value / 1000, tz=UTC)
        text = value.strip()
        if text.endswith(("Z", "z")):
            text = text[:-1] + "+00:00"
        parsed = datetime.fromisoformat(text)
        if parsed.tzinfo is None:
            raise ValueError("RFC 3339 time needs an offset or 'Z'")
        return parsed.astimezone(UTC)
    except (OverflowError, OSError) as exc:  # epoch values beyond what datetime holds
        raise ValueError(f"time out of range: {value!r}") from exc


class _EnvelopeBase(InputModel):
    id: NonEmpty
    ts: str | int | None = None
    model: str | None = None
    labels: dict[NonEmpty, str] = Field(default_factory=dict)
    trace_id: str | None = None

    @field_validator("trace_id")
    @classmethod
    def _trace_id_is_otel(cls, value: str | None) -> str | None:
        if value is not None and (
            not re.fullmatch(TRACE_ID_PATTERN, value) or value == INVALID_TRACE_ID
        ):
            raise ValueError(
                "trace_id must be an OpenTelemetry trace id: 32 lowercase hex digits, not all 0"
            )
        return value

    @field_validator("ts")
    @classmethod
    def _ts_is_a_time(cls, value: str | int | None) -> str | int | None:
        if isinstance(value, bool):
            raise ValueError("ts must be an RFC 3339 string or epoch milliseconds")
        parse_event_time(value)
        return value

    def event_time(self) -> datetime | None:
        """The record's event time, or None when the producer gave none."""
        return parse_event_time(self.ts)


class SafeRecord(_EnvelopeBase):
    suite: Literal["safe"]
    payload: SafePayload


class ExtractionRecord(_EnvelopeBase):
    suite: Literal["extraction"]
    payload: ExtractionPayload


class AlignmentRecord(_EnvelopeBase):
    suite: Literal["alignment"]
    payload: AlignmentPayload


InputRecord = Annotated[
    SafeRecord | ExtractionRecord | AlignmentRecord, Field(discriminator="suite")
]
Payload = SafePayload | ExtractionPayload | AlignmentPayload

__all__ = [
    "SUITES",
    "TRACE_ID_PATTERN",
    "AlignmentPayload",
    "AlignmentRecord",
    "AlignmentSessionPayload",
    "AlignmentTurnPayload",
    "ArgumentValue",
    "ExtractionPayload",
    "ExtractionRecord",
    "GoldArgument",
    "GoldEvent",
    "InputRecord",
    "Payload",
    "SafeExpectations",
    "SafeOutput",
    "SafePayload",
    "SafeRecord",
    "SessionTurn",
    "SuiteName",
    "parse_event_time",
]
