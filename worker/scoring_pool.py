"""Case scoring in child processes, each record under `limits.scoring_deadline`.

A scorer that runs away on a degenerate input (a regex that backtracks, a number parsed
into a huge integer) holds the GIL: no thread and no signal stops it. So the case scorers
run in a pool of child processes (`pebble.ProcessPool`, which kills a task's process when
it passes its timeout and starts a new one), never on the caller's event loop.

Cases go in micro-batches ("chunks") to keep the cost of a process hop small; each chunk
must finish within one record's deadline. When one does not (or its process dies), its
process is killed and the chunk is scored again record by record, each with the deadline:
exactly the slow record becomes a `scoring_timeout` outcome (a record that kills its
process, a `scoring_error`), and every other record of the chunk still gets its result.

A child is prepared once (`_start_child`: the suites' case scorers from the settings).
Payloads go as compactly as they can: the stream sends a record's raw bytes and the
child takes it all the way to its result's bytes (`score_records`: decoding, validation,
scoring and the result off the worker's event loop); a `Scored` comes back as JSON.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from functools import partial
from typing import Any, NamedTuple

import orjson
from pebble import ProcessExpired, ProcessPool

from schemas.outputs import Versions
from worker.config import Settings
from worker.input.records import decode_record
from worker.input.rejections import SCORING_ERROR, SCORING_TIMEOUT, UNKNOWN_SUITE, Rejected
from worker.input.scored_records import (
    Framed,
    FramedAnswer,
    RecordTask,
    frame_result_json,
    judge_samples,
    score_record,
    suite_versions,
)
from worker.suites import registry
from worker.suites.base import Scored

log = logging.getLogger("scorestream")

CHUNK_RECORDS = 64  # cases per task: a process hop costs about as much as a few cases
CHUNK_BYTES = 256 * 1024  # and about this much input per task
MAX_MESSAGE_CHARS = 500  # of an error's repr in an outcome
_CASES, _RECORDS = "cases", "records"  # the two kinds of task a child runs

# (suite, payload, size in bytes of its input: the chunking hint); for a suite's case
# scorer the payload is its payload model, or the raw bytes of a record that
# `decode_record` accepted (decoded again in the child).
Case = tuple[str, Any, int]
# A scorer factory run in each child: `Settings` in, a function of one payload out (a
# suite's `CaseScorer`, or e.g. the alignment turn scorer).
ScorerFactory = Callable[[Settings], Callable[[Any], Any]]


class Outcome(NamedTuple):
    """What scoring one case came to: `scored` (a `Scored` for a suite's case scorer, or
    what another pool scorer returns), or the dead-letter `reason` and message. A named
    tuple: the loop makes one per record, and a frozen dataclass costs several times as
    much to build."""

    scored: Scored | Any | None
    reason: str | None = None
    message: str = ""
    seconds: float = 0.0  # scoring time in the child (the deadline when it timed out)


def section_factory(suite: str, factory: Callable[[Any], Callable[[Any], Any]]) -> ScorerFactory:
    """A `ScorerFactory` handing `factory` only the suite's own section of the settings."""
    return partial(_from_section, suite, factory)


def _from_section(
    suite: str, factory: Callable[[Any], Callable[[Any], Any]], settings: Settings
) -> Callable[[Any], Any]:
    return factory(getattr(settings, suite))


def case_scorer_factories(settings: Settings | None = None) -> dict[str, ScorerFactory]:
    """The case scorer factory of every registered suite scored case by case (of those
    `settings` scores, when given)."""
    return {
        spec.name: section_factory(spec.name, spec.case_scorer)
        for spec in registry.specs()
        if spec.case_scorer is not None and (settings is None or settings.scores(spec.name))
    }


