"""Real OpenTelemetry spans for the OTLP tests: made with the SDK, encoded with its own OTLP
encoder, written as the Collector's Kafka exporter writes them (otlp_proto: the protobuf
bytes; otlp_json: OTLP/JSON, ids in hex)."""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from typing import Any

from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


class SpanMaker:
    """A tracer provider for one resource (service) that keeps its finished spans."""

    def __init__(self, service: str, **resource: str) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider(
            resource=Resource.create({"service.name": service, **resource})
        )
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.tracer = self.provider.get_tracer("tests.otlp", "1.0")

    def chat(
        self,
        reply: str | None,
        user: str = "hello",
        history: Sequence[tuple[str, str]] = (),
        conversation: str | None = None,
        model: str = "gpt-test",
        end_ns: int | None = None,
        content: bool = True,
        **extra: Any,
    ) -> ReadableSpan:
        """A `chat` span as an instrumentation records it (content in the messages
        attributes unless `content` is False)."""
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": model,
            "gen_ai.response.model": model + "-2026",
            **extra,
        }
        if conversation is not None:
            attributes["gen_ai.conversation.id"] = conversation
        if content:
            messages = [_message(role, text) for role, text in history]
            messages.append(_message("user", user))
            attributes["gen_ai.input.messages"] = json.dumps(messages)
            if reply is not None:
                attributes["gen_ai.output.messages"] = json.dumps(
                    [{**_message("assistant", reply), "finish_reason": "stop"}]
                )
        return self.span(f"chat {model}", attributes, end_ns)

    def span(
        self, name: str, attributes: dict[str, Any], end_ns: int | None = None
    ) -> ReadableSpan:
        """Any span, finished (at `end_ns` when given)."""
        span = self.tracer.start_span(name, attributes=attributes)
        span.end(end_time=end_ns)
        return self.exporter.get_finished_spans()[-1]


def _message(role: str, text: str) -> dict[str, Any]:
    return {"role": role, "parts": [{"type": "text", "content": text}]}


def otlp_proto(spans: Sequence[ReadableSpan]) -> bytes:
    """The Kafka message of the Collector's `otlp_proto` encoding."""
    return encode_spans(spans).SerializeToString()


def otlp_json(spans: Sequence[ReadableSpan]) -> bytes:
    """The Kafka message of the Collector's `otlp_json` encoding: OTLP/JSON, whose trace
    and span ids are hex (protobuf JSON would write base64)."""
    data = json_format.MessageToDict(encode_spans(spans))
    for resource_spans in data.get("resourceSpans", []):
        for scope_spans in resource_spans.get("scopeSpans", []):
            for span in scope_spans.get("spans", []):
                for name in ("traceId", "spanId", "parentSpanId"):
                    if name in span:
                        span[name] = base64.b64decode(span[name]).hex()
    return json.dumps(data).encode("utf-8")


ENCODERS = {"otlp_proto": otlp_proto, "otlp_json": otlp_json}
