"""Input records of the streaming worker: raw bytes in; a validated envelope, a result
message or a dead letter out.

`validate_record` is the one validator of envelopes (the `score` command's files use it
too). No Kafka here: the streaming agents pass bytes and their source position in, and
send what comes out. Every failure has a `reason` (the dead letter's `error.type` and the
`scorestream_dead_letters_total{reason}` label).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, get_args

import orjson
from pydantic import TypeAdapter, ValidationError

from schemas.envelope import InputRecord
from schemas.outputs import (
    CaseResult,
    DeadLetter,
    DeadLetterError,
    DeadLetterSource,
    Grade,
    Label,
    RecordSource,
    Versions,
)
from worker.config import LimitsSettings

# Dead-letter reasons and `Rejected` live in `worker.input.rejections`; re-exported here.
from worker.input.rejections import (
    FIELD_TOO_LARGE,
    INVALID_JSON,
    INVALID_RECORD,
    INVALID_TIMESTAMP,
    NOT_UTF8,
    OUTPUT_TOO_LARGE,
    OVERSIZED,
    POISON_PILL,
    SCORING_ERROR,
    SCORING_TIMEOUT,
    UNKNOWN_PERSONA,
    UNKNOWN_SCHEMA,
    UNKNOWN_SUITE,
    Rejected,
)
from worker.input.validation_errors import describe_validation_error
from worker.suites import registry
from worker.suites.base import Scored
from worker.windowing.event_time import InvalidEventTime, check_event_time

INPUT_RECORDS: TypeAdapter[InputRecord] = TypeAdapter(InputRecord)

MAX_MESSAGE_CHARS = 2000  # of a dead letter's error message


def validate_record(data: object) -> InputRecord:
    """The envelope of a decoded JSON value (raises `pydantic.ValidationError`)."""
    return INPUT_RECORDS.validate_python(data)


@dataclass(frozen=True)
class SourcePosition:
    """Where a record was read: topic, partition, offset and the record timestamp."""

    topic: str
    partition: int
    offset: int
    timestamp: datetime | None = None


def _too_large(field: str, size: int, limit: int, setting: str, unit: str = "bytes") -> Rejected:
    return Rejected(
        FIELD_TOO_LARGE,
        f"{field}: {size} {unit} is over the limit of {limit} {unit} (limits.{setting})",
    )


def _utf8_size(text: str) -> int:
    return len(text.encode("utf-8", errors="surrogatepass"))


def check_limits(data: Mapping[str, object], limits: LimitsSettings) -> None:
    """Raise `Rejected(FIELD_TOO_LARGE)` naming the first field over its bound: `id`,
    `model`, `labels` (count, keys, values), and in `payload` every string (text fields
    and field names), every list (items; whole-session `turns`) and `turn_index`.
    Works on the decoded JSON before validation, without recursion (any depth)."""
    for name, limit, setting in (
        ("id", limits.id_bytes, "id_bytes"),
        ("model", limits.model_bytes, "model_bytes"),
    ):
        value = data.get(name)
        if isinstance(value, str) and (size := _utf8_size(value)) > limit:
            raise _too_large(name, size, limit, setting)
    labels = data.get("labels")
    if isinstance(labels, dict):
        if len(labels) > limits.label_count:
            raise _too_large("labels", len(labels), limits.label_count, "label_count", "labels")
        for key, value in labels.items():
            if (size := _utf8_size(key)) > limits.label_key_bytes:
                raise _too_large("labels (a key)", size, limits.label_key_bytes, "label_key_bytes")
            if isinstance(value, str) and (size := _utf8_size(value)) > limits.label_value_bytes:
                raise _too_large(
                    f"labels.{key[:64]}", size, limits.label_value_bytes, "label_value_bytes"
                )
    payload = data.get("payload")
    if isinstance(payload, dict):
        turns = payload.get("turns")
        if isinstance(turns, list) and len(turns) > limits.session_turns:
            raise _too_large(
                "payload.turns", len(turns), limits.session_turns, "session_turns", "turns"
            )
        index = payload.get("turn_index")
        if isinstance(index, int) and index > limits.turn_index:
            raise _too_large(
                "payload.turn_index", index, limits.turn_index, "turn_index", "(value)"
            )
    _check_payload_sizes(payload, limits)


def _check_payload_sizes(payload: object, limits: LimitsSettings) -> None:
    """Every string, list and field name in `payload`, depth first (the last field first),
    against its bound. A path is spelled out only for the field that is over its bound,
    and values that cannot be (numbers, strings too short) are not visited."""
    text_chars = limits.text_bytes // 4  # UTF-8 takes at most 4 bytes a character
    key_chars = limits.label_key_bytes // 4
    stack: list[tuple[object, object]] = [("payload", payload)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, str):
            if (size := _utf8_size(value)) > limits.text_bytes:
                raise _too_large(_path(where), size, limits.text_bytes, "text_bytes")
        elif isinstance(value, list):
            if len(value) > limits.list_items:
                raise _too_large(_path(where), len(value), limits.list_items, "list_items", "items")
            for index, item in enumerate(value):
                if _may_exceed(item, text_chars):
                    stack.append(((where, index), item))
        elif isinstance(value, dict):
            if len(value) > limits.list_items:
                raise _too_large(
                    _path(where), len(value), limits.list_items, "list_items", "fields"
                )
            for key, item in value.items():
                if len(key) > key_chars and (size := _utf8_size(key)) > limits.label_key_bytes:
                    raise _too_large(
                        f"{_path(where)} (a field name)",
                        size,
                        limits.label_key_bytes,
                        "label_key_bytes",
                    )
                if _may_exceed(item, text_chars):
                    stack.append(((where, key), item))


def _may_exceed(value: object, text_chars: int) -> bool:
    """Whether `value` needs a look: a container, or a string that may be over its bound."""
    if isinstance(value, str):
        return len(value) > text_chars
    return isinstance(value, list | dict)


def _path(where: object) -> str:
    """`payload.a.0.b` from the nested (parent, key) pairs the walk keeps."""
    keys: list[str] = []
    while isinstance(where, tuple):
        where, key = where
        keys.append(str(key))
    return ".".join([str(where), *reversed(keys)])


def decode_record(
    raw: bytes | None, max_bytes: int, limits: LimitsSettings | None = None
) -> InputRecord:
    """Validate one raw input value against `max_bytes` and `limits` (default bounds when
    None); raises `Rejected` with the reason."""
    if raw is None:
        raise Rejected(INVALID_RECORD, "the record has no value (tombstone)")
    if len(raw) > max_bytes:
        raise Rejected(OVERSIZED, f"record of {len(raw)} bytes is over {max_bytes} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Rejected(NOT_UTF8, f"not UTF-8: {exc}") from None
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise Rejected(INVALID_JSON, f"not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise Rejected(INVALID_RECORD, f"expected a JSON object, got {type(data).__name__}")
    suite = data.get("suite")
    if suite is not None and registry.find(suite) is None:
        raise Rejected(UNKNOWN_SUITE, f"unknown suite {str(suite)[:64]!r}")
    check_limits(data, limits or LimitsSettings())
    try:
        return validate_record(data)
    except ValidationError as exc:
        bad_time = any(err["loc"][1:2] == ("ts",) for err in exc.errors())
        reason = INVALID_TIMESTAMP if bad_time else INVALID_RECORD
        raise Rejected(reason, describe_validation_error(exc)) from None


def usable_event_time(event_time: datetime, now: datetime, max_future_skew: float) -> datetime:
    """`event_time` if windows can use it; `Rejected(INVALID_TIMESTAMP)` when it is
    before 1970 or more than `max_future_skew` seconds ahead of `now`."""
    try:
        check_event_time(event_time.timestamp(), now.timestamp(), max_future_skew)
    except InvalidEventTime as exc:
        raise Rejected(INVALID_TIMESTAMP, str(exc)) from None
    return event_time


def dead_letter(
    raw: bytes | None,
    reason: str,
    message: str,
    source: SourcePosition,
    max_raw_bytes: int,
    now: datetime,
) -> DeadLetter:
    """The dead-letter message for a rejected record (raw value kept, cut to a bound)."""
    data = raw or b""
    cut = data[:max_raw_bytes]
    text: str | None = None
    encoded: str | None = None
    try:
        text = data.decode("utf-8")
        if len(data) > max_raw_bytes:
            text = cut.decode("utf-8", errors="ignore")
    except UnicodeDecodeError:
        encoded = base64.b64encode(cut).decode("ascii")
    if len(message) > MAX_MESSAGE_CHARS:
        message = message[:MAX_MESSAGE_CHARS] + " ..."
    return DeadLetter(
        error=DeadLetterError(type=reason, message=message),
        raw=text,
        raw_b64=encoded,
        raw_truncated=len(data) > max_raw_bytes,
        raw_size=len(data),
        source=DeadLetterSource(
            topic=source.topic,
            partition=source.partition,
            offset=source.offset,
            timestamp=source.timestamp,
        ),
        failed_at=now,
    )


def result_key(suite: str, case_id: str) -> str:
    """Key on the results topic: `{suite}:{id}` (sessions: `alignment:session:{id}`)."""
    return f"{suite}:{case_id}"


def result_from_json(value: bytes) -> CaseResult:
    """A result this worker built and serialized itself (`build_result`, e.g. in a scoring
    child), read back: pydantic's own JSON validation (in Rust: about half the time of
    three `model_construct`s in Python); one that does not validate again (a score
    serialized as null, say) is read without validating, the times, source and versions
    as their types, the rest as JSON gave them."""
    try:
        return CaseResult.model_validate_json(value)
    except ValidationError:
        return _unvalidated(orjson.loads(value))


def _unvalidated(data: dict[str, Any]) -> CaseResult:
    source = data.get("source")
    return CaseResult.model_construct(
        **{
            **data,
            "ts": datetime.fromisoformat(data["ts"]),
            "scored_at": datetime.fromisoformat(data["scored_at"]),
            "versions": Versions.model_construct(**data["versions"]),
            "source": None if source is None else RecordSource.model_construct(**source),
        }
    )


def build_result(
    *,
    case_id: str,
    suite: str,
    kind: str,
    scored: Scored,
    event_time: datetime,
    model: str | None,
    labels: Mapping[str, str],
    versions: Versions,
    source: SourcePosition | None,
    scored_at: datetime,
    received_at: datetime | None = None,
    trace_id: str | None = None,
) -> CaseResult:
    """A `CaseResult` message from a pure `Scored` and the record's metadata (`trace_id`:
    the envelope's OpenTelemetry trace id, echoed)."""
    latency_ms = None
    if received_at is not None:
        latency_ms = max(0.0, (scored_at - received_at).total_seconds() * 1000.0)
    return CaseResult.model_validate(
        {
            "id": case_id,
            "suite": suite,
            "kind": kind,
            "ts": event_time,
            "model": model,
            "labels": dict(labels),
            "scores": dict(scored.scores),
            "label": scored.label,
            "grade": scored.grade,
            "details": scored.details,
            "counts": scored.counts,
            "versions": versions,
            "source": None
            if source is None
            else RecordSource(topic=source.topic, partition=source.partition, offset=source.offset),
            "scored_at": scored_at,
            "latency_ms": latency_ms,
            "trace_id": trace_id,
        },
        strict=False,
    )


