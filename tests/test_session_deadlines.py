"""`SessionDeadlines` hands out exactly the sessions a full read of the session table
would find due, for any history of writes, watermarks and rebalances."""

from __future__ import annotations

from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from worker.windowing.event_time import SessionWindows
from worker.windowing.session_deadlines import REBUILD_SLACK, SessionDeadlines

IDLE = 3.0
RULE = SessionWindows(IDLE)


def due_by_reading_everything(
    table: dict[str, dict[str, Any]], partition: int, watermark: float
) -> set[str]:
    """What the session stage found due before: every entry of the partition, checked."""
    due = set()
    for session_id, entry in table.items():
        if entry.get("partition") != partition:
            continue
        if entry.get("closed"):
            if RULE.tombstone_expired(float(entry["at"]), watermark):
                due.add(session_id)
        elif RULE.idle_close(float(entry["ts"]), watermark) is not None:
            due.add(session_id)
    return due


# A step: a turn of a session (its latest event time moves to at least `time`), a
# partition's watermark moving by `step`, or a rebalance.
turns = st.tuples(st.just("turn"), st.integers(0, 7), st.integers(0, 1), st.floats(0, 40))
watermarks = st.tuples(st.just("watermark"), st.integers(0, 1), st.floats(0, 6))
rebalances = st.tuples(st.just("rebalance"))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(turns, watermarks, rebalances), max_size=120))
# a session written twice unchanged is in its heap twice, and closes once
@example([("turn", 0, 0, 0.0), ("watermark", 0, 0.0), ("turn", 0, 0, 0.0), ("watermark", 0, 3.0)])
def test_the_sessions_handed_out_are_those_a_full_read_finds_due(steps: list[Any]) -> None:
    table: dict[str, dict[str, Any]] = {}
    deadlines = SessionDeadlines(RULE)
    watermark = {0: 0.0, 1: 0.0}

    def write(session_id: str, entry: dict[str, Any]) -> None:
        table[session_id] = entry
        deadlines.note(session_id, entry)

    for step in steps:
        if step[0] == "turn":
            _, number, partition, time = step
            session_id = f"s{number}-p{partition}"  # a session stays on its partition
            stored = table.get(session_id)
            if stored and stored.get("closed"):
                continue  # a late repeat of a closed session's turn changes nothing
            latest = max(time, float(stored["ts"])) if stored else time
            write(session_id, {"partition": partition, "ts": latest, "state": number})
        elif step[0] == "watermark":
            _, partition, moved = step
            watermark[partition] += moved
            expected = due_by_reading_everything(table, partition, watermark[partition])
            handed = deadlines.due(partition, watermark[partition], table)
            ids = [session_id for session_id, _ in handed]
            assert len(ids) == len(set(ids)), "each session once"
            assert set(ids) == expected
            for session_id, entry in handed:  # as the stage does with them
                assert entry is table[session_id]
                if entry.get("closed"):
                    del table[session_id]
                else:
                    closed_at = RULE.closes_at(float(entry["ts"]))
                    write(session_id, {"closed": True, "at": closed_at, "partition": partition})
        else:
            deadlines.forget()


def test_open_sessions_come_oldest_first_then_tombstones() -> None:
    table: dict[str, dict[str, Any]] = {}
    deadlines = SessionDeadlines(RULE)
    assert deadlines.due(0, 0.0, table) == []  # built (empty) from the table
    for session_id, entry in [
        ("late", {"partition": 0, "ts": 5.0}),
        ("gone", {"partition": 0, "closed": True, "at": 1.0}),
        ("early", {"partition": 0, "ts": 2.0}),
        ("other", {"partition": 1, "ts": 0.0}),
        ("fresh", {"partition": 0, "ts": 9.0}),
    ]:
        table[session_id] = entry
        deadlines.note(session_id, entry)
    assert [session_id for session_id, _ in deadlines.due(0, 8.0, table)] == [
        "early",
        "late",
        "gone",
    ]


def test_a_watermark_that_stands_still_does_not_let_the_heaps_grow_without_bound() -> None:
    table: dict[str, dict[str, Any]] = {"s": {"partition": 0, "ts": 0.0}}
    deadlines = SessionDeadlines(RULE)
    deadlines.due(0, 0.0, table)
    for turn in range(3 * REBUILD_SLACK):  # one session written again and again
        table["s"] = {"partition": 0, "ts": float(turn)}
        deadlines.note("s", table["s"])
    assert deadlines.due(0, 3 * REBUILD_SLACK + IDLE, table) == [("s", table["s"])]
    heaps = deadlines._partitions[0]
    assert len(heaps) == 0
    assert heaps.limit == 2 + REBUILD_SLACK  # built again from the table's one entry
