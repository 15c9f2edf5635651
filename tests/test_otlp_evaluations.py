"""Results as gen_ai.evaluation.result log records, and the sink that sends them: batched,
retried with backoff against a real local HTTP server, bounded, every drop counted."""

from __future__ import annotations

import base64
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson
import pytest
from google.protobuf import json_format
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord

from schemas.outputs import CaseResult, Versions
from worker.input.records import build_result
from worker.otlp.evaluation import EVENT_NAME, evaluation_records
from worker.otlp.settings import EvaluationSinkSettings
from worker.otlp.sink import GAVE_UP, QUEUE_FULL, REFUSED, EvaluationSink
from worker.suites.base import Scored

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN = "00f067aa0ba902b7"
AT = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)


def _result(
    case_id: str = SPAN,
    kind: str = "turn",
    trace_id: str | None = TRACE,
    **scored: Any,
) -> CaseResult:
    return build_result(
        case_id=case_id,
        suite="alignment",
        kind=kind,
        scored=Scored(**({"scores": {"safety": 0.5, "authenticity": 0.8}} | scored)),
        event_time=AT,
        model="gpt-x",
        labels={},
        versions=Versions(scorer="1.2.0", metrics="alignment-1"),
        source=None,
        scored_at=AT,
        trace_id=trace_id,
    )


def _attrs(record: LogRecord) -> dict[str, Any]:
    return {p.key: getattr(p.value, p.value.WhichOneof("value")) for p in record.attributes}


def test_a_turn_of_a_span_gives_its_safety_parented_to_the_span() -> None:
    details = {
        "violations": [{"category": "offensive"}],
        "classifier": {"flagged_sentences": [{"category": "phishing"}]},
    }
    (record,) = evaluation_records(_result(details=details, label="Fail"))
    assert record.event_name == EVENT_NAME
    assert record.trace_id.hex() == TRACE
    assert record.span_id.hex() == SPAN
    assert record.time_unix_nano == int(AT.timestamp() * 1e9)
    assert _attrs(record) == {
        "gen_ai.evaluation.name": "scorestream.alignment.safety",
        "gen_ai.evaluation.score.value": 0.5,
        "gen_ai.evaluation.score.label": "Fail",
        "gen_ai.evaluation.explanation": "flagged: offensive, phishing",
        "gen_ai.response.model": "gpt-x",
        "scorestream.result.kind": "turn",
        "scorestream.result.id": SPAN,
        "scorestream.evaluator.version": "1.2.0/alignment-1",
    }


def test_a_session_gives_safety_and_overall_with_its_grade_on_the_trace() -> None:
    result = _result(
        "conv-1", "session", scores={"safety": 1.0, "overall": 0.72}, grade="C", label="Review"
    )
    records = evaluation_records(result)
    assert [_attrs(r)["gen_ai.evaluation.name"] for r in records] == [
        "scorestream.alignment.safety",
        "scorestream.alignment.overall",
    ]
    assert [_attrs(r)["gen_ai.evaluation.score.label"] for r in records] == ["Review", "C"]
    assert all(r.span_id == b"" and r.trace_id.hex() == TRACE for r in records)


def test_no_trace_no_record_and_a_missing_score_is_left_out() -> None:
    assert evaluation_records(_result(trace_id=None)) == []
    assert evaluation_records(_result(scores={"safety": None})) == []


class Endpoint:
    """A local HTTP server answering each POST with the next status of `statuses`
    (then 200), keeping the decoded requests."""

    def __init__(self, statuses: list[int]) -> None:
        self.statuses = list(statuses)
        self.received: list[ExportLogsServiceRequest] = []
        self.posts = 0
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                endpoint.posts += 1
                status = endpoint.statuses.pop(0) if endpoint.statuses else 200
                if status == 200:
                    request = ExportLogsServiceRequest()
                    request.ParseFromString(body)
                    endpoint.received.append(request)
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/logs"

    def records(self) -> list[LogRecord]:
        return [
            record
            for request in self.received
            for resource in request.resource_logs
            for scope in resource.scope_logs
            for record in scope.log_records
        ]


