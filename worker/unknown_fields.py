"""Payload fields nobody reads: a misspelt `respones` would otherwise be scored as an
empty response without a word.

Pure. Payload models keep unknown keys (`schemas._base.PayloadModel`); `unknown_fields`
lists them as dotted paths relative to the payload (`output.sumary`, `gold.0.evnet_type`),
and `with_unknown_fields` puts them into a result's `details.unknown_fields`.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace
from typing import Any

from pydantic import BaseModel, JsonValue

from worker.suites.base import Scored

DETAIL_KEY = "unknown_fields"
# Keys a native row of `scorestream score` may carry besides its payload's fields.
NATIVE_ROW_KEYS: frozenset[str] = frozenset({"id"})


def _walk(value: Any, prefix: str, found: list[str]) -> None:
    if isinstance(value, BaseModel):
        for key in sorted(value.model_extra or {}):
            found.append(f"{prefix}{key}")
        for name in type(value).model_fields:
            field = getattr(value, name)
            if isinstance(field, _NESTED):  # only models and lists can hold models
                _walk(field, f"{prefix}{name}.", found)
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            if isinstance(item, _NESTED):
                _walk(item, f"{prefix}{index}.", found)


_NESTED = (BaseModel, list, tuple)


def unknown_fields(payload: Any, ignore: Collection[str] = ()) -> list[str]:
    """Dotted paths of every key of `payload` (and of the models inside it) that is not a
    field of its model; top-level keys in `ignore` are not reported."""
    found: list[str] = []
    _walk(payload, "", found)
    return [path for path in found if path not in ignore]


def with_unknown_fields(scored: Scored, fields: Collection[str]) -> Scored:
    """`scored` with `details.unknown_fields` set, when there are any."""
    if not fields:
        return scored
    listed: list[JsonValue] = list(fields)
    return replace(scored, details={**scored.details, DETAIL_KEY: listed})


__all__ = ["DETAIL_KEY", "NATIVE_ROW_KEYS", "unknown_fields", "with_unknown_fields"]
