"""The session stage writes an open session to its table once per chunk of turns, not
once per turn (issue 45, item 3: the changelog record of an alignment turn was a
quarter of its produce traffic), and nothing of the session is lost by it: replayed
with dict tables through the score and session stages, a session whose turns arrive in
one micro-batch, or across two, is scored with all of them, and the state a later
micro-batch reads back from the table holds every turn before it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from datetime import datetime
from typing import Any

import orjson
import pytest

from tests.test_batch_progress import T0, Event, Message, Pipeline
from worker.scoring_pool import ScoringPool

PERSONA = "northwind-analytics"
REPLY = "Signups declined by 6.1% against the four-week baseline, mostly in paid search."


class CountingTable(dict[str, Any]):
    """A dict table that counts the writes of each key (each one a changelog record) and
    keeps, for each tombstone, the session results published when it was written."""

    def __init__(self, published: Callable[[], list[dict[str, Any]]]) -> None:
        super().__init__()
        self.writes: Counter[str] = Counter()
        self.published = published
        self.closed_after: dict[str, list[str]] = {}

    def __setitem__(self, key: str, value: Any) -> None:
        self.writes[key] += 1
        if value.get("closed"):
            self.closed_after[key] = [result["id"] for result in self.published()]
        super().__setitem__(key, value)


def alignment_pipeline() -> Pipeline:
    built = Pipeline(input_partitions=1)
    context = built.context
    context.scoring_pool.close()
    context.scoring_pool = ScoringPool(
        context.settings, start_method="fork", more_factories=context.suites.pool_factories
    )  # alignment turns are scored in the pool too
    built.sessions.sessions = CountingTable(lambda: session_results(built))
    return built


@pytest.fixture
def pipeline() -> Any:
    built = alignment_pipeline()
    yield built
    built.close()


def turn(pipeline: Pipeline, session: str, index: int, final: bool, at: float = T0) -> Event:
    offset = pipeline.offsets[0]
    pipeline.offsets[0] += 1
    record = {
        "id": f"{session}:{index}",
        "suite": "alignment",
        "ts": int((at + index) * 1000),
        "payload": {
            "session_id": session,
            "turn_index": index,
            "persona_id": PERSONA,
            "user": "Why did signups drop?",
            "text": f"{REPLY} Turn {index}.",
            "final": final,
        },
    }
    return Event(orjson.dumps(record), Message(pipeline.input, 0, offset))


def table_of(pipeline: Pipeline) -> CountingTable:
    table = pipeline.sessions.sessions
    assert isinstance(table, CountingTable)
    return table


def session_results(pipeline: Pipeline) -> list[dict[str, Any]]:
    results = [orjson.loads(sent.value) for sent in pipeline.publisher.log]
    return [result for result in results if result.get("kind") == "session"]


async def test_a_session_in_one_micro_batch_is_written_once_and_scored_whole(
    pipeline: Pipeline,
) -> None:
    await pipeline.batch(*(turn(pipeline, "s1", index, index == 3) for index in range(4)))

    (scored,) = session_results(pipeline)
    assert scored["details"]["turn_indices"] == [0, 1, 2, 3]
    table = table_of(pipeline)
    assert table.writes["s1"] == 1  # its tombstone; no open state was written per turn
    assert table["s1"]["closed"] is True
    # the tombstone follows the session's result: a crash between them replays the turns
    # into a session that is scored again, never into a closed one without its result
    assert table.closed_after["s1"] == ["session:s1"]
    # every turn result and the session's went out
    assert sum(1 for sent in pipeline.publisher.log if sent.topic.startswith("results")) == 5


async def test_an_open_session_is_written_once_per_chunk_and_read_back_whole(
    pipeline: Pipeline,
) -> None:
    await pipeline.batch(*(turn(pipeline, "s2", index, False) for index in range(3)))
    table = table_of(pipeline)
    assert table.writes["s2"] == 1
    assert len(table["s2"]["state"]["turns"]) == 3
    assert session_results(pipeline) == []

    await pipeline.batch(turn(pipeline, "s2", 3, True))

    (scored,) = session_results(pipeline)
    assert scored["details"]["turn_indices"] == [0, 1, 2, 3]
    assert table.writes["s2"] == 2


async def test_a_session_closed_idle_is_written_closed_after_its_result(
    pipeline: Pipeline,
) -> None:
    await pipeline.batch(*(turn(pipeline, "s3", index, False) for index in range(2)))
    assert session_results(pipeline) == []

    # a later session's turns move the watermark past s3's idle timeout (3 s)
    await pipeline.batch(turn(pipeline, "s4", 0, False, at=T0 + 60))
    await pipeline.batch(turn(pipeline, "s4", 1, False, at=T0 + 60))

    (scored,) = session_results(pipeline)
    assert scored["id"] == "session:s3"
    assert scored["details"]["turn_indices"] == [0, 1]
    table = table_of(pipeline)
    assert table["s3"]["closed"] is True
    assert table.closed_after["s3"] == ["session:s3"]


async def test_a_session_a_rebalance_hands_over_still_closes_idle(pipeline: Pipeline) -> None:
    """The stage finds idle sessions by the deadlines of the entries it wrote; those a
    rebalance brings (Faust's recovery writes the table itself) count after `forget`."""
    previous = alignment_pipeline()  # the partition's owner before the rebalance
    try:
        await previous.batch(*(turn(previous, "s5", index, False) for index in range(2)))
    finally:
        previous.close()
    await pipeline.batch(turn(pipeline, "s6", 0, False))  # running before it: deadlines built
    dict.update(table_of(pipeline), table_of(previous))  # recovered, not written by the stage
    pipeline.sessions.forget()  # what the app does when the tables are recovered

    await pipeline.batch(turn(pipeline, "s6", 1, False, at=T0 + 60))
    await pipeline.batch(turn(pipeline, "s6", 2, False, at=T0 + 60))

    (scored,) = session_results(pipeline)
    assert scored["id"] == "session:s5"
    assert scored["details"]["turn_indices"] == [0, 1]
    assert table_of(pipeline)["s5"]["closed"] is True


async def restoring_counted(pipeline: Pipeline, live_sessions: int) -> tuple[list[Any], int]:
    """A 6-turn session over three micro-batches, its table entry replaced by an equal one
    before the last (as a recovery writes it): its session result, and how often the
    stage restored its state from the table. `live_sessions`: how many live states the
    stage may keep between micro-batches."""
    stage = pipeline.sessions
    restored = 0
    restore = stage.hooks.restore

    def counted(stored: Any) -> Any:
        nonlocal restored
        restored += 1
        return restore(stored)

    stage.hooks.restore = counted  # type: ignore[method-assign]
    for first in (0, 2):
        await pipeline.batch(*(turn(pipeline, "s8", index, False) for index in (first, first + 1)))
        while len(stage._live) > live_sessions:
            stage._live.pop(next(iter(stage._live)))
    table = table_of(pipeline)
    dict.__setitem__(table, "s8", orjson.loads(orjson.dumps(table["s8"])))
    await pipeline.batch(*(turn(pipeline, "s8", index, index == 5) for index in (4, 5)))
    return session_results(pipeline), restored


async def test_a_sessions_next_turn_takes_its_live_state_not_the_tables_same_result(
    pipeline: Pipeline,
) -> None:
    """Restoring a session's state from its entry costs all its turns so far, at every
    turn: the stage keeps the state it wrote, and takes it while the table still holds
    that very entry; the session scores the same either way."""
    kept, restored = await restoring_counted(pipeline, live_sessions=1)
    assert restored == 1  # the replaced entry only
    again = alignment_pipeline()
    try:
        fresh, restored_always = await restoring_counted(again, live_sessions=0)
    finally:
        again.close()
    assert restored_always == 2  # the first turn of each later micro-batch
    volatile = {"scored_at", "latency_ms"}
    assert [{k: v for k, v in r.items() if k not in volatile} for r in kept] == [
        {k: v for k, v in r.items() if k not in volatile} for r in fresh
    ]
    assert kept[0]["details"]["turn_indices"] == [0, 1, 2, 3, 4, 5]


async def test_a_turn_result_the_child_writes_carries_the_records_fields(
    pipeline: Pipeline,
) -> None:
    """The scoring child writes each turn's result from the frame the stage gives it: the
    record's id, model, labels and unknown fields, where and when it was read."""
    event = turn(pipeline, "s5", 0, False)
    record = orjson.loads(event.value)
    record["model"] = "m-7"
    record["labels"] = {"team": "support"}
    record["payload"]["respones"] = "a misspelt field"
    event = Event(orjson.dumps(record), event.message)

    await pipeline.batch(event)

    (result,) = [
        orjson.loads(sent.value)
        for sent in pipeline.publisher.log
        if sent.topic.startswith("results") and orjson.loads(sent.value).get("kind") == "turn"
    ]
    assert result["id"] == "s5:0"
    assert (result["model"], result["labels"]) == ("m-7", {"team": "support"})
    assert result["details"]["unknown_fields"] == ["respones"]
    assert result["source"]["offset"] == event.message.offset
    assert datetime.fromisoformat(result["ts"]).timestamp() == T0  # the record's event time
    assert result["latency_ms"] >= 0
    assert result["scores"]["safety"] == 1.0
