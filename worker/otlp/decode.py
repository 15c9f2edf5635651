"""OTLP trace messages as the Collector's Kafka exporter writes them: bytes in, `TracesData`
out, or `Rejected` with the dead-letter reason (and `traces_json`, the other way).

`otlp_proto` is the protobuf `TracesData` (the same bytes as `ExportTraceServiceRequest`);
`otlp_json` is its OTLP/JSON form, where trace and span ids are hex strings instead of
protobuf JSON's base64 (they are turned into base64 before `json_format` reads the rest).
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

import orjson
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import TracesData

from worker.input.rejections import INVALID_JSON, INVALID_RECORD, NOT_UTF8, OVERSIZED, Rejected
from worker.otlp.settings import OtlpEncoding

INVALID_OTLP = INVALID_RECORD  # a message that is not OTLP traces (dead-letter reason)
MAX_JSON_DEPTH = 64  # nesting `json_format` reads (AnyValue lists in lists ...)
_HEX_ID_FIELDS = ("traceId", "spanId", "parentSpanId")


def decode_traces(raw: bytes | None, encoding: OtlpEncoding, max_bytes: int) -> TracesData:
    """The spans of one Kafka message; raises `Rejected` naming what is wrong."""
    if raw is None:
        raise Rejected(INVALID_RECORD, "the message has no value (tombstone)")
    if len(raw) > max_bytes:
        raise Rejected(
            OVERSIZED,
            f"message of {len(raw)} bytes is over {max_bytes} bytes "
            "(sources.otlp.max_message_bytes)",
        )
    if encoding == "otlp_json":
        return _from_json(raw)
    traces = TracesData()
    try:
        traces.ParseFromString(raw)
    except (DecodeError, RecursionError) as exc:
        raise Rejected(INVALID_OTLP, f"not OTLP protobuf traces: {exc}") from None
    return traces


def _from_json(raw: bytes) -> TracesData:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Rejected(NOT_UTF8, f"not UTF-8 (otlp_json): {exc}") from None
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise Rejected(INVALID_JSON, f"not JSON (otlp_json): {exc}") from None
    if not isinstance(data, dict):
        raise Rejected(INVALID_OTLP, f"expected an OTLP/JSON object, got {type(data).__name__}")
    _hex_ids_to_base64(data)
    traces = TracesData()
    try:
        json_format.ParseDict(
            data, traces, ignore_unknown_fields=True, max_recursion_depth=MAX_JSON_DEPTH
        )
    except (json_format.ParseError, RecursionError, TypeError, ValueError) as exc:
        raise Rejected(INVALID_OTLP, f"not OTLP/JSON traces: {str(exc)[:500]}") from None
    return traces


def _hex_ids_to_base64(data: dict[str, Any]) -> None:
    """Rewrite, in place, the hex ids of every span and link as protobuf JSON's base64."""
    for resource_spans in _dicts(data.get("resourceSpans")):
        for scope_spans in _dicts(resource_spans.get("scopeSpans")):
            for span in _dicts(scope_spans.get("spans")):
                _convert(span)
                for link in _dicts(span.get("links")):
                    _convert(link)


def _dicts(value: object) -> list[dict[str, Any]]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _convert(holder: dict[str, Any]) -> None:
    for name in _HEX_ID_FIELDS:
        value = holder.get(name)
        if not isinstance(value, str):
            continue
        try:
            holder[name] = base64.b64encode(bytes.fromhex(value)).decode("ascii")
        except ValueError:
            raise Rejected(INVALID_OTLP, f"{name} is not hex: {value[:80]!r}") from None


def traces_json(traces: TracesData) -> bytes:
    """The OTLP/JSON form of `traces` (the Collector's `otlp_json`): ids in hex."""
    data = json_format.MessageToDict(traces)
    for resource_spans in _dicts(data.get("resourceSpans")):
        for scope_spans in _dicts(resource_spans.get("scopeSpans")):
            for span in _dicts(scope_spans.get("spans")):
                for name in _HEX_ID_FIELDS:
                    if isinstance(span.get(name), str):
                        span[name] = base64.b64decode(span[name]).hex()
    return orjson.dumps(data)


def to_python(value: AnyValue) -> object:
    """An attribute value as plain Python (None when unset; bytes as base64 text)."""
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [to_python(item) for item in value.array_value.values]
    if kind == "kvlist_value":
        return {item.key: to_python(item.value) for item in value.kvlist_value.values}
    if kind == "bytes_value":
        return binascii.b2a_base64(value.bytes_value, newline=False).decode("ascii")
    return getattr(value, kind)


def attributes(pairs: Any) -> dict[str, AnyValue]:
    """`KeyValue` list as a dict (the last value of a repeated key wins)."""
    found: dict[str, AnyValue] = {}
    pair: KeyValue
    for pair in pairs:
        found[pair.key] = pair.value
    return found


__all__ = ["INVALID_OTLP", "attributes", "decode_traces", "to_python", "traces_json"]
