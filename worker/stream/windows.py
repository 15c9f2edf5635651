"""The aggregation stage: contributions keyed by suite|segment and watermark markers.
Counts results into windows (`WindowStore`), publishes interim and final aggregates,
evaluates the gates on them and keeps the gate state (and its Prometheus gauge) across
restarts and rebalances.

A micro-batch is one unit: its final aggregates and gate events are delivered (the
broker has them) before any table write of the batch, and the table writes happen before
the batch is acknowledged. A batch is finished even when the agent is cancelled in it
(Faust cancels agents when a worker stops and then acknowledges the batch in hand), so
a handover never leaves half a batch in the tables: either the batch's windows closed
with their finals published, or nothing of it was written and the next owner closes
them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Mapping, MutableMapping, Sequence
from datetime import UTC, datetime
from typing import Any

import orjson
from faust.types import EventT

from schemas.outputs import Aggregate
from worker import aggregation
from worker.aggregation.finals import final_messages, pack_windows
from worker.gates.early import EarlyWindows, Pace, as_provisional, provisional_aggregate
from worker.gates.evaluator import GateEvaluator, applies_to, gate_key, gated_metrics
from worker.input.result_facts import facts_from_data
from worker.stats import DEFAULT_RESERVOIR_SIZE
from worker.stream.context import StreamContext, event_context, gate_windows, run_to_completion
from worker.stream.faust_patches.prompt_batches import take_batches
from worker.stream.publish import MARKER_KEY, markers_of
from worker.suites import registry
from worker.suites.base import State
from worker.suites.registry import AGGREGATORS
from worker.windowing.event_time import INPUT_GROUP, SESSION_GROUP, Marker
from worker.windowing.late_records import LateRecordLog
from worker.windowing.pane_folds import count_of, start_of
from worker.windowing.store import Emission, WindowStore

log = logging.getLogger("scorestream")

# Results counted case by case between two chances for the score stage to run (the
# window stage yields after each record and every this many results within one), so
# per-case results are not held behind window work on the shared event loop.
YIELD_EVERY = 16
# Closed windows per call when a scoring process builds their final aggregates (at the
# default reservoir size; fewer for larger reservoirs, so a call stays well within the
# scoring deadline).
FINALS_PER_CALL = 8


def input_only_suites() -> dict[str, set[str]]:
    """The suites whose results only the score stage sends (every one but the suite that
    keeps sessions): their windows close on the input partitions' markers alone, which
    reach this stage straight from the score stage, not through the session stage."""
    sessions = registry.session_suite()
    return {
        name: {INPUT_GROUP}
        for name in registry.names()
        if sessions is None or name != sessions.name
    }


class WindowStage:
    """Windows and gates of the aggregation partitions this worker owns."""

    def __init__(
        self,
        context: StreamContext,
        windows: MutableMapping[str, Any],
        progress: MutableMapping[str, Any],
        gates: MutableMapping[str, Any],
    ) -> None:
        self.context = context
        self.settings = settings = context.settings
        self.publisher = context.publisher
        self.gates = gates
        event_time = context.event_time
        self.store = WindowStore(
            windows,
            progress,
            configs=context.windows,
            lateness=event_time.lateness,
            aggregators=AGGREGATORS,
            reservoir_size=settings.reservoir_size,
            channel_groups={INPUT_GROUP: 0, SESSION_GROUP: settings.stream.partitions},
            suite_groups=input_only_suites(),
            pane_width=event_time.pane_width,
        )
        # The consuming side of event time for this stage's partitions (the store's).
        self.progress = self.store.stage_progress
        self.last_interim: dict[int, float] = {}
        self.late_log = LateRecordLog(context.windows, event_time.lateness, log)
        self.gauges: dict[str, tuple[str, dict[str, str]]] = {}  # gate key -> (gate, segment)
        self._deliveries: list[Awaitable[Any]] = []  # finals and gate events of the batch
        self._gate_writes: dict[str, dict[str, Any]] = {}  # gate states of the batch
        # The sample of the session suite's turns the score stage judged early, per gate
        # window, for provisional verdicts while the full windows are late.
        self.early = EarlyWindows(settings.grace, settings.early_gates.after)
        # How fast each partition's full windows of the session suite close (its
        # watermark over every upstream group), to judge a sample without waiting out
        # `early_gates.after` when they cannot close within it.
        self.full_pace: dict[int, Pace] = {}

    def forget(self) -> None:
        self.early.forget()
        self.full_pace.clear()
        self.store.forget()
        self.last_interim.clear()
        self._deliveries.clear()
        self._gate_writes.clear()

    async def agent(self, stream: Any) -> None:  # faust.Stream
        batch_size = self.settings.stream.aggregate_batch_size
        wait = self.settings.stream.aggregate_batch_wait
        async for events in take_batches(stream, batch_size, wait, self.may_close):
            await run_to_completion(self.process_batch(events))

    def may_close(self, event: EventT) -> bool:
        """Whether `event` is a marker that may close a window (`StageProgress.may_close`).
        Its batch is processed at once instead of after `aggregate_batch_wait`; other
        markers and data wait as before."""
        if event.key != MARKER_KEY:
            return False
        try:
            markers = markers_of(orjson.loads(event.value))
        except (orjson.JSONDecodeError, TypeError, ValueError):
            return False  # `process` reports it
        return self.progress.may_close(event.message.partition, markers)

    async def process_batch(self, events: list[EventT]) -> None:
        """Apply a micro-batch in order; once its finals and gate events are delivered,
        write each window and gate state it changed once. The batch is acknowledged only
        after this returns, so after the writes."""
        last_of: dict[int, EventT] = {}
        for event in events:
            partition = event.message.partition
            last_of[partition] = event
            with event_context(event):
                await self.process(event)
            await asyncio.sleep(0)  # the score stage's turn (`YIELD_EVERY`)
        for partition in sorted(last_of):
            await self._judge_samples(partition)
        deliveries, self._deliveries = self._deliveries, []
        if deliveries:  # the broker has them before the tables say they were sent
            await asyncio.gather(*deliveries)
        gate_writes, self._gate_writes = self._gate_writes, {}
        for key, value in gate_writes.items():
            with event_context(last_of[int(value["partition"])]):
                self.gates[key] = value
        for partition in sorted(self.store.pending_partitions()):
            last = last_of.get(partition)
            if last is None:  # a partition of no event in this batch: nothing to write
                continue
            with event_context(last):
                self.store.flush(partition)
        self.context.telemetry.record_windows_opened(self.store.take_opened())
        for partition in sorted(last_of):  # what changed, without waiting for a marker
            await self._emit_interim(partition)

    async def process(self, event: EventT) -> None:
        data = orjson.loads(event.value)
        partition = event.message.partition
        markers = markers_of(data)
        if markers:
            await self.on_markers(partition, markers)
            return
        early = data.get("early")
        if early is not None:
            self.early.add(partition, data["segment"], early)
            return
        fold = data.get("fold")
        if fold is not None:
            admission = self.store.add_fold(partition, fold, data["segment"])
            if admission.late_cases and data["segment"] == {}:
                self.context.telemetry.record_late(str(fold["suite"]), admission.late_cases)
                panes = [(start_of(pane), count_of(pane)) for pane in fold["panes"]]
                watermark = self.store.watermark_of(partition, str(fold["suite"]))
                self.late_log.records(str(fold["suite"]), panes, watermark)
            return
        for index, item in enumerate(data.get("results") or [data["result"]], 1):
            if index % YIELD_EVERY == 0:  # a long record: let the score stage in meanwhile
                await asyncio.sleep(0)
            result = facts_from_data(item)  # written by a worker: not validated again
            admission = self.store.add(partition, result, data["segment"])
            if admission.late and data["segment"] == {}:  # once per result, not per segment
                self.context.telemetry.record_late(result.suite)
                watermark = self.store.watermark_of(partition, result.suite)
                self.late_log.record(result.suite, result.ts.timestamp(), watermark)

    async def on_markers(self, partition: int, markers: Sequence[Marker]) -> None:
        """Close what the watermark passed; resolve gates gone quiet; now and then publish
        what changed."""
        for marker in markers:
            closed = self.store.advance(partition, marker, merged=False)
            messages = await self._final_messages(closed)
            for emission, message in zip(closed, messages, strict=True):
                await self._publish(emission, message, partition)
        now = self.context.clock()
        self.early.close(partition, self.progress.value(partition, {INPUT_GROUP}), now)
        self.full_pace.setdefault(partition, Pace()).observe(now, self.progress.value(partition))
        watermark = self.progress.changed(partition)
        if watermark is not None:
            await self._resolve_stale_gates(partition, watermark)
        await self._emit_interim(partition)

    async def emit_due(self, partitions: set[int]) -> None:
        """From the timer: publish what changed in these (owned) partitions once their
        interval has passed, so the last changes of a burst need not wait for a record."""
        for partition in sorted(partitions):
            await self._emit_interim(partition)

    async def _emit_interim(self, partition: int) -> None:
        """Publish the interim aggregates of the partition's changed windows, at most once
        per `aggregate_emit_interval`."""
        now = self.context.clock()
        if now - self.last_interim.get(partition, 0.0) >= self.settings.aggregate_emit_interval:
            self.last_interim[partition] = now
            for emission in self.store.pending(partition):
                await self._publish(emission, self._message(emission.summary, False), partition)

    def _message(self, state: State, final: bool) -> Aggregate:
        """A window's aggregate built here (an interim one has no bootstrap interval)."""
        suite = state["suite"]
        return aggregation.to_message(
            state,
            final,
            self.context.now(),
            AGGREGATORS[suite],
            confidence_intervals=final,
            worst_metrics=gated_metrics(self.settings.gates, suite),
        )

    async def _final_messages(self, closed: list[Emission]) -> list[Aggregate]:
        """The final aggregates of closed windows (`advance(merged=False)`: read before
        the store changes again), in order: merged and built in the scoring processes
        (`worker.aggregation.finals`) when they are running, a few windows per call, while
        this loop publishes per-case results; here when they are not (or a call fails:
        then the window is still closed, only later)."""
        pool = self.context.scoring_pool
        if not closed or not pool.started:
            return [self._message(emission.state, True) for emission in closed]
        per_call = max(1, FINALS_PER_CALL * DEFAULT_RESERVOIR_SIZE // self.settings.reservoir_size)
        suites = {emission.empty["suite"] for emission in closed}
        worst = {suite: gated_metrics(self.settings.gates, suite) for suite in suites}
        emitted_at = self.context.now()
        parts = [closed[i : i + per_call] for i in range(0, len(closed), per_call)]
        calls = [
            asyncio.ensure_future(
                pool.call(
                    final_messages,
                    pack_windows([(emission.empty, emission.panes) for emission in part]),
                    emitted_at,
                    worst,
                )
            )
            for part in parts
        ]
        messages: list[Aggregate] = []
        for part, call in zip(parts, calls, strict=True):
            try:
                built: list[Aggregate | None] = await call
            except Exception as exc:  # a timeout, a lost child: build them here
                log.warning("final aggregates not built by a scoring process (%r): here", exc)
                built = [None] * len(part)
            messages.extend(
                message if message is not None else self._message(emission.state, True)
                for emission, message in zip(part, built, strict=True)
            )
        return messages

    async def _publish(self, emission: Emission, message: Aggregate, partition: int) -> None:
        """Publish a window's aggregate; a final one is delivered before the batch's table
        writes, and a tumbling final is judged by the gates."""
        delivery = await self.publisher.aggregate(emission.key, message)
        window = emission.window
        self.context.telemetry.record_aggregate(message, window.name)
        if not emission.final:
            return
        if delivery is not None:
            self._deliveries.append(delivery)
        self.context.telemetry.record_final(message.suite, window.name)
        if window.step is None or window.step == window.size:  # gates judge tumbling ones
            await self._evaluate_gates(message, partition)

    def _gate_state(self, key: str) -> Any:
        """A gate's state: this batch's, else the table's."""
        pending = self._gate_writes.get(key)
        return pending if pending is not None else self.gates.get(key)

    # ---------------------------------------------------------------- gates

    async def _judge_samples(self, partition: int) -> None:
        """Have the gates judge the early sample of each window the input partitions'
        watermark closed `early_gates.after` ago (or sooner, when the full windows'
        pace says they close later than that) whose full aggregate has not closed yet
        (`worker.gates.early`): provisional events, with their coverage."""
        pace = self.full_pace.get(partition)
        for window in self.early.due(partition, self.context.clock(), pace):
            full = self.store.watermark_of(partition, window.suite)
            if self.store.lateness.is_closed(window.end, full):
                continue  # judged in full, on time
            message = provisional_aggregate(window, self.context.now())
            await self._evaluate_gates(message, partition, window.coverage)

    async def _evaluate_gates(
        self, message: Aggregate, partition: int, sampled: float | None = None
    ) -> None:
        """Judge a final aggregate, or (`sampled`: its coverage) a window's early sample."""
        for gate in self.settings.gates:
            if not applies_to(gate, message):
                continue
            key = gate_key(gate.name, message.segment)
            stored = self._gate_state(key)
            evaluator = GateEvaluator([gate], {key: stored} if stored else None)
            events = evaluator.evaluate(message, self.context.now(), sampled is not None)
            for gate_event in events:
                if sampled is not None:
                    gate_event = as_provisional(gate_event, sampled)
                await self._publish_gate_event(key, gate_event)
                self.context.telemetry.record_gate(gate_event)
                self.gauges[key] = (gate.name, dict(message.segment))
                log.info(
                    "gate %s %s for %s%s",
                    gate.name,
                    gate_event.state,
                    message.segment,
                    "" if sampled is None else f" (provisional: {sampled:.0%} of its turns)",
                )
            state = evaluator.to_json().get(key)
            if state is None:
                continue
            value = {
                **state,
                "gate": gate.name,
                "segment": dict(message.segment),
                "partition": partition,
            }
            if value != stored:
                self._gate_writes[key] = value

    async def _publish_gate_event(self, key: str, gate_event: Any) -> None:
        delivery = await self.publisher.gate_event(key, gate_event)
        if delivery is not None:
            self._deliveries.append(delivery)

    async def _resolve_stale_gates(self, partition: int, watermark: float) -> None:
        """Resolve, with `reason: "no_data"`, the firing gates of this partition whose
        segment had no cases for the gate's `stale_after` of event time."""
        configs = {gate.name: gate for gate in self.settings.gates}
        moment = datetime.fromtimestamp(watermark, UTC)
        keys = dict.fromkeys([*self.gates.keys(), *self._gate_writes])
        for key in keys:
            stored = self._gate_state(key)
            if not isinstance(stored, Mapping) or stored.get("partition") != partition:
                continue
            gate = configs.get(str(stored.get("gate")))
            if gate is None or not stored.get("firing"):
                continue
            evaluator = GateEvaluator([gate], {key: stored})
            for gate_event in evaluator.resolve_stale(moment, self.context.now()):
                await self._publish_gate_event(key, gate_event)
                self.context.telemetry.record_gate(gate_event)
                log.info("gate %s resolved for %s: no data", gate.name, gate_event.segment)
            state = evaluator.to_json().get(key)
            if state is not None:
                self._gate_writes[key] = {**stored, **state}

    def restore_gauges(self, partitions: set[int]) -> None:
        """Make `scorestream_gate_firing` match the gate table for the partitions this
        worker owns (after a restart or rebalance), and drop the series of the others."""
        owned: dict[str, tuple[str, dict[str, str], bool, Any, Any]] = {}
        for key, stored in list(self.gates.items()):
            if not isinstance(stored, Mapping) or stored.get("partition") not in partitions:
                continue
            if "gate" not in stored:
                continue
            owned[key] = (
                stored["gate"],
                dict(stored["segment"]),
                bool(stored["firing"]),
                stored.get("fired_value"),
                stored.get("fired_window_start"),
            )
        telemetry = self.context.telemetry
        for key, (gate, segment) in list(self.gauges.items()):
            if key not in owned:
                telemetry.forget_gate(gate, segment)
                del self.gauges[key]
        for key, (gate, segment, firing, value, start) in owned.items():
            telemetry.set_gate(gate, segment, firing, value, start)
            self.gauges[key] = (gate, segment)


__all__ = ["WindowStage", "gate_windows"]
