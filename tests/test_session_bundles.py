"""The score stage forwards a micro-batch's session messages bundled per partition of the
session stream (`Publisher._forward_bundled`): up to `bundle_messages` a record, within
`limits.max_output_bytes`, in order, each to its session's partition, so the session
stage reads one Kafka record for many turns. The stage on a real broker, killed and
restarted mid-backlog, is `tests/test_session_kill.py`; a backlog read in bundles with
every turn's result once, `tests/test_input_backlog.py`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson
from hypothesis import given
from hypothesis import strategies as st

from tests.streamkit import make_config, settings_of
from tests.test_batch_progress import Topic
from worker.input.scored_records import bundled_messages, session_messages
from worker.ops.telemetry import Telemetry
from worker.stream.publish import Contributions, Publisher, StreamTopics, _runs


class Recording(Publisher):
    """A publisher that keeps what it sends, with each session's partition given."""

    def __init__(self, partition_of: dict[bytes, int], max_output_bytes: int = 1_000_000) -> None:
        settings = settings_of(make_config(limits={"max_output_bytes": max_output_bytes}))
        topics = StreamTopics(*(Topic(name) for name in ("in", "res", "agg", "g", "dlq")),
                              Topic("turns"), Topic("aggregate-input"))  # fmt: skip
        super().__init__(topics, settings, Telemetry.from_settings(settings))
        self.partition_of = partition_of
        self.sent: list[tuple[int, bytes, bytes]] = []  # (partition, key, value)

    async def key_partitions(self, topic: Any, keys: Sequence[bytes]) -> list[int]:
        return [self.partition_of[key] for key in keys]

    async def send_records(
        self,
        topic: Any,
        records: Sequence[tuple[bytes, bytes]],
        partitions: Sequence[int] | None = None,
    ) -> None:
        assert topic.get_topic_name() == "turns" and partitions is not None
        self.sent.extend((p, k, v) for p, (k, v) in zip(partitions, records, strict=True))


def message(session: str, turn: int, text: str = "") -> tuple[bytes, bytes]:
    return session.encode(), orjson.dumps({"session": session, "turn": turn, "text": text})


def read_back(sent: list[tuple[int, bytes, bytes]]) -> dict[int, list[tuple[str, int]]]:
    """Each partition's session messages, in the order the session stage reads them."""
    out: dict[int, list[tuple[str, int]]] = {}
    for partition, key, value in sent:
        messages = session_messages(orjson.loads(value))
        assert bundled_messages(key) == len(messages)
        if len(messages) == 1:
            assert key == messages[0]["session"].encode()  # alone: keyed by its session
        out.setdefault(partition, []).extend((m["session"], m["turn"]) for m in messages)
    return out


async def forward(publisher: Publisher, forwarded: list[tuple[bytes, bytes]]) -> None:
    batch = Contributions()
    batch.forwarded.extend(forwarded)
    await publisher.send_results(batch)


async def test_each_partitions_messages_go_bundled_in_order_to_that_partition() -> None:
    sessions = {f"s{i}".encode(): i % 3 for i in range(7)}
    publisher = Recording(sessions)
    publisher.bundle_messages = 4
    forwarded = [message(f"s{i}", turn) for turn in range(3) for i in range(7)]
    await forward(publisher, forwarded)
    expected: dict[int, list[tuple[str, int]]] = {}
    for key, value in forwarded:
        data = orjson.loads(value)
        expected.setdefault(sessions[key], []).append((data["session"], data["turn"]))
    assert read_back(publisher.sent) == expected
    # partition 0 has s0, s3, s6 (9 messages): bundles of 4, 4 and the last one alone
    assert [bundled_messages(k) for p, k, _ in publisher.sent if p == 0] == [4, 4, 1]
    assert len(publisher.sent) < len(forwarded)


async def test_a_bundle_stays_within_the_output_limit_and_a_long_message_goes_alone() -> None:
    publisher = Recording({b"a": 0, b"b": 0}, max_output_bytes=2_000)
    forwarded = [message("a", 0, "x" * 600), message("b", 0, "y" * 600)]
    forwarded += [message("a", 1, "z" * 1_380), message("b", 1, "w" * 10)]
    await forward(publisher, forwarded)
    assert read_back(publisher.sent) == {0: [("a", 0), ("b", 0), ("a", 1), ("b", 1)]}
    assert [bundled_messages(key) for _, key, _ in publisher.sent] == [2, 1, 1]
    limit = 2_000 - 512  # the record's overhead (`publish.RECORD_OVERHEAD`)
    assert all(len(k) + len(v) <= limit for _, k, v in publisher.sent)


@given(
    st.lists(st.integers(min_value=1, max_value=60), max_size=30),
    st.integers(min_value=1, max_value=6),
    st.integers(min_value=1, max_value=120),
)
def test_runs_cover_the_messages_in_order_within_both_bounds(
    sizes: list[int], most: int, room: int
) -> None:
    messages = [(b"k", bytes(size)) for size in sizes]
    runs = _runs(messages, most, room)
    assert [item for run in runs for item in run] == messages
    for run in runs:
        assert 1 <= len(run) <= most
        if len(run) > 1:
            assert sum(len(value) for _, value in run) <= room
