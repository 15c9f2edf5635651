"""Alignment turn envelopes as the GenAI spans an instrumented application would record,
written as the Collector's Kafka exporter writes them (`scorestream produce --as-otlp`):
pure, deterministic (ids are hashes of the session and turn ids).

Each session is one trace; each turn one `chat` span ending at the turn's `ts`. Its
`gen_ai.input.messages` holds the session's turns of lower `turn_index` as history (the
mapping's `turn_index`, the assistant messages there, keeps their order);
`gen_ai.conversation.id` is the session id, `scorestream.persona` the persona; the
envelope's labels are its resource's attributes (`service.name` defaults to
scorestream-demo). Records of other suites and whole-session records are left out.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, TracesData

from schemas.envelope import parse_event_time
from worker.otlp.decode import traces_json
from worker.otlp.settings import OtlpEncoding

DEFAULT_SERVICE = "scorestream-demo"
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
SPAN_SECONDS = 1.0  # how long each made-up chat call took


@dataclass
class SpanMessages:
    """Kafka message values, and how many records were turned into spans / left out."""

    messages: list[bytes]
    spans: int
    skipped: int


def envelopes_as_spans(
    lines: Iterable[bytes], encoding: OtlpEncoding, spans_per_message: int = 100
) -> SpanMessages:
    """The Kafka messages (one batch of spans each) for the turn envelopes in `lines`."""
    turns: list[dict[str, Any]] = []
    skipped = 0
    for line in lines:
        envelope = _turn_envelope(line)
        if envelope is None:
            skipped += 1
        else:
            turns.append(envelope)
    by_session: dict[str, list[dict[str, Any]]] = {}
    for envelope in turns:
        by_session.setdefault(envelope["payload"]["session_id"], []).append(envelope)
    history: dict[int, list[dict[str, Any]]] = {}  # id(envelope) -> the messages before it
    for session in by_session.values():
        earlier: list[dict[str, Any]] = []
        for envelope in sorted(session, key=lambda e: e["payload"]["turn_index"]):
            history[id(envelope)] = list(earlier)
            payload = envelope["payload"]
            if payload.get("user"):
                earlier.append(_message("user", str(payload["user"])))
            earlier.append(_message("assistant", str(payload["text"])))
    spans = [(_resource(envelope), _span(envelope, history[id(envelope)])) for envelope in turns]
    messages = [
        _encode(spans[start : start + spans_per_message], encoding)
        for start in range(0, len(spans), spans_per_message)
    ]
    return SpanMessages(messages, len(spans), skipped)


def _turn_envelope(line: bytes) -> dict[str, Any] | None:
    try:
        data = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(data, dict) or data.get("suite") != "alignment":
        return None
    payload = data.get("payload")
    if (
        not isinstance(payload, dict)
        or not isinstance(payload.get("turn_index"), int)
        or not all(
            isinstance(payload.get(name), str) and payload[name]
            for name in ("session_id", "persona_id", "text")
        )
    ):
        return None
    return data


def _resource(envelope: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """The resource attributes: the envelope's labels, and `service.name`."""
    labels = envelope.get("labels")
    found = {
        str(key): value
        for key, value in (labels.items() if isinstance(labels, dict) else ())
        if isinstance(value, str)
    }
    found.setdefault("service.name", DEFAULT_SERVICE)
    return tuple(sorted(found.items()))


def _message(role: str, text: str) -> dict[str, Any]:
    return {"role": role, "parts": [{"type": "text", "content": text}]}


def _span(envelope: dict[str, Any], earlier: list[dict[str, Any]]) -> Span:
    payload = envelope["payload"]
    session = str(payload["session_id"])
    try:
        ended = parse_event_time(envelope.get("ts"))
    except ValueError:
        ended = None
    end_ns = (ended - EPOCH) // timedelta(microseconds=1) * 1000 if ended is not None else 0
    inputs = [*earlier, _message("user", str(payload.get("user") or ""))]
    attributes: dict[str, str] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.conversation.id": session,
        "gen_ai.input.messages": orjson.dumps(inputs).decode(),
        "gen_ai.output.messages": orjson.dumps(
            [{**_message("assistant", str(payload["text"])), "finish_reason": "stop"}]
        ).decode(),
        "scorestream.persona": str(payload["persona_id"]),
    }
    model = envelope.get("model")
    if isinstance(model, str) and model:
        attributes["gen_ai.request.model"] = model
        attributes["gen_ai.response.model"] = model
    return Span(
        trace_id=_digest("trace", session, 16),
        span_id=_digest("span", f"{session}\x00{envelope.get('id')}", 8),
        name=f"chat {model or ''}".strip(),
        kind=Span.SPAN_KIND_CLIENT,
        start_time_unix_nano=max(0, end_ns - int(SPAN_SECONDS * 1e9)) if end_ns else 0,
        end_time_unix_nano=end_ns,
        attributes=[
            KeyValue(key=key, value=AnyValue(string_value=value))
            for key, value in attributes.items()
        ],
    )


def _digest(kind: str, text: str, size: int) -> bytes:
    digest = hashlib.sha256(f"{kind}\x00{text}".encode()).digest()[:size]
    return digest if any(digest) else b"\x01" * size


def _encode(spans: list[tuple[tuple[tuple[str, str], ...], Span]], encoding: OtlpEncoding) -> bytes:
    by_resource: dict[tuple[tuple[str, str], ...], list[Span]] = {}
    for resource, span in spans:
        by_resource.setdefault(resource, []).append(span)
    traces = TracesData(
        resource_spans=[
            ResourceSpans(
                resource=Resource(
                    attributes=[
                        KeyValue(key=key, value=AnyValue(string_value=value))
                        for key, value in resource
                    ]
                ),
                scope_spans=[
                    ScopeSpans(scope=InstrumentationScope(name="scorestream.produce"), spans=items)
                ],
            )
            for resource, items in by_resource.items()
        ]
    )
    if encoding == "otlp_proto":
        return traces.SerializeToString()
    return traces_json(traces)


__all__ = ["SpanMessages", "envelopes_as_spans"]
