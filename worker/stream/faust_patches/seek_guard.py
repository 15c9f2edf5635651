"""Keeps Faust from losing the records it fetches while a rebalance seeks to committed offsets.

At the end of a rebalance Faust's recovery resumes the stream partitions, seeks every
assigned partition to its committed offset (one request per partition), and only then
resumes flow control, which empties every stream queue. Its fetcher runs throughout, so
records it fetches during the seek are put in a queue that is then emptied, while the
consumer's position has moved past them. A worker restarted on a backlog read nothing
until new input arrived (reproduced on Tansu about one restart in three; the window is
the length of the seek, so Apache Kafka is exposed too).

`guard_seek` stops the consumer's flow before the seek, so nothing reaches a queue in that
window (Faust resumes the flow right after it empties the queues), and rewinds the stream
partitions that have no committed offset to their beginning, as a new consumer with
`auto_offset_reset: earliest` starts (aiokafka leaves those positions where they are, which
may be past records that were fetched and dropped). It records where each stream
partition's reading starts after the seek (`start_offsets`): the score stage needs it to
tell whether it has read a partition up to its end before it finished any of its records
(the consumer's position runs ahead, past records fetched but not yet finished).

Patches: the Faust consumer's `seek_to_committed` (in place, on the instance).
Upstream: no issue found for this case (the fetcher running through the seek of Faust's
table recovery). Related: faust-streaming/faust#216 (recovery without tables resumed the
flow before seeking, so fetched records skipped offsets; fixed in #217 for that path
only) and faust-streaming/faust#221 (records fetched before a rebalance delivered after
it).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any
from weakref import WeakKeyDictionary

from aiokafka.errors import IllegalStateError

log = logging.getLogger("scorestream")

SeekToCommitted = Callable[[], Awaitable[Mapping[Any, int | None]]]

# consumer -> the offset each of its stream partitions is read from since the last seek
_STARTS: WeakKeyDictionary[Any, dict[Any, int]] = WeakKeyDictionary()


def start_offsets(consumer: Any) -> Mapping[Any, int]:
    """Where reading of each assigned stream partition started at the consumer's last
    seek: its committed offset, or its earliest where none was committed (with
    `auto_offset_reset: latest` those are not known). Empty before the first seek."""
    return _STARTS.get(consumer, {})


def guard_seek(consumer: Any, stream_topics: Collection[str]) -> None:
    """Wrap a Faust consumer's `seek_to_committed` (its `perform_seek` calls it) in place."""
    seek_to_committed: SeekToCommitted = consumer.seek_to_committed
    topics = frozenset(stream_topics)
    rewind_uncommitted = consumer.app.conf.consumer_auto_offset_reset == "earliest"

    async def guarded() -> Mapping[Any, int | None]:
        consumer.stop_flow()  # Faust resumes the flow once the seek is done
        committed = await seek_to_committed()
        starts = {
            tp: int(offset) for tp, offset in committed.items() if offset and tp.topic in topics
        }
        _STARTS[consumer] = starts
        if rewind_uncommitted:
            fresh = [tp for tp, offset in committed.items() if not offset and tp.topic in topics]
            if fresh:
                log.debug("no committed offset: reading %s from the beginning", fresh)
                # To the earliest offset itself, not `seek_to_beginning`: that leaves the
                # position unset until the fetcher resets it, and Faust's livelock check,
                # which reads every assigned position, crashes the consumer meanwhile.
                earliest = await consumer.earliest_offsets(*fresh)
                # A rebalance may have taken partitions away meanwhile (a member joining):
                # seek only those still assigned; the next assignment seeks the others.
                assigned = consumer.assignment()
                targets = {tp: earliest.get(tp, 0) for tp in fresh if tp in assigned}
                try:
                    await consumer.seek_wait(targets)
                    starts.update(targets)
                except IllegalStateError as exc:
                    log.info("rewind skipped, the assignment changed during it: %s", exc)
        return committed

    consumer.seek_to_committed = guarded


__all__ = ["guard_seek", "start_offsets"]
