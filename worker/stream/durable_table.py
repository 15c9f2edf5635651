"""A Faust table whose changelog writes can be awaited until the broker has them.

Faust sends a table's changelog writes through its producer buffer, and
`producer.flush()` can return while a write is still between that buffer and the Kafka
client (the buffer looks empty as soon as its sender has taken a message). The in-flight
marks of the poison-pill guard must be on the broker before the work they cover starts,
so their table keeps the future of each write and `written()` waits for the broker's
acknowledgements. Given a `MarkWriter`, the writes leave on its producer instead of
Faust's (`worker/stream/mark_writer.py`: they do not queue behind other outputs).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import faust
from faust.types import AppT, FutureMessage
from faust.types.tuples import PendingMessage

from worker.stream.mark_writer import MarkWriter

log = logging.getLogger("scorestream")


class DurableTable(faust.Table):
    """`faust.Table` plus `written()`: wait until every changelog write so far is acked."""

    def __init__(self, app: AppT, writer: MarkWriter | None = None, **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        self.writer = writer
        self._unacked: list[FutureMessage] = []

    def send_changelog(
        self,
        partition: int | None,
        key: Any,
        value: Any,
        key_serializer: Any = None,
        value_serializer: Any = None,
    ) -> FutureMessage:
        if self.writer is None:
            future = super().send_changelog(partition, key, value, key_serializer, value_serializer)
        else:
            future = self._send_on_writer(
                self.writer, partition, key, value, key_serializer, value_serializer
            )
        self._unacked.append(future)
        return future

    def _send_on_writer(
        self,
        writer: MarkWriter,
        partition: int | None,
        key: Any,
        value: Any,
        key_serializer: Any,
        value_serializer: Any,
    ) -> FutureMessage:
        """Encode as Faust would and write on `writer`; a Faust `FutureMessage`, which
        `Table.on_key_set` reads the partition of, settled by the acknowledgement."""
        topic = self.changelog_topic
        key_serializer = key_serializer or self.key_serializer
        value_serializer = value_serializer or self.value_serializer
        key_bytes, _ = topic.prepare_key(key, key_serializer)
        value_bytes, _ = topic.prepare_value(value, value_serializer)
        name = topic.get_topic_name()
        pending = PendingMessage(
            channel=topic,
            key=key,
            value=value,
            partition=partition,
            timestamp=None,
            headers=None,
            key_serializer=key_serializer,
            value_serializer=value_serializer,
            callback=None,
            topic=name,
        )
        future = FutureMessage(pending)
        writer.send(name, partition, key_bytes, value_bytes, future)
        return future

    async def written(self, timeout: float) -> bool:
        """Wait (at most `timeout` s) for the broker to acknowledge the writes made so
        far; False when some are not acknowledged in time or failed."""
        pending, self._unacked = self._unacked, []
        if not pending:
            return True
        # asyncio.wait, not gather: a timeout must not cancel Faust's own futures.
        done, not_done = await asyncio.wait(pending, timeout=timeout)
        failed = [future for future in done if future.exception() is not None]
        for future in failed:
            log.warning("a changelog write failed: %r", future.exception())
        return not not_done and not failed


def durable_table(
    app: AppT, name: str, writer: MarkWriter | None = None, **kwargs: Any
) -> DurableTable:
    """Define a `DurableTable` on `app` as `app.Table` defines a table (its writes on
    `writer`'s producer when given)."""
    table = DurableTable(app, writer, name=name, beacon=app.tables.beacon, **kwargs)
    app.tables.add(table)
    return table


__all__ = ["DurableTable", "durable_table"]
