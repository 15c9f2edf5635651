"""Typed settings: one YAML file, `SCORESTREAM_*` environment, command-line overrides.

Precedence: command-line flag > environment > file > defaults. The seed's `SAFE_V0_*`
variables and a `safe.config.json` (seed 004 section 6.2) are honoured too, at the
environment and file levels respectively. A bad value fails with a message naming its key.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from worker.gate_fields import metric_problem, stat_problem

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


class ConfigError(ValueError):
    """A configuration problem, with the offending key in the message."""


def parse_duration(value: Any) -> float:
    """Seconds from `90`, `1.5`, `250ms`, `60s`, `5m`, `1h` or `1d`."""
    if isinstance(value, bool):
        raise ValueError("a duration is a number of seconds or a string like '5m'")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str) and (match := _DURATION.match(value)):
        seconds = float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
    else:
        raise ValueError(f"not a duration: {value!r} (use e.g. 30s, 5m, 1h)")
    if seconds <= 0:
        raise ValueError("a duration must be positive")
    return seconds


def format_duration(seconds: float) -> str:
    """Shortest exact spelling of a duration: 60 -> '1m', 3600 -> '1h', 10 -> '10s'."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{round(seconds * 1000)}ms"


Duration = Annotated[float, BeforeValidator(parse_duration)]


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


# ---------------------------------------------------------------- windows and gates


class WindowConfig(Section):
    """A tumbling (`step` unset) or hopping window over event time."""

    size: Duration
    step: Duration | None = None

    @model_validator(mode="after")
    def _step_divides(self) -> WindowConfig:
        if self.step is not None and (self.step > self.size or self.size % self.step):
            raise ValueError("step must be at most size and divide it")
        return self

    @property
    def name(self) -> str:
        """Label used in topic keys and Prometheus: '1m' or '1h/5m'."""
        from worker.windows import window_name  # (worker.windows imports this module)

        return window_name(self.size, self.step)


class GateConfig(Section):
    """A threshold on a windowed statistic, with a clear level for hysteresis."""

    name: str
    suite: Literal["alignment", "extraction", "safe"]
    metric: str
    stat: Literal["mean", "min", "max", "std", "ci_low", "ci_high", "rate", "count"] = Field(
        default="mean", validate_default=True
    )
    op: Literal["<", "<=", ">", ">="] = "<"
    threshold: float
    clear: float | None = None
    window: Duration = 300.0
    min_count: int = Field(default=1, ge=1)
    # A firing gate whose segment has had no cases for this long (event time) resolves
    # with reason "no_data"; default three window lengths.
    stale_after: Duration | None = None

    @field_validator("metric")
    @classmethod
    def _metric_of_the_suite(cls, metric: str, info: ValidationInfo) -> str:
        suite = info.data.get("suite")
        problem = None if suite is None else metric_problem(suite, metric)
        if problem:
            raise ValueError(problem)
        return metric

    @field_validator("stat")
    @classmethod
    def _stat_of_the_metric(cls, stat: str, info: ValidationInfo) -> str:
        suite, metric = info.data.get("suite"), info.data.get("metric")
        problem = None if suite is None or metric is None else stat_problem(suite, metric, stat)
        if problem:
            raise ValueError(problem)
        return stat

    @property
    def stale_after_s(self) -> float:
        """Seconds without cases after which a firing gate resolves (`no_data`)."""
        return self.stale_after if self.stale_after is not None else 3 * self.window

    @model_validator(mode="after")
    def _clear_on_the_safe_side(self) -> GateConfig:
        if self.clear is None:
            return self
        if self.op in ("<", "<=") and self.clear < self.threshold:
            raise ValueError("clear must be >= threshold for a '<' gate")
        if self.op in (">", ">=") and self.clear > self.threshold:
            raise ValueError("clear must be <= threshold for a '>' gate")
        return self


# ---------------------------------------------------------------- safe


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


# ---------------------------------------------------------------- extraction


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


# ---------------------------------------------------------------- alignment


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
    """An OpenAI-compatible chat-completions safety judge."""

    base_url: str
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


