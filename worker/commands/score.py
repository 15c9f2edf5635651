"""`scorestream score FILE...`: score files offline with the suites' batch scorers.

Suite-agnostic: rows are recognised by shape (`worker.input.files`), grouped by suite and
handed to the batch scorer of the suite's spec (`worker.suites.registry`). Exit codes
(seed 004 section 7.3): 0 all Pass, 1 any Fail, 2 any Review and no Fail, 3 configuration,
usage or runtime error, and 3 too when any row could not be scored or belongs to another
suite than `--suite` (the report of the other rows is still written; each row is named on
stderr as `FILE:LINE: field: reason`).

Rows get the stream's intake limits (`limits.*`) and its deadline: each case of a suite
scored case by case is scored once in the scoring pool (child processes, one per core;
the batch scorer reuses the result), and a row past `limits.scoring_deadline` is named
and left out of the report. Alignment turns are scored in the pool too, after the
embedding, each under the deadline: a turn past it is named and left out of its session.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from rich.console import Console
from rich.progress import Progress

from worker.config import ConfigError, LimitsSettings, Settings, load_settings
from worker.exit_codes import EXIT_ERROR
from worker.input.files import (
    RawRow,
    RowError,
    guess_native_suite,
    is_envelope,
    parse_envelope,
    read_rows,
    validation_problems,
)
from worker.input.records import check_limits
from worker.input.rejections import SCORING_ERROR, SCORING_TIMEOUT, Rejected
from worker.input.unknown_fields import NATIVE_ROW_KEYS, unknown_fields
from worker.scoring_pool import ScorerFactory, ScoringPool, section_factory
from worker.suites import registry
from worker.suites.alignment.safety import DIRECT_BUDGET_CHARS, DIRECT_TEXT_CHARS
from worker.suites.alignment.scoring import classifier_from_settings
from worker.suites.alignment.streaming import (
    ALIGNMENT_TURN,
    alignment_turn_scorer,
    prepare_turn_scoring,
)
from worker.suites.base import BatchItem, BatchOptions, BatchReport, BatchScorer, Scored

PROGRESS_MIN_ROWS = 500  # a progress bar only for files this large, on a terminal
_SEVERITY = {0: 0, 2: 1, 1: 2, EXIT_ERROR: 3}  # worst wins: 3 > 1 > 2 > 0


def worst_exit_code(codes: Iterable[int]) -> int:
    """Combine per-suite exit codes: an error beats Fail, which beats Review, then Pass."""
    return max(codes, key=lambda code: _SEVERITY.get(code, 3), default=0)


class SuiteUnavailable(Exception):
    """A suite that is not registered or whose batch scorer cannot start."""


class Scorers:
    """The batch scorer of each suite, made on first use."""

    def __init__(self, settings: Settings, options: BatchOptions) -> None:
        self.settings = settings
        self.options = options
        self._scorers: dict[str, BatchScorer] = {}
        self.unavailable: dict[str, str] = {}

    def get(self, suite: str) -> BatchScorer:
        if suite in self.unavailable:
            raise SuiteUnavailable(self.unavailable[suite])
        if suite not in self._scorers:
            spec = registry.find(suite)
            if spec is None:
                known = ", ".join(registry.names())
                self.unavailable[suite] = f"suite {suite!r} is not available (known: {known})"
                raise SuiteUnavailable(self.unavailable[suite])
            if not self.settings.scores(suite):
                scored = ", ".join(self.settings.suites or ())
                self.unavailable[suite] = f"suite {suite!r} is not in the config's suites: {scored}"
                raise SuiteUnavailable(self.unavailable[suite])
            try:
                self._scorers[suite] = spec.batch_scorer(spec.section(self.settings), self.options)
            except Exception as exc:  # e.g. a suite's own configuration check
                self.unavailable[suite] = f"suite {suite!r} cannot start: {exc}"
                raise SuiteUnavailable(self.unavailable[suite]) from exc
        return self._scorers[suite]


def recognise(row: RawRow, default_suite: str | None, scorers: Scorers) -> tuple[str, BatchItem]:
    """The suite and validated item of one row; raises `RowError` or `SuiteUnavailable`."""
    if row.error is not None or row.data is None:
        raise RowError([row.error or "(row): empty"])
    data = row.data
    limits = scorers.settings.limits
    if is_envelope(data):
        _check_limits(data, limits)
        record = parse_envelope(data)
        if default_suite is not None and record.suite != default_suite:
            raise RowError([f"suite: a {record.suite} envelope, not {default_suite} (--suite)"])
        scorers.get(record.suite)
        item = BatchItem(
            id=record.id,
            payload=record.payload,
            model=record.model,
            labels=record.labels,
            source=row.source,
            unknown_fields=tuple(unknown_fields(record.payload)),
        )
        return record.suite, item
    shape = guess_native_suite(data)
    if default_suite is not None and shape is not None and shape != default_suite:
        raise RowError([f"(row): has the shape of a {shape} row, not {default_suite} (--suite)"])
    suite = default_suite or shape
    if suite is None:
        raise RowError(["suite: not an envelope (needs suite and payload); use --suite"])
    scorer = scorers.get(suite)
    _check_limits({"payload": data}, limits, native=True)
    try:
        payload = scorer.native_payload(data)
    except ValidationError as exc:
        raise RowError(validation_problems(exc)) from exc
    except ValueError as exc:
        raise RowError([str(exc)]) from exc
    item = BatchItem(
        id=scorer.native_id(data, row.source),
        payload=payload,
        source=row.source,
        unknown_fields=tuple(unknown_fields(payload, ignore=NATIVE_ROW_KEYS)),
    )
    return suite, item


def _check_limits(data: dict[str, Any], limits: LimitsSettings, native: bool = False) -> None:
    """The stream's intake limits (`limits.*`) on one row; a native row is the payload."""
    try:
        check_limits(data, limits)
    except Rejected as rejected:
        message = rejected.message
        if native:  # name the row's own field, not the envelope's
            message = message.removeprefix("payload.").removeprefix("payload")
        raise RowError([message]) from None