# The values a result's scorer-made fields may take (`CaseResult`'s types, checked by
# `case_result_json` without building the model).
_LABELS = frozenset(get_args(Label))
_GRADES = frozenset(get_args(Grade))
_JSON_OPTIONS = (
    orjson.OPT_UTC_Z | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME
)


def case_result_json(
    *,
    case_id: str,
    suite: str,
    kind: str,
    scored: Scored,
    event_time: datetime,
    model: str | None,
    labels: Mapping[str, str],
    versions: Versions,
    source: SourcePosition | None,
    scored_at: datetime,
    received_at: datetime | None = None,
    trace_id: str | None = None,
) -> bytes:
    """`build_result(...).model_dump_json()` as bytes, the same bytes (a property test
    holds them equal), written by orjson without building and validating a `CaseResult`
    (about two fifths of the time, in the scoring child). The record's fields come from a
    validated envelope; the scorer's are checked here: scores are numbers or None (as
    floats; a bool as 1 or 0, as validation takes it), the label and grade the schema's,
    counts ints, strings or lists of strings, details JSON values (`TypeError` or
    `ValueError` otherwise, as validation would refuse them)."""
    latency_ms = None
    if received_at is not None:
        latency_ms = max(0.0, (scored_at - received_at).total_seconds() * 1000.0)
    if scored.label is not None and scored.label not in _LABELS:
        raise ValueError(f"label {scored.label!r} is not one of {sorted(_LABELS)}")
    if scored.grade is not None and scored.grade not in _GRADES:
        raise ValueError(f"grade {scored.grade!r} is not one of {sorted(_GRADES)}")
    data: dict[str, Any] = {
        "id": case_id,
        "suite": suite,
        "kind": kind,
        "ts": _time(event_time),
        "model": model,
        "labels": dict(labels),
        "scores": {name: _score_value(name, value) for name, value in scored.scores.items()},
        "label": scored.label,
        "grade": scored.grade,
        "details": scored.details,
        "counts": {name: _count_value(name, value) for name, value in scored.counts.items()},
        "versions": {
            "scorer": versions.scorer,
            "metrics": versions.metrics,
            "protocol": versions.protocol,
        },
        "source": None
        if source is None
        else {"topic": source.topic, "partition": source.partition, "offset": source.offset},
        "scored_at": _time(scored_at),
        "latency_ms": latency_ms,
        "trace_id": trace_id,
    }
    return orjson.dumps(data, default=_not_json, option=_JSON_OPTIONS)


