"""On the real broker with the real model, slowed: while the session stage is far behind,
the safety gate pages within seconds on the score stage's sample (a provisional event
with its coverage), and a worker restarted before the full window closes neither pages
again nor loses a turn: the full window, counted in full by the next worker, confirms
the page (`worker.gates.early`)."""

from __future__ import annotations

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
)
from tests.test_early_gates import GATE
from tests.test_overload_stream import SESSIONS, TURNS, UNSAFE, SlowedEncoder, sessions
from worker.ops.broker import EmbeddedBroker

pytestmark = pytest.mark.integration

SECONDS_PER_TEXT = 0.1  # tests.test_overload_stream's slowed encoder: 10 turns/s at most
SAMPLE = 0.25


def firings(values: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    by_segment: dict[str, list[dict[str, Any]]] = {}
    for value in values:
        by_segment.setdefault(str(value["segment"]), []).append(value)
    return by_segment


async def test_a_provisional_page_on_the_sample_and_a_restart_that_does_not_page_twice(
    broker: EmbeddedBroker,
) -> None:
    config = make_config(gates=[GATE], embedding_batch_size=16)
    config["alignment"] = {
        "personas_dir": str(EXAMPLES / "personas"),
        "embedding": {"max_lag": None},  # every turn embedded: the session stage crawls
    }
    config["early_gates"] = {"sample": SAMPLE, "after": "2s"}
    settings = settings_of(config)
    topics = settings.topics
    records = retime(sessions(), window_s=60)  # one minute window, in the recent past
    assert UNSAFE in {record["payload"]["text"] for record in records}
    await provision(settings, broker.url)
    first = InProcessWorker(settings, broker.url)
    encoder = SlowedEncoder(first.scorer.suites.embed)
    first.scorer.suites.embed = encoder  # type: ignore[method-assign]
    first.scorer.scoring_pool.start()
    async with TopicReader(
        broker.bootstrap, topics.gates, topics.results, topics.aggregates
    ) as reader:
        async with first:
            started = time.monotonic()
            await produce(broker.bootstrap, topics.input, as_lines(records))
            await reader.until(
                lambda r: len(r.values(topics.gates)) >= 2,  # the two segments
                timeout=60,
                what="the safety gate to page on the sample",
            )
            paged_after = time.monotonic() - started
            embedded_when_paged = encoder.texts
        # the first worker stopped (a deploy mid-incident) long before it could embed all
        assert paged_after < len(records) * SECONDS_PER_TEXT
        assert embedded_when_paged < len(records) / 2
        for events in firings(reader.values(topics.gates)).values():
            (page,) = events
            assert page["state"] == "firing" and page["provisional"] is True
            assert 0 < page["coverage"] < 1 and page["count"] >= 5
            assert page["value"] < 0.9
            assert page["worst"] and page["worst"][0]["value"] == 0.0
        second = InProcessWorker(settings, broker.url)
        second.scorer.scoring_pool.start()
        async with second:
            await reader.until(
                lambda r: sum(v["kind"] == "session" for v in r.values(topics.results)) >= SESSIONS,
                timeout=120,
                what="every session's result, from the next worker",
            )
            await reader.until(
                lambda r: any(
                    v["final"] and v["suite"] == "alignment" for v in r.values(topics.aggregates)
                ),
                timeout=60,
                what="the full alignment window",
            )
            settle = time.monotonic() + 3  # a second page would follow the final at once
            while time.monotonic() < settle:
                await reader.poll()
            turns = {v["id"] for v in reader.values(topics.results) if v["kind"] == "turn"}
            finals = [
                v
                for v in reader.values(topics.aggregates)
                if v["final"] and v["suite"] == "alignment" and v["segment"] == {}
            ]
    assert turns == {record["id"] for record in records}  # every turn's full result
    (final,) = finals
    assert final["count"] == SESSIONS and final["metrics"]["safety"]["mean"] == 0.5
    # the full window confirmed the page: no second firing, no resolution
    for events in firings(reader.values(topics.gates)).values():
        assert [(e["state"], e["provisional"]) for e in events] == [("firing", True)]
    assert len(records) == SESSIONS * TURNS