def drop_past_deadline(
    batches: dict[str, list[BatchItem]], pool: ScoringPool, errors: Console
) -> int:
    """Score every case of the suites scored case by case once in the scoring pool, each
    under `limits.scoring_deadline`, and drop the rows past it (or whose scorer failed),
    each named on stderr; how many were dropped. The rest cannot hang the report, and
    carry their result (`BatchItem.scored`) so that the batch scorer does not score
    them again."""
    cases = [
        (suite, item)
        for suite, items in batches.items()
        if suite in pool.factories
        for item in items
    ]
    if not cases:
        return 0
    pool.start()  # a scorer that cannot be prepared: RuntimeError, not a verdict per row
    outcomes = pool.score_blocking([(suite, item.payload, 0) for suite, item in cases])
    dropped: set[int] = set()
    results: dict[int, Scored] = {}
    for (_, item), outcome in zip(cases, outcomes, strict=True):
        if outcome.reason in (SCORING_TIMEOUT, SCORING_ERROR):
            errors.print(
                f"{item.source}: payload: {outcome.message}", highlight=False, markup=False
            )
            dropped.add(id(item))
        elif isinstance(outcome.scored, Scored):
            results[id(item)] = outcome.scored
    for suite in list(batches):
        batches[suite] = [
            replace(item, scored=results.get(id(item)))
            for item in batches[suite]
            if id(item) not in dropped
        ]
        if not batches[suite]:
            del batches[suite]
    return len(dropped)


