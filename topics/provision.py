"""Create and inspect the catalog's topics on a broker."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from topics.catalog import CATALOG, TopicSpec

TOPIC_ALREADY_EXISTS = 36


@dataclass(frozen=True)
class TopicStatus:
    name: str
    catalog_name: str
    partitions: int | None  # None: not on the broker
    expected_partitions: int


def bootstrap_servers(broker_url: str) -> str:
    """`kafka://h:p;kafka://h2:p2` (Faust spelling) -> `h:p,h2:p2` (aiokafka spelling)."""
    hosts = []
    for part in broker_url.replace(";", ",").split(","):
        part = part.strip()
        if "://" in part:
            part = part.split("://", 1)[1]
        if part:
            hosts.append(part.rstrip("/"))
    if not hosts:
        raise ValueError(f"no broker address in {broker_url!r}")
    return ",".join(hosts)


def planned_topics(names: dict[str, str] | None = None) -> list[tuple[str, TopicSpec]]:
    """(actual name, spec) for each catalog topic; `names` maps catalog name -> actual."""
    names = names or {}
    return [(names.get(name, name), spec) for name, spec in CATALOG.items()]


def new_topics(
    names: dict[str, str] | None = None,
    partitions: int | None = None,
    replication_factor: int | None = None,
    min_insync_replicas: int | None = None,
) -> list[NewTopic]:
    """CreateTopics requests for the catalog; `partitions`, `replication_factor` and
    `min_insync_replicas` override the catalog's values when given."""
    topics = []
    for name, spec in planned_topics(names):
        config = spec.config()
        if min_insync_replicas is not None:
            config["min.insync.replicas"] = str(min_insync_replicas)
        topics.append(
            NewTopic(
                name,
                partitions or spec.partitions,
                replication_factor or spec.replication_factor,
                topic_configs=config,
            )
        )
    return topics


async def create_topics(
    broker_url: str,
    names: dict[str, str] | None = None,
    partitions: int | None = None,
    *,
    replication_factor: int | None = None,
    min_insync_replicas: int | None = None,
    client_options: dict[str, Any] | None = None,
) -> list[str]:
    """Create the missing catalog topics; returns the names created (existing ones are kept).

    `client_options`: extra `AIOKafkaAdminClient` arguments (security, timeouts).
    """
    admin = AIOKafkaAdminClient(
        bootstrap_servers=bootstrap_servers(broker_url), **(client_options or {})
    )
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        wanted = [
            topic
            for topic in new_topics(names, partitions, replication_factor, min_insync_replicas)
            if topic.name not in existing
        ]
        if not wanted:
            return []
        response = await admin.create_topics(wanted)
        created = []
        for topic, code, message in response.topic_errors:
            if code == 0:
                created.append(topic)
            elif code != TOPIC_ALREADY_EXISTS:
                raise RuntimeError(f"cannot create topic {topic}: {message} (error {code})")
        return created
    finally:
        await admin.close()


async def list_topics(
    broker_url: str,
    names: dict[str, str] | None = None,
    client_options: dict[str, Any] | None = None,
) -> list[TopicStatus]:
    """The catalog's topics with their partition counts on the broker."""
    admin = AIOKafkaAdminClient(
        bootstrap_servers=bootstrap_servers(broker_url), **(client_options or {})
    )
    await admin.start()
    try:
        present = set(await admin.list_topics())
        planned = planned_topics(names)
        described = {}
        if on_broker := [name for name, _ in planned if name in present]:
            for info in await admin.describe_topics(on_broker):
                described[info["topic"]] = len(info["partitions"])
        return [
            TopicStatus(name, spec.name, described.get(name), spec.partitions)
            for name, spec in planned
        ]
    finally:
        await admin.close()


async def group_members(
    broker_url: str, group_id: str, client_options: dict[str, Any] | None = None
) -> int:
    """How many members the consumer group `group_id` has on the broker now (0 for a group
    that is empty or does not exist yet)."""
    admin = AIOKafkaAdminClient(
        bootstrap_servers=bootstrap_servers(broker_url), **(client_options or {})
    )
    await admin.start()
    try:
        members = 0
        for response in await admin.describe_consumer_groups([group_id]):
            for group in response.groups:
                # (error_code, group_id, state, protocol_type, protocol, members, ...)
                error_code, _, state, *_ = group
                if error_code:
                    raise RuntimeError(f"describing group {group_id}: error {error_code}")
                if state not in ("Empty", "Dead"):
                    members += len(group[5])
        return members
    finally:
        await admin.close()
