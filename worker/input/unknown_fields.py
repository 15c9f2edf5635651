"""Payload fields nobody reads: a misspelt `respones` would otherwise be scored as an
empty response without a word.

Pure. Payload models keep unknown keys (`schemas._base.PayloadModel`); `unknown_fields`
lists them as dotted paths relative to the payload (`output.sumary`, `gold.0.evnet_type`),
and `with_unknown_fields` puts them into a result's `details.unknown_fields`.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Sequence
from dataclasses import replace
from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, JsonValue

from worker.suites.base import Scored

DETAIL_KEY = "unknown_fields"
# Keys a native row of `scorestream score` may carry besides its payload's fields.
NATIVE_ROW_KEYS: frozenset[str] = frozenset({"id"})


def _may_hold_models(annotation: Any) -> bool:
    """Whether a field of this type can hold a model, directly or in a list (unknown
    kinds of type are assumed to)."""
    if annotation is None or annotation is type(None):
        return False
    if isinstance(annotation, type):
        if issubclass(annotation, BaseModel | list | tuple):
            return True
        return not issubclass(annotation, str | int | float | bool | bytes | dict)
    origin = get_origin(annotation)
    if origin is Annotated:
        return _may_hold_models(get_args(annotation)[0])
    if origin is Literal:
        return False
    if origin in (Union, UnionType):
        return any(_may_hold_models(arg) for arg in get_args(annotation))
    if origin in (list, tuple, Sequence) and get_args(annotation):
        return any(_may_hold_models(arg) for arg in get_args(annotation) if arg is not ...)
    # the walk does not go into mappings
    return not (isinstance(origin, type) and issubclass(origin, dict))


@functools.cache
def _nested_fields(model: type[BaseModel]) -> tuple[str, ...]:
    """The fields of `model` that can hold models (the only ones worth walking into)."""
    return tuple(
        name for name, info in model.model_fields.items() if _may_hold_models(info.annotation)
    )


def _walk(value: Any, prefix: str, found: list[str]) -> None:
    if isinstance(value, BaseModel):
        for key in sorted(value.model_extra or {}):
            found.append(f"{prefix}{key}")
        for name in _nested_fields(type(value)):
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
