"""`faust_patches.no_auto_create` against the real aiokafka and a real broker: a consumer
of a topic that does not exist makes the broker create it (with the broker's own layout)
unless the patch is installed, and the `worker` command installs it."""

from __future__ import annotations

import uuid

import aiokafka.client
import aiokafka.protocol.metadata
import pytest
from aiokafka import AIOKafkaConsumer

from tests.streamkit import topic_layout
from worker.commands import stream as stream_command
from worker.ops.broker import EmbeddedBroker
from worker.stream.faust_patches import compatibility
from worker.stream.faust_patches.no_auto_create import forbid_topic_auto_creation

pytestmark = pytest.mark.integration


async def consume_a_missing_topic(broker: EmbeddedBroker) -> str:
    """Subscribe a real consumer to a topic that does not exist and let it ask for the
    topic's metadata for a while; the topic's name."""
    topic = f"missing-{uuid.uuid4().hex[:8]}"
    consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, metadata_max_age_ms=200)
    await consumer.start()
    try:
        consumer.subscribe([topic])  # as Faust's consumer subscribes
        await consumer.getmany(timeout_ms=1500)
    finally:
        await consumer.stop()
    return topic


async def test_asking_about_a_missing_topic_creates_it_only_without_the_patch(
    broker: EmbeddedBroker,
) -> None:
    unpatched = await consume_a_missing_topic(broker)
    assert unpatched in await topic_layout(broker.bootstrap)  # what the patch is for
    undo = forbid_topic_auto_creation()
    try:
        assert not compatibility.attribute_problems(
            need for need in compatibility.REQUIRED if need.patch == "no_auto_create"
        )
        patched = await consume_a_missing_topic(broker)
    finally:
        undo()
    assert patched not in await topic_layout(broker.bootstrap)
    assert not getattr(aiokafka.client.MetadataRequest, "forbids_auto_creation", False)


def test_installing_twice_is_one_patch() -> None:
    undo = forbid_topic_auto_creation()
    try:
        patched = aiokafka.client.MetadataRequest
        forbid_topic_auto_creation()()  # the second install changes nothing, nor its undo
        assert aiokafka.client.MetadataRequest is patched
    finally:
        undo()


def test_the_worker_command_installs_it() -> None:
    assert "forbid_topic_auto_creation" in compatibility.names_used(stream_command.run_worker)


def test_a_patched_request_still_names_its_topics() -> None:
    undo = forbid_topic_auto_creation()
    try:
        request = aiokafka.client.MetadataRequest(["a", "b"])
        struct = request.build(aiokafka.protocol.metadata.MetadataRequest_v5)
        assert (struct.topics, struct.allow_auto_topic_creation) == (["a", "b"], False)
    finally:
        undo()
