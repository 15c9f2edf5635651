"""Typed settings: one YAML file, `SCORESTREAM_*` environment, command-line overrides.

Each suite's own section model lives in its package (`worker.suites.<suite>.settings`);
`Settings` gets one section per registered suite (`settings_model`), so a new suite
needs no change here. No suite package is imported here: the section models stay
importable from this module through the registry (`__getattr__`), and a suite's code
is handed its own section, never `Settings`.

Precedence: command-line flag > environment > file > defaults. The seed's `SAFE_V0_*`
variables and a `safe.config.json` (seed 004 section 6.2) are honoured too, at the
environment and file levels respectively. A bad value fails with a message naming its key.
"""

from __future__ import annotations

import json
import os
import sys
import types
import typing
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    create_model,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from schemas.envelope import SuiteName
from worker.gates.fields import metric_problem, stat_problem
from worker.input.validation_errors import error_lines
from worker.otlp.settings import EvaluationSinkSettings, SourcesSettings
from worker.settings_base import (
    SESSION_TEXT_BYTES,
    ConfigError,
    Duration,
    NonNegativeDuration,
    Section,
    format_duration,
    parse_duration,
)
from worker.stats import DEFAULT_RESERVOIR_SIZE
from worker.suites import registry
from worker.suites.base import SuiteSpec
from worker.windowing.windows import WindowConfig
from worker.yaml_files import read_yaml

# ---------------------------------------------------------------- gates


class GateConfig(Section):
    """A threshold on a windowed statistic, with a clear level for hysteresis."""

    name: str
    suite: SuiteName
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
    # How the shipped alert rules notify when the gate fires: `page` wakes someone up,
    # `ticket` is for working hours (label `severity` of alert ScorestreamGateFiring).
    severity: Literal["page", "ticket"] = "ticket"

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


# ---------------------------------------------------------------- limits


class LimitsSettings(Section):
    """Size bounds checked on input (a dead letter `field_too_large` names the field and
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
    session_text_bytes: int = Field(default=SESSION_TEXT_BYTES, ge=0)
    # An input record in flight when the worker stopped this many times is a dead letter
    # `poison_pill` instead of being processed again.
    poison_pill_attempts: int = Field(default=2, ge=0)  # 0: no poison-pill guard
    # Scoring one record (in a child process) may take this long; a record past it is
    # stopped and becomes a dead letter `scoring_timeout`.
    scoring_deadline: Duration = 2.0


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
    the tests shorten the group timeouts and take changelog ends from a fetch (Tansu
    reports wrong end offsets after multi-record batches, which breaks table recovery)."""

    partitions: int = Field(default=4, ge=1)
    session_timeout: Duration = 60.0
    rebalance_timeout: Duration = 60.0
    heartbeat_interval: Duration = 3.0
    commit_interval: Duration = 2.8
    producer_max_batch_size: int | None = Field(default=None, ge=1)
    # How long the producer waits to fill a batch; none by default. Each score batch
    # waits for its in-flight marks to reach the broker, so a linger is paid once per
    # batch (5 ms made that wait 8-9 ms instead of 4 and cost SAFE about 10% of its
    # throughput on Tansu), while a batch's results already leave as record batches.
    producer_linger: NonNegativeDuration = 0.0
    # How long a fetch may wait on the broker for data (None: Faust's 1.5 s). Apache Kafka
    # answers as soon as data arrives; Tansu only late in the wait, so the embedded broker
    # uses 0.1 s (see worker/stream/faust_patches/fetch_wait.py).
    fetch_max_wait: Duration | None = None
    # Table recovery asks a fetch for the end of each changelog partition instead of
    # trusting ListOffsets (wrong on the embedded Tansu broker after batched produces).
    exact_changelog_ends: bool = False
    tick_interval: Duration = 1.0  # how often watermark markers go out
    marker_heartbeat: Duration = 5.0  # re-send unchanged progress this often
    # The aggregation stage applies micro-batches and writes each changed window state
    # once per batch (write-back), before the batch is acknowledged.
    aggregate_batch_size: int = Field(default=500, ge=1)
    # The score stage reads micro-batches too: one in-flight mark (awaited) and one
    # contribution record per suite|segment per batch. Under a backlog 500 spent a third
    # of 200's time waiting for marks and counted SAFE and extraction faster on Tansu.
    score_batch_size: int = Field(default=500, ge=1)
    # The score stage takes a batch that is not full this long after its first case came.
    score_batch_wait: Duration = 0.05
    # Micro-batches the score stage has in hand: one finishing (published, folded), the
    # others begun (marked, with the children). Three against two: lower result p99 at
    # 1,500/s in four alternated pairs, at par in a backlog (README, "Latency").
    score_batches_in_hand: int = Field(default=3, ge=1)
    # The input first: while more input records than this wait for the score stage, the
    # session stage holds each of its micro-batches back until they are taken, for at
    # most `input_backlog_hold` (None: never). At a fixed 2,176 alignment turns/s the
    # gate's delay went from 21.9-70.7 s to 4.5-6.1 s (worker/stream/input_backlog.py).
    input_backlog: int | None = Field(default=1000, ge=0)
    input_backlog_hold: Duration = 1.0
    # Child processes that score SAFE and extraction cases under limits.scoring_deadline.
    scoring_processes: int = Field(default=1, ge=1)
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


