"""The start-up check: the installed faust-streaming, aiokafka and mode-streaming are the
versions the patches were tested with, and every attribute they patch or read is there.

A patch of a renamed attribute fails loudly at best and does nothing at worst (a
`_fetch_max_wait_ms` set on a consumer that no longer reads it), so the worker refuses to
start instead (`IncompatibleLibraries`, a usage error: exit 3). `TESTED` holds the range
of each library the patches were run against: the version in deploy/requirements.lock up
to its next minor release. pyproject.toml declares the same ranges, and
`tests/test_faust_patches.py` keeps the three in step. Moving to a new release: widen the
range here and in pyproject.toml, `make install LOCKED=`, `make lock`, and run the tests
that touch the patches.
"""

from __future__ import annotations

import importlib
import types
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from worker.exit_codes import UsageError

TESTED: dict[str, str] = {
    "faust-streaming": ">=0.15.3,<0.16",
    "aiokafka": ">=0.14.0,<0.15",
    "mode-streaming": ">=0.7.1,<0.8",
}

_CONSUMER = "faust.transport.drivers.aiokafka.Consumer"
_THREAD = "faust.transport.drivers.aiokafka.AIOKafkaConsumerThread"
_KAFKA_CONSUMER = "aiokafka.AIOKafkaConsumer"
_PRODUCER = "faust.transport.drivers.aiokafka.Producer"


@dataclass(frozen=True)
class Needs:
    """`owner` (a dotted path) has `attribute`, or, with `used_by`, the code of `owner`
    mentions `attribute` (for what an `__init__` sets on each instance, or to show that
    the function a patch relies on still reads what the patch changes)."""

    patch: str
    owner: str
    attribute: str
    used_by: bool = False

    def problem(self) -> str | None:
        """What is wrong, or None."""
        try:
            owner = resolve(self.owner)
        except (ImportError, AttributeError):
            return f"{self.owner} is gone (needed by {self.patch})"
        if self.used_by:
            if self.attribute not in names_used(owner):
                return f"{self.owner} no longer uses {self.attribute} (needed by {self.patch})"
        elif not hasattr(owner, self.attribute):
            return f"{self.owner} has no {self.attribute} (needed by {self.patch})"
        return None


def _has(patch: str, owner: str, *attributes: str) -> list[Needs]:
    return [Needs(patch, owner, attribute) for attribute in attributes]


def _uses(patch: str, owner: str, *attributes: str) -> list[Needs]:
    return [Needs(patch, owner, attribute, used_by=True) for attribute in attributes]


