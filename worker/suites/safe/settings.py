"""The `safe` section of the configuration: SAFE v0 thresholds, weights and options."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, model_validator

from worker.settings_base import Section


class MetricThreshold(Section):
    pass_: float = Field(alias="pass", ge=0, le=1)
    review: float = Field(ge=0, le=1)

    @model_validator(mode="after")
    def _ordered(self) -> MetricThreshold:
        if self.review > self.pass_:
            raise ValueError("review threshold must not exceed pass threshold")
        return self


def _threshold(pass_: float, review: float) -> MetricThreshold:
    return MetricThreshold.model_validate({"pass": pass_, "review": review})


class SafeThresholds(Section):
    CR: MetricThreshold = Field(default_factory=lambda: _threshold(0.8, 0.5))
    AH: MetricThreshold = Field(default_factory=lambda: _threshold(1.0, 0.5))
    AC: MetricThreshold = Field(default_factory=lambda: _threshold(0.8, 0.5))


class SafeWeights(Section):
    CR: float = Field(default=1.0, ge=0)
    AH: float = Field(default=1.0, ge=0)
    AC: float = Field(default=1.0, ge=0)

    @model_validator(mode="after")
    def _positive_sum(self) -> SafeWeights:
        if self.CR + self.AH + self.AC <= 0:
            raise ValueError("weights must have a positive sum")
        return self


class SafeSettings(Section):
    thresholds: SafeThresholds = Field(default_factory=SafeThresholds)
    weights: SafeWeights = Field(default_factory=SafeWeights)
    strict_ah: bool = False
    report_dir: Path = Path("reports")
