"""Property-based fuzzing of input decoding and scoring for all three suites: whatever an
envelope holds, the outcome is a result or a dead-letter reason, never an exception."""

from __future__ import annotations

import asyncio
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemas.envelope import AlignmentRecord, AlignmentSessionPayload
from tests.streamkit import (
    EXAMPLES,
    TopicReader,
    WorkerProcess,
    live,
    make_config,
    provision,
    settings_of,
    write_config,
)
from worker.config import LimitsSettings
from worker.input import records as input_records
from worker.ops.broker import EmbeddedBroker
from worker.scoring_suites import ScoringSuites
from worker.suites.alignment.embedding_model import HashingEmbedder
from worker.suites.alignment.scoring import score_session
from worker.suites.alignment.streaming import AlignmentSessions

REASONS = {
    input_records.OVERSIZED,
    input_records.NOT_UTF8,
    input_records.INVALID_JSON,
    input_records.INVALID_RECORD,
    input_records.UNKNOWN_SUITE,
    input_records.UNKNOWN_PERSONA,
    input_records.UNKNOWN_SCHEMA,
    input_records.INVALID_TIMESTAMP,
    input_records.FIELD_TOO_LARGE,
}
LIMITS = LimitsSettings(id_bytes=64, model_bytes=64, label_value_bytes=64, text_bytes=4096)
NOW = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture(scope="module")
def suites() -> ScoringSuites:
    return ScoringSuites.load(settings_of(make_config()), embedder=HashingEmbedder())


def outcome(suites: ScoringSuites, raw: bytes) -> str:
    """What the worker does with `raw`: "result" or the dead-letter reason."""
    try:
        record = input_records.decode_record(raw, 1 << 20, LIMITS)
        input_records.usable_event_time(record.event_time() or NOW, NOW, 300.0)
        if isinstance(record, AlignmentRecord):
            suites.check_session(record.payload)
            payload = record.payload
            sessions = suites.sessions
            assert isinstance(sessions, AlignmentSessions)
            if isinstance(payload, AlignmentSessionPayload):
                texts = [turn.assistant for turn in payload.turns]
                state = sessions.new_session(payload.session_id, payload.persona_id)
                for index, (text, vector) in enumerate(
                    zip(texts, suites.embed(texts), strict=True)
                ):
                    turn = sessions.score_turn((payload.persona_id, text), vector)
                    state.add(index, turn, vector)
                score_session(state, suites.settings.alignment)
            else:
                sessions.score_turn(payload, suites.embed([payload.text])[0])
        else:
            suites.score_case(record.suite, record.payload)
    except input_records.Rejected as rejected:
        assert rejected.reason in REASONS
        assert rejected.message
        return rejected.reason
    return "result"


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=12,
)
TEXT = st.text(max_size=200)
STRINGS = st.lists(TEXT, max_size=5)
PERSONAS = st.sampled_from(["northwind-analytics", "tunetide", "ledgerline", "nobody"])


def maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """The field's own kind of value most of the time, else anything at all."""
    return st.one_of(strategy, strategy, strategy, JSON)


