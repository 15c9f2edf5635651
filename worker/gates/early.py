"""Provisional gate verdicts from a sample of turns judged as they are read.

A gate on the suite that keeps sessions (alignment's `safety-drop`) judges closed
sessions, and a window of them closes only once the session stage has read every turn up
to its end + grace. Past the worker's capacity that stage falls behind, and the page
would come when the incident is over. The score stage reads every turn first, and
cheaply, so (`early_gates` in the configuration):

1. its scoring processes judge a uniform sample of the turns (`sample`, chosen by the
   record's id: `is_sampled`) for the metrics those gates watch, as they decode them
   (`EarlyTurns`, from `worker.input.scored_records.score_record`);
2. it counts every turn it forwards and folds the judged ones per gate window and
   segment (`EarlyFolds`), sent to the window stage ahead of the markers that cover them;
3. the window stage keeps them (`EarlyWindows`, in memory) until the input partitions'
   watermark passes a window's end + grace; when the window's full aggregate has not
   closed `after` later (the session stage is behind), or sooner when the pace of the
   full windows' watermark (`Pace`) says it will not, the window's gates judge the
   sample (`provisional_aggregate`): a gate event with `provisional: true` and its
   `coverage`, the share of the window's turns the sample holds;
4. the full aggregate is judged when it closes, as always: for the same window it
   confirms (no event), resolves or fires. Every turn still gets its full result.

A turn is judged as a one-turn session would be: the sample's mean is the mean turn
safety, which is the sessions' mean when each session's turns agree (an unsafe burst).
The folds are kept in memory: a window stage that restarts loses the provisional
verdicts of the windows open then, never a full one. Pure: no Kafka, no clock.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

import orjson

from schemas.outputs import Aggregate, GateEvent, MetricSummary, WindowSpan
from worker.aggregation import segment_key, worst
from worker.config import GateConfig, Settings
from worker.stats import Moments, sample_key
from worker.suites import registry

# The statistics a sample can estimate (not a bootstrap interval, a rate or a count).
EARLY_STATS = frozenset({"mean", "min", "max", "std"})
_SALT = "early|"  # so the sample is independent of the windows' reservoir samples


class EarlyTurns(NamedTuple):
    """What a scoring process says of a record of the session suite: how many turns it
    holds and, when it was sampled, each turn's scores (None: not judged). `pending`:
    what its suite's judge reads of each turn, until the chunk's sample is judged at
    once (`worker.input.scored_records.judge_samples`)."""

    turns: int
    scores: list[dict[str, float | None]] | None
    pending: list[Any] | None = None


def early_key(suite: str) -> str:
    """The scoring pool's name of `suite`'s early judge (`SessionSuite.pool_factories`):
    called with a decoded record and the share, it returns `EarlyTurns`."""
    return f"{suite}:early"


def early_gates(gates: Iterable[GateConfig], suite: str) -> list[GateConfig]:
    """The gates of `suite` a sample can judge early: a summary statistic of a metric."""
    return [gate for gate in gates if gate.suite == suite and gate.stat in EARLY_STATS]


def early_share(settings: Settings) -> float:
    """The share of the session suite's records the score stage judges early: 0 when
    the suite is not scored or none of its gates can be judged from a sample."""
    spec = registry.session_suite()
    if spec is None or not settings.scores(spec.name):
        return 0.0
    if not early_gates(settings.gates, spec.name):
        return 0.0
    return settings.early_gates.sample


def is_sampled(ident: str, share: float) -> bool:
    """Whether the record `ident` is in the sample (uniform, the same in every process)."""
    return share >= 1.0 or (share > 0.0 and sample_key(_SALT + ident) < share)


def window_start(ts: float, size: float) -> float:
    """Start of the tumbling window of `size` seconds that holds `ts`."""
    return math.floor(ts / size) * size


def _empty() -> dict[str, Any]:
    return {"seen": 0, "judged": 0, "metrics": {}, "worst": {}}


def merge_state(target: dict[str, Any], other: Mapping[str, Any], worst_k: int) -> None:
    """Add window state `other` into `target` (counts and moments add; worst cases are
    the worst of both)."""
    target["seen"] += int(other["seen"])
    target["judged"] += int(other["judged"])
    metrics = target["metrics"]
    for metric, data in other["metrics"].items():
        moments = Moments.from_json(data)
        mine = metrics.get(metric)
        if mine is not None:
            moments = Moments.from_json(mine).merge(moments)
        metrics[metric] = moments.to_json()
    if other["worst"]:
        target["worst"] = worst.merge_worst(target["worst"], other["worst"], worst_k)


def _keep_worst(state: dict[str, Any], metric: str, entry: list[Any], worst_k: int) -> None:
    kept = state["worst"].get(metric, [])
    merged = worst.merge_worst({metric: kept}, {metric: [entry]}, worst_k)
    state["worst"] = {**state["worst"], metric: merged[metric]}


@dataclass
class EarlyFolds:
    """A micro-batch's turns per segment and gate window (the score stage's side):
    every turn counted, the judged ones' metrics folded."""

    sizes: Sequence[float]  # the early gates' window sizes
    metrics: Sequence[str]  # the metrics they watch
    suite: str
    worst_k: int = worst.DEFAULT_WORST_K
    _folds: dict[str, tuple[dict[str, str], dict[tuple[float, float], dict[str, Any]]]] = field(
        default_factory=dict
    )

    def add(
        self,
        segments: Sequence[Mapping[str, str]],
        event_time: float,
        early: EarlyTurns,
        case: tuple[str, str, str | None, str | None],
    ) -> None:
        """Count a record's turns in each of its segments; fold its judged turns.
        `case`: (id, kind, model, trace_id) of its result, for the worst cases."""
        ident, kind, model, trace_id = case
        for segment in segments:
            key = f"{self.suite}|{segment_key(segment)}"
            windows = self._folds.setdefault(key, (dict(segment), {}))[1]
            for size in self.sizes:
                state = windows.setdefault((size, window_start(event_time, size)), _empty())
                state["seen"] += early.turns
                if early.scores is None:
                    continue
                state["judged"] += len(early.scores)
                for scores in early.scores:
                    for metric in self.metrics:
                        value = scores.get(metric)
                        if value is None or not math.isfinite(value):
                            continue
                        data = state["metrics"].get(metric)
                        moments = Moments() if data is None else Moments.from_json(data)
                        moments.add(float(value))
                        state["metrics"][metric] = moments.to_json()
                        entry = [float(value), ident, kind, event_time, None, model, trace_id]
                        _keep_worst(state, metric, entry, self.worst_k)

    def take(self) -> list[tuple[str, bytes]]:
        """(aggregate-input key, value) per segment, and start again."""
        records = [
            (
                key,
                orjson.dumps(
                    {
                        "segment": segment,
                        "early": {
                            "suite": self.suite,
                            "windows": [
                                [size, start, state] for (size, start), state in windows.items()
                            ],
                        },
                    }
                ),
            )
            for key, (segment, windows) in self._folds.items()
        ]
        self._folds.clear()
        return records