class EmbeddingSettings(Section):
    """How all-MiniLM-L6-v2 runs. `onnx`: an ONNX Runtime export of the shipped weights,
    made once into `cache_dir` (default `~/.cache/scorestream/onnx`); torch is the fallback
    when onnxruntime is missing or the export fails. `int8` (onnx only) is about twice as
    fast again but moves the vectors (see `bench/embedding.py`). `threads` unset: all
    cores. `batch_size`: texts per forward pass inside one encode call."""

    backend: Literal["onnx", "torch"] = "onnx"
    precision: Literal["fp32", "int8"] = "fp32"
    threads: int | None = Field(default=None, ge=1)
    batch_size: int = Field(default=32, ge=1)
    cache_dir: Path | None = None

    @model_validator(mode="after")
    def _int8_needs_onnx(self) -> EmbeddingSettings:
        if self.precision == "int8" and self.backend != "onnx":
            raise ValueError("precision int8 needs backend onnx")
        return self


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
    embedding: EmbeddingSettings = Field(default_factory=EmbeddingSettings)


# ---------------------------------------------------------------- limits


class LimitsSettings(Section):
    """Size bounds checked at intake (a dead letter `field_too_large` names the field and
    the limit) and on everything the worker produces (`output_too_large`). Byte counts are
    of the UTF-8 encoding."""

    id_bytes: int = Field(default=512, ge=1)
    model_bytes: int = Field(default=256, ge=1)
    label_count: int = Field(default=64, ge=0)
    label_key_bytes: int = Field(default=128, ge=1)
    label_value_bytes: int = Field(default=256, ge=1)
    text_bytes: int = Field(default=256 * 1024, ge=1)  # any one text field of a payload
    list_items: int = Field(default=10_000, ge=1)  # any one list of a payload
    session_turns: int = Field(default=500, ge=1)  # turns of a whole-session record
    turn_index: int = Field(default=1_000_000, ge=1)
    # The producer's max.request.size: every produced record (key + value) must fit.
    max_output_bytes: int = Field(default=1_000_000, ge=1024)
    # A session's changelog value stays under this; a session reaching it is closed.
    session_state_bytes: int = Field(default=768 * 1024, ge=16 * 1024)
    # Stored text per session for the judge transcript (vectors and scores are kept whole).
    session_text_bytes: int = Field(default=128 * 1024, ge=0)
    # An input record in flight when the worker stopped this many times is a dead letter
    # `poison_pill` instead of being processed again.
    poison_pill_attempts: int = Field(default=2, ge=0)  # 0: no poison-pill guard


# ---------------------------------------------------------------- root


class TopicNames(Section):
    """Topic names; tests and multi-tenant deployments change them."""

    input: str = "llm.responses.v1"
    results: str = "llm.eval.results.v1"
    aggregates: str = "llm.eval.aggregates.v1"
    gates: str = "llm.eval.gates.v1"
    dead_letters: str = "llm.responses.v1.dlq"


class StreamSettings(Section):
    """Kafka client and Faust tuning. Defaults suit Apache Kafka; the embedded broker and
    the tests shorten the group timeouts and keep one record per produce batch (Tansu
    reports wrong end offsets after multi-record batches, which breaks table recovery)."""

    partitions: int = Field(default=4, ge=1)
    session_timeout: Duration = 60.0
    rebalance_timeout: Duration = 60.0
    heartbeat_interval: Duration = 3.0
    commit_interval: Duration = 2.8
    producer_max_batch_size: int | None = Field(default=None, ge=1)
    # How long the producer waits to fill a batch: without it every send while the
    # sender is idle is a request of its own (results, contributions, changelogs).
    producer_linger: Duration = 0.005
    # Table recovery asks a fetch for the end of each changelog partition instead of
    # trusting ListOffsets (wrong on the embedded Tansu broker after batched produces).
    exact_changelog_ends: bool = False
    tick_interval: Duration = 1.0  # how often watermark markers go out
    marker_heartbeat: Duration = 5.0  # re-send unchanged progress this often
    # The aggregation stage applies micro-batches and writes each changed window state
    # once per batch (write-back), before the batch is acknowledged.
    aggregate_batch_size: int = Field(default=500, ge=1)
    # The score stage reads micro-batches too: one in-flight mark and one contribution
    # record per suite|segment per batch.
    score_batch_size: int = Field(default=200, ge=1)
    score_batch_wait: Duration = 0.05
    aggregate_batch_wait: Duration = 0.2
    connect_timeout: Duration = 15.0


