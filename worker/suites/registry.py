"""The registry of scoring suites: one `SuiteSpec` per suite, looked up by name.

Generic code (records, windows, gates, telemetry, `score`, `compare`, the configuration)
asks the registry instead of naming suites. Adding a suite: its package under
`worker.suites` with a `spec.py`, its wire models in `schemas`, and one entry in
`_BUILT_IN` below. Tests may `register` a suite of their own and `unregister` it again.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from schemas.outputs import Aggregate
from worker.suites.alignment.spec import SPEC as ALIGNMENT
from worker.suites.base import MetricInfo, SuiteAggregator, SuiteSpec
from worker.suites.extraction.spec import SPEC as EXTRACTION
from worker.suites.safe.spec import SPEC as SAFE

# The suites, in display order (native rows are recognised in this order too).
_BUILT_IN: tuple[SuiteSpec, ...] = (SAFE, EXTRACTION, ALIGNMENT)

_SPECS: dict[str, SuiteSpec] = {}
_HIGHER_IS_WORSE: set[str] = set()


def _reindex() -> None:
    _HIGHER_IS_WORSE.clear()
    for spec in _SPECS.values():
        _HIGHER_IS_WORSE.update(m.name for m in spec.score_metrics if not m.higher_is_better)
    AGGREGATORS.clear()


def register(spec: SuiteSpec) -> None:
    """Add a suite (a name already registered is an error)."""
    if spec.name in _SPECS:
        raise ValueError(f"suite {spec.name!r} is already registered")
    keeper = session_suite()
    if spec.sessions is not None and keeper is not None:
        raise ValueError(f"suite {keeper.name!r} already keeps sessions (one suite may)")
    _SPECS[spec.name] = spec
    _reindex()


def unregister(name: str) -> None:
    """Remove a suite registered with `register`."""
    del _SPECS[name]
    _reindex()


def specs() -> tuple[SuiteSpec, ...]:
    """Every registered suite, in display order."""
    return tuple(_SPECS.values())


def names() -> tuple[str, ...]:
    """The names of every registered suite, in display order."""
    return tuple(_SPECS)


def find(name: object) -> SuiteSpec | None:
    """The spec of suite `name`, or None when there is no such suite."""
    return _SPECS.get(name) if isinstance(name, str) else None


def get(name: str) -> SuiteSpec:
    """The spec of suite `name` (`KeyError` naming the known suites when unknown)."""
    spec = find(name)
    if spec is None:
        raise KeyError(f"unknown suite {name!r} (known: {', '.join(_SPECS)})")
    return spec


def session_suite() -> SuiteSpec | None:
    """The suite whose records the streaming worker scores as session turns (the one
    with a `sessions` loader), or None."""
    return next((spec for spec in _SPECS.values() if spec.sessions is not None), None)


def native_suite(row: Mapping[str, Any]) -> str | None:
    """The first suite whose native row shape `row` has, or None."""
    return next((spec.name for spec in _SPECS.values() if spec.recognises(row)), None)


def by_report_type(report_type: object) -> SuiteSpec | None:
    """The suite whose `score` JSON reports have this `report_type`, or None."""
    return next((spec for spec in _SPECS.values() if spec.report_type == report_type), None)


def find_metric(metric: str, suite: str | None = None) -> MetricInfo | None:
    """The metadata of `metric` in `suite` (any suite when None), or None."""
    candidates = _SPECS.values() if suite is None else [s for s in [find(suite)] if s]
    return next((info for spec in candidates if (info := spec.metric(metric))), None)


def higher_is_worse(metric: str) -> bool:
    """Whether a higher per-case value of `metric` is the worse case (drill-downs)."""
    return metric in _HIGHER_IS_WORSE


def figure_values(aggregate: Aggregate) -> list[tuple[str, str, float]]:
    """(metric, stat, value) of the suite figures of `aggregate` (none when it has none)."""
    spec = find(aggregate.suite)
    figures = None if spec is None else getattr(aggregate, spec.name, None)
    return [] if spec is None or figures is None else spec.figure_values(figures)


class _Aggregators(Mapping[str, SuiteAggregator]):
    """Each suite's `SuiteAggregator`, made on first use."""

    def __init__(self) -> None:
        self._made: dict[str, SuiteAggregator] = {}

    def __getitem__(self, suite: str) -> SuiteAggregator:
        if suite not in self._made:
            self._made[suite] = get(suite).aggregator()
        return self._made[suite]

    def __iter__(self) -> Iterator[str]:
        return iter(_SPECS)

    def __len__(self) -> int:
        return len(_SPECS)

    def clear(self) -> None:
        self._made.clear()


AGGREGATORS = _Aggregators()

for _spec in _BUILT_IN:
    register(_spec)

__all__ = [
    "AGGREGATORS",
    "by_report_type",
    "figure_values",
    "find",
    "find_metric",
    "get",
    "higher_is_worse",
    "names",
    "native_suite",
    "register",
    "session_suite",
    "specs",
    "unregister",
]
