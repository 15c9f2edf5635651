"""The session stage killed mid-backlog, on a real broker with a real `scorestream worker`
process: its micro-batches overlap (the next is scored while one is applied) and each is
acknowledged only once applied, so after a SIGKILL and a restart every turn has its
result and every session its result, counting each of its turns once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.streamkit import (
    TopicReader,
    WorkerProcess,
    as_lines,
    make_config,
    produce,
    provision,
    retime,
    settings_of,
    tunetide_turn,
    write_config,
)
from worker.ops.broker import EmbeddedBroker

pytestmark = pytest.mark.integration

SESSIONS = 1000
TURNS = 4


def turns() -> list[dict[str, Any]]:
    return [
        tunetide_turn(
            session,
            turn,
            f"Your mix number {session} is queued up, turn {turn} of it.",
            final=turn == TURNS - 1,
        )
        for turn in range(TURNS)  # each session's turns far apart: many batches span it
        for session in range(SESSIONS)
    ]


def by_kind(reader: TopicReader, topic: str, kind: str) -> list[dict[str, Any]]:
    return [value for value in reader.values(topic) if value["kind"] == kind]


async def test_a_worker_killed_while_applying_sessions_loses_and_double_counts_no_turn(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    config = make_config()
    # a session's turns are 5 s of event time apart: none may close idle meanwhile
    config["alignment"]["session_idle_timeout"] = "1h"
    settings = settings_of(config)
    topics = settings.topics
    records = retime(turns(), window_s=60)
    await provision(settings, broker.url)
    await produce(broker.bootstrap, topics.input, as_lines(records))
    worker = WorkerProcess(
        write_config(tmp_path / "config.yaml", config), broker.url, tmp_path / "worker.log"
    )
    async with TopicReader(broker.bootstrap, topics.results) as reader:
        try:
            worker.start()
            await reader.until(
                lambda r: len(by_kind(r, topics.results, "turn")) >= 300,
                timeout=120,
                what="the session stage under way",
            )
            worker.kill()
            turns_before = len({v["id"] for v in by_kind(reader, topics.results, "turn")})
            worker.start()
            await reader.until(
                lambda r: len({v["id"] for v in by_kind(r, topics.results, "session")}) >= SESSIONS,
                timeout=180,
                what="every session's result after the restart",
            )
        finally:
            worker.stop()
    assert turns_before < len(records), "the kill came too late to test anything"
    turn_ids = {value["id"] for value in by_kind(reader, topics.results, "turn")}
    assert turn_ids == {record["id"] for record in records}
    counted: dict[str, set[int]] = {}
    for value in by_kind(reader, topics.results, "session"):
        counted.setdefault(value["id"], set()).add(value["counts"]["turns"])
    # a session replayed after the kill may be published again, always with all its turns
    assert counted == {f"session:s{session}": {TURNS} for session in range(SESSIONS)}
    print(f"\nturn results before the kill: {turns_before} of {len(records)}")
