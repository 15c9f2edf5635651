"""GenAI spans to alignment turn envelopes: pure, no Kafka, no clock.

A span whose `gen_ai.operation.name` is one of the configured operations becomes one
alignment turn (see `map_span`); any other span is skipped (`not_genai`, `operation`);
a GenAI span that cannot be a turn is `Unmapped` with a reason from `UNMAPPED_REASONS`.
`OtlpSource.read` does a whole Kafka message: decode, map, drop re-delivered spans;
`OtlpSource.read_records` gives the same as input records: the OTLP source behind the
source seam (`worker.input.sources.Source`).
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from worker.input.sources import Skipped, SourceMetrics, SourceOutput, SourceRecord
from worker.otlp.decode import attributes, decode_traces, to_python
from worker.otlp.settings import OtlpSourceSettings

# Why a GenAI span was not scored (the `reason` label of scorestream_otlp_unmapped_spans_total).
NO_CONTENT = "no_content"  # content capture off: no assistant text on the span
NO_PERSONA = "no_persona"  # no persona attribute, service default or default_persona
UNKNOWN_PERSONA = "unknown_persona"  # a persona the alignment suite does not know
INVALID_IDS = "invalid_ids"  # trace or span id missing or all zero
TOO_LARGE = "too_large"  # a text over limits.text_bytes
UNMAPPED_REASONS = (NO_CONTENT, NO_PERSONA, UNKNOWN_PERSONA, INVALID_IDS, TOO_LARGE)
# Spans that are no turn to score (the `outcome` label of scorestream_otlp_spans_total).
MAPPED, DUPLICATE, NOT_GENAI, OPERATION, UNMAPPED = (
    "mapped",
    "duplicate",
    "not_genai",
    "operation",
    "unmapped",
)
OUTCOMES = (MAPPED, DUPLICATE, NOT_GENAI, OPERATION, UNMAPPED)
METRICS = SourceMetrics(
    items="scorestream_otlp_spans_total",
    items_help="Spans read from the OTLP source, by outcome: mapped (sent to be scored), "
    "duplicate (a span id seen before), not_genai, operation (a GenAI operation "
    "not scored), unmapped (see scorestream_otlp_unmapped_spans_total).",
    outcomes=OUTCOMES,
    skipped="scorestream_otlp_unmapped_spans_total",
    skipped_help="GenAI spans that could not be made an alignment turn, by reason.",
    reasons=UNMAPPED_REASONS,
)


@dataclass(frozen=True)
class Unmapped:
    """A GenAI span that could not be made a turn, and why."""

    reason: str
    detail: str


@dataclass
class SourceBatch:
    """What one Kafka message gave: envelopes (JSON-ready dicts), spans by outcome, and
    the unmapped spans with their reasons."""

    envelopes: list[dict[str, Any]] = field(default_factory=list)
    outcomes: Counter[str] = field(default_factory=Counter)
    unmapped: list[Unmapped] = field(default_factory=list)


def map_span(
    span: Span,
    resource: Mapping[str, AnyValue],
    rules: OtlpSourceSettings,
    text_bytes: int,
    knows_persona: Callable[[str], bool] | None = None,
) -> dict[str, Any] | Unmapped | str:
    """The alignment turn envelope of a GenAI span, `Unmapped`, or the outcome of a span
    that is no turn (`NOT_GENAI`, `OPERATION`).

    id: the span id (hex); trace_id: the trace id; ts: the span's end (epoch ms);
    text: the assistant's text parts of `gen_ai.output.messages` (else the older
    `gen_ai.completion.N.*` attributes, or a `gen_ai.choice` event); user: the last user
    message of `gen_ai.input.messages` (else `gen_ai.prompt.N.*`); turn_index: the
    assistant messages before it in the input; model: `gen_ai.response.model`, else
    `gen_ai.request.model`."""
    attrs = attributes(span.attributes)
    operation = _text(attrs.get("gen_ai.operation.name"))
    if operation is None:
        return NOT_GENAI
    if operation not in rules.operations:
        return OPERATION
    trace_id, span_id = span.trace_id.hex(), span.span_id.hex()
    if len(trace_id) != 32 or len(span_id) != 16 or not int(trace_id, 16) or not int(span_id, 16):
        return Unmapped(INVALID_IDS, f"trace id {trace_id!r}, span id {span_id!r}")
    where = f"span {span_id} of trace {trace_id}"
    history = _messages(attrs.get("gen_ai.input.messages"))
    if history is None:
        history = _legacy_messages(attrs, "gen_ai.prompt")
    text = _assistant_text(attrs, span)
    if not text:
        return Unmapped(NO_CONTENT, f"{where}: no assistant text (content not recorded?)")
    user = _last_text(history, "user")
    for name, value in (("text", text), ("user", user or "")):
        if len(value) * 4 > text_bytes and len(value.encode("utf-8")) > text_bytes:
            return Unmapped(TOO_LARGE, f"{where}: {name} over limits.text_bytes ({text_bytes})")
    persona = _persona(attrs, resource, rules)
    if persona is None:
        return Unmapped(NO_PERSONA, f"{where}: no persona (sources.otlp.persona_*)")
    if knows_persona is not None and not knows_persona(persona):
        return Unmapped(UNKNOWN_PERSONA, f"{where}: unknown persona {persona[:80]!r}")
    session = (
        _text(attrs.get("gen_ai.conversation.id"))
        or _lookup(rules.session_attribute, attrs, resource)
        or trace_id
    )
    payload: dict[str, Any] = {
        "session_id": session,
        "turn_index": sum(1 for role, _ in history if role == "assistant"),
        "persona_id": persona,
        "text": text,
    }
    if user:
        payload["user"] = user
    labels: dict[str, str] = {}
    for name in rules.labels:
        found = _text(resource.get(name))
        if found:
            labels[name] = found
    envelope: dict[str, Any] = {
        "id": span_id,
        "suite": "alignment",
        "labels": labels,
        "trace_id": trace_id,
        "payload": payload,
    }
    if span.end_time_unix_nano:  # else the Kafka record's timestamp
        envelope["ts"] = span.end_time_unix_nano // 1_000_000
    model = _text(attrs.get("gen_ai.response.model")) or _text(attrs.get("gen_ai.request.model"))
    if model:
        envelope["model"] = model
    return envelope


class SpanDedupe:
    """The span ids seen last (an LRU of `size`): a re-delivered span is scored once."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._seen: OrderedDict[str, None] = OrderedDict()

    def first_time(self, span_key: str) -> bool:
        """True the first time `span_key` is seen (among the last `size`)."""
        if self.size == 0:
            return True
        if span_key in self._seen:
            self._seen.move_to_end(span_key)
            return False
        self._seen[span_key] = None
        if len(self._seen) > self.size:
            self._seen.popitem(last=False)
        return True

    def clear(self) -> None:
        self._seen.clear()


