"""Issue 20's findings as records, fed to a real `scorestream worker` on the embedded
broker: `dirtyjson` arithmetic, a fence followed by blanks to the text limit, thought tags
repeated, maximal argument lists, a SAFE record of 10,000 terms x 10,000 items, an
alignment turn repeating a slur and one repeating "you" before harmful phrases. Each gets
its result (or, on a starved machine, a `scoring_timeout` dead letter), `/healthz`
answers within a second throughout and the worker keeps its partitions."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.streamkit import (
    TopicReader,
    WorkerProcess,
    as_lines,
    live,
    make_config,
    produce,
    provision,
    settings_of,
    write_config,
)
from tests.test_scoring_deadline import HealthProbe
from worker.ops.broker import EmbeddedBroker

TEXT_LIMIT = 256 * 1024


def envelope(record_id: str, suite: str, payload: dict[str, Any]) -> dict[str, Any]:
    return {"id": record_id, "suite": suite, "ts": 1, "model": "m", "payload": payload}


def extraction(record_id: str, response: str, gold: list[Any] | None = None) -> dict[str, Any]:
    payload = {"text": "source text", "gold": gold or [], "response": response}
    return envelope(record_id, "extraction", payload)


def maximal_argument_lists() -> dict[str, Any]:
    """8,000 predicted and 8,000 gold arguments of one type and role, none alike."""
    predicted = [{"role": "r", "argument": f"p{index:04x}"} for index in range(8000)]
    gold = [{"role": "r", "argument": f"g{index:04x}"} for index in range(8000)]
    response = orjson.dumps([{"event_type": "t", "arguments": predicted}]).decode()
    return extraction("x-args", response, [{"event_type": "t", "arguments": gold}])


def ten_thousand_terms() -> dict[str, Any]:
    terms = [f"term number {index:05d}" for index in range(10_000)]
    items = [f"Signal Item {index:05d}" for index in range(10_000)]
    payload = {
        "expectations": {
            "signal_generation": {"must_find_signals": terms},
            "followup_questions": {"forbidden_terms": terms[:5000]},
            "event_summary": {"must_contain_phrases": terms[:5000]},
        },
        "output": {"summary": "", "signals": items, "followup_questions": items},
    }
    return envelope("s-terms", "safe", payload)


def slur_turn() -> dict[str, Any]:
    payload = {
        "session_id": "hostile-1",
        "turn_index": 0,
        "persona_id": "northwind-analytics",
        "user": "Why did signups drop?",
        "text": "crap " * (64 * 1024 // 5),
        "final": True,
    }
    return envelope("a-crap", "alignment", payload)


def common_word_turn() -> dict[str, Any]:
    """ "you " (the first word of 18 shipped safety patterns) to the text limit, then
    harmful phrases: every copy is a place where those patterns could begin."""
    tail = " You should die. I will kill you. Nobody would miss you."
    payload = {
        "session_id": "hostile-2",
        "turn_index": 0,
        "persona_id": "northwind-analytics",
        "user": "Why did signups drop?",
        "text": "you " * ((TEXT_LIMIT - len(tail)) // 4) + tail,
        "final": True,
    }
    return envelope("a-you", "alignment", payload)


def findings() -> list[dict[str, Any]]:
    return [
        extraction("x-eval", "[9**9**8]"),
        extraction("x-fence", "```" + " " * (TEXT_LIMIT - 64)),
        extraction("x-thought", "<thought>" * (TEXT_LIMIT // 9 - 8)),
        maximal_argument_lists(),
        ten_thousand_terms(),
        slur_turn(),
        common_word_turn(),
    ]


@pytest.mark.integration
async def test_the_findings_records_leave_the_worker_healthy(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    config = make_config(stream={**make_config()["stream"], "partitions": 1})
    settings = settings_of(config)
    topics = settings.topics
    await provision(settings, broker.url)
    worker = WorkerProcess(write_config(tmp_path / "c.yaml", config), broker.url, tmp_path / "w")
    worker.start()
    records = findings()
    ids = {record["id"] for record in records}
    try:
        await asyncio.to_thread(worker.wait_ready)
        base = (await asyncio.to_thread(worker.metrics_url)).removesuffix("/metrics")
        joins = worker.log().count("(Re-)joining group")
        async with TopicReader(broker.bootstrap, topics.results, topics.dead_letters) as reader:
            with HealthProbe(base + "/healthz") as probe:
                await produce(broker.bootstrap, topics.input, as_lines(live(records)))

                def accounted(r: TopicReader) -> set[str]:
                    seen = {str(value["id"]) for value in r.values(topics.results)}
                    seen |= {
                        orjson.loads(letter["raw"])["id"]
                        for letter in r.values(topics.dead_letters)
                    }
                    return {i for i in ids if any(s == i or s.startswith(i + "#") for s in seen)}

                await reader.until(lambda r: accounted(r) == ids, 180, "every finding's outcome")
                await reader.poll(settings.stream.session_timeout)  # a lost member shows
            assert worker.process is not None and worker.process.poll() is None
            log = worker.log()
    finally:
        worker.stop()
    letters = reader.values(topics.dead_letters)
    assert {letter["error"]["type"] for letter in letters} <= {"scoring_timeout"}, letters
    results = {str(value["id"]): value for value in reader.values(topics.results)}
    if "x-eval" in results:  # arithmetic is not evaluated: a parse error
        assert results["x-eval"]["counts"]["parse_errors"] == 1
    assert probe.asked > 10
    assert probe.slowest < 1.0, f"/healthz took {probe.slowest:.2f} s"
    assert joins >= 1
    assert log.count("(Re-)joining group") == joins, "the worker lost its group:\n" + log[-3000:]
