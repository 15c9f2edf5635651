"""Shared base classes for the wire models."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class InputModel(BaseModel):
    """A model read from producers: strict about types, tolerant of extra keys."""

    model_config = ConfigDict(strict=True, extra="ignore", populate_by_name=True)


class PayloadModel(InputModel):
    """A payload (or part of one): unknown keys are kept in `model_extra`, so that a
    misspelt field can be reported instead of silently scored as missing."""

    model_config = ConfigDict(strict=True, extra="allow", populate_by_name=True)


class OutputModel(BaseModel):
    """A model scorestream writes: strict about types, no undeclared keys."""

    model_config = ConfigDict(strict=True, extra="forbid", populate_by_name=True)