class DeadlineTurns:
    """Scores alignment turns for the alignment batch scorer in the scoring pool, each
    under `limits.scoring_deadline` (as the worker's session stage does); a turn past
    it is named on stderr and left out of its session."""

    def __init__(self, settings: Settings, scorer: Any, errors: Console) -> None:
        self.settings = settings
        self.scorer = scorer  # an AlignmentBatchScorer: personas embedded in its catalog
        self.errors = errors
        self.rejected = 0
        self.pool: ScoringPool | None = None

    def __call__(self, turns: list[tuple[str, str, Any]], sources: list[str]) -> list[Any]:
        if not turns:
            return []
        if self.pool is None:
            self.pool = ScoringPool(
                self.settings,
                factories=self._factories([len(text) for _, text, _ in turns]),
                processes=os.cpu_count() or 1,
                start_method="fork",
            )
        outcomes = self.pool.score_blocking(
            [(ALIGNMENT_TURN, turn, len(turn[1])) for turn in turns]
        )
        scored: list[Any] = []
        for outcome, source in zip(outcomes, sources, strict=True):
            if outcome.reason is None:
                scored.append(outcome.scored)
                continue
            self.errors.print(f"{source}: text: {outcome.message}", highlight=False, markup=False)
            self.rejected += 1
            scored.append(outcome.message)
        return scored

    def _factories(self, text_sizes: list[int]) -> dict[str, ScorerFactory]:
        """The worker's alignment turn scorer, with the personas' example vectors and
        trait classifiers from the batch scorer's catalog. Turns of these `text_sizes`
        that the safety patterns may match one by one (each short, all within the
        budget) are, without building their prefilter: it is a second of CPU, most of
        scoring a session or two, and a child never builds it under a case's deadline."""
        catalog = self.scorer.catalog
        personas = {persona_id: catalog.get(persona_id) for persona_id in catalog.ids()}
        vectors = {pid: persona.example_vectors for pid, persona in personas.items()}
        classifiers = {pid: persona.trait_classifier for pid, persona in personas.items()}
        safety = classifier_from_settings(self.settings.alignment)
        prefilter = sum(text_sizes) > DIRECT_BUDGET_CHARS or max(text_sizes) > DIRECT_TEXT_CHARS
        # here once: the forked children share it
        prepare_turn_scoring(self.settings.alignment, prefilter)
        scorer = partial(alignment_turn_scorer, vectors, classifiers, safety, prefilter=prefilter)
        return {ALIGNMENT_TURN: section_factory("alignment", scorer)}

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
            self.pool = None


def _settings(args: argparse.Namespace) -> Settings:
    overrides: dict[str, Any] = {}
    if getattr(args, "strict_ah", False):
        overrides["safe"] = {"strict_ah": True}
    return load_settings(getattr(args, "config", None), overrides=overrides)


def _write(path: Path, text: str, errors: Console) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    errors.print(f"report written: {path}", highlight=False, markup=False)


def _suffixed(path: Path, suite: str, several: bool) -> Path:
    return path.with_name(f"{path.stem}.{suite}{path.suffix}") if several else path


def emit_reports(
    reports: dict[str, BatchReport],
    args: argparse.Namespace,
    report_dir: Path,
    out: Console,
    errors: Console,
) -> None:
    """Render or write every report in the requested `--format`."""
    fmt = args.format
    several = len(reports) > 1
    output = Path(args.output) if args.output else None
    for suite, report in reports.items():
        if fmt in ("console", "all"):
            report.render_console(out, verbose=args.verbose)
        if fmt == "json":
            text = json.dumps(report.to_json(), indent=2, ensure_ascii=False) + "\n"
            if output is None:
                sys.stdout.write(text)
                sys.stdout.flush()
            else:
                _write(_suffixed(output, suite, several), text, errors)
        if fmt == "markdown":
            target = output or report_dir / f"{report.report_stem()}.md"
            _write(_suffixed(target, suite, several), report.to_markdown(), errors)
        if fmt == "all":
            directory = output or report_dir
            stem = report.report_stem()
            text = json.dumps(report.to_json(), indent=2, ensure_ascii=False) + "\n"
            _write(directory / f"{stem}.json", text, errors)
            _write(directory / f"{stem}.md", report.to_markdown(), errors)


def _read_all(files: list[str], errors: Console) -> list[RawRow] | None:
    rows: list[RawRow] = []
    for name in files:
        path = Path(name)
        if not path.is_file():
            errors.print(f"scorestream score: {name}: no such file", highlight=False, markup=False)
            return None
        try:
            rows.extend(read_rows(path))
        except OSError as exc:
            errors.print(f"scorestream score: {name}: {exc.strerror}", markup=False)
            return None
    return rows