SAFE_PAYLOAD = st.fixed_dictionaries(
    {},
    optional={
        "test_id": maybe(TEXT),
        "concern_id": maybe(TEXT),
        "archetype": maybe(TEXT),
        "batch_id": maybe(TEXT),
        "expectations": maybe(
            st.fixed_dictionaries(
                {},
                optional={
                    "signal_generation": maybe(
                        st.fixed_dictionaries({"must_find_signals": maybe(STRINGS)})
                    ),
                    "followup_questions": maybe(
                        st.fixed_dictionaries({"forbidden_terms": maybe(STRINGS)})
                    ),
                    "event_summary": maybe(
                        st.fixed_dictionaries({"must_contain_phrases": maybe(STRINGS)})
                    ),
                },
            )
        ),
        "output": maybe(
            st.fixed_dictionaries(
                {},
                optional={
                    "summary": maybe(TEXT),
                    "signals": maybe(STRINGS),
                    "followup_questions": maybe(STRINGS),
                },
            )
        ),
    },
)
ARGUMENT = st.fixed_dictionaries(
    {"role": maybe(TEXT)},
    optional={
        "argument": maybe(
            st.one_of(
                st.none(), TEXT, st.integers(min_value=-(2**63), max_value=2**64 - 1), st.booleans()
            )
        )
    },
)
EVENT = st.fixed_dictionaries(
    {"event_type": maybe(st.sampled_from(["质押", "股份回购", "made-up"]) | TEXT)},
    optional={"trigger": maybe(TEXT), "arguments": maybe(st.lists(ARGUMENT, max_size=3))},
)
EXTRACTION_PAYLOAD = st.fixed_dictionaries(
    {},
    optional={
        "text": maybe(TEXT),
        "gold": maybe(st.lists(EVENT, max_size=3)),
        "response": maybe(
            TEXT | st.lists(EVENT, max_size=3).map(lambda events: orjson.dumps(events).decode())
        ),
        "schema": maybe(st.sampled_from(["duee", "unknown"])),
    },
)
TURN_PAYLOAD = st.fixed_dictionaries(
    {
        "session_id": maybe(TEXT),
        "turn_index": maybe(st.integers(min_value=-3, max_value=2**40)),
        "persona_id": maybe(PERSONAS),
        "text": maybe(TEXT),
    },
    optional={"user": maybe(TEXT), "final": maybe(st.booleans())},
)
SESSION_PAYLOAD = st.fixed_dictionaries(
    {
        "session_id": maybe(TEXT),
        "persona_id": maybe(PERSONAS),
        "turns": maybe(
            st.lists(
                st.fixed_dictionaries({"assistant": maybe(TEXT)}, optional={"user": maybe(TEXT)}),
                max_size=4,
            )
        ),
    }
)
TIMESTAMPS = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.sampled_from(["9999-12-31T23:59:59Z", "0001-01-01T00:00:00Z", "2026-01-01T00:00:00Z"]),
    TEXT,
)


