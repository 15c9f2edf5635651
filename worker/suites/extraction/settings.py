"""The `extraction` section of the configuration: event schemas and metric modes."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from worker.settings_base import Section


class RelaxedConfig(Section):
    match_mode: Literal["include_or_char_overlap", "span_iou"] = "include_or_char_overlap"
    char_overlap_threshold: float = Field(default=0.5, ge=0, le=1)
    span_iou_threshold: float = Field(default=0.5, ge=0, le=1)


class SchemaModeConfig(Section):
    mode: Literal["syntax_only", "schema_strict"] = "schema_strict"


class HallucinationConfig(Section):
    match_mode: Literal["normalized_substring", "exact_span"] = "normalized_substring"


class CotConfig(Section):
    enabled: bool = True
    require_thought_block: bool = True
    mode: Literal["strict_span", "weak_mention"] = "strict_span"


class ExtractionMetricsConfig(Section):
    relaxed: RelaxedConfig = Field(default_factory=RelaxedConfig)
    schema_: SchemaModeConfig = Field(default_factory=SchemaModeConfig, alias="schema")
    hallucination: HallucinationConfig = Field(default_factory=HallucinationConfig)
    cot: CotConfig = Field(default_factory=CotConfig)


class ExtractionSettings(Section):
    schemas: dict[str, Path] = Field(default_factory=dict)
    default_schema: str | None = None
    metrics: ExtractionMetricsConfig = Field(default_factory=ExtractionMetricsConfig)
    protocol_version: str = "1.0"
    metrics_version: str = "2.0"

    @model_validator(mode="after")
    def _default_is_known(self) -> ExtractionSettings:
        if self.default_schema is not None and self.default_schema not in self.schemas:
            raise ValueError(f"default_schema {self.default_schema!r} is not in schemas")
        return self
