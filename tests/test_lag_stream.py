"""Lag that tells the truth, on Tansu: alignment turns arrive faster than the embedder takes
them. The input is read at once (its consumer lag stays near 0), the backlog waits in the
internal `{app}-alignment-turns` topic, and only the sessions stage's event-time lag and
that topic's consumer lag show the worker falling behind."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from tests.streamkit import (
    EXAMPLES,
    as_lines,
    envelopes,
    live,
    make_config,
    produce,
    provision,
    settings_of,
)
from worker.ops.broker import EmbeddedBroker
from worker.ops.lag import watch_worker
from worker.ops.telemetry import Telemetry
from worker.scoring_suites import ScoringSuites
from worker.stream import ScorestreamApp
from worker.suites.alignment.embedding_model import HashingEmbedder

pytestmark = pytest.mark.integration

SECONDS_PER_TEXT = 0.03


class SlowEmbedder(HashingEmbedder):
    """An embedder that takes `delay` seconds per text (0 while the personas load)."""

    delay = 0.0

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        time.sleep(self.delay * len(texts))
        return super().encode(texts)


def turns(count: int) -> list[dict[str, Any]]:
    """`count` alignment turns, cloned from the examples into sessions of their own."""
    examples = envelopes(EXAMPLES / "alignment" / "envelopes.jsonl")
    records = []
    for index in range(count):
        turn = examples[index % len(examples)]
        payload = {**turn["payload"], "session_id": f"s{index // len(examples)}-{turn['id']}"}
        payload.pop("final", None)
        records.append({**turn, "id": f"t{index}", "payload": payload})
    return records


def sample(telemetry: Telemetry) -> dict[str, float]:
    values: dict[str, float] = {}
    for metric in telemetry.registry.collect():
        for series in metric.samples:
            if series.name == "scorestream_consumer_lag":
                key = f"lag:{series.labels['topic']}"
                values[key] = values.get(key, 0.0) + series.value
            elif series.name == "scorestream_event_time_lag_seconds":
                values[f"behind:{series.labels['stage']}"] = series.value
    return values


async def test_a_backlog_behind_the_embedder_shows_in_the_sessions_stage_lag(
    broker: EmbeddedBroker,
) -> None:
    config = make_config(
        alignment={
            "personas_dir": str(EXAMPLES / "personas"),
            "session_idle_timeout": "1h",
            # Every turn embedded: a backlog behind the encoder, as a worker that never
            # samples turns out (or one whose encoder falls behind within max_lag) has.
            "embedding": {"max_lag": None},
        }
    )
    settings = settings_of(config)
    await provision(settings, broker.url)
    embedder = SlowEmbedder()
    suites = ScoringSuites.load(settings, embedder)
    embedder.delay = SECONDS_PER_TEXT
    scorer = ScorestreamApp(settings, broker.url, suites=suites)
    watch_worker(scorer, settings)
    turns_topic = f"{settings.app_id}-alignment-turns"
    seen: list[dict[str, float]] = []
    await scorer.app.start()
    try:
        await asyncio.wait_for(scorer.ready.wait(), 60)
        # A running worker: every stage has a watermark before the traffic comes.
        deadline = time.monotonic() + 60
        while not {"behind:sessions", "behind:windows"} <= set(sample(scorer.telemetry)):
            assert time.monotonic() < deadline, sample(scorer.telemetry)
            await asyncio.sleep(0.5)
        records = live(turns(600), step_ms=5)  # 3 s of traffic, about 18 s of embedding
        await produce(broker.bootstrap, settings.topics.input, as_lines(records))
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            await asyncio.sleep(0.5)
            seen.append(sample(scorer.telemetry))
            drained = len(seen) > 20 and seen[-1].get(f"lag:{turns_topic}") == 0
            if drained and seen[-1].get("behind:sessions", 99) < 5:
                break
    finally:
        await scorer.app.stop()
        scorer.executor.shutdown(wait=False)
    behind = [
        point
        for point in seen
        if point.get(f"lag:{turns_topic}", 0) >= 100
        and point.get(f"lag:{settings.topics.input}", 0) <= 10
        and point.get("behind:sessions", 0) >= point.get("behind:score", 0) + 5
    ]
    # The backlog, where the input's lag alone would not show it.
    assert behind, "\n".join(map(str, seen))
    print("most behind:", max(behind, key=lambda point: point["behind:sessions"]))
    assert {f"lag:{settings.app_id}-aggregate-input", "behind:windows"} <= set(seen[-1])
    assert seen[-1]["behind:sessions"] < 5, seen[-1]  # caught up again
