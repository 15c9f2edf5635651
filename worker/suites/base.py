"""Contracts shared by the scoring suites.

A suite is a set of pure functions (no I/O, no Kafka, no clock):
- a scorer turns one case (or turn, or session) into a `Scored`;
- a `SuiteAggregator` folds `Scored` values into mergeable, JSON-compatible state
  (initialise / update / merge / figures), used alike by windows and batch reports;
- a `BatchScorer` drives `scorestream score` for one suite and returns a `BatchReport`;
- a `SuiteSpec` names all of these for one suite, with its metric metadata
  (`MetricInfo`); `worker.suites.registry` lists the specs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import BaseModel, JsonValue
from rich.console import Console

from schemas.outputs import CountValue, Grade, Label, Versions
from worker.settings_base import SESSION_TEXT_BYTES

SCORER_VERSION = "0.1.0"


@dataclass(frozen=True)
class Scored:
    """The outcome of scoring one case, turn or session."""

    scores: Mapping[str, float | None]
    label: Label | None = None
    grade: Grade | None = None
    details: dict[str, JsonValue] = field(default_factory=dict)
    counts: dict[str, CountValue] = field(default_factory=dict)


# Aggregate state is plain JSON-compatible data so that tables can persist it.
State = dict[str, Any]


class SuiteAggregator(Protocol):
    """Folds the `Scored` values of one suite into mergeable state.

    One contract for every suite (checked by `tests/test_aggregator_contract.py`): the
    state is JSON-compatible counts and sums; `update` and `merge` return a new state and
    never change their arguments (a window store may still hold them); `initialise()` is
    the identity of `merge`; folding two parts and merging equals folding everything.
    """

    def initialise(self) -> State: ...

    def update(self, state: State, scored: Scored) -> State: ...

    def merge(self, left: State, right: State) -> State: ...

    def figures(self, state: State) -> dict[str, Any]:
        """The suite's batch figures, shaped as its `schemas.outputs` *Figures model."""
        ...


@dataclass(frozen=True)
class BatchItem:
    """One input row of `scorestream score`, already validated into a payload."""

    id: str
    payload: Any
    model: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    source: str = ""  # "file:line", for messages
    unknown_fields: tuple[str, ...] = ()  # payload keys no model field reads
    # The case scorer's result when the `score` command already scored the row (under
    # the deadline): a batch scorer uses it instead of scoring the row again.
    scored: Scored | None = None


class BatchReport(Protocol):
    """The outcome of scoring a batch offline."""

    def to_json(self) -> dict[str, Any]: ...

    def render_console(self, console: Console, verbose: bool = False) -> None: ...

    def to_markdown(self) -> str: ...

    def exit_code(self) -> int:
        """0 all Pass (or nothing failed), 1 any Fail, 2 any Review and no Fail."""
        ...

    def report_stem(self) -> str:
        """File name stem for reports written without `--output`."""
        ...


class BatchScorer(Protocol):
    """Drives `scorestream score` for one suite.

    Made by the suite's `make_batch_scorer(section, options: BatchOptions)` from its own
    settings section.
    """

    def native_payload(self, row: dict[str, Any]) -> Any:
        """Validate a native row of this suite into its payload model.

        Raises `pydantic.ValidationError` or `ValueError` naming the offending field.
        """
        ...

    def native_id(self, row: dict[str, Any], fallback: str) -> str:
        """The case id of a native row (`fallback` is "file:line")."""
        ...

    def score(self, items: list[BatchItem]) -> BatchReport: ...


@dataclass(frozen=True)
class BatchOptions:
    """Command-line options of `scorestream score` that suites may use, and the generic
    limits a suite needs besides its own section."""

    strict_ah: bool = False
    concern: str | None = None
    judge: bool = False
    verbose: bool = False
    session_text_bytes: int = SESSION_TEXT_BYTES  # `limits.session_text_bytes`


def exit_code_for_labels(labels: list[Label | None]) -> int:
    """Seed 004 section 7.3: 1 on any Fail, else 2 on any Review, else 0."""
    if "Fail" in labels:
        return 1
    if "Review" in labels:
        return 2
    return 0


def grade_for(value: float | None) -> Grade | None:
    """Letter grade on the raw value: A >= 0.9, B >= 0.8, C >= 0.7, D >= 0.6, else F."""
    if value is None:
        return None
    value = round(value, 9)  # 0.9 computed as 0.8999999999 still earns an A
    for grade, floor in (("A", 0.9), ("B", 0.8), ("C", 0.7), ("D", 0.6)):
        if value >= floor:
            return grade  # type: ignore[return-value]
    return "F"


