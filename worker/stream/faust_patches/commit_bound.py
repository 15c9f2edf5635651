"""Bounds how long one offset commit of the worker may take.

aiokafka retries a commit as long as the broker answers with a retriable error, and
"unknown topic or partition" is one: when the broker loses the worker's topics (a new
cluster at the same address, or the embedded Tansu broker restarted, which keeps nothing)
the commit in flight never ends. Faust waits for that commit before it gives up
partitions in a rebalance and before it stops, so the worker hung in both (it needed a
SIGKILL). Kafka's own clients bound a commit by a timeout; here a commit that takes
longer than `timeout` is abandoned as not done, which at-least-once processing allows:
Faust commits the same offsets again at its next commit, and a record read again after a
rebalance is counted once by the stages' offset high-waters.

Patches: `_commit` of Faust's consumer thread (in place, on the instance).
Upstream: aio-libs/aiokafka#1095 (an UnknownTopicOrPartitionError makes
`GroupCoordinator.commit_offsets` retry for ever; open). Apache Kafka's own consumer
stopped retrying it before a revocation in KAFKA-16224.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

log = logging.getLogger("scorestream")

Commit = Callable[[Mapping[Any, int]], Awaitable[bool]]


def bounded(commit: Commit, timeout: float) -> Commit:
    """`commit`, reporting not done (False) when it takes longer than `timeout` s."""

    async def commit_within(offsets: Mapping[Any, int]) -> bool:
        try:
            return await asyncio.wait_for(commit(offsets), timeout)
        except TimeoutError:
            log.warning(
                "an offset commit got no answer within %gs: left to the next commit", timeout
            )
            return False

    return commit_within


def bound_commits(consumer: Any, timeout: float) -> None:
    """Bound every offset commit a Faust consumer makes (its thread runs `_commit`)."""
    thread = consumer._thread
    thread._commit = bounded(thread._commit, timeout)


__all__ = ["bound_commits", "bounded"]