class ScoringPool:
    """Scores cases in `processes` child processes, each case within `deadline` seconds.

    The processes start on first use; `close` stops them."""

    def __init__(
        self,
        settings: Settings,
        factories: Mapping[str, ScorerFactory] | None = None,
        processes: int | None = None,
        deadline: float | None = None,
        start_method: str = "forkserver",
        more_factories: Callable[[], Mapping[str, ScorerFactory]] | None = None,
        preload: Sequence[str] = (),
    ) -> None:
        self.settings = settings
        # "forkserver" (the worker): a fresh interpreter forks each child, so nothing of
        # the caller's threads (Kafka clients, the ONNX runtime) or their locks is
        # inherited. "fork" suits a caller without threads (the `score` command): faster.
        self.start_method = start_method
        self.factories = dict(case_scorer_factories(settings) if factories is None else factories)
        # Scorers that can only be described once the caller has warmed up (alignment
        # turns need the embedded persona examples): asked for when the pool starts.
        self.more_factories = more_factories
        # Modules the forkserver imports once, so that a child replacing a killed one
        # starts without importing them (forkserver only).
        # (the first leaves the worker's process group: `worker.fork_server_group`)
        self.preload = ["worker.fork_server_group", __name__, *preload]
        self.processes = processes or settings.stream.scoring_processes
        self.deadline = deadline if deadline is not None else settings.limits.scoring_deadline
        self._pool: ProcessPool | None = None
        self._preparing: Future[Any] | None = None  # `prepared_by`: scoring waits for it

    def _started(self) -> ProcessPool:
        if self._pool is None:
            context = multiprocessing.get_context(self.start_method)
            if self.start_method == "forkserver":  # children start with the scorers imported
                context.set_forkserver_preload(self.preload)
            factories = dict(self.factories)
            if self.more_factories is not None:
                factories.update(self.more_factories())
            self._pool = ProcessPool(
                max_workers=self.processes,
                initializer=_start_child,
                initargs=(self.settings, factories),
                context=context,
            )
        return self._pool

    def start_fork_server(self) -> None:
        """Start the fork server now (forkserver only): it imports the preloaded modules
        in its own process while the caller goes on preparing (a worker loads its models
        meanwhile), so the children later fork from a server that is ready."""
        if self.start_method != "forkserver" or self._pool is not None:
            return
        from multiprocessing import forkserver

        multiprocessing.get_context("forkserver").set_forkserver_preload(self.preload)
        forkserver.ensure_running()

    def start(self, timeout: float = 120.0) -> None:
        """Start the children now and wait until one is prepared (a worker does this
        before it reads, so the first batch does not wait and a scorer that cannot be
        prepared fails the start instead of every record)."""
        try:
            self._started().schedule(_run_chunk, args=(_CASES, [])).result(timeout)
        except Exception as exc:
            self.close()
            raise RuntimeError(f"the scoring processes could not start: {exc!r}") from exc

    def prepared_by(self, preparing: Future[Any]) -> None:
        """Score nothing until `preparing` is done: the worker loads its models and starts
        this pool (`start`) in another thread while it joins its group, and a record that
        arrives meanwhile waits for them instead of starting a second pool. When the
        preparation failed, scoring waits for good: the worker is stopping (it says why),
        and its records are left for the next one, neither scored nor dead-lettered."""
        self._preparing = preparing

    async def _until_prepared(self) -> None:
        preparing = self._preparing
        if preparing is None:
            return
        if preparing.done() and not preparing.cancelled() and preparing.exception() is None:
            self._preparing = None  # prepared: nothing to wait for from now on
            return
        try:
            await asyncio.wrap_future(preparing)
        except Exception:  # (a cancellation of this task goes on up)
            await asyncio.Event().wait()  # never set: the worker's stop cancels this

    @property
    def started(self) -> bool:
        """Whether the children have been started (`start`, or a first use)."""
        return self._pool is not None

    async def call(self, function: Callable[..., Any], *args: Any) -> Any:
        """`function(*args)` in a child, within the deadline: pure work too heavy for the
        caller's event loop (the window stage's final aggregates). `function` must be
        importable by the child and `args` picklable. Raises what the call raised, or
        `concurrent.futures.TimeoutError` past the deadline, or `ProcessExpired`."""
        await self._until_prepared()
        future = self._started().schedule(function, args=args, timeout=self.deadline)
        return await asyncio.wrap_future(future)

    def close(self) -> None:
        """Stop the child processes (a running task is killed)."""
        if self._pool is not None:
            self._pool.stop()
            self._pool.join(timeout=10)
            self._pool = None

    async def score(self, cases: Sequence[Case]) -> list[Outcome]:
        """Score `cases` (order kept); never raises for one case's sake. A pool that
        broke (not by a case: a child that cannot start) is started again once; if it
        is still broken, the cases it did not score are `scoring_error` outcomes."""
        tasks = [(suite, payload) for suite, payload, _ in cases]
        return await self._run(tasks, [size for _, _, size in cases], _CASES)

    def score_blocking(self, cases: Sequence[Case]) -> list[Outcome]:
        """`score` for callers without an event loop (the `score` command)."""
        return asyncio.run(self.score(cases))

    async def score_records(self, records: Sequence[RecordTask]) -> list[Outcome]:
        """Take input records from their raw bytes to their results' bytes in the children
        (`scored_records.score_record`), each within the deadline (order kept): `scored`
        is a `ScoredRecord`, a `SessionRecord` for a record to forward to the session
        stage (`NOT_A_CASE` or `EarlyTurns` when the caller decodes it itself); otherwise
        the dead-letter reason (a rejected record's, `scoring_timeout`, ...).
        Never raises for one record's sake (as `score`)."""
        return await self._run(records, [len(task[0]) for task in records], _RECORDS)

    async def _run(self, tasks: Sequence[Any], sizes: Sequence[int], kind: str) -> list[Outcome]:
        await self._until_prepared()
        outcomes: list[Outcome | None] = [None] * len(tasks)
        for attempt in (1, 2):
            try:
                await self._score_into(tasks, sizes, outcomes, kind)
                break
            except _PoolBroken as broken:
                log.error("the scoring pool broke (%s): starting it again", broken)
                self.close()
                if attempt == 2:
                    failed = Outcome(None, SCORING_ERROR, f"the scoring pool broke: {broken}")
                    outcomes = [outcome or failed for outcome in outcomes]
        return [outcome if outcome is not None else _lost() for outcome in outcomes]

    async def _score_into(
        self, tasks: Sequence[Any], sizes: Sequence[int], outcomes: list[Outcome | None], kind: str
    ) -> None:
        """Run the tasks without an outcome yet in chunks; a chunk that passed the
        deadline or lost its process, again task by task."""
        todo = [index for index, outcome in enumerate(outcomes) if outcome is None]
        chunks = _chunks(todo, [sizes[index] for index in todo])
        futures = [self._schedule([tasks[index] for index in chunk], kind) for chunk in chunks]
        retry: list[int] = []
        for chunk, future in zip(chunks, futures, strict=True):
            try:
                scored = await asyncio.wrap_future(future)
            except (FutureTimeout, ProcessExpired) as exc:
                if len(chunk) == 1:
                    outcomes[chunk[0]] = self._failed(exc)
                else:
                    log.warning("%d cases scored together failed (%r): singly", len(chunk), exc)
                    retry.extend(chunk)
                continue
            except Exception as exc:
                raise _PoolBroken(repr(exc)) from exc
            for index, fields in zip(chunk, scored, strict=True):
                outcomes[index] = _outcome(fields)
        singles = [self._schedule([tasks[index]], kind) for index in retry]
        for index, future in zip(retry, singles, strict=True):
            try:
                outcomes[index] = _outcome((await asyncio.wrap_future(future))[0])
            except (FutureTimeout, ProcessExpired) as exc:
                outcomes[index] = self._failed(exc)
            except Exception as exc:
                raise _PoolBroken(repr(exc)) from exc

    def _schedule(self, tasks: Sequence[Any], kind: str) -> Future[list[tuple[Any, ...]]]:
        try:
            return self._started().schedule(
                _run_chunk, args=(kind, list(tasks)), timeout=self.deadline
            )
        except RuntimeError as exc:  # the pool is in an error state
            raise _PoolBroken(repr(exc)) from exc

    def _failed(self, exc: BaseException) -> Outcome:
        """The outcome of one case that passed the deadline or killed its process."""
        if isinstance(exc, ProcessExpired):
            message = f"the scoring process died (exit code {exc.exitcode})"
            return Outcome(None, SCORING_ERROR, message)
        message = f"scoring took longer than limits.scoring_deadline ({self.deadline:g} s): stopped"
        return Outcome(None, SCORING_TIMEOUT, message, self.deadline)


