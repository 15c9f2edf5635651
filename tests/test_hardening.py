"""Issue 10 regressions on a real Tansu broker with `scorestream worker` subprocesses:
oversized fields, outputs and sessions never crash the worker or lose a case, and a
record that stops the worker every time is dead-lettered instead of crash-looping."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer

from tests.streamkit import (
    EXAMPLES,
    TopicReader,
    WorkerProcess,
    as_lines,
    envelopes,
    live,
    make_config,
    produce,
    provision,
    settings_of,
    write_config,
)
from worker.ops.broker import EmbeddedBroker

pytestmark = pytest.mark.integration

SAFE = envelopes(EXAMPLES / "safe" / "envelopes.jsonl")[0]
TURN = envelopes(EXAMPLES / "alignment" / "envelopes.jsonl")[0]
PERSONA = TURN["payload"]["persona_id"]


def safe_case(case_id: str, **changes: Any) -> dict[str, Any]:
    return {**SAFE, "id": case_id, **changes}


def turn(session: str, index: int, text: str, final: bool = False) -> dict[str, Any]:
    payload = {
        "session_id": session,
        "turn_index": index,
        "persona_id": PERSONA,
        "user": text,
        "text": text,
        "final": final,
    }
    return {**TURN, "id": f"{session}:{index}", "payload": payload}


async def produce_unkeyed(bootstrap: str, topic: str, lines: list[bytes]) -> None:
    """Produce without keys (a 900 KB id as the key would double the record)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=0)
    await producer.start()
    try:
        for line in lines:
            await producer.send(topic, line)
        await producer.flush()
    finally:
        await producer.stop()


def reasons_by_offset(reader: TopicReader, topic: str) -> dict[int, dict[str, Any]]:
    return {letter["source"]["offset"]: letter for letter in reader.values(topic)}


