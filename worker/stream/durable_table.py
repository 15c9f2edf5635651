"""A Faust table whose changelog writes can be awaited until the broker has them.

Faust sends a table's changelog writes through its producer buffer, and
`producer.flush()` can return while a write is still between that buffer and the Kafka
client (the buffer looks empty as soon as its sender has taken a message). The in-flight
marks of the poison-pill guard must be on the broker before the work they cover starts,
so their table keeps the future of each write and `written()` waits for the broker's
acknowledgements.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import faust
from faust.types import AppT, FutureMessage

log = logging.getLogger("scorestream")


class DurableTable(faust.Table):
    """`faust.Table` plus `written()`: wait until every changelog write so far is acked."""

    def __init__(self, app: AppT, **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        self._unacked: list[FutureMessage] = []

    def send_changelog(self, *args: Any, **kwargs: Any) -> FutureMessage:
        future = super().send_changelog(*args, **kwargs)
        self._unacked.append(future)
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


def durable_table(app: AppT, name: str, **kwargs: Any) -> DurableTable:
    """Define a `DurableTable` on `app` as `app.Table` defines a table."""
    table = DurableTable(app, name=name, beacon=app.tables.beacon, **kwargs)
    app.tables.add(table)
    return table


__all__ = ["DurableTable", "durable_table"]