class OtlpSource:
    """Kafka message bytes in, turn envelopes out (`read`), or input records
    (`read_records`: a `worker.input.sources.Source`); `Rejected` for a message that is
    not OTLP traces. Keeps only the dedupe LRU between messages."""

    name = "otlp"
    item = "OTLP span"
    metrics = METRICS

    def __init__(
        self,
        rules: OtlpSourceSettings,
        text_bytes: int,
        knows_persona: Callable[[str], bool] | None = None,
    ) -> None:
        self.rules = rules
        self.text_bytes = text_bytes
        self.knows_persona = knows_persona
        self.dedupe = SpanDedupe(rules.dedupe_span_ids)

    def read(self, raw: bytes | None) -> SourceBatch:
        """Decode one message and map each of its spans (raises `Rejected`)."""
        traces = decode_traces(raw, self.rules.encoding, self.rules.max_message_bytes)
        batch = SourceBatch()
        for resource_spans in traces.resource_spans:
            resource = attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    mapped = map_span(
                        span, resource, self.rules, self.text_bytes, self.knows_persona
                    )
                    if isinstance(mapped, str):
                        batch.outcomes[mapped] += 1
                    elif isinstance(mapped, Unmapped):
                        batch.outcomes[UNMAPPED] += 1
                        batch.unmapped.append(mapped)
                    elif self.dedupe.first_time(f"{mapped['trace_id']}:{mapped['id']}"):
                        batch.outcomes[MAPPED] += 1
                        batch.envelopes.append(mapped)
                    else:
                        batch.outcomes[DUPLICATE] += 1
        return batch

    def read_records(self, raw: bytes | None) -> SourceOutput:
        """`read` as input records: each turn keyed by its session, its event time the
        span's end."""
        batch = self.read(raw)
        records = []
        for envelope in batch.envelopes:
            ts = envelope.get("ts")
            records.append(
                SourceRecord(
                    key=envelope["payload"]["session_id"].encode("utf-8"),
                    value=orjson.dumps(envelope),
                    event_time=None if ts is None else ts / 1000,
                    origin=f"trace {envelope['trace_id']} span {envelope['id']}",
                )
            )
        skipped = [Skipped(unmapped.reason, unmapped.detail) for unmapped in batch.unmapped]
        return SourceOutput(records, batch.outcomes, skipped)