@pytest.fixture
def endpoint_factory() -> Iterator[Any]:
    started: list[Endpoint] = []

    def start(statuses: list[int]) -> Endpoint:
        endpoint = Endpoint(statuses)
        threading.Thread(target=endpoint.server.serve_forever, daemon=True).start()
        started.append(endpoint)
        return endpoint

    yield start
    for endpoint in started:
        endpoint.server.shutdown()
        endpoint.server.server_close()


def _sink(url: str, delays: list[float], **settings: Any) -> EvaluationSink:
    async def no_wait(seconds: float) -> None:
        delays.append(seconds)

    return EvaluationSink(EvaluationSinkSettings(endpoint=url, **settings), "1.2.0", sleep=no_wait)


async def test_batches_are_retried_with_backoff_until_accepted(endpoint_factory: Any) -> None:
    endpoint = endpoint_factory([503, 429])
    delays: list[float] = []
    sink = _sink(endpoint.url, delays, batch_size=2, backoff=0.5)
    for index in range(3):
        sink.offer(_result(f"{index:016x}"))
    await sink.close()
    assert delays == [0.5, 1.0]  # two refusals of the first batch, doubled
    assert endpoint.posts == 4  # 3 tries of the first batch, 1 of the second
    assert sorted(r.span_id.hex() for r in endpoint.records()) == [
        f"{index:016x}" for index in range(3)
    ]
    assert sink.dropped == {QUEUE_FULL: 0, REFUSED: 0, GAVE_UP: 0}


async def test_a_refused_batch_and_an_unreachable_endpoint_are_counted(
    endpoint_factory: Any,
) -> None:
    endpoint = endpoint_factory([400])
    sink = _sink(endpoint.url, [])
    sink.offer(_result())
    await sink.flush()
    assert sink.dropped[REFUSED] == 1 and endpoint.posts == 1  # a 4xx is not retried
    gone = _sink("http://127.0.0.1:9/v1/logs", delays := [], max_attempts=3)
    gone.offer(_result())
    await gone.close()
    assert gone.dropped[GAVE_UP] == 1
    assert delays == [0.5, 1.0]


def test_the_queue_is_bounded_and_what_does_not_fit_is_counted() -> None:
    sink = _sink("http://127.0.0.1:9/v1/logs", [], queue_size=2)
    sizes = [sink.offer(_result(f"{index:016x}")) for index in range(5)]
    assert sizes == [1, 1, 0, 0, 0]
    assert len(sink.queue) == 2
    assert sink.dropped[QUEUE_FULL] == 3


@pytest.mark.parametrize("encoding", ["otlp_proto", "otlp_json"])
async def test_the_kafka_destination_gets_otlp_logs_in_its_encoding(encoding: str) -> None:
    produced: list[bytes] = []

    async def produce(value: bytes) -> None:
        produced.append(value)

    sink = EvaluationSink(
        EvaluationSinkSettings(topic="evals", encoding=encoding), "1.2.0", produce=produce
    )
    sink.offer(_result())
    await sink.flush()
    (value,) = produced
    request = ExportLogsServiceRequest()
    if encoding == "otlp_json":
        data = orjson.loads(value)
        log_record = data["resourceLogs"][0]["scopeLogs"][0]["logRecords"][0]
        assert (log_record["traceId"], log_record["spanId"]) == (TRACE, SPAN)  # hex ids
        for name in ("traceId", "spanId"):
            log_record[name] = base64.b64encode(bytes.fromhex(log_record[name])).decode()
        json_format.ParseDict(data, request)
    else:
        request.ParseFromString(value)
    (record,) = request.resource_logs[0].scope_logs[0].log_records
    assert record.event_name == EVENT_NAME
    assert _attrs(record)["gen_ai.evaluation.score.value"] == 0.5
