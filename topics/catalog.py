"""The topic catalog: every topic scorestream reads or writes, with its settings and schemas.

Also the name each catalog topic has in one deployment (`topic_names`) and the advisory key
of an input record (`record_key`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import orjson

from schemas.envelope import InputRecord
from schemas.outputs import Aggregate, CaseResult, DeadLetter, GateEvent

DAY_MS = 24 * 60 * 60 * 1000


@dataclass(frozen=True)
class TopicSpec:
    """One Kafka topic: name, layout, retention and the contract of its keys and values."""

    name: str
    partitions: int
    retention_ms: int | None
    cleanup_policy: str
    key_format: str
    value_schema: object
    description: str
    replication_factor: int = 1
    extra_config: dict[str, str] = field(default_factory=dict)

    def config(self) -> dict[str, str]:
        """Topic-level configs as Kafka expects them in CreateTopics."""
        cfg = {"cleanup.policy": self.cleanup_policy, **self.extra_config}
        if self.retention_ms is not None:
            cfg["retention.ms"] = str(self.retention_ms)
        return cfg


INPUT = "llm.responses.v1"
RESULTS = "llm.eval.results.v1"
AGGREGATES = "llm.eval.aggregates.v1"
GATES = "llm.eval.gates.v1"
DEAD_LETTERS = "llm.responses.v1.dlq"

DEFAULT_PARTITIONS = 4

# Each topic on the broker: partitions, retention in days, cleanup policy. Results and
# aggregates are compacted too: a newer value for a key (a window's final aggregate, a
# case's result scored again) replaces the older one.
_LAYOUT: dict[str, tuple[int, int, str]] = {
    INPUT: (DEFAULT_PARTITIONS, 7, "delete"),
    RESULTS: (DEFAULT_PARTITIONS, 30, "compact,delete"),
    AGGREGATES: (DEFAULT_PARTITIONS, 30, "compact,delete"),
    GATES: (1, 90, "delete"),
    DEAD_LETTERS: (1, 30, "delete"),
}

# Each topic's contract: the schema of its values, its keys and what it carries.
_CONTRACTS: dict[str, tuple[object, str, str]] = {
    INPUT: (
        InputRecord,
        "payload.session_id for alignment, id otherwise (advisory)",
        "Model responses and eval cases to score, one JSON envelope each.",
    ),
    RESULTS: (
        CaseResult,
        "{suite}:{id}; alignment sessions alignment:session:{session_id}",
        "One result per scored case, turn and closed alignment session.",
    ),
    AGGREGATES: (
        Aggregate,
        "{suite}|{segment}|{window_size}|{window_start}",
        "Windowed aggregates, updated as they change and once final.",
    ),
    GATES: (GateEvent, "{gate}|{segment}", "Gate state changes (firing / resolved)."),
    DEAD_LETTERS: (
        DeadLetter,
        "the input record's key",
        "Inputs that could not be scored, with the reason.",
    ),
}


def _spec(name: str) -> TopicSpec:
    partitions, retention_days, cleanup_policy = _LAYOUT[name]
    value_schema, key_format, description = _CONTRACTS[name]
    return TopicSpec(
        name=name,
        partitions=partitions,
        retention_ms=retention_days * DAY_MS,
        cleanup_policy=cleanup_policy,
        key_format=key_format,
        value_schema=value_schema,
        description=description,
    )


CATALOG: dict[str, TopicSpec] = {name: _spec(name) for name in _LAYOUT}


class ConfiguredNames(Protocol):
    """The name each catalog topic has in one deployment (`worker.config.TopicNames`)."""

    input: str
    results: str
    aggregates: str
    gates: str
    dead_letters: str


def topic_names(names: ConfiguredNames) -> dict[str, str]:
    """Catalog name -> configured name."""
    return {
        INPUT: names.input,
        RESULTS: names.results,
        AGGREGATES: names.aggregates,
        GATES: names.gates,
        DEAD_LETTERS: names.dead_letters,
    }


def record_key(line: bytes) -> bytes | None:
    """The advisory key of an input record (a JSON envelope): `payload.session_id` for
    alignment, `id` otherwise; None when the line has neither (or is not an envelope)."""
    try:
        data = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(data, dict):
        return None
    payload = data.get("payload")
    if data.get("suite") == "alignment" and isinstance(payload, dict):
        session = payload.get("session_id")
        if isinstance(session, str):
            return session.encode("utf-8")
    ident = data.get("id")
    return ident.encode("utf-8") if isinstance(ident, str) else None