def scorer_versions(metrics: str, protocol: str | None = None) -> Versions:
    """The `versions` of a result: this scorer's version, the suite's metrics version and
    its protocol version (if it has one)."""
    return Versions(scorer=SCORER_VERSION, metrics=metrics, protocol=protocol)


# ---------------------------------------------------------------- suite specs


@dataclass(frozen=True)
class MetricInfo:
    """What a metric means for comparisons and drill-downs: its direction and bounds."""

    name: str
    higher_is_better: bool = True
    low: float | None = 0.0  # None: unbounded
    high: float | None = 1.0

    def within_bounds(self, value: float, tolerance: float = 1e-9) -> bool:
        """Whether `value` lies inside the metric's bounds."""
        return (self.low is None or value >= self.low - tolerance) and (
            self.high is None or value <= self.high + tolerance
        )


def metrics(*names: str, lower_is_better: frozenset[str] = frozenset()) -> tuple[MetricInfo, ...]:
    """`MetricInfo` of metrics bounded by [0, 1], higher better except `lower_is_better`."""
    return tuple(MetricInfo(name, higher_is_better=name not in lower_is_better) for name in names)


def rate_values(rates: Mapping[str, float]) -> list[tuple[str, str, float]]:
    """`(metric, "rate", value)` for each rate of a suite's figures."""
    return [(metric, "rate", value) for metric, value in rates.items()]


@dataclass(frozen=True)
class TurnInput:
    """One assistant turn of a session record, as the session stage applies it."""

    index: int
    text: str
    user: str = ""
    final: bool = False


@dataclass(frozen=True)
class SessionTiming:
    """How the session stage paces a suite's sessions: a session closes after
    `idle_timeout` seconds of event time without a turn; a turn more than `max_lag`
    seconds behind is scored without its vector (None: every turn is embedded)."""

    idle_timeout: float
    max_lag: float | None


class SessionSuite(Protocol):
    """The suite that keeps sessions, as the streaming session stage uses it (made once by
    its spec's `sessions`; the stage finds it with `registry.session_suite()`).

    Its records are turns, or whole sessions, keyed by session. Each turn text is scored
    in the scoring pool (`pool_scorer`) with its vector from `embed`, or with None when
    it was not embedded (the stage was more than `max_lag` behind); the session is scored
    when it closes: on its final turn, at its bound, or idle for `idle_timeout` in event
    time. A state is whatever the suite keeps for one open session (`dump`/`restore`
    JSON for the changelog table).
    """

    @property
    def record_model(self) -> type[Any]:
        """The envelope model of its records (a pydantic model with a `payload`)."""
        ...

    @property
    def pool_scorer(self) -> str:
        """The scoring pool's name of its turn scorer; the scorer also has
        `scored(answer) -> Scored` (as `turn_scored`), with which the child writes the
        turn's result (`worker.input.scored_records.Framed`)."""
        ...

    def timing(self, section: Any) -> SessionTiming:
        """The stage's timing as `section` (the suite's settings section of the running
        app) sets it; read from the app's settings, not from the section the suite was
        loaded with, since one loaded suite may serve apps with different settings."""
        ...

    def texts(self, payload: Mapping[str, Any]) -> list[str]:
        """The texts to embed and score of one record's payload (decoded JSON), in order."""
        ...

    def pool_item(self, payload: Mapping[str, Any], text: str, vector: Any) -> Any:
        """What the pool's turn scorer gets for one text of `payload`."""
        ...

    def embed(self, texts: list[str]) -> Any:
        """One vector per text (runs in the stage's embedding executor)."""
        ...

    def check(self, payload: Any) -> None:
        """Raise `Rejected` for a record this suite cannot score (at the score stage)."""
        ...

    def session_id(self, payload: Any) -> str: ...

    def turns(self, payload: Any) -> tuple[list[TurnInput], bool]:
        """The turns of a record's payload, and whether it is a whole session."""
        ...

    def open(self, payload: Any) -> Any:
        """A new state for the session of `payload`."""
        ...

    def check_turn(self, state: Any, payload: Any) -> None:
        """Raise `Rejected` when `payload` cannot join the session of `state`."""
        ...

    def add(self, state: Any, turn: TurnInput, scored: Any, vector: Any, now: float) -> None:
        """Add a scored turn to the state (`now`: the wall clock)."""
        ...

    def dump(self, state: Any) -> Any: ...

    def restore(self, stored: Any) -> Any: ...

    def is_complete(self, state: Any, final_index: int | None) -> bool:
        """Whether every turn up to the final one has arrived (or the bound is reached)."""
        ...

    def turn_count(self, state: Any) -> int: ...

    def state_session_id(self, state: Any) -> str: ...

    def turn_scored(self, scored: Any) -> Scored:
        """The result of one turn from what the pool's turn scorer returned."""
        ...

    def make_judge(self, on_error: Callable[[str], None]) -> Any | None:
        """The session judge the configuration asks for (None: none); `on_error` counts
        its failures by reason."""
        ...

    async def score_session(self, state: Any, judge: Any | None) -> Scored:
        """Score a closed session (with `judge`'s verdict when there is one)."""
        ...

    def check_configuration(self) -> None:
        """Read the suite's configured files (raises `ConfigError`): done at a start that
        scores the suite, so a bad file fails the start, not every record."""
        ...

    def warm_up(self) -> None:
        """Load what the first records would otherwise wait for."""
        ...

    def pool_factories(self) -> dict[str, Callable[[Any], Callable[[Any], Any]]]:
        """The scoring pool's factories (section in, scorer out): the turn scorer
        (`pool_scorer`), carrying what needed the encoder; the forwarder (`forward_key`),
        which does `check` and `session_id` in the scoring processes; the early judge
        (`worker.gates.early.early_key`), when it has one."""
        ...


