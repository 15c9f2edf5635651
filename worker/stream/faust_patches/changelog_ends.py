"""Exact end offsets of changelog partitions for table recovery on the embedded broker.

Tansu's ListOffsets(LATEST) answer can be wrong both ways, while its fetch responses carry
the right high watermark: short ("base offset of the last batch + 1") after a
multi-record batch, and long for a topic that was written to while it did not exist and
was created afterwards (a broker restarted empty, then the worker's topics created
again: the new, empty changelog was listed as ending at 149). Faust's table recovery
reads each changelog up to the ListOffsets answer, so a short one loses table state and
a long one waits forever for records that do not exist. `exact_highwaters` asks as Faust
does, then fetches the last listed record once and takes the high watermark the fetch
reports, which is right on both Tansu and Apache Kafka.

Patches: the Faust consumer's `highwaters` (in place, on the instance; with
`stream.exact_changelog_ends` only). Upstream: no issue found (the fault is the embedded
Tansu broker's ListOffsets answer; Faust and aiokafka behave as Kafka specifies)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
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
) -> dict[TP, int]:
    """The high watermark of each partition as a fetch at its last listed offset reports
    it; partitions listed empty are left as they are."""
    ends = dict(listed)
    wanted = {tp: end for tp, end in listed.items() if end and end > 0}
    if not wanted:
        return ends
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
        for tp, end in wanted.items():
            consumer.seek(partitions[tp], end - 1)
        deadline = asyncio.get_running_loop().time() + timeout
        pending = set(wanted)
        while pending and asyncio.get_running_loop().time() < deadline:
            await consumer.getmany(*(partitions[tp] for tp in pending), timeout_ms=200)
            for tp in list(pending):
                fetched = consumer.highwater(partitions[tp])
                if fetched is not None:
                    ends[tp] = fetched
                    pending.discard(tp)
        if pending:
            log.warning("no fetch answer for %s: using the listed end offsets", sorted(pending))
    finally:
        await consumer.stop()
    return ends


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