@dataclass(frozen=True)
class ClosedWindow:
    """A window of the sample that the input partitions' watermark closed."""

    suite: str
    segment: dict[str, str]
    size: float
    start: float
    state: dict[str, Any]

    @property
    def end(self) -> float:
        return self.start + self.size

    @property
    def coverage(self) -> float:
        """The share of the window's turns the sample judged."""
        seen = int(self.state["seen"])
        return int(self.state["judged"]) / seen if seen else 0.0


@dataclass
class _Open:
    segment: dict[str, str]
    state: dict[str, Any]


class EarlyWindows:
    """The sample's windows of this stage's partitions (the window stage's side), in
    memory: open until the input partitions' watermark passes end + `grace`, then due
    for a provisional verdict `after` seconds later (the caller skips it when the full
    aggregate closed meanwhile)."""

    def __init__(self, grace: float, after: float, worst_k: int = worst.DEFAULT_WORST_K) -> None:
        self.grace = grace
        self.after = after
        self.worst_k = worst_k
        # partition -> (suite, segment key, size, start) -> window
        self._open: dict[int, dict[tuple[str, str, float, float], _Open]] = {}
        self._due: dict[int, list[tuple[float, ClosedWindow]]] = {}

    def add(self, partition: int, segment: Mapping[str, str], early: Mapping[str, Any]) -> None:
        """Fold a contribution (`EarlyFolds.take`'s value: its `segment` and `early`)."""
        suite = str(early["suite"])
        windows = self._open.setdefault(partition, {})
        name = segment_key(segment)
        for size, start, state in early["windows"]:
            key = (suite, name, float(size), float(start))
            window = windows.get(key)
            if window is None:
                window = windows[key] = _Open(dict(segment), _empty())
            merge_state(window.state, state, self.worst_k)

    def close(self, partition: int, watermark: float | None, now: float) -> int:
        """Close the partition's windows whose end + grace the input watermark passed;
        each is due `after` from `now`. How many closed."""
        windows = self._open.get(partition)
        if not windows or watermark is None:
            return 0
        closed = [key for key in windows if key[3] + key[2] + self.grace <= watermark]
        due = self._due.setdefault(partition, [])
        for key in sorted(closed, key=lambda key: key[3]):
            window = windows.pop(key)
            suite, _, size, start = key
            closed_window = ClosedWindow(suite, window.segment, size, start, window.state)
            due.append((now + self.after, closed_window))
        return len(closed)

    def due(self, partition: int, now: float, full_pace: Pace | None = None) -> list[ClosedWindow]:
        """The partition's closed windows whose wait is over, oldest first; taken. With
        `full_pace` (how fast the watermark that closes the full windows moves), also
        those whose full aggregate that pace says will close after the wait anyway: no
        need to wait it out."""
        waiting = self._due.get(partition)
        if not waiting:
            return []

        def ready(at: float, window: ClosedWindow) -> bool:
            if at <= now:
                return True
            eta = None if full_pace is None else full_pace.eta(window.end + self.grace, now)
            return eta is not None and now + eta > at

        chosen: list[ClosedWindow] = []
        kept: list[tuple[float, ClosedWindow]] = []
        for at, window in waiting:
            if ready(at, window):
                chosen.append(window)
            else:
                kept.append((at, window))
        self._due[partition] = kept
        return chosen

    def forget(self) -> None:
        """After a rebalance: another worker may own these partitions now."""
        self._open.clear()
        self._due.clear()


