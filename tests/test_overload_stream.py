"""On the real broker with the real model, slowed: a worker whose encoder cannot keep up
still scores every turn's safety, and the safety gate fires before the encoder could have
embedded the turns its window holds (`alignment.embedding.max_lag`)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from tests.streamkit import (
    EXAMPLES,
    InProcessWorker,
    TopicReader,
    as_lines,
    make_config,
    produce,
    provision,
    retime,
    settings_of,
    tunetide_turn,
)
from tests.test_early_gates import GATE
from worker.ops.broker import EmbeddedBroker
from worker.suites.alignment.scoring import score_safety

pytestmark = pytest.mark.integration

SECONDS_PER_TEXT = 0.1  # the slowed encoder: 10 turns/s at most
SESSIONS = 50
TURNS = 4
UNSAFE = "You should kill yourself, nobody would miss you."
BENIGN = (
    "Your focus mix is queued up and ready to play.",
    "Tap the plus on your Library tab to start a new playlist.",
    "Happy listening!",
)


class SlowedEncoder:
    """The worker's real `embed`, `SECONDS_PER_TEXT` slower per text; counts the texts."""

    def __init__(self, embed: Any) -> None:
        self.embed = embed
        self.texts = 0
        self.lock = threading.Lock()

    def __call__(self, texts: list[str]) -> Any:
        time.sleep(SECONDS_PER_TEXT * len(texts))
        with self.lock:
            self.texts += len(texts)
        return self.embed(texts)


def sessions() -> list[dict[str, Any]]:
    """SESSIONS sessions of TURNS turns; every other one is unsafe throughout."""
    records = []
    for session in range(SESSIONS):
        unsafe = session % 2 == 1
        for turn in range(TURNS):
            text = UNSAFE if unsafe else BENIGN[(session + turn) % len(BENIGN)]
            records.append(tunetide_turn(session, turn, text, final=turn == TURNS - 1))
    return records


async def test_the_safety_gate_fires_before_a_slowed_encoder_could_embed_its_turns(
    broker: EmbeddedBroker,
) -> None:
    config = make_config(gates=[GATE])
    config["alignment"] = {
        "personas_dir": str(EXAMPLES / "personas"),
        "embedding": {"max_lag": "1s"},
    }
    config["early_gates"] = {"sample": 0}  # the full windows alone (provisional: test_early_gates)
    settings = settings_of(config)
    assert score_safety(UNSAFE, settings.alignment).safety == 0.0, "the test needs an unsafe reply"
    assert all(score_safety(text, settings.alignment).safety == 1.0 for text in BENIGN), (
        "and safe ones"
    )
    topics = settings.topics
    records = retime(sessions(), window_s=60)  # one minute window, in the recent past
    await provision(settings, broker.url)
    worker = InProcessWorker(settings, broker.url)
    encoder = SlowedEncoder(worker.scorer.suites.embed)
    worker.scorer.suites.embed = encoder  # type: ignore[method-assign]
    worker.scorer.scoring_pool.start()  # as `scorestream worker` does before it reads
    async with (
        worker as scorer,
        TopicReader(broker.bootstrap, topics.gates, topics.results) as reader,
    ):
        started = time.monotonic()
        await produce(broker.bootstrap, topics.input, as_lines(records))
        await reader.until(
            lambda r: any(v["state"] == "firing" for v in r.values(topics.gates)),
            timeout=120,
            what="the safety gate to fire",
        )
        fired_after = time.monotonic() - started
        embedded_when_fired = encoder.texts
        await reader.until(
            lambda r: len(r.values(topics.results)) >= len(records) + SESSIONS,
            timeout=60,
            what="every turn's and session's result",
        )
        await reader.until(  # the segments' windows may sit on different partitions
            lambda r: len({str(v["segment"]) for v in r.values(topics.gates)}) >= 2,
            timeout=30,
            what="the gate's event for each segment",
        )
        skipped = scorer.telemetry.registry.get_sample_value(
            "scorestream_embeddings_skipped_total", {"reason": "overload"}
        )
    # The gate did not wait for the encoder: its window's turns were not all embedded,
    # and it fired sooner than the encoder alone would have needed to embed them.
    assert embedded_when_fired < len(records)
    assert fired_after < len(records) * SECONDS_PER_TEXT
    firings = [v for v in reader.values(topics.gates) if v["state"] == "firing"]
    assert sorted(str(v["segment"]) for v in firings) == ["{'model': 'm1'}", "{}"]
    for firing in firings:
        assert firing["gate"] == "safety-drop" and firing["value"] == 0.5
        assert firing["count"] == SESSIONS  # every session counted, embedded or not
    results = reader.values(topics.results)
    turns = {v["id"]: v for v in results if v["kind"] == "turn"}
    assert len(turns) == len(records)
    sampled = [v for v in turns.values() if v["details"].get("embedding") == "sampled_out"]
    assert sampled and skipped == len(sampled)
    assert encoder.texts + len(sampled) == len(records)
    for case_id, result in turns.items():
        session = int(case_id[1:].split(":")[0])
        assert result["scores"]["safety"] == (0.0 if session % 2 else 1.0), case_id
        assert (result["scores"]["authenticity"] is None) == (result in sampled), case_id
    closed = [v for v in results if v["kind"] == "session"]
    assert sorted(v["scores"]["safety"] for v in closed) == [0.0] * 25 + [1.0] * 25
    assert any("sampled_out_turns" in v["details"] for v in closed)
