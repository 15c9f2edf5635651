"""What every stage of the streaming worker shares: settings, scorers, telemetry, the
clock and the publisher, plus the Faust helpers they need."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from faust.types import EventT

from worker.config import Settings
from worker.input.records import SourcePosition
from worker.ops.telemetry import Telemetry
from worker.scoring_pool import ScoringPool
from worker.scoring_suites import ScoringSuites
from worker.stream.faust_patches.internals import current_event
from worker.stream.input_backlog import InputBacklog
from worker.stream.publish import Publisher
from worker.suites import registry
from worker.windowing.event_time import EventTime
from worker.windowing.lateness import LatenessPolicy
from worker.windowing.windows import WindowConfig, pane_width, with_gate_windows

log = logging.getLogger("scorestream")


# What the scoring pool's children need besides the case scorers: the alignment turn
# scorer and the safety classifier's scikit-learn.
POOL_PRELOAD = (
    "worker.suites.alignment.streaming",
    "worker.suites.alignment.safety_classifier",
    "worker.suites.alignment.preload",  # the shipped patterns and language identifier
)


def gate_windows(settings: Settings) -> list[WindowConfig]:
    """Configured windows plus a tumbling window for each gate's window size."""
    return with_gate_windows(settings.windows, (gate.window for gate in settings.gates))


@dataclass
class StreamContext:
    """The collaborators of the stages; `clock` is wall-clock epoch seconds. The scoring
    pool's child processes start on first use. `windows` are the configured windows plus
    each gate's (`gate_windows`), `pane_width` the pane they share (None: no common one).
    `event_time` is the worker's one event-time component (`worker.windowing.event_time`)
    around its one `LatenessPolicy` (`grace`): the stages ask it when to send a marker and
    what a marker closes."""

    settings: Settings
    suites: ScoringSuites
    telemetry: Telemetry
    publisher: Publisher
    clock: Callable[[], float]
    scoring_pool: ScoringPool = field(init=False)
    windows: list[WindowConfig] = field(init=False)
    pane_width: float | None = field(init=False)
    event_time: EventTime = field(init=False)
    input_backlog: InputBacklog = field(init=False)

    def __post_init__(self) -> None:
        self.windows = gate_windows(self.settings)
        self.pane_width = pane_width(self.windows)
        self.event_time = EventTime(
            LatenessPolicy(self.settings.grace),
            self.pane_width,
            idle_timeout=self.settings.idle_timeout,
            heartbeat=self.settings.stream.marker_heartbeat,
        )
        stream = self.settings.stream
        self.input_backlog = InputBacklog(stream.input_backlog, stream.input_backlog_hold)
        sessions = registry.session_suite()
        scores_sessions = sessions is not None and self.settings.scores(sessions.name)
        self.scoring_pool = ScoringPool(
            self.settings,
            more_factories=self.suites.pool_factories,
            preload=POOL_PRELOAD if scores_sessions else (),
        )

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.clock(), UTC)


def event_context(event: EventT) -> current_event:
    """Make `event` Faust's current event, so table writes go to its partition.

    Inside a `take_events` micro-batch Faust's current event is the batch's last one,
    which may belong to another partition; table changelog writes must follow the event
    that caused them.
    """
    return current_event(event)


def source_position(event: EventT) -> SourcePosition:
    """Where `event` was read, with its record timestamp."""
    message = event.message
    timestamp = datetime.fromtimestamp(message.timestamp, UTC) if message.timestamp else None
    return SourcePosition(message.topic, message.partition, message.offset, timestamp)


async def run_to_completion(work: Coroutine[Any, Any, None]) -> None:
    """Await a stage's micro-batch; if the agent is cancelled meanwhile, let the batch
    finish first and then pass the cancellation on.

    A stopping Faust worker cancels each agent's task wherever it is (the actor's task is
    a future of its service), and `Stream.take_events` then acknowledges every event of
    the batch in hand, so the consumer's last commit covers it: a batch cut short would
    be lost (cases without results, a window's final never published). Finishing it
    keeps at-least-once; the producer and tables stop only after the agents."""
    task = asyncio.ensure_future(work)
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        if not task.done():
            log.info("finishing the batch in hand before stopping")
            await asyncio.wait([task])
        raise
