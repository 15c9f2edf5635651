"""The worker's Kafka clients never create a topic by asking about it.

aiokafka asks for topic metadata with `allow_auto_topic_creation` true and offers no
setting for it, so a broker that creates topics on demand (Apache Kafka's default,
`auto.create.topics.enable`; Tansu always) creates any missing topic the worker's
consumer or producers ask about, with the broker's default partition count. When the
worker's topics vanish (deleted, or a broker that lost its data), its own metadata
refreshes re-created them that way before the topic watch stopped it (exit 3): the
restarted worker then found them present, and ran on a layout it did not choose (seen
on Tansu: Faust's one-partition leader topic came back with four). With this patch a
missing topic stays missing until the worker, on its next start, creates it with its
configured layout (`topics.provision`).

Its cost: records the worker holds for a missing topic are never delivered, and a commit
waits for them (aiokafka's sender asks for metadata again at once, without a backoff).
So the stop that follows vanished topics has a deadline (`worker.ops.topic_watch.
StopDeadline`, 15 s), without which that stop hung for ever.

Patches: the `MetadataRequest` name in `aiokafka.client`, which `AIOKafkaClient`'s
`_metadata_update` and `bootstrap` build their requests from, with one whose
`allow_auto_topic_creation` defaults to false (brokers older than metadata v4 ignore it).
Installed by the `worker` command for its whole process (`forbid_topic_auto_creation`);
the start-up check looks for both names and for the flag `build` reads.
Upstream: no issue found (`AIOKafkaClient._metadata_update` builds
`MetadataRequest(topics)`, whose flag defaults to true).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import aiokafka.client


def forbid_topic_auto_creation() -> Callable[[], None]:
    """From now on in this process, aiokafka's metadata requests do not create the
    topics they name; returns what undoes it (tests)."""
    original = aiokafka.client.MetadataRequest
    if getattr(original, "forbids_auto_creation", False):
        return lambda: None

    class MetadataRequestWithoutCreation(original):  # type: ignore[valid-type,misc]
        forbids_auto_creation = True

        def __init__(self, topics: Any = None, allow_auto_topic_creation: bool = False) -> None:
            super().__init__(topics, allow_auto_topic_creation)

    aiokafka.client.MetadataRequest = MetadataRequestWithoutCreation

    def undo() -> None:
        aiokafka.client.MetadataRequest = original

    return undo


__all__ = ["forbid_topic_auto_creation"]
