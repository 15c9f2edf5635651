"""The `alignment` section of the configuration: personas, weights, judge, embedding."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from worker.settings_base import Duration, Section


class AuthenticityWeights(Section):
    style_sim: float = Field(default=0.6, ge=0)
    traits: float = Field(default=0.25, ge=0)
    lexicon: float = Field(default=0.15, ge=0)


class OverallWeights(Section):
    """The seed's `scoring.*_weight` keys."""

    authenticity_weight: float = Field(default=0.5, ge=0)
    safety_weight: float = Field(default=0.3, ge=0)
    stability_weight: float = Field(default=0.2, ge=0)


class SeverityWeights(Section):
    high: float = Field(default=0.5, ge=0)
    medium: float = Field(default=0.2, ge=0)
    low: float = Field(default=0.1, ge=0)


class VerbosityLimits(Section):
    concise_max_words: int = Field(default=60, ge=1)
    balanced_max_words: int = Field(default=180, ge=1)


class JudgeSettings(Section):
    """An OpenAI-compatible chat-completions safety judge.

    `base_url` must be `https://` (the API key travels as a bearer token) unless
    `allow_insecure_http` is set. `response_format` asks for structured output
    (`json_schema`: the verdict's JSON Schema; `json_object`; `none` for endpoints that
    support neither); the answer is validated strictly whatever was asked. Responses over
    `max_response_bytes` are unusable. `on_error`: what an unusable verdict does to the
    session (`review`: its label is at least Review; `ignore`: the other safety scores
    stand); either way it is counted and recorded on the session (`judge: error`)."""

    base_url: str
    allow_insecure_http: bool = False
    on_error: Literal["ignore", "review"] = "review"
    response_format: Literal["json_schema", "json_object", "none"] = "json_schema"
    max_response_bytes: int = Field(default=64 * 1024, ge=1024, le=16 * 1024 * 1024)
    model: str
    api_key_env: str = "SCORESTREAM_JUDGE_API_KEY"
    prompt_file: Path | None = None
    concurrency: int = Field(default=4, ge=1)
    timeout: Duration = 30.0
    retries: int = Field(default=2, ge=0)
    backoff: Duration = 0.5
    max_per_minute: int | None = Field(default=None, ge=1)
    max_total: int | None = Field(default=None, ge=0)
    cache_size: int = Field(default=10_000, ge=0)  # verdicts kept (least recently used go)

    @model_validator(mode="after")
    def _https_unless_allowed(self) -> JudgeSettings:
        scheme, _, rest = self.base_url.partition("://")
        scheme = scheme.lower()
        if scheme not in {"http", "https"} or not rest.strip("/"):
            raise ValueError("base_url must be an https:// URL with a host")
        if scheme == "http" and not self.allow_insecure_http:
            raise ValueError(
                "base_url is http://: the API key would travel in clear; use https:// "
                "or set allow_insecure_http: true (a judge on loopback, say)"
            )
        return self


class EmbeddingSettings(Section):
    """How all-MiniLM-L6-v2 runs. `onnx`: an ONNX Runtime export of the shipped weights,
    made once into `cache_dir` (default `~/.cache/scorestream/onnx`); torch is the fallback
    when onnxruntime is missing or the export fails. `int8` (onnx only) is about twice as
    fast again but moves the vectors (see `bench/embedding.py`). `threads` unset: all
    cores. `batch_size`: texts per forward pass inside one encode call. `max_lag`: how far
    (seconds from the score stage receiving a turn) the session stage may fall behind
    before it embeds only the turns it can afford: the others are scored for safety alone
    (`details.embedding: sampled_out`, `scorestream_embeddings_skipped_total`), so safety
    keeps pace with any input rate; null embeds every turn however late that makes
    safety."""

    backend: Literal["onnx", "torch"] = "onnx"
    precision: Literal["fp32", "int8"] = "fp32"
    threads: int | None = Field(default=None, ge=1)
    batch_size: int = Field(default=32, ge=1)
    cache_dir: Path | None = None
    max_lag: Duration | None = 2.0

    @model_validator(mode="after")
    def _int8_needs_onnx(self) -> EmbeddingSettings:
        if self.precision == "int8" and self.backend != "onnx":
            raise ValueError("precision int8 needs backend onnx")
        return self


SAFETY_CLASSIFIER_THRESHOLD = 0.548  # 5-fold CV on the training replies: <= 4 % benign flagged


class SafetyClassifierSettings(Section):
    """The offline safety classifier (`safety_classifier.py`). On by default; `enabled:
    false` leaves safety the seed's keyword (and judge) value exactly. `threshold`: the
    harm probability from which a sentence is flagged."""

    enabled: bool = True
    threshold: float = Field(default=SAFETY_CLASSIFIER_THRESHOLD, gt=0, lt=1)


class AlignmentSettings(Section):
    personas_dir: Path | None = None
    safety_patterns: Path | None = None
    weights: AuthenticityWeights = Field(default_factory=AuthenticityWeights)
    scoring: OverallWeights = Field(default_factory=OverallWeights)
    severity_weights: SeverityWeights = Field(default_factory=SeverityWeights)
    verbosity: VerbosityLimits = Field(default_factory=VerbosityLimits)
    max_expected_variance: float = Field(default=0.1, gt=0)
    session_idle_timeout: Duration = 300.0
    max_turns_per_session: int = Field(default=200, ge=2)
    judge: JudgeSettings | None = None
    safety_classifier: SafetyClassifierSettings = Field(default_factory=SafetyClassifierSettings)
    embedding: EmbeddingSettings = Field(default_factory=EmbeddingSettings)
