"""GenAI spans made and encoded by the OpenTelemetry SDK, read as the Collector's Kafka
exporter writes them (both encodings), mapped to alignment turn envelopes."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.envelope import parse_event_time
from tests.otlp_spans import ENCODERS, SpanMaker, otlp_proto
from tests.streamkit import EXAMPLES
from worker.config import load_settings
from worker.input import records as input_records
from worker.input.rejections import INVALID_JSON, INVALID_RECORD, NOT_UTF8, OVERSIZED, Rejected
from worker.otlp.as_spans import envelopes_as_spans
from worker.otlp.mapping import (
    DUPLICATE,
    MAPPED,
    NO_CONTENT,
    NO_PERSONA,
    NOT_GENAI,
    OPERATION,
    TOO_LARGE,
    UNKNOWN_PERSONA,
    UNMAPPED,
    OtlpSource,
)
from worker.otlp.settings import OtlpSourceSettings

END_NS = 1_780_000_000_123_456_789


def _source(encoding: str = "otlp_proto", **rules: object) -> OtlpSource:
    settings = OtlpSourceSettings.model_validate(
        {"encoding": encoding, "persona_by_service": {"bank-bot": "support"}, **rules}
    )
    return OtlpSource(settings, text_bytes=256 * 1024)


@pytest.mark.parametrize("encoding", ["otlp_proto", "otlp_json"])
def test_a_mixed_batch_of_two_resources_maps_each_genai_chat_span(encoding: str) -> None:
    bank = SpanMaker("bank-bot", **{"deployment.environment": "prod"})
    shop = SpanMaker("shop-bot", **{"scorestream.persona": "sales"})
    first = bank.chat(
        "Your card is frozen.",
        user="Freeze my card",
        history=[("user", "hi"), ("assistant", "Hello!")],
        conversation="conv-1",
        end_ns=END_NS,
    )
    spans = [
        first,
        bank.span("GET /accounts", {"http.request.method": "GET"}),
        bank.span("embeddings", {"gen_ai.operation.name": "embeddings"}),
        shop.chat("We have it in blue.", user="Any colours?", end_ns=END_NS),
        shop.chat(None, content=False),  # content capture off
    ]
    batch = _source(encoding).read(ENCODERS[encoding](spans))

    assert batch.outcomes == {MAPPED: 2, NOT_GENAI: 1, OPERATION: 1, UNMAPPED: 1}
    assert [u.reason for u in batch.unmapped] == [NO_CONTENT]
    shop_turn, bank_turn = sorted(batch.envelopes, key=lambda e: e["payload"]["persona_id"])
    context = first.get_span_context()
    assert bank_turn == {
        "id": format(context.span_id, "016x"),
        "suite": "alignment",
        "ts": END_NS // 1_000_000,
        "model": "gpt-test-2026",
        "labels": {"service.name": "bank-bot", "deployment.environment": "prod"},
        "trace_id": format(context.trace_id, "032x"),
        "payload": {
            "session_id": "conv-1",
            "turn_index": 1,  # one assistant message before it
            "persona_id": "support",
            "text": "Your card is frozen.",
            "user": "Freeze my card",
        },
    }
    # No conversation id: the trace is the session; the persona came from the resource.
    assert shop_turn["payload"]["session_id"] == shop_turn["trace_id"]
    assert shop_turn["payload"]["persona_id"] == "sales"
    assert shop_turn["labels"] == {"service.name": "shop-bot"}
    for envelope in batch.envelopes:  # real envelopes: the score stage takes them as they are
        raw = json.dumps(envelope).encode()
        record = input_records.decode_record(raw, 1 << 20)
        assert record.trace_id == envelope["trace_id"]


def test_a_redelivered_span_is_mapped_once() -> None:
    maker = SpanMaker("bank-bot")
    message = otlp_proto([maker.chat("One."), maker.chat("Two.")])
    source = _source()
    assert source.read(message).outcomes == {MAPPED: 2}
    again = source.read(message)
    assert again.envelopes == []
    assert again.outcomes == {DUPLICATE: 2}


def test_session_from_a_configured_attribute_and_persona_fallbacks() -> None:
    maker = SpanMaker("other-bot", **{"session.id": "s-9"})
    message = otlp_proto([maker.chat("Hi.")])
    assert _source().read(message).unmapped[0].reason == NO_PERSONA
    source = _source(session_attribute="session.id", default_persona="support")
    (envelope,) = source.read(message).envelopes
    assert envelope["payload"]["session_id"] == "s-9"
    assert envelope["payload"]["persona_id"] == "support"
    strict = OtlpSource(
        OtlpSourceSettings(default_persona="nobody"), 1 << 20, lambda persona: persona == "x"
    )
    assert strict.read(message).unmapped[0].reason == UNKNOWN_PERSONA


def test_older_conventions_completion_attributes_and_choice_events() -> None:
    maker = SpanMaker("bank-bot")
    legacy = maker.span(
        "chat",
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.prompt.0.role": "user",
            "gen_ai.prompt.0.content": "first",
            "gen_ai.prompt.1.role": "assistant",
            "gen_ai.prompt.1.content": "answer",
            "gen_ai.prompt.2.role": "user",
            "gen_ai.prompt.2.content": "second",
            "gen_ai.completion.0.role": "assistant",
            "gen_ai.completion.0.content": "Legacy reply.",
        },
    )
    span = maker.tracer.start_span("chat", attributes={"gen_ai.operation.name": "chat"})
    span.add_event("gen_ai.choice", {"index": 0, "message": json.dumps({"content": "Evented."})})
    span.end()
    evented = maker.exporter.get_finished_spans()[-1]
    batch = _source().read(otlp_proto([legacy, evented]))
    first, second = batch.envelopes
    assert first["payload"] | {"session_id": ""} == {
        "session_id": "",
        "turn_index": 1,
        "persona_id": "support",
        "text": "Legacy reply.",
        "user": "second",
    }
    assert second["payload"]["text"] == "Evented."


def test_a_text_over_the_limit_is_counted_not_sent() -> None:
    maker = SpanMaker("bank-bot")
    message = otlp_proto([maker.chat("crap " * 60_000)])
    batch = OtlpSource(OtlpSourceSettings(default_persona="p"), text_bytes=256 * 1024).read(message)
    assert batch.envelopes == []
    assert batch.unmapped[0].reason == TOO_LARGE


@pytest.mark.parametrize(
    ("encoding", "raw", "reason"),
    [
        ("otlp_proto", otlp_proto([SpanMaker("a").chat("x")])[:-7], INVALID_RECORD),
        ("otlp_proto", b'{"resourceSpans": []}', INVALID_RECORD),  # JSON on a proto topic
        ("otlp_json", otlp_proto([SpanMaker("a").chat("x")]), NOT_UTF8),  # and back
        (
            "otlp_json",
            b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "zz"}]}]}]}',
            INVALID_RECORD,
        ),
        ("otlp_json", b'{"resourceSpans": 5}', INVALID_RECORD),
        ("otlp_json", b"[" * 5000 + b"]" * 5000, INVALID_JSON),
        ("otlp_proto", b"\x0a" + b"\xff" * 64, INVALID_RECORD),
        ("otlp_proto", None, INVALID_RECORD),
    ],
    # named: the proto messages carry random ids, and every test process must collect the
    # same test names
    ids=[
        "proto-cut-short",
        "json-on-a-proto-topic",
        "proto-on-a-json-topic",
        "json-bad-trace-id",
        "json-spans-not-a-list",
        "json-nested-5000-deep",
        "proto-bad-varint",
        "proto-no-value",
    ],
)
def test_undecodable_messages_are_rejected_with_a_reason(
    encoding: str, raw: bytes | None, reason: str
) -> None:
    with pytest.raises(Rejected) as caught:
        _source(encoding).read(raw)
    assert caught.value.reason == reason
    assert caught.value.message


def test_a_message_over_the_bound_is_oversized() -> None:
    source = _source(max_message_bytes=100)
    with pytest.raises(Rejected) as caught:
        source.read(otlp_proto([SpanMaker("a").chat("x" * 200)]))
    assert caught.value.reason == OVERSIZED


def test_a_giant_batch_is_read_in_linear_time() -> None:
    maker = SpanMaker("bank-bot")
    spans = [maker.chat(f"Reply {i}.") for i in range(2000)]
    batch = _source().read(otlp_proto(spans))
    assert batch.outcomes == {MAPPED: 2000}


@pytest.mark.parametrize("encoding", ["otlp_proto", "otlp_json"])
def test_produce_as_otlp_spans_map_back_to_the_same_turns(encoding: str) -> None:
    lines = (EXAMPLES / "demo" / "stream.jsonl").read_bytes().splitlines()
    turns = [record for line in lines if (record := _turn(line)) is not None]
    made = envelopes_as_spans(lines, encoding, spans_per_message=10)
    assert made.spans == len(turns) and made.skipped == len(lines) - len(turns)
    source = _source(encoding, labels=["app"])
    mapped = [envelope for message in made.messages for envelope in source.read(message).envelopes]
    assert len(mapped) == len(turns)
    by_turn = {(e["payload"]["session_id"], e["payload"]["turn_index"]): e for e in mapped}
    indexes: dict[str, list[int]] = {}
    for turn in turns:
        indexes.setdefault(turn["payload"]["session_id"], []).append(turn["payload"]["turn_index"])
    for turn in turns:
        payload = turn["payload"]
        # The turns keep their order: each is as many as the session's turns before it.
        rank = sorted(indexes[payload["session_id"]]).index(payload["turn_index"])
        envelope = by_turn[payload["session_id"], rank]
        assert envelope["payload"] == {
            "session_id": payload["session_id"],
            "turn_index": rank,
            "persona_id": payload["persona_id"],
            "text": payload["text"],
            "user": payload["user"],
        }
        assert envelope["ts"] == int(parse_event_time(turn["ts"]).timestamp() * 1000)
        assert envelope["model"] == turn["model"]
        assert envelope["labels"] == {"app": turn["labels"]["app"]}


def _turn(line: bytes) -> dict[str, Any] | None:
    """An alignment turn envelope of the demo stream (which has malformed lines too)."""
    try:
        record = json.loads(line)
        return record if "text" in record["payload"] and record["suite"] == "alignment" else None
    except (ValueError, KeyError, TypeError):
        return None


def test_the_shipped_otel_config_loads() -> None:
    settings = load_settings(EXAMPLES.parent / "deploy" / "otel" / "config.otel.yaml", environ={})
    assert settings.sources.otlp is not None and settings.sources.otlp.topic == "otlp_spans"
    assert settings.evaluations is not None
    assert settings.evaluations.topic == "llm.eval.evaluations.v1"


VALID = otlp_proto([SpanMaker("bank-bot").chat("Fine.", history=[("assistant", "Hi")])])


@settings(max_examples=300, deadline=None)
@given(
    encoding=st.sampled_from(["otlp_proto", "otlp_json"]),
    raw=st.one_of(
        st.binary(max_size=512),
        st.builds(
            lambda at, junk: VALID[:at] + junk + VALID[at + len(junk) :],
            st.integers(0, len(VALID)),
            st.binary(min_size=1, max_size=8),
        ),
    ),
)
def test_any_bytes_are_mapped_or_rejected_with_a_reason(encoding: str, raw: bytes) -> None:
    try:
        batch = _source(encoding).read(raw)
    except Rejected as rejected:
        assert rejected.reason in (INVALID_RECORD, INVALID_JSON, NOT_UTF8)
    else:
        assert sum(batch.outcomes.values()) >= len(batch.envelopes)
