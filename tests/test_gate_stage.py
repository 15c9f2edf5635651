"""Gates in the aggregation stage, with an injected clock and dict tables: a worker that
replays old history stamps a no-data resolution after the firing it follows, counts both
transitions, and a restarted worker restores the gate's gauges from the gate table."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson

from schemas.outputs import GateEvent
from tests.streamkit import make_config, settings_of
from tests.test_window_stage import T0, Event, Message, folded
from worker.ops.telemetry import Telemetry
from worker.scoring_suites import ScoringSuites
from worker.stream.context import StreamContext
from worker.stream.windows import WindowStage
from worker.suites.alignment.embedding_model import HashingEmbedder
from worker.windowing.event_time import INPUT_GROUP, SESSION_GROUP, Marker

GATE = {
    "name": "composite-drop",
    "suite": "safe",
    "metric": "composite",
    "op": "<",
    "threshold": 0.9,
    "window": "1m",
    "min_count": 1,
    "severity": "page",
}
REPLAYED_AT = T0 + 86_400.0  # the wall clock: a day after the history's event time


class Published:
    def __init__(self) -> None:
        self.gate_events: list[GateEvent] = []

    async def aggregate(self, key: str, message: Any) -> None:
        pass

    async def gate_event(self, key: str, event: GateEvent) -> None:
        self.gate_events.append(event)


def stage_over(gates: dict[str, Any], published: Published) -> tuple[WindowStage, Telemetry]:
    settings = settings_of(make_config(gates=[GATE], segment_by=[]))
    telemetry = Telemetry.from_settings(settings)
    context = StreamContext(
        settings,
        ScoringSuites.load(settings, HashingEmbedder()),
        telemetry,
        published,  # type: ignore[arg-type]
        lambda: REPLAYED_AT,
    )
    return WindowStage(context, {}, {}, gates), telemetry


async def watermark(stage: WindowStage, value: float, offset: int) -> None:
    """Every upstream channel of partition 0 reports `value`."""
    partitions = stage.settings.stream.partitions
    channels = [(INPUT_GROUP, 1), (SESSION_GROUP, partitions)]
    events = []
    for group, count in channels:
        for index in range(count):
            marker = Marker(group, index, count, value)
            events.append(Event(orjson.dumps({"wm": marker.to_json()}), Message(0, offset)))
    await stage.process_batch(events)  # type: ignore[arg-type]


def value(telemetry: Telemetry, name: str, **labels: str) -> float | None:
    return telemetry.registry.get_sample_value(name, labels)


async def test_a_replayed_drop_fires_then_resolves_for_no_data_in_order_and_is_counted() -> None:
    gates: dict[str, Any] = {}
    published = Published()
    stage, telemetry = stage_over(gates, published)
    await stage.process_batch([Event(folded(1, 2, 3), Message(0, 1))])  # type: ignore[list-item]
    await watermark(stage, T0 + 62, 2)  # the minute closes
    await watermark(stage, T0 + 60 + 3 * 60 + 1, 3)  # three quiet windows later
    fired, resolved = published.gate_events
    assert (fired.state, resolved.state, resolved.reason) == ("firing", "resolved", "no_data")
    assert fired.ts == datetime.fromtimestamp(REPLAYED_AT, UTC)
    assert resolved.ts >= fired.ts  # was the (day old) watermark
    labels = {"gate": "composite-drop"}
    for state in ("firing", "resolved"):
        assert value(telemetry, "scorestream_gate_transitions_total", state=state, **labels) == 1
    assert value(telemetry, "scorestream_gate_firing", **labels) == 0
    assert value(telemetry, "scorestream_gate_firing_value", **labels) == 0.5
    assert value(telemetry, "scorestream_gate_firing_window_start_seconds", **labels) == T0

    # A restarted worker (same gate table, fresh metrics) shows the latest firing again.
    restarted, fresh = stage_over(gates, Published())
    restarted.restore_gauges({0})
    assert value(fresh, "scorestream_gate_firing", **labels) == 0
    assert value(fresh, "scorestream_gate_firing_value", **labels) == 0.5
    assert value(fresh, "scorestream_gate_firing_window_start_seconds", **labels) == T0
