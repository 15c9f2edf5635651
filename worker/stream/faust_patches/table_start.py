"""Lets the consumer subscribe as soon as the app's tables are registered, not a second
later.

Faust's `TableManager.on_start` sleeps 1 s before it registers the tables' changelog
channels and starts their recovery, and the conductor subscribes the consumer to its
topics only once the tables are registered (`wait_until_tables_registered`): every worker
asked to join its group a second late, on every deploy, scale-up and restart. The sleep
leaves room for tables defined after the app starts. This app defines every table before
it starts (and Faust refuses a table added once they are registered), so nothing waits
for it.

Patches: `on_start` of the app's table manager (in place, on the instance), with
upstream's body less the sleep: unless the manager is stopping, `_update_channels`, then
`recovery.start`. The start-up check finds upstream's `on_start` still sleeping and still
calling both, and the conductor still waiting for the tables before it subscribes.
Upstream: no issue found (`faust.tables.manager.TableManager.on_start`).
"""

from __future__ import annotations

from typing import Any


def register_tables_at_once(tables: Any) -> None:
    """Make the table manager `tables` register its tables as soon as it starts."""

    async def on_start() -> None:
        if not tables.should_stop:
            await tables._update_channels()
            await tables.recovery.start()

    tables.on_start = on_start


__all__ = ["register_tables_at_once"]