class Pace:
    """How fast a watermark moves against the wall clock, over about the last `span`
    seconds: when it will reach a moment, if it keeps that pace."""

    def __init__(self, span: float = 5.0) -> None:
        self.span = span
        self._samples: deque[tuple[float, float]] = deque()

    def observe(self, now: float, watermark: float | None) -> None:
        if watermark is None:
            return
        samples = self._samples
        samples.append((now, watermark))
        while len(samples) > 2 and samples[1][0] <= now - self.span:
            samples.popleft()

    def eta(self, moment: float, now: float) -> float | None:
        """Wall seconds from `now` until the watermark reaches `moment` at its pace
        (inf: it has not moved), or None while the pace is not known (under half a span
        of samples: just started, or after a rebalance)."""
        if len(self._samples) < 2:
            return None
        (first_at, first), (last_at, last) = self._samples[0], self._samples[-1]
        if last_at - first_at < self.span / 2:
            return None
        if last >= moment:
            return 0.0
        rate = (last - first) / (last_at - first_at)
        if rate <= 0:
            return math.inf
        return max(0.0, (moment - last) / rate - (now - last_at))

    def forget(self) -> None:
        self._samples.clear()


def provisional_aggregate(window: ClosedWindow, emitted_at: datetime) -> Aggregate:
    """The sample's window as an aggregate a gate can judge: its count is the judged
    turns, its metrics their summaries (no interval), its worst cases the sample's."""
    start = datetime.fromtimestamp(window.start, UTC)
    end = start + timedelta(seconds=window.size)
    metrics = {}
    for metric, data in window.state["metrics"].items():
        moments = Moments.from_json(data)
        metrics[metric] = MetricSummary(
            mean=moments.mean,
            min=None if moments.low is None else float(moments.low),
            max=None if moments.high is None else float(moments.high),
            std=moments.std,
        )
    listed = {metric: worst.worst_cases(window.state, metric) for metric in window.state["worst"]}
    return Aggregate(
        suite=window.suite,  # type: ignore[arg-type]  # a session suite's name
        segment=dict(window.segment),
        window=WindowSpan(start=start, end=end, size_s=window.size),
        final=True,
        count=int(window.state["judged"]),
        metrics=metrics,
        emitted_at=emitted_at,
        worst=listed or None,
    )


def as_provisional(event: GateEvent, coverage: float) -> GateEvent:
    """A gate event decided on a sample: marked, with the share of turns it saw."""
    return event.model_copy(update={"provisional": True, "coverage": round(coverage, 6)})


__all__ = [
    "EARLY_STATS",
    "ClosedWindow",
    "EarlyFolds",
    "EarlyTurns",
    "EarlyWindows",
    "Pace",
    "as_provisional",
    "early_gates",
    "early_key",
    "early_share",
    "is_sampled",
    "merge_state",
    "provisional_aggregate",
    "window_start",
]