class _PoolBroken(Exception):
    """The pool itself failed (not one case)."""


def _outcome(fields: tuple[Any, ...]) -> Outcome:
    """An `Outcome` from a child's answer (a `Scored` came as JSON bytes)."""
    scored = fields[0]
    if isinstance(scored, bytes):  # a case scorer's (a record's result is a ScoredRecord)
        return Outcome(Scored(**orjson.loads(scored)), *fields[1:])
    return Outcome._make(fields)


def _lost() -> Outcome:
    return Outcome(None, SCORING_ERROR, "no outcome came back from the scoring pool")


def _chunks(indices: Sequence[int], sizes: Sequence[int]) -> list[list[int]]:
    """Consecutive runs of `indices` of at most `CHUNK_RECORDS` cases and about
    `CHUNK_BYTES` of input (`sizes`: of each index's case, in the same order)."""
    chunks: list[list[int]] = []
    current: list[int] = []
    size = 0
    for index, item_size in zip(indices, sizes, strict=True):
        if current and (len(current) >= CHUNK_RECORDS or size + item_size > CHUNK_BYTES):
            chunks.append(current)
            current, size = [], 0
        current.append(index)
        size += item_size
    if current:
        chunks.append(current)
    return chunks


# ---------------------------------------------------------------- in the child