class KafkaSettings(Section):
    """Broker security and durability, for the worker and every command that talks to
    Kafka. Secrets can come from the environment: `SCORESTREAM_KAFKA__SASL_PASSWORD`,
    `SCORESTREAM_KAFKA__SSL_KEY_PASSWORD`."""

    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    ssl_cafile: Path | None = None
    ssl_certfile: Path | None = None
    ssl_keyfile: Path | None = None
    ssl_key_password: SecretStr | None = None
    ssl_check_hostname: bool = True
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = None
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    replication_factor: int = Field(default=1, ge=1)
    min_insync_replicas: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _consistent(self) -> KafkaSettings:
        uses_sasl = self.security_protocol.startswith("SASL_")
        uses_tls = self.security_protocol.endswith("SSL")
        if uses_sasl and not (self.sasl_mechanism and self.sasl_username and self.sasl_password):
            raise ValueError(
                f"security_protocol {self.security_protocol} needs sasl_mechanism, "
                "sasl_username and sasl_password"
            )
        if not uses_sasl and self.sasl_mechanism:
            raise ValueError("sasl_mechanism needs security_protocol SASL_PLAINTEXT or SASL_SSL")
        tls_files = (self.ssl_cafile, self.ssl_certfile, self.ssl_keyfile)
        if not uses_tls and any(tls_files):
            raise ValueError("ssl_* files need security_protocol SSL or SASL_SSL")
        if (self.ssl_certfile is None) != (self.ssl_keyfile is None):
            raise ValueError("ssl_certfile and ssl_keyfile go together")
        if self.min_insync_replicas and self.min_insync_replicas > self.replication_factor:
            raise ValueError("min_insync_replicas must not exceed replication_factor")
        return self


class Settings(BaseSettings):
    """Everything scorestream can be configured with."""

    model_config = SettingsConfigDict(
        env_prefix="SCORESTREAM_",
        env_nested_delimiter="__",
        extra="forbid",
        populate_by_name=True,
    )

    broker: str | None = None
    app_id: str = "scorestream"
    topics: TopicNames = Field(default_factory=TopicNames)
    segment_by: list[str] = Field(default_factory=lambda: ["model"])
    windows: list[WindowConfig] = Field(
        default_factory=lambda: [WindowConfig(size=60.0), WindowConfig(size=3600.0, step=300.0)]
    )
    grace: Duration = 10.0
    idle_timeout: Duration = 10.0
    max_future_skew: Duration = 300.0
    metrics_port: int = Field(default=9108, ge=0, le=65535)
    log_format: Literal["text", "json"] = "text"
    max_record_bytes: int = Field(default=1024 * 1024, ge=1)
    dlq_max_raw_bytes: int = Field(default=64 * 1024, ge=1)
    aggregate_emit_interval: Duration = 1.0
    reservoir_size: int = Field(default=128, ge=2)
    embedding_batch_size: int = Field(default=64, ge=1)
    embedding_batch_wait: Duration = 0.05
    stream: StreamSettings = Field(default_factory=StreamSettings)
    limits: LimitsSettings = Field(default_factory=LimitsSettings)
    kafka: KafkaSettings = Field(default_factory=KafkaSettings)
    alignment: AlignmentSettings = Field(default_factory=AlignmentSettings)
    extraction: ExtractionSettings = Field(default_factory=ExtractionSettings)
    safe: SafeSettings = Field(default_factory=SafeSettings)
    gates: list[GateConfig] = Field(default_factory=list)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Layering (file < env < flags) is done by `load_settings`, which also reads the
        # seed's SAFE_V0_* variables; the model itself only validates what it is given.
        return (init_settings,)