def envelope(suite: str, payload: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.fixed_dictionaries(
        {"suite": st.just(suite), "payload": maybe(payload)},
        optional={
            "id": maybe(st.text(min_size=1, max_size=100)),
            "ts": maybe(TIMESTAMPS),
            "model": maybe(st.text(max_size=100)),
            "labels": maybe(st.dictionaries(st.text(max_size=80), TEXT, max_size=3)),
        },
    )


ENVELOPES = st.one_of(
    envelope("safe", SAFE_PAYLOAD),
    envelope("extraction", EXTRACTION_PAYLOAD),
    envelope("alignment", TURN_PAYLOAD),
    envelope("alignment", SESSION_PAYLOAD),
)
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(ENVELOPES)
def test_any_envelope_is_a_result_or_a_dead_letter_with_a_reason(
    suites: ScoringSuites, data: dict[str, Any]
) -> None:
    outcome(suites, orjson.dumps(data))


@FUZZ
@given(st.binary(max_size=300) | JSON.map(orjson.dumps))
def test_any_bytes_are_a_result_or_a_dead_letter_with_a_reason(
    suites: ScoringSuites, raw: bytes
) -> None:
    assert outcome(suites, raw) != "result" or raw.startswith(b"{")


def test_hostile_shapes_have_their_reasons(suites: ScoringSuites) -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    good = (EXAMPLES / "safe" / "envelopes.jsonl").read_bytes().splitlines()[0]
    assert outcome(suites, good) == "result"
    assert outcome(suites, deep) == "invalid_json"
    assert outcome(suites, b'{"id": "n", "suite": "safe", "payload": {"x": NaN}}') == "invalid_json"
    assert outcome(suites, b'{"id": "\\ud800", "suite": "safe", "payload": {}}') in {
        "invalid_json",
        "result",
    }
    assert outcome(suites, b'{"id": "\xed\xa0\x80", "suite": "safe", "payload": {}}') == "not_utf8"
    record = orjson.loads(good)
    assert outcome(suites, orjson.dumps({**record, "id": "i" * 65})) == "field_too_large"
    turns = [{"assistant": "hi"}] * (LIMITS.session_turns + 1)
    whole = {"id": "w", "suite": "alignment", "payload": {"session_id": "w",
             "persona_id": "tunetide", "turns": turns}}  # fmt: skip
    assert outcome(suites, orjson.dumps(whole)) == "field_too_large"


# ---------------------------------------------------------------- on a real broker


def _wrong_types(record: dict[str, Any], paths: list[tuple[Any, ...]]) -> list[bytes]:
    """`record` with each payload field at `paths` replaced by values of wrong types."""
    out = []
    for path in paths:
        for wrong in (12345, ["a list"], {"an": "object"}, True):
            copy = orjson.loads(orjson.dumps(record))
            target = copy["payload"]
            for part in path[:-1]:
                target = target[part]
            target[path[-1]] = wrong
            copy["id"] = f"wrong-{len(out)}"
            out.append(orjson.dumps(copy))
    return out


def hostile_records() -> list[bytes]:
    """At least 150 records a producer should never send, of every kind the issue lists."""
    safe = orjson.loads((EXAMPLES / "safe" / "envelopes.jsonl").read_bytes().splitlines()[0])
    extraction = orjson.loads(
        (EXAMPLES / "extraction" / "envelopes.jsonl").read_bytes().splitlines()[0]
    )
    turn = orjson.loads((EXAMPLES / "alignment" / "envelopes.jsonl").read_bytes().splitlines()[0])
    session = {
        "id": "whole",
        "suite": "alignment",
        "payload": {
            "session_id": "whole",
            "persona_id": turn["payload"]["persona_id"],
            "turns": [{"user": "u", "assistant": "a"}],
        },
    }
    out: list[bytes] = []
    out += [b"", b"{", b"nope", b"{'single': 'quotes'}", b'{"id": 1,}', b"[]", b"null"]
    out += [b"\xff\xfe\xfd", b"\xc3\x28", b'{"id": "\xed\xa0\x80", "suite": "safe"}']
    out += _wrong_types(
        safe,
        [("test_id",), ("concern_id",), ("archetype",), ("batch_id",), ("expectations",),
         ("expectations", "signal_generation"),
         ("expectations", "signal_generation", "must_find_signals"),
         ("expectations", "followup_questions", "forbidden_terms"),
         ("expectations", "event_summary", "must_contain_phrases"), ("output",),
         ("output", "summary"), ("output", "signals"), ("output", "followup_questions")],
    )  # fmt: skip
    out += _wrong_types(
        extraction,
        [("text",), ("gold",), ("gold", 0, "event_type"), ("gold", 0, "arguments"),
         ("response",), ("schema",)],
    )  # fmt: skip
    out += _wrong_types(
        turn,
        [("session_id",), ("turn_index",), ("persona_id",), ("text",), ("user",), ("final",)],
    )
    out += _wrong_types(
        session, [("session_id",), ("persona_id",), ("turns",), ("turns", 0, "assistant")]
    )
    out += [b"[" * 100_000 + b"]" * 100_000, b'{"a":' * 100_000 + b"1" + b"}" * 100_000]
    out += [b'{"id": "nan", "suite": "safe", "payload": {"x": NaN}}']
    out += [orjson.dumps({**safe, "id": "inf"})[:-1] + b', "score": Infinity}']
    out += [b'{"id": "\\ud800", "suite": "safe", "payload": {}}']
    out += [orjson.dumps({**safe, "id": "x" * 900_000})]
    out += [orjson.dumps({**safe, "id": "big-model", "model": "m" * 900_000})]
    out += [orjson.dumps({**safe, "id": "big-label", "labels": {"k" * 900: "v"}})]
    out += [orjson.dumps({**safe, "id": "big-value", "labels": {"k": "v" * 900_000}})]
    out += [orjson.dumps({**safe, "id": "year-9999", "ts": "9999-12-31T23:59:59Z"})]
    out += [orjson.dumps({**safe, "id": "year-0", "ts": -62_135_596_800_001})]
    out += [orjson.dumps({**safe, "id": "huge", "padding": "p" * 5_000_000})]
    many = [{"user": "u", "assistant": f"reply {i}"} for i in range(300)]
    out += [orjson.dumps({**session, "id": "s300", "payload": {**session["payload"],
            "session_id": "s300", "turns": many}})]  # fmt: skip
    return out


def metric_sum(text: str, name: str) -> float:
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name + "{") or line.startswith(name + " ")
    )