# Every Faust, aiokafka and mode attribute the worker patches or reads beyond their
# public API, by the module that relies on it.
REQUIRED: tuple[Needs, ...] = (
    # seek_guard: wraps the consumer's `seek_to_committed`, which `perform_seek` calls.
    *_has("seek_guard", _CONSUMER, "seek_to_committed", "stop_flow", "earliest_offsets"),
    *_has("seek_guard", _CONSUMER, "seek_wait", "assignment"),
    *_uses("seek_guard", "faust.transport.consumer.Consumer.perform_seek", "seek_to_committed"),
    # eager_delivery: replaces `wait_first`, which the fetcher calls per record.
    *_has("eager_delivery", _CONSUMER, "wait_first", "should_stop"),
    *_uses("eager_delivery", "faust.transport.consumer.Consumer.__init__", "suspend_flow"),
    *_uses("eager_delivery", "faust.transport.consumer.Consumer._drain_messages", "wait_first"),
    *_has("eager_delivery", "mode.services.WaitResults", "done", "results", "stopped"),
    *_has("eager_delivery", "asyncio.Future", "_asyncio_future_blocking"),
    # fetch_wait: wraps the thread's `_create_consumer`, sets `_fetch_max_wait_ms`.
    *_uses("fetch_wait", "faust.transport.consumer.ThreadDelegateConsumer.__init__", "_thread"),
    *_has("fetch_wait", _THREAD, "_create_consumer"),
    *_uses("fetch_wait", f"{_THREAD}.on_start", "_create_consumer"),
    *_uses("fetch_wait", f"{_KAFKA_CONSUMER}.__init__", "_fetch_max_wait_ms"),
    *_uses("fetch_wait", f"{_KAFKA_CONSUMER}.start", "_fetch_max_wait_ms"),
    # commit_bound: wraps the thread's `_commit`, which its `commit` runs.
    *_has("commit_bound", _THREAD, "_commit"),
    *_uses("commit_bound", f"{_THREAD}.commit", "_commit"),
    # changelog_ends: replaces the consumer's `highwaters`, which table recovery asks.
    *_has("changelog_ends", _CONSUMER, "highwaters"),
    *_uses("changelog_ends", "faust.tables.recovery.Recovery._build_highwaters", "highwaters"),
    # lean_monitor: overrides the monitor's per-record hooks.
    *_has("lean_monitor", "faust.Monitor", "on_message_in", "on_message_out"),
    *_has("lean_monitor", "faust.Monitor", "on_stream_event_in", "on_stream_event_out"),
    *_has("lean_monitor", "faust.Monitor", "stream_inbound_time"),
    *_has("lean_monitor", "faust.App", "monitor"),
    # record_batches: aiokafka's partitioner and batch API.
    *_has("record_batches", "aiokafka.AIOKafkaProducer", "partitions_for"),
    *_uses("record_batches", "aiokafka.AIOKafkaProducer.__init__", "_partitioner", "_metadata"),
    *_uses("record_batches", "aiokafka.AIOKafkaProducer._partition", "_partitioner", "_metadata"),
    *_has("record_batches", "aiokafka.cluster.ClusterMetadata", "partitions_for_topic"),
    *_has("record_batches", "aiokafka.cluster.ClusterMetadata", "available_partitions_for_topic"),
    *_has("record_batches", "aiokafka.AIOKafkaProducer", "create_batch", "send_batch"),
    # no_auto_create: replaces the `MetadataRequest` aiokafka's client builds requests from.
    *_has("no_auto_create", "aiokafka.client", "MetadataRequest"),
    *_uses("no_auto_create", "aiokafka.client.AIOKafkaClient._metadata_update", "MetadataRequest"),
    *_uses(
        "no_auto_create",
        "aiokafka.protocol.metadata.MetadataRequest.build",
        "_allow_auto_topic_creation",
    ),
    # prompt_batches: fills its batches as `Stream.take_events` does, from the stream.
    *_has("prompt_batches", "faust.Stream", "add_processor", "_enable_passive"),
    *_uses("prompt_batches", "faust.streams.Stream.__init__", "_processors"),
    *_has("prompt_batches", "faust.Stream", "enable_acks", "ack", "wait", "wait_for_stopped"),
    *_has("prompt_batches", "faust.Channel", "queue"),
    *_uses("prompt_batches", "faust.streams.Stream._py_aiter", "queue", "get_nowait"),
    *_uses(
        "prompt_batches",
        "faust.streams.Stream.take_events",
        "add_processor",
        "_processors",
        "_enable_passive",
        "enable_acks",
        "current_event",
    ),
    # held_batches: the same hooks, for the score stage's overlapped batches.
    *_has("held_batches", "faust.Stream", "add_processor", "_enable_passive"),
    *_uses("held_batches", "faust.streams.Stream.__init__", "_processors"),
    *_has("held_batches", "faust.Stream", "enable_acks", "ack", "wait", "wait_for_stopped"),
    # table_start: replaces the table manager's `on_start` (upstream: a sleep, then these),
    # which the conductor waits for before it subscribes.
    *_has("table_start", "faust.tables.TableManager", "_update_channels", "recovery"),
    *_has("table_start", "faust.tables.TableManager", "should_stop", "on_start"),
    *_uses("table_start", "faust.tables.TableManager.on_start", "sleep", "_update_channels"),
    *_uses("table_start", "faust.tables.TableManager.on_start", "recovery", "start"),
    *_uses(
        "table_start",
        "faust.transport.conductor.Conductor._subscriber",
        "wait_until_tables_registered",
    ),
    # internals: what the stages read.
    *_has("internals.current_event", "faust.streams", "_current_event"),
    *_uses("internals.current_event", "faust.streams.current_event", "_current_event"),
    *_has("internals.kafka_consumer", _THREAD, "_ensure_consumer"),
    *_has("internals.kafka_consumer", _KAFKA_CONSUMER, "partitions_for_topic"),
    *_has("internals.kafka_producer", _PRODUCER, "_ensure_producer"),
    *_uses(
        "internals.stream_offsets",
        "faust.transport.consumer.Consumer.__init__",
        "_committed_offset",
        "_read_offset",
    ),
    # worker.stream.durable_table: keeps the future of each changelog write, and with a
    # `MarkWriter` encodes and sends it itself, returning the `FutureMessage` Faust reads.
    *_has("durable_table", "faust.Table", "send_changelog"),
    *_uses("durable_table", "faust.tables.table.Table.on_key_set", "send_changelog", "message"),
    *_has("durable_table", "faust.topics.Topic", "prepare_key", "prepare_value"),
    *_has("durable_table", "faust.types.tuples.PendingMessage", "channel", "partition", "topic"),
    *_uses("durable_table", "faust.types.tuples.FutureMessage.__init__", "message"),
)


