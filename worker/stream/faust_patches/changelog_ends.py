"""Exact end offsets of changelog partitions for table recovery on the embedded broker.

Tansu's ListOffsets(LATEST) answer can be wrong both ways, while its fetch responses carry
the right high watermark: short ("base offset of the last batch + 1") after a
multi-record batch, and long for a topic that was written to while it did not exist and
was created afterwards (a broker restarted empty, then the worker's topics created
again: the new, empty changelog was listed as ending at 149). Once, after such a restart,
two partitions of a changelog were listed, and fetched, as ending at 10, and no record
came from them. Faust's table recovery reads each changelog up to the end it is told, so a
short one loses table state and a long one waits forever for records that never come.
`exact_highwaters` asks as Faust does, then takes as each changelog partition's end the
offset after the last record a fetch returns (`fetched_highwaters`): on Apache Kafka, and
on Tansu when it is right, the same as the high watermark.

Patches: the Faust consumer's `highwaters` (in place, on the instance; with
`stream.exact_changelog_ends` only). Upstream: no issue found (the fault is the embedded
Tansu broker's ListOffsets answer; Faust and aiokafka behave as Kafka specifies)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from faust.types import TP

log = logging.getLogger("scorestream")

Highwaters = Callable[..., Awaitable[Mapping[TP, int]]]


async def fetched_highwaters(
    bootstrap: str,
    listed: Mapping[TP, int],
    client_options: Mapping[str, Any] | None = None,
    timeout: float = 10.0,
    quiet: float = 1.0,
    consumer: Any = None,
) -> dict[TP, int]:
    """The end of each partition: the offset after the last record a fetch returns.

    Each partition listed with records is fetched at its last listed offset, and then at
    the last offset of the high watermark the fetch reports, until a fetch returns that
    record; that high watermark is the end. A partition whose fetch reports an end but
    not the record before it (how a recovery on Tansu that waited forever once looked
    from outside: ends of 10, and no record came) is read from its start, and ends
    after the last record that came within `quiet` seconds: recovery reads exactly that
    far. Partitions listed empty are left as they are. `consumer`: an unstarted
    `AIOKafkaConsumer`-like client (tests); by default one on `bootstrap`."""
    ends = dict(listed)
    wanted = {tp: end for tp, end in listed.items() if end and end > 0}
    if not wanted:
        return ends
    if consumer is None:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=None,
            enable_auto_commit=False,
            **dict(client_options or {}),
        )
    await consumer.start()
    try:
        partitions = {tp: TopicPartition(tp.topic, tp.partition) for tp in wanted}
        consumer.assign(list(partitions.values()))
        probe = _Probe(consumer, partitions)
        deadline = asyncio.get_running_loop().time() + timeout
        fetched, hollow = await probe.last_records(wanted, deadline)
        ends.update(fetched)
        if hollow:
            log.warning(
                "changelog partitions %s report ends %s but no record before them: "
                "reading them from the start",
                sorted(hollow),
                [fetched[tp] for tp in sorted(hollow)],
            )
            ends.update(await probe.read_to_last(hollow, deadline, quiet))
        missing = sorted(set(wanted) - set(fetched))
        if missing:
            log.warning("no fetch answer for %s: using the listed end offsets", missing)
    finally:
        await consumer.stop()
    return ends


class _Probe:
    """Fetches on one assigned consumer, by Faust's partitions."""

    def __init__(self, consumer: Any, partitions: Mapping[TP, TopicPartition]) -> None:
        self.consumer = consumer
        self.partitions = partitions

    async def last_records(
        self, listed: Mapping[TP, int], deadline: float
    ) -> tuple[dict[TP, int], set[TP]]:
        """Each partition's fetched end whose last record a fetch returned, and the
        partitions whose fetch reported an end without its last record (`hollow`)."""
        guess = dict(listed)
        for tp, end in guess.items():
            self.consumer.seek(self.partitions[tp], end - 1)
        ends: dict[TP, int] = {}
        hollow: set[TP] = set()
        answered: set[TP] = set()  # a fetch answered; its records come by the next read
        while guess and asyncio.get_running_loop().time() < deadline:
            last = await self._read(guess)
            for tp in list(guess):
                highwater = self.consumer.highwater(self.partitions[tp])
                if tp in last and last[tp] >= guess[tp] - 1:
                    ends[tp] = max(highwater or 0, last[tp] + 1)
                elif highwater is None:
                    continue
                elif highwater != guess[tp] and highwater > 0:  # listed past or short
                    guess[tp] = highwater
                    answered.discard(tp)
                    self.consumer.seek(self.partitions[tp], highwater - 1)
                    continue
                elif highwater == 0:
                    ends[tp] = 0
                elif tp not in answered:
                    answered.add(tp)
                    continue
                else:
                    ends[tp], hollow = highwater, hollow | {tp}
                del guess[tp]
        return ends, hollow

    async def read_to_last(self, tps: set[TP], deadline: float, quiet: float) -> dict[TP, int]:
        """Read `tps` from their start until no record came for `quiet` seconds: the
        offset after the last record read, or the start offset when none came."""
        loop = asyncio.get_running_loop()
        starts = await self.consumer.beginning_offsets([self.partitions[tp] for tp in tps])
        for tp in tps:
            self.consumer.seek(self.partitions[tp], starts[self.partitions[tp]])
        ends = {tp: starts[self.partitions[tp]] for tp in tps}
        reading = {tp: loop.time() for tp in tps}
        while reading and loop.time() < deadline:
            last = await self._read(reading)
            now = loop.time()
            for tp in list(reading):
                if tp in last:
                    ends[tp], reading[tp] = last[tp] + 1, now
                elif now - reading[tp] >= quiet:
                    del reading[tp]
        return ends

    async def _read(self, tps: Iterable[TP]) -> dict[TP, int]:
        """One read of `tps`: the last offset each returned."""
        batch = await self.consumer.getmany(*(self.partitions[tp] for tp in tps), timeout_ms=200)
        by_name = {(p.topic, p.partition): tp for tp, p in self.partitions.items()}
        return {
            by_name[(p.topic, p.partition)]: records[-1].offset
            for p, records in batch.items()
            if records
        }


def exact_highwaters(
    listed: Highwaters, bootstrap: str, client_options: Mapping[str, Any] | None = None
) -> Highwaters:
    """Wrap a Faust consumer's `highwaters` so changelog partitions get fetched ends."""

    async def highwaters(*partitions: TP) -> Mapping[TP, int]:
        answer = dict(await listed(*partitions))
        changelogs = {tp: end for tp, end in answer.items() if tp.topic.endswith("-changelog")}
        if changelogs:
            answer.update(await fetched_highwaters(bootstrap, changelogs, client_options))
        return answer

    return highwaters


__all__ = ["exact_highwaters", "fetched_highwaters"]