# ---------------------------------------------------------------- span content


def _text(value: AnyValue | None) -> str | None:
    """A non-empty string attribute value, else None."""
    if value is None or value.WhichOneof("value") != "string_value" or not value.string_value:
        return None
    return value.string_value


def _lookup(
    name: str | None, attrs: Mapping[str, AnyValue], resource: Mapping[str, AnyValue]
) -> str | None:
    if name is None:
        return None
    return _text(attrs.get(name)) or _text(resource.get(name))


def _persona(
    attrs: Mapping[str, AnyValue], resource: Mapping[str, AnyValue], rules: OtlpSourceSettings
) -> str | None:
    found = _lookup(rules.persona_attribute, attrs, resource)
    if found:
        return found
    service = _text(resource.get("service.name"))
    if service is not None and service in rules.persona_by_service:
        return rules.persona_by_service[service]
    return rules.default_persona


def _structured(value: AnyValue | None) -> object:
    """A structured attribute: a JSON string (what SDKs record) or an OTLP list/map."""
    if value is None:
        return None
    if value.WhichOneof("value") == "string_value":
        try:
            return orjson.loads(value.string_value)
        except orjson.JSONDecodeError:
            return None
    return to_python(value)


def _messages(value: AnyValue | None) -> list[tuple[str, str]] | None:
    """(role, text) of each message of `gen_ai.input.messages` / `gen_ai.output.messages`
    (text parts joined); None when the attribute is absent or not a message list."""
    data = _structured(value)
    if not isinstance(data, list):
        return None
    found: list[tuple[str, str]] = []
    for message in data:
        if not isinstance(message, dict):
            continue
        role = message.get("role")
        parts = message.get("parts")
        texts: list[str] = []
        if isinstance(parts, list):
            for part in parts:
                if isinstance(part, dict) and part.get("type") == "text":
                    content = part.get("content")
                    if isinstance(content, str):
                        texts.append(content)
        elif isinstance(message.get("content"), str):  # an older {role, content} shape
            texts.append(message["content"])
        found.append((role if isinstance(role, str) else "", "\n".join(texts)))
    return found


def _legacy_messages(attrs: Mapping[str, AnyValue], prefix: str) -> list[tuple[str, str]]:
    """(role, content) of the older flattened `{prefix}.N.role` / `{prefix}.N.content`
    attributes, by N (linear in the attributes)."""
    by_index: dict[int, dict[str, str]] = {}
    for name, value in attrs.items():
        if not name.startswith(prefix + "."):
            continue
        index, _, leaf = name[len(prefix) + 1 :].partition(".")
        if index.isdigit() and len(index) < 7 and leaf in ("role", "content"):
            by_index.setdefault(int(index), {})[leaf] = _text(value) or ""
    return [
        (by_index[index].get("role", ""), by_index[index].get("content", ""))
        for index in sorted(by_index)
    ]


def _last_text(messages: list[tuple[str, str]], role: str) -> str | None:
    for found_role, text in reversed(messages):
        if found_role == role and text:
            return text
    return None


def _assistant_text(attrs: Mapping[str, AnyValue], span: Span) -> str | None:
    """The first assistant (or role-less) message with text of the output, in the order
    `gen_ai.output.messages`, `gen_ai.completion.N.*`, a `gen_ai.choice` event."""
    for messages in (
        _messages(attrs.get("gen_ai.output.messages")),
        _legacy_messages(attrs, "gen_ai.completion"),
    ):
        for role, text in messages or ():
            if role in ("assistant", "") and text:
                return text
    for event in span.events:
        if event.name != "gen_ai.choice":
            continue
        event_attrs = attributes(event.attributes)
        message = _structured(event_attrs.get("message"))
        if isinstance(message, dict) and isinstance(message.get("content"), str):
            return str(message["content"]) or None
        content = _text(event_attrs.get("content"))
        if content:
            return content
    return None


__all__ = [
    "DUPLICATE",
    "INVALID_IDS",
    "MAPPED",
    "NOT_GENAI",
    "NO_CONTENT",
    "NO_PERSONA",
    "OPERATION",
    "OUTCOMES",
    "TOO_LARGE",
    "UNKNOWN_PERSONA",
    "UNMAPPED",
    "UNMAPPED_REASONS",
    "OtlpSource",
    "SourceBatch",
    "SpanDedupe",
    "Unmapped",
    "map_span",
]
