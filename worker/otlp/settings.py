"""Settings of the OpenTelemetry source (`sources.otlp`) and evaluation sink
(`evaluations`). Both are off unless configured."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from worker.settings_base import Duration, Section

OtlpEncoding = Literal["otlp_proto", "otlp_json"]


class OtlpSourceSettings(Section):
    """GenAI spans on the OpenTelemetry Collector's Kafka topic, scored as alignment turns.

    `persona_attribute` is looked up on the span, then on its resource; then
    `persona_by_service` by the resource's `service.name`; then `default_persona`.
    The session is `gen_ai.conversation.id`, else `session_attribute` (span, then
    resource), else the trace id. `labels` names resource attributes copied into labels."""

    topic: str = "otlp_spans"
    encoding: OtlpEncoding = "otlp_proto"
    operations: list[str] = Field(
        default_factory=lambda: ["chat", "text_completion", "generate_content"]
    )
    session_attribute: str | None = None
    persona_attribute: str | None = "scorestream.persona"
    persona_by_service: dict[str, str] = Field(default_factory=dict)
    default_persona: str | None = None
    labels: list[str] = Field(default_factory=lambda: ["service.name", "deployment.environment"])
    # A Collector batch can be far larger than one envelope (stream.max_record_bytes).
    max_message_bytes: int = Field(default=16 * 1024 * 1024, ge=1)
    # Span ids remembered to score a re-delivered span once (an LRU of this many).
    dedupe_span_ids: int = Field(default=100_000, ge=0)


class SourcesSettings(Section):
    """Input sources besides the envelope topic."""

    otlp: OtlpSourceSettings | None = None


class EvaluationSinkSettings(Section):
    """Where each result with a trace id goes as `gen_ai.evaluation.result` log records:
    an OTLP/HTTP logs endpoint (`endpoint`, e.g. http://collector:4318/v1/logs) and/or a
    Kafka topic in OTLP encoding (`topic`, for the Collector's Kafka receiver)."""

    endpoint: str | None = Field(default=None, pattern=r"^https?://")
    headers: dict[str, str] = Field(default_factory=dict)
    topic: str | None = None
    encoding: OtlpEncoding = "otlp_proto"
    queue_size: int = Field(default=10_000, ge=1)  # log records waiting; more are dropped
    batch_size: int = Field(default=512, ge=1)  # log records per request / message
    flush_interval: Duration = 1.0
    timeout: Duration = 10.0
    max_attempts: int = Field(default=5, ge=1)
    backoff: Duration = 0.5  # first retry delay; doubled on each attempt

    @model_validator(mode="after")
    def _somewhere(self) -> EvaluationSinkSettings:
        if self.endpoint is None and self.topic is None:
            raise ValueError("evaluations needs an endpoint, a topic or both")
        return self


__all__ = [
    "EvaluationSinkSettings",
    "OtlpEncoding",
    "OtlpSourceSettings",
    "SourcesSettings",
]
