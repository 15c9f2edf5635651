"""What the gate events on the gates topic say: the latest state of each gate and segment,
the events of a time range, and the firing a drill-down starts from. Pure: the `gates`
and `results` commands read the topic and hand the events in here, in topic order."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime

from schemas.outputs import GateEvent
from worker.gates.evaluator import gate_key


def latest_states(events: Iterable[GateEvent], gate: str | None = None) -> list[GateEvent]:
    """The latest event of each gate and segment (of `gate` only, when given), by gate
    and segment. Events of one gate and segment share a Kafka key, so topic order is
    their order."""
    latest: dict[str, GateEvent] = {}
    for event in events:
        if gate is None or event.gate == gate:
            latest[gate_key(event.gate, event.segment)] = event
    return [latest[key] for key in sorted(latest)]


def events_since(
    events: Iterable[GateEvent], since: datetime, gate: str | None = None
) -> list[GateEvent]:
    """Every event stamped at or after `since` (of `gate` only, when given), oldest
    first."""
    chosen = [e for e in events if e.ts >= since and (gate is None or e.gate == gate)]
    return sorted(chosen, key=lambda e: (e.ts, e.gate, gate_key(e.gate, e.segment)))


def latest_firing(
    events: Iterable[GateEvent], gate: str, segment: Mapping[str, str] | None = None
) -> GateEvent | None:
    """The latest `firing` event of `gate` for `segment`; of any segment when `segment` is
    None (the most specific segment when several fired at the same moment)."""
    found: GateEvent | None = None
    for event in events:
        if event.gate != gate or event.state != "firing":
            continue
        if segment is not None and event.segment != dict(segment):
            continue
        if found is None or (event.ts, len(event.segment)) >= (found.ts, len(found.segment)):
            found = event
    return found


__all__ = ["events_since", "latest_firing", "latest_states"]