# ---------------------------------------------------------------- loading

SAFE_V0_ENV: dict[str, tuple[str, ...]] = {
    "SAFE_V0_CR_PASS": ("thresholds", "CR", "pass"),
    "SAFE_V0_CR_REVIEW": ("thresholds", "CR", "review"),
    "SAFE_V0_AH_PASS": ("thresholds", "AH", "pass"),
    "SAFE_V0_AH_REVIEW": ("thresholds", "AH", "review"),
    "SAFE_V0_AC_PASS": ("thresholds", "AC", "pass"),
    "SAFE_V0_AC_REVIEW": ("thresholds", "AC", "review"),
    "SAFE_V0_AH_STRICT": ("strict_ah",),
    "SAFE_V0_REPORT_DIR": ("report_dir",),
}


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Recursively merge `override` into a copy of `base` (override wins)."""
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _set_path(target: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for key in path[:-1]:
        target = target.setdefault(key, {})
    target[path[-1]] = value


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections")
    return data


def _read_safe_config_json(path: Path) -> dict[str, Any]:
    """The seed's `safe.config.json` (camelCase `strictAH`) as a `safe` section."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{path}: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be an object")
    section: dict[str, Any] = {}
    for key in ("thresholds", "weights"):
        if key in data:
            section[key] = data[key]
    if "strictAH" in data:
        section["strict_ah"] = data["strictAH"]
    return section


def _safe_v0_env(environ: dict[str, str]) -> dict[str, Any]:
    section: dict[str, Any] = {}
    for name, path in SAFE_V0_ENV.items():
        if name in environ:
            _set_path(section, path, environ[name])
    return section


def _format_error(exc: ValidationError, origin: str) -> str:
    lines = []
    for err in exc.errors():
        key = ".".join(str(part) for part in err["loc"]) or "(root)"
        lines.append(f"{origin}: {key}: {err['msg']}")
    return "\n".join(lines)


def load_settings(
    config_file: str | Path | None = None,
    overrides: dict[str, Any] | None = None,
    environ: dict[str, str] | None = None,
    safe_config_json: str | Path | None = None,
) -> Settings:
    """Build settings from defaults < files < environment < `overrides` (flags).

    `config_file` falls back to `SCORESTREAM_CONFIG`; `safe.config.json` is read from the
    working directory when present (or from `safe_config_json`).
    """
    env = dict(os.environ if environ is None else environ)
    path = config_file or env.get("SCORESTREAM_CONFIG")
    # Start from the default thresholds so that one overridden level keeps the other.
    file_values: dict[str, Any] = {
        "safe": {"thresholds": SafeThresholds().model_dump(by_alias=True)}
    }
    safe_json = Path(safe_config_json) if safe_config_json else Path("safe.config.json")
    if safe_json.is_file():
        file_values = deep_merge(file_values, {"safe": _read_safe_config_json(safe_json)})
    origin = "configuration"
    if path:
        origin = str(path)
        file_values = deep_merge(file_values, _read_yaml(Path(path)))
    safe_env = _safe_v0_env(env)
    layered = deep_merge(file_values, {"safe": safe_env} if safe_env else {})
    try:
        return Settings.model_validate(
            deep_merge(deep_merge(layered, _env_values(env)), overrides or {})
        )
    except ValidationError as exc:
        raise ConfigError(_format_error(exc, origin)) from exc


def _env_values(env: dict[str, str]) -> dict[str, Any]:
    """`SCORESTREAM_A__B=v` as nested {a: {b: v}} (YAML-decoded scalars and lists)."""
    values: dict[str, Any] = {}
    for name, raw in env.items():
        if not name.startswith("SCORESTREAM_"):
            continue
        path = tuple(part.lower() for part in name[len("SCORESTREAM_") :].split("__"))
        if path[0] not in Settings.model_fields:
            continue  # SCORESTREAM_CONFIG, judge API keys and other non-setting variables
        try:
            value = yaml.safe_load(raw) if raw.strip() else raw
        except yaml.YAMLError:
            value = raw
        _set_path(values, path, value)
    return values