def _time(value: datetime) -> orjson.Fragment:
    """A time as pydantic writes it (a datetime in the details is refused instead)."""
    return orjson.Fragment(orjson.dumps(value, option=orjson.OPT_UTC_Z))


def _score_value(name: str, value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, float):
        return value
    if isinstance(value, int):  # a bool too, as pydantic's lax mode takes it
        return float(value)
    raise TypeError(f"score {name!r} is {type(value).__name__}, not a number")


def _count_value(name: str, value: object) -> object:
    if isinstance(value, bool):  # as pydantic's lax mode takes it
        return int(value)
    if isinstance(value, str | int):
        return value
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return value
    raise TypeError(f"count {name!r} is {type(value).__name__}, not an int, str or list of str")


def _not_json(value: object) -> object:
    """orjson's fallback: a detail that is not a JSON value is an error, as in the schema."""
    raise TypeError(f"{type(value).__name__} is not a JSON value")


__all__ = [
    "FIELD_TOO_LARGE",
    "INPUT_RECORDS",
    "INVALID_JSON",
    "INVALID_RECORD",
    "INVALID_TIMESTAMP",
    "NOT_UTF8",
    "OUTPUT_TOO_LARGE",
    "OVERSIZED",
    "POISON_PILL",
    "SCORING_ERROR",
    "SCORING_TIMEOUT",
    "UNKNOWN_PERSONA",
    "UNKNOWN_SCHEMA",
    "UNKNOWN_SUITE",
    "Rejected",
    "SourcePosition",
    "build_result",
    "case_result_json",
    "check_limits",
    "dead_letter",
    "decode_record",
    "describe_validation_error",
    "result_from_json",
    "result_key",
    "usable_event_time",
    "validate_record",
]
