"""A window whose close straddles a handover of its aggregation partition, replayed with
an injected clock and dict tables standing in for the changelog-backed ones.

Worker A counts a window's cases, then starts the batch whose watermark marker closes it
and stops inside it (a rolling deploy's SIGTERM). Worker B restores the tables and takes
the partition: the window must get exactly one final with every case, whatever point of
the batch A reached."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import orjson
import pytest

from schemas.outputs import Aggregate
from tests.streamkit import make_config, settings_of
from tests.test_window_stage import T0, case  # T0: a whole minute, the window [T0, T0 + 60)
from worker.ops.telemetry import Telemetry
from worker.scoring_suites import ScoringSuites
from worker.stream.context import StreamContext, run_to_completion
from worker.stream.windows import WindowStage
from worker.suites.alignment.embedding_model import HashingEmbedder
from worker.suites.registry import AGGREGATORS
from worker.windowing.event_time import INPUT_GROUP, SESSION_GROUP, Marker
from worker.windowing.pane_folds import PaneFold

GRACE = 5.0


@dataclass
class Message:
    partition: int
    offset: int


@dataclass
class Event:
    value: bytes
    message: Message


class Stopped(Exception):
    """The worker went away in the middle of publishing."""


class Publisher:
    """Keeps what a worker publishes; `fail_after` finals makes the next one fail."""

    def __init__(self, fail_after: int | None = None) -> None:
        self.aggregates: list[Aggregate] = []
        self.fail_after = fail_after

    async def aggregate(self, key: str, message: Aggregate) -> None:
        published = sum(a.final for a in self.aggregates)
        if message.final and self.fail_after is not None and published >= self.fail_after:
            raise Stopped
        self.aggregates.append(message)

    async def gate_event(self, key: str, event: Any) -> None:
        raise AssertionError("no gate is configured")

    def finals(self) -> list[Aggregate]:
        return [a for a in self.aggregates if a.final]


class ChangelogTable(dict[str, Any]):
    """A table whose changelog keeps each value as it was when it was set, as Faust's
    does (a later change in place reaches the memory, never the changelog)."""

    def __init__(self, changelog: dict[str, bytes] | None = None) -> None:
        self.changelog = dict(changelog or {})
        super().__init__({key: orjson.loads(value) for key, value in self.changelog.items()})

    def __setitem__(self, key: str, value: Any) -> None:
        self.changelog[key] = orjson.dumps(value)
        super().__setitem__(key, value)

    def __delitem__(self, key: str) -> None:
        self.changelog.pop(key, None)
        super().__delitem__(key)


class Tables:
    """The changelog-backed tables of one worker."""

    def __init__(self) -> None:
        self.windows = ChangelogTable()
        self.progress = ChangelogTable()
        self.gates = ChangelogTable()

    def restored(self) -> Tables:
        """The tables as another worker restores them from their changelogs."""
        copy = Tables()
        copy.windows = ChangelogTable(self.windows.changelog)
        copy.progress = ChangelogTable(self.progress.changelog)
        copy.gates = ChangelogTable(self.gates.changelog)
        return copy


def make_stage(tables: Tables, publisher: Publisher, clock: list[float]) -> WindowStage:
    settings = settings_of(make_config(grace=f"{GRACE:g}s", segment_by=["model"]))
    context = StreamContext(
        settings,
        ScoringSuites.load(settings, HashingEmbedder()),
        Telemetry.from_settings(settings),
        publisher,  # type: ignore[arg-type]
        lambda: clock[0],
    )
    return WindowStage(context, tables.windows, tables.progress, tables.gates)


def fold(segment: dict[str, str], indices: range) -> bytes:
    folded = PaneFold("safe", segment, 60.0, AGGREGATORS["safe"])
    for index in indices:
        folded.add(case(index))
    return orjson.dumps({"segment": segment, "fold": folded.to_json()})


def markers(value: float, sessions: int) -> list[bytes]:
    """Every upstream channel of an aggregation partition reaching `value`."""
    found = [Marker(INPUT_GROUP, 0, 1, value)]
    found += [Marker(SESSION_GROUP, index, sessions, value) for index in range(sessions)]
    return [orjson.dumps({"wm": marker.to_json()}) for marker in found]


class Input:
    """The aggregation partition 0 as a log: offsets, and what was acknowledged."""

    def __init__(self) -> None:
        self.log: list[bytes] = []

    def append(self, *values: bytes) -> list[Event]:
        events = []
        for value in values:
            events.append(Event(value, Message(0, len(self.log))))
            self.log.append(value)
        return events


async def run_handover(fail_after: int) -> tuple[Publisher, Publisher, Tables]:
    """A counts 30 cases of the window in two segments; the next batch carries the
    marker that closes the window; A fails after publishing `fail_after` finals of it,
    so its batch is neither written nor acknowledged; B replays that batch."""
    clock = [T0 + 30]
    tables = Tables()
    worker_a = Publisher(fail_after=fail_after)
    stage_a = make_stage(tables, worker_a, clock)
    sessions = stage_a.settings.stream.partitions
    log = Input()
    counted = log.append(fold({}, range(30)), fold({"model": "m1"}, range(30)))
    await stage_a.process_batch(counted)  # type: ignore[arg-type]
    closing = log.append(*markers(T0 + 60 + GRACE + 1, sessions))
    clock[0] = T0 + 70
    with pytest.raises(Stopped):
        await stage_a.process_batch(closing)  # type: ignore[arg-type]

    worker_b = Publisher()
    tables = tables.restored()
    stage_b = make_stage(tables, worker_b, clock)
    await stage_b.process_batch(closing)  # type: ignore[arg-type] # not acknowledged: again
    return worker_a, worker_b, tables


@pytest.mark.parametrize("fail_after", [0, 1])
async def test_a_window_closed_during_a_handover_gets_its_final_with_every_case(
    fail_after: int,
) -> None:
    worker_a, worker_b, _ = await run_handover(fail_after)
    finals: dict[str, int] = {}
    for final in [*worker_a.finals(), *worker_b.finals()]:
        segment = orjson.dumps(final.segment).decode()
        assert finals.setdefault(segment, final.count) == final.count, "two counts"
    assert finals == {"{}": 30, '{"model":"m1"}': 30}


async def test_the_next_owner_closes_a_window_the_restored_watermark_already_passed() -> None:
    """The progress changelog kept the watermark past the window but the windows
    changelog lost the writes that closed it (they are different partitions): the next
    marker, even an older one that moves nothing, closes the window."""
    clock = [T0 + 30]
    sessions = settings_of(make_config()).stream.partitions
    counted = Input().append(fold({}, range(30)))
    closing = Input().append(*markers(T0 + 60 + GRACE + 1, sessions))
    lost, ahead = Tables(), Tables()
    for tables in (lost, ahead):
        stage = make_stage(tables, Publisher(), clock)
        await stage.process_batch(counted)  # type: ignore[arg-type]
    await make_stage(ahead, Publisher(), clock).process_batch(closing)  # type: ignore[arg-type]
    lost = lost.restored()
    lost.progress = ahead.restored().progress  # the watermark survived, the closes did not

    restored = Publisher()
    older = Input().append(*markers(T0 + 40, sessions))
    await make_stage(lost, restored, clock).process_batch(older)  # type: ignore[arg-type]
    assert [(final.segment, final.count) for final in restored.finals()] == [({}, 30)]


async def test_a_cancelled_batch_is_finished_before_the_cancellation_passes_on() -> None:
    steps: list[str] = []
    release = asyncio.Event()

    async def batch() -> None:
        steps.append("started")
        await release.wait()
        steps.append("written")

    async def agent() -> None:
        await run_to_completion(batch())

    task = asyncio.ensure_future(agent())
    await asyncio.sleep(0)
    task.cancel()
    await asyncio.sleep(0.01)
    assert not task.done(), "the agent stopped with its batch half done"
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert steps == ["started", "written"]


async def test_a_timer_during_table_recovery_hides_no_series_from_the_close() -> None:
    """B's interim timer runs while the windows table of a partition it was just given is
    still being recovered (the all-cases series not read yet): that half-read view must
    not decide what the closing marker closes."""
    clock = [T0 + 30]
    tables = Tables()
    stage_a = make_stage(tables, Publisher(), clock)
    sessions = stage_a.settings.stream.partitions
    counted = Input().append(fold({}, range(30)), fold({"model": "m1"}, range(30)))
    await stage_a.process_batch(counted)  # type: ignore[arg-type]

    changelog = tables.windows.changelog
    first = {key: value for key, value in changelog.items() if "model=" in key}
    recovering = Tables()
    recovering.windows = ChangelogTable(first)  # the model series is back, {} is not yet
    worker_b = Publisher()
    stage_b = make_stage(recovering, worker_b, clock)
    clock[0] = T0 + 31
    await stage_b.emit_due({0})  # the interim timer, mid-recovery
    for key, value in changelog.items():  # recovery completes
        recovering.windows[key] = orjson.loads(value)
    closing = Input().append(*markers(T0 + 60 + GRACE + 1, sessions))
    await stage_b.process_batch(closing)  # type: ignore[arg-type]
    finals = sorted((orjson.dumps(f.segment).decode(), f.count) for f in worker_b.finals())
    assert finals == [('{"model":"m1"}', 30), ("{}", 30)]


@pytest.mark.parametrize("survived", ["series", "pane"])
async def test_a_flush_cut_short_by_a_kill_counts_every_case_once(survived: str) -> None:
    """A SIGKILL in the middle of a flush: the windows changelog kept the batch's new
    series (its input offsets) but not the pane it counted them in, or the other way
    round. The next owner reads the batch again and counts its cases exactly once."""
    clock = [T0 + 30]
    tables = Tables()
    stage = make_stage(tables, Publisher(), clock)
    sessions = stage.settings.stream.partitions
    log = Input()
    await stage.process_batch(log.append(fold({}, range(30))))  # type: ignore[arg-type]
    before = dict(tables.windows.changelog)
    replayed = log.append(fold({}, range(30, 50)))
    await stage.process_batch(replayed)  # type: ignore[arg-type]
    after = tables.windows.changelog
    kept = "series|" if survived == "series" else "pane|"
    cut = {key: after[key] if key.startswith(kept) else before[key] for key in after}
    assert cut != after and cut != before  # the kill fell between the two writes

    crashed = Tables()
    crashed.windows = ChangelogTable(cut)
    worker_b = Publisher()
    stage_b = make_stage(crashed, worker_b, clock)
    await stage_b.process_batch(replayed)  # type: ignore[arg-type] # never acknowledged
    await stage_b.process_batch(log.append(*markers(T0 + 60 + GRACE + 1, sessions)))  # type: ignore[arg-type]
    assert [final.count for final in worker_b.finals()] == [50]
