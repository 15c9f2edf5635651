"""The topic catalog: every topic scorestream reads or writes, with its settings and schemas."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import orjson
from pydantic import BaseModel

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

    def value_model_name(self) -> str:
        model = self.value_schema
        if isinstance(model, type) and issubclass(model, BaseModel):
            return model.__name__
        return "InputRecord"


INPUT = "llm.responses.v1"
RESULTS = "llm.eval.results.v1"
AGGREGATES = "llm.eval.aggregates.v1"
GATES = "llm.eval.gates.v1"
DEAD_LETTERS = "llm.responses.v1.dlq"

DEFAULT_PARTITIONS = 4

CATALOG: dict[str, TopicSpec] = {
    spec.name: spec
    for spec in (
        TopicSpec(
            name=INPUT,
            partitions=DEFAULT_PARTITIONS,
            retention_ms=7 * DAY_MS,
            cleanup_policy="delete",
            key_format="payload.session_id for alignment, id otherwise (advisory)",
            value_schema=InputRecord,
            description="Model responses and eval cases to score, one JSON envelope each.",
        ),
        TopicSpec(
            name=RESULTS,
            partitions=DEFAULT_PARTITIONS,
            retention_ms=30 * DAY_MS,
            cleanup_policy="compact,delete",
            key_format="{suite}:{id}; alignment sessions alignment:session:{session_id}",
            value_schema=CaseResult,
            description="One result per scored case, turn and closed alignment session.",
        ),
        TopicSpec(
            name=AGGREGATES,
            partitions=DEFAULT_PARTITIONS,
            retention_ms=30 * DAY_MS,
            cleanup_policy="compact,delete",
            key_format="{suite}|{segment}|{window_size}|{window_start}",
            value_schema=Aggregate,
            description="Windowed aggregates, updated as they change and once final.",
        ),
        TopicSpec(
            name=GATES,
            partitions=1,
            retention_ms=90 * DAY_MS,
            cleanup_policy="delete",
            key_format="{gate}|{segment}",
            value_schema=GateEvent,
            description="Gate state changes (firing / resolved).",
        ),
        TopicSpec(
            name=DEAD_LETTERS,
            partitions=1,
            retention_ms=30 * DAY_MS,
            cleanup_policy="delete",
            key_format="the input record's key",
            value_schema=DeadLetter,
            description="Inputs that could not be scored, with the reason.",
        ),
    )
}


def renamed(prefix: str = "", suffix: str = "") -> dict[str, str]:
    """Map each catalog name to a prefixed/suffixed name (isolated topics for tests)."""
    return {name: f"{prefix}{name}{suffix}" for name in CATALOG}


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
