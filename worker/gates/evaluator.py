"""Threshold gates over windowed aggregates, with hysteresis.

Pure: no Kafka, no clock. A gate watches one statistic of one suite's aggregates for
windows of size `gate.window`, separately for every segment. It fires when at least
`min_count` cases are in the window and `value op threshold`; while firing it resolves
once the value is back on the safe side of `clear` (i.e. `value op clear` no longer
holds; `clear` defaults to the threshold). Both transitions need `min_count` cases; a
missing value changes nothing. An event is emitted only on a state change.

Ordering: several windows of the same size can be open at once (hopping windows, or a
final aggregate arriving after the next window started). Per (gate, segment) only the
newest window seen is evaluated; aggregates of older windows are ignored, so the gate does
not flap between overlapping windows.

Provisional verdicts (`provisional=True`, `worker.gates.early`): a window judged on a
sample of its turns while its full aggregate is late. A sample is judged only for a
window newer than every window judged in full and not older than the last one judged on
a sample. The full aggregate of that window, or of a newer one, is judged as always
(confirming, resolving or firing); the full aggregate of an older window, which arrives
late because its stage is behind, may only fire, and only when no sample of its own
was judged: a window the sample stood in for does not page twice or resolve what a
newer sample fired.

Staleness: a firing gate whose segment has had no cases for `stale_after` of event time
(default three window lengths) would otherwise stay firing forever, since windows without
cases produce no aggregate. `resolve_stale(watermark)` resolves it with
`reason: "no_data"`.

Event time stamps: an event's `ts` is the moment it is emitted (the caller's wall clock),
and never earlier than the previous event of the same gate and segment (a `no_data`
resolution after a firing during a replay, or a clock stepped back, keep the order).

State (`to_json`): `{"{gate}|{segment key}": {"firing": bool, "window_start": float,
"segment": {label: value}, "last_data": float, "last_ts": float, "fired_value": float,
"fired_window_start": float, "sampled": [float, ...]}}` (`last_data`: end of the newest
window that had cases; `last_ts`: `ts` of the latest event; `fired_*`: value and window
start of the latest firing; `sampled`: starts of the latest windows judged on a sample;
epoch seconds).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from schemas.outputs import Aggregate, GateEvent, WindowSpan, WorstCase
from worker.aggregation import segment_key
from worker.config import GateConfig
from worker.gates.fields import SUMMARY_STATS
from worker.suites import registry

_OPS: dict[str, Callable[[float, float], bool]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
_WINDOW_TOLERANCE = 1e-6
NO_DATA = "no_data"
SAMPLED_KEPT = 64  # starts of windows judged on a sample a gate state remembers


def gate_key(gate: str, segment: Mapping[str, str]) -> str:
    """Kafka key of a gate event and of its state: `{gate}|{segment key}`."""
    return f"{gate}|{segment_key(segment)}"


def gate_value(gate: GateConfig, aggregate: Aggregate) -> float | None:
    """The statistic `gate` watches in `aggregate`, or None when it is not there.

    `mean|min|max|std|ci_low|ci_high`: from `aggregate.metrics[metric]`; `count`: the
    window's case count; `rate`: `pass_rate` / `overall` is the window's pass rate, else
    the rate of that name among the suite's figures (e.g. a SAFE per-metric pass rate).
    """
    value: float | None = None
    if gate.stat == "count":
        value = float(aggregate.count)
    elif gate.stat in SUMMARY_STATS:
        summary = aggregate.metrics.get(gate.metric)
        value = None if summary is None else getattr(summary, gate.stat)
    elif gate.metric in ("pass_rate", "overall"):
        value = aggregate.pass_rate
    else:
        value = figure_rates(aggregate).get(gate.metric)
    if value is None or not math.isfinite(value):
        return None
    return value


def figure_rates(aggregate: Aggregate) -> dict[str, float]:
    """The rates among the suite figures of `aggregate` (empty when it has none)."""
    return {m: value for m, stat, value in registry.figure_values(aggregate) if stat == "rate"}


def gated_metrics(gates: Iterable[GateConfig], suite: str) -> list[str]:
    """The metrics the gates of `suite` watch: final aggregates list their worst cases."""
    return list(dict.fromkeys(gate.metric for gate in gates if gate.suite == suite))


def drilldown(gate: GateConfig, aggregate: Aggregate) -> tuple[str | None, list[WorstCase] | None]:
    """The metric and worst cases a gate event points to: the gate's metric when the
    aggregate lists worst cases for it (a per-case score), else the suite's first headline
    metric that it lists; `(None, None)` when it lists none."""
    listed = aggregate.worst or {}
    spec = registry.find(gate.suite)
    for metric in (gate.metric, *(spec.headline if spec else ())):
        if metric in listed:
            return metric, list(listed[metric])
    return None, None


def applies_to(gate: GateConfig, aggregate: Aggregate) -> bool:
    """Whether `aggregate` is of the gate's suite and window size."""
    return (
        aggregate.suite == gate.suite
        and abs(aggregate.window.size_s - gate.window) <= _WINDOW_TOLERANCE
    )


