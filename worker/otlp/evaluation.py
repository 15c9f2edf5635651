"""Results as `gen_ai.evaluation.result` OTLP log records: pure, no I/O.

One log record per headline metric of the result's suite that has a value (alignment:
safety on turns, safety and overall on sessions; safe: composite; extraction: strict_f1),
named `scorestream.{suite}.{metric}`, parented to the result's trace and, when the result
is a turn of a span (its id is the span id), to that span.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable, Sequence
from typing import Any

import orjson
from google.protobuf import json_format
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs, ScopeLogs
from opentelemetry.proto.resource.v1.resource_pb2 import Resource

from schemas.outputs import CaseResult
from worker.suites import registry

EVENT_NAME = "gen_ai.evaluation.result"
SEVERITY_INFO = 9  # SeverityNumber INFO
MAX_EXPLANATION_CHARS = 300
_SPAN_ID = re.compile(r"^[0-9a-f]{16}$")


def evaluation_records(result: CaseResult) -> list[LogRecord]:
    """The evaluation log records of a result (none without a trace id)."""
    if result.trace_id is None:
        return []
    spec = registry.find(result.suite)
    metrics = spec.headline if spec is not None else ()
    trace_id = bytes.fromhex(result.trace_id)
    span_id = (
        bytes.fromhex(result.id) if result.kind == "turn" and _SPAN_ID.match(result.id) else b""
    )
    at = int(result.scored_at.timestamp() * 1e9)
    records = []
    for metric in metrics:
        value = result.scores.get(metric)
        if value is None:
            continue
        label = result.grade if metric == "overall" and result.grade else result.label
        attrs: dict[str, str | float] = {
            "gen_ai.evaluation.name": f"scorestream.{result.suite}.{metric}",
            "gen_ai.evaluation.score.value": float(value),
        }
        if label is not None:
            attrs["gen_ai.evaluation.score.label"] = str(label)
        explanation = _explanation(result, metric)
        if explanation:
            attrs["gen_ai.evaluation.explanation"] = explanation
        attrs["scorestream.result.kind"] = result.kind
        attrs["scorestream.result.id"] = result.id
        attrs["scorestream.evaluator.version"] = (
            f"{result.versions.scorer}/{result.versions.metrics}"
        )
        if result.model:
            attrs["gen_ai.response.model"] = result.model
        records.append(
            LogRecord(
                time_unix_nano=at,
                observed_time_unix_nano=at,
                severity_number=SEVERITY_INFO,  # type: ignore[arg-type]
                severity_text="INFO",
                event_name=EVENT_NAME,
                trace_id=trace_id,
                span_id=span_id,
                attributes=[_pair(key, item) for key, item in attrs.items()],
            )
        )
    return records


def logs_request(
    records: Sequence[LogRecord], service_name: str, version: str
) -> ExportLogsServiceRequest:
    """One OTLP logs request (the same bytes as `LogsData`) holding `records`."""
    return ExportLogsServiceRequest(
        resource_logs=[
            ResourceLogs(
                resource=Resource(attributes=[_pair("service.name", service_name)]),
                scope_logs=[
                    ScopeLogs(
                        scope=InstrumentationScope(name="scorestream", version=version),
                        log_records=list(records),
                    )
                ],
            )
        ]
    )


def logs_json(request: ExportLogsServiceRequest) -> bytes:
    """OTLP/JSON of a logs request: protobuf JSON, except that trace and span ids are hex."""
    data = json_format.MessageToDict(request)
    for resource_logs in data.get("resourceLogs", []):
        for scope_logs in resource_logs.get("scopeLogs", []):
            for record in scope_logs.get("logRecords", []):
                for name in ("traceId", "spanId"):
                    if name in record:
                        record[name] = base64.b64decode(record[name]).hex()
    return orjson.dumps(data)


def _pair(key: str, value: str | float) -> KeyValue:
    if isinstance(value, str):
        return KeyValue(key=key, value=AnyValue(string_value=value))
    return KeyValue(key=key, value=AnyValue(double_value=value))


def _explanation(result: CaseResult, metric: str) -> str:
    """A short reason from the details: violations and flagged sentences by category,
    the judge's reason, else the label."""
    details: dict[str, Any] = result.details
    parts: list[str] = []
    if metric == "safety":
        categories = _categories(details.get("violations"))
        classifier = details.get("classifier")
        if isinstance(classifier, dict):
            categories += _categories(classifier.get("flagged_sentences"))
        if categories:
            parts.append("flagged: " + ", ".join(sorted(set(categories))))
        reason = details.get("judge_reason")
        if isinstance(reason, str) and reason:
            parts.append(f"judge: {reason}")
    text = "; ".join(parts) or (f"{result.label}" if result.label else "")
    return text[:MAX_EXPLANATION_CHARS]


def _categories(items: object) -> list[str]:
    if not isinstance(items, Iterable) or isinstance(items, str | bytes | dict):
        return []
    return [
        str(item["category"])[:64]
        for item in items
        if isinstance(item, dict) and isinstance(item.get("category"), str)
    ]


__all__ = ["EVENT_NAME", "evaluation_records", "logs_json", "logs_request"]
