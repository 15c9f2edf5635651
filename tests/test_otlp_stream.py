"""End to end on the real Tansu broker: GenAI spans made by the OpenTelemetry SDK, written
to the span topic as the Collector's Kafka exporter writes them, come out as alignment
results, and their scores arrive as gen_ai.evaluation.result log records at a real
OTLP/HTTP receiver."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import orjson
import pytest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord

from tests.otlp_spans import ENCODERS, SpanMaker
from tests.streamkit import (
    EXAMPLES,
    InProcessWorker,
    TopicReader,
    create_layout,
    envelopes,
    make_config,
    produce,
    provision,
    settings_of,
)
from worker.ops.broker import EmbeddedBroker
from worker.otlp.mapping import OtlpSource

pytestmark = [pytest.mark.integration, pytest.mark.model]


class OtlpLogsReceiver:
    """An OTLP/HTTP logs endpoint on a free loopback port that keeps what it decodes."""

    def __init__(self) -> None:
        self.records: list[LogRecord] = []
        self.requests = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                request = ExportLogsServiceRequest()
                request.ParseFromString(body)
                receiver.requests += 1
                for resource_logs in request.resource_logs:
                    for scope_logs in resource_logs.scope_logs:
                        receiver.records.extend(scope_logs.log_records)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1/logs"


@pytest.fixture
def receiver() -> Iterator[OtlpLogsReceiver]:
    running = OtlpLogsReceiver()
    running.thread.start()
    yield running
    running.server.shutdown()
    running.server.server_close()


def _attrs(record: LogRecord) -> dict[str, Any]:
    return {
        pair.key: getattr(pair.value, pair.value.WhichOneof("value")) for pair in record.attributes
    }


@pytest.mark.parametrize("encoding", ["otlp_proto", "otlp_json"])
async def test_collector_spans_are_scored_and_evaluations_reach_the_receiver(
    broker: EmbeddedBroker, receiver: OtlpLogsReceiver, encoding: str
) -> None:
    config = make_config()
    span_topic = f"otlp-spans-{config['app_id']}"
    config["sources"] = {
        "otlp": {
            "topic": span_topic,
            "encoding": encoding,
            "persona_by_service": {"ledger-app": "ledgerline"},
            "max_message_bytes": 64 * 1024,
        }
    }
    # otlp_json: no timer flush during the test; the records go out when the worker stops
    flush = "200ms" if encoding == "otlp_proto" else "1h"
    evaluations_topic = f"evaluations-{config['app_id']}"
    config["evaluations"] = {
        "endpoint": receiver.endpoint,
        "flush_interval": flush,
        "topic": evaluations_topic,  # for the Collector's Kafka receiver, in OTLP/JSON here
        "encoding": "otlp_json",
    }
    settings = settings_of(config)
    topics = settings.topics
    await provision(settings, broker.url)
    await create_layout(
        broker.bootstrap, {span_topic: settings.stream.partitions, evaluations_topic: 1}
    )

    app = SpanMaker("ledger-app", **{"deployment.environment": "test"})
    now_ns = time.time_ns()
    history: list[tuple[str, str]] = []
    chats = []
    for index, (question, reply) in enumerate(
        [
            ("What is my balance?", "Your balance is 1,240.50 EUR as of this morning."),
            ("Can you freeze my card?", "I've frozen your card; no payments can go through."),
            ("Thanks", "You're welcome. Is there anything else I can help with?"),
        ]
    ):
        chats.append(
            app.chat(
                reply,
                user=question,
                history=history,
                conversation="conv-42",
                end_ns=now_ns + index * 1_000_000,
            )
        )
        history += [("user", question), ("assistant", reply)]
    other = app.span("GET /balance", {"http.request.method": "GET"})
    embed = app.span("embeddings", {"gen_ai.operation.name": "embeddings"})
    encode = ENCODERS[encoding]
    giant = encode([app.chat(f"Reply {i}. " * 20) for i in range(200)])
    assert len(giant) > 64 * 1024
    hostile = [
        b"\x00\x01 not OTLP at all",
        encode(chats)[:-5],  # truncated
        ENCODERS["otlp_json" if encoding == "otlp_proto" else "otlp_proto"](chats),
        giant,  # over sources.otlp.max_message_bytes
    ]
    messages = [
        *hostile,  # first: the worker stays alive and scores what comes after
        encode([chats[0], other]),
        encode([chats[1], chats[2], embed]),
        encode(chats),  # the Collector re-delivers: each span is scored once
    ]
    span_ids = {format(s.get_span_context().span_id, "016x") for s in chats}
    trace_ids = {format(s.get_span_context().trace_id, "032x") for s in chats}

    async with (
        InProcessWorker(settings, broker.url) as scorer,
        TopicReader(broker.bootstrap, topics.results, topics.dead_letters) as reader,
    ):
        await produce(broker.bootstrap, span_topic, messages)
        await reader.until(
            lambda r: (
                sum(1 for v in r.values(topics.results) if v["kind"] == "turn") >= 3
                and len(r.values(topics.dead_letters)) >= len(hostile)
                and any(v["kind"] == "session" for v in r.values(topics.results))
            ),
            timeout=90,
            what="three turn results, the session closed by idleness and the dead letters",
        )
        deadline = time.monotonic() + 30
        while flush != "1h" and len(receiver.records) < 3 and time.monotonic() < deadline:
            await reader.poll(0.2)
        if flush == "1h":
            assert receiver.records == []
        await reader.poll(1.0)  # a duplicate would arrive now
        registry = scorer.telemetry.registry

        def spans(outcome: str) -> float | None:
            return registry.get_sample_value("scorestream_otlp_spans_total", {"outcome": outcome})

        assert spans("mapped") == 3
        assert spans("duplicate") == 3
        assert spans("not_genai") == 1
        assert spans("operation") == 1

    turns = {v["id"]: v for v in reader.values(topics.results) if v["kind"] == "turn"}
    assert set(turns) == span_ids
    assert sum(1 for v in reader.values(topics.results) if v["kind"] == "turn") == 3
    for turn in turns.values():
        assert turn["suite"] == "alignment"
        assert turn["trace_id"] in trace_ids
        assert turn["model"] == "gpt-test-2026"
        assert turn["labels"]["service.name"] == "ledger-app"
    (session,) = [v for v in reader.values(topics.results) if v["kind"] == "session"]
    assert session["id"] == "session:conv-42"  # gen_ai.conversation.id, closed when idle
    assert session["counts"]["turns"] == 3
    letters = reader.values(topics.dead_letters)
    reasons = [letter["error"]["type"] for letter in letters]
    assert len(reasons) == len(hostile) and reasons.count("oversized") == 1
    # (protobuf bytes read as JSON are not UTF-8, or, by chance, not JSON)
    readable = {"invalid_json", "not_utf8"} if encoding == "otlp_json" else {"invalid_record"}
    assert set(reasons) - {"oversized"} <= readable
    assert {letter["source"]["topic"] for letter in letters} == {span_topic}

    records = receiver.records
    assert len(records) == 3
    for record in records:
        attrs = _attrs(record)
        assert record.event_name == "gen_ai.evaluation.result"
        span_id = record.span_id.hex()
        assert span_id in span_ids  # parented to the span it evaluates
        assert record.trace_id.hex() == turns[span_id]["trace_id"]
        assert attrs["gen_ai.evaluation.name"] == "scorestream.alignment.safety"
        assert attrs["gen_ai.evaluation.score.value"] == turns[span_id]["scores"]["safety"]

    async with TopicReader(broker.bootstrap, evaluations_topic) as evaluations:
        await evaluations.until(
            lambda r: sum(len(_json_records(v)) for v in r.values(evaluations_topic)) >= 3,
            timeout=30,
            what="evaluation records on the topic",
        )
    written = [r for v in evaluations.values(evaluations_topic) for r in _json_records(v)]
    assert sorted(r["spanId"] for r in written) == sorted(span_ids)  # OTLP/JSON: hex ids
    assert {r["eventName"] for r in written} == {"gen_ai.evaluation.result"}


async def test_produce_as_otlp_writes_the_turns_as_span_messages(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        "sources: {otlp: {encoding: otlp_json, default_persona: ledgerline}}\n", "utf-8"
    )
    source = EXAMPLES / "alignment" / "envelopes.jsonl"
    args = ["produce", str(source), "--as-otlp", "--broker", broker.url, "--config", str(config)]
    done = subprocess.run(
        [sys.executable, "-m", "worker", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    turns = envelopes(source)
    assert f"{len(turns)} turns as spans in 1 messages" in done.stderr
    async with TopicReader(broker.bootstrap, "otlp_spans") as reader:
        await reader.until(lambda r: r.records["otlp_spans"], timeout=30, what="span messages")
    settings = settings_of({"sources": {"otlp": {"encoding": "otlp_json"}}})
    assert settings.sources.otlp is not None
    mapped = OtlpSource(settings.sources.otlp, 1 << 20).read(
        orjson.dumps(reader.values("otlp_spans")[0])
    )
    assert sorted(e["payload"]["text"] for e in mapped.envelopes) == sorted(
        t["payload"]["text"] for t in turns
    )


def _json_records(request: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        record
        for resource_logs in request["resourceLogs"]
        for scope_logs in resource_logs["scopeLogs"]
        for record in scope_logs["logRecords"]
    ]