@dataclass
class GateState:
    """Where one gate stands for one segment."""

    firing: bool = False
    window_start: float | None = None  # newest window evaluated
    segment: dict[str, str] | None = None
    last_data: float | None = None  # end of the newest window with cases (epoch seconds)
    last_ts: float | None = None  # `ts` of the latest event (epoch seconds)
    fired_value: float | None = None  # the value of the latest firing
    fired_window_start: float | None = None  # and the start of its window
    sampled: list[float] | None = None  # windows judged on a sample, newest last

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "firing": self.firing,
            "window_start": self.window_start,
            "segment": self.segment,
            "last_data": self.last_data,
            "last_ts": self.last_ts,
            "fired_value": self.fired_value,
            "fired_window_start": self.fired_window_start,
        }
        if self.sampled:
            data["sampled"] = list(self.sampled)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> GateState:
        segment = data.get("segment")
        return cls(
            bool(data["firing"]),
            data.get("window_start"),
            None if segment is None else dict(segment),
            data.get("last_data"),
            data.get("last_ts"),
            data.get("fired_value"),
            data.get("fired_window_start"),
            list(data["sampled"]) if data.get("sampled") else None,
        )

    def stamp(self, ts: datetime) -> datetime:
        """`ts` for the next event: never before the previous event's; remembered."""
        if self.last_ts is not None and ts.timestamp() < self.last_ts:
            ts = datetime.fromtimestamp(self.last_ts, UTC)
        self.last_ts = ts.timestamp()
        return ts


