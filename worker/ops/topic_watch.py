"""The worker stops when its topics disappear from the broker.

A broker that comes back without the worker's topics (they were deleted, or a new cluster
answers at the same address, as the embedded Tansu broker does after a restart: it keeps
nothing) leaves a worker that cannot do its job: its partitions and changelogs are gone
and every offset commit fails. Kafka Streams stops on a missing source topic; so does
scorestream: once the worker is ready it lists the broker's topics every few seconds, and
when some of its own are missing in two checks in a row it logs which and stops with exit
code 3. Its supervisor starts it again, and start-up creates the topics anew.

That stop has a deadline (`StopDeadline`): a graceful stop commits, and a commit waits for
the records in hand to reach their topics, which are gone (the worker never has the broker
create a topic by asking about it, `faust_patches.no_auto_create`). Without it the worker
would wait there for ever, with no supervisor told to start it again.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient

from topics.provision import bootstrap_servers
from worker.config import Settings
from worker.ops.kafka_security import aiokafka_options

log = logging.getLogger("scorestream")

DEFAULT_INTERVAL = 5.0
STOP_DEADLINE = 15.0  # seconds a stop for vanished topics may take before the worker exits


def missing_topics(required: Iterable[str], present: Iterable[str]) -> list[str]:
    """The required topics the broker does not list, sorted."""
    return sorted(set(required) - set(present))


class TopicWatch:
    """Reports the worker's topics as gone once `confirmations` checks in a row miss them
    (one check can race a broker that is still creating or loading topics)."""

    def __init__(self, required: Iterable[str], confirmations: int = 2) -> None:
        self.required = frozenset(required)
        self.confirmations = confirmations
        self._misses = 0

    def check(self, present: Iterable[str]) -> list[str]:
        """The missing topics once confirmed, else an empty list."""
        missing = missing_topics(self.required, present)
        self._misses = self._misses + 1 if missing else 0
        return missing if self._misses >= self.confirmations else []


class BrokerTopics:
    """Lists the broker's topics over one admin connection, opened when first needed and
    opened again after a failure."""

    def __init__(self, client: Callable[[], AIOKafkaAdminClient]) -> None:
        self._new_client = client
        self._client: AIOKafkaAdminClient | None = None

    async def names(self) -> list[str]:
        if self._client is None:
            client = self._new_client()
            await client.start()
            self._client = client
        try:
            return list(await self._client.list_topics())
        except BaseException:
            await self.close()
            raise

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.close()


def topic_check(
    watch: TopicWatch,
    list_topics: Callable[[], Awaitable[list[str]]],
    active: Callable[[], bool],
    on_gone: Callable[[list[str]], None],
    timeout: float,
) -> Callable[[], Awaitable[None]]:
    """One check for a timer: while `active()`, list the topics (a broker that does not
    answer within `timeout` is left to the broker-state gauge) and call `on_gone` with the
    missing ones once the watch confirms them."""

    async def check() -> None:
        if not active():
            return
        try:
            present = await asyncio.wait_for(list_topics(), timeout)
        except Exception:  # unreachable: `scorestream_broker_connected` reports that
            return
        if gone := watch.check(present):
            on_gone(gone)

    return check


class StopDeadline:
    """Ends the process with `code` if a stop that began with `arm` has not ended it within
    `seconds`: `before_exit` runs first (it stops what would outlive the process), then
    `exit` (`os._exit`: the stop that hangs holds the event loop and Python's own exit)."""

    def __init__(
        self,
        seconds: float,
        code: int,
        before_exit: Callable[[], None],
        exit: Callable[[int], object] = os._exit,
    ) -> None:
        self.seconds = seconds
        self.code = code
        self._before_exit = before_exit
        self._exit = exit
        self._timer: threading.Timer | None = None

    def arm(self) -> None:
        """Start counting (once; arming again changes nothing)."""
        if self._timer is None:
            self._timer = threading.Timer(self.seconds, self._expire)
            self._timer.daemon = True
            self._timer.start()

    def cancel(self) -> None:
        """The stop ended in time."""
        if self._timer is not None:
            self._timer.cancel()

    def _expire(self) -> None:
        log.error(
            "the stop did not end within %.0f s (records for the missing topics cannot be "
            "delivered): exiting with code %d",
            self.seconds,
            self.code,
        )
        try:
            self._before_exit()
        except Exception:
            log.exception("stopping the worker's helpers before the exit")
        for handler in logging.getLogger().handlers + log.handlers:
            handler.flush()
        sys.stderr.flush()
        self._exit(self.code)


def install_topic_watch(
    app: Any,
    required: Iterable[str],
    settings: Settings,
    broker: str,
    active: Callable[[], bool],
    on_gone: Callable[[list[str]], None],
    interval: float = DEFAULT_INTERVAL,
) -> None:
    """Every `interval` seconds, while `active()`, check on a Faust app's timer that the
    broker still has the `required` topics; call `on_gone` once they are confirmed gone."""
    broker_topics = BrokerTopics(
        lambda: AIOKafkaAdminClient(
            bootstrap_servers=bootstrap_servers(broker), **aiokafka_options(settings)
        )
    )
    check = topic_check(
        TopicWatch(required),
        broker_topics.names,
        active,
        on_gone,
        settings.stream.connect_timeout,
    )
    app.timer(interval)(check)


__all__ = [
    "STOP_DEADLINE",
    "BrokerTopics",
    "StopDeadline",
    "TopicWatch",
    "install_topic_watch",
    "missing_topics",
    "topic_check",
]