def forward_key(suite: str) -> str:
    """The scoring pool's name of the forwarder of `suite` (the suite that keeps
    sessions; `SessionSuite.pool_factories`): called with a decoded record, it returns
    the record's session id, or raises `Rejected` as `SessionSuite.check` does, so a
    scoring process can hand the score stage the record ready to forward."""
    return f"{suite}:forward"


# A streaming case scorer: one payload in, one `Scored` out (raises `Rejected`).
CaseScorer = Callable[[Any], Scored]
# (metric, stat, value) series an aggregate's suite figures add to gates and telemetry.
FigureValues = Callable[[Any], list[tuple[str, str, float]]]
# (label, where, name): a scorecard column; `where` is mean, rate or figure.
ScorecardColumn = tuple[str, str, str]


@dataclass(frozen=True)
class SuiteSpec:
    """Everything the generic code needs to know about one suite.

    `name` is the suite's wire name (`suite` of envelopes, results, aggregates); its
    section of the configuration is `Settings.<name>` (model `settings`), its figures
    `Aggregate.<name>` (model `figures`). Every entry point that takes settings takes
    that section alone (`section`); a suite never sees the whole `Settings`.
    """

    name: str
    report_type: str  # `report_type` of its `scorestream score` JSON report
    payloads: tuple[type[BaseModel], ...]  # wire payload models
    settings: type[BaseModel]
    figures: type[BaseModel]
    score_metrics: tuple[MetricInfo, ...]  # `CaseResult.scores` / `Aggregate.metrics`
    rate_metrics: tuple[MetricInfo, ...]  # what a `rate` gate reads besides pass_rate
    headline: tuple[str, ...]  # metrics whose worst cases every final aggregate lists
    report_rows: tuple[str, str]  # (list key, id key) of per-case rows in its JSON report
    recognises: Callable[[Mapping[str, Any]], bool]  # a native row of this suite?
    aggregator: Callable[[], SuiteAggregator]
    batch_scorer: Callable[[Any, BatchOptions], BatchScorer]  # (section, options)
    versions: Callable[[Any], Versions]  # (section)
    figure_values: FigureValues
    scorecard: tuple[ScorecardColumn, ...]
    # Streaming: a case scorer loaded once from the section; None for a suite scored by a
    # stage of its own (alignment sessions).
    case_scorer: Callable[[Any], CaseScorer] | None = None
    # Streaming: the suite that keeps sessions loads its `SessionSuite` here (section, the
    # session text limit, an encoder or None for its own); None for every other suite.
    sessions: Callable[[Any, int, Any], SessionSuite] | None = None

    @property
    def scored_in_sessions(self) -> bool:
        """Whether the streaming worker scores this suite's records as session turns."""
        return self.case_scorer is None

    def section(self, settings: Any) -> Any:
        """This suite's section of the whole settings (`Settings.<name>`)."""
        return getattr(settings, self.name)

    def metric(self, name: str) -> MetricInfo | None:
        """The metadata of one of the suite's metrics (scores first), or None."""
        for info in (*self.score_metrics, *self.rate_metrics):
            if info.name == name:
                return info
        return None