class GateEvaluator:
    """Evaluates gates against aggregates; state per (gate, segment) is explicit."""

    def __init__(
        self, gates: Iterable[GateConfig], state: Mapping[str, Mapping[str, Any]] | None = None
    ) -> None:
        self.gates = list(gates)
        self.states: dict[str, GateState] = {
            key: GateState.from_json(value) for key, value in (state or {}).items()
        }

    def to_json(self) -> dict[str, dict[str, Any]]:
        """Serialisable state; pass it back as `state` to resume."""
        return {key: value.to_json() for key, value in sorted(self.states.items())}

    def is_firing(self, gate: str, segment: Mapping[str, str]) -> bool:
        state = self.states.get(gate_key(gate, segment))
        return state is not None and state.firing

    def evaluate(
        self, aggregate: Aggregate, ts: datetime | None = None, provisional: bool = False
    ) -> list[GateEvent]:
        """Events for the gates whose state `aggregate` changes (`ts` defaults to its
        `emitted_at`); `provisional`: the aggregate is a sample of a window whose full
        aggregate is late (see the module's docstring)."""
        events = []
        for gate in self.gates:
            if not applies_to(gate, aggregate):
                continue
            event = self._evaluate_one(gate, aggregate, ts or aggregate.emitted_at, provisional)
            if event is not None:
                events.append(event)
        return events

    def resolve_stale(self, watermark: datetime, ts: datetime | None = None) -> list[GateEvent]:
        """Resolve (`reason: "no_data"`) every firing gate whose segment has had no cases
        for the gate's `stale_after` of event time up to `watermark`; `ts` (default:
        `watermark`) stamps the events.

        Call it whenever the event-time watermark advances (window closing time is a
        good moment); it changes the state, so each stale gate resolves once.
        """
        now = watermark.timestamp()
        events = []
        for gate in self.gates:
            for key, state in sorted(self.states.items()):
                if not state.firing or state.segment is None:
                    continue
                if key != gate_key(gate.name, state.segment):
                    continue
                start = state.window_start if state.window_start is not None else now
                last = state.last_data if state.last_data is not None else start + gate.window
                if now - last < gate.stale_after_s:
                    continue
                state.firing = False
                window = WindowSpan(
                    start=datetime.fromtimestamp(start, UTC),
                    end=datetime.fromtimestamp(start, UTC) + timedelta(seconds=gate.window),
                    size_s=gate.window,
                )
                events.append(
                    self._event(gate, state, None, 0, window, ts or watermark, reason=NO_DATA)
                )
        return events

    def _event(
        self,
        gate: GateConfig,
        state: GateState,
        value: float | None,
        count: int,
        window: WindowSpan,
        ts: datetime,
        reason: str | None = None,
        aggregate: Aggregate | None = None,
    ) -> GateEvent:
        worst_metric, worst = (None, None) if aggregate is None else drilldown(gate, aggregate)
        if state.firing:
            state.fired_value = value
            state.fired_window_start = window.start.timestamp()
        return GateEvent(
            gate=gate.name,
            state="firing" if state.firing else "resolved",
            suite=gate.suite,
            segment=dict(state.segment or {}),
            metric=gate.metric,
            stat=gate.stat,
            op=gate.op,
            threshold=gate.threshold,
            value=value,
            count=count,
            window=window,
            ts=state.stamp(ts),
            reason=reason,
            worst_metric=worst_metric,
            worst=worst,
            coverage=None if aggregate is None else 1.0,
        )

    def _evaluate_one(
        self, gate: GateConfig, aggregate: Aggregate, ts: datetime, provisional: bool = False
    ) -> GateEvent | None:
        key = gate_key(gate.name, aggregate.segment)
        state = self.states.setdefault(key, GateState())
        start = aggregate.window.start.timestamp()
        sampled = state.sampled or []
        if state.window_start is not None and start < state.window_start:
            return None  # an older window than one already evaluated
        if provisional and (
            (state.window_start is not None and start <= state.window_start)
            or (sampled and start < sampled[-1])
        ):
            return None  # judged in full already, or older than the last sample
        # A full window older than the last sample: its stage was behind meanwhile.
        behind = not provisional and bool(sampled) and start < sampled[-1]
        if not provisional:
            state.window_start = start
        state.segment = dict(aggregate.segment)
        if aggregate.count > 0:
            end = aggregate.window.end.timestamp()
            state.last_data = end if state.last_data is None else max(state.last_data, end)
        value = gate_value(gate, aggregate)
        if value is None or aggregate.count < gate.min_count:
            return None
        if provisional:
            state.sampled = [*sampled[-(SAMPLED_KEPT - 1) :], start]
        elif behind and start in sampled:
            return None  # the sample stood in for this window
        compare = _OPS[gate.op]
        clear = gate.threshold if gate.clear is None else gate.clear
        if not state.firing and compare(value, gate.threshold):
            state.firing = True
        elif state.firing and not behind and not compare(value, clear):
            state.firing = False
        else:
            return None
        return self._event(
            gate, state, value, aggregate.count, aggregate.window, ts, aggregate=aggregate
        )


__all__ = [
    "NO_DATA",
    "GateEvaluator",
    "GateState",
    "applies_to",
    "drilldown",
    "figure_rates",
    "gate_key",
    "gate_value",
    "gated_metrics",
]