async def test_oversized_fields_and_long_sessions_end_as_results_or_dead_letters(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    config = make_config()
    # Every turn embedded: this test is about size bounds, and a session whose turns all
    # waited behind the encoder for more than `max_lag` (a slow machine) has no overall by
    # design (tests/test_embedding_overload.py), which made its last assertion a race.
    config["alignment"]["embedding"] = {"max_lag": None}
    settings = settings_of(config)
    topics = settings.topics
    await provision(settings, broker.url)
    cjk = "安全的数据分析需要清楚的说明。" * 200  # 3,000 characters, 9 KB a turn
    ascii_text = "The analysis indicates a steady trend in the weekly figures. " * 65
    big = "x" * 900_000
    whole = {
        **TURN,
        "id": "whole-30k",
        "payload": {
            "session_id": "whole-30k",
            "persona_id": PERSONA,
            "turns": [{"user": "", "assistant": "y" * 30_000} for _ in range(28)],
        },
    }
    records = [
        safe_case(big),  # offset 0: a 900 KB id
        safe_case("big-model", model=big),  # 1
        safe_case("big-label", labels={"tenant": big}),  # 2
        safe_case("fine-1"),  # 3
        whole,  # 4: a whole session of 30 KB turns
        *[turn("cjk", i, cjk, final=i == 99) for i in range(100)],
        *[turn("ascii", i, ascii_text, final=i == 199) for i in range(200)],
        safe_case("fine-2"),
    ]
    lines = as_lines(live(records, step_ms=1))
    worker = WorkerProcess(
        write_config(tmp_path / "c.yaml", config), broker.url, tmp_path / "w.log"
    )
    await produce_unkeyed(broker.bootstrap, topics.input, lines[:3])
    await produce(broker.bootstrap, topics.input, lines[3:])
    worker.start()
    try:
        async with TopicReader(broker.bootstrap, topics.results, topics.dead_letters) as reader:

            def done(r: TopicReader) -> bool:
                ids = {value["id"] for value in r.values(topics.results)}
                return {"session:cjk", "session:ascii", "session:whole-30k", "fine-2"} <= ids

            await reader.until(done, 300, "every session result")
            await reader.poll(2.0)
            assert worker.process is not None and worker.process.poll() is None, worker.log()
            results = reader.values(topics.results)
            letters = reader.values(topics.dead_letters)
    finally:
        worker.stop()
    assert worker.log().count("scorestream worker ready") == 1  # never restarted
    by_reason = {(d["error"]["type"], d["error"]["message"].split(":")[0]) for d in letters}
    assert ("field_too_large", "id") in by_reason
    assert ("field_too_large", "model") in by_reason
    assert ("field_too_large", "labels.tenant") in by_reason
    for letter in letters:
        assert "limits." in letter["error"]["message"]
        assert letter["raw_truncated"] and letter["raw_size"] > 900_000
    assert len(letters) == 3
    ids = [value["id"] for value in results]
    assert len(ids) == len(set(ids))  # nothing re-published by a crash loop
    turn_ids = [i for i in ids if i.startswith(("cjk:", "ascii:"))]
    assert len(turn_ids) == 300
    assert len([i for i in ids if i.startswith("whole-30k#")]) == 28
    sessions = {value["id"]: value for value in results if value["kind"] == "session"}
    assert set(sessions) == {"session:cjk", "session:ascii", "session:whole-30k"}
    assert sessions["session:cjk"]["counts"]["turns"] == 100
    # 200 turns of vectors and scores reach the session-state cap or the turn bound;
    # either way the session is closed and scored, with every turn it kept.
    assert sessions["session:ascii"]["counts"]["turns"] >= 100
    assert sessions["session:ascii"]["scores"]["overall"] is not None


async def test_a_result_over_the_producer_limit_is_a_dead_letter(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    config = make_config(limits={"max_output_bytes": 4096}, dlq_max_raw_bytes=256, segment_by=[])
    settings = settings_of(config)
    topics = settings.topics
    await provision(settings, broker.url)
    signals = [f"signal number {i} that the output never mentions" for i in range(60)]
    heavy = safe_case("heavy")
    heavy["payload"] = {
        **SAFE["payload"],
        "expectations": {"signal_generation": {"must_find_signals": signals}},
    }
    records = live([safe_case("light"), heavy, safe_case("light-2")])
    worker = WorkerProcess(
        write_config(tmp_path / "c.yaml", config), broker.url, tmp_path / "w.log"
    )
    await produce(broker.bootstrap, topics.input, as_lines(records))
    worker.start()
    try:
        async with TopicReader(broker.bootstrap, topics.results, topics.dead_letters) as reader:

            def done(r: TopicReader) -> bool:
                ids = {value["id"] for value in r.values(topics.results)}
                heavy_letter = any(
                    d["source"]["topic"] == topics.input for d in r.values(topics.dead_letters)
                )
                return {"light", "light-2"} <= ids and heavy_letter

            await reader.until(done, 120, "two results and the heavy case's dead letter")
    finally:
        worker.stop()
    letters = [
        d for d in reader.values(topics.dead_letters) if d["source"]["topic"] == topics.input
    ]
    assert len(letters) == 1
    assert letters[0]["error"]["type"] == "output_too_large"
    assert "limits.max_output_bytes" in letters[0]["error"]["message"]
    assert letters[0]["raw_truncated"]  # the input, cut to dlq_max_raw_bytes
    assert "heavy" not in {value["id"] for value in reader.values(topics.results)}


POISON_HOOK = """
import os
from dataclasses import replace

from worker.input import result_facts as facts_module
from worker.suites import registry

_result_facts = facts_module.result_facts


def result_facts(value):  # the worker reads each scoring child's result with this
    result = _result_facts(value)
    if result.id == "poison":
        os._exit(70)  # the worker dies in the middle of the record
    return result


facts_module.result_facts = result_facts

_safe = registry.get("safe")


def buggy_case_scorer(section):
    score = _safe.case_scorer(section)

    def scored(payload):
        if payload.test_id == "BOOM":
            raise RuntimeError("scorer bug")
        return score(payload)

    return scored


registry._SPECS["safe"] = replace(_safe, case_scorer=buggy_case_scorer)
"""


async def test_a_record_that_stops_the_worker_twice_is_a_poison_pill(
    broker: EmbeddedBroker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(POISON_HOOK, encoding="utf-8")
    monkeypatch.setenv("PYTHONPATH", f"{hook}:{Path(__file__).resolve().parents[1]}")
    config = make_config(stream={**make_config()["stream"], "partitions": 1})
    settings = settings_of(config)
    topics = settings.topics
    await provision(settings, broker.url)
    poison = safe_case("poison")
    poison["payload"] = {**SAFE["payload"], "test_id": "POISON"}
    boom = safe_case("boom")
    boom["payload"] = {**SAFE["payload"], "test_id": "BOOM"}
    records = live([safe_case("before"), boom, poison, safe_case("after")])
    await produce(broker.bootstrap, topics.input, as_lines(records))
    config_path = write_config(tmp_path / "c.yaml", config)
    exits = []
    for attempt in range(2):  # the poison stops the worker on each of its first two tries
        worker = WorkerProcess(config_path, broker.url, tmp_path / f"w{attempt}.log").start()
        assert worker.process is not None
        try:
            exits.append(await asyncio.to_thread(worker.process.wait, 180))
        finally:
            worker.stop()
        await asyncio.sleep(settings.stream.session_timeout)  # the dead member leaves
    assert exits == [70, 70]
    worker = WorkerProcess(config_path, broker.url, tmp_path / "w2.log").start()
    try:
        async with TopicReader(broker.bootstrap, topics.results, topics.dead_letters) as reader:

            def done(r: TopicReader) -> bool:
                return "after" in {value["id"] for value in r.values(topics.results)}

            await reader.until(done, 180, "the record after the poison pill")
            await reader.poll(1.0)
            assert worker.process is not None and worker.process.poll() is None
    finally:
        worker.stop()
    letters = reasons_by_offset(reader, topics.dead_letters)
    assert letters[2]["error"]["type"] == "poison_pill"
    assert "2 times" in letters[2]["error"]["message"]
    assert letters[1]["error"]["type"] == "scoring_error"  # an exception: no restart
    assert {value["id"] for value in reader.values(topics.results)} >= {"before", "after"}