class IncompatibleLibraries(UsageError):
    """faust-streaming, aiokafka or mode-streaming is not what the patches were written
    for; the message lists every problem. A `UsageError`: the command exits 3 with it."""

    def __init__(self, problems: Iterable[str]) -> None:
        self.problems = list(problems)
        super().__init__(
            "the installed Faust libraries do not match what worker/stream/faust_patches "
            "was tested with:\n  - "
            + "\n  - ".join(self.problems)
            + "\ninstall them from deploy/requirements.lock (`make install`)"
        )


def resolve(path: str) -> Any:
    """The module, class or function at dotted `path`."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: Any = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for name in parts[cut:]:
            found = getattr(found, name)
        return found
    raise ImportError(path)


def names_used(function: Any) -> set[str]:
    """The attribute and global names the code of `function` (and of the functions and
    comprehensions inside it) mentions; of a mode `Service.task`, its function's."""
    function = getattr(function, "fun", function)
    function = getattr(function, "__func__", function)
    function = getattr(function, "__wrapped__", function)
    code = getattr(function, "__code__", None)
    return set(_names(code)) if code is not None else set()


def _names(code: types.CodeType) -> Iterator[str]:
    yield from code.co_names
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            yield from _names(constant)


def version_problems(version_of: Callable[[str], str] = version) -> list[str]:
    """A line for each library that is missing or outside its tested range."""
    problems = []
    for name, tested in TESTED.items():
        try:
            installed = version_of(name)
        except PackageNotFoundError:
            problems.append(f"{name} is not installed (tested: {tested})")
            continue
        try:
            inside = Version(installed) in SpecifierSet(tested)
        except InvalidVersion:
            inside = False
        if not inside:
            problems.append(f"{name} {installed} is installed, outside the tested {tested}")
    return problems


def attribute_problems(required: Iterable[Needs] = REQUIRED) -> list[str]:
    """A line for each attribute a patch needs that is not there."""
    return [problem for need in required if (problem := need.problem()) is not None]


def check(version_of: Callable[[str], str] = version) -> None:
    """Raise `IncompatibleLibraries` unless the versions are in range and every
    attribute the patches need is there."""
    problems = version_problems(version_of) + attribute_problems()
    if problems:
        raise IncompatibleLibraries(problems)


__all__ = [
    "REQUIRED",
    "TESTED",
    "IncompatibleLibraries",
    "Needs",
    "attribute_problems",
    "check",
    "names_used",
    "resolve",
    "version_problems",
]