@pytest.mark.integration
async def test_hostile_records_mixed_with_good_ones_each_end_exactly_once(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    config = make_config()
    settings = settings_of(config)
    topics = settings.topics
    await provision(settings, broker.url)
    good = [
        *(EXAMPLES / "safe" / "envelopes.jsonl").read_bytes().splitlines()[:10],
        *(EXAMPLES / "extraction" / "envelopes.jsonl").read_bytes().splitlines()[:10],
    ]
    turn = orjson.loads((EXAMPLES / "alignment" / "envelopes.jsonl").read_bytes().splitlines()[0])
    long_session = [
        {**turn, "id": f"long:{i}", "payload": {**turn["payload"], "session_id": "long",
         "turn_index": i, "text": f"Turn {i}: the figures are steady.", "final": i == 299}}
        for i in range(300)
    ]  # fmt: skip
    hostile = hostile_records()
    good_records = live([orjson.loads(line) for line in good] + long_session, step_ms=1)
    mixed: list[bytes] = []
    for index, record in enumerate(good_records):
        mixed.append(orjson.dumps(record))
        if index < len(hostile):
            mixed.append(hostile[index])
    mixed += hostile[len(good_records) :]
    assert len(hostile) + 300 >= 150
    producer = AIOKafkaProducer(
        bootstrap_servers=broker.bootstrap, max_request_size=8_000_000, linger_ms=0
    )
    await producer.start()
    inputs: set[tuple[int, int]] = set()
    try:
        for value in mixed:
            try:
                meta = await (await producer.send(topics.input, value))
            except KafkaError:  # the broker refused it (5 MB): never an input
                continue
            inputs.add((meta.partition, meta.offset))
    finally:
        await producer.stop()
    assert len(inputs) >= len(mixed) - 1
    worker = WorkerProcess(
        write_config(tmp_path / "c.yaml", config), broker.url, tmp_path / "w.log"
    )
    worker.start()
    try:
        async with TopicReader(broker.bootstrap, topics.results, topics.dead_letters) as reader:

            def ended(r: TopicReader) -> set[tuple[int, int]]:
                sources = {
                    (v["source"]["partition"], v["source"]["offset"])
                    for v in r.values(topics.results)
                    if v["source"] is not None
                }
                return sources | {
                    (d["source"]["partition"], d["source"]["offset"])
                    for d in r.values(topics.dead_letters)
                }

            await reader.until(lambda r: inputs <= ended(r), 600, "an end for every input")
            await reader.until(
                lambda r: "session:long" in {v["id"] for v in r.values(topics.results)},
                120,
                "the long session's result",
            )
            await reader.poll(2.0)
            metrics = await asyncio.to_thread(fetch, worker.metrics_url())
            assert worker.process is not None and worker.process.poll() is None
    finally:
        worker.stop()
    assert worker.log().count("scorestream worker ready") == 1  # never restarted
    results = reader.values(topics.results)
    letters = reader.values(topics.dead_letters)
    for letter in letters:
        assert letter["error"]["type"] and letter["error"]["message"]
    per_input: dict[tuple[int, int], list[str]] = {}
    for value in results:
        if value["source"] is not None and value["kind"] != "session":
            per_input.setdefault((value["source"]["partition"], value["source"]["offset"]), [])
            per_input[(value["source"]["partition"], value["source"]["offset"])].append("r")
    for letter in letters:
        position = (letter["source"]["partition"], letter["source"]["offset"])
        per_input.setdefault(position, []).append("d")
    assert set(per_input) == inputs
    for position, ends in per_input.items():
        assert ends == ["d"] or set(ends) == {"r"}, (position, ends)
    ids = [value["id"] for value in results]
    assert len(ids) == len(set(ids))  # exactly once: no replay, no restart
    assert metric_sum(metrics, "scorestream_cases_total") == len(results)
    assert metric_sum(metrics, "scorestream_dead_letters_total") == len(letters)


def fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as reply:
        return str(reply.read().decode())