def run_score(args: argparse.Namespace) -> int:
    """Score the files of `args.files`; returns the exit code."""
    errors = Console(stderr=True, soft_wrap=True)
    try:
        settings = _settings(args)
    except ConfigError as exc:
        errors.print(f"scorestream score: configuration error:\n{exc}", markup=False)
        return EXIT_ERROR
    options = BatchOptions(
        strict_ah=settings.safe.strict_ah,
        concern=args.concern,
        judge=getattr(args, "judge", False),
        verbose=args.verbose,
        session_text_bytes=settings.limits.session_text_bytes,
    )
    scorers = Scorers(settings, options)
    if args.suite:
        try:
            scorers.get(args.suite)
        except SuiteUnavailable as exc:
            errors.print(f"scorestream score: {exc}", markup=False)
            return EXIT_ERROR

    rows = _read_all(args.files, errors)
    if rows is None:
        return EXIT_ERROR

    batches: dict[str, list[BatchItem]] = {}
    rejected = 0
    filtered = 0
    show_progress = errors.is_terminal and len(rows) >= PROGRESS_MIN_ROWS
    with Progress(console=errors, transient=True, disable=not show_progress) as progress:
        task = progress.add_task("reading rows", total=len(rows))
        for row in rows:
            progress.advance(task)
            try:
                suite, item = recognise(row, args.suite, scorers)
            except RowError as exc:
                rejected += 1
                for problem in exc.problems:
                    errors.print(f"{row.source}: {problem}", highlight=False, markup=False)
                continue
            except SuiteUnavailable as exc:
                rejected += 1
                errors.print(f"{row.source}: suite: {exc}", highlight=False, markup=False)
                continue
            concern_id = getattr(item.payload, "concern_id", None)
            if args.concern and concern_id is not None and concern_id != args.concern:
                filtered += 1
                continue
            batches.setdefault(suite, []).append(item)

    pool = ScoringPool(settings, processes=os.cpu_count() or 1, start_method="fork")
    try:
        rejected += drop_past_deadline(batches, pool, errors)
    except RuntimeError as exc:
        errors.print(f"scorestream score: {exc}", markup=False)
        return EXIT_ERROR
    finally:
        pool.close()
    for message in scorers.unavailable.values():
        errors.print(f"scorestream score: {message}", markup=False)
    if rejected:
        noun = "row" if rejected == 1 else "rows"
        errors.print(f"scorestream score: {rejected} {noun} could not be scored", markup=False)
    if not batches:
        reason = f"no case with concern_id {args.concern!r}" if filtered else "nothing to score"
        errors.print(f"scorestream score: {reason}", markup=False)
        return EXIT_ERROR

    codes: list[int] = [EXIT_ERROR] if scorers.unavailable else []
    reports: dict[str, BatchReport] = {}
    turns = DeadlineTurns(settings, None, errors)
    try:
        for suite, items in batches.items():
            scorer = scorers.get(suite)
            if hasattr(scorer, "turn_scorer"):  # alignment: turns under the deadline
                turns.scorer = scorer
                scorer.turn_scorer = turns
            try:
                report = scorer.score(items)
            except Exception as exc:  # a scorer bug must not look like a verdict
                errors.print(f"scorestream score: {suite}: scoring failed: {exc!r}", markup=False)
                codes.append(EXIT_ERROR)
                continue
            reports[suite] = report
            codes.append(report.exit_code())
    finally:
        turns.close()
    if turns.rejected:
        noun = "turn" if turns.rejected == 1 else "turns"
        errors.print(
            f"scorestream score: {turns.rejected} {noun} could not be scored", markup=False
        )
        rejected += turns.rejected

    out = Console(width=None if sys.stdout.isatty() else 200)
    try:
        emit_reports(reports, args, settings.safe.report_dir, out, errors)
    except OSError as exc:
        errors.print(f"scorestream score: cannot write report: {exc}", markup=False)
        return EXIT_ERROR
    if rejected:  # the report covers the rest, but the run did not score every row
        codes.append(EXIT_ERROR)
    return worst_exit_code(codes)