_SCORERS: dict[str, Callable[[Any], Any]] = {}
_SETTINGS: list[Settings] = []
_VERSIONS: dict[str, Versions] = {}  # of each suite's results, built once per child


def _start_child(settings: Settings, factories: Mapping[str, ScorerFactory]) -> None:
    """Prepare a child once: its case scorers. Signals are for the parent to handle:
    Ctrl-C is ignored, and the child leaves the worker's process group, so a SIGTERM to
    the whole group (`kill -TERM -PGID`, a supervisor stopping the group) reaches only the
    worker, which then finishes its batches in hand with its children and stops them
    (`close`). Before, such a signal killed the children under the batch in hand, whose
    records then became `scoring_error` dead letters. A child still ends when the worker
    is gone: its task pipe closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.setpgrp()
    _SETTINGS[:] = [settings]
    _VERSIONS.clear()
    _SCORERS.clear()
    _SCORERS.update({name: factory(settings) for name, factory in factories.items()})


def _run_chunk(kind: str, tasks: list[Any]) -> list[tuple[Any, ...]]:
    """Each task's `Outcome` fields (plain tuples: an exception may not pickle)."""
    if kind == _RECORDS:
        return _judge_samples([_score_record(task) for task in tasks])
    shares = _prepare_chunk(tasks)
    outcomes = [_score_one(suite, payload) for suite, payload in tasks]
    if not shares:
        return outcomes
    return [
        (*fields[:3], fields[3] + shares.get(suite, 0.0))
        for (suite, _), fields in zip(tasks, outcomes, strict=True)
    ]