class EarlyGateSettings(Section):
    """Provisional verdicts of the gates on a metric every turn has (alignment `safety`)
    while the session stage is behind (`worker.gates.early`). `sample`: the share of the
    session suite's records the score stage judges for those metrics as it reads them
    (0: none); `after`: how long a window closed by the input partitions' progress waits
    for its full aggregate before its gates judge the sample (an event with
    `provisional: true` and its `coverage`)."""

    sample: float = Field(default=0.1, ge=0, le=1)
    after: Duration = 5.0


class CoreSettings(BaseSettings):
    """The settings of the worker itself; `Settings` adds one section per suite."""

    model_config = SettingsConfigDict(
        env_prefix="SCORESTREAM_",
        env_nested_delimiter="__",
        extra="forbid",
        populate_by_name=True,
    )

    broker: str | None = None
    app_id: str = "scorestream"
    # The suites this worker scores (unset: every registered suite). A suite left out loads
    # nothing at start (alignment: no encoder, personas, safety patterns, classifier or
    # language identifier), and its records become `unknown_suite` dead letters.
    suites: list[str] | None = None
    topics: TopicNames = Field(default_factory=TopicNames)
    segment_by: list[str] = Field(default_factory=lambda: ["model"])
    windows: list[WindowConfig] = Field(
        default_factory=lambda: [WindowConfig(size=60.0), WindowConfig(size=3600.0, step=300.0)]
    )
    grace: Duration = 10.0
    idle_timeout: Duration = 10.0
    max_future_skew: Duration = 300.0
    # A stage whose watermark is further behind the wall clock than this is falling
    # behind (`scorestream_event_time_lag_seconds`, alert ScorestreamFallingBehind).
    max_event_time_lag: Duration = 120.0
    metrics_port: int = Field(default=9108, ge=0, le=65535)
    # Address of /metrics, /healthz and /readyz: every interface by default (a container's
    # port is reached from outside it); 127.0.0.1 keeps them on the machine.
    metrics_host: str = Field(default="0.0.0.0", pattern=r"^[A-Za-z0-9.:-]+$")
    log_format: Literal["text", "json"] = "text"
    max_record_bytes: int = Field(default=1024 * 1024, ge=1)
    dlq_max_raw_bytes: int = Field(default=64 * 1024, ge=1)
    aggregate_emit_interval: Duration = 1.0
    reservoir_size: int = Field(default=DEFAULT_RESERVOIR_SIZE, ge=2)
    embedding_batch_size: int = Field(default=256, ge=1)
    embedding_batch_wait: Duration = 0.05
    stream: StreamSettings = Field(default_factory=StreamSettings)
    limits: LimitsSettings = Field(default_factory=LimitsSettings)
    early_gates: EarlyGateSettings = Field(default_factory=EarlyGateSettings)
    kafka: KafkaSettings = Field(default_factory=KafkaSettings)
    # OpenTelemetry: GenAI spans in (`sources.otlp`), evaluation log records out.
    sources: SourcesSettings = Field(default_factory=SourcesSettings)
    evaluations: EvaluationSinkSettings | None = None

    @field_validator("suites")
    @classmethod
    def _known_suites(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        unknown = [name for name in value if registry.find(name) is None]
        if unknown:
            known = ", ".join(registry.names())
            raise ValueError(f"unknown suite {', '.join(unknown)} (known: {known})")
        if not value:
            raise ValueError("at least one suite (unset: every suite)")
        return list(dict.fromkeys(value))

    def scores(self, suite: str) -> bool:
        """Whether this configuration scores `suite` (`suites`, unset: every suite)."""
        return self.suites is None or suite in self.suites

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


def settings_model(specs: Iterable[SuiteSpec]) -> type[CoreSettings]:
    """The `Settings` model: the core settings, then each suite's section (its spec's
    `settings` model, under the suite's name, in name order), then `gates`."""
    sections: dict[str, Any] = {
        spec.name: (spec.settings, Field(default_factory=spec.settings))
        for spec in sorted(specs, key=lambda spec: spec.name)
    }
    return create_model(
        "Settings",
        __base__=CoreSettings,
        __doc__="Everything scorestream can be configured with.",
        __module__=__name__,
        **sections,
        gates=(list[GateConfig], Field(default_factory=list)),
    )


if TYPE_CHECKING:  # the built-in suites' sections, typed for the type checker
    from worker.suites.alignment.settings import (
        AlignmentSettings,
        AuthenticityWeights,
        EmbeddingSettings,
        JudgeSettings,
        OverallWeights,
        SeverityWeights,
        VerbosityLimits,
    )
    from worker.suites.extraction.settings import (
        CotConfig,
        ExtractionMetricsConfig,
        ExtractionSettings,
        HallucinationConfig,
        RelaxedConfig,
        SchemaModeConfig,
    )
    from worker.suites.safe.settings import (
        MetricThreshold,
        SafeSettings,
        SafeThresholds,
        SafeWeights,
    )

    class Settings(CoreSettings):
        """Everything scorestream can be configured with."""

        alignment: AlignmentSettings = Field(default_factory=AlignmentSettings)
        extraction: ExtractionSettings = Field(default_factory=ExtractionSettings)
        safe: SafeSettings = Field(default_factory=SafeSettings)
        gates: list[GateConfig] = Field(default_factory=list)

else:
    Settings = settings_model(registry.specs())


def __getattr__(name: str) -> Any:
    """A suite's section model (or one of its parts) by name, e.g. `SafeSettings`: looked
    up in the registered suites' settings modules, so this module imports none of them."""
    for spec in registry.specs():
        module = sys.modules[spec.settings.__module__]
        model = getattr(module, name, None)
        is_model = isinstance(model, type) and issubclass(model, BaseModel)
        if is_model and model.__module__ == module.__name__:
            return model
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
    data = read_yaml(path, f"cannot read config file {path}")
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
    return "\n".join(f"{origin}: {line}" for line in error_lines(exc, root="(root)"))


# The seed's SAFE_V0_* variables and safe.config.json layer onto the default thresholds.
_SAFE_DEFAULTS: dict[str, Any] = registry.get("safe").settings().model_dump(by_alias=True)


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
    file_values: dict[str, Any] = {"safe": {"thresholds": _SAFE_DEFAULTS["thresholds"]}}
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
    """`SCORESTREAM_A__B=v` as nested {a: {b: v}}. A value for a text setting (a string,
    a secret, a path) is taken as it is, so that a password such as `pass #word`, `yes`
    or `[x]` stays exactly that; any other value is YAML-decoded (numbers, booleans,
    lists), so `SCORESTREAM_SEGMENT_BY='[model, tenant]'` is a list."""
    values: dict[str, Any] = {}
    for name, raw in env.items():
        if not name.startswith("SCORESTREAM_"):
            continue
        path = tuple(part.lower() for part in name[len("SCORESTREAM_") :].split("__"))
        if path[0] not in Settings.model_fields:
            continue  # SCORESTREAM_CONFIG, judge API keys and other non-setting variables
        value: Any = raw
        if raw.strip() and not _is_text_setting(path):
            try:
                value = yaml.safe_load(raw)
            except yaml.YAMLError:
                value = raw
        _set_path(values, path, value)
    return values


_TEXT_TYPES = (str, SecretStr, Path)


def _is_text_setting(path: tuple[str, ...]) -> bool:
    """Whether the setting at `path` (section keys, then the field) holds text only."""
    annotation: Any = Settings
    keys = list(path)
    while keys:
        model = _model_in(annotation)
        if model is not None:
            key = keys.pop(0)
            field = model.model_fields.get(key) or next(
                (f for f in model.model_fields.values() if f.alias == key), None
            )
            if field is None:
                return False
            annotation = field.annotation
        elif typing.get_origin(annotation) is dict:
            keys.pop(0)  # a key of a mapping setting such as extraction.schemas
            annotation = typing.get_args(annotation)[1]
        else:
            return False  # a path below a scalar or a list
    members = [arg for arg in _union_members(annotation) if arg is not type(None)]
    return bool(members) and all(
        isinstance(arg, type) and issubclass(arg, _TEXT_TYPES) for arg in members
    )


def _union_members(annotation: Any) -> tuple[Any, ...]:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return typing.get_args(annotation)
    return (annotation,)


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The settings model `annotation` is (or holds as its one non-None member)."""
    for arg in _union_members(annotation):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return None


__all__ = [
    "AlignmentSettings",
    "AuthenticityWeights",
    "ConfigError",
    "CoreSettings",
    "CotConfig",
    "Duration",
    "EmbeddingSettings",
    "ExtractionMetricsConfig",
    "ExtractionSettings",
    "GateConfig",
    "HallucinationConfig",
    "JudgeSettings",
    "KafkaSettings",
    "LimitsSettings",
    "MetricThreshold",
    "OverallWeights",
    "RelaxedConfig",
    "SafeSettings",
    "SafeThresholds",
    "SafeWeights",
    "SchemaModeConfig",
    "Section",
    "Settings",
    "SeverityWeights",
    "StreamSettings",
    "TopicNames",
    "VerbosityLimits",
    "WindowConfig",
    "deep_merge",
    "format_duration",
    "load_settings",
    "parse_duration",
    "settings_model",
]
