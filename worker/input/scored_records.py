"""One input record's whole case-by-case path, from its raw bytes to its result's bytes:
decode and validate (`decode_record`), check its event time, score it, write the
result's JSON (`case_result_json`). The scoring pool's children run this
(`ScoringPool.score_records`), so the worker's event loop only publishes and folds; no
Kafka and no clock of its own here (the caller passes its clock's offset from the wall
clock).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, NamedTuple

import orjson

from schemas.outputs import Versions
from worker.config import Settings
from worker.gates.early import EarlyTurns, early_key, early_share
from worker.input.records import (
    SourcePosition,
    case_result_json,
    decode_record,
    usable_event_time,
)
from worker.input.rejections import UNKNOWN_SUITE, Rejected
from worker.input.unknown_fields import unknown_fields, with_unknown_fields
from worker.suites import registry
from worker.suites.base import Scored, forward_key

# What the event loop hands over per record: (raw value, received at (epoch seconds),
# (topic, partition, offset, record timestamp or None), the offset of the stage's clock
# from the wall clock (seconds; `scored_at` is taken by the stage's clock)).
RecordTask = tuple[bytes, float, tuple[str, int, int, float | None], float]

# A record of the suite that keeps sessions (a turn, or a whole session) when the
# scoring process has no forwarder for it: the stage decodes and forwards it itself.
NOT_A_CASE = "not_a_case"


class SessionRecord(NamedTuple):
    """A record of the suite that keeps sessions as its scoring process read it: what the
    score stage needs to forward it to the session stage without decoding it again (its
    session, its event time in epoch seconds, and what the early folds read of it:
    `model`, `labels`, `case`: id, kind, model, trace id), with the early sample's
    `EarlyTurns` (None: no early gate)."""

    session_id: str
    event_time: float
    model: str | None
    labels: Mapping[str, str]
    case: tuple[str, str, str | None, str | None]
    early: EarlyTurns | None


def session_message(
    raw: bytes, source: tuple[str, int, int], event_time: float, received: float
) -> bytes:
    """The session stage's message of a record of the suite that keeps sessions: the
    input record as it came (`raw`, which decoded as a JSON object), where it was read
    and its event and receive times. The record is not written again: its bytes are
    put in the message as they are."""
    head = orjson.dumps({"source": list(source), "event_time": event_time, "received": received})
    return b"".join((head[:-1], b',"record":', raw, b"}"))


# A record of the session stream may bundle the session messages of one micro-batch that go
# to the same partition (`session_bundle`), keyed by how many it holds.
BUNDLE_KEY_PREFIX = b"bundle:"
BUNDLE_HEAD = b'{"bundle":['
BUNDLE_TAIL = b"]}"


def session_bundle(messages: Sequence[bytes]) -> tuple[bytes, bytes]:
    """(key, value) of a session-stream record bundling `messages` (`session_message`s
    of one partition, in order): one Kafka record, not one each, for the session stage
    to read (the stage's per-record cost, in Faust, was about a tenth of its loop)."""
    key = BUNDLE_KEY_PREFIX + str(len(messages)).encode("ascii")
    return key, b"".join((BUNDLE_HEAD, b",".join(messages), BUNDLE_TAIL))


def bundled_messages(key: bytes | None) -> int:
    """How many session messages a session-stream record holds, by its key: a bundle's
    count, else one (a message keyed by its session, or a marker)."""
    if key is not None and key.startswith(BUNDLE_KEY_PREFIX):
        try:
            return max(1, int(key[len(BUNDLE_KEY_PREFIX) :]))
        except ValueError:
            return 1
    return 1


def session_messages(data: Any) -> list[Any]:
    """The session messages of a decoded session-stream record: a bundle's, in order, or
    the record itself (one message, or markers, or what the stage reports as not one)."""
    bundled = data.get("bundle") if isinstance(data, dict) else None
    return list(bundled) if isinstance(bundled, list) else [data]


class ResultFrame(NamedTuple):
    """What a result says besides its scores, for a scoring child to write it
    (`frame_result_json`): the record's fields, where and when it was read (epoch
    seconds), and the offset of the stage's clock from the wall clock (`scored_at` is
    taken by the stage's clock)."""

    case_id: str
    suite: str
    kind: str
    event_time: float
    model: str | None
    labels: Mapping[str, str]
    source: tuple[str, int, int] | None
    received: float | None
    trace_id: str | None
    unknown: tuple[str, ...]  # the payload's unknown fields (`unknown_fields`)
    clock_offset: float


class Framed(NamedTuple):
    """A pool item whose result the child writes too: `item` for the scorer, and the
    `frame` of its result, written with the scorer's `scored(answer) -> Scored` (a scorer
    without one answers as for `item` alone, and the caller writes the result)."""

    item: Any
    frame: ResultFrame


class FramedAnswer(NamedTuple):
    """A scorer's answer to a `Framed` item, with its result's bytes (as the results
    topic carries them)."""

    answer: Any
    value: bytes


def frame_result_json(frame: ResultFrame, scored: Scored, versions: Versions) -> bytes:
    """The result's bytes (`case_result_json`) of `scored` in `frame`."""
    source = None if frame.source is None else SourcePosition(*frame.source)
    received = frame.received
    return case_result_json(
        case_id=frame.case_id,
        suite=frame.suite,
        kind=frame.kind,
        scored=with_unknown_fields(scored, list(frame.unknown)),
        event_time=datetime.fromtimestamp(frame.event_time, UTC),
        model=frame.model,
        labels=frame.labels,
        versions=versions,
        source=source,
        scored_at=datetime.fromtimestamp(time.time() + frame.clock_offset, UTC),
        received_at=None if received is None else datetime.fromtimestamp(received, UTC),
        trace_id=frame.trace_id,
    )


def suite_versions(suite: str, settings: Settings, known: dict[str, Versions]) -> Versions:
    """The `versions` of `suite`'s results, built once into `known`."""
    versions = known.get(suite)
    if versions is None:
        spec = registry.get(suite)
        versions = known[suite] = spec.versions(spec.section(settings))
    return versions


class ScoredRecord(NamedTuple):
    """A scored record: its result as the results topic carries it, and its event time."""

    value: bytes
    event_time: float


def score_record(
    task: RecordTask,
    settings: Settings,
    scorers: Mapping[str, Callable[..., Any]],
    versions: dict[str, Versions],
) -> ScoredRecord | SessionRecord | EarlyTurns | str:
    """The result of one input record, or for a record of the session suite its
    `SessionRecord` (without a forwarder: `NOT_A_CASE`, or `EarlyTurns` when the suite
    has an early judge and gates it can serve); raises
    `Rejected` with the reason a dead letter gives (the same checks, in the same order,
    as the stage made before)."""
    raw, received, (topic, partition, offset, timestamp), clock_offset = task
    record = decode_record(raw, settings.max_record_bytes, settings.limits)
    received_at = datetime.fromtimestamp(received, UTC)
    event_time = usable_event_time(
        record.event_time()
        or (None if timestamp is None else datetime.fromtimestamp(timestamp, UTC))
        or received_at,
        received_at,
        settings.max_future_skew,
    )
    if not settings.scores(record.suite):
        raise Rejected(UNKNOWN_SUITE, f"suite {record.suite!r} is not in this worker's `suites`")
    session_suite = registry.session_suite()
    if session_suite is not None and record.suite == session_suite.name:
        # the stage forwards it; a sample is judged here first (`worker.gates.early`)
        judge = scorers.get(early_key(record.suite))
        share = early_share(settings)
        early = None if judge is None or not share else judge(record, share)
        forwarder = scorers.get(forward_key(record.suite))
        if forwarder is None:
            return NOT_A_CASE if early is None else early
        kind = "session" if hasattr(record.payload, "turns") else "turn"
        return SessionRecord(
            session_id=forwarder(record),
            event_time=event_time.timestamp(),
            model=record.model,
            labels=record.labels,
            case=(record.id, kind, record.model, record.trace_id),
            early=early,
        )
    scorer = scorers.get(record.suite)
    if scorer is None:
        raise Rejected(UNKNOWN_SUITE, f"suite {record.suite!r} is not scored case by case")
    scored = scorer(record.payload)
    if not isinstance(scored, Scored):
        raise TypeError(f"the {record.suite} scorer returned {type(scored).__name__}")
    value = case_result_json(
        case_id=record.id,
        suite=record.suite,
        kind="case",
        scored=with_unknown_fields(scored, unknown_fields(record.payload)),
        event_time=event_time,
        model=record.model,
        labels=record.labels,
        versions=suite_versions(record.suite, settings, versions),
        source=SourcePosition(topic, partition, offset),
        scored_at=datetime.fromtimestamp(time.time() + clock_offset, UTC),
        received_at=received_at,
        trace_id=record.trace_id,
    )
    return ScoredRecord(value, event_time.timestamp())


def judge_samples(scored: list[Any], scorers: Mapping[str, Callable[..., Any]]) -> list[Any]:
    """`scored` (a chunk's `score_record` answers) with the sampled records' turns judged
    together, by their suite's early judge (its `judge`: one classifier pass for the
    chunk, not one per turn); a record with a turn that could not be judged is not."""
    pending: list[tuple[int, EarlyTurns]] = []
    for index, answer in enumerate(scored):
        early = _early_of(answer)
        if early is not None and early.pending:
            pending.append((index, early))
    if not pending:
        return scored
    session_suite = registry.session_suite()
    judge: Any = None if session_suite is None else scorers.get(early_key(session_suite.name))
    out = list(scored)
    items = [item for _, early in pending for item in early.pending or ()]
    judged = judge.judge(items) if judge is not None else [None] * len(items)
    cursor = 0
    for index, early in pending:
        count = len(early.pending or ())
        scores = judged[cursor : cursor + count]
        cursor += count
        complete = [score for score in scores if score is not None]
        done = EarlyTurns(early.turns, complete if len(complete) == count else None)
        answer = out[index]
        out[index] = answer._replace(early=done) if isinstance(answer, SessionRecord) else done
    return out


def _early_of(answer: Any) -> EarlyTurns | None:
    if isinstance(answer, SessionRecord):
        return answer.early
    return answer if isinstance(answer, EarlyTurns) else None


__all__ = [
    "NOT_A_CASE",
    "Framed",
    "FramedAnswer",
    "RecordTask",
    "ResultFrame",
    "ScoredRecord",
    "SessionRecord",
    "frame_result_json",
    "judge_samples",
    "score_record",
    "session_message",
    "suite_versions",
]