def _prepare_chunk(tasks: list[tuple[str, Any]]) -> dict[str, float]:
    """Show each scorer that reads a chunk at once (one with `prepare`: the alignment
    turns' safety classifier) its payloads before they are scored one by one; returns
    each such suite's preparing time per case (counted in each case's scoring time). A
    failure here loses nothing: each case is then scored alone, and fails alone."""
    by_suite: dict[str, list[Any]] = {}
    for suite, payload in tasks:
        item = payload.item if isinstance(payload, Framed) else payload
        by_suite.setdefault(suite, []).append(item)
    shares: dict[str, float] = {}
    for suite, payloads in by_suite.items():
        prepare = getattr(_SCORERS.get(suite), "prepare", None)
        if prepare is None or len(payloads) < 2:
            continue
        started = time.perf_counter()
        try:
            prepare(payloads)
            shares[suite] = (time.perf_counter() - started) / len(payloads)
        except Exception as exc:
            log.warning(
                "reading %d %s cases together failed (%r): one by one", len(payloads), suite, exc
            )
    return shares


def _score_record(task: RecordTask) -> tuple[Any, ...]:
    started = time.perf_counter()
    try:
        scored = score_record(task, _SETTINGS[0], _SCORERS, _VERSIONS)
    except Rejected as rejected:
        return (None, rejected.reason, rejected.message, time.perf_counter() - started)
    except Exception as exc:  # a scorer bug loses nothing: the caller dead-letters it
        return (None, SCORING_ERROR, repr(exc)[:MAX_MESSAGE_CHARS], time.perf_counter() - started)
    return (scored, None, "", time.perf_counter() - started)


def _judge_samples(outcomes: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """The chunk's records sampled for the early gates, judged together
    (`scored_records.judge_samples`); the time is shared among them."""
    started = time.perf_counter()
    answers = judge_samples([fields[0] for fields in outcomes], _SCORERS)
    changed = {i for i, fields in enumerate(outcomes) if answers[i] is not fields[0]}
    if not changed:
        return outcomes
    share = (time.perf_counter() - started) / len(changed)
    return [
        (answers[i], *fields[1:3], fields[3] + share) if i in changed else fields
        for i, fields in enumerate(outcomes)
    ]


def _score_one(suite: str, payload: Any) -> tuple[Any, ...]:
    scorer = _SCORERS.get(suite)
    if scorer is None:
        return (None, UNKNOWN_SUITE, f"suite {suite!r} is not scored case by case", 0.0)
    started = time.perf_counter()
    try:
        if isinstance(payload, bytes):
            settings = _SETTINGS[0]
            payload = decode_record(payload, settings.max_record_bytes, settings.limits).payload
        frame = None
        if isinstance(payload, Framed):  # the result's bytes are written here too
            payload, frame = payload.item, payload.frame
        scored = scorer(payload)
        scored_of = None if frame is None else getattr(scorer, "scored", None)
        if frame is not None and scored_of is not None:  # (without: the caller writes it)
            versions = suite_versions(frame.suite, _SETTINGS[0], _VERSIONS)
            scored = FramedAnswer(scored, frame_result_json(frame, scored_of(scored), versions))
        if isinstance(scored, Scored):
            scored = _packed(scored)
    except Rejected as rejected:
        return (None, rejected.reason, rejected.message, time.perf_counter() - started)
    except Exception as exc:  # a scorer bug loses nothing: the caller dead-letters it
        return (None, SCORING_ERROR, repr(exc)[:MAX_MESSAGE_CHARS], time.perf_counter() - started)
    return (scored, None, "", time.perf_counter() - started)


def _packed(scored: Scored) -> bytes:
    fields = {
        "scores": scored.scores,
        "label": scored.label,
        "grade": scored.grade,
        "details": scored.details,
        "counts": scored.counts,
    }
    return orjson.dumps(fields)


__all__ = ["Case", "Outcome", "ScoringPool", "case_scorer_factories", "section_factory"]
