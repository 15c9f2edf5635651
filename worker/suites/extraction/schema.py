"""DuEE-Fin event schemas (parsed from their JSONL lines) and the per-case schema
compliance check. Pure: the schema files are read by `schema_files`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from worker.settings_base import ConfigError
from worker.suites.extraction.normalize import label_text

# Event type -> allowed roles.
EventSchema = Mapping[str, frozenset[str]]
SchemaMode = Literal["syntax_only", "schema_strict"]


def schema_from_lines(lines: list[str], origin: str) -> dict[str, frozenset[str]]:
    """Parse DuEE-Fin JSONL lines `{"event_type", "role_list": [{"role"}]}`.

    Raises `ConfigError` naming `origin` and the line for anything malformed.
    """
    roles: dict[str, set[str]] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{origin}:{number}"
        try:
            entry = json.loads(line)
        except ValueError as exc:
            raise ConfigError(f"event schema {where}: not valid JSON: {exc}") from exc
        if not isinstance(entry, dict) or not isinstance(entry.get("event_type"), str):
            raise ConfigError(f"event schema {where}: needs a string 'event_type'")
        role_list = entry.get("role_list", [])
        if not isinstance(role_list, list) or not all(
            isinstance(item, dict) and isinstance(item.get("role"), str) for item in role_list
        ):
            raise ConfigError(f"event schema {where}: 'role_list' must be [{{'role': str}}]")
        known = roles.setdefault(entry["event_type"], set())
        known.update(item["role"] for item in role_list)
    return {event_type: frozenset(names) for event_type, names in roles.items()}


@dataclass(frozen=True)
class Compliance:
    """Whether a prediction complies, and the first violation when it does not."""

    compliant: bool
    reason: str | None = None


def _shown(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def check_compliance(items: list[Any], mode: SchemaMode, schema: EventSchema | None) -> Compliance:
    """Check predicted events in order; the first violation decides.

    An empty prediction (including a failed parse) is compliant. In `schema_strict` mode a
    type outside a given schema is `invalid_event_type:T`; a type with no known roles
    (also when no schema is given) is `unknown_event_roles:T`.
    """
    strict = mode == "schema_strict"
    for event in items:
        if not isinstance(event, dict):
            return Compliance(False, "event_not_dict")
        if "event_type" not in event:
            return Compliance(False, "missing_event_type")
        raw_type = event["event_type"]
        event_type = label_text(raw_type)
        if strict and schema is not None and event_type not in schema:
            return Compliance(False, f"invalid_event_type:{_shown(raw_type)}")
        arguments = event.get("arguments")
        if not isinstance(arguments, list):
            return Compliance(False, "missing_or_invalid_arguments")
        allowed = schema.get(event_type, frozenset()) if schema is not None else frozenset()
        if strict and not allowed:
            return Compliance(False, f"unknown_event_roles:{_shown(raw_type)}")
        for argument in arguments:
            if not isinstance(argument, dict):
                return Compliance(False, "argument_not_dict")
            if "role" not in argument or "argument" not in argument:
                return Compliance(False, "missing_role_or_argument")
            role = argument["role"]
            if strict and label_text(role) not in allowed:
                return Compliance(False, f"invalid_role:{_shown(raw_type)}|{_shown(role)}")
    return Compliance(True)
